package client

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/pkg/attestation"
)

// sessionAPI is a stand-in of the Sandbox API for Session's tests: it records every request and
// answers with answer(n, path, body), n counting the requests from 0.
type sessionAPI struct {
	srv *httptest.Server

	mu  sync.Mutex
	got []sessionRequest
}

type sessionRequest struct {
	path, authorization string
	body                map[string]any
}

// answer is a stand-in's answer: status, Retry-After ("" for none), body (nil for none).
type answer struct {
	status     int
	retryAfter string
	body       any
}

func newSessionAPI(t *testing.T, tls bool, respond func(n int, path string) answer) *sessionAPI {
	t.Helper()
	a := &sessionAPI{}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var body map[string]any
		if err := json.Unmarshal(raw, &body); err != nil {
			t.Errorf("%s: body %q: %v", r.URL.Path, raw, err)
		}
		a.mu.Lock()
		n := len(a.got)
		a.got = append(a.got, sessionRequest{path: r.URL.Path, authorization: r.Header.Get("Authorization"), body: body})
		a.mu.Unlock()
		ans := respond(n, r.URL.Path)
		if ans.retryAfter != "" {
			w.Header().Set("Retry-After", ans.retryAfter)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(ans.status)
		if ans.body != nil {
			_ = json.NewEncoder(w).Encode(ans.body)
		}
	})
	if tls {
		a.srv = httptest.NewTLSServer(h)
	} else {
		a.srv = httptest.NewServer(h)
	}
	t.Cleanup(a.srv.Close)
	return a
}

func (a *sessionAPI) requests() []sessionRequest {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]sessionRequest(nil), a.got...)
}

// fakeClock is the renewal throttle's clock.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Step(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// waits records Acquire's waits instead of sleeping; end, when set, ends the wait with it.
type waits struct {
	mu  sync.Mutex
	got []time.Duration
	end error
}

func (w *waits) wait(ctx context.Context, d time.Duration) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.got = append(w.got, d)
	if w.end != nil {
		return w.end
	}
	return ctx.Err()
}

func tokenFile(t *testing.T, token string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "token")
	writeFile(t, path, token)
	return path
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

// newTestSession is a session of runtime team-a/agent against a, over plain HTTP.
func newTestSession(t *testing.T, a *sessionAPI, cfg Config) (*Session, *waits) {
	t.Helper()
	cfg.API, cfg.PlainHTTP, cfg.Namespace, cfg.Runtime = a.srv.URL, true, "team-a", "agent"
	if cfg.TokenFile == "" {
		cfg.TokenFile = tokenFile(t, "sa-token")
	}
	s, err := NewSession(cfg, "s1")
	if err != nil {
		t.Fatal(err)
	}
	w := &waits{}
	s.wait = w.wait
	return s, w
}

func bound(claim string) AcquireResponse {
	return AcquireResponse{Claim: claim, Phase: "Bound",
		Addresses: []Address{{Name: "metrics", URL: "http://10.0.0.1:9090"}, {Name: "mcp", URL: "http://10.0.0.1:8080/"}},
		Headers:   map[string]string{"Authorization": "Bearer claim-token"}}
}

