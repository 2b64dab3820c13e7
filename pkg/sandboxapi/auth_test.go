package sandboxapi

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/airlock-dev/airlock/pkg/claimname"
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
		"garbage token":     {header: "Bearer forged", wantStatus: http.StatusUnauthorized, wantCode: client.CodeUnauthorized},
		"forged JWT":        {header: "Bearer " + tokenForged, wantStatus: http.StatusUnauthorized, wantCode: client.CodeUnauthorized, wantReviews: 1},
		"expired JWT":       {header: "Bearer " + tokenExpired, wantStatus: http.StatusUnauthorized, wantCode: client.CodeUnauthorized},
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

// TestAuthenticationAudiences: the API asks TokenReview for its own audience ("airlock" by
// default). A token for another audience is 401 with a message that says how to mount a projected
// token for airlock; a token for airlock is admitted.
func TestAuthenticationAudiences(t *testing.T) {
	tests := map[string]struct {
		token      string
		wantStatus int
	}{
		"a token for airlock":                          {token: tokenAgent, wantStatus: http.StatusAccepted},
		"a reviewer that answers another audience":     {token: tokenWrongAudience, wantStatus: http.StatusUnauthorized},
		"the runtime's own default (API server) token": {token: tokenAPIServer, wantStatus: http.StatusUnauthorized},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, baseObjects()...)
			rec := f.do("/v1/sandboxes/acquire", tc.token, acquireBody(testSession, testHandle, 0))
			if tc.wantStatus != http.StatusUnauthorized {
				if rec.Code != tc.wantStatus {
					t.Fatalf("status %d, want %d: %s", rec.Code, tc.wantStatus, rec.Body.String())
				}
				return
			}
			e := wantError(t, rec, http.StatusUnauthorized, client.CodeUnauthorized, "")
			for _, want := range []string{"projected", "serviceAccountToken", "audience: airlock", "audience airlock"} {
				if !strings.Contains(e.Message, want) {
					t.Errorf("message %q does not say %q", e.Message, want)
				}
			}
			if len(f.createdClaims()) != 0 {
				t.Error("a refused token created a claim")
			}
		})
	}
}

// TestAPIServerAudienceTokenRefused is adversarial: a token sniffed from the runtime's pod, of the
// very ServiceAccount the runtime names but issued for the API server, is refused on every
// endpoint, before any review (its aud is not airlock's), with the message that says how to mount
// a token for airlock; and a review, when one is asked, asks for airlock's audience only.
func TestAPIServerAudienceTokenRefused(t *testing.T) {
	bodies := map[string]any{
		"/v1/sandboxes/acquire": acquireBody(testSession, testHandle, 0),
		"/v1/sandboxes/renew":   renewBody(testSession, testHandle),
		"/v1/sessions/open":     sessionBody(testSession),
		"/v1/sessions/close":    sessionBody(testSession),
	}
	for path, body := range bodies {
		t.Run(path, func(t *testing.T) {
			f := newFixture(t, baseObjects()...)
			var asked [][]string
			f.kube.PrependReactor("create", "tokenreviews", func(action k8stesting.Action) (bool, runtime.Object, error) {
				asked = append(asked, action.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview).Spec.Audiences)
				return false, nil, nil
			})
			e := wantError(t, f.do(path, tokenAPIServer, body), http.StatusUnauthorized, client.CodeUnauthorized, "")
			if !strings.Contains(e.Message, "audience: airlock") {
				t.Errorf("message %q does not say how to mount a token for airlock", e.Message)
			}
			if len(asked) != 0 {
				t.Errorf("reviews asked for %v, want none: the token's aud is the API server's", asked)
			}
			if writes := writeActions(f.airlock.Actions()); len(writes) != 0 {
				t.Errorf("writes: %v", writes)
			}
			f.do(path, tokenAgent, body)
			if len(asked) != 1 || !slices.Equal(asked[0], []string{"airlock"}) {
				t.Errorf("reviews asked for audiences %v, want [[airlock]]", asked)
			}
		})
	}
}

