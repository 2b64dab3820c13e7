package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/utils/clock"

	"github.com/airlock-dev/airlock/pkg/client"
)

// fakeSandboxAPI answers acquire, renew and sessions/close as the Sandbox API does, and records
// every call with the time it came: session "refused" is refused (429), sessions whose name ends
// in "-warm" are answered warm, session "long" with a one-second idle timeout; the first close
// of session "flaky" is answered 503.
type fakeSandboxAPI struct {
	mu         sync.Mutex
	calls      []fakeCall
	flakyCalls int
}

type fakeCall struct {
	path, session, handle, namespace, runtime string
	at                                        time.Time
}

func (f *fakeSandboxAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req struct{ Namespace, Runtime, Session, Handle string }
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || r.Header.Get("Authorization") != "Bearer the-token" {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	f.calls = append(f.calls, fakeCall{path: r.URL.Path, session: req.Session, handle: req.Handle, namespace: req.Namespace, runtime: req.Runtime, at: time.Now()})
	flaky := req.Session == "flaky" && r.URL.Path == "/v1/sessions/close"
	if flaky {
		f.flakyCalls++
	}
	unavailable := flaky && f.flakyCalls == 1
	f.mu.Unlock()
	if unavailable {
		w.Header().Set("Retry-After", "0")
		w.WriteHeader(http.StatusServiceUnavailable)
		_ = json.NewEncoder(w).Encode(client.ErrorResponse{Error: client.CodeUnavailable, Message: "try again"})
		return
	}
	w.Header().Set("Content-Type", "application/json")
	switch r.URL.Path {
	case "/v1/sandboxes/acquire":
		if req.Session == "refused" {
			w.WriteHeader(http.StatusTooManyRequests)
			_ = json.NewEncoder(w).Encode(client.ErrorResponse{Error: client.CodeRefused, Reason: client.ReasonMaxInstances, Message: "full"})
			return
		}
		resp := client.AcquireResponse{Claim: "c-" + req.Session, Phase: "Bound", Warm: strings.HasSuffix(req.Session, "-warm")}
		if req.Session == "long" {
			resp.IdleTimeoutSeconds = 1
		}
		_ = json.NewEncoder(w).Encode(resp)
	case "/v1/sandboxes/renew":
		w.WriteHeader(http.StatusNoContent)
	case "/v1/sessions/close":
		w.WriteHeader(http.StatusAccepted)
		_ = json.NewEncoder(w).Encode(client.SessionResponse{Claims: []client.SessionClaim{}})
	default:
		http.NotFound(w, r)
	}
}

// TestReplayDay: against a Sandbox API, every session of the trace is acquired (its handle, as
// the namespace's runtime) no earlier than its arrival over the speed-up, held for its length
// over the speed-up, renewed every half idle timeout meanwhile, then closed with sessions/close
// (called again after a 503); a refused session is closed at once; the answers say which claims
// were warm.
func TestReplayDay(t *testing.T) {
	api := &fakeSandboxAPI{}
	srv := httptest.NewServer(api)
	defer srv.Close()
	tg := airlockTarget(srv.URL, srv.Client(), "bench-warm-day", "the-token")

	// 360,000x: an hour of the day is 10 ms of the replay.
	const speedUp = 360_000
	trace := []daySession{
		{At: 0, Session: "a-warm", Handle: "codegen/default", Length: time.Hour},
		{At: 2 * time.Hour, Session: "b", Handle: "codegen/other", Length: 3 * time.Hour},
		{At: 3 * time.Hour, Session: "refused", Handle: "codegen/default", Length: time.Hour},
		{At: 5 * time.Hour, Session: "long", Handle: "codegen/default", Length: 110 * time.Hour}, // 1.1 s
		{At: 5 * time.Hour, Session: "c-warm", Handle: "codegen/default", Length: time.Hour},
		{At: 6 * time.Hour, Session: "flaky", Handle: "codegen/default", Length: time.Hour},
	}
	start, answers := replayDay(context.Background(), clock.RealClock{}, *tg.sessions, trace, speedUp, time.Minute)

	if len(answers) != len(trace) {
		t.Fatalf("%d answers for %d sessions", len(answers), len(trace))
	}
	calls := map[string][]fakeCall{}
	for _, c := range api.calls {
		if c.namespace != "bench-warm-day" || c.runtime != runtimeName {
			t.Errorf("a call as %s/%s", c.namespace, c.runtime)
		}
		calls[c.session] = append(calls[c.session], c)
	}
	for i, s := range trace {
		a, got := answers[i], calls[s.Session]
		var paths []string
		for _, c := range got {
			paths = append(paths, strings.TrimPrefix(c.path, "/v1/"))
		}
		want := []string{"sandboxes/acquire", "sessions/close"}
		switch s.Session {
		case "long":
			want = []string{"sandboxes/acquire", "sandboxes/renew", "sandboxes/renew", "sessions/close"}
		case "flaky":
			want = []string{"sandboxes/acquire", "sessions/close", "sessions/close"}
		}
		if strings.Join(paths, " ") != strings.Join(want, " ") {
			t.Errorf("%s: calls %v, want %v", s.Session, paths, want)
			continue
		}
		if got[0].handle != s.Handle {
			t.Errorf("%s: acquired %q, want %q", s.Session, got[0].handle, s.Handle)
		}
		if due := start.Add(scaled(s.At, speedUp)); a.sent.Before(due) {
			t.Errorf("%s: sent %v after the start, before its arrival %v", s.Session, a.sent.Sub(start), scaled(s.At, speedUp))
		}
		if s.Session == "refused" {
			if a.err == nil || classify(a.err) != "429 refused (MaxInstances)" || a.closed.IsZero() || a.closed.Sub(a.answered) > 50*time.Millisecond {
				t.Errorf("refused: err %v, closed %v after the answer; want the refusal, closed at once", a.err, a.closed.Sub(a.answered))
			}
			continue
		}
		if a.err != nil || a.closeErr != nil || a.warm != strings.HasSuffix(s.Session, "-warm") {
			t.Errorf("%s: %+v", s.Session, a)
		}
		if held := a.closed.Sub(a.answered); held < scaled(s.Length, speedUp) {
			t.Errorf("%s: closed %v after Bound, before its length %v", s.Session, held, scaled(s.Length, speedUp))
		}
		if wantRenewals := strings.Count(strings.Join(want, " "), "renew"); a.renewals != wantRenewals {
			t.Errorf("%s: %d renewals, want %d", s.Session, a.renewals, wantRenewals)
		}
	}
	if long := calls["long"]; len(long) == 4 {
		if d := long[1].at.Sub(long[0].at); d < 500*time.Millisecond {
			t.Errorf("the first renewal %v after the acquire, want half the idle timeout", d)
		}
	}

	// Cancelled: the sessions not sent yet are answered with the cancellation, none closed.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, answers = replayDay(ctx, clock.RealClock{}, *tg.sessions, trace[1:2], speedUp, time.Minute)
	if answers[0].err == nil || !answers[0].closed.IsZero() {
		t.Errorf("a cancelled replay: %+v", answers[0])
	}
}
