package sandboxd

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/sandboxdtest"
	"github.com/airlock-dev/airlock/pkg/toolnames"
)

// waitMetric waits (bounded) until /metrics shows line.
func waitMetric(t *testing.T, url, line string) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for {
		_, body := get(t, url+"/metrics", nil)
		if strings.Contains(body, line) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("/metrics never showed %q", line)
		}
		time.Sleep(10 * time.Millisecond) // the call is counted when its handler returns
	}
}

// TestCancelKillsTheCallsProcesses cancels a running Bash call from the
// client on both transports and every kind of /mcp (the SDK's client sends
// notifications/cancelled on SSE and in a 2025-11-25 session, and closes
// the POST of a 2026-07-28 call): the command's whole process group dies.
// Each call took the direct path of its transport.
func TestCancelKillsTheCallsProcesses(t *testing.T) {
	ts := startServer(t, Config{}, options{})
	for i, transport := range []string{"sse", "streamable", "streamable2025"} {
		t.Run(transport, func(t *testing.T) {
			var cs *mcp.ClientSession
			switch transport {
			case "sse":
				cs = connectSSE(t, ts.url, nil)
			case "streamable":
				cs = connectStreamable(t, ts.url, nil)
			default:
				cs = connectStreamable(t, ts.url, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
			}
			direct := ts.sse.DirectCalls() + ts.streamable.DirectTaken()
			dir := fmt.Sprintf("c%d", i)
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error, 1)
			go func() {
				_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: toolnames.Bash, Arguments: map[string]any{
					"command": fmt.Sprintf("mkdir -p %[1]s; echo $$ > %[1]s/leader.pid; sleep 300 & echo $! > %[1]s/bg.pid; wait", dir),
				}})
				done <- err
			}()
			pids := []int{sandboxdtest.ReadPID(t, filepath.Join(ts.ws, dir, "leader.pid")), sandboxdtest.ReadPID(t, filepath.Join(ts.ws, dir, "bg.pid"))}
			cancel()
			select {
			case err := <-done:
				if !errors.Is(err, context.Canceled) {
					t.Errorf("CallTool returned %v, want context.Canceled", err)
				}
			case <-time.After(testTimeout):
				t.Fatal("CallTool did not return")
			}
			sandboxdtest.WaitDead(t, pids...)
			if n := ts.sse.DirectCalls() + ts.streamable.DirectTaken() - direct; n != 1 {
				t.Errorf("direct calls = %d, want 1", n)
			}
			waitMetric(t, ts.url, fmt.Sprintf(`airlock_sandboxd_tool_calls_total{result="canceled",tool="Bash"} %d`, i+1))
			// The session goes on.
			sandboxdtest.CallOK(t, cs, toolnames.Bash, map[string]any{"command": "true"})
		})
	}
}

// TestClientVanishesMidCall: a client whose SSE stream goes away while its
// Bash call runs gets its processes killed and its session freed.
func TestClientVanishesMidCall(t *testing.T) {
	ts := startServer(t, Config{}, options{})
	s, endpoint := sandboxdtest.RawSession(t, ts.url)
	sandboxdtest.Post(t, endpoint, "application/json", sandboxdtest.InitializeRequest, nil)
	s.Next(t)
	sandboxdtest.Post(t, endpoint, "application/json", `{"jsonrpc":"2.0","method":"notifications/initialized"}`, nil)
	call := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"Bash","arguments":{"command":"echo $$ > leader.pid; sleep 300 & echo $! > bg.pid; wait"}}}`
	if code, _ := sandboxdtest.Post(t, endpoint, "application/json", call, nil); code != http.StatusAccepted {
		t.Fatalf("POST tools/call = %d", code)
	}
	pids := []int{sandboxdtest.ReadPID(t, filepath.Join(ts.ws, "leader.pid")), sandboxdtest.ReadPID(t, filepath.Join(ts.ws, "bg.pid"))}
	if n := ts.sse.DirectCalls(); n != 1 {
		t.Fatalf("direct calls = %d, want the Bash call (directcall.go)", n)
	}
	s.Close() // the client goes away
	sandboxdtest.WaitDead(t, pids...)
	deadline := time.Now().Add(testTimeout)
	for ts.sse.Open() != 0 || countSessions(ts.mcp) != 0 || ts.tb.ProcessGroups() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("after the client left: %d SSE sessions, %d MCP sessions, %d process groups", ts.sse.Open(), countSessions(ts.mcp), ts.tb.ProcessGroups())
		}
		time.Sleep(10 * time.Millisecond) // the server notices the disconnect asynchronously
	}
	waitMetric(t, ts.url, `airlock_sandboxd_tool_calls_total{result="canceled",tool="Bash"} 1`)
}