// TestSessionAcquireWaitsThrough202s: Acquire calls again after each 202 and 503, after the
// answer's Retry-After when it has one, reading the token file again for each call (the kubelet
// rotates it), and returns the sandbox's MCP endpoint, header and the answer's fields.
func TestSessionAcquireWaitsThrough202s(t *testing.T) {
	keptAt := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	tok := tokenFile(t, "sa-token-1")
	a := newSessionAPI(t, false, func(n int, path string) answer {
		switch n {
		case 0:
			writeFile(t, tok, "sa-token-2\n") // rotated
			return answer{status: http.StatusAccepted, body: AcquireResponse{Claim: "c", Phase: "Queued"}}
		case 1:
			return answer{status: http.StatusAccepted, retryAfter: "2", body: AcquireResponse{Claim: "c", Phase: "Binding"}}
		case 2:
			return answer{status: http.StatusServiceUnavailable, retryAfter: "3", body: ErrorResponse{Error: CodeUnavailable, Message: "caches"}}
		}
		resp := bound("c")
		resp.Warm = true
		resp.ResumedWorkspace = &ResumedWorkspace{KeptAt: keptAt, KeptBy: "c-old"}
		resp.Attestation = &attestation.Attestation{Statement: "c3RhdGVtZW50", Signature: "c2ln", KeyID: "k1"}
		return answer{status: http.StatusOK, body: resp}
	})
	s, w := newTestSession(t, a, Config{TokenFile: tok, WaitSeconds: 45})
	sb, err := s.Acquire(context.Background(), "codegen/default")
	if err != nil {
		t.Fatal(err)
	}
	if sb.MCPURL != "http://10.0.0.1:8080/mcp" || sb.Authorization != "Bearer claim-token" || sb.Claim != "c" || sb.Handle != "codegen/default" {
		t.Errorf("sandbox %+v", sb)
	}
	if !sb.Warm || sb.ResumedWorkspace == nil || !sb.ResumedWorkspace.KeptAt.Equal(keptAt) ||
		sb.Response.Attestation == nil || *sb.Response.Attestation != (attestation.Attestation{Statement: "c3RhdGVtZW50", Signature: "c2ln", KeyID: "k1"}) || sb.Isolation != nil {
		t.Errorf("warm %v, resumed %+v, attestation %+v, isolation %+v (not asked to verify)", sb.Warm, sb.ResumedWorkspace, sb.Response.Attestation, sb.Isolation)
	}
	if got := sb.Header().Get("Authorization"); got != "Bearer claim-token" {
		t.Errorf("Header(): Authorization %q", got)
	}
	if want := []time.Duration{2 * time.Second, 3 * time.Second}; !equalDurations(w.got, want) {
		t.Errorf("waits %v, want %v (the Retry-Afters; a 202 without one is called again at once)", w.got, want)
	}
	reqs := a.requests()
	if len(reqs) != 4 {
		t.Fatalf("%d requests, want 4", len(reqs))
	}
	for i, r := range reqs {
		want := "Bearer sa-token-2"
		if i == 0 {
			want = "Bearer sa-token-1"
		}
		if r.path != "/v1/sandboxes/acquire" || r.authorization != want {
			t.Errorf("request %d: %s with %q, want the acquire with %q", i, r.path, r.authorization, want)
		}
		if r.body["namespace"] != "team-a" || r.body["runtime"] != "agent" || r.body["session"] != "s1" ||
			r.body["handle"] != "codegen/default" || r.body["waitSeconds"] != float64(45) {
			t.Errorf("request %d: body %v", i, r.body)
		}
	}
}

func equalDurations(a, b []time.Duration) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestSessionAcquireDeadline: the wait ends at AcquireTimeout with an error that names the phase
// and the reason of the last 202 and wraps context.DeadlineExceeded; no call asks to wait longer
// than the time left.
func TestSessionAcquireDeadline(t *testing.T) {
	a := newSessionAPI(t, false, func(int, string) answer {
		return answer{status: http.StatusAccepted, retryAfter: "1", body: AcquireResponse{Claim: "c", Phase: "Queued", Reason: "MaxConcurrent"}}
	})
	s, w := newTestSession(t, a, Config{WaitSeconds: 300, AcquireTimeout: 20 * time.Second})
	w.end = context.DeadlineExceeded // the deadline passes during the first wait
	_, err := s.Acquire(context.Background(), "codegen/default")
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "still Queued (MaxConcurrent)") {
		t.Errorf("error %v, want DeadlineExceeded naming Queued (MaxConcurrent)", err)
	}
	reqs := a.requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests, want 1", len(reqs))
	}
	if ws := reqs[0].body["waitSeconds"].(float64); ws > 20 || ws < 15 {
		t.Errorf("waitSeconds %v, want at most the 20 s left", ws)
	}

	// A context already done: no request at all succeeds, and the error says so.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Acquire(ctx, "codegen/default"); !errors.Is(err, context.Canceled) {
		t.Errorf("error %v, want context.Canceled", err)
	}
}

