// Package pki makes and reads the small CAs the operator keeps for itself: the Sandbox API's
// (pkg/servingcert) and the egress gateway's terminating CA (pkg/controller/egressca). One way to
// make a key, a serial number and a self-signed CA, and to encode and parse PEM certificates.
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"time"
)

// Backdate is how far before its making a certificate's NotBefore lies, so that a client whose
// clock is a little behind the operator's accepts it.
const Backdate = 5 * time.Minute

// KeyPair is a certificate with its private key, parsed and in PEM.
type KeyPair struct {
	Cert    *x509.Certificate
	CertPEM []byte
	Key     crypto.Signer
	KeyPEM  []byte
}

// NewKey returns a P-256 key and its PKCS #8 PEM: quick to make, and accepted by every TLS client.
func NewKey(random io.Reader) (*ecdsa.PrivateKey, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), random)
	if err != nil {
		return nil, nil, fmt.Errorf("generating a key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// SerialNumber returns a random serial number of up to 127 bits, never 0.
func SerialNumber(random io.Reader) (*big.Int, error) {
	serial, err := rand.Int(random, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("generating a serial number: %w", err)
	}
	return serial.Add(serial, big.NewInt(1)), nil
}

// NewCA makes a self-signed P-256 CA named <name>@<now in Unix seconds>, valid from now
// (backdated) for life; it signs only leaves (path length zero).
func NewCA(random io.Reader, name string, now time.Time, life time.Duration) (*KeyPair, error) {
	key, keyPEM, err := NewKey(random)
	if err != nil {
		return nil, err
	}
	serial, err := SerialNumber(random)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: fmt.Sprintf("%s@%d", name, now.Unix())},
		NotBefore:             now.Add(-Backdate),
		NotAfter:              now.Add(life),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(random, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("signing the CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &KeyPair{Cert: cert, CertPEM: EncodeCert(cert), Key: key, KeyPEM: keyPEM}, nil
}

// EncodeCert is the PEM of a certificate.
func EncodeCert(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}

// EncodeBundle is the PEM of certs, in order.
func EncodeBundle(certs []*x509.Certificate) []byte {
	var out []byte
	for _, c := range certs {
		out = append(out, EncodeCert(c)...)
	}
	return out
}

// ParseCerts parses every CERTIFICATE block of PEM data; anything else, or none, is an error.
func ParseCerts(data []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("unexpected PEM block %q", block.Type)
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, err
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, errors.New("no certificate")
	}
	return certs, nil
}
