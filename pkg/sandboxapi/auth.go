package sandboxapi

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/airlock-dev/airlock/pkg/client"
)

// How long TokenReview results are kept, by the sha256 of the token (never the token itself).
// A positive result is kept briefly so that a burst of calls costs one review; a revoked token
// keeps working at most this long. A negative result is kept shorter still, so that a flood of
// bad tokens does not become a flood of TokenReviews.
const (
	positiveTTL = 10 * time.Second
	negativeTTL = 2 * time.Second
	// reviewTimeout bounds a TokenReview: an API server that does not answer is a 503.
	reviewTimeout = 5 * time.Second
	// maxCacheEntries bounds the cache; when it is full of live entries, results are not cached.
	maxCacheEntries = 4096
)

// serviceAccountPrefix starts the username of every ServiceAccount token.
const serviceAccountPrefix = "system:serviceaccount:"

// authenticator reviews bearer tokens with the TokenReview API.
type authenticator struct {
	client    kubernetes.Interface
	audiences []string
	clock     clock.PassiveClock

	mu    sync.Mutex
	cache map[[sha256.Size]byte]reviewResult
	// inflight shares one TokenReview among the requests that miss the cache for the same
	// token at once: a burst of acquires from one runtime (60 at once in make bench) made one
	// review each until the first answer was cached.
	inflight singleflight.Group
	// joined, when set (tests), is called once a request waits on a review, its own or one
	// already in flight.
	joined func()
}

// reviewResult is one cached review: the ServiceAccount, or ok false for a rejected token.
type reviewResult struct {
	ok      bool
	who     caller
	expires time.Time
}

func newAuthenticator(client kubernetes.Interface, audiences []string, clock clock.PassiveClock) *authenticator {
	return &authenticator{
		client:    client,
		audiences: slices.Clone(audiences),
		clock:     clock,
		cache:     make(map[[sha256.Size]byte]reviewResult),
	}
}

// authenticate returns the ServiceAccount of the request's bearer token: 401 for a missing,
// malformed or rejected token (and for a valid token that is not a ServiceAccount's), 503 when the
// TokenReview cannot be made.
func (s *Server) authenticate(ctx context.Context, req *http.Request) (caller, error) {
	header := req.Header.Get("Authorization")
	scheme, token, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
		return caller{}, errorf(http.StatusUnauthorized, client.CodeUnauthorized, "send the runtime's ServiceAccount token as \"Authorization: Bearer <token>\"")
	}
	token = strings.TrimSpace(token)
	if !s.authn.plausible(token) {
		// Not a token TokenReview could accept: no review is asked (a flood of distinct garbage
		// costs none), and the answer is the one a rejected review gets.
		return s.authn.result(reviewResult{})
	}
	return s.authn.review(ctx, token)
}

// tokenExpiryLeeway is how long past its exp a token is still sent to review: the API server's
// clock decides, and it may be behind this one.
const tokenExpiryLeeway = time.Minute

// plausible says whether token could pass a TokenReview for the audiences: a ServiceAccount
// token is a JWT (three base64url parts, the first two JSON objects) whose aud names one of the
// audiences (when some are asked) and whose exp, if it has one, has not passed. Nothing here is
// verified: only the review decides. This only spares a review of what cannot pass, so that
// distinct garbage tokens cost no TokenReview each (the negative cache holds them by hash: it
// helps only when one is sent again).
func (a *authenticator) plausible(token string) bool {
	parts := strings.Split(token, ".")
	if len(parts) != 3 || parts[2] == "" {
		return false
	}
	var header map[string]any
	if !decodeSegment(parts[0], &header) {
		return false
	}
	var claims struct {
		Aud json.RawMessage `json:"aud"`
		Exp *json.Number    `json:"exp"`
	}
	if !decodeSegment(parts[1], &claims) {
		return false
	}
	if claims.Exp != nil {
		exp, err := claims.Exp.Int64()
		if err != nil || a.clock.Now().After(time.Unix(exp, 0).Add(tokenExpiryLeeway)) {
			return false
		}
	}
	if len(a.audiences) == 0 {
		return true
	}
	var auds []string
	if err := json.Unmarshal(claims.Aud, &auds); err != nil {
		var one string
		if err := json.Unmarshal(claims.Aud, &one); err != nil {
			return false
		}
		auds = []string{one}
	}
	return slices.ContainsFunc(auds, func(aud string) bool { return slices.Contains(a.audiences, aud) })
}

// decodeSegment decodes one base64url part of a JWT into v, a JSON object.
func decodeSegment(segment string, v any) bool {
	data, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(segment, "="))
	if err != nil || len(data) == 0 || data[0] != '{' {
		return false
	}
	return json.Unmarshal(data, v) == nil
}

