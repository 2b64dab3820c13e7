package sandboxapi

import (
	"net/http"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/pkg/client"
)

// TestAuthentication: who may call, and the order of the checks. Each case asks for the runtime
// "agent" of namespace team-a (or another, where the case says).
func TestAuthentication(t *testing.T) {
	tests := map[string]struct {
		header     string // the Authorization header; empty sends none
		namespace  string
		runtime    string
		wantStatus int
		wantCode   string
		// wantReviews is how many TokenReviews the request costs.
		wantReviews int
	}{
		"no token":          {wantStatus: http.StatusUnauthorized, wantCode: client.CodeUnauthorized},
		"not bearer":        {header: "Basic dXNlcjpwdw==", wantStatus: http.StatusUnauthorized, wantCode: client.CodeUnauthorized},
		"empty bearer":      {header: "Bearer ", wantStatus: http.StatusUnauthorized, wantCode: client.CodeUnauthorized},
		"forged token":      {header: "Bearer forged", wantStatus: http.StatusUnauthorized, wantCode: client.CodeUnauthorized, wantReviews: 1},
		"a user, not an SA": {header: "Bearer " + tokenUser, wantStatus: http.StatusUnauthorized, wantCode: client.CodeUnauthorized, wantReviews: 1},
		"another SA":        {header: "Bearer " + tokenOtherSA, wantStatus: http.StatusForbidden, wantCode: client.CodeForbidden, wantReviews: 1},
		"another namespace": {header: "Bearer " + tokenOtherNS, wantStatus: http.StatusForbidden, wantCode: client.CodeForbidden, wantReviews: 1},
		"missing runtime":   {header: "Bearer " + tokenAgent, runtime: "nobody", wantStatus: http.StatusNotFound, wantCode: client.CodeNotFound, wantReviews: 1},
		"another namespace's missing runtime": {
			// 403, not 404: a stranger learns nothing about which runtimes exist.
			header: "Bearer " + tokenOtherNS, runtime: "nobody",
			wantStatus: http.StatusForbidden, wantCode: client.CodeForbidden, wantReviews: 1,
		},
		"a missing runtime of the token's own namespace": {
			header: "Bearer " + tokenOtherNS, namespace: "team-b", runtime: testRuntime,
			wantStatus: http.StatusNotFound, wantCode: client.CodeNotFound, wantReviews: 1,
		},
		"the runtime's SA": {header: "Bearer " + tokenAgent, wantStatus: http.StatusAccepted, wantReviews: 1},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, baseObjects()...)
			body := acquireBody(testSession, testHandle, 0)
			if tc.namespace != "" {
				body.Namespace = tc.namespace
			}
			if tc.runtime != "" {
				body.Runtime = tc.runtime
			}
			rec := f.doHeader("/v1/sandboxes/acquire", tc.header, body)
			if tc.wantCode != "" {
				wantError(t, rec, tc.wantStatus, tc.wantCode, "")
			} else if rec.Code != tc.wantStatus {
				t.Fatalf("status %d, want %d: %s", rec.Code, tc.wantStatus, rec.Body.String())
			}
			if tc.wantStatus == http.StatusUnauthorized && rec.Header().Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate")
			}
			if got := f.reviewCount(); got != tc.wantReviews {
				t.Errorf("%d TokenReviews, want %d", got, tc.wantReviews)
			}
			if tc.wantStatus != http.StatusAccepted && len(f.createdClaims()) != 0 {
				t.Errorf("a refused request created claims: %v", f.createdClaims())
			}
		})
	}
}

// TestAuthenticationAudiences: with audiences configured, a token reviewed for another audience
// is 401.
func TestAuthenticationAudiences(t *testing.T) {
	f := newFixtureWithOptions(t, fixtureOptions{audiences: []string{"airlock"}}, baseObjects()...)
	wantError(t, f.do("/v1/sandboxes/acquire", tokenWrongAudience, acquireBody(testSession, testHandle, 0)), http.StatusUnauthorized, client.CodeUnauthorized, "")
	if rec := f.acquire(0); rec.Code != http.StatusAccepted {
		t.Fatalf("status %d: %s", rec.Code, rec.Body.String())
	}
}

