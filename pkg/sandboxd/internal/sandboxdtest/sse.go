// Package sandboxdtest holds what the tests of sandboxd's packages share (pkg/sandboxd and
// its internal packages), so that none keeps a copy: a client's side of the wire by hand (an
// SSE stream read event by event, a POST; sse.go), and files, processes, tool calls and fake
// secrets checked as those tests check them (helpers.go). It is imported by tests only; it
// imports no package of sandboxd.
package sandboxdtest

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Timeout bounds every wait in these tests; nothing should come close.
const Timeout = 30 * time.Second

// Event is one event read off an SSE stream by the raw tests.
type Event struct {
	Name, Data, ID string
	Comment        string // a comment line, for keepalives
}

// Stream reads events off a raw SSE response.
type Stream struct {
	Resp   *http.Response
	Events chan Event
	done   chan struct{}
}

// OpenSSE opens GET url/sse by hand.
func OpenSSE(t testing.TB, url string, header http.Header) *Stream {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url+"/sse", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header = header.Clone()
	if req.Header == nil {
		req.Header = http.Header{}
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	s := &Stream{Resp: resp, Events: make(chan Event, 100), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		defer close(s.Events)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 8<<20)
		var ev Event
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev != (Event{}) {
					s.Events <- ev
				}
				ev = Event{}
			case strings.HasPrefix(line, ":"):
				ev.Comment = strings.TrimSpace(line[1:])
			default:
				k, v, _ := strings.Cut(line, ":")
				v = strings.TrimPrefix(v, " ")
				switch k {
				case "event":
					ev.Name = v
				case "data":
					ev.Data += v
				case "id":
					ev.ID = v
				}
			}
		}
	}()
	t.Cleanup(s.Close)
	return s
}

// Close closes the stream and waits for its reader.
func (s *Stream) Close() {
	s.Resp.Body.Close()
	<-s.done
}

// Next returns the next event that is not a keepalive comment.
func (s *Stream) Next(t testing.TB) Event {
	t.Helper()
	timeout := time.After(Timeout)
	for {
		select {
		case ev, ok := <-s.Events:
			if !ok {
				t.Fatal("the SSE stream ended")
			}
			if ev.Name == "" && ev.Data == "" {
				continue // a keepalive
			}
			return ev
		case <-timeout:
			t.Fatal("no SSE event in time")
		}
	}
}

// Ended reports whether the stream ends (within the test timeout) without
// another non-comment event.
func (s *Stream) Ended(t testing.TB) bool {
	t.Helper()
	timeout := time.After(Timeout)
	for {
		select {
		case ev, ok := <-s.Events:
			if !ok {
				return true
			}
			if ev.Name != "" || ev.Data != "" {
				t.Errorf("unexpected event %+v", ev)
				return false
			}
		case <-timeout:
			return false
		}
	}
}

// Post POSTs body to url and returns the status and response body.
func Post(t testing.TB, url, contentType, body string, header http.Header) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if h := header.Get("Host"); h != "" {
		req.Host = h
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatal(err)
	}
	return resp.StatusCode, string(data)
}

// InitializeRequest initializes a session at 2024-11-05, as a raw client would.
const InitializeRequest = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2024-11-05","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}`

// Reply is a JSON-RPC response as the raw tests read it.
type Reply struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  json.RawMessage `json:"result"`
	Error   *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// DecodeReply decodes a reply, failing the test if it is not JSON.
func DecodeReply(t testing.TB, data string) Reply {
	t.Helper()
	var r Reply
	if err := json.Unmarshal([]byte(data), &r); err != nil {
		t.Fatalf("reply %q is not JSON: %v", data, err)
	}
	return r
}

// RawSession opens GET url/sse by hand, checks the endpoint event, and
// returns the stream and the absolute endpoint URL.
func RawSession(t testing.TB, url string) (*Stream, string) {
	t.Helper()
	s := OpenSSE(t, url, nil)
	if s.Resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /sse status = %d, want exactly 200", s.Resp.StatusCode)
	}
	if ct := s.Resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("Content-Type = %q, want text/event-stream", ct)
	}
	ev := s.Next(t)
	if ev.Name != "endpoint" {
		t.Fatalf("first event = %+v, want the endpoint event", ev)
	}
	if !strings.HasPrefix(ev.Data, "/message?sessionId=") || len(ev.Data) <= len("/message?sessionId=") {
		t.Fatalf("endpoint = %q, want a relative /message?sessionId=<id>", ev.Data)
	}
	return s, url + ev.Data
}

// InitializedSession opens a raw SSE session on url and initializes it.
func InitializedSession(t testing.TB, url string) (*Stream, string) {
	t.Helper()
	s, endpoint := RawSession(t, url)
	if code, _ := Post(t, endpoint, "application/json", InitializeRequest, nil); code != http.StatusAccepted {
		t.Fatalf("POST initialize = %d", code)
	}
	if r := DecodeReply(t, s.Next(t).Data); r.Error != nil {
		t.Fatalf("initialize: %+v", r.Error)
	}
	Post(t, endpoint, "application/json", `{"jsonrpc":"2.0","method":"notifications/initialized"}`, nil)
	return s, endpoint
}

// CallRaw POSTs one message to a session's endpoint and returns the next
// event's data.
func CallRaw(t testing.TB, s *Stream, endpoint, msg string) string {
	t.Helper()
	if code, body := Post(t, endpoint, "application/json", msg, nil); code != http.StatusAccepted {
		t.Fatalf("POST %s = %d %q", msg, code, body)
	}
	return s.Next(t).Data
}
