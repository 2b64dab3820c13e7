package sandboxapi

import (
	"go.opentelemetry.io/otel/trace"

	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	batchlisters "k8s.io/client-go/listers/batch/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/claimname"
	"github.com/airlock-dev/airlock/pkg/claimtoken"
	"github.com/airlock-dev/airlock/pkg/client"
	airlockfake "github.com/airlock-dev/airlock/pkg/generated/clientset/versioned/fake"
	airlockinformers "github.com/airlock-dev/airlock/pkg/generated/informers/externalversions"
	airlocklisters "github.com/airlock-dev/airlock/pkg/generated/listers/airlock/v1alpha1"
)

const (
	testNS      = "team-a"
	testRuntime = "agent"
	testSA      = "agent-sa"
	testSession = "session-1"
	testHandle  = "codegen/default"
)

var t0 = time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)

// Tokens the TokenReview reactor knows: JWTs as the API server issues them (aud, exp; the
// signature is not checked here, only the review decides), so that the API sends them to review.
var (
	tokenAgent         = testJWT("agent", testAudience)                     // system:serviceaccount:team-a:agent-sa
	tokenOtherSA       = testJWT("other-sa", testAudience)                  // system:serviceaccount:team-a:someone-else
	tokenOtherNS       = testJWT("other-ns", testAudience)                  // system:serviceaccount:team-b:agent-sa
	tokenUser          = testJWT("user", testAudience)                      // a user, not a ServiceAccount
	tokenWrongAudience = testJWT("wrong-aud", testAudience)                 // a reviewer that authenticates it for another audience
	tokenForged        = testJWT("forged", testAudience)                    // well formed, for airlock: only the review refuses it
	tokenExpired       = testJWTExpiring("agent", testAudience, -time.Hour) // the agent's, expired an hour ago
	// tokenAPIServer is the runtime's own ServiceAccount's default token: its audience is the
	// API server's, as in every pod's /var/run/secrets/kubernetes.io/serviceaccount/token.
	tokenAPIServer = testJWT("api-server-audience", apiServerAudience)
)

// testJWT is a token shaped as the API server's ServiceAccount tokens are, for audience aud,
// expiring a day after t0; sub tells the test tokens apart.
func testJWT(sub, aud string) string { return testJWTExpiring(sub, aud, 24*time.Hour) }

func testJWTExpiring(sub, aud string, after time.Duration) string {
	enc := func(v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			panic(err)
		}
		return base64.RawURLEncoding.EncodeToString(b)
	}
	return enc(map[string]string{"alg": "RS256", "kid": "test"}) + "." +
		enc(map[string]any{"aud": []string{aud}, "exp": t0.Add(after).Unix(), "sub": sub, "iss": "https://kubernetes.default.svc"}) +
		".c2lnbmF0dXJl"
}

// fakeEvents is a stand-in for a shared informer's event registration: tests call its handlers
// after changing the indexer, as an informer does.
type fakeEvents struct {
	mu       sync.Mutex
	handlers []cache.ResourceEventHandler
}

func (f *fakeEvents) AddEventHandler(h cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.handlers = append(f.handlers, h)
	return nil, nil
}

func (f *fakeEvents) fire(old, cur any) {
	f.mu.Lock()
	hs := append([]cache.ResourceEventHandler(nil), f.handlers...)
	f.mu.Unlock()
	for _, h := range hs {
		switch {
		case old == nil:
			h.OnAdd(cur, false)
		case cur == nil:
			h.OnDelete(old)
		default:
			h.OnUpdate(old, cur)
		}
	}
}

type fixture struct {
	t       *testing.T
	ctx     context.Context
	kube    *k8sfake.Clientset
	airlock *airlockfake.Clientset
	clock   *clocktesting.FakeClock

	runtimes, registries, classes, claims cache.Indexer
	claimEvents                           *fakeEvents
	// jobs is the replica's cache of kept workspaces' records (Config.KeptRecordCache).
	jobs   cache.Indexer
	tokens *fakeTokens
	// logs holds what the server logged (the audit lines among it).
	logs ktesting.Buffer

	server *Server
	// waiting receives a value each time an acquire starts waiting.
	waiting chan struct{}

	mu      sync.Mutex
	reviews int
}

