package egress

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/clock"

	"github.com/airlock-dev/airlock/pkg/egress/egresstest"
	"github.com/airlock-dev/airlock/pkg/egress/policy"
)

// The fixture: a gateway on loopback in front of a stand-in "internet" on loopback: a TLS server
// for the test names (certificates from a test CA), a plain HTTP server and an echo server. The
// test resolver answers for the test names and records every name it is asked; the test dialer
// maps the public-looking addresses the resolver answers to those servers, records every
// address it is asked, and dials nothing else.

const (
	passwordA = "claim-a-password-0123456789"
	passwordB = "claim-b-password-0123456789"
	// publicV4 and publicV6 stand for the internet: the dialer maps them to the loopback servers.
	publicV4 = "1.2.3.4"
	publicV6 = "2606:4700::1111"
	// rawV4 stands for the raw upstream (internet.rawAddr).
	rawV4 = "1.2.3.5"
)

// testNames are the names the upstream TLS server has a certificate for.
var testNames = []string{"allowed.example", "evil.example", "*.wild.example", "*.b.wild.example", "api.example", "private-ok.example", "v6.example", "cred.example", "nosecret.example", "raw.example", "rawpost.example"}

// testAnswers is the test resolver's zone.
var testAnswers = map[string][]string{
	"allowed.example":    {publicV4},
	"evil.example":       {publicV4},
	"a.b.wild.example":   {publicV4},
	"api.example":        {publicV4},
	"v6.example":         {publicV6},
	"ssh.example":        {publicV4},
	"loop.example":       {"127.0.0.1"},
	"localhost":          {"127.0.0.1", "::1"},
	"ten.example":        {"10.1.2.3"},
	"meta.example":       {"169.254.169.254"},
	"svc.example":        {"10.96.0.1"},
	"gkesvc.example":     {"34.118.224.10"},
	"mixed.example":      {publicV4, "127.0.0.1"},
	"mapped.example":     {"::ffff:127.0.0.1"},
	"nat64.example":      {"64:ff9b::a9fe:a9fe"},
	"cgnat.example":      {"100.64.0.1"},
	"ula.example":        {"fd00::1"},
	"private-ok.example": {"10.1.2.3"},
	"private-lo.example": {"127.0.0.1"},
	"cred.example":       {publicV4},
	"nosecret.example":   {publicV4},
	"badtls.example":     {publicV4},
	"raw.example":        {rawV4},
	"rawpost.example":    {rawV4},
}

// testPolicy is claim A's policy.
var testPolicy = policy.Policy{Rules: []policy.Rule{
	{Host: "allowed.example", Ports: []uint16{443, 80}},
	{Host: "*.wild.example", Ports: []uint16{443}},
	{Host: "v6.example", Ports: []uint16{443}},
	{Host: "api.example", Ports: []uint16{80, 443}, Methods: []string{"GET"}, PathPrefixes: []string{"/v1"}},
	{Host: "ssh.example", Ports: []uint16{22}, AllowNonTLS: true},
	{Host: "loop.example", Ports: []uint16{443}},
	{Host: "localhost", Ports: []uint16{8080, 443}},
	{Host: "ten.example", Ports: []uint16{443}},
	{Host: "meta.example", Ports: []uint16{80, 443}},
	{Host: "svc.example", Ports: []uint16{443}},
	{Host: "gkesvc.example", Ports: []uint16{443}},
	{Host: "mixed.example", Ports: []uint16{443}},
	{Host: "mapped.example", Ports: []uint16{443}},
	{Host: "nat64.example", Ports: []uint16{443}},
	{Host: "cgnat.example", Ports: []uint16{443}},
	{Host: "ula.example", Ports: []uint16{443}},
	{Host: "private-ok.example", Ports: []uint16{443}, AllowPrivate: true},
	{Host: "private-lo.example", Ports: []uint16{443}, AllowPrivate: true},
	{Host: "unresolvable.example", Ports: []uint16{443}},
	{Host: "cred.example", Ports: []uint16{443, 80}, Methods: []string{"GET"}, PathPrefixes: []string{"/v1"},
		Inject: &policy.Injection{Header: "Authorization", Secret: "cred"}},
	{Host: "nosecret.example", Ports: []uint16{443}, Inject: &policy.Injection{Header: "Authorization", Secret: "missing"}},
	{Host: "badtls.example", Ports: []uint16{443}, Methods: []string{"GET"}},
	// A credential rule without methods (GET and HEAD), and one with POST, both at the raw upstream.
	{Host: "raw.example", Ports: []uint16{443}, Inject: &policy.Injection{Header: "Authorization", Secret: "cred"}},
	{Host: "rawpost.example", Ports: []uint16{443}, Methods: []string{"GET", "POST"}, PathPrefixes: []string{"/v1"},
		Inject: &policy.Injection{Header: "Authorization", Secret: "cred"}},
}}

