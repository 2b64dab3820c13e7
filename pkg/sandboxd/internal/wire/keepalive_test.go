package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/sandboxdtest"
)

// The kept connections through the harness: each request answered on a kept
// connection as net/http answers it on a fresh one, pipelining, the idle
// timeout, and a 2026-07-28 call that ends with its connection.

// normalAnswer is what two servings of the same request must share: the
// status, the headers but Date (and the length, which an event stream's
// chunked answer does not have), and the JSON-RPC message (an event
// stream's one message).
func normalAnswer(t *testing.T, a sandboxdtest.RawAnswer) any {
	t.Helper()
	h := a.Header.Clone()
	h.Del("Date")
	h.Del("Content-Length")
	body := a.Body
	if strings.HasPrefix(h.Get("Content-Type"), "text/event-stream") {
		for _, line := range strings.Split(string(body), "\n") {
			if d, ok := strings.CutPrefix(line, "data: "); ok {
				body = []byte(d)
			}
		}
	}
	var msg any
	if json.Unmarshal(body, &msg) != nil {
		msg = string(body)
	}
	return map[string]any{"status": a.Status, "header": h, "msg": msg}
}

// startKeptServer starts a sandboxd with a token and a small message
// bound, a.txt in its workspace, and a 2025-11-25 session.
func startKeptServer(t *testing.T, opts testOptions) (ts *testServer, session, token string) {
	t.Helper()
	token = "kept-token"
	tokenFile := filepath.Join(t.TempDir(), "token")
	sandboxdtest.WriteFile(t, tokenFile, token)
	opts.tokenFile = tokenFile
	ts = startServer(t, opts)
	sandboxdtest.WriteFile(t, filepath.Join(ts.ws, "a.txt"), "one\ntwo\n")
	return ts, sandboxdtest.OpenTokenSession(t, ts.url, token), token
}

