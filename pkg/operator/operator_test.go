package operator

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/workqueue"
	componentbaseconfig "k8s.io/component-base/config"
	"k8s.io/klog/v2/ktesting"

	"github.com/airlock-dev/airlock/pkg/claimtoken"
	"github.com/airlock-dev/airlock/pkg/client"
	airlockfake "github.com/airlock-dev/airlock/pkg/generated/clientset/versioned/fake"
	"github.com/airlock-dev/airlock/pkg/servingcert"
)

const (
	testIdentity       = "test-host_0c1d2e3f"
	testLeaseNamespace = "airlock-system"
	testLeaseName      = "airlock-operator"
)

// newFakes returns fake clientsets whose discovery serves the airlock.dev API.
func newFakes() (*k8sfake.Clientset, *airlockfake.Clientset) {
	kube := k8sfake.NewClientset()
	kube.Resources = []*metav1.APIResourceList{{GroupVersion: "airlock.dev/v1alpha1"}}
	return kube, airlockfake.NewClientset()
}

func newTestConfig(kube *k8sfake.Clientset, airlock *airlockfake.Clientset) *Config {
	return &Config{
		KubeClient:           kube,
		AirlockClient:        airlock,
		LeaderElectionClient: kube,
		LeaderElection: componentbaseconfig.LeaderElectionConfiguration{
			LeaderElect:       false,
			LeaseDuration:     metav1.Duration{Duration: 15 * time.Second},
			RenewDeadline:     metav1.Duration{Duration: 10 * time.Second},
			RetryPeriod:       metav1.Duration{Duration: 2 * time.Second},
			ResourceLock:      "leases",
			ResourceName:      testLeaseName,
			ResourceNamespace: testLeaseNamespace,
		},
		Identity:               testIdentity,
		Namespace:              testLeaseNamespace,
		APIBindAddress:         "127.0.0.1:0",
		TLSMode:                TLSModeNone, // TestAPIServesSelfSigned and TestAPIServesTLS cover TLS
		MetricsBindAddress:     "127.0.0.1:0",
		HealthProbeBindAddress: "127.0.0.1:0",
		ShutdownTimeout:        wait.ForeverTestTimeout,
		APIServerTimeout:       wait.ForeverTestTimeout,
		Workers:                1,
		SyncImage:              "ghcr.io/airlock-dev/airlock:test",
	}
}

// testController records its lifecycle; its run blocks until its context ends.
type testController struct {
	started chan struct{}
	stopped chan struct{}
	// onStop runs when the controller's context has ended, before run returns.
	onStop func()
	err    error
}

func newTestController() *testController {
	return &testController{started: make(chan struct{}), stopped: make(chan struct{})}
}

func (c *testController) descriptor() controllerDescriptor {
	return controllerDescriptor{name: "test", init: func(ctx context.Context, cc ControllerContext) (func(context.Context) error, error) {
		return func(ctx context.Context) error {
			close(c.started)
			if c.err != nil {
				close(c.stopped)
				return c.err
			}
			<-ctx.Done()
			if c.onStop != nil {
				c.onStop()
			}
			close(c.stopped)
			return nil
		}, nil
	}}
}

// startOperator builds, binds and runs an operator; cancel ctx to stop it. The result of run
// arrives on the returned channel.
func startOperator(t *testing.T, ctx context.Context, cfg *Config, controllers ...controllerDescriptor) (*operator, <-chan error) {
	t.Helper()
	o, err := newOperator(ctx, cfg)
	if err != nil {
		t.Fatalf("newOperator: %v", err)
	}
	o.controllers = controllers
	if err := o.listen(); err != nil {
		t.Fatalf("listen: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- o.run(ctx) }()
	return o, done
}

// serverURL is the base URL of the operator's server named name.
func serverURL(t *testing.T, o *operator, name string) string {
	t.Helper()
	for _, s := range o.servers {
		if s.name == name {
			return "http://" + s.listener.Addr().String()
		}
	}
	t.Fatalf("no %q server", name)
	return ""
}

func get(t *testing.T, client *http.Client, url string) (int, string) {
	t.Helper()
	resp, err := client.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: reading the body: %v", url, err)
	}
	return resp.StatusCode, string(body)
}

func waitFor(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(wait.ForeverTestTimeout):
		t.Fatalf("timed out waiting for %s", what)
	}
}