// TestGarbageTokensCostNoReview is adversarial: a flood of distinct tokens that no TokenReview
// could accept (not JWTs, JWTs of another audience or expired, undecodable parts, a JSON array
// for a payload) is answered 401 without a single review; a well formed token for airlock is
// still sent to review, and its rejection cached by hash.
func TestGarbageTokensCostNoReview(t *testing.T) {
	f := newFixture(t, baseObjects()...)
	garbage := []string{
		"forged", "a.b", "a.b.c", "..", "a..c", "e30.e30.", "e30.W10.c2ln", "e30.bm90LWpzb24.c2ln",
		"!!!.@@@.###", testJWT("x", "elsewhere"), testJWT("y", apiServerAudience), tokenExpired,
		testJWTExpiring("z", testAudience, -2*tokenExpiryLeeway),
	}
	for i := range 200 {
		garbage = append(garbage, fmt.Sprintf("garbage-%d-%x", i, i*7919), testJWT(fmt.Sprintf("other-%d", i), "not-airlock"))
	}
	for _, tok := range garbage {
		if rec := f.do("/v1/sandboxes/renew", tok, renewBody(testSession, testHandle)); rec.Code != http.StatusUnauthorized {
			t.Fatalf("token %q: status %d, want 401", tok, rec.Code)
		}
	}
	if got := f.reviewCount(); got != 0 {
		t.Errorf("%d TokenReviews for %d garbage tokens, want 0", got, len(garbage))
	}
	for range 3 {
		f.do("/v1/sandboxes/renew", tokenForged, renewBody(testSession, testHandle))
	}
	if got := f.reviewCount(); got != 1 {
		t.Errorf("%d reviews for a well formed token sent three times, want 1 (then its rejection is cached)", got)
	}
	// An exp within the leeway is sent to review: the API server's clock decides.
	f.do("/v1/sandboxes/renew", testJWTExpiring("late", testAudience, -tokenExpiryLeeway/2), renewBody(testSession, testHandle))
	if got := f.reviewCount(); got != 2 {
		t.Errorf("%d reviews, want 2: a token just past its exp goes to review", got)
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
		if code := renew(tokenForged); code != http.StatusUnauthorized {
			t.Fatalf("forged renew: %d", code)
		}
	}
	if got := f.reviewCount(); got != 3 {
		t.Fatalf("%d reviews, want 3 (one per token)", got)
	}
	f.clock.Step(negativeTTL)
	renew(tokenForged)
	if got := f.reviewCount(); got != 4 {
		t.Fatalf("%d reviews after the negative TTL, want 4", got)
	}
	for key := range f.server.authn.cache {
		for _, tok := range []string{tokenAgent, tokenForged} {
			if string(key[:]) == tok {
				t.Fatal("the cache holds a token")
			}
		}
	}
}