// TestKeptConnAnswersAsNetHTTP sends each request on a kept connection
// and on a fresh one (whose first request is net/http's), and gets the
// same answer on both: the requests the kept loop hands back are served
// by net/http and the transport as before, and the guard's refusals it
// writes itself are the guard's.
func TestKeptConnAnswersAsNetHTTP(t *testing.T) {
	opts := testOptions{}
	opts.maxMessageBytes = 16 << 10
	ts, session, token := startKeptServer(t, opts)
	host := strings.TrimPrefix(ts.url, "http://")
	chunked := func(body string) string {
		r := sandboxdtest.MCPRequest(host, session, token, "", "Transfer-Encoding: chunked")
		r = strings.Replace(r, "Content-Length: 0\r\n", "", 1)
		return r + fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(body), body)
	}
	cases := []struct {
		name, req string
		closes    bool // net/http ends the connection after the answer
	}{
		{"a session's tools/list (the SDK's)", sandboxdtest.MCPRequest(host, session, token, `{"jsonrpc":"2.0","id":9,"method":"tools/list"}`), false},
		{"another session (unknown: 404)", sandboxdtest.MCPRequest(host, "nosuchsession", token, sandboxdtest.ReadCall(4)), false},
		{"a wrong token (the guard's 401)", sandboxdtest.MCPRequest(host, session, "not-the-token", sandboxdtest.ReadCall(5)), false},
		{"no token", sandboxdtest.MCPRequest(host, session, "", sandboxdtest.ReadCall(5)), false},
		{"a foreign Host on loopback (the guard's 403)", sandboxdtest.MCPRequest("evil.example", session, token, sandboxdtest.ReadCall(6)), false},
		{"a foreign Origin", sandboxdtest.MCPRequest(host, session, token, sandboxdtest.ReadCall(6), "Origin: http://evil.example"), false},
		{"a cancel for no call (202)", sandboxdtest.MCPRequest(host, session, token, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":77}}`), false},
		{"not JSON (-32700)", sandboxdtest.MCPRequest(host, session, token, `{"jsonrpc":`), false},
		{"a batch", sandboxdtest.MCPRequest(host, session, token, "["+sandboxdtest.ReadCall(7)+"]"), false},
		{"a call by chunks", chunked(sandboxdtest.ReadCall(8)), false},
		{"an unknown method", sandboxdtest.MCPRequest(host, session, token, `{"jsonrpc":"2.0","id":10,"method":"no/such"}`), false},
		{"GET /healthz", "GET /healthz HTTP/1.1\r\nHost: " + host + "\r\n\r\n", false},
		{"a 2026-07-28 Read (the kept loop's)", statelessRequest(host, "Read", `{"file_path":"a.txt"}`, 15, token), false},
		{"a 2026-07-28 tools/list (the SDK's)", statelessMethod(host, "tools/list", "", 16, token), false},
		{"a 2026-07-28 unknown method (404)", statelessMethod(host, "no/such", "", 17, token), false},
		{"server/discover", statelessMethod(host, "server/discover", "", 18, token), false},
		{"a message past the bound (413)", sandboxdtest.MCPRequest(host, session, token, `{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"Read","arguments":{"file_path":"`+strings.Repeat("a", 17<<10)+`"}}}`), true},
		{"Connection: close", sandboxdtest.MCPRequest(host, session, token, sandboxdtest.ReadCall(12), "Connection: close"), true},
		{"a malformed header (400)", sandboxdtest.MCPRequest(host, session, token, sandboxdtest.ReadCall(13), "Bad Header"), true},
		{"a head past MaxHeaderBytes (431)", sandboxdtest.MCPRequest(host, session, token, sandboxdtest.ReadCall(14), "X-Big: "+strings.Repeat("b", 80<<10)), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			kept := sandboxdtest.DialRaw(t, ts.url)
			sandboxdtest.TakeOver(t, ts.url, ts.streamable.KeptTaken, kept, session, token)
			fresh := sandboxdtest.DialRaw(t, ts.url)
			got := kept.Send(t, tc.req, 1)[0]
			want := fresh.Send(t, tc.req, 1)[0]
			if g, w := normalAnswer(t, got), normalAnswer(t, want); !reflect.DeepEqual(g, w) {
				t.Errorf("kept connection: %v\nfresh one:       %v", g, w)
			}
			if tc.closes {
				if !kept.Ended(t) || !fresh.Ended(t) {
					t.Error("the connection stayed open")
				}
				return
			}
			// Either way the connection goes on, and is kept again.
			sandboxdtest.TakeOver(t, ts.url, ts.streamable.KeptTaken, kept, session, token)
		})
	}
}

// TestKeptConnPipelined: calls written at once on a kept connection are
// answered in order.
func TestKeptConnPipelined(t *testing.T) {
	ts, session, token := startKeptServer(t, testOptions{})
	host := strings.TrimPrefix(ts.url, "http://")
	rc := sandboxdtest.DialRaw(t, ts.url)
	sandboxdtest.TakeOver(t, ts.url, ts.streamable.KeptTaken, rc, session, token)
	var reqs strings.Builder
	for i := range 5 {
		reqs.WriteString(sandboxdtest.MCPRequest(host, session, token, sandboxdtest.ReadCall(100+i)))
		if i == 2 {
			reqs.WriteString("\r\n") // a line end after a POST's body, which net/http skips
		}
	}
	for i, a := range rc.Send(t, reqs.String(), 5) {
		var msg struct {
			ID int `json:"id"`
		}
		if a.Status != http.StatusOK || json.Unmarshal(a.Body, &msg) != nil || msg.ID != 100+i {
			t.Errorf("answer %d: %d %q", i, a.Status, a.Body)
		}
	}
}

