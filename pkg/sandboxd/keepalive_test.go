package sandboxd

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2"
)

// rawConn is one TCP connection to sandboxd, written and read by hand.
type rawConn struct {
	c  net.Conn
	br *bufio.Reader
}

func dialRaw(t *testing.T, url string) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{c: c, br: bufio.NewReader(c)}
}

// rawAnswer is an answer read off a rawConn.
type rawAnswer struct {
	status int
	header http.Header
	body   []byte
	closes bool // the server ends the connection after it
}

// send writes req whole and reads n answers.
func (rc *rawConn) send(t *testing.T, req string, n int) []rawAnswer {
	t.Helper()
	_ = rc.c.SetDeadline(time.Now().Add(testTimeout))
	if _, err := io.WriteString(rc.c, req); err != nil {
		t.Fatal(err)
	}
	var out []rawAnswer
	for range n {
		resp, err := http.ReadResponse(rc.br, nil)
		if err != nil {
			t.Fatalf("reading the answer to %.80q: %v", req, err)
		}
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		out = append(out, rawAnswer{resp.StatusCode, resp.Header, body, resp.Close})
	}
	return out
}

// ended reports whether the server has closed the connection: a read
// that returns EOF (or a reset) rather than data.
func (rc *rawConn) ended(t *testing.T) bool {
	t.Helper()
	_ = rc.c.SetReadDeadline(time.Now().Add(testTimeout))
	_, err := rc.br.ReadByte()
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("the server kept the connection open")
	}
	return err != nil
}

// mcpRequest is a POST of /mcp as a 2025-11-25 session's client sends it,
// with extra header lines.
func mcpRequest(host, session, token, body string, extra ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "POST /mcp HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n", host)
	fmt.Fprintf(&b, "Mcp-Session-Id: %s\r\nMcp-Protocol-Version: 2025-11-25\r\n", session)
	if token != "" {
		fmt.Fprintf(&b, "Authorization: Bearer %s\r\n", token)
	}
	for _, e := range extra {
		b.WriteString(e + "\r\n")
	}
	fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n%s", len(body), body)
	return b.String()
}

// readCall is a tools/call of Read of a.txt with id.
func readCall(id int) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"Read","arguments":{"file_path":"a.txt"}}}`, id)
}

// normalAnswer is what two servings of the same request must share: the
// status, the headers but Date (and the length, which an event stream's
// chunked answer does not have), and the JSON-RPC message (an event
// stream's one message).
func normalAnswer(t *testing.T, a rawAnswer) any {
	t.Helper()
	h := a.header.Clone()
	h.Del("Date")
	h.Del("Content-Length")
	body := a.body
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
	return map[string]any{"status": a.status, "header": h, "msg": msg}
}

// startKeptServer starts a sandboxd with a token and a small message
// bound, a.txt in its workspace, and a 2025-11-25 session.
func startKeptServer(t *testing.T, opts options) (ts *testServer, session, token string) {
	t.Helper()
	token = "kept-token"
	tokenFile := filepath.Join(t.TempDir(), "token")
	writeFile(t, tokenFile, token)
	ts = startServer(t, Config{AuthTokenFile: tokenFile}, opts)
	writeFile(t, filepath.Join(ts.ws, "a.txt"), "one\ntwo\n")
	return ts, openTokenSession(t, ts, token), token
}

// openTokenSession is openStatefulSession with a bearer token.
func openTokenSession(t *testing.T, ts *testServer, token string) string {
	t.Helper()
	rc := dialRaw(t, ts.url)
	host := strings.TrimPrefix(ts.url, "http://")
	init := fmt.Sprintf("POST /mcp HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n%s",
		host, token, len(initBody), initBody)
	a := rc.send(t, init, 1)[0]
	id := a.header.Get("Mcp-Session-Id")
	if a.status != http.StatusOK || id == "" {
		t.Fatalf("initialize = %d %q", a.status, a.body)
	}
	if a := rc.send(t, mcpRequest(host, id, token, `{"jsonrpc":"2.0","method":"notifications/initialized"}`), 1)[0]; a.status != http.StatusAccepted {
		t.Fatalf("notifications/initialized = %d %q", a.status, a.body)
	}
	return id
}

const initBody = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}`

