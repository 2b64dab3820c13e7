//go:build e2e

package e2e

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/claimname"
	"github.com/airlock-dev/airlock/pkg/client"
)

// The Go client's Session (pkg/client, issue 41) against a real API server and operator: the
// runtime's identity from files (the token file, rotated mid-session; the CA bundle file),
// acquire through 202s and to its deadline, every error status as its typed error, and the
// renewal throttle with the claim's writes counted.

// countingTransport counts the acquire calls that go through it.
type countingTransport struct {
	base     http.RoundTripper
	acquires atomic.Int32
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Path == "/v1/sandboxes/acquire" {
		c.acquires.Add(1)
	}
	return c.base.RoundTrip(r)
}

// clientFiles writes the runtime's token and the namespace's CA bundle to files, as a pod mounts
// them, and returns their paths and an HTTP client that verifies the API with the bundle file
// (its exchanges checked against openapi.json) and counts acquires.
func clientFiles(t *testing.T, ns, token string) (tokenFile string, hc *http.Client, counter *countingTransport) {
	t.Helper()
	dir := t.TempDir()
	tokenFile = filepath.Join(dir, "token")
	writeClientFile(t, tokenFile, token)
	caFile := filepath.Join(dir, "ca.crt")
	// The ConfigMap airlock-ca's key ca.crt, as the pod mounts it (client.DefaultCAFile).
	writeClientFile(t, caFile, publishedBundle(t, ns).Data[filepath.Base(client.DefaultCAFile)])
	hc, err := client.NewHTTPClient(client.TLSOptions{CAFile: caFile, ServerName: apiServerName})
	if err != nil {
		t.Fatal(err)
	}
	counter = &countingTransport{base: apiSpec.Wrap(hc.Transport)}
	hc.Transport = counter
	return tokenFile, hc, counter
}

func writeClientFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

// testClock is a Session's renewal clock that the test moves.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Step(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// TestGoClientSession: acquire (Bound at once, then through 202s while the runtime's one slot is
// taken, then to its deadline), the typed errors 401, 403, 404, 409 and 429 with the operator's
// reason, a token file rotated mid-session, and renewals: at most one sent per half idle timeout
// on the session's clock, and no more claim writes than were sent.
func TestGoClientSession(t *testing.T) {
	const idle = clientPlaneIdle
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	e, op, agentToken := newClientPlane(t, ctx, "airlock-goclient")
	tokenFile, hc, counter := clientFiles(t, e.ns, agentToken)
	clock := &testClock{now: time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)}
	newSession := func(id string, mutate func(*client.Config)) *client.Session {
		cfg := client.Config{API: op.apiURL, TokenFile: tokenFile, HTTPClient: hc, Namespace: e.ns, Runtime: "agent",
			IdleTimeout: idle, WaitSeconds: 1, Now: clock.Now}
		if mutate != nil {
			mutate(&cfg)
		}
		s, err := client.NewSession(cfg, id)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}

	// Bound at once.
	first := newSession("s1", nil)
	sb, err := first.Acquire(ctx, "codegen/default")
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	if want := claimname.For("agent", "s1", "codegen/default"); sb.Claim != want || !strings.HasSuffix(sb.MCPURL, ":8080/mcp") ||
		!strings.HasPrefix(sb.Authorization, "Bearer ") || sb.Warm || sb.ResumedWorkspace != nil || sb.Response.Attestation != nil || sb.Isolation != nil {
		t.Errorf("sandbox %+v, want claim %s with its MCP URL and token, not warm, nothing resumed, no attestation (kwok: no evidence read)", sb, want)
	}

	// The runtime's one slot is taken: another session's acquire is answered 202 (Queued) each
	// second until the first session is closed.
	second := newSession("s2", nil)
	queuedName := claimname.For("agent", "s2", "codegen/default")
	before := counter.acquires.Load()
	type result struct {
		sb  *client.Sandbox
		err error
	}
	done := make(chan result, 1)
	go func() {
		sb, err := second.Acquire(ctx, "codegen/default")
		done <- result{sb, err}
	}()
	eventually(t, 30*time.Second, "the second session's claim Queued and answered 202 twice", func(ctx context.Context) (bool, error) {
		c, err := e.getClaim(ctx, queuedName)
		if err != nil {
			return false, nil
		}
		return c.Status.Phase == airlockv1alpha1.ClaimQueued && counter.acquires.Load()-before >= 3, nil
	})

	// A third session's acquire waits to its deadline, and says the claim's phase.
	third := newSession("s3", func(c *client.Config) { c.AcquireTimeout = 3 * time.Second })
	_, err = third.Acquire(ctx, "codegen/default")
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "is still Queued") {
		t.Errorf("acquire past its deadline: %v, want DeadlineExceeded naming Queued", err)
	}
	if _, err := third.Close(ctx); err != nil {
		t.Errorf("close s3: %v", err)
	}

	if _, err := first.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
	var got result
	select {
	case got = <-done:
	case <-ctx.Done():
		t.Fatal("the queued acquire did not end")
	}
	if got.err != nil || got.sb.Claim != queuedName {
		t.Fatalf("the queued acquire: %+v %v", got.sb, got.err)
	}
	t.Logf("the queued acquire was answered after %d calls", counter.acquires.Load()-before)

	// 429: maxPerSession is 1 and s2 holds its sandbox.
	_, err = second.Acquire(ctx, "codegen/other")
	var apiErr *client.APIError
	if !errors.Is(err, client.ErrRefused) || !errors.As(err, &apiErr) || apiErr.Reason != client.ReasonMaxPerSession {
		t.Errorf("a second handle over maxPerSession: %v, want ErrRefused MaxPerSession", err)
	}
	// 404 and 409.
	if _, err := second.Acquire(ctx, "nothing/default"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("a sandbox the registry lacks: %v, want ErrNotFound", err)
	}
	disabled := newSession("s4", func(c *client.Config) { c.Runtime = "off" })
	if _, err := disabled.Acquire(ctx, "codegen/default"); !errors.Is(err, client.ErrConflict) || !errors.As(err, &apiErr) || apiErr.Code != client.CodeDisabled {
		t.Errorf("a disabled runtime: %v, want ErrConflict disabled", err)
	}

	// The token file rotated mid-session, to another ServiceAccount's token (403), to nothing
	// TokenReview accepts (401), and back (the renewal goes through).
	writeClientFile(t, tokenFile, serviceAccountToken(t, e.ns, "intruder"))
	if _, err := second.Renew(ctx, "codegen/default"); !errors.Is(err, client.ErrForbidden) {
		t.Errorf("renew with another ServiceAccount's token: %v, want ErrForbidden", err)
	}
	writeClientFile(t, tokenFile, "not-a-token")
	if _, err := second.Renew(ctx, "codegen/default"); !errors.Is(err, client.ErrUnauthorized) {
		t.Errorf("renew with a token TokenReview refuses: %v, want ErrUnauthorized", err)
	}
	writeClientFile(t, tokenFile, agentToken)

	// Renewals: at most one per half idle timeout on the session's clock; claim writes counted.
	countRenewals(t, ctx, e, op, queuedName, func() (bool, error) { return second.Renew(ctx, "codegen/default") }, clock.Step)
	if _, err := second.Close(ctx); err != nil {
		t.Errorf("close: %v", err)
	}
}