// TestSessionErrors: each error status of SPEC section 4 is an *APIError that errors.Is its
// sentinel and carries the operator's code, reason and message; Acquire does not call again.
func TestSessionErrors(t *testing.T) {
	tests := map[string]struct {
		status   int
		body     ErrorResponse
		sentinel error
	}{
		"401": {http.StatusUnauthorized, ErrorResponse{Error: CodeUnauthorized, Message: "token review: wrong audience"}, ErrUnauthorized},
		"403": {http.StatusForbidden, ErrorResponse{Error: CodeForbidden, Message: "not the runtime's ServiceAccount"}, ErrForbidden},
		"404": {http.StatusNotFound, ErrorResponse{Error: CodeNotFound, Message: "no sandbox codegen in registry tools"}, ErrNotFound},
		"409": {http.StatusConflict, ErrorResponse{Error: CodeDisabled, Message: "sandbox.enabled is false"}, ErrConflict},
		"429": {http.StatusTooManyRequests, ErrorResponse{Error: CodeRefused, Reason: ReasonMaxPerSession, Message: "2 live claims"}, ErrRefused},
		"502": {http.StatusBadGateway, ErrorResponse{Error: CodeFailed, Reason: "ImagePullBackOff", Message: "image not found"}, ErrFailed},
	}
	sentinels := []error{ErrUnauthorized, ErrForbidden, ErrNotFound, ErrConflict, ErrRefused, ErrFailed, ErrUnavailable}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			a := newSessionAPI(t, false, func(int, string) answer { return answer{status: tc.status, body: tc.body} })
			s, w := newTestSession(t, a, Config{})
			_, err := s.Acquire(context.Background(), "codegen/default")
			var apiErr *APIError
			if !errors.As(err, &apiErr) || apiErr.Status != tc.status || apiErr.Code != tc.body.Error || apiErr.Reason != tc.body.Reason || apiErr.Message != tc.body.Message {
				t.Fatalf("error %#v, want the API's %d %+v", err, tc.status, tc.body)
			}
			for _, sentinel := range sentinels {
				if got := errors.Is(err, sentinel); got != (sentinel == tc.sentinel) {
					t.Errorf("errors.Is(err, %v) = %v", sentinel, got)
				}
			}
			if tc.body.Reason != "" && !strings.Contains(err.Error(), tc.body.Reason) {
				t.Errorf("error %q does not name the reason %s", err, tc.body.Reason)
			}
			if n := len(a.requests()); n != 1 || len(w.got) != 0 {
				t.Errorf("%d requests, %d waits: want 1 and none", n, len(w.got))
			}
			if _, err := s.Renew(context.Background(), "codegen/default"); !errors.Is(err, tc.sentinel) {
				t.Errorf("renew: %v, want %v", err, tc.sentinel)
			}
		})
	}
}

