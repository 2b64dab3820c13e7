// Package servingcert gives the Sandbox API its serving certificate without any other component:
// the operator's replicas keep a CA and a serving certificate signed by it in one Secret of the
// operator's namespace, renew both before they expire, and serve whatever the Secret holds now
// (a Store swapped atomically, read on every TLS handshake). It also serves a certificate from
// files that something else renews (cert-manager), re-read when they change. The CA bundle that
// runtimes must trust is published by pkg/controller/cabundle. docs/decisions.md, "TLS".
package servingcert

import (
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"time"

	"github.com/airlock-dev/airlock/pkg/pki"
)

// backdate is how far before its issuance a certificate's NotBefore lies (pki.Backdate).
const backdate = pki.Backdate

// keyPair is a certificate with its private key.
type keyPair struct {
	cert    *x509.Certificate
	certPEM []byte
	key     crypto.Signer
	keyPEM  []byte
}

// issuedAt is when a certificate was made (its NotBefore is backdated).
func issuedAt(c *x509.Certificate) time.Time { return c.NotBefore.Add(backdate) }

// lifetime is how long a certificate was made to be valid for.
func lifetime(c *x509.Certificate) time.Duration { return c.NotAfter.Sub(issuedAt(c)) }

// newCA makes a self-signed CA valid from now for life.
func newCA(random io.Reader, name string, now time.Time, life time.Duration) (*keyPair, error) {
	p, err := pki.NewCA(random, name, now, life)
	if err != nil {
		return nil, err
	}
	return &keyPair{cert: p.Cert, certPEM: p.CertPEM, key: p.Key, keyPEM: p.KeyPEM}, nil
}

// newServing makes a serving certificate for names (DNS names and IP addresses), signed by ca,
// valid from now for life but never beyond ca.
func newServing(random io.Reader, ca *keyPair, names []string, now time.Time, life time.Duration) (*keyPair, error) {
	if len(names) == 0 {
		return nil, errors.New("a serving certificate needs at least one DNS name or IP address")
	}
	key, keyPEM, err := pki.NewKey(random)
	if err != nil {
		return nil, err
	}
	serial, err := pki.SerialNumber(random)
	if err != nil {
		return nil, err
	}
	notAfter := now.Add(life)
	if ca.cert.NotAfter.Before(notAfter) {
		notAfter = ca.cert.NotAfter
	}
	dnsNames, ips := splitNames(names)
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: names[0]},
		NotBefore:             now.Add(-backdate),
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		DNSNames:              dnsNames,
		IPAddresses:           ips,
	}
	der, err := x509.CreateCertificate(random, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		return nil, fmt.Errorf("signing the serving certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &keyPair{cert: cert, certPEM: pki.EncodeCert(cert), key: key, keyPEM: keyPEM}, nil
}

// splitNames sorts names into DNS names and IP addresses.
func splitNames(names []string) ([]string, []net.IP) {
	var dnsNames []string
	var ips []net.IP
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			ips = append(ips, ip)
		} else {
			dnsNames = append(dnsNames, n)
		}
	}
	return dnsNames, ips
}

// certNames lists a certificate's SANs as splitNames takes them, sorted.
func certNames(c *x509.Certificate) []string {
	names := slices.Clone(c.DNSNames)
	for _, ip := range c.IPAddresses {
		names = append(names, ip.String())
	}
	slices.Sort(names)
	return names
}

// normalNames returns names sorted, without duplicates, IP addresses in their canonical form.
func normalNames(names []string) []string {
	out := make([]string, 0, len(names))
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			n = ip.String()
		}
		out = append(out, n)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// sameNames says whether a certificate's SANs are exactly names.
func sameNames(c *x509.Certificate, names []string) bool {
	return slices.Equal(certNames(c), normalNames(names))
}

// coversNames says whether a certificate is valid for every one of names (it may have more).
func coversNames(c *x509.Certificate, names []string) bool {
	have := certNames(c)
	for _, n := range normalNames(names) {
		if !slices.Contains(have, n) {
			return false
		}
	}
	return true
}

// parseKeyPair parses a PEM certificate (the first block is the leaf) and its PEM private key,
// and checks that they match.
func parseKeyPair(certPEM, keyPEM []byte) (*keyPair, error) {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	signer, ok := pair.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, errors.New("the private key cannot sign")
	}
	return &keyPair{cert: pair.Leaf, certPEM: certPEM, key: signer, keyPEM: keyPEM}, nil
}

// signedBy says whether c verifies against ca (signature and validity at now).
func signedBy(c, ca *x509.Certificate, now time.Time) bool {
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	_, err := c.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	return err == nil
}