// TestAuthenticationSharedReview: requests that miss the cache with the same token at once share
// one TokenReview (a burst of acquires from one runtime), and each gets its answer.
func TestAuthenticationSharedReview(t *testing.T) {
	f := newFixture(t, baseObjects()...)
	const n = 8
	release := make(chan struct{})
	f.kube.PrependReactor("create", "tokenreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
		<-release // the API server answers once every request waits on a review
		return false, nil, nil
	})
	var waiting sync.WaitGroup
	waiting.Add(n)
	f.server.authn.joined = waiting.Done
	codes := make(chan int, n)
	for range n {
		go func() {
			codes <- f.do("/v1/sandboxes/renew", tokenAgent, client.RenewRequest{Namespace: testNS, Runtime: testRuntime, Session: testSession, Handle: testHandle}).Code
		}()
	}
	waiting.Wait()
	close(release)
	for range n {
		if code := <-codes; code != http.StatusNotFound {
			t.Errorf("renew: %d, want 404 (authenticated; no claim)", code)
		}
	}
	if got := f.reviewCount(); got != 1 {
		t.Errorf("%d reviews for %d requests at once with one token, want 1", got, n)
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

// TestAuditLine: every request is one audit line with the ServiceAccount, namespace, runtime,
// session hash, handle and status; the session itself is never logged.
func TestAuditLine(t *testing.T) {
	const secretSession = "session-that-must-not-be-logged"
	c := existingClaim(secretSession, testHandle, "Bound")
	tests := map[string]struct {
		path      string
		token     string
		body      any
		wantEntry map[string]any
	}{
		"acquire": {
			path: "/v1/sandboxes/acquire", token: tokenAgent, body: acquireBody(secretSession, testHandle, 0),
			wantEntry: map[string]any{"endpoint": "acquire", "serviceAccount": testNS + "/" + testSA, "namespace": testNS, "runtime": testRuntime,
				"sessionHash": claimname.SessionHash(secretSession), "handle": testHandle, "status": http.StatusOK},
		},
		"renew": {
			path: "/v1/sandboxes/renew", token: tokenAgent, body: renewBody(secretSession, testHandle),
			wantEntry: map[string]any{"endpoint": "renew", "serviceAccount": testNS + "/" + testSA, "namespace": testNS, "runtime": testRuntime,
				"sessionHash": claimname.SessionHash(secretSession), "handle": testHandle, "status": http.StatusNoContent},
		},
		"close": {
			path: "/v1/sessions/close", token: tokenAgent, body: sessionBody(secretSession),
			wantEntry: map[string]any{"endpoint": "closeSession", "serviceAccount": testNS + "/" + testSA, "namespace": testNS, "runtime": testRuntime,
				"sessionHash": claimname.SessionHash(secretSession), "handle": "", "status": http.StatusAccepted},
		},
		"refused token": {
			path: "/v1/sandboxes/acquire", token: tokenAPIServer, body: acquireBody(secretSession, testHandle, 0),
			wantEntry: map[string]any{"endpoint": "acquire", "serviceAccount": "", "namespace": "", "runtime": "",
				"sessionHash": "", "handle": "", "status": http.StatusUnauthorized},
		},
		"another ServiceAccount": {
			path: "/v1/sandboxes/renew", token: tokenOtherSA, body: renewBody(secretSession, testHandle),
			wantEntry: map[string]any{"endpoint": "renew", "serviceAccount": testNS + "/someone-else", "namespace": testNS, "runtime": testRuntime,
				"sessionHash": claimname.SessionHash(secretSession), "handle": testHandle, "status": http.StatusForbidden},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, append(baseObjects(), c)...)
			rec := f.do(tc.path, tc.token, tc.body)
			if rec.Code != tc.wantEntry["status"] {
				t.Fatalf("status %d: %s", rec.Code, rec.Body.String())
			}
			var audits []map[string]any
			for _, e := range f.logs.Data() {
				if e.Message != auditMessage {
					continue
				}
				kv := map[string]any{}
				for i := 0; i+1 < len(e.ParameterKVList); i += 2 {
					kv[e.ParameterKVList[i].(string)] = e.ParameterKVList[i+1]
				}
				if e.Verbosity != 0 || e.Prefix != "sandboxapi/audit" {
					t.Errorf("audit line at V(%d) under %q, want V(0) under sandboxapi/audit", e.Verbosity, e.Prefix)
				}
				audits = append(audits, kv)
			}
			if len(audits) != 1 {
				t.Fatalf("%d audit lines, want 1: %v", len(audits), audits)
			}
			if diff := cmp.Diff(tc.wantEntry, audits[0]); diff != "" {
				t.Errorf("audit line (-want +got):\n%s", diff)
			}
			if strings.Contains(f.logs.String(), secretSession) {
				t.Error("the session was logged")
			}
		})
	}
}
