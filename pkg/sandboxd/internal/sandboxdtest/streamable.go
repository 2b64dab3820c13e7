package sandboxdtest

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// A client of the Streamable HTTP transport by hand, through net/http.

// ProtocolStateless is the revision served without sessions, as a client
// names it (the wire's harness checks that the wire's constant agrees).
const ProtocolStateless = "2026-07-28"

// MCPReply is one answer of /mcp as the raw tests read it.
type MCPReply struct {
	Status      int
	ContentType string
	Msg         map[string]any // the JSON-RPC message: the body, or its one event's data
}

// PostMCP POSTs body to /mcp with the headers of a Streamable HTTP client
// (Content-Type, Accept) and header, which may unset them ("" values).
func PostMCP(ctx context.Context, t testing.TB, url string, header map[string]string, body string) MCPReply {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/mcp", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range header {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	r := MCPReply{Status: resp.StatusCode, ContentType: resp.Header.Get("Content-Type")}
	if strings.HasPrefix(r.ContentType, "text/event-stream") {
		for _, line := range strings.Split(string(data), "\n") {
			if d, ok := strings.CutPrefix(line, "data: "); ok {
				data = []byte(d)
			}
		}
	}
	if json.Unmarshal(data, &r.Msg) != nil {
		r.Msg = map[string]any{"body": string(data)} // an HTTP error's text
	}
	return r
}

// StatelessHeaders are the headers of a 2026-07-28 tools/call of tool.
func StatelessHeaders(tool string) map[string]string {
	return map[string]string{"Mcp-Protocol-Version": ProtocolStateless, "Mcp-Method": "tools/call", "Mcp-Name": tool}
}

// OpenStatefulSession initializes a raw 2025-11-25 session on url/mcp and
// returns its id, once the transport tracks it.
func OpenStatefulSession(t testing.TB, url string) string {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url+"/mcp", strings.NewReader(
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	id := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != http.StatusOK || id == "" {
		t.Fatalf("initialize = %d, session %q", resp.StatusCode, id)
	}
	if r := PostMCP(t.Context(), t, url, SessionHeaders(id), `{"jsonrpc":"2.0","method":"notifications/initialized"}`); r.Status != http.StatusAccepted {
		t.Fatalf("notifications/initialized = %d %v", r.Status, r.Msg)
	}
	return id
}

// SessionHeaders are the headers of a POST of the 2025-11-25 session id.
func SessionHeaders(id string) map[string]string {
	return map[string]string{"Mcp-Session-Id": id, "Mcp-Protocol-Version": "2025-11-25"}
}

// ErrorCode is the code of a decoded JSON-RPC error (0 if it is none).
func ErrorCode(resp map[string]any) float64 {
	e, _ := resp["error"].(map[string]any)
	code, _ := e["code"].(float64)
	return code
}

// Mkfifo makes a FIFO name in dir (a workspace), for a command to block on.
func Mkfifo(t testing.TB, dir, name string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
