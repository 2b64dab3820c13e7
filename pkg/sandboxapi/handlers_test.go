package sandboxapi

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/airlock-dev/airlock/pkg/client"
)

// TestInputHygiene: every malformed request is a clear JSON error, and creates nothing.
func TestInputHygiene(t *testing.T) {
	valid := `{"namespace":"team-a","runtime":"agent","session":"s","handle":"codegen/default","waitSeconds":0}`
	tests := map[string]struct {
		path       string
		body       string
		wantStatus int
	}{
		"long unknown field":     {body: `{"` + strings.Repeat("x", 60000) + `":1}`, wantStatus: 400},
		"unknown field":          {body: `{"namespace":"team-a","runtime":"agent","session":"s","handle":"codegen/default","extra":1}`, wantStatus: 400},
		"not JSON":               {body: `namespace=team-a`, wantStatus: 400},
		"empty body":             {body: ``, wantStatus: 400},
		"array":                  {body: `[]`, wantStatus: 400},
		"null":                   {body: `null`, wantStatus: 400},
		"trailing data":          {body: valid + `{}`, wantStatus: 400},
		"trailing garbage":       {body: valid + `x`, wantStatus: 400},
		"oversized body":         {body: `{"namespace":"` + strings.Repeat("a", client.MaxBodyBytes) + `"}`, wantStatus: 413},
		"oversized whitespace":   {body: valid + strings.Repeat(" ", client.MaxBodyBytes), wantStatus: 413},
		"wrong type":             {body: `{"namespace":1}`, wantStatus: 400},
		"namespace not a label":  {body: `{"namespace":"Team_A","runtime":"agent","session":"s","handle":"codegen/default"}`, wantStatus: 400},
		"namespace too long":     {body: `{"namespace":"` + strings.Repeat("a", 64) + `","runtime":"agent","session":"s","handle":"codegen/default"}`, wantStatus: 400},
		"runtime missing":        {body: `{"namespace":"team-a","session":"s","handle":"codegen/default"}`, wantStatus: 400},
		"runtime with a dot":     {body: `{"namespace":"team-a","runtime":"a.b","session":"s","handle":"codegen/default"}`, wantStatus: 400},
		"session empty":          {body: `{"namespace":"team-a","runtime":"agent","session":"","handle":"codegen/default"}`, wantStatus: 400},
		"session with a space":   {body: `{"namespace":"team-a","runtime":"agent","session":"a b","handle":"codegen/default"}`, wantStatus: 400},
		"session non-ASCII":      {body: `{"namespace":"team-a","runtime":"agent","session":"caf\u00e9","handle":"codegen/default"}`, wantStatus: 400},
		"session NUL":            {body: `{"namespace":"team-a","runtime":"agent","session":"a\u0000b","handle":"codegen/default"}`, wantStatus: 400},
		"session too long":       {body: `{"namespace":"team-a","runtime":"agent","session":"` + strings.Repeat("s", 257) + `","handle":"codegen/default"}`, wantStatus: 400},
		"handle without /":       {body: `{"namespace":"team-a","runtime":"agent","session":"s","handle":"codegen"}`, wantStatus: 400},
		"handle with two /":      {body: `{"namespace":"team-a","runtime":"agent","session":"s","handle":"a/b/c"}`, wantStatus: 400},
		"handle upper case":      {body: `{"namespace":"team-a","runtime":"agent","session":"s","handle":"Codegen/default"}`, wantStatus: 400},
		"handle too long":        {body: `{"namespace":"team-a","runtime":"agent","session":"s","handle":"` + strings.Repeat("a", 100) + "/" + strings.Repeat("b", 100) + `"}`, wantStatus: 400},
		"handle empty instance":  {body: `{"namespace":"team-a","runtime":"agent","session":"s","handle":"codegen/"}`, wantStatus: 400},
		"waitSeconds too large":  {body: `{"namespace":"team-a","runtime":"agent","session":"s","handle":"codegen/default","waitSeconds":301}`, wantStatus: 400},
		"waitSeconds huge":       {body: `{"namespace":"team-a","runtime":"agent","session":"s","handle":"codegen/default","waitSeconds":99999999999999999999}`, wantStatus: 400},
		"waitSeconds negative":   {body: `{"namespace":"team-a","runtime":"agent","session":"s","handle":"codegen/default","waitSeconds":-1}`, wantStatus: 400},
		"waitSeconds fractional": {body: `{"namespace":"team-a","runtime":"agent","session":"s","handle":"codegen/default","waitSeconds":1.5}`, wantStatus: 400},
		"renew unknown field":    {path: "/v1/sandboxes/renew", body: `{"namespace":"team-a","runtime":"agent","session":"s","handle":"codegen/default","waitSeconds":1}`, wantStatus: 400},
		"open with a handle":     {path: "/v1/sessions/open", body: `{"namespace":"team-a","runtime":"agent","session":"s","handle":"codegen/default"}`, wantStatus: 400},
		"close bad session":      {path: "/v1/sessions/close", body: `{"namespace":"team-a","runtime":"agent","session":" "}`, wantStatus: 400},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, baseObjects()...)
			path := tc.path
			if path == "" {
				path = "/v1/sandboxes/acquire"
			}
			rec := f.do(path, tokenAgent, tc.body)
			e := wantError(t, rec, tc.wantStatus, client.CodeInvalid, "")
			if len(e.Message) > 400 {
				t.Errorf("message of %d bytes: the input is echoed", len(e.Message))
			}
			if writes := writeActions(f.airlock.Actions()); len(writes) != 0 {
				t.Errorf("writes: %v", writes)
			}
		})
	}
}

