package sandboxrecord

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
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
