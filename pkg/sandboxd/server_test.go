package sandboxd

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"k8s.io/klog/v2/ktesting"
)

// testTimeout bounds every wait in these tests; nothing should come close.
const testTimeout = 30 * time.Second

// testServer is a real sandboxd serving on a loopback port.
type testServer struct {
	*server
	url string // http://127.0.0.1:port
	ws  string // the workspace
}

// startServer runs a sandboxd for cfg (its Workspace made fresh when empty)
// on 127.0.0.1, and shuts it down when the test ends, failing the test if
// that does not finish in time.
func startServer(t testing.TB, cfg Config, opts options) *testServer {
	t.Helper()
	logger := logr.Discard() // benchmarks would print every log line
	if _, bench := t.(*testing.B); !bench {
		logger, _ = ktesting.NewTestContext(t)
	}
	return startServerLogging(t, cfg, opts, logger)
}

// startServerLogging is startServer with the given logger.
func startServerLogging(t testing.TB, cfg Config, opts options, logger logr.Logger) *testServer {
	t.Helper()
	if cfg.Workspace == "" {
		cfg.Workspace = filepath.Join(t.TempDir(), "ws")
		if err := os.Mkdir(cfg.Workspace, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if cfg.StateDir == "" {
		cfg.StateDir = t.TempDir() // not the user's cache directory
	}
	if cfg.ShutdownGrace == 0 {
		cfg.ShutdownGrace = 5 * time.Second
	}
	if opts == (options{}) {
		opts = defaultOptions()
	}
	s, err := newServer(cfg, opts, logger)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve: %v", err)
			}
		case <-time.After(cfg.ShutdownGrace + testTimeout):
			t.Errorf("sandboxd did not shut down")
		}
		s.close()
	})
	return &testServer{server: s, url: "http://" + ln.Addr().String(), ws: cfg.Workspace}
}

// serveOn serves s on a fresh loopback listener until stop, which returns
// serve's error, or an error of its own if serve does not return in time
// (stop may run in any goroutine).
func serveOn(t *testing.T, s *server) (addr string, stop func() error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	done := make(chan error, 1)
	go func() { done <- s.serve(ctx, ln) }()
	return ln.Addr().String(), func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(testTimeout):
			return errors.New("serve did not return")
		}
	}
}

// connectSSE connects the official Go SDK's SSE client.
func connectSSE(t testing.TB, url string, opts *mcp.ClientSessionOptions) *mcp.ClientSession {
	t.Helper()
	return connect(t, &mcp.SSEClientTransport{Endpoint: url + "/sse"}, opts)
}

// connectStreamable connects the official Go SDK's Streamable HTTP client.
func connectStreamable(t testing.TB, url string, opts *mcp.ClientSessionOptions) *mcp.ClientSession {
	t.Helper()
	return connect(t, &mcp.StreamableClientTransport{Endpoint: url + "/mcp"}, opts)
}

func connect(t testing.TB, tr mcp.Transport, opts *mcp.ClientSessionOptions) *mcp.ClientSession {
	t.Helper()
	// The SSE client's stream lives on the context given to Connect: it must
	// outlast the session, so the wait for Connect is bounded separately.
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	client := mcp.NewClient(&mcp.Implementation{Name: "sandboxd-test", Version: "v0"}, nil)
	type result struct {
		cs  *mcp.ClientSession
		err error
	}
	ch := make(chan result, 1)
	go func() {
		cs, err := client.Connect(ctx, tr, opts)
		ch <- result{cs, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("connect: %v", r.err)
		}
		t.Cleanup(func() { r.cs.Close() })
		return r.cs
	case <-time.After(testTimeout):
		cancel()
		t.Fatal("connect did not finish in time")
		return nil
	}
}

// callTool calls a tool and returns its result, failing on a protocol error.
func callTool(t testing.TB, cs *mcp.ClientSession, name string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return res
}

// callOK calls a tool that must succeed and returns the text it answered.
func callOK(t testing.TB, cs *mcp.ClientSession, name string, args map[string]any) string {
	t.Helper()
	res := callTool(t, cs, name, args)
	text := contentText(res)
	if res.IsError {
		t.Fatalf("%s(%v) failed: %s", name, args, text)
	}
	return text
}

func contentText(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func toolNames(t testing.TB, cs *mcp.ClientSession) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	res, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatalf("tools/list: %v", err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
	}
	return names
}

// sseEvent is one event read off an SSE stream by the raw tests.
type sseEvent struct {
	name, data, id string
	comment        string // a comment line, for keepalives
}

// sseStream reads events off a raw SSE response.
type sseStream struct {
	resp   *http.Response
	events chan sseEvent
	done   chan struct{}
}

// openSSE opens GET /sse by hand.
func openSSE(t testing.TB, url string, header http.Header) *sseStream {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url+"/sse", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header = header.Clone()
	if req.Header == nil {
		req.Header = http.Header{}
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	s := &sseStream{resp: resp, events: make(chan sseEvent, 100), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		defer close(s.events)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 8<<20)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev != (sseEvent{}) {
					s.events <- ev
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, ":"):
				ev.comment = strings.TrimSpace(line[1:])
			default:
				k, v, _ := strings.Cut(line, ":")
				v = strings.TrimPrefix(v, " ")
				switch k {
				case "event":
					ev.name = v
				case "data":
					ev.data += v
				case "id":
					ev.id = v
				}
			}
		}
	}()
	t.Cleanup(s.close)
	return s
}

func (s *sseStream) close() {
	s.resp.Body.Close()
	<-s.done
}

// next returns the next event that is not a keepalive comment.
func (s *sseStream) next(t testing.TB) sseEvent {
	t.Helper()
	timeout := time.After(testTimeout)
	for {
		select {
		case ev, ok := <-s.events:
			if !ok {
				t.Fatal("the SSE stream ended")
			}
			if ev.name == "" && ev.data == "" {
				continue // a keepalive
			}
			return ev
		case <-timeout:
			t.Fatal("no SSE event in time")
		}
	}
}

// ended reports whether the stream ends (within the test timeout) without
// another non-comment event.
func (s *sseStream) ended(t testing.TB) bool {
	t.Helper()
	timeout := time.After(testTimeout)
	for {
		select {
		case ev, ok := <-s.events:
			if !ok {
				return true
			}
			if ev.name != "" || ev.data != "" {
				t.Errorf("unexpected event %+v", ev)
				return false
			}
		case <-timeout:
			return false
		}
	}
}

// post POSTs body to url and returns the status and response body.
func post(t testing.TB, url, contentType, body string, header http.Header) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if h := header.Get("Host"); h != "" {
		req.Host = h
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatal(err)
	}
	return resp.StatusCode, string(data)
}
