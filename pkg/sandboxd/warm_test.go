package sandboxd

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"k8s.io/klog/v2/ktesting"

	"github.com/airlock-dev/airlock/pkg/claimtoken/warmtoken"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/sandboxdtest"
	"github.com/airlock-dev/airlock/pkg/toolnames"
)

// writeWarmKey writes a member key's text form, as the member's Secret holds it, into a file.
func writeWarmKey(t testing.TB, key []byte) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(file, []byte(warmtoken.EncodeMemberKey(key)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

func bearer(token string) http.Header {
	return http.Header{"Authorization": {"Bearer " + token}}
}

// startWarmServer runs a warm member with the key of member 0; its logs are kept (logsOf).
func startWarmServer(t *testing.T) *testServer {
	t.Helper()
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	return startServerLogging(t, Config{WarmKeyFile: writeWarmKey(t, sandboxdtest.WarmMemberKey(t, 0))}, options{}, logger)
}

// wantRefused checks that every MCP endpoint (and /metrics) answers 401, with the usual challenge, to header.
func wantRefused(t *testing.T, url string, header http.Header) {
	t.Helper()
	for _, ep := range []struct{ method, path string }{{"GET", "/sse"}, {"POST", "/message?sessionid=x"}, {"POST", "/mcp"}, {"GET", "/metrics"}} {
		var code int
		var body string
		if ep.method == "GET" {
			code, body = get(t, url+ep.path, header)
		} else {
			code, body = sandboxdtest.Post(t, url+ep.path, "application/json", sandboxdtest.InitializeRequest, header)
		}
		if code != http.StatusUnauthorized || !strings.Contains(body, "Authorization: Bearer") {
			t.Errorf("%s %s = %d %q, want 401", ep.method, ep.path, code, body)
		}
	}
	// The challenge, as without warm mode.
	req, _ := http.NewRequest(http.MethodPost, url+"/mcp", strings.NewReader(sandboxdtest.InitializeRequest))
	for k, v := range header {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req.WithContext(t.Context()))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := resp.Header.Get("WWW-Authenticate"); got != `Bearer realm="airlock-sandboxd"` {
		t.Errorf("WWW-Authenticate = %q", got)
	}
}

// logsOf returns what the test server logged so far.
func logsOf(ts *testServer) string {
	return ts.logger.GetSink().(ktesting.Underlier).GetBuffer().String()
}

// TestWarmMember walks a member through its life: it serves nobody, its probes answer, forged and
// garbage tokens neither pass nor adopt, the first valid token adopts it with its tools, and
// another valid token is refused afterwards.
func TestWarmMember(t *testing.T) {
	ts := startWarmServer(t)
	key := sandboxdtest.WarmMemberKey(t, 0)

	// Ready before adoption: the pool counts it. (/metrics needs the adopting token: wantRefused.)
	for _, p := range []string{"/healthz", "/readyz"} {
		if code, _ := get(t, ts.url+p, nil); code != http.StatusOK {
			t.Errorf("GET %s before adoption = %d, want 200", p, code)
		}
	}

	// Nobody is served before adoption: no token, garbage, the wrong scheme, a forged token.
	forged := sandboxdtest.AdoptionToken(t, sandboxdtest.WarmMemberKey(t, 1), "claim-forged", toolnames.Read, toolnames.Bash)
	refused := map[string]http.Header{
		"no token":                      nil,
		"empty bearer":                  {"Authorization": {"Bearer "}},
		"garbage":                       bearer("s3cret-token"),
		"prefix only":                   bearer("aw1."),
		"two dots":                      bearer("aw1..."),
		"binary":                        bearer("aw1.\xff\xfe.\xc3"),
		"huge":                          bearer("aw1." + strings.Repeat("A", 40<<10) + ".x"),
		"basic scheme":                  {"Authorization": {"Basic " + sandboxdtest.AdoptionToken(t, key, "claim-basic", toolnames.Read)}},
		"no scheme":                     {"Authorization": {sandboxdtest.AdoptionToken(t, key, "claim-noscheme", toolnames.Read)}},
		"another member's key":          bearer(forged),
		"tampered":                      bearer(tampered(sandboxdtest.AdoptionToken(t, key, "claim-1", toolnames.Read))),
		"token of an unknown tool only": bearer(sandboxdtest.AdoptionToken(t, key, "claim-newer", "WebFetch")),
	}
	for name, h := range refused {
		t.Run(name, func(t *testing.T) { wantRefused(t, ts.url, h) })
	}
	if a := ts.guard.Adopted(); a != "" {
		t.Fatalf("adopted by %s before any valid token", a)
	}

	// The first valid token adopts: the official SDK client over SSE lists exactly its tools
	// (the unknown name ignored) and may call them, and no other.
	tok := sandboxdtest.AdoptionToken(t, key, "claim-1", toolnames.Glob, toolnames.Read, toolnames.Grep, "WebFetch")
	client := &http.Client{Transport: headerTransport{"Authorization": "Bearer " + tok}}
	cs := connect(t, &mcp.SSEClientTransport{Endpoint: ts.url + "/sse", HTTPClient: client}, nil)
	got := toolNames(t, cs)
	slices.Sort(got)
	if want := []string{toolnames.Glob, toolnames.Grep, toolnames.Read}; !slices.Equal(got, want) {
		t.Errorf("tools/list = %v, want %v", got, want)
	}
	sandboxdtest.CallOK(t, cs, toolnames.Glob, map[string]any{"pattern": "*"})
	if n := ts.sse.DirectCalls(); n != 1 {
		t.Errorf("direct calls = %d, want the adopted Glob (directcall.go)", n)
	}
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	if res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: toolnames.Bash, Arguments: map[string]any{"command": "touch pwned"}}); err == nil {
		t.Errorf("Bash, not in the token, was called: %+v", res)
	}
	if n := ts.sse.DirectCalls(); n != 1 {
		t.Errorf("direct calls = %d after Bash, want 1: a tool not adopted is not in the direct table", n)
	}
	if _, err := os.Stat(filepath.Join(ts.ws, "pwned")); err == nil {
		t.Error("Bash ran")
	}

	// The same token on the other transport: accepted.
	cs2 := connect(t, &mcp.StreamableClientTransport{Endpoint: ts.url + "/mcp", HTTPClient: client}, nil)
	sandboxdtest.CallOK(t, cs2, toolnames.Glob, map[string]any{"pattern": "*"})

	// Another valid token (another claim, or the same claim with more tools) is refused now.
	for name, other := range map[string]string{
		"another claim":        sandboxdtest.AdoptionToken(t, key, "claim-2", toolnames.Glob, toolnames.Read, toolnames.Grep, "WebFetch"),
		"more tools":           sandboxdtest.AdoptionToken(t, key, "claim-1", toolnames.Bash, toolnames.Glob, toolnames.Read, toolnames.Grep, "WebFetch"),
		"another member's key": forged,
		"the token, truncated": tok[:len(tok)-1],
	} {
		t.Run("after adoption/"+name, func(t *testing.T) { wantRefused(t, ts.url, bearer(other)) })
	}
	sandboxdtest.CallOK(t, cs, toolnames.Glob, map[string]any{"pattern": "*"})

	// Metrics: the adopted tools' series (Grep's at zero, started at adoption), none of the others.
	_, metrics := get(t, ts.url+"/metrics", bearer(tok))
	if !strings.Contains(metrics, `tool="Grep"`) || strings.Contains(metrics, `tool="Bash"`) || strings.Contains(metrics, "WebFetch") {
		t.Errorf("metrics name other tools than the adopted ones:\n%s", grepLines(metrics, "tool="))
	}

	// One adoption logged, with the claim; another valid token logged at V(2); no token ever.
	logs := logsOf(ts)
	if n := strings.Count(logs, "Adopted claimUID="); n != 1 || !strings.Contains(logs, `Adopted claimUID="claim-1"`) {
		t.Errorf("want one \"Adopted\" log with the claim UID, got %d:\n%s", n, logs)
	}
	if !strings.Contains(logs, `claimUID="claim-2"`) {
		t.Errorf("the refused token of claim-2 is not logged")
	}
	if !strings.Contains(logs, "Refused an adoption") {
		t.Errorf("the refused adoption (no known tool) is not logged")
	}
	for _, secret := range []string{tok, forged, strings.SplitN(tok, ".", 3)[2]} {
		if strings.Contains(logs, secret) {
			t.Errorf("a token is in the logs")
		}
	}
}