type testResolver struct {
	mu    sync.Mutex
	asked []string
}

// LookupNetIP answers only rooted names (with the trailing dot the gateway adds, so that no
// search domain is tried); it records them without the dot.
func (r *testResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	name, rooted := strings.CutSuffix(host, ".")
	r.mu.Lock()
	r.asked = append(r.asked, name)
	r.mu.Unlock()
	if !rooted {
		return nil, &net.DNSError{Err: "the gateway asked for a name that is not rooted: search domains would be tried", Name: host}
	}
	texts, ok := testAnswers[name]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	var out []netip.Addr
	for _, t := range texts {
		out = append(out, netip.MustParseAddr(t))
	}
	return out, nil
}

func (r *testResolver) names() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.asked)
}

type testDialer struct {
	routes map[string]string // checked address -> loopback server

	mu     sync.Mutex
	dialed []string
}

func (d *testDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	d.mu.Lock()
	d.dialed = append(d.dialed, address)
	d.mu.Unlock()
	to, ok := d.routes[address]
	if !ok {
		return nil, fmt.Errorf("test dialer: %s is not on the test internet", address)
	}
	var nd net.Dialer
	return nd.DialContext(ctx, network, to)
}

func (d *testDialer) addresses() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.dialed)
}

// internet is the stand-in internet, shared by the tests of the package.
type internet struct {
	pool    *x509.CertPool
	tlsAddr string
	// hellos counts the ClientHellos the TLS server received.
	hellos atomic.Int64
	// plainRequests records the requests the plain server received ("METHOD host path").
	plainMu       sync.Mutex
	plainRequests []string
	plainAddr     string
	echoAddr      string
	// tlsRequests records the requests the TLS server received for other hosts than
	// allowed.example, with their Authorization ("METHOD host path auth=...").
	tlsRequests []string
	// rawAddr is the raw upstream (serveRaw); rawRequests the request heads it parsed ("METHOD
	// path auth=...").
	rawAddr     string
	rawRequests []string
	// rawOpen counts the raw upstream's connections not yet ended.
	rawOpen int
}

func (in *internet) rawSeen() []string {
	in.plainMu.Lock()
	defer in.plainMu.Unlock()
	return slices.Clone(in.rawRequests)
}

// serveRaw is an upstream that frames requests its own way, as some servers do
// (egresstest.ServeNaive); it records the request heads it parsed.
func (in *internet) serveRaw(c net.Conn) {
	in.plainMu.Lock()
	in.rawOpen++
	in.plainMu.Unlock()
	defer func() {
		in.plainMu.Lock()
		in.rawOpen--
		in.plainMu.Unlock()
	}()
	egresstest.ServeNaive(c, func(head string) {
		in.plainMu.Lock()
		in.rawRequests = append(in.rawRequests, head)
		in.plainMu.Unlock()
	})
}

// rawSettled waits until every connection the raw upstream took has ended (it has parsed all it
// was sent), bounded by timeout, and returns the heads it parsed.
func (in *internet) rawSettled(t *testing.T, timeout time.Duration) []string {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 5*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		in.plainMu.Lock()
		defer in.plainMu.Unlock()
		return in.rawOpen == 0, nil
	})
	if err != nil {
		t.Errorf("the raw upstream's connections did not end within %v: %v", timeout, err)
	}
	return in.rawSeen()
}

func (in *internet) tlsSeen() []string {
	in.plainMu.Lock()
	defer in.plainMu.Unlock()
	return slices.Clone(in.tlsRequests)
}

func (in *internet) plainSeen() []string {
	in.plainMu.Lock()
	defer in.plainMu.Unlock()
	return slices.Clone(in.plainRequests)
}