// TestKeptConnIdleTimeout: a kept connection that carries no request for
// the idle timeout is closed, as net/http closes its own.
func TestKeptConnIdleTimeout(t *testing.T) {
	opts := testOptions{}
	opts.idleTimeout = 200 * time.Millisecond
	ts, session, token := startKeptServer(t, opts)
	rc := sandboxdtest.DialRaw(t, ts.url)
	sandboxdtest.TakeOver(t, ts.url, ts.streamable.KeptTaken, rc, session, token)
	if !rc.Ended(t) {
		t.Fatal("the idle kept connection was not closed")
	}
	sandboxdtest.WaitFor(t, "the kept connection's loop to end", func() bool {
		return ts.streamable.KeptConns() == 0
	})
}

// statelessRequest is a 2026-07-28 tools/call of tool as a client sends it
// (with the bearer token, if any).
func statelessRequest(host, tool, args string, id int, token ...string) string {
	params := fmt.Sprintf(`{"_meta":%s,"name":%q,"arguments":%s}`, sandboxdtest.StatelessCallMeta, tool, args)
	return rawStatelessPost(host, "tools/call", tool, params, id, token...)
}

// statelessMethod is a 2026-07-28 request of method with only the
// revision's _meta.
func statelessMethod(host, method, name string, id int, token ...string) string {
	return rawStatelessPost(host, method, name, `{"_meta":`+sandboxdtest.StatelessCallMeta+`}`, id, token...)
}

func rawStatelessPost(host, method, name, params string, id int, token ...string) string {
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q,"params":%s}`, id, method, params)
	var b strings.Builder
	fmt.Fprintf(&b, "POST /mcp HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n", host)
	fmt.Fprintf(&b, "Mcp-Protocol-Version: %s\r\nMcp-Method: %s\r\n", ProtocolStateless, method)
	if name != "" {
		fmt.Fprintf(&b, "Mcp-Name: %s\r\n", name)
	}
	for _, tok := range token {
		fmt.Fprintf(&b, "Authorization: Bearer %s\r\n", tok)
	}
	fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n%s", len(body), body)
	return b.String()
}

// TestKeptConnStatelessCallEndsWithItsConnection: on a kept connection, a
// 2026-07-28 call still ends with its POST: the client closing the
// connection cancels it and kills its process group. A call whose client
// sends its next request before the answer is not cancelled.
func TestKeptConnStatelessCallEndsWithItsConnection(t *testing.T) {
	ts := startServer(t, testOptions{})
	sandboxdtest.WriteFile(t, filepath.Join(ts.ws, "a.txt"), "one\ntwo\n")
	host := strings.TrimPrefix(ts.url, "http://")
	read := func(id int) string { return statelessRequest(host, "Read", `{"file_path":"a.txt"}`, id) }
	rc := sandboxdtest.DialRaw(t, ts.url)
	for i := range 2 {
		if a := rc.Send(t, read(i+1), 1)[0]; a.Status != http.StatusOK || !bytes.Contains(a.Body, []byte("two")) {
			t.Fatalf("Read %d: %d %q", i, a.Status, a.Body)
		}
	}
	if n := ts.streamable.KeptTaken(); n != 1 {
		t.Fatalf("the kept loop served %d calls, want 1", n)
	}

	// Sent with the next request right behind it: the watch sees bytes,
	// not the client's end, and the call runs to its end.
	slow := statelessRequest(host, "Bash", `{"command":"sleep 0.1; echo slept"}`, 3)
	answers := rc.Send(t, slow+read(4), 2)
	if !bytes.Contains(answers[0].Body, []byte("slept")) || !bytes.Contains(answers[1].Body, []byte("two")) {
		t.Fatalf("pipelined: %q, %q", answers[0].Body, answers[1].Body)
	}

	long := statelessRequest(host, "Bash", `{"command":"echo $$ > leader.pid; sleep 300 & echo $! > bg.pid; wait"}`, 5)
	if _, err := io.WriteString(rc.C, long); err != nil {
		t.Fatal(err)
	}
	pids := []int{sandboxdtest.ReadPID(t, filepath.Join(ts.ws, "leader.pid")), sandboxdtest.ReadPID(t, filepath.Join(ts.ws, "bg.pid"))}
	rc.C.Close()
	sandboxdtest.WaitDead(t, pids...)
}