type fixtureOptions struct {
	// informer makes the claims' lister and events a real informer over the fake clientset,
	// started and synced before newFixture returns.
	informer bool
	// audiences are the server's; nil means the operator's default, "airlock".
	audiences []string
	// keptRecords reads kept workspaces' records; nil reads them from the fake clientset.
	keptRecords KeptRecords
	// tracerProvider gets the acquire spans; nil: none.
	tracerProvider trace.TracerProvider
}

// testAudience is the operator's default --token-audiences.
const testAudience = "airlock"

// apiServerAudience is what the API server puts into a pod's default token.
const apiServerAudience = "https://kubernetes.default.svc.cluster.local"

// testKey is the operator's claim token key in these tests.
var testKey = []byte("0123456789abcdef0123456789abcdef")

// fakeTokens derives tokens with testKey, or fails with err.
type fakeTokens struct {
	mu  sync.Mutex
	err error
}

func (f *fakeTokens) Token(_ context.Context, uid types.UID, namespace, name string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return "", f.err
	}
	return claimtoken.Derive(testKey, uid, namespace, name)
}

func (f *fakeTokens) AdoptionToken(_ context.Context, namespace, member string, claimUID types.UID, tools []string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return "", f.err
	}
	key, err := claimtoken.MemberKey(testKey, namespace, member)
	if err != nil {
		return "", err
	}
	return claimtoken.AdoptionToken(key, claimUID, tools)
}

// claimToken is the token the API hands out for c.
func claimToken(t *testing.T, c *airlockv1alpha1.SandboxClaim) string {
	t.Helper()
	tok, err := claimtoken.Derive(testKey, c.UID, c.Namespace, c.Name)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func newFixture(t *testing.T, objects ...runtime.Object) *fixture {
	return newFixtureWithOptions(t, fixtureOptions{}, objects...)
}

func newFixtureWithOptions(t *testing.T, o fixtureOptions, objects ...runtime.Object) *fixture {
	t.Helper()
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	ctx := klog.NewContext(context.Background(), logger)
	if o.audiences == nil {
		o.audiences = []string{testAudience}
	}
	f := &fixture{
		t:           t,
		ctx:         ctx,
		kube:        k8sfake.NewClientset(),
		clock:       clocktesting.NewFakeClock(t0),
		runtimes:    cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}),
		registries:  cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}),
		classes:     cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}),
		claims:      cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}),
		claimEvents: &fakeEvents{},
		jobs:        cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}),
		tokens:      &fakeTokens{},
		logs:        logger.GetSink().(ktesting.Underlier).GetBuffer(),
		waiting:     make(chan struct{}, 1000),
	}
	var airlockObjects []runtime.Object
	for _, obj := range objects {
		switch obj := obj.(type) {
		case *airlockv1alpha1.AgentRuntime:
			mustAdd(t, f.runtimes, obj)
		case *airlockv1alpha1.ToolRegistry:
			mustAdd(t, f.registries, obj)
		case *airlockv1alpha1.SandboxClass:
			mustAdd(t, f.classes, obj)
		case *airlockv1alpha1.SandboxClaim:
			mustAdd(t, f.claims, obj)
		}
		airlockObjects = append(airlockObjects, obj)
	}
	// NewSimpleClientset: NewClientset's field-managed tracker has no schema for the airlock kinds
	// (the applyconfigurations are generated without OpenAPI), so it cannot create them.
	f.airlock = airlockfake.NewSimpleClientset(airlockObjects...) //nolint:staticcheck
	f.kube.PrependReactor("create", "tokenreviews", f.reviewToken)
	// The API server gives every object a UID (the fake tracker does not): tokens are derived from it.
	f.airlock.PrependReactor("create", "sandboxclaims", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if obj, ok := action.(k8stesting.CreateAction).GetObject().(metav1.Object); ok && obj.GetUID() == "" {
			obj.SetUID(types.UID("uid-" + obj.GetName()))
		}
		return false, nil, nil
	})

	claimLister := airlocklisters.NewSandboxClaimLister(f.claims)
	var claimEvents EventSource = f.claimEvents
	var factory airlockinformers.SharedInformerFactory
	watcherStarted := make(chan struct{})
	if o.informer {
		// As client-go's examples/fake-client: a watch reactor says when the informer watches,
		// so that no object created before the watch is missed.
		var once sync.Once
		f.airlock.PrependWatchReactor("*", func(action k8stesting.Action) (bool, watch.Interface, error) {
			w, err := f.airlock.Tracker().Watch(action.GetResource(), action.GetNamespace())
			if err != nil {
				return false, nil, err
			}
			once.Do(func() { close(watcherStarted) })
			return true, w, nil
		})
		factory = airlockinformers.NewSharedInformerFactory(f.airlock, 0)
		informer := factory.Airlock().V1alpha1().SandboxClaims()
		claimLister, claimEvents = informer.Lister(), informer.Informer()
	}
	s, err := NewServer(ctx, Config{
		KubeClient:      f.kube,
		AirlockClient:   f.airlock,
		Runtimes:        airlocklisters.NewAgentRuntimeLister(f.runtimes),
		Registries:      airlocklisters.NewToolRegistryLister(f.registries),
		Classes:         airlocklisters.NewSandboxClassLister(f.classes),
		Claims:          claimLister,
		ClaimEvents:     claimEvents,
		Tokens:          f.tokens,
		Clock:           f.clock,
		Audiences:       o.audiences,
		KeptRecords:     o.keptRecords,
		KeptRecordCache: batchlisters.NewJobLister(f.jobs),
		TracerProvider:  o.tracerProvider,
	})
	if err != nil {
		t.Fatal(err)
	}
	s.onWait = func() { f.waiting <- struct{}{} }
	f.server = s
	if factory != nil {
		ctx, cancel := context.WithCancel(ctx)
		t.Cleanup(func() { cancel(); factory.Shutdown() })
		factory.Start(ctx.Done())
		for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
			if !ok {
				t.Fatalf("%v did not sync", typ)
			}
		}
		select {
		case <-watcherStarted:
		case <-time.After(wait.ForeverTestTimeout):
			t.Fatal("the informer did not start watching")
		}
	}
	return f
}

