package servingcert

import (
	"bytes"
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
	// SecretName is the Secret, in the operator's namespace, that holds the CA and the serving
	// certificate.
	SecretName = "airlock-sandbox-api-tls"
	// BundleKey is the Secret's field (and the CA bundle ConfigMap's key) with every CA a client
	// must trust: the one that signs now, and the previous one until it expires.
	BundleKey = "ca.crt"
	// SignerCertKey and SignerKeyKey are the CA that signs serving certificates now.
	SignerCertKey = "signer.crt"
	SignerKeyKey  = "signer.key"

	// DefaultCALifetime is how long a CA is valid for.
	DefaultCALifetime = 2 * 365 * 24 * time.Hour
	// DefaultServingLifetime is how long a serving certificate is valid for.
	DefaultServingLifetime = 90 * 24 * time.Hour
	// DefaultCAPropagation is how long a new CA is in the published bundle before it signs the
	// serving certificate, so that every runtime trusts it before the API presents it: kubelet
	// refreshes a mounted ConfigMap within a minute or two, and a runtime that copies the bundle
	// somewhere has a day.
	DefaultCAPropagation = 24 * time.Hour
)

// renewAt is when a certificate made at issued for life is renewed: at two thirds of its life.
func renewAt(c *x509.Certificate) time.Time {
	return issuedAt(c).Add(lifetime(c) * 2 / 3)
}

// Policy is what the Secret's certificates must be.
type Policy struct {
	// Names are the serving certificate's SANs: DNS names and IP addresses.
	Names []string
	// CALifetime, ServingLifetime and CAPropagation: see the Default* constants.
	CALifetime, ServingLifetime, CAPropagation time.Duration
	// SecretName is the Secret that holds them (default SecretName), CAName the name of the CAs
	// (default the Sandbox API's) and Component the Secret's app.kubernetes.io/component label
	// (default "operator").
	SecretName, CAName, Component string
}

// defaultCAName names the Sandbox API's CAs.
const defaultCAName = "airlock-sandbox-api-ca"

func (p Policy) caName() string {
	if p.CAName == "" {
		return defaultCAName
	}
	return p.CAName
}

func (p Policy) component() string {
	if p.Component == "" {
		return "operator"
	}
	return p.Component
}

// DefaultPolicy is the policy with the default lifetimes for names.
func DefaultPolicy(names []string) Policy {
	return Policy{Names: names, CALifetime: DefaultCALifetime, ServingLifetime: DefaultServingLifetime, CAPropagation: DefaultCAPropagation}
}

// Plan is what plan decided for a Secret's data.
type Plan struct {
	// Data is what the Secret's data must be (equal to the input when nothing changes).
	Data map[string][]byte
	// Changed says whether Data differs from the input.
	Changed bool
	// Reasons say what changed, for the log.
	Reasons []string
	// Next is when the Secret must be looked at again (a renewal, a CA leaving the bundle).
	Next time.Time
}

// plan decides what the Secret's data must be at now: it keeps what is valid and makes anew what
// is missing, broken or due. It is a pure function of its inputs (random only supplies keys).
//
//   - The signing CA is renewed at two thirds of its life. The new CA joins the bundle at once; the
//     previous one stays in it until it expires.
//   - The serving certificate is renewed at two thirds of its life, when its SANs lack one of
//     p.Names (more names are kept until the next renewal: two replicas whose --tls-sans differ
//     during a rolling update must not re-issue it in turn without end), when no CA of the bundle verifies it, and once the signing CA has been in the
//     bundle for p.CAPropagation and did not sign it. A renewal that falls due while a new CA is
//     still propagating waits until it has (the certificate it replaces is valid for a third of
//     its life still), so that no runtime is shown a certificate it does not trust yet.
func plan(data map[string][]byte, p Policy, now time.Time, random io.Reader) (*Plan, error) {
	out := &Plan{Data: map[string][]byte{}}
	for k, v := range data {
		out.Data[k] = v
	}

	// The signing CA.
	signer, err := parseKeyPair(data[SignerCertKey], data[SignerKeyKey])
	switch {
	case err != nil:
		out.Reasons = append(out.Reasons, fmt.Sprintf("no usable CA (%v): made a new one", err))
		signer = nil
	case !signer.cert.IsCA:
		out.Reasons = append(out.Reasons, "the CA is not a CA: made a new one")
		signer = nil
	case !now.Before(signer.cert.NotAfter):
		out.Reasons = append(out.Reasons, "the CA expired: made a new one")
		signer = nil
	case !now.Before(renewAt(signer.cert)):
		out.Reasons = append(out.Reasons, "the CA is at two thirds of its life: made the next one")
		signer = nil
	}
	if signer == nil {
		if signer, err = newCA(random, p.caName(), now, p.CALifetime); err != nil {
			return nil, err
		}
	}

	// The bundle: the signing CA first, then every other CA that has not expired, newest first.
	trusted := []*x509.Certificate{signer.cert}
	if old, err := pki.ParseCerts(data[BundleKey]); err == nil {
		for _, c := range old {
			if c.IsCA && now.Before(c.NotAfter) && !c.Equal(signer.cert) {
				trusted = append(trusted, c)
			}
		}
	}
	slices.SortStableFunc(trusted[1:], func(a, b *x509.Certificate) int { return b.NotBefore.Compare(a.NotBefore) })

	// The serving certificate.
	propagated := issuedAt(signer.cert).Add(p.CAPropagation)
	serving, err := parseKeyPair(data[corev1.TLSCertKey], data[corev1.TLSPrivateKeyKey])
	reissue := ""
	switch {
	case err != nil:
		reissue = fmt.Sprintf("no usable serving certificate (%v)", err)
	case !coversNames(serving.cert, p.Names):
		reissue = fmt.Sprintf("the serving certificate is for %v, want %v", certNames(serving.cert), p.Names)
	case !slices.ContainsFunc(trusted, func(ca *x509.Certificate) bool { return signedBy(serving.cert, ca, now) }):
		reissue = "no CA of the bundle verifies the serving certificate"
	case signedBy(serving.cert, signer.cert, now):
		if !now.Before(renewAt(serving.cert)) {
			reissue = "the serving certificate is at two thirds of its life"
		}
	case !now.Before(propagated):
		reissue = "the serving certificate is signed by the previous CA, and the new one has been published long enough"
	}
	if reissue != "" {
		if serving, err = newServing(random, signer, p.Names, now, p.ServingLifetime); err != nil {
			return nil, err
		}
		out.Reasons = append(out.Reasons, reissue+": issued a new one")
	}

	// When to look again.
	out.Next = renewAt(signer.cert)
	if signedBy(serving.cert, signer.cert, now) {
		out.Next = earliest(out.Next, renewAt(serving.cert))
	} else {
		// Signed by the previous CA: re-signed once the new one has propagated, or at its renewal
		// (which then waits for the propagation).
		out.Next = earliest(out.Next, propagated)
	}
	for _, c := range trusted[1:] {
		out.Next = earliest(out.Next, c.NotAfter)
	}

	out.Data[SignerCertKey] = signer.certPEM
	out.Data[SignerKeyKey] = signer.keyPEM
	out.Data[BundleKey] = pki.EncodeBundle(trusted)
	out.Data[corev1.TLSCertKey] = serving.certPEM
	out.Data[corev1.TLSPrivateKeyKey] = serving.keyPEM
	out.Changed = !maps.EqualFunc(data, out.Data, bytes.Equal)
	if out.Changed && len(out.Reasons) == 0 {
		out.Reasons = append(out.Reasons, "the CA bundle dropped an expired CA")
	}
	return out, nil
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
