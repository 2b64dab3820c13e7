package sandboxrecord

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// serveLines answers GET /record with lines, then ends the response.
func serveLines(t *testing.T, lines ...string) string {
	t.Helper()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != Path || r.URL.Query().Get("follow") != "1" || r.Header.Get("Authorization") != "Bearer tok" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		for _, l := range lines {
			fmt.Fprintln(w, l)
		}
	}))
	t.Cleanup(ts.Close)
	return ts.URL
}

func TestFollowReturnsAtTheStoppedEntry(t *testing.T) {
	url := serveLines(t, `{"kind":"sandbox.boot"}`, `{"kind":"sandbox.stopped"}`, `{"kind":"tool.call"}`)
	var got []string
	err := NewClient().Follow(context.Background(), url, "tok", "", 0, func(l []byte) error { got = append(got, string(l)); return nil })
	if err != nil || len(got) != 2 {
		t.Fatalf("Follow = %v after %q, want nil after the stopped entry", err, got)
	}
}

func TestFollowSaysWhenTheStreamIsCut(t *testing.T) {
	url := serveLines(t, `{"kind":"sandbox.boot"}`, `{"kind":"tool.call"}`)
	n := 0
	err := NewClient().Follow(context.Background(), url, "tok", "", 0, func([]byte) error { n++; return nil })
	if !errors.Is(err, ErrCut) || n != 2 {
		t.Fatalf("Follow = %v after %d lines, want ErrCut after 2", err, n)
	}
}

func TestFollowStopsAtTakesError(t *testing.T) {
	url := serveLines(t, `{"kind":"sandbox.boot"}`, `{"kind":"tool.call"}`)
	stop := errors.New("stop")
	if err := NewClient().Follow(context.Background(), url, "tok", "", 0, func([]byte) error { return stop }); !errors.Is(err, stop) {
		t.Fatalf("Follow = %v, want take's error", err)
	}
}

// TestFollowGivesUpOnASilentSandbox: a sandbox pod that takes the connection and never answers
// ends the read with an error after the header timeout (the leader reads it again from its
// cursor); without the timeout it would wait for ever (here: for the test's minute, and fail).
func TestFollowGivesUpOnASilentSandbox(t *testing.T) {
	release := make(chan struct{})
	ts := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-release }))
	defer ts.Close()
	defer close(release)
	c := &Client{HTTP: &http.Client{Transport: newTransport(DialTimeout, 100*time.Millisecond)}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := c.Follow(ctx, ts.URL, "tok", "", 0, func([]byte) error { return nil })
	if err == nil || ctx.Err() != nil || !strings.Contains(err.Error(), "timeout awaiting response headers") {
		t.Fatalf("a silent sandbox: %v (ctx %v), want the header timeout", err, ctx.Err())
	}
	tr := NewClient().HTTP.Transport.(*http.Transport)
	if tr.ResponseHeaderTimeout != HeaderTimeout || tr.DialContext == nil || tr.Proxy != nil {
		t.Errorf("NewClient's transport: header timeout %v, dial %v, proxy %v; want %v, a dialer with a timeout, none", tr.ResponseHeaderTimeout, tr.DialContext != nil, tr.Proxy != nil, HeaderTimeout)
	}
}