func newInternet(t testing.TB) *internet {
	t.Helper()
	in := &internet{}
	caPair, pool := newTestCA(t, "egress test CA")
	ca, caKey := caPair.Leaf, caPair.PrivateKey.(*ecdsa.PrivateKey)
	in.pool = pool
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leafTmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "test internet"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), DNSNames: testNames,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	cert := tls.Certificate{Certificate: [][]byte{leafDER}, PrivateKey: key}

	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS != nil && r.Host != "allowed.example" {
			in.plainMu.Lock()
			in.tlsRequests = append(in.tlsRequests, r.Method+" "+r.Host+" "+r.URL.RequestURI()+" auth="+r.Header.Get("Authorization"))
			in.plainMu.Unlock()
		}
		if r.URL.Path == "/big" {
			serveBig(w)
			return
		}
		fmt.Fprintf(w, "hello %s %s %s", r.Method, r.Host, r.URL.Path)
	})
	tlsLn := listen(t)
	tlsSrv := &http.Server{Handler: hello, TLSConfig: &tls.Config{
		Certificates: []tls.Certificate{cert},
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			in.hellos.Add(1)
			return nil, nil
		},
	}}
	serve(t, tlsSrv, tls.NewListener(tlsLn, tlsSrv.TLSConfig))
	in.tlsAddr = tlsLn.Addr().String()

	plainLn := listen(t)
	plainSrv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in.plainMu.Lock()
		in.plainRequests = append(in.plainRequests, r.Method+" "+r.Host+" "+r.URL.RequestURI())
		in.plainMu.Unlock()
		if r.Header.Get("Proxy-Authorization") != "" {
			http.Error(w, "the proxy credential reached the upstream", http.StatusTeapot)
			return
		}
		hello(w, r)
	})}
	serve(t, plainSrv, plainLn)
	in.plainAddr = plainLn.Addr().String()

	rawLn := tls.NewListener(listen(t), &tls.Config{Certificates: []tls.Certificate{cert}})
	in.rawAddr = rawLn.Addr().String()

	echoLn := listen(t)
	var wg sync.WaitGroup
	t.Cleanup(func() { echoLn.Close(); rawLn.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := rawLn.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() { defer wg.Done(); in.serveRaw(c) }()
		}
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := echoLn.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() { defer wg.Done(); defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	in.echoAddr = echoLn.Addr().String()
	return in
}

func listen(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

func serve(t testing.TB, srv *http.Server, ln net.Listener) {
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close(); <-done })
}

// fixture is one gateway in front of the internet.
type fixture struct {
	t        testing.TB
	in       *internet
	resolver *testResolver
	dialer   *testDialer
	claims   *StaticClaims
	addr     string
	records  chan Record
	// stop ends Serve's context; served receives Serve's result.
	stop   context.CancelFunc
	served chan error
	g      *Gateway
}

type fixtureOption func(*fixtureOptions)

type fixtureOptions struct {
	unsynced bool
	grace    time.Duration
	clock    clock.WithTicker
	idle     time.Duration
	// quiet: no audit lines in the test log and no records (benchmarks).
	quiet     bool
	terminate *Terminator
	// lookup, if set, is the gateway's ClaimLookup instead of the static claims A and B.
	lookup ClaimLookup
	// tracer, if set, is the gateway's Config.Tracer.
	tracer trace.Tracer
	// decisions, if set, is the gateway's Config.Decisions, and claims A and B have the UIDs
	// uidA and uidB.
	decisions *DecisionLog
}

const (
	uidA = "3f1c0e2a-0000-4000-8000-00000000000a"
	uidB = "3f1c0e2a-0000-4000-8000-00000000000b"
)

func withDecisions(l *DecisionLog) fixtureOption { return func(o *fixtureOptions) { o.decisions = l } }

func withTracer(tr trace.Tracer) fixtureOption { return func(o *fixtureOptions) { o.tracer = tr } }

func withLookup(l ClaimLookup) fixtureOption { return func(o *fixtureOptions) { o.lookup = l } }

func withTerminator(tr *Terminator) fixtureOption {
	return func(o *fixtureOptions) { o.terminate = tr }
}

func quiet() fixtureOption { return func(o *fixtureOptions) { o.quiet = true } }

func withIdleTimeout(d time.Duration) fixtureOption { return func(o *fixtureOptions) { o.idle = d } }

func withGrace(d time.Duration, c clock.WithTicker) fixtureOption {
	return func(o *fixtureOptions) { o.grace, o.clock = d, c }
}

func unsynced() fixtureOption { return func(o *fixtureOptions) { o.unsynced = true } }