// takeOver makes rc a kept connection: a session's direct call, then
// another that the kept loop serves.
func takeOver(t *testing.T, ts *testServer, rc *rawConn, session, token string) {
	t.Helper()
	host := strings.TrimPrefix(ts.url, "http://")
	if a := rc.send(t, mcpRequest(host, session, token, readCall(2)), 1)[0]; a.status != http.StatusOK || !bytes.Contains(a.body, []byte("two")) {
		t.Fatalf("the first call: %d %q", a.status, a.body)
	}
	before := ts.streamable.keep.taken.Load()
	if a := rc.send(t, mcpRequest(host, session, token, readCall(3)), 1)[0]; a.status != http.StatusOK || !bytes.Contains(a.body, []byte("two")) {
		t.Fatalf("the second call: %d %q", a.status, a.body)
	}
	if got := ts.streamable.keep.taken.Load() - before; got != 1 {
		t.Fatalf("the kept loop served %d of the connection's second call, want 1", got)
	}
}

// TestKeptConnServesCalls: a light client's calls, one after the other on
// one connection, in a 2025-11-25 session and at 2026-07-28: the first is
// net/http's, the rest the kept loop's, and all are answered; the loop
// ends with the connection.
func TestKeptConnServesCalls(t *testing.T) {
	for _, version := range []string{"2025-11-25", protocolStateless} {
		t.Run(version, func(t *testing.T) {
			ts := startServer(t, Config{}, options{})
			writeFile(t, filepath.Join(ts.ws, "a.txt"), "one\ntwo\n")
			c := connectRawStreamable(t, ts.url+"/mcp", version)
			const calls = 20
			for i := range calls {
				text, isErr, err := c.callTool(t.Context(), "Read", map[string]any{"file_path": "a.txt"})
				if err != nil || isErr || !strings.Contains(text, "two") {
					t.Fatalf("call %d: %q %v %v", i, text, isErr, err)
				}
			}
			if got := ts.streamable.keep.taken.Load(); got != calls-1 {
				t.Errorf("the kept loop served %d calls, want %d (all but the first)", got, calls-1)
			}
			c.hc.CloseIdleConnections()
			waitFor(t, "the kept connection's loop to end", func() bool {
				ts.streamable.keep.mu.Lock()
				defer ts.streamable.keep.mu.Unlock()
				return len(ts.streamable.keep.conns) == 0
			})
		})
	}
}