// TestGoClientFailed: a sandbox whose pod cannot start fails, its one replacement fails too, and
// the Session's acquire ends with ErrFailed carrying the operator's reason (502).
func TestGoClientFailed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	e, op, agentToken := newFailingPlane(t, ctx, "airlock-goclient-fail")
	tokenFile, hc, counter := clientFiles(t, e.ns, agentToken)
	s, err := client.NewSession(client.Config{API: op.apiURL, TokenFile: tokenFile, HTTPClient: hc, Namespace: e.ns, Runtime: "agent",
		WaitSeconds: 5, AcquireTimeout: 2 * time.Minute}, "s1")
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Acquire(ctx, "codegen/default")
	var apiErr *client.APIError
	if !errors.Is(err, client.ErrFailed) || !errors.As(err, &apiErr) || apiErr.Code != client.CodeFailed || apiErr.Reason != "Unschedulable" {
		t.Fatalf("acquire of a sandbox that cannot start: %v, want ErrFailed with reason Unschedulable", err)
	}
	t.Logf("failed after %d acquire calls: %v", counter.acquires.Load(), err)
	if _, err := s.Close(ctx); err != nil {
		t.Errorf("close: %v", err)
	}
}

// clientPlaneIdle is the idle timeout of the runtime of newClientPlane.
const clientPlaneIdle = 60 * time.Second