func newFixture(t testing.TB, in *internet, opts ...fixtureOption) *fixture {
	t.Helper()
	var o fixtureOptions
	for _, opt := range opts {
		opt(&o)
	}
	_, ctx := ktesting.NewTestContext(t)
	if o.quiet {
		ctx = klog.NewContext(ctx, logr.Discard())
	}
	claims, err := NewStaticClaims(
		StaticClaim{Namespace: "team-a", Claim: "agent-a", Runtime: "agent", Password: passwordA,
			Sources: []netip.Addr{netip.MustParseAddr("127.0.0.1")}, Policy: testPolicy},
		StaticClaim{Namespace: "team-b", Claim: "agent-b", Runtime: "other", Password: passwordB,
			Sources: []netip.Addr{netip.MustParseAddr("127.0.0.2")}, Policy: testPolicy},
	)
	if err != nil {
		t.Fatal(err)
	}
	if o.decisions != nil {
		for user, uid := range map[string]types.UID{"team-a.agent-a": uidA, "team-b.agent-b": uidB} {
			e := claims.claims[user]
			e.UID = uid
			claims.claims[user] = e
		}
	}
	if !o.unsynced {
		claims.SetSynced()
	}
	f := &fixture{t: t, in: in, resolver: &testResolver{}, claims: claims, records: make(chan Record, 16)}
	f.dialer = &testDialer{routes: map[string]string{
		publicV4 + ":443":        in.tlsAddr,
		"[" + publicV6 + "]:443": in.tlsAddr,
		publicV4 + ":80":         in.plainAddr,
		publicV4 + ":22":         in.echoAddr,
		rawV4 + ":443":           in.rawAddr,
		"10.1.2.3:443":           in.tlsAddr,
		"127.0.0.1:443":          in.tlsAddr,
		"169.254.169.254:80":     in.plainAddr,
	}}
	observe := func(r Record) { f.records <- r }
	if o.quiet {
		observe = nil
	}
	var lookup ClaimLookup = claims
	if o.lookup != nil {
		lookup = o.lookup
	}
	g, err := New(Config{
		Claims: lookup, Resolver: f.resolver, Dialer: f.dialer,
		ClusterCIDRs:  []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12"), netip.MustParsePrefix("34.118.224.0/20")},
		Observe:       observe,
		ShutdownGrace: o.grace,
		IdleTimeout:   o.idle,
		Terminate:     o.terminate,
		Clock:         o.clock,
		Tracer:        o.tracer,
		Decisions:     o.decisions,
	})
	if err != nil {
		t.Fatal(err)
	}
	ln := listen(t)
	f.addr = ln.Addr().String()
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- g.Serve(ctx, ln) }()
	f.stop, f.served, f.g = cancel, done, g
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
		done <- nil
	})
	return f
}

// record waits for the next exchange's record.
func (f *fixture) record() Record {
	f.t.Helper()
	select {
	case r := <-f.records:
		return r
	case <-time.After(wait.ForeverTestTimeout):
		f.t.Fatal("no audit record")
		return Record{}
	}
}

// dial connects to the gateway from source ("" for 127.0.0.1).
func (f *fixture) dial(source string) net.Conn {
	f.t.Helper()
	d := net.Dialer{}
	if source != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(source)}
	}
	c, err := d.Dial("tcp", f.addr)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { c.Close() })
	return c
}

func basic(user, pass string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
}

var credA = basic("team-a.agent-a", passwordA)

// result is what a client saw.
type result struct {
	status int
	reason Reason
	body   string
	// closed: the gateway closed the connection without an HTTP answer (a refused tunnel).
	closed bool
	err    error
}

// send writes raw to a new connection from source and reads one response.
func (f *fixture) send(source, raw string) (result, *bufio.Reader, net.Conn) {
	f.t.Helper()
	c := f.dial(source)
	if _, err := io.WriteString(c, raw); err != nil {
		f.t.Fatal(err)
	}
	br := bufio.NewReader(c)
	return readResult(br, raw), br, c
}

func readResult(br *bufio.Reader, raw string) result {
	method := "GET"
	if strings.HasPrefix(raw, "CONNECT") {
		method = http.MethodConnect
	}
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		return result{closed: true, err: err}
	}
	r := result{status: resp.StatusCode, reason: Reason(resp.Header.Get("X-Airlock-Egress-Reason"))}
	if method != http.MethodConnect || resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		r.body = string(b)
	}
	return r
}

// tlsGet does a TLS handshake with sni over c and a GET of path, and returns the body.
func (f *fixture) tlsGet(c net.Conn, br *bufio.Reader, sni, host string) (string, error) {
	tc := tls.Client(&bufConn{Conn: c, r: br}, &tls.Config{ServerName: sni, RootCAs: f.in.pool, InsecureSkipVerify: sni == ""})
	if err := tc.Handshake(); err != nil {
		return "", err
	}
	if _, err := fmt.Fprintf(tc, "GET /tls HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", host); err != nil {
		return "", err
	}
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufConn) Read(p []byte) (int, error) { return c.r.Read(p) }

var errClosed = errors.New("closed")

func newReader(c net.Conn) *bufio.Reader { return bufio.NewReader(c) }

// bigSize is the size of the upstream's /big, which the download benchmark fetches.
const bigSize = 100 << 20

func serveBig(w http.ResponseWriter) {
	w.Header().Set("Content-Length", fmt.Sprint(bigSize))
	chunk := make([]byte, 256<<10)
	for sent := 0; sent < bigSize; sent += len(chunk) {
		if _, err := w.Write(chunk); err != nil {
			return
		}
	}
}

// newTestCA returns a CA (with its Leaf and key) and a pool that trusts it.
func newTestCA(t testing.TB, name string) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: cert}, pool
}