// TestKeptConnAnswersAsNetHTTP sends each request on a kept connection
// and on a fresh one (whose first request is net/http's), and gets the
// same answer on both: the requests the kept loop hands back are served
// by net/http and the transport as before, and the guard's refusals it
// writes itself are the guard's.
func TestKeptConnAnswersAsNetHTTP(t *testing.T) {
	opts := defaultOptions()
	opts.maxMessageBytes = 16 << 10
	ts, session, token := startKeptServer(t, opts)
	host := strings.TrimPrefix(ts.url, "http://")
	chunked := func(body string) string {
		r := mcpRequest(host, session, token, "", "Transfer-Encoding: chunked")
		r = strings.Replace(r, "Content-Length: 0\r\n", "", 1)
		return r + fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(body), body)
	}
	cases := []struct {
		name, req string
		closes    bool // net/http ends the connection after the answer
	}{
		{"a session's tools/list (the SDK's)", mcpRequest(host, session, token, `{"jsonrpc":"2.0","id":9,"method":"tools/list"}`), false},
		{"another session (unknown: 404)", mcpRequest(host, "nosuchsession", token, readCall(4)), false},
		{"a wrong token (the guard's 401)", mcpRequest(host, session, "not-the-token", readCall(5)), false},
		{"no token", mcpRequest(host, session, "", readCall(5)), false},
		{"a foreign Host on loopback (the guard's 403)", mcpRequest("evil.example", session, token, readCall(6)), false},
		{"a foreign Origin", mcpRequest(host, session, token, readCall(6), "Origin: http://evil.example"), false},
		{"a cancel for no call (202)", mcpRequest(host, session, token, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":77}}`), false},
		{"not JSON (-32700)", mcpRequest(host, session, token, `{"jsonrpc":`), false},
		{"a batch", mcpRequest(host, session, token, "["+readCall(7)+"]"), false},
		{"a call by chunks", chunked(readCall(8)), false},
		{"an unknown method", mcpRequest(host, session, token, `{"jsonrpc":"2.0","id":10,"method":"no/such"}`), false},
		{"GET /healthz", "GET /healthz HTTP/1.1\r\nHost: " + host + "\r\n\r\n", false},
		{"a 2026-07-28 Read (the kept loop's)", statelessRequest(host, "Read", `{"file_path":"a.txt"}`, 15, token), false},
		{"a 2026-07-28 tools/list (the SDK's)", statelessMethod(host, "tools/list", "", 16, token), false},
		{"a 2026-07-28 unknown method (404)", statelessMethod(host, "no/such", "", 17, token), false},
		{"server/discover", statelessMethod(host, "server/discover", "", 18, token), false},
		{"a message past the bound (413)", mcpRequest(host, session, token, `{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"Read","arguments":{"file_path":"`+strings.Repeat("a", 17<<10)+`"}}}`), true},
		{"Connection: close", mcpRequest(host, session, token, readCall(12), "Connection: close"), true},
		{"a malformed header (400)", mcpRequest(host, session, token, readCall(13), "Bad Header"), true},
		{"a head past MaxHeaderBytes (431)", mcpRequest(host, session, token, readCall(14), "X-Big: "+strings.Repeat("b", 80<<10)), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			kept := dialRaw(t, ts.url)
			takeOver(t, ts, kept, session, token)
			fresh := dialRaw(t, ts.url)
			got := kept.send(t, tc.req, 1)[0]
			want := fresh.send(t, tc.req, 1)[0]
			if g, w := normalAnswer(t, got), normalAnswer(t, want); !reflect.DeepEqual(g, w) {
				t.Errorf("kept connection: %v\nfresh one:       %v", g, w)
			}
			if tc.closes {
				if !kept.ended(t) || !fresh.ended(t) {
					t.Error("the connection stayed open")
				}
				return
			}
			// Either way the connection goes on, and is kept again.
			takeOver(t, ts, kept, session, token)
		})
	}
}

// TestKeptConnPipelined: calls written at once on a kept connection are
// answered in order.
func TestKeptConnPipelined(t *testing.T) {
	ts, session, token := startKeptServer(t, defaultOptions())
	host := strings.TrimPrefix(ts.url, "http://")
	rc := dialRaw(t, ts.url)
	takeOver(t, ts, rc, session, token)
	var reqs strings.Builder
	for i := range 5 {
		reqs.WriteString(mcpRequest(host, session, token, readCall(100+i)))
		if i == 2 {
			reqs.WriteString("\r\n") // a line end after a POST's body, which net/http skips
		}
	}
	for i, a := range rc.send(t, reqs.String(), 5) {
		var msg struct {
			ID int `json:"id"`
		}
		if a.status != http.StatusOK || json.Unmarshal(a.body, &msg) != nil || msg.ID != 100+i {
			t.Errorf("answer %d: %d %q", i, a.status, a.body)
		}
	}
}

// TestKeptConnIdleTimeout: a kept connection that carries no request for
// the idle timeout is closed, as net/http closes its own.
func TestKeptConnIdleTimeout(t *testing.T) {
	opts := defaultOptions()
	opts.idleTimeout = 200 * time.Millisecond
	ts, session, token := startKeptServer(t, opts)
	rc := dialRaw(t, ts.url)
	takeOver(t, ts, rc, session, token)
	if !rc.ended(t) {
		t.Fatal("the idle kept connection was not closed")
	}
	waitFor(t, "the kept connection's loop to end", func() bool {
		ts.streamable.keep.mu.Lock()
		defer ts.streamable.keep.mu.Unlock()
		return len(ts.streamable.keep.conns) == 0
	})
}

