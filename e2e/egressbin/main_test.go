package egressbin

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	"k8s.io/apimachinery/pkg/util/wait"
)

// airlockBin is the airlock binary TestMain built from this module.
var airlockBin string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "airlock-egressbin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "egressbin:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	root, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		fmt.Fprintln(os.Stderr, "egressbin: finding the module:", err)
		return 1
	}
	airlockBin = filepath.Join(dir, "airlock")
	build := exec.Command("go", "build", "-o", airlockBin, ".")
	build.Dir = strings.TrimSpace(string(root))
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "egressbin: go build: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

// The credential the gateway injects (its --credentials-dir file "cred"), the claim's proxy
// credential and the names of the test's upstream.
const (
	secret      = "Bearer tok-9f3c1e7a5b2d4f6081a3c5e7"
	secretToken = "tok-9f3c1e7a5b2d4f6081a3c5e7"
	claimUser   = "team-a.claim-a"
	claimPass   = "proxy-password-of-claim-a"
	// rawHost's rule injects the credential and lists no methods (GET and HEAD); rawPostHost's
	// lists GET and POST under /v1.
	rawHost     = "raw.test"
	rawPostHost = "rawpost.test"
)

// hostAddress is a non-loopback unicast IPv4 address of this machine, which the upstream listens
// on: the gateway refuses loopback (and link-local) answers even where a rule allows private
// addresses, so an upstream on 127.0.0.1 could never be reached through the real binary.
func hostAddress(t *testing.T) net.IP {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
			return n.IP.To4()
		}
	}
	t.Fatalf("this machine has no non-loopback IPv4 address (%v): the gateway dials no loopback upstream, so these tests need one", addrs)
	return nil
}

// testCA is a CA of the test's: one signs the upstream's certificate (the gateway's
// --upstream-ca-file), one is the gateway's terminating CA (the sandbox trusts it).
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
	pool *x509.CertPool
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pool: x509.NewCertPool()}
	ca.pool.AddCert(cert)
	return ca
}

// keyPEM is the CA's key in PKCS #8.
func (ca *testCA) keyPEM(t *testing.T) []byte {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

// leaf is a serving certificate for names, signed by the CA.
func (ca *testCA) leaf(t *testing.T, names ...string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: names[0]}, DNSNames: names,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// startResolver serves DNS on a loopback UDP port: A records of names at addr, an empty answer
// for their other types, NXDOMAIN for any other name. It returns its address.
func startResolver(t *testing.T, names []string, addr net.IP) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { pc.Close(); <-done })
	go func() {
		defer close(done)
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if resp, err := dnsAnswer(buf[:n], names, addr); err == nil {
				_, _ = pc.WriteTo(resp, from)
			}
		}
	}()
	return pc.LocalAddr().String()
}

func dnsAnswer(query []byte, names []string, addr net.IP) ([]byte, error) {
	var p dnsmessage.Parser
	hdr, err := p.Start(query)
	if err != nil {
		return nil, err
	}
	q, err := p.Question()
	if err != nil {
		return nil, err
	}
	name := strings.TrimSuffix(strings.ToLower(q.Name.String()), ".")
	known := false
	for _, n := range names {
		known = known || n == name
	}
	rcode := dnsmessage.RCodeSuccess
	if !known {
		rcode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: hdr.ID, Response: true, Authoritative: true, RecursionDesired: hdr.RecursionDesired, RCode: rcode})
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if err := b.Question(q); err != nil {
		return nil, err
	}
	if err := b.StartAnswers(); err != nil {
		return nil, err
	}
	if known && q.Type == dnsmessage.TypeA {
		rh := dnsmessage.ResourceHeader{Name: q.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: 5}
		if err := b.AResource(rh, dnsmessage.AResource{A: [4]byte(addr.To4())}); err != nil {
			return nil, err
		}
	}
	return b.Finish()
}

// syncBuffer is the gateway's stderr (its klog lines, the audit among them), read while written.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// gateway is one `airlock egress` process serving claim A, its upstream and what the sandbox
// trusts.
type gateway struct {
	proxyAddr   string
	metricsAddr string
	stderr      *syncBuffer
	sandboxCA   *x509.CertPool // the terminating CA
	up          *upstream
}

// freeAddrs are n loopback addresses no listener holds now (the gateway's flags need the ports),
// all different: each is held until every one is taken, so the kernel cannot hand the same
// ephemeral port out twice (it did: two flags got one port, and the gateway refused to start).
func freeAddrs(t *testing.T, n int) []string {
	t.Helper()
	var addrs []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		addrs = append(addrs, l.Addr().String())
	}
	return addrs
}

