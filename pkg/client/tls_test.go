package client

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

const apiName = "airlock-sandbox-api.airlock-system.svc"

// testCA is a CA that signs serving certificates for the tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test-ca"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// serve starts a TLS server for apiName and 127.0.0.1 with a certificate ca signs, answering 204.
func (ca *testCA) serve(t *testing.T) *httptest.Server {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: apiName}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), DNSNames: []string{apiName}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

func writeCAFile(t *testing.T, path string, bundles ...[]byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(strings.Join(func() []string {
		var s []string
		for _, b := range bundles {
			s = append(s, string(b))
		}
		return s
	}(), "")), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil { // as the kubelet swaps a ConfigMap's files
		t.Fatal(err)
	}
}

func renew(c *Client) error {
	return c.Renew(context.Background(), RenewRequest{Namespace: "ns", Runtime: "rt", Session: "s", Handle: "codegen/default"})
}

var saToken = func() (string, error) { return "sa-token", nil }

// TestTLSVerifiesTheServer: with the CA bundle the client reaches the API over TLS, by URL host
// or by a ServerName; a client that trusts another CA, or names another host, fails verification
// and sends nothing.
func TestTLSVerifiesTheServer(t *testing.T) {
	ca, other := newTestCA(t), newTestCA(t)
	srv := ca.serve(t)
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	writeCAFile(t, caFile, ca.pem)

	tests := map[string]struct {
		opts    TLSOptions
		wantErr string // "" for success
	}{
		"CA file, URL host":        {opts: TLSOptions{CAFile: caFile}},
		"CA data, server name":     {opts: TLSOptions{CAData: ca.pem, ServerName: apiName}},
		"another CA":               {opts: TLSOptions{CAData: other.pem}, wantErr: "unknown authority"},
		"another server name":      {opts: TLSOptions{CAData: ca.pem, ServerName: "airlock-sandbox-api.evil.svc"}, wantErr: "not airlock-sandbox-api.evil.svc"},
		"insecure skip verify":     {opts: TLSOptions{CAData: other.pem, InsecureSkipVerify: true}},
		"insecure, no bundle":      {opts: TLSOptions{CAFile: filepath.Join(t.TempDir(), "nope"), InsecureSkipVerify: true}},
		"CA file that is not PEM":  {opts: TLSOptions{CAFile: os.Args[0]}, wantErr: "holds no PEM certificate"},
		"CA file that is not here": {opts: TLSOptions{CAFile: filepath.Join(t.TempDir(), "nope")}, wantErr: "airlock-ca"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			hc, err := NewHTTPClient(tc.opts)
			if err == nil {
				err = renew(New(srv.URL, saToken, hc))
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("error %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
			}
			var apiErr *APIError
			if errors.As(err, &apiErr) {
				t.Errorf("a verification failure reached the server: %v", apiErr)
			}
		})
	}
	if _, err := NewHTTPClient(TLSOptions{CAData: []byte("garbage")}); err == nil {
		t.Error("CAData without a certificate accepted")
	}
}

// TestTLSDefaultsToTheMountedBundle: New without an http.Client verifies with DefaultCAFile and
// says so when it is missing, rather than trusting the system's roots or nothing.
func TestTLSDefaultsToTheMountedBundle(t *testing.T) {
	if defaultCAFile != DefaultCAFile {
		t.Fatalf("the default CA file is %s, want %s", defaultCAFile, DefaultCAFile)
	}
	ca := newTestCA(t)
	srv := ca.serve(t)
	defaultCAFile = filepath.Join(t.TempDir(), "ca.crt") // where the ConfigMap would be mounted
	t.Cleanup(func() { defaultCAFile = DefaultCAFile })
	err := renew(New(srv.URL, saToken, nil))
	if err == nil || !strings.Contains(err.Error(), defaultCAFile) {
		t.Errorf("without the bundle mounted: %v, want an error naming %s", err, defaultCAFile)
	}
	writeCAFile(t, defaultCAFile, ca.pem)
	if err := renew(New(srv.URL, saToken, nil)); err != nil {
		t.Errorf("with the bundle mounted: %v", err)
	}
}

// TestTLSFollowsCARotation: one client, whose CA file is updated when the CA rotates (the old and
// the new CA in the bundle), verifies a server with the new CA's certificate without being
// rebuilt.
func TestTLSFollowsCARotation(t *testing.T) {
	oldCA, newCA := newTestCA(t), newTestCA(t)
	oldSrv, newSrv := oldCA.serve(t), newCA.serve(t)
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	writeCAFile(t, caFile, oldCA.pem)
	hc, err := NewHTTPClient(TLSOptions{CAFile: caFile, ServerName: apiName})
	if err != nil {
		t.Fatal(err)
	}
	if err := renew(New(oldSrv.URL, saToken, hc)); err != nil {
		t.Fatalf("old CA: %v", err)
	}
	if err := renew(New(newSrv.URL, saToken, hc)); err == nil {
		t.Fatal("the new CA verified before the bundle had it")
	}
	writeCAFile(t, caFile, newCA.pem, oldCA.pem)
	if err := renew(New(newSrv.URL, saToken, hc)); err != nil {
		t.Errorf("after the bundle gained the new CA: %v", err)
	}
	if err := renew(New(oldSrv.URL, saToken, hc)); err != nil {
		t.Errorf("the old CA during the overlap: %v", err)
	}
}

// TestPlainHTTPRefused: an "http://" URL is refused before anything is sent (the token would
// cross the network in clear), unless PlainHTTP is given.
func TestPlainHTTPRefused(t *testing.T) {
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	tokenRead := false
	err := renew(New(srv.URL, func() (string, error) { tokenRead = true; return "sa-token", nil }, nil))
	if err == nil || !strings.Contains(err.Error(), "plain HTTP") || requests.Load() != 0 || tokenRead {
		t.Errorf("http:// without PlainHTTP: %v, %d requests, token read %v; want a refusal before anything", err, requests.Load(), tokenRead)
	}
	if err := renew(New(strings.ToUpper(srv.URL[:4])+srv.URL[4:], saToken, nil)); err == nil || requests.Load() != 0 {
		t.Errorf("HTTP:// (upper case) without PlainHTTP: %v, %d requests", err, requests.Load())
	}
	if err := renew(New(srv.URL, saToken, nil, PlainHTTP())); err != nil || requests.Load() != 1 {
		t.Errorf("with PlainHTTP: %v, %d requests; want one, served", err, requests.Load())
	}
}

// TestPlainHTTPToTLSPort: a client that speaks plain HTTP (by choice) to the TLS port gets an
// error, never a hang or a success: the server's 400 ("... HTTP request to an HTTPS server"), or,
// when the server's close overtakes the request's body, a connection error.
func TestPlainHTTPToTLSPort(t *testing.T) {
	srv := newTestCA(t).serve(t)
	err := renew(New(strings.Replace(srv.URL, "https://", "http://", 1), saToken, nil, PlainHTTP()))
	var apiErr *APIError
	switch {
	case err == nil:
		t.Error("plain HTTP to a TLS port succeeded")
	case errors.As(err, &apiErr) && (apiErr.Status != http.StatusBadRequest || !strings.Contains(apiErr.Message, "HTTPS")):
		t.Errorf("plain HTTP to a TLS port: %v, want a 400 that says HTTPS", err)
	}
}
