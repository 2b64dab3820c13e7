package sandboxd

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/airlock-dev/airlock/pkg/claimtoken/warmtoken"
	"github.com/airlock-dev/airlock/pkg/isolation"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/recordlog"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/sandboxdtest"
	"github.com/airlock-dev/airlock/pkg/sandboxstop"
	"github.com/airlock-dev/airlock/pkg/toolnames"
)

// getIsolation is GET /isolation with header: its status, content type and body.
func getIsolation(t *testing.T, url string, header http.Header) (int, string, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url+isolation.Path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header = header
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(body)
}

func writeToken(t *testing.T, token string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(f, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestIsolationEndpoint: GET /isolation sits behind the claim's token, as /record does, and
// answers the evidence's canonical encoding, which Decode reads and Judge accepts; it only reads.
func TestIsolationEndpoint(t *testing.T) {
	const token = "claim-a-token-0123456789"
	ts := startServer(t, Config{AuthTokenFile: writeToken(t, token)}, options{})
	for name, h := range map[string]http.Header{
		"no token":            nil,
		"wrong token":         bearer("nope"),
		"prefix of the token": bearer("claim-a-token"),
		"another claim's":     bearer("claim-b-token-0123456789"),
	} {
		t.Run(name, func(t *testing.T) {
			if code, _, body := getIsolation(t, ts.url, h); code != http.StatusUnauthorized || strings.Contains(body, "kernelRelease") {
				t.Errorf("GET %s = %d %q, want 401 and no evidence", isolation.Path, code, body)
			}
		})
	}
	code, ctype, body := getIsolation(t, ts.url, bearer(token))
	if code != http.StatusOK || ctype != "application/json" {
		t.Fatalf("GET %s with the token = %d %s %q, want 200 JSON", isolation.Path, code, ctype, body)
	}
	ev, err := isolation.Decode([]byte(body))
	if err != nil {
		t.Fatalf("the evidence served does not decode: %v\n%s", err, body)
	}
	if ev.KernelRelease != testKernel || ev.UID != 65532 || len(ev.Probes) != 4 {
		t.Errorf("evidence %+v, want the fake sources'", ev)
	}
	if ok, reason, message := isolation.Judge(ev, testKernel, isolation.Need{Kernel: isolation.KernelAny}); !ok {
		t.Errorf("Judge = %s: %s", reason, message)
	}
	if ok, _, message := isolation.Judge(ev, testKernel, isolation.Need{Kernel: isolation.KernelDedicated}); ok || !strings.Contains(message, "kernel 6.18.0-test is the node's") {
		t.Errorf("Judge for a dedicated kernel = %t %q, want the node's kernel refused", ok, message)
	}
	for _, method := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch} {
		req, _ := http.NewRequestWithContext(t.Context(), method, ts.url+isolation.Path, strings.NewReader(`{"version":1}`))
		req.Header = bearer(token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("%s %s = %d, want 405", method, isolation.Path, resp.StatusCode)
		}
	}
}

// TestReadyzWaitsForTheEvidence: while the probes run, /healthz answers and /readyz does not;
// an MCP client and a reader of /isolation wait. Once the probes end, both are answered, and the
// initialize result names the digest of the evidence that was gathered.
func TestReadyzWaitsForTheEvidence(t *testing.T) {
	release := make(chan struct{})
	dialing := make(chan string, 4)
	opts := defaultOptions()
	opts.evidence = fakeEvidence(func(ctx context.Context, address string) error {
		dialing <- address
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	opts.evidence.Timeout = 2 * testTimeout
	opts.clock = clocktesting.NewFakeClock(time.Now()) // readyzWait never passes
	logger, _ := ktesting.NewTestContext(t)
	s, err := newServer(Config{Workspace: t.TempDir(), StateDir: t.TempDir(), ShutdownGrace: 5 * time.Second}, opts, logger)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	addr, stop := serveOn(t, s)
	url := "http://" + addr
	for range 4 {
		select {
		case <-dialing:
		case <-time.After(testTimeout):
			t.Fatal("the probes did not start")
		}
	}
	if code, _ := get(t, url+"/healthz", nil); code != http.StatusOK {
		t.Errorf("/healthz while gathering = %d, want 200", code)
	}
	type answer struct {
		initialize bool     // else GET /isolation, or /readyz
		readyz     int      // /readyz's status
		meta       mcp.Meta // initialize's
		body       string   // GET /isolation's
	}
	answered := make(chan answer, 3)
	go func() { // a probe while the evidence is gathered is held, and answered ready after it
		code, _ := get(t, url+"/readyz", nil)
		answered <- answer{readyz: code}
	}()
	go func() {
		cs := connectStreamable(t, url, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
		answered <- answer{initialize: true, meta: cs.InitializeResult().Meta}
	}()
	go func() {
		_, _, body := getIsolation(t, url, nil)
		answered <- answer{body: body}
	}()
	// A bounded wait for what must not happen: nothing is served before the evidence.
	select {
	case a := <-answered:
		t.Fatalf("answered before the evidence was gathered: %+v", a)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	var digest, body string
	for range 3 {
		select {
		case a := <-answered:
			switch {
			case a.initialize:
				digest, _ = a.meta[isolation.MetaKeyDigest].(string)
			case a.readyz != 0:
				if a.readyz != http.StatusOK {
					t.Errorf("/readyz asked while gathering = %d, want 200 once the evidence is there", a.readyz)
				}
			default:
				body = a.body
			}
		case <-time.After(testTimeout):
			t.Fatal("not answered once the evidence was gathered")
		}
	}
	ev, err := isolation.Decode([]byte(body))
	if err != nil {
		t.Fatalf("GET %s: %v: %q", isolation.Path, err, body)
	}
	if digest == "" || digest != ev.Digest() {
		t.Errorf("initialize names digest %q, want the evidence's %s", digest, ev.Digest())
	}
	if ok, _, message := isolation.Judge(ev, testKernel, isolation.Need{}); !ok {
		t.Errorf("Judge refused the evidence: %s", message)
	}
	if code, _ := get(t, url+"/readyz", nil); code != http.StatusOK {
		t.Errorf("/readyz once gathered = %d, want 200", code)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// TestReadyzAnswersNotReadyAfterItsWait: a probe held while the evidence is gathered answers 503,
// naming the evidence, once readyzWait has passed (within the kubelet's probe timeout).
func TestReadyzAnswersNotReadyAfterItsWait(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	opts := defaultOptions()
	opts.evidence = fakeEvidence(func(ctx context.Context, address string) error {
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	opts.evidence.Timeout = 2 * testTimeout
	fc := clocktesting.NewFakeClock(time.Now())
	opts.clock = fc
	logger, _ := ktesting.NewTestContext(t)
	s, err := newServer(Config{Workspace: t.TempDir(), StateDir: t.TempDir(), ShutdownGrace: 5 * time.Second}, opts, logger)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	addr, stop := serveOn(t, s)
	defer func() { _ = stop() }()
	type answer struct {
		code int
		body string
	}
	answered := make(chan answer, 1)
	go func() {
		code, body := get(t, "http://"+addr+"/readyz", nil)
		answered <- answer{code, body}
	}()
	sandboxdtest.WaitFor(t, "the probe to wait for the evidence", fc.HasWaiters)
	fc.Step(readyzWait - time.Millisecond)
	select {
	case a := <-answered:
		t.Fatalf("/readyz answered %d %q before readyzWait passed", a.code, a.body)
	default:
	}
	fc.Step(time.Millisecond)
	select {
	case a := <-answered:
		if a.code != http.StatusServiceUnavailable || !strings.Contains(a.body, "gathering the isolation evidence") {
			t.Errorf("/readyz after its wait = %d %q, want 503 naming the evidence", a.code, a.body)
		}
	case <-time.After(testTimeout):
		t.Fatal("/readyz did not answer once readyzWait passed")
	}
}

// TestNoEvidenceNoService: a sandboxd that cannot read its own status serves no tool and ends
// with the reason (the kubelet restarts it, and the pod's termination message says why).
func TestNoEvidenceNoService(t *testing.T) {
	opts := defaultOptions()
	opts.evidence = fakeEvidence(nil)
	opts.evidence.Status = func() ([]byte, error) { return nil, os.ErrNotExist }
	logger, _ := ktesting.NewTestContext(t)
	s, err := newServer(Config{Workspace: t.TempDir(), StateDir: t.TempDir(), ShutdownGrace: 5 * time.Second}, opts, logger)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- s.serve(t.Context(), ln) }()
	select {
	case err := <-stopped:
		if err == nil || !strings.Contains(err.Error(), "gathering the isolation evidence") {
			t.Errorf("serve = %v, want the evidence's error", err)
		}
	case <-time.After(testTimeout):
		t.Fatal("serve went on without evidence")
	}
	if s.isolation.Load() != nil {
		t.Error("evidence kept")
	}
	if _, err := newServer(Config{Workspace: t.TempDir(), StateDir: t.TempDir()}, options{}, logger); err == nil {
		t.Error("newServer without a source of evidence succeeded")
	}
}

// TestToolCallsCannotChangeTheEvidence: the evidence is gathered once, before the first tool
// call; what the tools do after (a Bash that rewrites what the probes read, a write beside the
// token) changes neither GET /isolation's bytes nor the digest a later session's initialize
// names, on every revision.
func TestToolCallsCannotChangeTheEvidence(t *testing.T) {
	var gathered atomic.Int32
	opts := defaultOptions()
	opts.evidence = fakeEvidence(nil)
	uname := opts.evidence.Uname
	opts.evidence.Uname = func() (string, string, error) {
		if gathered.Add(1) > 1 {
			return "9.9.9-changed", "changed", nil
		}
		return uname()
	}
	ts := startServer(t, Config{}, opts)
	_, _, before := getIsolation(t, ts.url, nil)
	sum := sha256.Sum256([]byte(before))
	digest := hex.EncodeToString(sum[:])

	cs := connectStreamable(t, ts.url, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if got := cs.InitializeResult().Meta[isolation.MetaKeyDigest]; got != digest {
		t.Errorf("initialize (2025-11-25) names digest %v, want %s", got, digest)
	}
	sandboxdtest.CallOK(t, cs, toolnames.Write, map[string]any{"file_path": "isolation", "content": `{"version":1}`})
	sandboxdtest.CallOK(t, cs, toolnames.Bash, map[string]any{"command": "echo nameserver 127.0.0.1 > resolv.conf; export AIRLOCK_NODE_IP=127.0.0.1; true"})

	if _, _, after := getIsolation(t, ts.url, nil); after != before {
		t.Errorf("GET %s changed after tool calls:\n%s\n%s", isolation.Path, before, after)
	}
	if n := gathered.Load(); n != 1 {
		t.Errorf("the evidence was gathered %d times, want once", n)
	}
	sse := connectSSE(t, ts.url, nil)
	if got := sse.InitializeResult().Meta[isolation.MetaKeyDigest]; got != digest {
		t.Errorf("initialize (2024-11-05, SSE) names digest %v, want %s", got, digest)
	}
	res := sandboxdtest.Result(t, sandboxdtest.RPC{Method: "server/discover"}.Call(t, ts.url))
	meta, _ := res["_meta"].(map[string]any)
	if meta[isolation.MetaKeyDigest] != digest || meta[mcp.MetaKeyServerInfo] == nil {
		t.Errorf("server/discover (2026-07-28) _meta = %v, want the digest %s beside serverInfo", meta, digest)
	}
	// Only the results that name the server carry it.
	list := sandboxdtest.Result(t, sandboxdtest.RPC{Method: "tools/list"}.Call(t, ts.url))
	if m, _ := list["_meta"].(map[string]any); m[isolation.MetaKeyDigest] != nil {
		t.Errorf("tools/list names the digest: %v", m)
	}
}

// TestWarmMemberIsolationNeedsTheAdoptingToken: a warm member's /isolation is behind its guard as
// /metrics is: nobody before adoption; the first valid adoption token adopts it and reads.
func TestWarmMemberIsolationNeedsTheAdoptingToken(t *testing.T) {
	ts := startWarmServer(t)
	key := sandboxdtest.WarmMemberKey(t, 0)
	if code, _, _ := getIsolation(t, ts.url, nil); code != http.StatusUnauthorized {
		t.Errorf("GET %s of an unadopted member without a token = %d, want 401", isolation.Path, code)
	}
	tok := sandboxdtest.AdoptionToken(t, key, "claim-1", toolnames.Glob)
	if code, _, body := getIsolation(t, ts.url, bearer(tok)); code != http.StatusOK || !strings.Contains(body, `"kernelRelease":"`+testKernel+`"`) {
		t.Errorf("GET %s with the adoption token = %d %q", isolation.Path, code, body)
	}
	if a := ts.guard.Adopted(); a != "claim-1" {
		t.Errorf("adopted by %q, want claim-1", a)
	}
	if code, _, _ := getIsolation(t, ts.url, bearer(sandboxdtest.AdoptionToken(t, key, "claim-2", toolnames.Glob))); code != http.StatusUnauthorized {
		t.Errorf("GET %s with another claim's adoption token = %d, want 401", isolation.Path, code)
	}
}

// TestWarmMemberEvidenceToken: a warm member's evidence token (the operator's, read before any
// adoption) opens GET /isolation and nothing else: no MCP endpoint, /metrics, /record or /stop;
// it adopts nothing (the first adoption token still adopts, and the member is then locked to
// it); another member's evidence token and an ordinary sandbox's token route are refused.
func TestWarmMemberEvidenceToken(t *testing.T) {
	ts := startWarmServer(t)
	key := sandboxdtest.WarmMemberKey(t, 0)
	evidenceToken, err := warmtoken.EvidenceToken(key)
	if err != nil {
		t.Fatal(err)
	}
	code, _, before := getIsolation(t, ts.url, bearer(evidenceToken))
	if code != http.StatusOK || !strings.Contains(before, `"kernelRelease":"`+testKernel+`"`) {
		t.Fatalf("GET %s with the evidence token = %d %q, want the evidence", isolation.Path, code, before)
	}
	if a := ts.guard.Adopted(); a != "" {
		t.Fatalf("the evidence token adopted the member (by %q)", a)
	}
	wantRefused(t, ts.url, bearer(evidenceToken))
	for _, ep := range []struct{ method, path string }{{"GET", recordlog.Path}, {"POST", sandboxstop.Path}} {
		req, _ := http.NewRequestWithContext(t.Context(), ep.method, ts.url+ep.path, nil)
		req.Header = bearer(evidenceToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s %s with the evidence token = %d, want 401", ep.method, ep.path, resp.StatusCode)
		}
	}
	other, err := warmtoken.EvidenceToken(sandboxdtest.WarmMemberKey(t, 1))
	if err != nil {
		t.Fatal(err)
	}
	if code, _, _ := getIsolation(t, ts.url, bearer(other)); code != http.StatusUnauthorized {
		t.Errorf("GET %s with another member's evidence token = %d, want 401", isolation.Path, code)
	}
	// The adoption is untouched: the first adoption token adopts, and only it serves MCP.
	tok := sandboxdtest.AdoptionToken(t, key, "claim-1", toolnames.Glob)
	if code, _ := sandboxdtest.Post(t, ts.url+"/mcp", "application/json", sandboxdtest.InitializeRequest, bearer(tok)); code != http.StatusOK {
		t.Fatalf("POST /mcp with the first adoption token = %d, want 200", code)
	}
	if a := ts.guard.Adopted(); a != "claim-1" {
		t.Fatalf("adopted by %q, want claim-1", a)
	}
	wantRefused(t, ts.url, bearer(evidenceToken))
	if code, _, after := getIsolation(t, ts.url, bearer(evidenceToken)); code != http.StatusOK || after != before {
		t.Errorf("GET %s with the evidence token after the adoption = %d, changed %v; want the same bytes", isolation.Path, code, after != before)
	}

	// A sandbox that is not warm knows no evidence token.
	plain := startServer(t, Config{AuthTokenFile: writeToken(t, "claim-a-token-0123456789")}, options{})
	if code, _, _ := getIsolation(t, plain.url, bearer(evidenceToken)); code != http.StatusUnauthorized {
		t.Errorf("GET %s of a claim's sandbox with an evidence token = %d, want 401", isolation.Path, code)
	}
}
