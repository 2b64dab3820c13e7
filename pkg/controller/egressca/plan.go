package egressca

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/airlock-dev/airlock/pkg/pki"
)

const (
	// SecretName is the Secret, in the operator's namespace, that holds the gateway's terminating
	// CA. The gateway mounts it (no Secret permission of its own); its key leaves it for no other
	// place.
	SecretName = "airlock-egress-ca"
	// BundleKey is the Secret's field with every terminating CA a sandbox must trust: the one that
	// signs now, the next one while it propagates, and earlier ones until they expire. It is also
	// the bundle ConfigMap's key.
	BundleKey = "ca.crt"
	// NextCertKey and NextKeyKey are the CA that signs from the end of its propagation on, present
	// while a rotation propagates.
	NextCertKey = "next.crt"
	NextKeyKey  = "next.key"

	// DefaultLifetime is how long a terminating CA is valid for.
	DefaultLifetime = 2 * 365 * 24 * time.Hour
	// DefaultPropagation is how long the next CA is in the published bundle before the gateway
	// signs with it: a sandbox whose tools read the bundle once, at their start, keeps working for
	// that long after a rotation begins (the kubelet refreshes the mounted ConfigMap within
	// minutes).
	DefaultPropagation = 90 * 24 * time.Hour

	// backdate is how far before its making a CA's NotBefore lies (clock skew).
	backdate = pki.Backdate
)

// Policy is how long CAs live and propagate.
type Policy struct {
	Lifetime, Propagation time.Duration
}

// DefaultPolicy is DefaultLifetime and DefaultPropagation.
func DefaultPolicy() Policy {
	return Policy{Lifetime: DefaultLifetime, Propagation: DefaultPropagation}
}

// Validate says whether the next CA can propagate before the current one expires.
func (p Policy) Validate() error {
	if p.Lifetime <= 0 || p.Propagation < 0 || p.Propagation >= p.Lifetime/3 {
		return fmt.Errorf("a CA lifetime of %v with a propagation of %v: the propagation must be shorter than a third of the lifetime", p.Lifetime, p.Propagation)
	}
	return nil
}

// Plan is what plan decided for the Secret's data.
type Plan struct {
	// Data is what the Secret's data must be (equal to the input when nothing changes).
	Data map[string][]byte
	// Changed says whether Data differs from the input.
	Changed bool
	// Reasons say what changed, for the log.
	Reasons []string
	// Next is when the Secret must be looked at again.
	Next time.Time
}

// ca is a CA certificate with its key, parsed and in PEM.
type ca struct {
	cert            *x509.Certificate
	certPEM, keyPEM []byte
}

func issuedAt(c *x509.Certificate) time.Time { return c.NotBefore.Add(backdate) }

// renewAt is when the next CA is made: at two thirds of the current one's life.
func renewAt(c *x509.Certificate) time.Time {
	return issuedAt(c).Add(c.NotAfter.Sub(issuedAt(c)) * 2 / 3)
}

