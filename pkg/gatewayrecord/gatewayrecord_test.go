package gatewayrecord

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestFollow: the client asks for the claim's decisions after its cursor with the reader's
// token, hands each line on in order with the boot that answered, and says how the read ended:
// a cut (every end of a feed), a restarted gateway (409 and its boot), a refusal (its body), or
// ctx's end.
func TestFollow(t *testing.T) {
	var asked []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked = append(asked, r.URL.RequestURI()+" "+r.Header.Get("Authorization"))
		q := r.URL.Query()
		switch {
		case r.Header.Get("Authorization") != "Bearer reader":
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error":"bad_token","message":"the token is not the decisions reader's"}`))
		case q.Get("boot") != "" && q.Get("boot") != "g2":
			w.Header().Set(BootHeader, "g2")
			w.WriteHeader(http.StatusConflict)
		default:
			w.Header().Set(BootHeader, "g2")
			_, _ = w.Write([]byte("{\"source_seq\":3}\n{\"source_seq\":4}\n"))
		}
	}))
	defer srv.Close()
	c := NewClient()
	ctx := context.Background()

	var lines []string
	var boot string
	err := c.Follow(ctx, srv.URL, "reader", "uid-1", "g2", 2, func(b string) { boot = b }, func(l []byte) error {
		lines = append(lines, string(l))
		return nil
	})
	if !errors.Is(err, ErrCut) || boot != "g2" || strings.Join(lines, "|") != `{"source_seq":3}|{"source_seq":4}` {
		t.Errorf("follow: %v, boot %q, lines %q; want ErrCut, g2 and both lines", err, boot, lines)
	}
	if want := Path + "?after=2&boot=g2&claim=uid-1&follow=1 Bearer reader"; asked[0] != want {
		t.Errorf("asked %q, want %q", asked[0], want)
	}
	err = c.Follow(ctx, srv.URL, "reader", "uid-1", "g1", 7, nil, func([]byte) error { return nil })
	var changed *BootChangedError
	if !errors.As(err, &changed) || changed.Boot != "g2" {
		t.Errorf("another boot: %v, want BootChangedError{g2}", err)
	}
	err = c.Follow(ctx, srv.URL, "a-sandbox-credential", "uid-1", "", 0, nil, func([]byte) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "401") || !strings.Contains(err.Error(), "bad_token") {
		t.Errorf("refused: %v, want the status and the body", err)
	}
	stop := errors.New("stop")
	if err := c.Follow(ctx, srv.URL, "reader", "uid-1", "", 0, nil, func([]byte) error { return stop }); !errors.Is(err, stop) {
		t.Errorf("take's error: %v", err)
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if err := c.Follow(canceled, srv.URL, "reader", "uid-1", "", 0, nil, func([]byte) error { return nil }); !errors.Is(err, context.Canceled) {
		t.Errorf("a canceled read: %v", err)
	}
}

// TestFollowGivesUpOnASilentGateway: a gateway pod that takes the connection and never answers
// (a dying pod, a stuck process) ends the read with an error after the header timeout, so that
// the leader reads it again from its cursor; without the timeout the read would wait for ever
// (here: for the test's minute, and fail).
func TestFollowGivesUpOnASilentGateway(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-release }))
	defer srv.Close()
	defer close(release)
	c := &Client{HTTP: &http.Client{Transport: newTransport(DialTimeout, 100*time.Millisecond)}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := c.Follow(ctx, srv.URL, "reader", "uid-1", "", 0, nil, func([]byte) error { return nil })
	if err == nil || ctx.Err() != nil || !strings.Contains(err.Error(), "timeout awaiting response headers") {
		t.Fatalf("a silent gateway: %v (ctx %v), want the header timeout", err, ctx.Err())
	}
	tr := NewClient().HTTP.Transport.(*http.Transport)
	if tr.ResponseHeaderTimeout != HeaderTimeout || tr.DialContext == nil || tr.Proxy != nil {
		t.Errorf("NewClient's transport: header timeout %v, dial %v, proxy %v; want %v, a dialer with a timeout, none", tr.ResponseHeaderTimeout, tr.DialContext != nil, tr.Proxy != nil, HeaderTimeout)
	}
}