// TestKeptConnShutdown: at shutdown a kept connection that waits is
// closed, and one whose call runs gets the call's answer (cancelled with
// the session) and is closed after it; serve returns.
func TestKeptConnShutdown(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "token")
	writeFile(t, tokenFile, "tok")
	ws := filepath.Join(t.TempDir(), "ws")
	writeFile(t, filepath.Join(ws, "a.txt"), "one\ntwo\n")
	s, err := newServer(Config{Workspace: ws, StateDir: t.TempDir(), AuthTokenFile: tokenFile, ShutdownGrace: 5 * time.Second}, defaultOptions(), klog.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	host, stop := serveOn(t, s)
	ts := &testServer{server: s, url: "http://" + host, ws: ws}
	session := openTokenSession(t, ts, "tok")

	idle := dialRaw(t, ts.url)
	takeOver(t, ts, idle, session, "tok")
	busy := dialRaw(t, ts.url)
	takeOver(t, ts, busy, session, "tok")
	started := filepath.Join(ws, "started")
	bash := `{"jsonrpc":"2.0","id":50,"method":"tools/call","params":{"name":"Bash","arguments":{"command":"touch started; sleep 30"}}}`
	if _, err := io.WriteString(busy.c, mcpRequest(host, session, "tok", bash)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the Bash call to start", func() bool { _, err := os.Stat(started); return err == nil })

	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	a := busy.send(t, "", 1)[0]
	if a.status != http.StatusOK || !bytes.Contains(a.body, []byte(`"id":50`)) {
		t.Errorf("the running call's answer: %d %q", a.status, a.body)
	}
	if !busy.ended(t) {
		t.Error("the busy kept connection stayed open after its answer")
	}
	if !idle.ended(t) {
		t.Error("the waiting kept connection stayed open")
	}
	if err := <-stopped; err != nil {
		t.Errorf("serve: %v", err)
	}
	if n := len(s.streamable.keep.conns); n != 0 {
		t.Errorf("%d kept connections left", n)
	}
}

// statelessRequest is a 2026-07-28 tools/call of tool as a client sends it
// (with the bearer token, if any).
func statelessRequest(host, tool, args string, id int, token ...string) string {
	params := fmt.Sprintf(`{"_meta":%s,"name":%q,"arguments":%s}`, statelessCallMeta, tool, args)
	return rawStatelessPost(host, "tools/call", tool, params, id, token...)
}

// statelessMethod is a 2026-07-28 request of method with only the
// revision's _meta.
func statelessMethod(host, method, name string, id int, token ...string) string {
	return rawStatelessPost(host, method, name, `{"_meta":`+statelessCallMeta+`}`, id, token...)
}

func rawStatelessPost(host, method, name, params string, id int, token ...string) string {
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q,"params":%s}`, id, method, params)
	var b strings.Builder
	fmt.Fprintf(&b, "POST /mcp HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n", host)
	fmt.Fprintf(&b, "Mcp-Protocol-Version: %s\r\nMcp-Method: %s\r\n", protocolStateless, method)
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
	ts := startServer(t, Config{}, options{})
	writeFile(t, filepath.Join(ts.ws, "a.txt"), "one\ntwo\n")
	host := strings.TrimPrefix(ts.url, "http://")
	read := func(id int) string { return statelessRequest(host, "Read", `{"file_path":"a.txt"}`, id) }
	rc := dialRaw(t, ts.url)
	for i := range 2 {
		if a := rc.send(t, read(i+1), 1)[0]; a.status != http.StatusOK || !bytes.Contains(a.body, []byte("two")) {
			t.Fatalf("Read %d: %d %q", i, a.status, a.body)
		}
	}
	if n := ts.streamable.keep.taken.Load(); n != 1 {
		t.Fatalf("the kept loop served %d calls, want 1", n)
	}

	// Sent with the next request right behind it: the watch sees bytes,
	// not the client's end, and the call runs to its end.
	slow := statelessRequest(host, "Bash", `{"command":"sleep 0.1; echo slept"}`, 3)
	answers := rc.send(t, slow+read(4), 2)
	if !bytes.Contains(answers[0].body, []byte("slept")) || !bytes.Contains(answers[1].body, []byte("two")) {
		t.Fatalf("pipelined: %q, %q", answers[0].body, answers[1].body)
	}

	long := statelessRequest(host, "Bash", `{"command":"echo $$ > leader.pid; sleep 300 & echo $! > bg.pid; wait"}`, 5)
	if _, err := io.WriteString(rc.c, long); err != nil {
		t.Fatal(err)
	}
	pids := []int{readPID(t, filepath.Join(ts.ws, "leader.pid")), readPID(t, filepath.Join(ts.ws, "bg.pid"))}
	rc.c.Close()
	waitDead(t, pids...)
}
