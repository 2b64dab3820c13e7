package sandboxd

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"k8s.io/klog/v2/ktesting"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/sandboxdtest"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/wire"
	"github.com/airlock-dev/airlock/pkg/toolnames"
)

func get(t *testing.T, url string, header http.Header) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if h := header.Get("Host"); h != "" {
		req.Host = h
	}
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.Header.Get("Content-Type") == "text/event-stream" {
		return resp.StatusCode, "" // a stream: the status is all we want
	}
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data)
}

func TestAuthToken(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("s3cret-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, Config{AuthTokenFile: tokenFile}, options{})
	tests := []struct {
		name   string
		header string
		want   int
	}{
		{name: "none", header: "", want: http.StatusUnauthorized},
		{name: "wrong", header: "Bearer nope", want: http.StatusUnauthorized},
		{name: "prefix of the token", header: "Bearer s3cret", want: http.StatusUnauthorized},
		{name: "wrong scheme", header: "Basic s3cret-token", want: http.StatusUnauthorized},
		{name: "right", header: "Bearer s3cret-token", want: http.StatusOK},
		{name: "scheme case", header: "bearer s3cret-token", want: http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			if tt.header != "" {
				h.Set("Authorization", tt.header)
			}
			if code, _ := get(t, ts.url+"/sse", h); code != tt.want {
				t.Errorf("GET /sse = %d, want %d", code, tt.want)
			}
			wantPost := tt.want
			if wantPost == http.StatusOK {
				wantPost = http.StatusNotFound // authorized, but no such session
			}
			if code, _ := sandboxdtest.Post(t, ts.url+"/message?sessionId=x", "application/json", `{"jsonrpc":"2.0","id":1,"method":"ping"}`, h); code != wantPost {
				t.Errorf("POST /message = %d, want %d", code, wantPost)
			}
			if code, _ := sandboxdtest.Post(t, ts.url+"/mcp", "application/json", sandboxdtest.InitializeRequest, h); (code == http.StatusUnauthorized) != (tt.want == http.StatusUnauthorized) {
				t.Errorf("POST /mcp = %d", code)
			}
		})
	}
	// Probes need no token; metrics do (issue 39: TestMetricsNeedTheClaimToken).
	for _, p := range []string{"/healthz", "/readyz"} {
		if code, _ := get(t, ts.url+p, nil); code != http.StatusOK {
			t.Errorf("GET %s without a token = %d, want 200", p, code)
		}
	}
	if code, _ := get(t, ts.url+"/metrics", nil); code != http.StatusUnauthorized {
		t.Errorf("GET /metrics without a token = %d, want 401", code)
	}
	// A real client with the token works.
	client := &http.Client{Transport: headerTransport{"Authorization": "Bearer s3cret-token"}}
	cs := connect(t, &mcp.SSEClientTransport{Endpoint: ts.url + "/sse", HTTPClient: client}, nil)
	sandboxdtest.CallOK(t, cs, toolnames.Glob, map[string]any{"pattern": "*"})
}

// headerTransport adds headers to every request.
type headerTransport map[string]string

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h {
		r.Header.Set(k, v)
	}
	return http.DefaultTransport.RoundTrip(r)
}