func waitForResult(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(wait.ForeverTestTimeout):
		t.Fatal("timed out waiting for the operator to return")
		return nil
	}
}

func getLease(t *testing.T, kube *k8sfake.Clientset) (holder string, found bool) {
	t.Helper()
	lease, err := kube.CoordinationV1().Leases(testLeaseNamespace).Get(context.Background(), testLeaseName, metav1.GetOptions{})
	if err != nil {
		return "", false
	}
	if lease.Spec.HolderIdentity == nil {
		return "", true
	}
	return *lease.Spec.HolderIdentity, true
}

func TestReadyzFailsUntilInformersSync(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	kube, airlock := newFakes()

	// Hold the first list of SandboxClaims until the test lets it go.
	listStarted, release := make(chan struct{}), make(chan struct{})
	var startOnce, releaseOnce sync.Once
	releaseList := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(releaseList)
	airlock.PrependReactor("list", "sandboxclaims", func(action k8stesting.Action) (bool, runtime.Object, error) {
		startOnce.Do(func() { close(listStarted) })
		<-release
		return false, nil, nil
	})

	o, done := startOperator(t, ctx, newTestConfig(kube, airlock))
	probes := serverURL(t, o, "health probes")
	api := serverURL(t, o, "Sandbox API")
	waitFor(t, listStarted, "the informers to list SandboxClaims")

	if status, body := get(t, http.DefaultClient, probes+"/readyz"); status != http.StatusServiceUnavailable || !strings.Contains(body, "[-]informerSync failed: informers not synced: ") || !strings.Contains(body, "sandboxclaims") {
		t.Errorf("/readyz before the caches synced: %d %q, want 503 naming sandboxclaims", status, body)
	}
	if status, _ := get(t, http.DefaultClient, api+"/readyz"); status != http.StatusServiceUnavailable {
		t.Errorf("Sandbox API /readyz before the caches synced: %d, want 503", status)
	}
	if status, body := get(t, http.DefaultClient, probes+"/healthz"); status != http.StatusOK || body != "ok" {
		t.Errorf("/healthz while the caches sync: %d %q, want 200 ok", status, body)
	}

	releaseList()
	syncCtx, cancelSync := context.WithTimeout(ctx, wait.ForeverTestTimeout)
	defer cancelSync()
	// Wait for every informer the readiness check covers (the kube ones too), not only airlock's.
	if !cache.WaitForCacheSync(syncCtx.Done(), o.readiness.synced()...) {
		t.Fatal("the informers the readiness check covers did not sync")
	}
	if status, body := get(t, http.DefaultClient, probes+"/readyz"); status != http.StatusOK || body != "ok" {
		t.Errorf("/readyz after the caches synced: %d %q, want 200 ok", status, body)
	}
	if status, _ := get(t, http.DefaultClient, api+"/readyz"); status != http.StatusOK {
		t.Errorf("Sandbox API /readyz after the caches synced: %d, want 200", status)
	}

	cancel()
	if err := waitForResult(t, done); err != nil {
		t.Errorf("run after cancel: %v, want nil", err)
	}
}

func TestReadinessHandler(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	kube, airlock := newFakes()
	o, err := newOperator(ctx, newTestConfig(kube, airlock))
	if err != nil {
		t.Fatal(err)
	}
	handler := checkHandler("readyz", http.StatusServiceUnavailable, o.readiness)
	readyz := func() (int, string) {
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, httptest.NewRequest("GET", "/readyz?verbose", nil))
		return rec.Code, rec.Body.String()
	}

	// No Secret informer: the operator may not list Secrets outside its namespace.
	if code, body := readyz(); code != http.StatusServiceUnavailable || !strings.Contains(body, "informers not synced: agentruntimes, allowedservices, keptworkspaces, sandboxclaims, sandboxclasses, toolregistries\n") {
		t.Errorf("before the informers start: %d %q, want 503 listing the six informers (no Secrets)", code, body)
	}

	o.airlockInformers.Start(ctx.Done())
	o.keptInformers.Start(ctx.Done())
	syncCtx, cancelSync := context.WithTimeout(ctx, wait.ForeverTestTimeout)
	defer cancelSync()
	var others []cache.InformerSynced
	for _, i := range o.readiness.informers {
		if i.name != "allowedservices" {
			others = append(others, i.informer.HasSynced)
		}
	}
	if !cache.WaitForCacheSync(syncCtx.Done(), others...) {
		t.Fatal("informers did not sync")
	}
	if code, body := readyz(); code != http.StatusServiceUnavailable || !strings.Contains(body, "informers not synced: allowedservices\n") {
		t.Errorf("with every informer but the allowed Services' started: %d %q, want 503 naming allowedservices", code, body)
	}
	o.serviceInformers.Start(ctx.Done())
	if !cache.WaitForCacheSync(syncCtx.Done(), o.readiness.synced()...) {
		t.Fatal("informers did not sync")
	}
	if code, body := readyz(); code != http.StatusOK || !strings.Contains(body, "[+]informerSync ok") {
		t.Errorf("after the informers synced: %d %q, want 200", code, body)
	}

	o.readiness.shuttingDown.Store(true)
	if code, body := readyz(); code != http.StatusServiceUnavailable || !strings.Contains(body, "shutting down") {
		t.Errorf("once shutting down: %d %q, want 503", code, body)
	}
	cancel()
	o.airlockInformers.Shutdown()
	o.keptInformers.Shutdown()
	o.serviceInformers.Shutdown()
}

