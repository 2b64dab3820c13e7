package sandboxd

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-dev/airlock/pkg/toolnames"
)

// TestStatelessRevisionThroughTheSDK: the official Go SDK's client (v1.8.0)
// asking for 2026-07-28 gets it on /mcp (server/discover, no initialize,
// no session), and the tools work; one asking for 2025-11-25 still gets a
// session of that revision.
func TestStatelessRevisionThroughTheSDK(t *testing.T) {
	ts := startServer(t, Config{}, options{})
	cs := connectStreamable(t, ts.url, &mcp.ClientSessionOptions{ProtocolVersion: protocolStateless})
	if got := cs.InitializeResult().ProtocolVersion; got != protocolStateless {
		t.Fatalf("negotiated %q, want %s (server/discover, not the initialize fallback)", got, protocolStateless)
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
	callOK(t, cs, "Write", map[string]any{"file_path": "a.txt", "content": "one\n"})
	// The read mark lives in the sandbox, not in a session: a Read in one
	// request lets an Edit in another change the file.
	callOK(t, cs, "Read", map[string]any{"file_path": "a.txt"})
	callOK(t, cs, "Edit", map[string]any{"file_path": "a.txt", "old_string": "one", "new_string": "two"})
	checkFile(t, filepath.Join(ts.ws, "a.txt"), "two\n")

	old := connectStreamable(t, ts.url, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if got := old.InitializeResult().ProtocolVersion; got != "2025-11-25" {
		t.Errorf("a 2025-11-25 client negotiated %q", got)
	}
	if old.ID() == "" {
		t.Error("a 2025-11-25 client has no session")
	}
	if text := callOK(t, old, "Read", map[string]any{"file_path": "a.txt"}); !strings.Contains(text, "two") {
		t.Errorf("Read over 2025-11-25 = %q", text)
	}
}

// statelessPost POSTs one 2026-07-28 request to /mcp with the given headers
// and returns the JSON-RPC response.
func statelessPost(t *testing.T, url string, headers map[string]string, body string) map[string]any {
	t.Helper()
	r := postMCP(t.Context(), t, url, headers, body)
	if _, ok := r.msg["body"]; ok {
		t.Fatalf("HTTP %d, not JSON: %v", r.status, r.msg["body"])
	}
	return r.msg
}

const statelessMeta = `"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}`

// TestStatelessHeaders: server/discover answers the revisions sandboxd
// serves; results say resultType complete; a request whose Mcp-Method,
// Mcp-Name or MCP-Protocol-Version header is missing or disagrees with its
// body is refused with the header-mismatch error, and its tool does not run.
func TestStatelessHeaders(t *testing.T) {
	ts := startServer(t, Config{}, options{})
	good := func(method, name string) map[string]string {
		h := map[string]string{"Mcp-Protocol-Version": protocolStateless, "Mcp-Method": method}
		if name != "" {
			h["Mcp-Name"] = name
		}
		return h
	}

	disc := statelessPost(t, ts.url, good("server/discover", ""), `{"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {`+statelessMeta+`}}`)
	result, _ := disc["result"].(map[string]any)
	versions, _ := result["supportedVersions"].([]any)
	for _, want := range []string{protocolStateless, "2025-11-25", "2024-11-05"} {
		found := false
		for _, v := range versions {
			found = found || v == want
		}
		if !found {
			t.Errorf("server/discover = %v: lacks %s", disc, want)
		}
	}

	write := func(id int, file string) string {
		return `{"jsonrpc": "2.0", "id": ` + string(rune('0'+id)) + `, "method": "tools/call", "params": {"name": "Write", "arguments": {"file_path": "` + file + `", "content": "x"}, ` + statelessMeta + `}}`
	}
	ok := statelessPost(t, ts.url, good("tools/call", "Write"), write(2, "ok.txt"))
	if r, _ := ok["result"].(map[string]any); r == nil || r["resultType"] != "complete" || r["isError"] == true {
		t.Errorf("tools/call = %v, want a complete result", ok)
	}
	checkFile(t, filepath.Join(ts.ws, "ok.txt"), "x")

	for name, tc := range map[string]struct {
		headers map[string]string
		file    string
	}{
		"Mcp-Name names another tool": {headers: good("tools/call", "Read"), file: "name.txt"},
		"no Mcp-Name":                 {headers: good("tools/call", ""), file: "noname.txt"},
		"Mcp-Method another method":   {headers: good("tools/list", "Write"), file: "method.txt"},
		"no Mcp-Method":               {headers: map[string]string{"Mcp-Protocol-Version": protocolStateless, "Mcp-Name": "Write"}, file: "nomethod.txt"},
		"no MCP-Protocol-Version":     {headers: map[string]string{"Mcp-Method": "tools/call", "Mcp-Name": "Write"}, file: "noversion.txt"},
		"MCP-Protocol-Version another revision": {headers: map[string]string{"Mcp-Protocol-Version": "2025-11-25", "Mcp-Method": "tools/call", "Mcp-Name": "Write"},
			file: "otherversion.txt"},
	} {
		t.Run(name, func(t *testing.T) {
			got := statelessPost(t, ts.url, tc.headers, write(3, tc.file))
			e, _ := got["error"].(map[string]any)
			if e == nil || e["code"] != float64(mcp.CodeHeaderMismatch) && e["code"] != float64(-32602) {
				t.Errorf("answer %v, want a header-mismatch (or invalid params) error", got)
			}
			if _, err := os.Stat(filepath.Join(ts.ws, tc.file)); !os.IsNotExist(err) {
				t.Errorf("the refused call wrote %s: %v", tc.file, err)
			}
		})
	}

	// A revision sandboxd does not serve, in header and _meta alike, is
	// refused with the revisions it does serve.
	future := statelessPost(t, ts.url, map[string]string{"Mcp-Protocol-Version": "9999-99-99", "Mcp-Method": "tools/call", "Mcp-Name": "Write"},
		strings.ReplaceAll(write(4, "future.txt"), protocolStateless, "9999-99-99"))
	e, _ := future["error"].(map[string]any)
	data, _ := e["data"].(map[string]any)
	if e == nil || e["code"] != float64(mcp.CodeUnsupportedProtocolVersion) || data["requested"] != "9999-99-99" {
		t.Errorf("an unknown revision: %v, want an unsupported-version error", future)
	}
	if _, err := os.Stat(filepath.Join(ts.ws, "future.txt")); !os.IsNotExist(err) {
		t.Errorf("the call of an unknown revision wrote future.txt: %v", err)
	}
}

// TestStatelessNeedsTheToken: a stateless request is behind the same guard
// as the others: without the claim's bearer token, or with a Host that is
// not the listener's on loopback, it is refused and its tool does not run.
func TestStatelessNeedsTheToken(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("s3cret-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, Config{AuthTokenFile: tokenFile}, options{})
	body := `{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "Write", "arguments": {"file_path": "x.txt", "content": "x"}, ` + statelessMeta + `}}`
	for name, tc := range map[string]struct {
		auth, host string
		want       int
	}{
		"no token":     {want: http.StatusUnauthorized},
		"wrong token":  {auth: "Bearer nope", want: http.StatusUnauthorized},
		"foreign Host": {auth: "Bearer s3cret-token", host: "evil.example", want: http.StatusForbidden},
	} {
		t.Run(name, func(t *testing.T) {
			req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, ts.url+"/mcp", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			req.Header.Set("Mcp-Protocol-Version", protocolStateless)
			req.Header.Set("Mcp-Method", "tools/call")
			req.Header.Set("Mcp-Name", "Write")
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			if tc.host != "" {
				req.Host = tc.host
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("HTTP %d, want %d", resp.StatusCode, tc.want)
			}
			if _, err := os.Stat(filepath.Join(ts.ws, "x.txt")); !os.IsNotExist(err) {
				t.Errorf("the refused call wrote x.txt: %v", err)
			}
		})
	}
	// With the token, the same request runs.
	got := statelessPost(t, ts.url, map[string]string{"Authorization": "Bearer s3cret-token", "Mcp-Protocol-Version": protocolStateless,
		"Mcp-Method": "tools/call", "Mcp-Name": "Write"}, body)
	if r, _ := got["result"].(map[string]any); r == nil || r["isError"] == true {
		t.Errorf("with the token: %v", got)
	}
	checkFile(t, filepath.Join(ts.ws, "x.txt"), "x")
}

// TestStatelessRequestsCounted: requests of the stateless revision, which
// open no session, are counted by method in
// airlock_sandboxd_stateless_requests_total, a method sandboxd does not name
// as "other" (a client's method names never become labels); a session's
// requests are not counted there.
func TestStatelessRequestsCounted(t *testing.T) {
	ts := startServer(t, Config{}, options{})
	session := connectStreamable(t, ts.url, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	callOK(t, session, toolnames.LS, map[string]any{})
	for _, req := range []rpc{
		{method: "server/discover"},
		{method: "tools/list"},
		{method: "tools/call", name: toolnames.LS, params: map[string]any{"name": toolnames.LS, "arguments": map[string]any{}}},
		{method: "tools/call", name: toolnames.Glob, params: map[string]any{"name": toolnames.Glob, "arguments": map[string]any{"pattern": "*"}}},
		{method: "no/such-method-x"},
	} {
		req.call(t, ts.url)
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

// TestIsStatelessByParams checks how a POST without the revision's header
// is routed by its params: to the stateless handler when its _meta names a
// protocol version, however the name is written (escapes included), and to
// the sessions otherwise, also when the bytes of that name are in a value or
// in a nested object.
func TestIsStatelessByParams(t *testing.T) {
	for _, c := range []struct {
		params string
		want   bool
	}{
		{`{"name":"Read","arguments":{"file_path":"a"}}`, false},
		{`{"name":"Read","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}`, true},
		{`{"name":"Read","_meta":{"io.modelcontextprotocol\/protocolVersion":"2026-07-28"}}`, true},
		{`{"name":"Read","_meta":{"\u0069o.modelcontextprotocol/protocolVersion":"x"}}`, true},
		{`{"name":"Read","\u005fmeta":{"io.modelcontextprotocol/protocolVersion":"x"}}`, true},
		{`{"name":"Read","arguments":{"content":"io.modelcontextprotocol/protocolVersion"}}`, false},
		{`{"name":"Read","arguments":{"io.modelcontextprotocol/protocolVersion":"x"}}`, false},
		{`{"name":"Read","arguments":{"content":"a\"b"}}`, false},
		{`{"name":"Read","_meta":{"progressToken":1}}`, false},
		{`{"name":"Read","_meta":"io.modelcontextprotocol/protocolVersion"}`, false},
	} {
		r, err := http.NewRequest(http.MethodPost, "/mcp", nil)
		if err != nil {
			t.Fatal(err)
		}
		r.Header.Set("Mcp-Protocol-Version", "2025-11-25")
		msg := &jsonrpc.Request{ID: mustID(t, "1"), Method: "tools/call", Params: json.RawMessage(c.params)}
		if got := isStateless(r, msg); got != c.want {
			t.Errorf("isStateless(%s) = %v, want %v", c.params, got, c.want)
		}
	}
	r, _ := http.NewRequest(http.MethodPost, "/mcp", nil)
	r.Header.Set("Mcp-Protocol-Version", protocolStateless)
	if !isStateless(r, &jsonrpc.Request{ID: mustID(t, "1"), Method: "tools/call"}) {
		t.Errorf("isStateless with the header %s = false, want true", protocolStateless)
	}
}

func mustID(t *testing.T, raw string) jsonrpc.ID {
	t.Helper()
	id, err := decodeID(json.RawMessage(raw))
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestStatelessErrorsHaveTheirStatus: at 2026-07-28 a JSON-RPC error that
// sandboxd answers itself has the HTTP status the revision gives it
// (SEP-2575), as the SDK's own answers have: 404 for -32601, 400 for
// -32602 and -32021. In a 2025-11-25 session the same method-not-found
// stays a 200.
func TestStatelessErrorsHaveTheirStatus(t *testing.T) {
	ts, _ := taskServer(t)
	tests := map[string]struct {
		req        rpc
		wantStatus int
		wantCode   float64
	}{
		"an unknown method":          {rpc{method: "no/such"}, http.StatusNotFound, jsonrpc.CodeMethodNotFound},
		"a task that is not":         {getTask("no-such-task"), http.StatusBadRequest, jsonrpc.CodeInvalidParams},
		"tasks/get without a taskId": {rpc{method: "tasks/get", tasks: true, params: map[string]any{}}, http.StatusBadRequest, jsonrpc.CodeInvalidParams},
		"tasks/get undeclared":       {rpc{method: "tasks/get", name: "x", params: map[string]any{"taskId": "x"}}, http.StatusBadRequest, mcp.CodeMissingRequiredClientCapabilities},
		"an unknown tool (the SDK's)": {rpc{method: "tools/call", name: "NoSuchTool",
			params: map[string]any{"name": "NoSuchTool", "arguments": map[string]any{}}}, http.StatusBadRequest, jsonrpc.CodeInvalidParams},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			resp, err := http.DefaultClient.Do(tc.req.build(t.Context(), t, ts.url))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var msg map[string]any
			if err := json.NewDecoder(resp.Body).Decode(&msg); err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tc.wantStatus || errorCode(msg) != tc.wantCode {
				t.Errorf("%s = HTTP %d %v, want HTTP %d and error %v", tc.req.method, resp.StatusCode, msg, tc.wantStatus, tc.wantCode)
			}
		})
	}
	session := openStatefulSession(t, ts)
	if r := postMCP(t.Context(), t, ts.url, sessionHeaders(session), `{"jsonrpc":"2.0","id":2,"method":"no/such"}`); r.status != http.StatusOK || errorCode(r.msg) != jsonrpc.CodeMethodNotFound {
		t.Errorf("in a session, an unknown method = HTTP %d %v, want 200 and -32601", r.status, r.msg)
	}
}

// TestCapabilitiesDeclareWhatIsAnswered: sandboxd answers prompts/list and
// resources/list (empty: it has none) and declares both, on every revision:
// server/discover at 2026-07-28, initialize before it.
func TestCapabilitiesDeclareWhatIsAnswered(t *testing.T) {
	ts := startServer(t, Config{}, options{})
	disc := result(t, rpc{method: "server/discover"}.call(t, ts.url))
	caps, _ := disc["capabilities"].(map[string]any)
	for _, c := range []string{"tools", "prompts", "resources"} {
		if _, ok := caps[c]; !ok {
			t.Errorf("server/discover capabilities = %v, without %s", caps, c)
		}
	}
	for method, key := range map[string]string{"prompts/list": "prompts", "resources/list": "resources"} {
		res := result(t, rpc{method: method}.call(t, ts.url))
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