// tampered changes one character of an adoption token's payload.
func tampered(tok string) string {
	i := len("aw1.") + 5
	c := byte('A')
	if tok[i] == 'A' {
		c = 'B'
	}
	return tok[:i] + string(c) + tok[i+1:]
}

func grepLines(s, substr string) string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		if strings.Contains(line, substr) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// TestWarmAdoptionRaceHTTP: the same race through a real server: two initialize requests with two
// valid tokens at once; one is served (200), the other refused (401).
func TestWarmAdoptionRaceHTTP(t *testing.T) {
	ts := startWarmServer(t)
	key := sandboxdtest.WarmMemberKey(t, 0)
	tokens := []string{sandboxdtest.AdoptionToken(t, key, "claim-a", toolnames.Read), sandboxdtest.AdoptionToken(t, key, "claim-b", toolnames.Grep)}
	codes := make([]int, len(tokens))
	errs := make([]error, len(tokens))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, tok := range tokens {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, ts.url+"/mcp", strings.NewReader(sandboxdtest.InitializeRequest))
		if err != nil {
			t.Fatal(err)
		}
		req.Header = bearer(tok)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		wg.Go(func() {
			<-start
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				errs[i] = err
				return
			}
			resp.Body.Close()
			codes[i] = resp.StatusCode
		})
	}
	close(start)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(codes)
	if !slices.Equal(codes, []int{http.StatusOK, http.StatusUnauthorized}) {
		t.Fatalf("codes = %v, want one 200 and one 401", codes)
	}
	if n := strings.Count(logsOf(ts), "Adopted claimUID="); n != 1 {
		t.Errorf("%d adoptions logged, want 1", n)
	}
}

