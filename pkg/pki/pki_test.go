package pki

import (
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"strings"
	"testing"
	"time"
)

// TestNewCA: a CA that signs only leaves, named after its making, valid from a little before now
// for its life, whose key is the certificate's, and whose PEM parses back to it.
func TestNewCA(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	p, err := NewCA(rand.Reader, "test-ca", now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	c := p.Cert
	if !c.IsCA || !c.MaxPathLenZero || c.KeyUsage&x509.KeyUsageCertSign == 0 || c.Subject.CommonName != "test-ca@1800000000" {
		t.Errorf("certificate %+v, want a CA named test-ca@1800000000 signing leaves only", c.Subject)
	}
	if !c.NotBefore.Equal(now.Add(-Backdate)) || !c.NotAfter.Equal(now.Add(time.Hour)) {
		t.Errorf("valid %v to %v", c.NotBefore, c.NotAfter)
	}
	if err := c.CheckSignatureFrom(c); err != nil {
		t.Errorf("not self-signed: %v", err)
	}
	key, err := x509.ParsePKCS8PrivateKey(pemBytes(t, p.KeyPEM, "PRIVATE KEY"))
	if err != nil {
		t.Fatal(err)
	}
	certKey := c.PublicKey.(*ecdsa.PublicKey)
	if !certKey.Equal(p.Key.Public()) || !certKey.Equal(key.(*ecdsa.PrivateKey).Public()) {
		t.Error("the key is not the certificate's")
	}
	other, err := NewCA(rand.Reader, "test-ca", now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if other.Cert.SerialNumber.Cmp(c.SerialNumber) == 0 || other.Cert.SerialNumber.Sign() <= 0 {
		t.Errorf("serial numbers %v and %v, want two positive, different ones", c.SerialNumber, other.Cert.SerialNumber)
	}
	certs, err := ParseCerts(EncodeBundle([]*x509.Certificate{c, other.Cert}))
	if err != nil || len(certs) != 2 || !certs[0].Equal(c) || !certs[1].Equal(other.Cert) {
		t.Errorf("the bundle parsed to %d certificates, %v; want both, in order", len(certs), err)
	}
}

// TestParseCertsRefuses: PEM without a certificate, or with any other block, is an error.
func TestParseCertsRefuses(t *testing.T) {
	p, err := NewCA(rand.Reader, "test-ca", time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{
		"nothing":       nil,
		"not PEM":       []byte("hello"),
		"a key":         p.KeyPEM,
		"a cert, a key": append(append([]byte(nil), p.CertPEM...), p.KeyPEM...),
		"a broken cert": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("junk")}),
	} {
		if certs, err := ParseCerts(data); err == nil {
			t.Errorf("%s: parsed %d certificates, want an error", name, len(certs))
		} else if name == "a key" && !strings.Contains(err.Error(), "PRIVATE KEY") {
			t.Errorf("%s: %v, want the block's type named", name, err)
		}
	}
}

func pemBytes(t *testing.T, data []byte, typ string) []byte {
	t.Helper()
	block, _ := pem.Decode(data)
	if block == nil || block.Type != typ {
		t.Fatalf("no %s block", typ)
	}
	return block.Bytes
}
