package sandboxd

import (
	"fmt"
	"net/http"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/sandboxdtest"
	"github.com/airlock-dev/airlock/pkg/toolnames"
)

// goroutineSlack is how many goroutines above the baseline a finished test
// may still see for a moment (runtime and net/http housekeeping). A leaked
// session costs several goroutines, so leaking a tenth of the sessions of
// these tests shows.
const goroutineSlack = 4

// waitGoroutines waits (bounded) until the process is back to at most
// baseline+goroutineSlack goroutines, closing idle client connections (each
// holds goroutines on both ends) as it goes.
func waitGoroutines(t *testing.T, baseline int) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for {
		http.DefaultClient.CloseIdleConnections()
		n := runtime.NumGoroutine()
		if n <= baseline+goroutineSlack {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			t.Fatalf("%d goroutines, baseline %d: something leaked\n%s", n, baseline, buf)
		}
		time.Sleep(10 * time.Millisecond) // goroutines end asynchronously: poll the count
	}
}

// waitIdle waits (bounded) until the server holds no session and runs no
// process.
func waitIdle(t *testing.T, ts *testServer) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for ts.sse.Open() != 0 || countSessions(ts.mcp) != 0 || ts.tb.ProcessGroups() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("server not idle: %d SSE sessions, %d MCP sessions, %d process groups", ts.sse.Open(), countSessions(ts.mcp), ts.tb.ProcessGroups())
		}
		time.Sleep(10 * time.Millisecond) // the server notices closed connections asynchronously
	}
}

// TestConcurrentSessions runs 100 sessions at once, half on each transport,
// each with its own files and commands, then checks that closing them frees
// every session and goroutine.
func TestConcurrentSessions(t *testing.T) {
	const sessions = 100
	ts := startServer(t, Config{}, options{})
	http.DefaultClient.CloseIdleConnections()
	baseline := runtime.NumGoroutine()

	var connected, finished sync.WaitGroup
	release := make(chan struct{})
	errs := make(chan error, sessions)
	for i := range sessions {
		connected.Add(1)
		finished.Go(func() {
			var tr mcp.Transport = &mcp.SSEClientTransport{Endpoint: ts.url + "/sse"}
			var opts *mcp.ClientSessionOptions
			if i%2 == 1 { // a session of the newest stateful revision (2026-07-28 has none)
				tr = &mcp.StreamableClientTransport{Endpoint: ts.url + "/mcp", DisableStandaloneSSE: true}
				opts = &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"}
			}
			cs, err := mcp.NewClient(&mcp.Implementation{Name: fmt.Sprintf("c%d", i), Version: "v0"}, nil).Connect(t.Context(), tr, opts)
			connected.Done()
			if err != nil {
				errs <- fmt.Errorf("session %d: connect: %v", i, err)
				return
			}
			defer cs.Close()
			<-release // every session is open before any works
			file := fmt.Sprintf("s%03d.txt", i)
			steps := []struct {
				tool string
				args map[string]any
				want string
			}{
				{toolnames.Write, map[string]any{"file_path": file, "content": fmt.Sprintf("session %d\n", i)}, "Created " + file},
				{toolnames.Read, map[string]any{"file_path": file}, fmt.Sprintf("     1\tsession %d\n", i)},
				{toolnames.Bash, map[string]any{"command": "cat " + file}, fmt.Sprintf("session %d\n", i)},
				{toolnames.Grep, map[string]any{"pattern": fmt.Sprintf("^session %d$", i), "output_mode": "files_with_matches"}, file + "\n"},
			}
			for _, s := range steps {
				res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: s.tool, Arguments: s.args})
				if err != nil {
					errs <- fmt.Errorf("session %d: %s: %v", i, s.tool, err)
					return
				}
				if got := sandboxdtest.ContentText(res); res.IsError || !strings.HasPrefix(got, s.want) {
					errs <- fmt.Errorf("session %d: %s answered %q (isError %v), want %q", i, s.tool, got, res.IsError, s.want)
					return
				}
			}
		})
	}
	waitDone(t, &connected)
	if n := countSessions(ts.mcp); n != sessions {
		t.Errorf("%d MCP sessions open at once, want %d", n, sessions)
	}
	if n := ts.sse.Open(); n != sessions/2 {
		t.Errorf("%d SSE streams open at once, want %d", n, sessions/2)
	}
	close(release)
	waitDone(t, &finished)
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	waitIdle(t, ts)
	waitGoroutines(t, baseline)
}

// TestVanishingClientsFreeEverything: clients that drop their SSE stream in
// the middle of a Bash call leave no process, session, stream or goroutine
// behind.
func TestVanishingClientsFreeEverything(t *testing.T) {
	const clients = 20
	ts := startServer(t, Config{}, options{})
	http.DefaultClient.CloseIdleConnections()
	baseline := runtime.NumGoroutine()

	var pids []int
	for i := range clients {
		s, endpoint := sandboxdtest.RawSession(t, ts.url)
		sandboxdtest.Post(t, endpoint, "application/json", sandboxdtest.InitializeRequest, nil)
		s.Next(t)
		sandboxdtest.Post(t, endpoint, "application/json", `{"jsonrpc":"2.0","method":"notifications/initialized"}`, nil)
		call := fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"Bash","arguments":{"command":"sleep 300 & echo $! > v%d.pid; wait"}}}`, i)
		if code, _ := sandboxdtest.Post(t, endpoint, "application/json", call, nil); code != http.StatusAccepted {
			t.Fatalf("client %d: tools/call POST = %d", i, code)
		}
		pids = append(pids, sandboxdtest.ReadPID(t, filepath.Join(ts.ws, fmt.Sprintf("v%d.pid", i))))
		s.Close() // gone, mid-call
	}
	sandboxdtest.WaitDead(t, pids...)
	waitIdle(t, ts)
	waitGoroutines(t, baseline)
}

func waitDone(t *testing.T, wg *sync.WaitGroup) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * testTimeout):
		t.Fatal("the sessions did not finish in time")
	}
}