func TestBadTokenFiles(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	two := filepath.Join(dir, "two")
	os.WriteFile(empty, []byte(" \n"), 0o600)
	os.WriteFile(two, []byte("a b\n"), 0o600)
	for name, file := range map[string]string{"missing": filepath.Join(dir, "nope"), "empty": empty, "two tokens": two} {
		t.Run(name, func(t *testing.T) {
			if _, err := wire.NewGuard(file); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}

func TestDNSRebindingProtection(t *testing.T) {
	ts := startServer(t, Config{}, options{})
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(ts.url, "http://"))
	tests := []struct {
		name   string
		header http.Header
		want   int
	}{
		{name: "foreign Host", header: http.Header{"Host": {"evil.example.com:" + port}}, want: http.StatusForbidden},
		{name: "localhost Host", header: http.Header{"Host": {"localhost:" + port}}, want: http.StatusOK},
		{name: "foreign Origin", header: http.Header{"Origin": {"http://evil.example.com"}}, want: http.StatusForbidden},
		{name: "null Origin", header: http.Header{"Origin": {"null"}}, want: http.StatusForbidden},
		{name: "same Origin", header: http.Header{"Origin": {ts.url}}, want: http.StatusOK},
		{name: "loopback Origin", header: http.Header{"Origin": {"http://localhost:3000"}}, want: http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if code, _ := get(t, ts.url+"/sse", tt.header); code != tt.want {
				t.Errorf("GET /sse = %d, want %d", code, tt.want)
			}
			code, _ := sandboxdtest.Post(t, ts.url+"/mcp", "application/json", sandboxdtest.InitializeRequest, tt.header)
			if (code == http.StatusForbidden) != (tt.want == http.StatusForbidden) {
				t.Errorf("POST /mcp = %d", code)
			}
		})
	}
}

func TestHealthAndReadiness(t *testing.T) {
	ts := startServer(t, Config{}, options{})
	if code, body := get(t, ts.url+"/healthz", nil); code != http.StatusOK || body != "ok\n" {
		t.Errorf("/healthz = %d %q", code, body)
	}
	if code, _ := get(t, ts.url+"/readyz", nil); code != http.StatusOK {
		t.Errorf("/readyz = %d, want 200", code)
	}
	// No probe file is left behind.
	if entries, _ := os.ReadDir(ts.ws); len(entries) != 0 {
		t.Errorf("workspace holds %v after /readyz", entries)
	}
	// The workspace gone: not ready (and still healthy).
	if err := os.RemoveAll(ts.ws); err != nil {
		t.Fatal(err)
	}
	if code, body := get(t, ts.url+"/readyz", nil); code != http.StatusServiceUnavailable || !strings.Contains(body, "workspace") {
		t.Errorf("/readyz without a workspace = %d %q, want 503 naming the workspace", code, body)
	}
	if code, _ := get(t, ts.url+"/healthz", nil); code != http.StatusOK {
		t.Errorf("/healthz = %d", code)
	}
	if code, _ := get(t, ts.url+"/nope", nil); code != http.StatusNotFound {
		t.Errorf("/nope = %d, want 404", code)
	}
}

func TestMetrics(t *testing.T) {
	ts := startServer(t, Config{}, options{})
	// A client of the newest revision with a session; a stateless one
	// (2026-07-28) beside it has none, and is not counted.
	cs := connectStreamable(t, ts.url, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	stateless := connectStreamable(t, ts.url, nil)
	sandboxdtest.CallOK(t, stateless, toolnames.LS, map[string]any{})
	sandboxdtest.CallOK(t, cs, toolnames.Write, map[string]any{"file_path": "a.txt", "content": "a"})
	sandboxdtest.CallOK(t, cs, toolnames.Read, map[string]any{"file_path": "a.txt"})
	sandboxdtest.CallOK(t, cs, toolnames.Read, map[string]any{"file_path": "a.txt"})
	if res := sandboxdtest.CallTool(t, cs, toolnames.Read, map[string]any{"file_path": "missing"}); !res.IsError {
		t.Fatal("Read of a missing file succeeded")
	}
	// Tools that are not served count as "unknown": names never become
	// labels, however many there are.
	for i := range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: fmt.Sprintf("not-a-tool-%d", i), Arguments: map[string]any{}})
		cancel()
		if err == nil {
			t.Fatal("a call of a tool that is not served succeeded")
		}
	}
	sandboxdtest.CallOK(t, cs, toolnames.Bash, map[string]any{"command": "echo " + sandboxdtest.GitHubPAT})
	_, body := get(t, ts.url+"/metrics", nil)
	if strings.Contains(body, "not-a-tool") || strings.Contains(body, "a.txt") {
		t.Errorf("/metrics has a tool name or path as a label:\n%s", body)
	}
	for _, want := range []string{
		`airlock_sandboxd_tool_calls_total{result="protocol_error",tool="unknown"} 3`,
		`airlock_sandboxd_secrets_scrubbed_total{kind="github_token"} 1`,
		`airlock_sandboxd_secrets_scrubbed_total{kind="private_key"} 0`,
		`airlock_sandboxd_tool_calls_total{result="ok",tool="Read"} 2`,
		`airlock_sandboxd_tool_calls_total{result="error",tool="Read"} 1`,
		`airlock_sandboxd_tool_calls_total{result="ok",tool="Write"} 1`,
		`airlock_sandboxd_tool_calls_total{result="ok",tool="Grep"} 0`,
		`airlock_sandboxd_tool_call_duration_seconds_count{tool="Read"} 3`,
		`airlock_sandboxd_sessions 1`,
		`go_goroutines`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// TestShutdownClosesStreams checks that shutdown ends open SSE and
// Streamable HTTP sessions instead of waiting for them: with an hour of
// grace, serve still returns within the test's bounded wait, with nil.
func TestShutdownClosesStreams(t *testing.T) {
	ws := t.TempDir()
	logger, _ := ktesting.NewTestContext(t)
	s, err := newServer(Config{Workspace: ws, ShutdownGrace: time.Hour}, defaultOptions(), logger)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	addr, stop := serveOn(t, s)
	url := "http://" + addr

	raw := sandboxdtest.OpenSSE(t, url, nil)
	raw.Next(t) // the endpoint
	sseClient := connectSSE(t, url, nil)
	streamClient := connectStreamable(t, url, nil)
	sandboxdtest.CallOK(t, streamClient, toolnames.Glob, map[string]any{"pattern": "*"})

	if err := stop(); err != nil {
		t.Fatalf("serve returned %v", err)
	}
	if !raw.Ended(t) {
		t.Error("the raw SSE stream did not end")
	}
	// (The Streamable HTTP client is not waited for: it retries with
	// backoff, by design, before it gives up.)
	ended := make(chan struct{})
	go func() { sseClient.Wait(); close(ended) }()
	select {
	case <-ended:
	case <-time.After(testTimeout):
		t.Error("the SSE client's session did not end")
	}
	if _, err := net.Dial("tcp", addr); err == nil {
		t.Error("still listening after shutdown")
	}
}
