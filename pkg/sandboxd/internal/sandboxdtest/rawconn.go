package sandboxdtest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// A client of the Streamable HTTP transport by hand: raw HTTP/1.1 on one
// TCP connection, as the kept connections' tests write and read it.

// statelessCallMeta is a 2026-07-28 call's _meta as the Go SDK's client
// sends it.
const StatelessCallMeta = `{"io.modelcontextprotocol/clientCapabilities":{"roots":{"listChanged":true}},"io.modelcontextprotocol/clientInfo":{"name":"raw","version":"v0"},"io.modelcontextprotocol/protocolVersion":"2026-07-28"}`

// RawConn is one TCP connection to a server, written and read by hand.
type RawConn struct {
	C  net.Conn
	br *bufio.Reader
}

// DialRaw connects to url (http://host:port), until the test ends.
func DialRaw(t testing.TB, url string) *RawConn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &RawConn{C: c, br: bufio.NewReader(c)}
}

// RawAnswer is an answer read off a RawConn.
type RawAnswer struct {
	Status int
	Header http.Header
	Body   []byte
	Closes bool // the server ends the connection after it
}

// Send writes req whole and reads n answers.
func (rc *RawConn) Send(t testing.TB, req string, n int) []RawAnswer {
	t.Helper()
	_ = rc.C.SetDeadline(time.Now().Add(Timeout))
	if _, err := io.WriteString(rc.C, req); err != nil {
		t.Fatal(err)
	}
	var out []RawAnswer
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
		out = append(out, RawAnswer{resp.StatusCode, resp.Header, body, resp.Close})
	}
	return out
}

// Ended reports whether the server has closed the connection: a read
// that returns EOF (or a reset) rather than data.
func (rc *RawConn) Ended(t testing.TB) bool {
	t.Helper()
	_ = rc.C.SetReadDeadline(time.Now().Add(Timeout))
	_, err := rc.br.ReadByte()
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("the server kept the connection open")
	}
	return err != nil
}

// MCPRequest is a POST of /mcp as a 2025-11-25 session's client sends it,
// with extra header lines.
func MCPRequest(host, session, token, body string, extra ...string) string {
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

// ReadCall is a tools/call of Read of a.txt with id.
func ReadCall(id int) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"Read","arguments":{"file_path":"a.txt"}}}`, id)
}

// OpenTokenSession initializes a raw 2025-11-25 session on url/mcp with a
// bearer token and returns its id.
func OpenTokenSession(t testing.TB, url, token string) string {
	t.Helper()
	rc := DialRaw(t, url)
	host := strings.TrimPrefix(url, "http://")
	init := fmt.Sprintf("POST /mcp HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n%s",
		host, token, len(initBody), initBody)
	a := rc.Send(t, init, 1)[0]
	id := a.Header.Get("Mcp-Session-Id")
	if a.Status != http.StatusOK || id == "" {
		t.Fatalf("initialize = %d %q", a.Status, a.Body)
	}
	if a := rc.Send(t, MCPRequest(host, id, token, `{"jsonrpc":"2.0","method":"notifications/initialized"}`), 1)[0]; a.Status != http.StatusAccepted {
		t.Fatalf("notifications/initialized = %d %q", a.Status, a.Body)
	}
	return id
}

// initBody initializes a 2025-11-25 session.
const initBody = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}`

// TakeOver makes rc, a connection to url, a kept connection: a session's
// direct call (a Read of a.txt, which holds "two"), then another that the
// kept loop serves (kept counts what the kept loop served).
func TakeOver(t testing.TB, url string, kept func() int64, rc *RawConn, session, token string) {
	t.Helper()
	host := strings.TrimPrefix(url, "http://")
	if a := rc.Send(t, MCPRequest(host, session, token, ReadCall(2)), 1)[0]; a.Status != http.StatusOK || !bytes.Contains(a.Body, []byte("two")) {
		t.Fatalf("the first call: %d %q", a.Status, a.Body)
	}
	before := kept()
	if a := rc.Send(t, MCPRequest(host, session, token, ReadCall(3)), 1)[0]; a.Status != http.StatusOK || !bytes.Contains(a.Body, []byte("two")) {
		t.Fatalf("the second call: %d %q", a.Status, a.Body)
	}
	if got := kept() - before; got != 1 {
		t.Fatalf("the kept loop served %d of the connection's second call, want 1", got)
	}
}

// WaitFor waits, bounded, until cond holds; what names it.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(Timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond) // the condition is another goroutine's
	}
}
