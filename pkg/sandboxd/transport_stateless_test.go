package sandboxd

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/sandboxdtest"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/wire"
	"github.com/airlock-dev/airlock/pkg/toolnames"
)

// TestStatelessRevisionThroughTheSDK: the official Go SDK's client (v1.8.0)
// asking for 2026-07-28 gets it on /mcp (server/discover, no initialize,
// no session), and the tools work; one asking for 2025-11-25 still gets a
// session of that revision.
func TestStatelessRevisionThroughTheSDK(t *testing.T) {
	ts := startServer(t, Config{}, options{})
	cs := connectStreamable(t, ts.url, &mcp.ClientSessionOptions{ProtocolVersion: wire.ProtocolStateless})
	if got := cs.InitializeResult().ProtocolVersion; got != wire.ProtocolStateless {
		t.Fatalf("negotiated %q, want %s (server/discover, not the initialize fallback)", got, wire.ProtocolStateless)
	}
	if id := cs.ID(); id != "" {
		t.Errorf("a stateless client has session id %q", id)
	}
	res, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Tools) != len(toolnames.All()) {
		t.Errorf("tools/list gave %d tools, want %d", len(res.Tools), len(toolnames.All()))
	}
	sandboxdtest.CallOK(t, cs, "Write", map[string]any{"file_path": "a.txt", "content": "one\n"})
	// The read mark lives in the sandbox, not in a session: a Read in one
	// request lets an Edit in another change the file.
	sandboxdtest.CallOK(t, cs, "Read", map[string]any{"file_path": "a.txt"})
	sandboxdtest.CallOK(t, cs, "Edit", map[string]any{"file_path": "a.txt", "old_string": "one", "new_string": "two"})
	sandboxdtest.CheckFile(t, filepath.Join(ts.ws, "a.txt"), "two\n")

	old := connectStreamable(t, ts.url, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if got := old.InitializeResult().ProtocolVersion; got != "2025-11-25" {
		t.Errorf("a 2025-11-25 client negotiated %q", got)
	}
	if old.ID() == "" {
		t.Error("a 2025-11-25 client has no session")
	}
	if text := sandboxdtest.CallOK(t, old, "Read", map[string]any{"file_path": "a.txt"}); !strings.Contains(text, "two") {
		t.Errorf("Read over 2025-11-25 = %q", text)
	}
}

// TestStatelessRequestsCounted: requests of the stateless revision, which
// open no session, are counted by method in
// airlock_sandboxd_stateless_requests_total, a method sandboxd does not name
// as "other" (a client's method names never become labels); a session's
// requests are not counted there.
func TestStatelessRequestsCounted(t *testing.T) {
	ts := startServer(t, Config{}, options{})
	session := connectStreamable(t, ts.url, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	sandboxdtest.CallOK(t, session, toolnames.LS, map[string]any{})
	for _, req := range []sandboxdtest.RPC{
		{Method: "server/discover"},
		{Method: "tools/list"},
		{Method: "tools/call", Name: toolnames.LS, Params: map[string]any{"name": toolnames.LS, "arguments": map[string]any{}}},
		{Method: "tools/call", Name: toolnames.Glob, Params: map[string]any{"name": toolnames.Glob, "arguments": map[string]any{"pattern": "*"}}},
		{Method: "no/such-method-x"},
	} {
		req.Call(t, ts.url)
	}
	_, body := get(t, ts.url+"/metrics", nil)
	for _, want := range []string{
		`airlock_sandboxd_stateless_requests_total{method="server/discover"} 1`,
		`airlock_sandboxd_stateless_requests_total{method="tools/list"} 1`,
		`airlock_sandboxd_stateless_requests_total{method="tools/call"} 2`,
		`airlock_sandboxd_stateless_requests_total{method="other"} 1`,
		`airlock_sandboxd_stateless_requests_total{method="tasks/get"} 0`,
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("/metrics has no %q", want)
		}
	}
	if strings.Contains(body, "such-method") {
		t.Error("a client's method name became a label")
	}
}

// TestCapabilitiesDeclareWhatIsAnswered: sandboxd answers prompts/list and
// resources/list (empty: it has none) and declares both, on every revision:
// server/discover at 2026-07-28, initialize before it.
func TestCapabilitiesDeclareWhatIsAnswered(t *testing.T) {
	ts := startServer(t, Config{}, options{})
	disc := sandboxdtest.Result(t, sandboxdtest.RPC{Method: "server/discover"}.Call(t, ts.url))
	caps, _ := disc["capabilities"].(map[string]any)
	for _, c := range []string{"tools", "prompts", "resources"} {
		if _, ok := caps[c]; !ok {
			t.Errorf("server/discover capabilities = %v, without %s", caps, c)
		}
	}
	for method, key := range map[string]string{"prompts/list": "prompts", "resources/list": "resources"} {
		res := sandboxdtest.Result(t, sandboxdtest.RPC{Method: method}.Call(t, ts.url))
		if list, ok := res[key].([]any); !ok || len(list) != 0 {
			t.Errorf("%s = %v, want an empty %s", method, res, key)
		}
	}
	cs := connectStreamable(t, ts.url, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	init := cs.InitializeResult()
	if init.Capabilities.Prompts == nil || init.Capabilities.Resources == nil || init.Capabilities.Tools == nil {
		t.Errorf("initialize capabilities = %+v, want tools, prompts and resources", init.Capabilities)
	}
}