// TestRouting: unknown endpoints are 404, other methods 405, both as JSON; and nothing is served
// before the caches have synced.
func TestRouting(t *testing.T) {
	f := newFixture(t, baseObjects()...)
	rec := httptest.NewRecorder()
	f.server.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/sandboxes/acquire", nil))
	wantError(t, rec, http.StatusMethodNotAllowed, client.CodeMethodNotAllowed, "")
	if rec.Header().Get("Allow") != http.MethodPost {
		t.Errorf("Allow %q", rec.Header().Get("Allow"))
	}
	rec = httptest.NewRecorder()
	f.server.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/nothing", bytes.NewReader(nil)))
	wantError(t, rec, http.StatusNotFound, client.CodeNotFound, "")

	synced := false
	f.server.synced = append(f.server.synced, func() bool { return synced })
	wantError(t, f.acquire(0), http.StatusServiceUnavailable, client.CodeUnavailable, "")
	synced = true
	if rec := f.acquire(0); rec.Code != http.StatusAccepted {
		t.Errorf("status %d after sync", rec.Code)
	}
}

// TestTokenReviewUnavailable: a TokenReview that fails is 503, and is not cached.
func TestTokenReviewUnavailable(t *testing.T) {
	f := newFixture(t, baseObjects()...)
	f.kube.PrependReactor("create", "tokenreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("connection refused")
	})
	wantError(t, f.acquire(0), http.StatusServiceUnavailable, client.CodeUnavailable, "")
	if len(f.server.authn.cache) != 0 {
		t.Error("a failed review was cached")
	}
}

// FuzzDecodeAcquire: the decoder and validator never panic, and every failure is an *apiError
// with a 400 or 413 status and a bounded message; what they accept is valid.
func FuzzDecodeAcquire(f *testing.F) {
	for _, seed := range []string{
		`{"namespace":"team-a","runtime":"agent","session":"s","handle":"codegen/default","waitSeconds":30}`,
		`{"namespace":"team-a","runtime":"agent","session":"s","handle":"codegen/default"}`,
		`{"namespace":"a","runtime":"b","session":"~!","handle":"a/b","waitSeconds":0}`,
		`{"namespace":"","extra":[1,2,{}]}`,
		`[]`, `null`, `{}`, `{"waitSeconds":1e400}`, `{"session":"\ud800"}`, "{\"namespace\":\"a\"}\x00",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		req, wait, err := decodeAcquire(http.MaxBytesReader(httptest.NewRecorder(), io.NopCloser(bytes.NewReader(data)), client.MaxBodyBytes))
		if err != nil {
			if err.status != http.StatusBadRequest && err.status != http.StatusRequestEntityTooLarge {
				t.Fatalf("status %d", err.status)
			}
			if err.code != client.CodeInvalid || err.message == "" || len(err.message) > 400 {
				t.Fatalf("error %+v", err)
			}
			return
		}
		if wait < 0 || wait > client.MaxWaitSeconds*1e9 {
			t.Fatalf("wait %v", wait)
		}
		if validateTarget(req.Namespace, req.Runtime, req.Session) != nil {
			t.Fatal("accepted an invalid target")
		}
		if _, err := splitHandle(req.Handle); err != nil {
			t.Fatal("accepted an invalid handle")
		}
		for i := 0; i < len(req.Session); i++ {
			if req.Session[i] < 0x21 || req.Session[i] > 0x7e {
				t.Fatalf("accepted session %q", req.Session)
			}
		}
	})
}

// TestRequestEndedIsRetryable: a call to the API server that fails because the request's context
// ended (the client went away, or this replica is shutting down mid-acquire) answers the retryable
// 503 unavailable, not 500 internal; the same failure with the request still alive is a 500.
func TestRequestEndedIsRetryable(t *testing.T) {
	for name, tc := range map[string]struct {
		cancel     bool
		wantStatus int
		wantCode   string
	}{
		"request ended":       {cancel: true, wantStatus: http.StatusServiceUnavailable, wantCode: client.CodeUnavailable},
		"request still alive": {cancel: false, wantStatus: http.StatusInternalServerError, wantCode: client.CodeInternal},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, baseObjects()...)
			ctx, cancel := context.WithCancel(f.ctx)
			defer cancel()
			f.ctx = ctx
			f.airlock.PrependReactor("create", "sandboxclaims", func(k8stesting.Action) (bool, runtime.Object, error) {
				if tc.cancel {
					cancel()
					return true, nil, context.Canceled
				}
				return true, nil, errors.New("etcd is on fire")
			})
			e := wantError(t, f.acquire(0), tc.wantStatus, tc.wantCode, "")
			t.Logf("answer: %+v", e)
			if len(f.createdClaims()) != 0 {
				t.Errorf("claims created: %v", f.createdClaims())
			}
		})
	}
}