// plan decides what the Secret's data must be at now. It is a pure function of its inputs (random
// only supplies keys and serial numbers).
//
//   - tls.crt/tls.key, the CA the gateway signs with, is made when missing, broken, not a CA or
//     expired (at once: nothing to overlap with).
//   - At two thirds of its life the next CA is made (next.crt/next.key) and joins the bundle; once
//     it has been there for p.Propagation it becomes tls.crt/tls.key, and the previous one stays
//     in the bundle until it expires. A next CA that is broken is made again.
//   - ca.crt is the signing CA, the next one, and every other CA of the old bundle not expired.
func plan(data map[string][]byte, p Policy, now time.Time, random io.Reader) (*Plan, error) {
	out := &Plan{Data: maps.Clone(data)}
	if out.Data == nil {
		out.Data = map[string][]byte{}
	}
	signer, reason := usableCA(data[corev1.TLSCertKey], data[corev1.TLSPrivateKeyKey], now)
	next, nextReason := usableCA(data[NextCertKey], data[NextKeyKey], now)
	if next == nil && len(data[NextCertKey])+len(data[NextKeyKey]) > 0 {
		out.Reasons = append(out.Reasons, "dropped the next CA ("+nextReason+")")
	}
	var err error
	switch {
	case signer == nil && next != nil:
		out.Reasons = append(out.Reasons, "the signing CA is unusable ("+reason+"): the next one signs now")
		signer, next = next, nil
	case signer == nil:
		out.Reasons = append(out.Reasons, "no usable CA ("+reason+"): made one")
		if signer, err = newCA(random, now, p.Lifetime); err != nil {
			return nil, err
		}
	case next != nil && !now.Before(issuedAt(next.cert).Add(p.Propagation)):
		out.Reasons = append(out.Reasons, "the next CA has propagated: it signs now")
		signer, next = next, nil
	}
	if next == nil && !now.Before(renewAt(signer.cert)) {
		out.Reasons = append(out.Reasons, "the signing CA is at two thirds of its life: made the next one")
		if next, err = newCA(random, now, p.Lifetime); err != nil {
			return nil, err
		}
	}

	trusted := []*x509.Certificate{signer.cert}
	if next != nil {
		trusted = append(trusted, next.cert)
	}
	var older []*x509.Certificate
	if old, err := pki.ParseCerts(data[BundleKey]); err == nil {
		for _, c := range old {
			if c.IsCA && now.Before(c.NotAfter) && !slices.ContainsFunc(trusted, c.Equal) && !slices.ContainsFunc(older, c.Equal) {
				older = append(older, c)
			}
		}
	}
	slices.SortStableFunc(older, func(a, b *x509.Certificate) int { return b.NotBefore.Compare(a.NotBefore) })
	trusted = append(trusted, older...)

	out.Next = renewAt(signer.cert)
	if next != nil {
		out.Next = issuedAt(next.cert).Add(p.Propagation)
	}
	for _, c := range older {
		if c.NotAfter.Before(out.Next) {
			out.Next = c.NotAfter
		}
	}

	out.Data[corev1.TLSCertKey], out.Data[corev1.TLSPrivateKeyKey] = signer.certPEM, signer.keyPEM
	delete(out.Data, NextCertKey)
	delete(out.Data, NextKeyKey)
	if next != nil {
		out.Data[NextCertKey], out.Data[NextKeyKey] = next.certPEM, next.keyPEM
	}
	out.Data[BundleKey] = pki.EncodeBundle(trusted)
	out.Changed = !maps.EqualFunc(data, out.Data, bytes.Equal)
	if out.Changed && len(out.Reasons) == 0 {
		out.Reasons = append(out.Reasons, "the bundle was brought up to date (an expired CA dropped, or a CA missing from it)")
	}
	return out, nil
}

// usableCA parses a CA and its key; nil and why when they are missing, broken, not a CA, or
// expired at now.
func usableCA(certPEM, keyPEM []byte, now time.Time) (*ca, string) {
	if len(certPEM) == 0 && len(keyPEM) == 0 {
		return nil, "none"
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, err.Error()
	}
	c := pair.Leaf
	switch {
	case !c.IsCA || c.KeyUsage&x509.KeyUsageCertSign == 0:
		return nil, "not a CA"
	case !now.Before(c.NotAfter):
		return nil, "expired"
	}
	// One not valid yet is kept: it is a clock behind the one that made it (a new leader's), and
	// replacing it would take every sandbox's trust away.
	return &ca{cert: c, certPEM: certPEM, keyPEM: keyPEM}, ""
}

// newCA makes a self-signed P-256 CA valid from now for life; it signs only leaves (path length
// zero).
func newCA(random io.Reader, now time.Time, life time.Duration) (*ca, error) {
	p, err := pki.NewCA(random, "airlock-egress-ca", now, life)
	if err != nil {
		return nil, err
	}
	return &ca{cert: p.Cert, certPEM: p.CertPEM, keyPEM: p.KeyPEM}, nil
}
