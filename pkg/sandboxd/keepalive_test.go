package sandboxd

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/sandboxdtest"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/wire"
)

// TestKeptConnServesCalls: a light client's calls, one after the other on
// one connection, in a 2025-11-25 session and at 2026-07-28: the first is
// net/http's, the rest the kept loop's, and all are answered; the loop
// ends with the connection.
func TestKeptConnServesCalls(t *testing.T) {
	for _, version := range []string{"2025-11-25", wire.ProtocolStateless} {
		t.Run(version, func(t *testing.T) {
			ts := startServer(t, Config{}, options{})
			sandboxdtest.WriteFile(t, filepath.Join(ts.ws, "a.txt"), "one\ntwo\n")
			c := connectRawStreamable(t, ts.url+"/mcp", version)
			const calls = 20
			for i := range calls {
				text, isErr, err := c.callTool(t.Context(), "Read", map[string]any{"file_path": "a.txt"})
				if err != nil || isErr || !strings.Contains(text, "two") {
					t.Fatalf("call %d: %q %v %v", i, text, isErr, err)
				}
			}
			if got := ts.streamable.KeptTaken(); got != calls-1 {
				t.Errorf("the kept loop served %d calls, want %d (all but the first)", got, calls-1)
			}
			c.hc.CloseIdleConnections()
			sandboxdtest.WaitFor(t, "the kept connection's loop to end", func() bool {
				return ts.streamable.KeptConns() == 0
			})
		})
	}
}

// TestKeptConnShutdown: at shutdown a kept connection that waits is
// closed, and one whose call runs gets the call's answer (cancelled with
// the session) and is closed after it; serve returns.
func TestKeptConnShutdown(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "token")
	sandboxdtest.WriteFile(t, tokenFile, "tok")
	ws := filepath.Join(t.TempDir(), "ws")
	sandboxdtest.WriteFile(t, filepath.Join(ws, "a.txt"), "one\ntwo\n")
	s, err := newServer(Config{Workspace: ws, StateDir: t.TempDir(), AuthTokenFile: tokenFile, ShutdownGrace: 5 * time.Second}, defaultOptions(), klog.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	host, stop := serveOn(t, s)
	ts := &testServer{server: s, url: "http://" + host, ws: ws}
	session := sandboxdtest.OpenTokenSession(t, ts.url, "tok")

	idle := sandboxdtest.DialRaw(t, ts.url)
	sandboxdtest.TakeOver(t, ts.url, ts.streamable.KeptTaken, idle, session, "tok")
	busy := sandboxdtest.DialRaw(t, ts.url)
	sandboxdtest.TakeOver(t, ts.url, ts.streamable.KeptTaken, busy, session, "tok")
	started := filepath.Join(ws, "started")
	bash := `{"jsonrpc":"2.0","id":50,"method":"tools/call","params":{"name":"Bash","arguments":{"command":"touch started; sleep 30"}}}`
	if _, err := io.WriteString(busy.C, sandboxdtest.MCPRequest(host, session, "tok", bash)); err != nil {
		t.Fatal(err)
	}
	sandboxdtest.WaitFor(t, "the Bash call to start", func() bool { _, err := os.Stat(started); return err == nil })

	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	a := busy.Send(t, "", 1)[0]
	if a.Status != http.StatusOK || !bytes.Contains(a.Body, []byte(`"id":50`)) {
		t.Errorf("the running call's answer: %d %q", a.Status, a.Body)
	}
	if !busy.Ended(t) {
		t.Error("the busy kept connection stayed open after its answer")
	}
	if !idle.Ended(t) {
		t.Error("the waiting kept connection stayed open")
	}
	if err := <-stopped; err != nil {
		t.Errorf("serve: %v", err)
	}
	if n := s.streamable.KeptConns(); n != 0 {
		t.Errorf("%d kept connections left", n)
	}
}