func mustAdd(t *testing.T, idx cache.Indexer, obj any) {
	t.Helper()
	if err := idx.Add(obj); err != nil {
		t.Fatal(err)
	}
}

// reviewToken is the TokenReview reactor: it knows the test tokens.
func (f *fixture) reviewToken(action k8stesting.Action) (bool, runtime.Object, error) {
	review := action.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview).DeepCopy()
	f.mu.Lock()
	f.reviews++
	f.mu.Unlock()
	users := map[string]string{
		tokenAPIServer:     "system:serviceaccount:" + testNS + ":" + testSA,
		tokenAgent:         "system:serviceaccount:" + testNS + ":" + testSA,
		tokenOtherSA:       "system:serviceaccount:" + testNS + ":someone-else",
		tokenOtherNS:       "system:serviceaccount:team-b:" + testSA,
		tokenUser:          "alice",
		tokenWrongAudience: "system:serviceaccount:" + testNS + ":" + testSA,
	}
	// As the API server: a token is valid for the audiences it was issued for; a review that asks
	// for none asks for the API server's own; no audience in common is not authenticated.
	tokenAudiences := []string{testAudience}
	if review.Spec.Token == tokenAPIServer {
		tokenAudiences = []string{apiServerAudience}
	}
	wanted := review.Spec.Audiences
	if len(wanted) == 0 {
		wanted = []string{apiServerAudience}
	}
	var common []string
	for _, a := range tokenAudiences {
		if slices.Contains(wanted, a) {
			common = append(common, a)
		}
	}
	user, ok := users[review.Spec.Token]
	switch {
	case !ok:
		review.Status.Error = "invalid bearer token"
	case review.Spec.Token == tokenWrongAudience:
		review.Status.Authenticated = true
		review.Status.User.Username = user
		review.Status.Audiences = []string{"elsewhere"}
	case len(common) == 0:
		review.Status.Error = fmt.Sprintf("token audiences %q is invalid for the target audiences %q", tokenAudiences, wanted)
	default:
		review.Status.Authenticated = true
		review.Status.User.Username = user
		review.Status.Audiences = common
	}
	return true, review, nil
}