// TestWarmRestartAdoptsAgain: the lock is in memory; a new process (here, a new server on the
// same key) is adopted by the next token that verifies.
func TestWarmRestartAdoptsAgain(t *testing.T) {
	key := sandboxdtest.WarmMemberKey(t, 0)
	file := writeWarmKey(t, key)
	tok := sandboxdtest.AdoptionToken(t, key, "claim-1", toolnames.Read)
	for range 2 {
		ts := startServer(t, Config{WarmKeyFile: file}, options{})
		if code, body := sandboxdtest.Post(t, ts.url+"/mcp", "application/json", sandboxdtest.InitializeRequest, bearer(tok)); code != http.StatusOK {
			t.Fatalf("POST /mcp = %d %s, want 200", code, body)
		}
	}
}

func TestWarmBadConfig(t *testing.T) {
	dir := t.TempDir()
	keyFile := writeWarmKey(t, sandboxdtest.WarmMemberKey(t, 0))
	tokenFile := filepath.Join(dir, "token")
	bad := filepath.Join(dir, "bad")
	short := filepath.Join(dir, "short")
	for file, data := range map[string]string{tokenFile: "s3cret\n", bad: "not a key\n", short: warmtoken.EncodeMemberKey(make([]byte, 16))} {
		if err := os.WriteFile(file, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tests := map[string]struct {
		cfg  Config
		want string
	}{
		"missing key file": {cfg: Config{WarmKeyFile: filepath.Join(dir, "nope")}, want: "warm key file"},
		"not a key":        {cfg: Config{WarmKeyFile: bad}, want: "member key"},
		"short key":        {cfg: Config{WarmKeyFile: short}, want: "member key"},
		"key is a token":   {cfg: Config{WarmKeyFile: tokenFile}, want: "member key"},
		"with a token":     {cfg: Config{WarmKeyFile: keyFile, AuthTokenFile: tokenFile}, want: "auth token file"},
		"with tools":       {cfg: Config{WarmKeyFile: keyFile, AllowedTools: []string{toolnames.Read}}, want: "allowed tools"},
		"with read-only":   {cfg: Config{WarmKeyFile: keyFile, ReadOnly: true}, want: "read-only"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			tt.cfg.Listen = "127.0.0.1:0"
			tt.cfg.Workspace = t.TempDir()
			tt.cfg.StateDir = t.TempDir()
			err := Run(ctx, tt.cfg)
			sandboxdtest.WantErrContaining(t, err, tt.want)
		})
	}
}
