package servingcert

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2/ktesting"
)

// tlsServer serves "ok" over TLS with getCert; it is closed when the test ends.
func tlsServer(t *testing.T, getCert func(*tls.ClientHelloInfo) (*tls.Certificate, error)) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }))
	srv.TLS = &tls.Config{GetCertificate: getCert, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

// handshake opens a new TLS connection to srv that trusts bundle and names testNames[0], and
// returns the serial of the certificate it was shown.
func handshake(t *testing.T, srv *httptest.Server, bundle []byte) (string, error) {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(bundle) {
		t.Fatal("empty bundle")
	}
	conn, err := tls.Dial("tcp", srv.Listener.Addr().String(), &tls.Config{RootCAs: pool, ServerName: testNames[0], MinVersion: tls.VersionTLS12})
	if err != nil {
		return "", err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.String(), nil
}

// TestStoreReloadsWithoutRestart: a server whose GetCertificate is a Store presents the new
// certificate on the first handshake after Set, with no restart; a failed Set keeps the old one;
// a client that trusts another CA fails to verify.
func TestStoreReloadsWithoutRestart(t *testing.T) {
	store := NewStore()
	calls := 0
	remove := store.OnBundleChange(func() { calls++ })
	// Real handshakes check validity against the real clock.
	now := time.Now()
	a := mustPlan(t, nil, now).Data
	if err := store.Set(a[corev1.TLSCertKey], a[corev1.TLSPrivateKeyKey], a[BundleKey]); err != nil {
		t.Fatal(err)
	}
	srv := tlsServer(t, store.GetCertificate)
	first, err := handshake(t, srv, a[BundleKey])
	if err != nil {
		t.Fatal(err)
	}
	if first != certOf(t, a, corev1.TLSCertKey).SerialNumber.String() {
		t.Fatal("the first handshake does not show the first certificate")
	}

	// A renewal by the same CA: the same bundle, so no bundle listener call.
	withoutServing := map[string][]byte{SignerCertKey: a[SignerCertKey], SignerKeyKey: a[SignerKeyKey], BundleKey: a[BundleKey]}
	b := mustPlan(t, withoutServing, now).Data
	if err := store.Set(b[corev1.TLSCertKey], b[corev1.TLSPrivateKeyKey], b[BundleKey]); err != nil {
		t.Fatal(err)
	}
	second, err := handshake(t, srv, a[BundleKey])
	if err != nil {
		t.Fatal(err)
	}
	if second == first || second != certOf(t, b, corev1.TLSCertKey).SerialNumber.String() {
		t.Errorf("handshakes showed %s then %s; want the renewed certificate after Set", first, second)
	}
	if got, want := expiryMetric(t), float64(certOf(t, b, corev1.TLSCertKey).NotAfter.Unix()); got != want {
		t.Errorf("expiry metric %v, want the served certificate's NotAfter %v", got, want)
	}
	if calls != 1 {
		t.Errorf("bundle listener called %d times, want 1 (the first Set; the renewal kept the bundle)", calls)
	}

	if err := store.Set([]byte("not a certificate"), b[corev1.TLSPrivateKeyKey], nil); err == nil {
		t.Error("Set of garbage succeeded")
	}
	if third, err := handshake(t, srv, a[BundleKey]); err != nil || third != second {
		t.Errorf("after a failed Set: %s %v, want the previous certificate %s", third, err, second)
	}

	// Another CA's bundle does not verify this server.
	other := mustPlan(t, nil, now).Data
	if _, err := handshake(t, srv, other[BundleKey]); err == nil || !strings.Contains(err.Error(), "certificate signed by unknown authority") {
		t.Errorf("a client trusting another CA: %v, want an unknown authority error", err)
	}
	c := mustPlan(t, nil, now).Data // a new CA: the bundle changes
	if err := store.Set(c[corev1.TLSCertKey], c[corev1.TLSPrivateKeyKey], c[BundleKey]); err != nil {
		t.Fatal(err)
	}
	if calls != 2 {
		t.Errorf("bundle listener called %d times after a new bundle, want 2", calls)
	}
	remove()
	if err := store.Set(a[corev1.TLSCertKey], a[corev1.TLSPrivateKeyKey], a[BundleKey]); err != nil {
		t.Fatal(err)
	}
	if calls != 2 {
		t.Error("a removed listener was called")
	}
}

// expiryMetric is the value of airlock_sandbox_api_certificate_expiration_timestamp_seconds as
// /metrics would show it.
func expiryMetric(t *testing.T) float64 {
	t.Helper()
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "airlock_sandbox_api_certificate_expiration_timestamp_seconds" && len(f.GetMetric()) == 1 {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatal("no airlock_sandbox_api_certificate_expiration_timestamp_seconds metric")
	return 0
}

// writeFiles writes data's certificate, key and bundle to dir the way the kubelet updates a
// mounted Secret: new files, then renamed over the old ones.
func writeFiles(t *testing.T, dir string, data map[string][]byte) {
	t.Helper()
	for name, key := range map[string]string{"tls.crt": corev1.TLSCertKey, "tls.key": corev1.TLSPrivateKeyKey, "ca.crt": BundleKey} {
		tmp := filepath.Join(dir, "."+name+".tmp")
		if err := os.WriteFile(tmp, data[key], 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestFileSourceReloadsOnChange: files mode serves the files' certificate, and after the files
// are replaced the next handshake shows the new one (a stat per handshake, no polling); a
// certificate that does not match its key keeps the previous one; a new CA file is published.
func TestFileSourceReloadsOnChange(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	dir := t.TempDir()
	now := time.Now()
	a := mustPlan(t, nil, now).Data
	writeFiles(t, dir, a)
	src, err := NewFileSource(logger, filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), filepath.Join(dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	var changes atomic.Int32 // called from the server's handshakes
	src.OnBundleChange(func() { changes.Add(1) })
	srv := tlsServer(t, src.GetCertificate)
	first, err := handshake(t, srv, a[BundleKey])
	if err != nil || first != certOf(t, a, corev1.TLSCertKey).SerialNumber.String() {
		t.Fatalf("first handshake: %s %v", first, err)
	}

	b := mustPlan(t, nil, now).Data // another CA and certificate, as after a CA rotation
	writeFiles(t, dir, b)
	second, err := handshake(t, srv, b[BundleKey])
	if err != nil || second != certOf(t, b, corev1.TLSCertKey).SerialNumber.String() {
		t.Fatalf("after the files changed: %s %v, want the new certificate", second, err)
	}
	if got, want := expiryMetric(t), float64(certOf(t, b, corev1.TLSCertKey).NotAfter.Unix()); got != want {
		t.Errorf("expiry metric %v after the files changed, want the new certificate's NotAfter %v", got, want)
	}
	if changes.Load() != 1 || string(src.Bundle()) != string(b[BundleKey]) {
		t.Errorf("bundle changes %d, bundle is the new file's: %v", changes.Load(), string(src.Bundle()) == string(b[BundleKey]))
	}

	// Half an update: a new certificate whose key is not there yet.
	c := mustPlan(t, nil, now).Data
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), c[corev1.TLSCertKey], 0o600); err != nil {
		t.Fatal(err)
	}
	if third, err := handshake(t, srv, b[BundleKey]); err != nil || third != second {
		t.Errorf("with a certificate that does not match the key: %s %v, want the previous certificate", third, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.key"), c[corev1.TLSPrivateKeyKey], 0o600); err != nil {
		t.Fatal(err)
	}
	if fourth, err := handshake(t, srv, c[BundleKey]); err != nil || fourth != certOf(t, c, corev1.TLSCertKey).SerialNumber.String() {
		t.Errorf("once the key followed: %s %v, want the new certificate", fourth, err)
	}

	for name, files := range map[string][3]string{
		"missing key":      {filepath.Join(dir, "tls.crt"), filepath.Join(dir, "nope"), ""},
		"bundle not a PEM": {filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), filepath.Join(dir, "tls.key")},
	} {
		if _, err := NewFileSource(logger, files[0], files[1], files[2]); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