// review authenticates one token, from the cache when it can.
func (a *authenticator) review(ctx context.Context, token string) (caller, error) {
	key := sha256.Sum256([]byte(token))
	now := a.clock.Now()
	a.mu.Lock()
	r, hit := a.cache[key]
	a.mu.Unlock()
	if hit && now.Before(r.expires) {
		return a.result(r)
	}

	// One review for every request that misses the cache with this token now. It is not tied to
	// the first request's context (that client may go away while the others wait), and it is
	// bounded: while the API server is away the callers get a 503 they can retry, not a request
	// that hangs until the API server returns.
	ch := a.inflight.DoChan(string(key[:]), func() (any, error) {
		reviewCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reviewTimeout)
		defer cancel()
		review, err := a.client.AuthenticationV1().TokenReviews().Create(reviewCtx, &authenticationv1.TokenReview{
			Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: a.audiences},
		}, metav1.CreateOptions{})
		if err != nil {
			// Not cached: the next request reviews again.
			klog.FromContext(ctx).Error(err, "TokenReview failed")
			return nil, err
		}
		r := a.judge(review)
		ttl := negativeTTL
		if r.ok {
			ttl = positiveTTL
		}
		now := a.clock.Now()
		r.expires = now.Add(ttl)
		a.store(key, r, now)
		if !r.ok {
			// Log the token's hash prefix, never the token, so that repeated failures can be told apart.
			klog.FromContext(ctx).V(2).Info("Token rejected", "tokenHash", fmt.Sprintf("%x", key[:6]), "error", review.Status.Error)
		}
		return r, nil
	})
	if a.joined != nil {
		a.joined()
	}
	select {
	case res := <-ch:
		if res.Err != nil {
			return caller{}, errorf(http.StatusServiceUnavailable, client.CodeUnavailable, "cannot review the token now: try again")
		}
		return a.result(res.Val.(reviewResult))
	case <-ctx.Done():
		return caller{}, errorf(http.StatusServiceUnavailable, client.CodeUnavailable, "cannot review the token now: try again")
	}
}

// judge turns a TokenReview's answer into a result: authenticated, for one of the audiences
// asked (when some were), and a ServiceAccount's.
func (a *authenticator) judge(review *authenticationv1.TokenReview) reviewResult {
	st := review.Status
	if !st.Authenticated {
		return reviewResult{}
	}
	if len(a.audiences) > 0 && !slices.ContainsFunc(st.Audiences, func(aud string) bool { return slices.Contains(a.audiences, aud) }) {
		return reviewResult{}
	}
	ns, name, ok := splitServiceAccount(st.User.Username)
	if !ok {
		return reviewResult{}
	}
	return reviewResult{ok: true, who: caller{namespace: ns, serviceAccount: name}}
}

// result is the review's answer: the caller, or 401. With audiences configured (the default,
// "airlock"), the 401 says how to mount a token for them: the usual mistake is sending the
// pod's default token, whose audience is the Kubernetes API server.
func (a *authenticator) result(r reviewResult) (caller, error) {
	if r.ok {
		return r.who, nil
	}
	if len(a.audiences) == 0 {
		return caller{}, errorf(http.StatusUnauthorized, client.CodeUnauthorized, "the token is not a valid ServiceAccount token for this API")
	}
	return caller{}, errorf(http.StatusUnauthorized, client.CodeUnauthorized, audienceHint, strings.Join(a.audiences, ", "), a.audiences[0])
}

// audienceHint is the 401 message when audiences are configured.
const audienceHint = "the token is not a valid ServiceAccount token with audience %s: " +
	"the pod's default token (/var/run/secrets/kubernetes.io/serviceaccount/token) is for the Kubernetes API server and is refused. " +
	"Mount a projected ServiceAccount token for airlock in the runtime's pod: a projected volume with a serviceAccountToken source " +
	"(audience: %s, expirationSeconds: 3600, path: token), e.g. at /var/run/secrets/airlock, " +
	"and send it as `Authorization: Bearer <token>`; the kubelet rotates it, so read the file again before each call"

// store caches a result, first dropping expired entries when the cache is full.
func (a *authenticator) store(key [sha256.Size]byte, r reviewResult, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.cache) >= maxCacheEntries {
		for k, v := range a.cache {
			if !now.Before(v.expires) {
				delete(a.cache, k)
			}
		}
		if len(a.cache) >= maxCacheEntries {
			return
		}
	}
	a.cache[key] = r
}

// splitServiceAccount parses "system:serviceaccount:<namespace>:<name>".
func splitServiceAccount(username string) (namespace, name string, ok bool) {
	rest, ok := strings.CutPrefix(username, serviceAccountPrefix)
	if !ok {
		return "", "", false
	}
	namespace, name, ok = strings.Cut(rest, ":")
	if !ok || namespace == "" || name == "" || strings.Contains(name, ":") {
		return "", "", false
	}
	return namespace, name, true
}