// TestSessionRenewThrottle (SPEC section 3): Renew sends at most one renewal per half idle
// timeout for each handle, on the session's clock; a failed renewal is not counted; Close
// forgets the renewals.
func TestSessionRenewThrottle(t *testing.T) {
	fail := false
	a := newSessionAPI(t, false, func(_ int, path string) answer {
		switch {
		case path == "/v1/sandboxes/renew" && fail:
			return answer{status: http.StatusConflict, body: ErrorResponse{Error: CodeNotBound, Message: "Reaping"}}
		case path == "/v1/sandboxes/renew":
			return answer{status: http.StatusNoContent}
		case path == "/v1/sessions/close":
			return answer{status: http.StatusAccepted, body: SessionResponse{Claims: []SessionClaim{{Claim: "c", Handle: "codegen/default", Phase: "Bound"}}}}
		}
		return answer{status: http.StatusNotFound, body: ErrorResponse{Error: CodeNotFound, Message: path}}
	})
	clock := &fakeClock{now: time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)}
	s, _ := newTestSession(t, a, Config{IdleTimeout: 10 * time.Minute, Now: clock.Now})
	ctx := context.Background()
	renewals := func() int {
		n := 0
		for _, r := range a.requests() {
			if r.path == "/v1/sandboxes/renew" {
				n++
			}
		}
		return n
	}
	renew := func(handle string, wantSent bool) {
		t.Helper()
		sent, err := s.Renew(ctx, handle)
		if err != nil || sent != wantSent {
			t.Errorf("at %s: Renew(%s) = %v, %v; want sent %v", clock.Now().Format(time.TimeOnly), handle, sent, err, wantSent)
		}
	}
	renew("codegen/default", true)
	for range 10 { // ten tool calls within the first 5 minutes
		clock.Step(29 * time.Second)
		renew("codegen/default", false)
	}
	renew("lint/default", true)  // another handle has its own throttle
	clock.Step(10 * time.Second) // 5m00s after the first renewal
	renew("codegen/default", true)
	if n := renewals(); n != 3 {
		t.Errorf("%d renewals sent, want 3", n)
	}

	fail = true
	clock.Step(5 * time.Minute)
	if sent, err := s.Renew(ctx, "codegen/default"); !sent || !errors.Is(err, ErrConflict) {
		t.Errorf("a renewal the API refuses: %v, %v", sent, err)
	}
	fail = false
	renew("codegen/default", true) // the failed one did not count

	if _, err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	renew("codegen/default", true) // a new claim after the close
	if n := renewals(); n != 6 {
		t.Errorf("%d renewals sent, want 6", n)
	}
	for _, r := range a.requests() {
		if r.body["session"] != "s1" || r.body["namespace"] != "team-a" || r.body["runtime"] != "agent" {
			t.Errorf("%s: body %v", r.path, r.body)
		}
	}
}

// TestSessionConfig: the identity comes from the environment where the fields are empty, the
// fields win, and a missing runtime or namespace is an error that says what to set.
func TestSessionConfig(t *testing.T) {
	t.Setenv(EnvAPI, "https://api.example:8443")
	t.Setenv(EnvTokenFile, "/env/token")
	t.Setenv(EnvCAFile, "/env/ca.crt")
	t.Setenv(EnvNamespace, "env-ns")
	t.Setenv(EnvRuntime, "env-rt")
	cfg, err := Config{}.complete()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.API != "https://api.example:8443" || cfg.TokenFile != "/env/token" || cfg.CAFile != "/env/ca.crt" || cfg.Namespace != "env-ns" || cfg.Runtime != "env-rt" ||
		cfg.IdleTimeout != 0 || cfg.AcquireTimeout != DefaultAcquireTimeout || cfg.WaitSeconds != DefaultWaitSeconds {
		t.Errorf("from the environment: %+v", cfg)
	}
	cfg, err = Config{API: "https://other", TokenFile: "/t", CAFile: "/c", Namespace: "ns", Runtime: "rt", WaitSeconds: 1000}.complete()
	if err != nil || cfg.API != "https://other" || cfg.TokenFile != "/t" || cfg.CAFile != "/c" || cfg.Namespace != "ns" || cfg.Runtime != "rt" || cfg.WaitSeconds != MaxWaitSeconds {
		t.Errorf("the fields: %+v %v", cfg, err)
	}
	t.Setenv(EnvRuntime, "")
	if _, err := (Config{Namespace: "ns"}).complete(); err == nil || !strings.Contains(err.Error(), EnvRuntime) {
		t.Errorf("no runtime: %v", err)
	}
	t.Setenv(EnvAPI, "")
	t.Setenv(EnvTokenFile, "")
	t.Setenv(EnvCAFile, "")
	cfg, _ = Config{Namespace: "ns", Runtime: "rt"}.complete()
	if cfg.API != DefaultAPI || cfg.TokenFile != DefaultTokenFile || cfg.CAFile != DefaultCAFile {
		t.Errorf("the pod's defaults: %+v", cfg)
	}
}