func TestRunWithoutLeaderElection(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	kube, airlock := newFakes()
	controller := newTestController()

	o, done := startOperator(t, ctx, newTestConfig(kube, airlock), controller.descriptor())
	waitFor(t, controller.started, "the controller to start")

	if _, found := getLease(t, kube); found {
		t.Error("a Lease exists although leader election is disabled")
	}
	// No leader-election check without leader election.
	if status, body := get(t, http.DefaultClient, serverURL(t, o, "health probes")+"/healthz?verbose"); status != http.StatusOK || strings.Contains(body, "leaderElection") {
		t.Errorf("/healthz?verbose: %d %q, want 200 without a leaderElection check", status, body)
	}

	cancel()
	if err := waitForResult(t, done); err != nil {
		t.Errorf("run after cancel: %v, want nil", err)
	}
	select {
	case <-controller.stopped:
	default:
		t.Error("run returned before the controller stopped")
	}
}

func TestLeaderElectionReleasesLeaseAfterControllersStop(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	kube, airlock := newFakes()
	cfg := newTestConfig(kube, airlock)
	cfg.LeaderElection.LeaderElect = true

	controller := newTestController()
	var holderWhileStopping string
	controller.onStop = func() { holderWhileStopping, _ = getLease(t, kube) }

	o, done := startOperator(t, ctx, cfg, controller.descriptor())
	waitFor(t, controller.started, "the controller to start leading")

	if holder, _ := getLease(t, kube); holder != testIdentity {
		t.Errorf("lease holder while leading = %q, want %q", holder, testIdentity)
	}
	if status, body := get(t, http.DefaultClient, serverURL(t, o, "health probes")+"/healthz?verbose"); status != http.StatusOK || !strings.Contains(body, "[+]leaderElection ok") {
		t.Errorf("/healthz?verbose while leading: %d %q, want 200 with the leaderElection check", status, body)
	}

	cancel()
	if err := waitForResult(t, done); err != nil {
		t.Fatalf("run after cancel: %v, want nil", err)
	}
	if holderWhileStopping != testIdentity {
		t.Errorf("lease holder while the controller stopped = %q, want %q: the lease was released before the leading work returned", holderWhileStopping, testIdentity)
	}
	if holder, found := getLease(t, kube); !found || holder != "" {
		t.Errorf("lease holder after shutdown = %q (found %v), want released (empty)", holder, found)
	}
}

func TestControllerFailureStopsOperator(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	kube, airlock := newFakes()
	cfg := newTestConfig(kube, airlock)
	cfg.LeaderElection.LeaderElect = true

	controller := newTestController()
	controller.err = errors.New("injected failure")
	_, done := startOperator(t, ctx, cfg, controller.descriptor())

	err := waitForResult(t, done)
	if err == nil || !strings.Contains(err.Error(), "test controller: injected failure") {
		t.Fatalf("run with a failing controller: %v, want the controller's error", err)
	}
	if holder, found := getLease(t, kube); !found || holder != "" {
		t.Errorf("lease holder after the failure = %q (found %v), want released (empty)", holder, found)
	}
}

