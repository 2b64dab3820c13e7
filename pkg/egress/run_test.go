package egress

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"
)

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestRun: the health port answers /healthz, /readyz follows the claim lookup's sync, /metrics
// (on its own port) counts the gateway's decisions with bounded labels, and Run returns once its
// context ends.
func TestRun(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	claims, err := NewStaticClaims(StaticClaim{Namespace: "team-a", Claim: "agent-a", Password: passwordA,
		Sources: []netip.Addr{netip.MustParseAddr("127.0.0.1")}, Policy: testPolicy})
	if err != nil {
		t.Fatal(err)
	}
	addrs := make(chan []net.Addr, 1)
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, ServeConfig{Gateway: Config{Claims: claims, Resolver: &testResolver{}},
			ProxyAddress: "127.0.0.1:0", HealthAddress: "127.0.0.1:0", MetricsAddress: "127.0.0.1:0"},
			func(a []net.Addr) { addrs <- a })
	}()
	a := <-addrs
	proxy, health, metrics := a[0].String(), "http://"+a[1].String(), "http://"+a[2].String()

	if code, _ := httpGet(t, health+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz %d", code)
	}
	if code, body := httpGet(t, health+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "not synced") {
		t.Errorf("/readyz before sync: %d %q", code, body)
	}
	claims.SetSynced()
	if code, _ := httpGet(t, health+"/readyz"); code != http.StatusOK {
		t.Errorf("/readyz after sync: %d", code)
	}
	if code, _ := httpGet(t, health+"/metrics"); code != http.StatusNotFound {
		t.Errorf("/metrics on the health port: %d, want 404", code)
	}

	c, err := net.Dial("tcp", proxy)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(c, connectReq("evil.example:443"))
	if res := readResult(newReader(c), "CONNECT"); res.reason != ReasonNotAllowed {
		t.Errorf("through Run's proxy: %d %q", res.status, res.reason)
	}
	c.Close()
	_, body := httpGet(t, metrics+"/metrics")
	if want := `airlock_egress_requests_total{decision="denied",kind="connect",reason="host_not_allowed"}`; !strings.Contains(body, want) {
		t.Errorf("/metrics lacks %s", want)
	}
	if want := "\nairlock_egress_credential_echoes_total "; !strings.Contains(body, want) {
		t.Errorf("/metrics lacks %s", want)
	}
	// A namespace and a runtime may label a series (airlock_egress_runtime_bytes_total: as many
	// as runtimes); a claim or a host never does.
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, "airlock_egress") && (strings.Contains(line, "evil") || strings.Contains(line, "agent-a")) {
			t.Errorf("a metric names a host or claim: %s", line)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}

func TestLoadClaimsFile(t *testing.T) {
	dir := t.TempDir()
	write := func(content string) string {
		p := filepath.Join(dir, "claims.json")
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := `[{"namespace":"team-a","claim":"c","runtime":"r","password":"` + passwordA + `","sources":["10.0.0.5"],
		"policy":{"rules":[{"host":"proxy.golang.org","ports":[443]}]}}]`
	s, err := LoadClaimsFile(write(good))
	if err != nil {
		t.Fatal(err)
	}
	if !s.HasSynced() {
		t.Error("a loaded file is not synced")
	}
	for name, content := range map[string]string{
		"unknown field":  strings.Replace(good, `"ports"`, `"port":443,"ports"`, 1),
		"invalid rule":   strings.Replace(good, "proxy.golang.org", "*", 1),
		"no sources":     strings.Replace(good, `"sources":["10.0.0.5"],`, "", 1),
		"bad address":    strings.Replace(good, "10.0.0.5", "10.0.0", 1),
		"not JSON":       "rules: []",
		"short password": strings.Replace(good, passwordA, "short", 1),
	} {
		if _, err := LoadClaimsFile(write(content)); err == nil {
			t.Errorf("%s: loaded, want an error", name)
		}
	}
}

// TestRunBusyAddress: an address that cannot be bound fails Run with the flag that named it, and
// the addresses bound before it are released.
func TestRunBusyAddress(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	busy := listen(t)
	claims, _ := NewStaticClaims()
	err := Run(ctx, ServeConfig{Gateway: Config{Claims: claims}, ProxyAddress: "127.0.0.1:0",
		HealthAddress: busy.Addr().String(), MetricsAddress: DisabledAddress})
	if err == nil || !strings.Contains(err.Error(), "--health-probe-bind-address="+busy.Addr().String()) {
		t.Errorf("Run: %v, want an error naming --health-probe-bind-address", err)
	}
}

// writeCA writes a test CA's certificate and key as PEM files.
func writeCA(t *testing.T, dir string, ca tls.Certificate) (string, string) {
	t.Helper()
	keyDER, err := x509.MarshalPKCS8PrivateKey(ca.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Certificate[0]}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// TestLoadTerminator: the CA from PEM files, credentials from a directory laid out as the
// kubelet mounts a Secret (keys are links into ..data), trailing newlines trimmed, read when
// used (an update of the Secret is the next request's), and only by plain file name.
func TestLoadTerminator(t *testing.T) {
	dir := t.TempDir()
	ca, _ := newTestCA(t, "gateway CA")
	certFile, keyFile := writeCA(t, dir, ca)
	creds := filepath.Join(dir, "creds")
	if err := os.MkdirAll(filepath.Join(creds, "..2026_01_01"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(creds, "..2026_01_01", "github"), []byte("Bearer ghp-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("..2026_01_01", filepath.Join(creds, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join("..data", "github"), filepath.Join(creds, "github")); err != nil {
		t.Fatal(err)
	}
	tr, err := LoadTerminator(certFile, keyFile, "", creds)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := tr.Secrets("github"); !ok || string(v) != "Bearer ghp-secret" {
		t.Errorf("github: %q, %v", v, ok)
	}
	for _, name := range []string{"..data", "..2026_01_01", "nothing", "", "../creds/github", "..data/github", "/etc/hostname", "empty"} {
		if name == "empty" {
			if err := os.WriteFile(filepath.Join(creds, "empty"), []byte("\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if _, ok := tr.Secrets(name); ok {
			t.Errorf("%q is a credential", name)
		}
	}
	// The kubelet updates a mounted Secret by swapping the ..data link: the next read has it.
	if err := os.MkdirAll(filepath.Join(creds, "..2026_02_01"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(creds, "..2026_02_01", "github"), []byte("Bearer ghp-rotated"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("..2026_02_01", filepath.Join(creds, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(creds, "..data_tmp"), filepath.Join(creds, "..data")); err != nil {
		t.Fatal(err)
	}
	if v, ok := tr.Secrets("github"); !ok || string(v) != "Bearer ghp-rotated" {
		t.Errorf("github after the Secret's update: %q, %v", v, ok)
	}
	if _, err := tr.certificate("cred.example", time.Now()); err != nil {
		t.Errorf("minting: %v", err)
	}
	// A leaf is not a CA.
	leaf, err := tr.certificate("leaf.example", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	leafDir := t.TempDir()
	lc, lk := writeCA(t, leafDir, tls.Certificate{Certificate: leaf.Certificate[:1], PrivateKey: leaf.PrivateKey})
	if _, err := LoadTerminator(lc, lk, "", ""); err == nil {
		t.Error("a leaf certificate was taken as the terminating CA")
	}
}