func (f *fixture) reviewCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reviews
}

// do serves one request with token (none when empty) and returns the recorder.
func (f *fixture) do(path, token string, body any) *httptest.ResponseRecorder {
	header := ""
	if token != "" {
		header = "Bearer " + token
	}
	return f.doHeader(path, header, body)
}

// doHeader serves one request with an Authorization header (none when empty).
func (f *fixture) doHeader(path, header string, body any) *httptest.ResponseRecorder {
	var b []byte
	switch body := body.(type) {
	case []byte:
		b = body
	case string:
		b = []byte(body)
	default:
		var err error
		if b, err = json.Marshal(body); err != nil {
			f.t.Fatal(err)
		}
	}
	req := httptest.NewRequestWithContext(f.ctx, http.MethodPost, path, bytes.NewReader(b))
	if header != "" {
		req.Header.Set("Authorization", header)
	}
	rec := httptest.NewRecorder()
	f.server.ServeHTTP(rec, req)
	return rec
}

// acquire asks for testHandle of testSession with the given wait.
func (f *fixture) acquire(wait int) *httptest.ResponseRecorder {
	return f.do("/v1/sandboxes/acquire", tokenAgent, acquireBody(testSession, testHandle, wait))
}

func acquireBody(session, handle string, wait int) client.AcquireRequest {
	return client.AcquireRequest{Namespace: testNS, Runtime: testRuntime, Session: session, Handle: handle, WaitSeconds: &wait}
}

// setClaim puts a claim into the fake API server and the cache, and fires the informer's event.
func (f *fixture) setClaim(c *airlockv1alpha1.SandboxClaim) {
	f.t.Helper()
	gvr := airlockv1alpha1.SchemeGroupVersion.WithResource("sandboxclaims")
	if err := f.airlock.Tracker().Update(gvr, c.DeepCopy(), c.Namespace); apierrors.IsNotFound(err) {
		err = f.airlock.Tracker().Add(c.DeepCopy())
		if err != nil {
			f.t.Fatal(err)
		}
	} else if err != nil {
		f.t.Fatal(err)
	}
	old, exists, _ := f.claims.Get(c)
	if err := f.claims.Update(c); err != nil {
		f.t.Fatal(err)
	}
	if exists {
		f.claimEvents.fire(old, c)
	} else {
		f.claimEvents.fire(nil, c)
	}
}

// createdClaims returns the claims in the fake API server.
func (f *fixture) createdClaims() []airlockv1alpha1.SandboxClaim {
	f.t.Helper()
	list, err := f.airlock.AirlockV1alpha1().SandboxClaims(testNS).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return list.Items
}

// apiClaim returns a claim from the fake API server.
func (f *fixture) apiClaim(name string) *airlockv1alpha1.SandboxClaim {
	f.t.Helper()
	c, err := f.airlock.AirlockV1alpha1().SandboxClaims(testNS).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return c
}

// awaitWaiting blocks until an acquire starts waiting.
func (f *fixture) awaitWaiting() {
	f.t.Helper()
	select {
	case <-f.waiting:
	case <-time.After(wait.ForeverTestTimeout):
		f.t.Fatal("no acquire started waiting")
	}
}

func decodeBody[T any](t *testing.T, rec *httptest.ResponseRecorder) T {
	t.Helper()
	var out T
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatalf("decoding %q: %v", rec.Body.String(), err)
	}
	return out
}