func TestStartFailsWithoutAirlockAPI(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	kube, airlock := newFakes()
	kube.Resources = nil // the CRDs are not installed
	cfg := newTestConfig(kube, airlock)
	// Long enough for the first, immediate check to answer on a loaded machine (a 1 ms budget
	// could expire inside it, leaving only "context deadline exceeded"); short of the 1 s poll.
	cfg.APIServerTimeout = 500 * time.Millisecond

	_, done := startOperator(t, ctx, cfg)
	err := waitForResult(t, done)
	if err == nil || !strings.Contains(err.Error(), "does not serve airlock.dev/v1alpha1: install the airlock CRDs") {
		t.Fatalf("run without the airlock.dev API: %v, want an error saying to install the CRDs", err)
	}
}

func TestListenFailsOnBusyAddress(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	kube, airlock := newFakes()
	cfg := newTestConfig(kube, airlock)
	cfg.MetricsBindAddress = busy.Addr().String()

	err = Run(ctx, cfg)
	want := "cannot listen on --metrics-bind-address=" + busy.Addr().String()
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Run with a busy metrics address: %v, want an error containing %q", err, want)
	}
}

func TestMetricsServeWorkqueueMetrics(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	kube, airlock := newFakes()
	o, done := startOperator(t, ctx, newTestConfig(kube, airlock))

	queue := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "airlock-metrics-test"})
	defer queue.ShutDown()
	queue.Add("item")

	status, body := get(t, http.DefaultClient, serverURL(t, o, "metrics")+"/metrics")
	if status != http.StatusOK || !strings.Contains(body, `workqueue_adds_total{name="airlock-metrics-test"} `) {
		t.Errorf("/metrics: %d, want 200 with the test queue's workqueue_adds_total; got:\n%s", status, body)
	}
	cancel()
	if err := waitForResult(t, done); err != nil {
		t.Errorf("run after cancel: %v", err)
	}
}

// TestProfiling: Go's profiles are served on the metrics address with Profiling, and not
// without it.
func TestProfiling(t *testing.T) {
	for _, on := range []bool{false, true} {
		t.Run(fmt.Sprint("profiling=", on), func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			kube, airlock := newFakes()
			cfg := newTestConfig(kube, airlock)
			cfg.Profiling = on
			o, done := startOperator(t, ctx, cfg)
			status, body := get(t, http.DefaultClient, serverURL(t, o, "metrics")+"/debug/pprof/heap?debug=1")
			if on && (status != http.StatusOK || !strings.Contains(body, "heap profile")) {
				t.Errorf("/debug/pprof/heap with profiling: %d, want 200 with a heap profile", status)
			}
			if !on && status != http.StatusNotFound {
				t.Errorf("/debug/pprof/heap without profiling: %d, want 404", status)
			}
			cancel()
			if err := waitForResult(t, done); err != nil {
				t.Errorf("run after cancel: %v", err)
			}
		})
	}
}

func TestMetricsCanBeDisabled(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	kube, airlock := newFakes()
	cfg := newTestConfig(kube, airlock)
	cfg.MetricsBindAddress = DisabledBindAddress
	o, err := newOperator(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range o.servers {
		if s.name == "metrics" {
			t.Errorf("a metrics server exists with --metrics-bind-address=%s", DisabledBindAddress)
		}
	}
	rec := httptest.NewRecorder()
	o.servers[1].server.Handler.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != http.StatusNotFound {
		t.Errorf("Sandbox API /metrics with metrics disabled: %d, want 404", rec.Code)
	}
}

func TestAPIPlaceholderAnswersJSONNotFound(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	handler := newAPIHandler(ok, ok, nil)
	tests := map[string]struct {
		method, path string
		wantStatus   int
		wantError    string
	}{
		"acquire":      {method: "POST", path: "/v1/sandboxes/acquire", wantStatus: http.StatusNotFound, wantError: "not_found"},
		"session open": {method: "POST", path: "/v1/sessions/open", wantStatus: http.StatusNotFound, wantError: "not_found"},
		"root":         {method: "GET", path: "/", wantStatus: http.StatusNotFound, wantError: "not_found"},
		"healthz":      {method: "GET", path: "/healthz", wantStatus: http.StatusOK},
		"readyz":       {method: "GET", path: "/readyz", wantStatus: http.StatusOK},
		// Only on the metrics port, which the NetworkPolicy opens to monitoring alone.
		"metrics": {method: "GET", path: "/metrics", wantStatus: http.StatusNotFound, wantError: "not_found"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			handler.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.path, nil))
			if rec.Code != tc.wantStatus {
				t.Fatalf("%s %s: status %d, want %d", tc.method, tc.path, rec.Code, tc.wantStatus)
			}
			if tc.wantError == "" {
				return
			}
			if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type = %q, want application/json", ct)
			}
			var body apiError
			dec := json.NewDecoder(rec.Body)
			dec.DisallowUnknownFields()
			if err := dec.Decode(&body); err != nil {
				t.Fatalf("body is not an API error: %v", err)
			}
			if body.Error != tc.wantError || !strings.Contains(body.Message, tc.path) {
				t.Errorf("body = %+v, want error %q and a message naming %s", body, tc.wantError, tc.path)
			}
		})
	}
}

