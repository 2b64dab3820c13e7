package client

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// fakeAPI answers acquires: 202 for the first `pending` calls, then 200.
func fakeAPI(t *testing.T, pending int32) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer sa-token" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_ = json.NewEncoder(w).Encode(ErrorResponse{Error: CodeUnauthorized, Message: "no"})
			return
		}
		switch r.URL.Path {
		case "/v1/sandboxes/acquire":
			var req AcquireRequest
			dec := json.NewDecoder(r.Body)
			dec.DisallowUnknownFields()
			if err := dec.Decode(&req); err != nil || req.Handle != "codegen/default" {
				t.Errorf("request %+v: %v", req, err)
			}
			if calls.Add(1) <= pending {
				w.WriteHeader(http.StatusAccepted)
				_ = json.NewEncoder(w).Encode(AcquireResponse{Claim: "c", Phase: "Binding"})
				return
			}
			_ = json.NewEncoder(w).Encode(AcquireResponse{Claim: "c", Phase: "Bound",
				Addresses: []Address{{Name: "mcp", URL: "http://c:8080"}}, Headers: map[string]string{"Authorization": "Bearer claim"}})
		case "/v1/sandboxes/renew":
			w.WriteHeader(http.StatusNoContent)
		case "/v1/sessions/open":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusTooManyRequests)
			_ = json.NewEncoder(w).Encode(ErrorResponse{Error: CodeRefused, Reason: ReasonMaxPerSession, Message: "full"})
		default:
			w.WriteHeader(http.StatusBadGateway)
			_, _ = w.Write([]byte("not json"))
		}
	}))
	t.Cleanup(srv.Close)
	return srv, &calls
}

func TestAcquireCallsAgainOn202(t *testing.T) {
	srv, calls := fakeAPI(t, 2)
	c := New(srv.URL+"/", func() (string, error) { return "sa-token", nil }, nil, PlainHTTP())
	resp, err := c.Acquire(context.Background(), AcquireRequest{Namespace: "ns", Runtime: "rt", Session: "s", Handle: "codegen/default"})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Phase != "Bound" || resp.Headers["Authorization"] != "Bearer claim" || calls.Load() != 3 {
		t.Errorf("answer %+v after %d calls", resp, calls.Load())
	}
}

func TestAcquireWaitZeroReturns202(t *testing.T) {
	srv, calls := fakeAPI(t, 5)
	c := New(srv.URL, func() (string, error) { return "sa-token", nil }, nil, PlainHTTP())
	zero := 0
	resp, err := c.Acquire(context.Background(), AcquireRequest{Handle: "codegen/default", WaitSeconds: &zero})
	if err != nil || resp.Phase != "Binding" || calls.Load() != 1 {
		t.Errorf("answer %+v %v after %d calls", resp, err, calls.Load())
	}
}

func TestAcquireStopsWithContext(t *testing.T) {
	srv, _ := fakeAPI(t, 1<<30)
	ctx, cancel := context.WithCancel(context.Background())
	c := New(srv.URL, func() (string, error) { return "sa-token", nil }, &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		cancel() // the first answer is a 202; by then the context is done
		return http.DefaultTransport.RoundTrip(r)
	})}, PlainHTTP())
	_, err := c.Acquire(ctx, AcquireRequest{Handle: "codegen/default"})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error %v, want context.Canceled", err)
	}
}

// TestAcquireCallsAgainOn503: a 503 (the operator cannot reach the API server now) is called
// again after its Retry-After until the answer is 200; the wait ends with ctx.
func TestAcquireCallsAgainOn503(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if calls.Add(1) <= 2 {
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusServiceUnavailable)
			_ = json.NewEncoder(w).Encode(ErrorResponse{Error: CodeUnavailable, Message: "cannot review the token now"})
			return
		}
		_ = json.NewEncoder(w).Encode(AcquireResponse{Claim: "c", Phase: "Bound"})
	}))
	defer srv.Close()
	c := New(srv.URL, func() (string, error) { return "sa-token", nil }, nil, PlainHTTP())
	resp, err := c.Acquire(context.Background(), AcquireRequest{Handle: "codegen/default"})
	if err != nil || resp.Phase != "Bound" || calls.Load() != 3 {
		t.Errorf("answer %+v %v after %d calls, want Bound after 3", resp, err, calls.Load())
	}
	_, status, err := c.AcquireOnce(context.Background(), AcquireRequest{Handle: "codegen/default"})
	if err != nil || status != http.StatusOK {
		t.Errorf("AcquireOnce: %d %v", status, err)
	}

	unavailable := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable) // no Retry-After: 1 s
	}))
	defer unavailable.Close()
	ctx, cancel := context.WithCancel(context.Background())
	c = New(unavailable.URL, func() (string, error) { return "sa-token", nil }, &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		resp, err := http.DefaultTransport.RoundTrip(r)
		cancel() // done while it waits to call again
		return resp, err
	})}, PlainHTTP())
	_, err = c.Acquire(ctx, AcquireRequest{Handle: "codegen/default"})
	var apiErr *APIError
	if !errors.Is(err, context.Canceled) || !errors.As(err, &apiErr) || apiErr.RetryAfter != time.Second {
		t.Errorf("error %v, want context.Canceled with the last 503 (Retry-After 1 s)", err)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestErrors(t *testing.T) {
	srv, _ := fakeAPI(t, 0)
	good := New(srv.URL, func() (string, error) { return "sa-token", nil }, nil, PlainHTTP())
	if err := good.Renew(context.Background(), RenewRequest{}); err != nil {
		t.Errorf("renew: %v", err)
	}
	_, err := good.OpenSession(context.Background(), SessionRequest{})
	var apiErr *APIError
	if !errors.As(err, &apiErr) || apiErr.Status != 429 || apiErr.Code != CodeRefused || apiErr.Reason != ReasonMaxPerSession || !IsRefused(err) {
		t.Errorf("open: %v", err)
	}
	_, err = good.CloseSession(context.Background(), SessionRequest{})
	if !errors.As(err, &apiErr) || apiErr.Status != 502 || apiErr.Message != "not json" {
		t.Errorf("close: %#v", err)
	}
	bad := New(srv.URL, func() (string, error) { return "other", nil }, nil, PlainHTTP())
	if err := bad.Renew(context.Background(), RenewRequest{}); !errors.As(err, &apiErr) || apiErr.Code != CodeUnauthorized {
		t.Errorf("renew with a bad token: %v", err)
	}
	failing := New(srv.URL, func() (string, error) { return "", errors.New("no file") }, nil, PlainHTTP())
	if err := failing.Renew(context.Background(), RenewRequest{}); err == nil {
		t.Error("a token source error was ignored")
	}
}

func TestTokenFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte("abc\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tok, err := TokenFile(path)()
	if err != nil || tok != "abc" {
		t.Errorf("%q %v", tok, err)
	}
	if err := os.WriteFile(path, []byte("rotated"), 0o600); err != nil {
		t.Fatal(err)
	}
	if tok, _ := TokenFile(path)(); tok != "rotated" {
		t.Errorf("%q: the file is not read again", tok)
	}
}
