package wire

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/sandboxdtest"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

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
	r.Header.Set("Mcp-Protocol-Version", ProtocolStateless)
	if !isStateless(r, &jsonrpc.Request{ID: mustID(t, "1"), Method: "tools/call"}) {
		t.Errorf("isStateless with the header %s = false, want true", ProtocolStateless)
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

// statelessPost POSTs one 2026-07-28 request to /mcp with the given headers
// and returns the JSON-RPC response.
func statelessPost(t *testing.T, url string, headers map[string]string, body string) map[string]any {
	t.Helper()
	r := sandboxdtest.PostMCP(t.Context(), t, url, headers, body)
	if _, ok := r.Msg["body"]; ok {
		t.Fatalf("HTTP %d, not JSON: %v", r.Status, r.Msg["body"])
	}
	return r.Msg
}

const statelessMeta = `"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}`

// TestStatelessHeaders: server/discover answers the revisions sandboxd
// serves; results say resultType complete; a request whose Mcp-Method,
// Mcp-Name or MCP-Protocol-Version header is missing or disagrees with its
// body is refused with the header-mismatch error, and its tool does not run.
func TestStatelessHeaders(t *testing.T) {
	ts := startServer(t, testOptions{})
	good := func(method, name string) map[string]string {
		h := map[string]string{"Mcp-Protocol-Version": ProtocolStateless, "Mcp-Method": method}
		if name != "" {
			h["Mcp-Name"] = name
		}
		return h
	}

	disc := statelessPost(t, ts.url, good("server/discover", ""), `{"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {`+statelessMeta+`}}`)
	result, _ := disc["result"].(map[string]any)
	versions, _ := result["supportedVersions"].([]any)
	for _, want := range []string{ProtocolStateless, "2025-11-25", "2024-11-05"} {
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
	sandboxdtest.CheckFile(t, filepath.Join(ts.ws, "ok.txt"), "x")

	for name, tc := range map[string]struct {
		headers map[string]string
		file    string
	}{
		"Mcp-Name names another tool": {headers: good("tools/call", "Read"), file: "name.txt"},
		"no Mcp-Name":                 {headers: good("tools/call", ""), file: "noname.txt"},
		"Mcp-Method another method":   {headers: good("tools/list", "Write"), file: "method.txt"},
		"no Mcp-Method":               {headers: map[string]string{"Mcp-Protocol-Version": ProtocolStateless, "Mcp-Name": "Write"}, file: "nomethod.txt"},
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
		strings.ReplaceAll(write(4, "future.txt"), ProtocolStateless, "9999-99-99"))
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
	ts := startServer(t, testOptions{tokenFile: tokenFile})
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
			req.Header.Set("Mcp-Protocol-Version", ProtocolStateless)
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
	got := statelessPost(t, ts.url, map[string]string{"Authorization": "Bearer s3cret-token", "Mcp-Protocol-Version": ProtocolStateless,
		"Mcp-Method": "tools/call", "Mcp-Name": "Write"}, body)
	if r, _ := got["result"].(map[string]any); r == nil || r["isError"] == true {
		t.Errorf("with the token: %v", got)
	}
	sandboxdtest.CheckFile(t, filepath.Join(ts.ws, "x.txt"), "x")
}

// TestStatelessErrorsHaveTheirStatus: at 2026-07-28 a JSON-RPC error that
// sandboxd answers itself has the HTTP status the revision gives it
// (SEP-2575), as the SDK's own answers have: 404 for -32601, 400 for
// -32602 and -32021. In a 2025-11-25 session the same method-not-found
// stays a 200.
func TestStatelessErrorsHaveTheirStatus(t *testing.T) {
	ts, _ := taskServer(t)
	tests := map[string]struct {
		req        sandboxdtest.RPC
		wantStatus int
		wantCode   float64
	}{
		"an unknown method":          {sandboxdtest.RPC{Method: "no/such"}, http.StatusNotFound, jsonrpc.CodeMethodNotFound},
		"a task that is not":         {sandboxdtest.GetTask("no-such-task"), http.StatusBadRequest, jsonrpc.CodeInvalidParams},
		"tasks/get without a taskId": {sandboxdtest.RPC{Method: "tasks/get", Tasks: true, Params: map[string]any{}}, http.StatusBadRequest, jsonrpc.CodeInvalidParams},
		"tasks/get undeclared":       {sandboxdtest.RPC{Method: "tasks/get", Name: "x", Params: map[string]any{"taskId": "x"}}, http.StatusBadRequest, mcp.CodeMissingRequiredClientCapabilities},
		"an unknown tool (the SDK's)": {sandboxdtest.RPC{Method: "tools/call", Name: "NoSuchTool",
			Params: map[string]any{"name": "NoSuchTool", "arguments": map[string]any{}}}, http.StatusBadRequest, jsonrpc.CodeInvalidParams},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			resp, err := http.DefaultClient.Do(tc.req.Build(t.Context(), t, ts.url))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var msg map[string]any
			if err := json.NewDecoder(resp.Body).Decode(&msg); err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tc.wantStatus || sandboxdtest.ErrorCode(msg) != tc.wantCode {
				t.Errorf("%s = HTTP %d %v, want HTTP %d and error %v", tc.req.Method, resp.StatusCode, msg, tc.wantStatus, tc.wantCode)
			}
		})
	}
	session := sandboxdtest.OpenStatefulSession(t, ts.url)
	if r := sandboxdtest.PostMCP(t.Context(), t, ts.url, sandboxdtest.SessionHeaders(session), `{"jsonrpc":"2.0","id":2,"method":"no/such"}`); r.Status != http.StatusOK || sandboxdtest.ErrorCode(r.Msg) != jsonrpc.CodeMethodNotFound {
		t.Errorf("in a session, an unknown method = HTTP %d %v, want 200 and -32601", r.Status, r.Msg)
	}
}