// TestAPIServesOpenAPIDocument: GET /openapi.json answers the Sandbox API's OpenAPI document,
// without a token.
func TestAPIServesOpenAPIDocument(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	api := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		t.Error("the Sandbox API's handler was called for /openapi.json")
	})
	rec := httptest.NewRecorder()
	newAPIHandler(ok, ok, api).ServeHTTP(rec, httptest.NewRequest("GET", "/openapi.json", nil))
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("GET /openapi.json: %d %q, want 200 application/json", rec.Code, rec.Header().Get("Content-Type"))
	}
	if !bytes.Equal(rec.Body.Bytes(), client.OpenAPIDocument()) {
		t.Error("GET /openapi.json is not pkg/client's openapi.json")
	}
	var doc struct {
		OpenAPI string `json:"openapi"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil || doc.OpenAPI != "3.1.0" {
		t.Errorf("GET /openapi.json: openapi %q, %v; want a 3.1.0 document", doc.OpenAPI, err)
	}
}

func TestAPIServesTLS(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	certPEM, keyPEM, err := cert.GenerateSelfSignedCertKey("localhost", []net.IP{net.ParseIP("127.0.0.1")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := os.WriteFile(certFile, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	kube, airlock := newFakes()
	cfg := newTestConfig(kube, airlock)
	cfg.TLSMode, cfg.TLSCertFile, cfg.TLSKeyFile = TLSModeFiles, certFile, keyFile

	o, done := startOperator(t, ctx, cfg)
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(certPEM) {
		t.Fatal("cannot parse the generated certificate")
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	url := strings.Replace(serverURL(t, o, "Sandbox API"), "http://", "https://", 1)
	if status, body := get(t, client, url+"/v1/no-such-endpoint"); status != http.StatusNotFound || !strings.Contains(body, `"error":"not_found"`) {
		t.Errorf("GET over TLS: %d %q, want the JSON 404", status, body)
	}

	cancel()
	if err := waitForResult(t, done); err != nil {
		t.Errorf("run after cancel: %v", err)
	}
}

// TestAPIServesSelfSigned: by default (--tls-mode=self-signed) the operator creates its CA and
// serving certificate in the Secret of its namespace and serves the API with it: a client that
// trusts the Secret's CA bundle and names the Service reaches it; a client that trusts another CA,
// or names another host, fails verification; plain HTTP to the TLS port gets a 400, not an answer
// of the API. readyz reports the certificate.
func TestAPIServesSelfSigned(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	kube, airlock := newFakes()
	cfg := newTestConfig(kube, airlock)
	const serviceName = "airlock-sandbox-api.airlock-system.svc"
	cfg.TLSMode, cfg.TLSSANs = TLSModeSelfSigned, []string{serviceName}

	o, done := startOperator(t, ctx, cfg)
	apiAddr := strings.TrimPrefix(serverURL(t, o, "Sandbox API"), "http://")
	// clientFor trusts bundle and verifies the server as serverName.
	clientFor := func(bundle []byte, serverName string) *http.Client {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(bundle) {
			t.Fatal("no certificate in the bundle")
		}
		return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: serverName, MinVersion: tls.VersionTLS12}}}
	}
	var secret *corev1.Secret
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, wait.ForeverTestTimeout, true, func(ctx context.Context) (bool, error) {
		s, err := kube.CoreV1().Secrets(cfg.Namespace).Get(ctx, servingcert.SecretName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		secret = s
		resp, err := clientFor(s.Data[servingcert.BundleKey], serviceName).Get("https://" + apiAddr + "/v1/no-such-endpoint")
		if err != nil {
			return false, nil // not served yet
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusNotFound, nil
	})
	if err != nil {
		t.Fatalf("the API never answered over TLS with the Secret's certificate: %v", err)
	}
	bundle := secret.Data[servingcert.BundleKey]

	if _, err := clientFor(bundle, "airlock-sandbox-api.elsewhere.svc").Get("https://" + apiAddr + "/healthz"); err == nil || !strings.Contains(err.Error(), "certificate is valid for") {
		t.Errorf("a client naming another host: %v, want a name mismatch", err)
	}
	otherCA, _, err := cert.GenerateSelfSignedCertKey("other-ca", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := clientFor(otherCA, serviceName).Get("https://" + apiAddr + "/healthz"); err == nil || !strings.Contains(err.Error(), "unknown authority") {
		t.Errorf("a client trusting another CA: %v, want an unknown authority error", err)
	}
	if status, body := get(t, http.DefaultClient, "http://"+apiAddr+"/healthz"); status != http.StatusBadRequest || strings.Contains(body, "ok") {
		t.Errorf("plain HTTP to the TLS port: %d %q, want 400 and no answer of the API", status, body)
	}
	probes := serverURL(t, o, "health probes")
	if status, body := get(t, http.DefaultClient, probes+"/readyz?verbose"); !strings.Contains(body, "[+]servingCertificate ok") {
		t.Errorf("readyz: %d %q, want the servingCertificate check passing", status, body)
	}

	cancel()
	if err := waitForResult(t, done); err != nil {
		t.Errorf("run after cancel: %v", err)
	}
}

func TestBadCertificateFailsStart(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	for _, f := range []string{certFile, keyFile} {
		if err := os.WriteFile(f, []byte("not PEM"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	kube, airlock := newFakes()
	cfg := newTestConfig(kube, airlock)
	cfg.TLSMode, cfg.TLSCertFile, cfg.TLSKeyFile = TLSModeFiles, certFile, keyFile
	err := Run(ctx, cfg)
	if err == nil || !strings.Contains(err.Error(), "loading the Sandbox API's certificate") {
		t.Fatalf("Run with a bad certificate: %v, want a certificate error", err)
	}
}

// TestReadinessWaitsForTokenKey: readyz fails while the claim token key cannot be read (here,
// RBAC forbids it), and passes once it can; the key Secret is created in the operator's namespace.
func TestReadinessWaitsForTokenKey(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	kube, airlock := newFakes()
	forbidden := true
	kube.PrependReactor("get", "secrets", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if forbidden {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, claimtoken.SecretName, errors.New("RBAC"))
		}
		return false, nil, nil
	})
	cfg := newTestConfig(kube, airlock)
	o, err := newOperator(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	handler := checkHandler("readyz", http.StatusServiceUnavailable, tokenKeyCheck{o.tokens})
	readyz := func() (int, string) {
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, httptest.NewRequest("GET", "/readyz?verbose", nil))
		return rec.Code, rec.Body.String()
	}
	if code, body := readyz(); code != http.StatusServiceUnavailable || !strings.Contains(body, "[-]tokenKey failed") {
		t.Errorf("without the key: %d %q, want 503 with tokenKey failed", code, body)
	}
	forbidden = false
	if code, body := readyz(); code != http.StatusOK || !strings.Contains(body, "[+]tokenKey ok") {
		t.Errorf("with the key: %d %q, want 200", code, body)
	}
	if _, err := kube.CoreV1().Secrets(cfg.Namespace).Get(ctx, claimtoken.SecretName, metav1.GetOptions{}); err != nil {
		t.Errorf("the key Secret in %s: %v", cfg.Namespace, err)
	}
}

// TestChildTransform: sandbox pods are stripped to what the claim controller reads; other
// children only lose their managed fields.
func TestChildTransform(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Annotations: map[string]string{"a": "b"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i", WorkingDir: "/w"}}}}
	got, err := childTransform(pod)
	if err != nil {
		t.Fatal(err)
	}
	if p := got.(*corev1.Pod); p.Annotations != nil || p.Spec.Containers[0].WorkingDir != "" || p.Spec.Containers[0].Image != "i" {
		t.Errorf("transformed pod %+v, want it stripped (claim.StripPod)", p)
	}
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "j", Annotations: map[string]string{"a": "b"}, ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "m"}}}}
	got, err = childTransform(job)
	if err != nil {
		t.Fatal(err)
	}
	if j := got.(*batchv1.Job); j.ManagedFields != nil || j.Annotations["a"] != "b" {
		t.Errorf("transformed Job %+v, want only its managed fields dropped", j.ObjectMeta)
	}
}
