package sandboxd

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/procgroup"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/sandboxdtest"
	"github.com/airlock-dev/airlock/pkg/sandboxstop"
	"github.com/airlock-dev/airlock/pkg/toolnames"
)

func postStop(t *testing.T, url, token string) (int, sandboxstop.Response) {
	t.Helper()
	h := http.Header{}
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
	code, body := sandboxdtest.Post(t, url+"/stop", "application/json", "", h)
	var resp sandboxstop.Response
	if code != http.StatusUnauthorized {
		if err := json.Unmarshal([]byte(body), &resp); err != nil {
			t.Fatalf("POST /stop = %d %q: not JSON: %v", code, body, err)
		}
	}
	return code, resp
}

// TestStopEndsEverything: POST /stop needs the token; it ends a call in flight (its processes
// die), stops the container's other processes once (the namespace stop replaced: the test is
// not PID 1; procgroup's tests run the real one in a PID namespace of their own), answers 200,
// and from then on sandboxd is not ready and runs no tool call, on either transport, while a
// second stop answers the same.
func TestStopEndsEverything(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("tok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, Config{AuthTokenFile: tokenFile}, options{})
	var stops atomic.Int32
	ts.stopper.stopAll = func(ctx context.Context) (int, error) {
		if _, ok := ctx.Deadline(); !ok {
			t.Error("the namespace stop got no deadline")
		}
		stops.Add(1)
		return 2, nil
	}
	client := &http.Client{Transport: headerTransport{"Authorization": "Bearer tok"}}
	cs := connect(t, &mcp.StreamableClientTransport{Endpoint: ts.url + "/mcp", HTTPClient: client, MaxRetries: -1}, nil)
	sse := connect(t, &mcp.SSEClientTransport{Endpoint: ts.url + "/sse", HTTPClient: client}, nil)
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: toolnames.Bash, Arguments: map[string]any{
			"command": "echo $$ > leader.pid; sleep 300 & echo $! > bg.pid; wait",
		}})
		done <- err
	}()
	pids := []int{sandboxdtest.ReadPID(t, filepath.Join(ts.ws, "leader.pid")), sandboxdtest.ReadPID(t, filepath.Join(ts.ws, "bg.pid"))}

	for _, bad := range []string{"", "nope"} {
		if code, _ := postStop(t, ts.url, bad); code != http.StatusUnauthorized {
			t.Fatalf("POST /stop with token %q = %d, want 401", bad, code)
		}
	}
	if code, _ := get(t, ts.url+"/stop", http.Header{"Authorization": {"Bearer tok"}}); code != http.StatusMethodNotAllowed {
		t.Errorf("GET /stop = %d, want 405", code)
	}
	code, resp := postStop(t, ts.url, "tok")
	if code != http.StatusOK || !resp.Stopped || resp.Killed != 2 {
		t.Fatalf("POST /stop = %d %+v, want 200 stopped, killed 2", code, resp)
	}
	select {
	case <-done: // ended with its session (an error, or a result the model reads)
	case <-time.After(testTimeout):
		t.Fatal("the call in flight did not end with the stop")
	}
	sandboxdtest.WaitDead(t, pids...)
	if code, _ := get(t, ts.url+"/readyz", nil); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz after the stop = %d, want 503", code)
	}
	for name, session := range map[string]*mcp.ClientSession{"streamable": cs, "sse": sse} {
		ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
		res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: toolnames.Write, Arguments: map[string]any{"file_path": "after.txt", "content": "x"}})
		cancel()
		if err == nil && !res.IsError {
			t.Errorf("%s: a Write after the stop succeeded", name)
		}
	}
	if _, err := os.Stat(filepath.Join(ts.ws, "after.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a file was written after the stop: %v", err)
	}
	if code, _ := sandboxdtest.Post(t, ts.url+"/mcp", "application/json", sandboxdtest.InitializeRequest, http.Header{"Authorization": {"Bearer tok"}}); code != http.StatusServiceUnavailable {
		t.Errorf("a new session after the stop = %d, want 503", code)
	}
	if code, again := postStop(t, ts.url, "tok"); code != http.StatusOK || again != resp {
		t.Errorf("a second POST /stop = %d %+v, want the first's answer %+v", code, again, resp)
	}
	if n := stops.Load(); n != 1 {
		t.Errorf("the namespace was stopped %d times, want once", n)
	}
}

// TestStopRefusedWhenNotInit: a sandboxd that is not its container's first process cannot stop
// every process; it says so (409), and the operator leaves the pod to the kubelet.
func TestStopRefusedWhenNotInit(t *testing.T) {
	ts := startServer(t, Config{}, options{})
	code, resp := postStop(t, ts.url, "")
	if code != http.StatusConflict || resp.Stopped || resp.Error != "not_init" || resp.Message == "" {
		t.Fatalf("POST /stop in a process that is not PID 1 = %d %+v, want 409 not_init", code, resp)
	}
	if procgroup.IsInit() {
		t.Fatal("the test process is PID 1")
	}
}