// TestSessionVerifiesWithCAFile: by default a session verifies the API with the CA bundle file
// (here the stand-in's own certificate) and refuses one it cannot read.
func TestSessionVerifiesWithCAFile(t *testing.T) {
	a := newSessionAPI(t, true, func(int, string) answer { return answer{status: http.StatusOK, body: bound("c")} })
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	writeFile(t, caFile, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: a.srv.Certificate().Raw})))
	s, err := NewSession(Config{API: a.srv.URL, CAFile: caFile, TokenFile: tokenFile(t, "sa"), Namespace: "ns", Runtime: "rt"}, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(context.Background(), "codegen/default"); err != nil {
		t.Errorf("acquire over TLS verified with the CA file: %v", err)
	}
	if _, err := NewSession(Config{API: a.srv.URL, CAFile: filepath.Join(t.TempDir(), "none"), Namespace: "ns", Runtime: "rt"}, "s1"); err == nil || !strings.Contains(err.Error(), "airlock-ca") {
		t.Errorf("a missing CA file: %v", err)
	}
}

// TestSandboxHTTPClient: the sandbox's HTTP client adds its Authorization header to every
// request (what an MCP client is handed).
func TestSandboxHTTPClient(t *testing.T) {
	var got string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Get("Authorization")
	}))
	defer srv.Close()
	resp := bound("c")
	sb, err := newSandbox("codegen/default", &resp)
	if err != nil {
		t.Fatal(err)
	}
	r, err := sb.HTTPClient(nil).Post(srv.URL+"/mcp", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if got != "Bearer claim-token" {
		t.Errorf("Authorization %q", got)
	}
	if _, err := newSandbox("codegen/default", &AcquireResponse{Claim: "c", Phase: "Bound"}); err == nil {
		t.Error("an answer without an address was accepted")
	}
}

// TestSessionRenewConcurrent: renewals of one handle at once send one request.
func TestSessionRenewConcurrent(t *testing.T) {
	a := newSessionAPI(t, false, func(int, string) answer { return answer{status: http.StatusNoContent} })
	clock := &fakeClock{now: time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)}
	s, _ := newTestSession(t, a, Config{Now: clock.Now})
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			if _, err := s.Renew(context.Background(), "codegen/default"); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if n := len(a.requests()); n != 1 {
		t.Errorf("%d renewals sent by 10 concurrent calls, want 1", n)
	}
}

// TestSessionRenewFollowsTheRuntimesIdleTimeout: the acquire answer's idleTimeoutSeconds sets the
// handle's renewal interval (half of it), so a runtime whose idle timeout is shorter than the
// default has its sandbox renewed in time without configuring anything; a shorter
// Config.IdleTimeout still wins.
func TestSessionRenewFollowsTheRuntimesIdleTimeout(t *testing.T) {
	a := newSessionAPI(t, false, func(_ int, path string) answer {
		switch path {
		case "/v1/sandboxes/acquire":
			b := bound("c")
			b.IdleTimeoutSeconds = 60
			return answer{status: http.StatusOK, body: b}
		case "/v1/sandboxes/renew":
			return answer{status: http.StatusNoContent}
		}
		return answer{status: http.StatusNotFound, body: ErrorResponse{Error: CodeNotFound, Message: path}}
	})
	clock := &fakeClock{now: time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)}
	for _, tc := range []struct {
		configured time.Duration
		every      time.Duration
	}{{0, 30 * time.Second}, {time.Hour, 30 * time.Second}, {20 * time.Second, 10 * time.Second}} {
		s, _ := newTestSession(t, a, Config{IdleTimeout: tc.configured, Now: clock.Now})
		ctx := context.Background()
		if sent, err := s.Renew(ctx, "codegen/default"); !sent || err != nil {
			t.Fatalf("first Renew before the acquire: %v, %v", sent, err)
		}
		if _, err := s.Acquire(ctx, "codegen/default"); err != nil {
			t.Fatal(err)
		}
		clock.Step(tc.every - time.Second)
		if sent, _ := s.Renew(ctx, "codegen/default"); sent {
			t.Errorf("configured %v: a renewal sent %v after the last, want none before %v", tc.configured, tc.every-time.Second, tc.every)
		}
		clock.Step(time.Second)
		if sent, err := s.Renew(ctx, "codegen/default"); !sent || err != nil {
			t.Errorf("configured %v: no renewal %v after the last (%v), want one", tc.configured, tc.every, err)
		}
	}
}