// wantError checks an error answer's status, code and reason.
func wantError(t *testing.T, rec *httptest.ResponseRecorder, status int, code, reason string) client.ErrorResponse {
	t.Helper()
	if rec.Code != status {
		t.Fatalf("status %d, want %d: %s", rec.Code, status, rec.Body.String())
	}
	e := decodeBody[client.ErrorResponse](t, rec)
	if e.Error != code || e.Reason != reason || e.Message == "" {
		t.Fatalf("error body %+v, want code %q reason %q and a message", e, code, reason)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	if ra := rec.Header().Get("Retry-After"); status == http.StatusServiceUnavailable && ra != retryAfterSeconds {
		t.Errorf("a 503 with Retry-After %q, want %q", ra, retryAfterSeconds)
	}
	return e
}

// Objects.

func newRuntime(mutate ...func(*airlockv1alpha1.AgentRuntime)) *airlockv1alpha1.AgentRuntime {
	rt := &airlockv1alpha1.AgentRuntime{
		ObjectMeta: metav1.ObjectMeta{Name: testRuntime, Namespace: testNS, UID: "rt-uid"},
		Spec: airlockv1alpha1.AgentRuntimeSpec{
			ServiceAccountName: testSA,
			ToolRegistryRef:    airlockv1alpha1.LocalObjectReference{Name: "tools"},
			Sandbox: airlockv1alpha1.SandboxPolicy{
				Enabled: true, MaxConcurrent: 5, MaxPerSession: 3,
				IdleTimeout: &metav1.Duration{Duration: 10 * time.Minute},
				Connections: []airlockv1alpha1.Connection{{Role: "repo", Path: "content/repo"}},
			},
		},
	}
	for _, m := range mutate {
		m(rt)
	}
	return rt
}

func newRegistry(entries ...airlockv1alpha1.RegistrySandbox) *airlockv1alpha1.ToolRegistry {
	if len(entries) == 0 {
		entries = []airlockv1alpha1.RegistrySandbox{{Name: "codegen", Class: "codegen", MaxInstances: 10, TargetPath: "out/codegen"}}
	}
	return &airlockv1alpha1.ToolRegistry{
		ObjectMeta: metav1.ObjectMeta{Name: "tools", Namespace: testNS},
		Spec:       airlockv1alpha1.ToolRegistrySpec{Sandboxes: entries},
	}
}

func newClass(name string) *airlockv1alpha1.SandboxClass {
	return &airlockv1alpha1.SandboxClass{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: airlockv1alpha1.SandboxClassSpec{
			Image: "airlock:test",
			Ports: []airlockv1alpha1.SandboxPort{{Name: "mcp", Port: 8080}, {Name: "debug", Port: 9090}},
		},
	}
}

// baseObjects are a runtime, its registry and the class.
func baseObjects() []runtime.Object {
	return []runtime.Object{newRuntime(), newRegistry(), newClass("codegen")}
}

// existingClaim is the claim of session and handle in phase, as the API would have created it.
func existingClaim(session, handle string, phase airlockv1alpha1.ClaimPhase) *airlockv1alpha1.SandboxClaim {
	name := claimname.For(testRuntime, session, handle)
	c := newClaim(target{runtime: newRuntime(), entry: &newRegistry().Spec.Sandboxes[0]}, name, session, handle, nil)
	c.UID = types.UID("uid-" + name)
	c.ResourceVersion = "1"
	c.CreationTimestamp = metav1.NewTime(t0.Add(-time.Hour))
	c.Status.Phase = phase
	if phase == airlockv1alpha1.ClaimBound {
		c.Status.Addresses = []airlockv1alpha1.ClaimAddress{
			{Name: "mcp", URL: "http://10.96.0.17:8080"},
			{Name: "debug", URL: "http://10.96.0.17:9090"},
		}
		c.Status.BoundAt = &metav1.Time{Time: t0.Add(-time.Hour)}
	}
	return c
}

// bumped returns a copy of c with a new resourceVersion, for an update event.
func bumped(c *airlockv1alpha1.SandboxClaim, mutate func(*airlockv1alpha1.SandboxClaim)) *airlockv1alpha1.SandboxClaim {
	c = c.DeepCopy()
	mutate(c)
	rv, _ := strconv.Atoi(c.ResourceVersion)
	c.ResourceVersion = strconv.Itoa(rv + 1)
	return c
}

// result returns the answer of an acquire running in the background.
func (f *fixture) result(done <-chan *httptest.ResponseRecorder) *httptest.ResponseRecorder {
	f.t.Helper()
	select {
	case rec := <-done:
		return rec
	case <-time.After(wait.ForeverTestTimeout):
		f.t.Fatal("the acquire did not answer")
		return nil
	}
}