// TestAuthenticationCache: positive results are cached for positiveTTL, negative ones for
// negativeTTL, by token hash.
func TestAuthenticationCache(t *testing.T) {
	f := newFixture(t, baseObjects()...)
	renew := func(token string) int {
		return f.do("/v1/sandboxes/renew", token, client.RenewRequest{Namespace: testNS, Runtime: testRuntime, Session: testSession, Handle: testHandle}).Code
	}
	for range 3 {
		if code := renew(tokenAgent); code != http.StatusNotFound {
			t.Fatalf("renew: %d", code)
		}
	}
	if got := f.reviewCount(); got != 1 {
		t.Fatalf("%d reviews for three calls within the TTL, want 1", got)
	}
	f.clock.Step(positiveTTL + time.Second)
	renew(tokenAgent)
	if got := f.reviewCount(); got != 2 {
		t.Fatalf("%d reviews after the TTL, want 2", got)
	}

	for range 3 {
		if code := renew("forged"); code != http.StatusUnauthorized {
			t.Fatalf("forged renew: %d", code)
		}
	}
	if got := f.reviewCount(); got != 3 {
		t.Fatalf("%d reviews, want 3 (one per token)", got)
	}
	f.clock.Step(negativeTTL)
	renew("forged")
	if got := f.reviewCount(); got != 4 {
		t.Fatalf("%d reviews after the negative TTL, want 4", got)
	}
	for key := range f.server.authn.cache {
		for _, tok := range []string{tokenAgent, "forged"} {
			if string(key[:]) == tok {
				t.Fatal("the cache holds a token")
			}
		}
	}
}

func TestSplitServiceAccount(t *testing.T) {
	tests := map[string]struct {
		username string
		wantNS   string
		wantName string
		wantOK   bool
	}{
		"service account":   {"system:serviceaccount:ns:sa", "ns", "sa", true},
		"user":              {"alice", "", "", false},
		"no name":           {"system:serviceaccount:ns:", "", "", false},
		"no namespace":      {"system:serviceaccount::sa", "", "", false},
		"extra part":        {"system:serviceaccount:ns:sa:x", "", "", false},
		"prefix only":       {"system:serviceaccount:", "", "", false},
		"group-like prefix": {"system:serviceaccounts:ns", "", "", false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ns, sa, ok := splitServiceAccount(tc.username)
			if ns != tc.wantNS || sa != tc.wantName || ok != tc.wantOK {
				t.Errorf("got %q %q %v", ns, sa, ok)
			}
		})
	}
}

// TestEveryEndpointAuthorizes: renew, sessions/open and sessions/close refuse like acquire.
func TestEveryEndpointAuthorizes(t *testing.T) {
	bodies := map[string]any{
		"/v1/sandboxes/acquire": acquireBody(testSession, testHandle, 0),
		"/v1/sandboxes/renew":   renewBody(testSession, testHandle),
		"/v1/sessions/open":     sessionBody(testSession),
		"/v1/sessions/close":    sessionBody(testSession),
	}
	for path, body := range bodies {
		t.Run(path, func(t *testing.T) {
			f := newFixture(t, baseObjects()...)
			wantError(t, f.do(path, "", body), http.StatusUnauthorized, client.CodeUnauthorized, "")
			wantError(t, f.do(path, "forged", body), http.StatusUnauthorized, client.CodeUnauthorized, "")
			wantError(t, f.do(path, tokenOtherSA, body), http.StatusForbidden, client.CodeForbidden, "")
			wantError(t, f.do(path, tokenOtherNS, body), http.StatusForbidden, client.CodeForbidden, "")
			if writes := writeActions(f.airlock.Actions()); len(writes) != 0 {
				t.Errorf("writes: %v", writes)
			}
		})
	}
}
