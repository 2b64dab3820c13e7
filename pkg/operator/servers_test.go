package operator

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// startTestServer serves handler with the given timeouts on a loopback port, until the test ends.
func startTestServer(t *testing.T, handler http.Handler, timeouts serverTimeouts) string {
	t.Helper()
	s := newHTTPServerWithTimeouts("test", "--test-address", "127.0.0.1:0", handler, nil, context.Background(), timeouts)
	if err := s.listen(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.serve(context.Background()) }()
	t.Cleanup(func() { _ = s.server.Close() })
	return s.listener.Addr().String()
}

// TestBodyReadBounded: a client that sends its headers and then trickles (here: stops sending)
// its body holds the handler for the body timeout at most: the handler's read fails.
func TestBodyReadBounded(t *testing.T) {
	readErr := make(chan error, 1)
	addr := startTestServer(t, http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		_, err := io.ReadAll(req.Body)
		readErr <- err
	}), serverTimeouts{readHeader: time.Minute, body: 50 * time.Millisecond, idle: time.Minute})
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/sandboxes/acquire HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 64\r\n\r\n{\"namespace\":")
	if err := <-readErr; err == nil {
		t.Fatal("the handler read a body that never came to its end")
	}
}

// TestLongHandlerNotCut: once its body is read, a handler may wait past the body timeout (an
// acquire waits up to 300 s): its request's context is not cancelled and its answer arrives.
func TestLongHandlerNotCut(t *testing.T) {
	const body = 50 * time.Millisecond
	addr := startTestServer(t, http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if _, err := io.ReadAll(req.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		time.Sleep(6 * body) // the wait an acquire makes; the deadline would have passed by now
		if err := req.Context().Err(); err != nil {
			http.Error(w, "context: "+err.Error(), http.StatusInternalServerError)
			return
		}
		_, _ = io.WriteString(w, "bound")
	}), serverTimeouts{readHeader: time.Minute, body: body, idle: time.Minute})
	resp, err := http.Post("http://"+addr+"/v1/sandboxes/acquire", "application/json", strings.NewReader(`{"namespace":"a"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || string(got) != "bound" {
		t.Errorf("answer %d %q, want 200 bound", resp.StatusCode, got)
	}
}

// TestIdleConnectionClosed: a kept-alive connection with no request is closed after the idle
// timeout.
func TestIdleConnectionClosed(t *testing.T) {
	addr := startTestServer(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}), serverTimeouts{readHeader: time.Minute, body: time.Minute, idle: 50 * time.Millisecond})
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	r := bufio.NewReader(conn)
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	// Nothing more is sent: the server closes the connection (the read ends with EOF).
	if _, err := r.ReadByte(); err != io.EOF {
		t.Errorf("read on an idle connection: %v, want EOF (closed by the server)", err)
	}
}