// startGateway runs the binary with claim A (from 127.0.0.1) whose policy is the two credential
// rules at the upstream, and waits until it is ready; the process is stopped (SIGTERM) and waited
// for when the test ends.
func startGateway(t *testing.T) *gateway {
	t.Helper()
	ip := hostAddress(t)
	upstreamCA, gatewayCA := newTestCA(t, "upstream CA"), newTestCA(t, "egress gateway CA")
	up := startUpstream(t, ip, upstreamCA.leaf(t, rawHost, rawPostHost))
	resolver := startResolver(t, []string{rawHost, rawPostHost}, ip)

	dir := t.TempDir()
	creds := filepath.Join(dir, "credentials")
	files := map[string][]byte{
		"upstream-ca.crt": upstreamCA.pem, "terminate-ca.crt": gatewayCA.pem, "terminate-ca.key": gatewayCA.keyPEM(t),
	}
	inject := map[string]any{"header": "Authorization", "secret": "cred"}
	claims, err := json.Marshal([]map[string]any{{
		"namespace": "team-a", "claim": "claim-a", "runtime": "agent", "password": claimPass, "sources": []string{"127.0.0.1"},
		"policy": map[string]any{"rules": []map[string]any{
			{"host": rawHost, "ports": []int{up.port}, "allowPrivate": true, "inject": inject},
			{"host": rawPostHost, "ports": []int{up.port}, "allowPrivate": true, "methods": []string{"GET", "POST"}, "pathPrefixes": []string{"/v1"}, "inject": inject},
		}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	files["claims.json"] = claims
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(creds, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(creds, "cred"), []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}

	addrs := freeAddrs(t, 3)
	g := &gateway{proxyAddr: addrs[0], metricsAddr: addrs[1], stderr: &syncBuffer{}, sandboxCA: gatewayCA.pool, up: up}
	health := addrs[2]
	cmd := exec.Command(airlockBin, "egress",
		"--claims-file="+filepath.Join(dir, "claims.json"),
		"--proxy-bind-address="+g.proxyAddr, "--health-probe-bind-address="+health, "--metrics-bind-address="+g.metricsAddr,
		"--dns-server="+resolver,
		"--terminate-ca-cert-file="+filepath.Join(dir, "terminate-ca.crt"), "--terminate-ca-key-file="+filepath.Join(dir, "terminate-ca.key"),
		"--upstream-ca-file="+filepath.Join(dir, "upstream-ca.crt"), "--credentials-dir="+creds,
		"--shutdown-grace=0s")
	cmd.Stdout, cmd.Stderr = g.stderr, g.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		if err := <-exited; err != nil {
			t.Logf("the gateway ended: %v\n%s", err, g.stderr)
		}
	})
	err = wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		select {
		case err := <-exited:
			exited <- err
			return false, fmt.Errorf("the gateway exited: %v", err)
		default:
		}
		resp, err := http.Get("http://" + health + "/readyz")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("waiting for the gateway to be ready: %v\n%s", err, g.stderr)
	}
	return g
}

// hostPort is host at the upstream's port: a tunnel's authority, and the Host of its requests.
func (g *gateway) hostPort(host string) string {
	return net.JoinHostPort(host, strconv.Itoa(g.up.port))
}

// tunnel opens a CONNECT tunnel for claim A to host at the upstream's port and a TLS session in
// it, trusting the gateway's terminating CA.
func (g *gateway) tunnel(t *testing.T, host string) *tls.Conn {
	t.Helper()
	c, err := net.Dial("tcp", g.proxyAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	authority := g.hostPort(host)
	auth := base64.StdEncoding.EncodeToString([]byte(claimUser + ":" + claimPass))
	if _, err := fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: Basic %s\r\n\r\n", authority, authority, auth); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT %s: %s (%s)", authority, resp.Status, resp.Header.Get("X-Airlock-Egress-Reason"))
	}
	if br.Buffered() > 0 {
		t.Fatalf("the gateway sent %d bytes after its 200", br.Buffered())
	}
	tc := tls.Client(c, &tls.Config{ServerName: host, RootCAs: g.sandboxCA})
	if err := tc.Handshake(); err != nil {
		t.Fatalf("TLS in the tunnel to %s: %v", authority, err)
	}
	return tc
}

// exchange is what a sandbox got back for requests it wrote at once (pipelined) into a tunnel
// to host before closing its side: the final answers ("status reason" for a refusal, else
// "status body"), the number of 1xx answers, the answers' header fields and every byte received.
type exchange struct {
	answers []string
	interim int
	headers []http.Header
	bodies  [][]byte
	raw     string
}

func (g *gateway) send(t *testing.T, host, requests string) exchange {
	t.Helper()
	tc := g.tunnel(t, host)
	if _, err := io.WriteString(tc, requests); err != nil {
		t.Fatal(err)
	}
	if err := tc.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	var all strings.Builder
	br := bufio.NewReader(io.TeeReader(tc, &all))
	var ex exchange
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			break
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode < 200 {
			ex.interim++
			continue
		}
		answer := fmt.Sprint(resp.StatusCode, " ", string(body))
		if r := resp.Header.Get("X-Airlock-Egress-Reason"); r != "" {
			answer = fmt.Sprint(resp.StatusCode, " ", r)
		}
		ex.answers = append(ex.answers, answer)
		ex.headers = append(ex.headers, resp.Header)
		ex.bodies = append(ex.bodies, body)
	}
	ex.raw = all.String()
	return ex
}

// echoes is the gateway's airlock_egress_credential_echoes_total, from its metrics port (0 when
// it serves no such family).
func (g *gateway) echoes(t *testing.T) int {
	t.Helper()
	resp, err := http.Get("http://" + g.metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "airlock_egress_credential_echoes_total "); ok {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("metric line %q: %v", sc.Text(), err)
			}
			return int(n)
		}
	}
	return 0
}

// auditReasons waits for n audit lines of tunnels to host and returns their reasons, in order.
func (g *gateway) auditReasons(t *testing.T, host string, n int) []string {
	t.Helper()
	var reasons []string
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		reasons = nil
		for _, line := range strings.Split(g.stderr.String(), "\n") {
			if !strings.Contains(line, `"Egress"`) || !strings.Contains(line, ` host="`+host+`"`) {
				continue
			}
			if _, rest, ok := strings.Cut(line, ` reason="`); ok {
				reason, _, _ := strings.Cut(rest, `"`)
				reasons = append(reasons, reason)
			}
		}
		return len(reasons) >= n, nil
	})
	if err != nil {
		t.Fatalf("%d audit lines for %s, want %d: %v\n%s", len(reasons), host, n, err, g.stderr)
	}
	return reasons
}
