package sandboxd

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"k8s.io/klog/v2/ktesting"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/sandboxdtest"
)

// testTimeout bounds every wait in these tests; nothing should come close.
const testTimeout = sandboxdtest.Timeout

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
	// Ready, as the kubelet would wait for: the isolation evidence gathered (TestReadyzWaitsForTheEvidence
	// sees the time before it).
	select {
	case <-s.isolated:
	case <-time.After(testTimeout):
		t.Fatal("sandboxd did not gather its isolation evidence")
	}
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