// newClientPlane is the plane of each client's session test: a runtime "agent" with one slot
// (maxConcurrent 1), maxPerSession 1 and an idle timeout of clientPlaneIdle, a disabled runtime
// "off", and an operator with its Sandbox API. It returns the agent ServiceAccount's token.
func newClientPlane(t *testing.T, ctx context.Context, prefix string) (*claimEnv, *apiOperator, string) {
	t.Helper()
	e := newClaimEnv(t, prefix, claimEnvOptions{maxConcurrent: 1, maxPerSession: 1, idleTimeout: clientPlaneIdle})
	off := e.runtime.DeepCopy()
	off.ObjectMeta = metav1.ObjectMeta{Name: "off", Namespace: e.ns}
	off.Spec.Sandbox.Enabled = false
	if _, err := airlockClient.AirlockV1alpha1().AgentRuntimes(e.ns).Create(ctx, off, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return e, startAPIOperator(t, e.ns), serviceAccountToken(t, e.ns, "agent")
}

// newFailingPlane is the plane of each client's failed test: a runtime "agent" whose class asks
// for more CPU than any node has, with a startup timeout of 3 s (its sandboxes and their
// replacements fail Unschedulable), and an operator with its Sandbox API. It returns the agent
// ServiceAccount's token.
func newFailingPlane(t *testing.T, ctx context.Context, prefix string) (*claimEnv, *apiOperator, string) {
	t.Helper()
	e := newClaimEnv(t, prefix, claimEnvOptions{maxConcurrent: 2, maxPerSession: 2})
	class, err := airlockClient.AirlockV1alpha1().SandboxClasses().Get(ctx, e.class, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	class.Spec.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1000")}
	class.Spec.StartupTimeout = &metav1.Duration{Duration: 3 * time.Second}
	if _, err := airlockClient.AirlockV1alpha1().SandboxClasses().Update(ctx, class, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	return e, startAPIOperator(t, e.ns), serviceAccountToken(t, e.ns, "agent")
}

// countRenewals makes 50 tool calls 3 s apart on a session's clock (step moves it), each followed
// by renew, on the claim named claim of a runtime with idle timeout clientPlaneIdle: one renewal
// is sent per 30 s, 5 in all. The claim is written (lastUsedAt) at most once per 30 s of the
// operator's clock, and never more often than renewals were sent, counted twice: the claim's
// watch events up to a marker written after the renewals (lastUsedAt has a precision of 1 s, and
// a write of the same value is no event), and the lastUsedAt writes op made
// (airlock_claim_renewals_total{written="true"} on its /metrics).
func countRenewals(t *testing.T, ctx context.Context, e *claimEnv, op *apiOperator, claim string, renew func() (bool, error), step func(time.Duration)) {
	t.Helper()
	writtenBefore := renewalWrites(t, op)
	w, err := airlockClient.AirlockV1alpha1().SandboxClaims(e.ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + claim})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	start := time.Now()
	sent := 0
	for range 50 {
		ok, err := renew()
		if err != nil {
			t.Fatalf("renew: %v", err)
		}
		if ok {
			sent++
		}
		step(3 * time.Second)
	}
	elapsed := time.Since(start)
	marker := `{"metadata":{"annotations":{"e2e.airlock.dev/renewals-done":"true"}}}`
	if _, err := airlockClient.AirlockV1alpha1().SandboxClaims(e.ns).Patch(ctx, claim, types.MergePatchType, []byte(marker), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	writes := 0
	var lastUsed *metav1.Time
	for ev := range w.ResultChan() {
		c, ok := ev.Object.(*airlockv1alpha1.SandboxClaim)
		if !ok || ev.Type != watch.Modified {
			continue
		}
		if c.Annotations["e2e.airlock.dev/renewals-done"] == "true" {
			break
		}
		if c.Status.LastUsedAt != nil && (lastUsed == nil || !c.Status.LastUsedAt.Equal(lastUsed)) {
			writes++
			lastUsed = c.Status.LastUsedAt
		}
	}
	written := renewalWrites(t, op) - writtenBefore
	allowed := 1 + int(elapsed/(clientPlaneIdle/2))
	t.Logf("renewals: 50 calls, %d sent, %d claim writes watched, %d made by the operator, in %s (allowed %d)",
		sent, writes, written, elapsed.Round(time.Millisecond), allowed)
	if sent != 5 {
		t.Errorf("%d renewals sent for 50 calls 3 s apart with idle %s, want 5", sent, clientPlaneIdle)
	}
	if w := max(writes, written); w > sent || w > allowed {
		t.Errorf("%d claim writes watched, %d made by the operator, for %d renewals sent in %s, want at most %d",
			writes, written, sent, elapsed, min(sent, allowed))
	}
}

// renewalWrites is the number of lastUsedAt writes op made: its airlock_claim_renewals_total
// with written="true" (0 before the first).
func renewalWrites(t *testing.T, op *apiOperator) int {
	t.Helper()
	resp, err := http.Get("http://" + op.metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	const series = `airlock_claim_renewals_total{written="true"} `
	for line := range strings.Lines(string(body)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), series); ok {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("/metrics: %q: %v", line, err)
			}
			return int(n)
		}
	}
	return 0
}
