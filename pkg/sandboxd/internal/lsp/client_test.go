package lsp

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
)

// pipeServer is the far end of a Conn: what the client writes is read from
// in, what the test writes to out the client reads.
type pipeServer struct {
	in  *bufio.Reader
	out *io.PipeWriter
}

// newPipeConn connects a Conn to a pipeServer; the pipes are closed at the
// end of the test, which ends the Conn's reader.
func newPipeConn(t *testing.T) (*Conn, *pipeServer) {
	t.Helper()
	toServer, clientW := io.Pipe()
	clientR, fromServer := io.Pipe()
	c := NewConn(clientR, clientW)
	t.Cleanup(func() {
		fromServer.Close()
		toServer.Close()
		<-c.Closed()
	})
	return c, &pipeServer{in: bufio.NewReader(toServer), out: fromServer}
}

// read returns the next message the client sent.
func (s *pipeServer) read(t *testing.T) Message {
	t.Helper()
	body, err := ReadFrame(s.in)
	if err != nil {
		t.Errorf("reading the client's message: %v", err)
		return Message{}
	}
	var m Message
	if err := json.Unmarshal(body, &m); err != nil {
		t.Errorf("the client sent %q: %v", body, err)
	}
	return m
}

// write frames body as the server would.
func (s *pipeServer) write(t *testing.T, body string) {
	t.Helper()
	if _, err := fmt.Fprintf(s.out, "Content-Length: %d\r\n\r\n%s", len(body), body); err != nil {
		t.Errorf("writing to the client: %v", err)
	}
}

func TestConnCall(t *testing.T) {
	c, s := newPipeConn(t)
	type answer struct {
		value string
		err   error
	}
	done := make(chan answer, 1)
	go func() {
		var got struct{ URI string }
		err := c.Call(t.Context(), "textDocument/definition", map[string]int{"line": 1}, &got)
		done <- answer{got.URI, err}
	}()
	req := s.read(t)
	if req.Method != "textDocument/definition" || string(req.Params) != `{"line":1}` || len(req.ID) == 0 {
		t.Fatalf("request = %+v", req)
	}
	// A notification and an answer to no call come first: both are passed over.
	s.write(t, `{"jsonrpc":"2.0","method":"window/logMessage","params":{}}`)
	s.write(t, `{"jsonrpc":"2.0","id":999,"result":{"URI":"wrong"}}`)
	s.write(t, fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"URI":"file:///a.go"}}`, req.ID))
	if a := <-done; a.err != nil || a.value != "file:///a.go" {
		t.Errorf("Call = %q, %v", a.value, a.err)
	}

	// An error answer is an *Error.
	go func() { done <- answer{err: c.Call(t.Context(), "textDocument/rename", nil, nil)} }()
	req = s.read(t)
	s.write(t, fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"error":{"code":-32803,"message":"cannot rename"}}`, req.ID))
	var lerr *Error
	if a := <-done; !errors.As(a.err, &lerr) || lerr.Code != -32803 || !strings.Contains(a.err.Error(), "cannot rename") {
		t.Errorf("Call with an error answer = %v", a.err)
	}
}

// TestConnAnswersServerRequests: the server's requests get an answer, an
// array of nulls for workspace/configuration.
func TestConnAnswersServerRequests(t *testing.T) {
	_, s := newPipeConn(t)
	s.write(t, `{"jsonrpc":"2.0","id":"cfg","method":"workspace/configuration","params":{"items":[{},{}]}}`)
	if got := s.read(t); string(got.ID) != `"cfg"` || string(got.Result) != "[null,null]" {
		t.Errorf("answer to workspace/configuration = %+v", got)
	}
	s.write(t, `{"jsonrpc":"2.0","id":7,"method":"client/registerCapability","params":{}}`)
	if got := s.read(t); string(got.ID) != "7" || string(got.Result) != "null" {
		t.Errorf("answer to client/registerCapability = %+v", got)
	}
}

// TestConnCancel: a call whose context ends returns, and the server is told
// with $/cancelRequest.
func TestConnCancel(t *testing.T) {
	c, s := newPipeConn(t)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- c.Call(ctx, "textDocument/references", nil, nil) }()
	req := s.read(t)
	cancel()
	// The pipe has no buffer: the cancel notification is read before the
	// call can return.
	if got := s.read(t); got.Method != "$/cancelRequest" || string(got.Params) != fmt.Sprintf(`{"id":%s}`, req.ID) {
		t.Errorf("after the cancel the client sent %+v", got)
	}
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled Call = %v", err)
	}
}

// TestConnServerGone: when the server's output ends, waiting calls and
// later ones fail with ErrClosed, and Closed is closed.
func TestConnServerGone(t *testing.T) {
	c, s := newPipeConn(t)
	done := make(chan error, 1)
	go func() { done <- c.Call(t.Context(), "initialize", nil, nil) }()
	s.read(t)
	s.out.Close()
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Errorf("waiting Call = %v, want ErrClosed", err)
	}
	<-c.Closed()
	if err := c.Call(t.Context(), "shutdown", nil, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("later Call = %v, want ErrClosed", err)
	}
}

// TestReadFrameRefusesBadFrames: a server that sends a broken frame is
// treated as broken, and never makes the client allocate what it claims.
func TestReadFrameRefusesBadFrames(t *testing.T) {
	tests := map[string]struct {
		in      string
		wantErr string
	}{
		"too long":             {in: fmt.Sprintf("Content-Length: %d\r\n\r\n", lspMaxMessageBytes+1), wantErr: "at most"},
		"negative":             {in: "Content-Length: -1\r\n\r\n", wantErr: "length"},
		"not a number":         {in: "Content-Length: 1e9\r\n\r\n", wantErr: "length"},
		"header without colon": {in: "garbage\r\n\r\n", wantErr: "malformed header"},
		"header too long":      {in: "X-A: " + strings.Repeat("a", 2000) + "\r\n\r\n", wantErr: "malformed header"},
		"body cut short":       {in: "Content-Length: 10\r\n\r\n{}", wantErr: "EOF"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := ReadFrame(bufio.NewReader(strings.NewReader(tc.in)))
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ReadFrame = %v, want an error with %q", err, tc.wantErr)
			}
		})
	}
	body, err := ReadFrame(bufio.NewReader(strings.NewReader("\r\nContent-Type: x\r\ncontent-length: 2\r\n\r\n{}")))
	if err != nil || string(body) != "{}" {
		t.Errorf("ReadFrame of a good frame = %q, %v", body, err)
	}
}
