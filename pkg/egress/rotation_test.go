package egress

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// secretDir lays CA files out as the kubelet mounts a kubernetes.io/tls Secret: tls.crt and
// tls.key are links into ..data, a link to a timestamped directory that an update swaps at once.
type secretDir struct {
	t   *testing.T
	dir string
	n   int
}

func newSecretDir(t *testing.T) *secretDir {
	d := &secretDir{t: t, dir: t.TempDir()}
	for _, f := range []string{"tls.crt", "tls.key"} {
		if err := os.Symlink(filepath.Join("..data", f), filepath.Join(d.dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// put swaps ..data to a new directory holding certPEM and keyPEM.
func (d *secretDir) put(certPEM, keyPEM []byte) {
	d.t.Helper()
	d.n++
	ts := filepath.Join(d.dir, "..v"+string(rune('a'+d.n)))
	if err := os.Mkdir(ts, 0o700); err != nil {
		d.t.Fatal(err)
	}
	for name, b := range map[string][]byte{"tls.crt": certPEM, "tls.key": keyPEM} {
		if err := os.WriteFile(filepath.Join(ts, name), b, 0o600); err != nil {
			d.t.Fatal(err)
		}
	}
	tmp := filepath.Join(d.dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		d.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(d.dir, "..data")); err != nil {
		d.t.Fatal(err)
	}
}

func caPEM(t *testing.T, ca tls.Certificate) ([]byte, []byte) {
	t.Helper()
	keyDER, err := x509.MarshalPKCS8PrivateKey(ca.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Certificate[0]}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
}

// verifiedBy says whether a minted certificate verifies for host against pool.
func verifiedBy(c *tls.Certificate, host string, pool *x509.CertPool) bool {
	_, err := c.Leaf.Verify(x509.VerifyOptions{DNSName: host, Roots: pool})
	return err == nil
}

// TestTerminatorFollowsCAFiles: the CA of a mounted Secret is followed without a restart: none
// while the mount is empty (nothing terminated), the first CA once it is there, the rotated one
// from the next mint on (certificates of the previous one no longer handed out), a change that
// does not parse keeps the CA held until the files are right again.
func TestTerminatorFollowsCAFiles(t *testing.T) {
	d := newSecretDir(t)
	tr, err := LoadTerminatorDir(d.dir, "", "")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if tr.available() {
		t.Fatal("a CA with an empty mount")
	}
	if _, err := tr.certificate("cred.example", now); err == nil {
		t.Fatal("minted without a CA")
	}

	ca1, pool1 := newTestCA(t, "CA one")
	d.put(caPEM(t, ca1))
	if !tr.available() {
		t.Fatal("no CA once the mount holds one")
	}
	c1, err := tr.certificate("cred.example", now)
	if err != nil || !verifiedBy(c1, "cred.example", pool1) {
		t.Fatalf("first CA: %v, verified %v", err, err == nil && verifiedBy(c1, "cred.example", pool1))
	}

	ca2, pool2 := newTestCA(t, "CA two")
	d.put(caPEM(t, ca2))
	c2, err := tr.certificate("cred.example", now)
	if err != nil || !verifiedBy(c2, "cred.example", pool2) || verifiedBy(c2, "cred.example", pool1) {
		t.Fatalf("rotated CA: %v; a certificate of the previous CA handed out: %v", err, err == nil && verifiedBy(c2, "cred.example", pool1))
	}

	// A certificate of CA three with the key of CA one: not a pair; CA two is kept.
	ca3, pool3 := newTestCA(t, "CA three")
	cert3, key3 := caPEM(t, ca3)
	_, key1 := caPEM(t, ca1)
	d.put(cert3, key1)
	if c, err := tr.certificate("other.example", now); err != nil || !verifiedBy(c, "other.example", pool2) {
		t.Fatalf("after a broken change: %v, want CA two kept", err)
	}
	d.put(cert3, key3)
	if c, err := tr.certificate("other.example", now); err != nil || !verifiedBy(c, "other.example", pool3) {
		t.Fatalf("after the fix: %v, want CA three", err)
	}

	// A leaf in the files is no CA: the one held is kept.
	leaf, _ := tr.certificate("leaf.example", now)
	lc, lk := caPEM(t, tls.Certificate{Certificate: leaf.Certificate[:1], PrivateKey: leaf.PrivateKey})
	d.put(lc, lk)
	if c, err := tr.certificate("third.example", now); err != nil || !verifiedBy(c, "third.example", pool3) {
		t.Fatalf("after a leaf in the files: %v, want CA three kept", err)
	}
}

// TestTerminatorDirFailsClosed: through the gateway, a credentialed host is refused
// (inspection_required) while the mounted Secret holds no CA, and terminated, with the
// credential injected, as soon as it does, without a restart.
func TestTerminatorDirFailsClosed(t *testing.T) {
	in := newInternet(t)
	d := newSecretDir(t)
	tr, err := LoadTerminatorDir(d.dir, "", "")
	if err != nil {
		t.Fatal(err)
	}
	tr.UpstreamRoots = in.pool
	tr.Secrets = func(name string) ([]byte, bool) { return []byte(testSecret), name == "cred" }
	f := newFixture(t, in, withTerminator(tr))

	res, _, c := f.send("", connectReq("cred.example:443"))
	c.Close()
	if res.status != http.StatusForbidden || res.reason != ReasonInspection {
		t.Fatalf("without a CA: %d %q, want 403 %s", res.status, res.reason, ReasonInspection)
	}

	ca, pool := newTestCA(t, "operator's CA")
	d.put(caPEM(t, ca))
	tc, br, err := terminatedTunnel(t, f, pool, "cred.example:443", "cred.example")
	if err != nil {
		t.Fatalf("with the CA: %v", err)
	}
	defer tc.Close()
	if res, _ := roundTrip(t, tc, br, innerReq("GET", "/v1/repo", "cred.example")); res.status != http.StatusOK {
		t.Fatalf("with the CA: %d %q", res.status, res.reason)
	}
}
