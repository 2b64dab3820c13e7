//go:build e2e && realnode

package e2e

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
)

// TestRealNodeWarm (issue 14): with warm members Ready, sessions one after another from the
// runtime pod acquire through the Sandbox API, adopt a member (the pod is not restarted: its
// sandboxd takes the claim's token and tools from the first request), and call a tool in it.
// It logs acquire → 200 and acquire → first tool result; TestRealNodeAcquireLatency logs the
// same for cold claims.
func TestRealNodeWarm(t *testing.T) {
	requireRealNode(t)
	const sessions, warm = 10, 12
	// No resume members (resumeWindow 0): every session here is a new one, and the members the
	// closed sessions' kept workspaces would get (up to the pool's 12) would only load the node
	// while the pool's adoptions are measured (TestRealNodeResumeMember measures them).
	e := newRealnodeEnv(t, "airlock-rn-warm", realnodeOptions{maxConcurrent: 5, maxPerSession: 3, maxInstances: 40, warm: warm, resumeWindow: new(time.Duration)})
	ce := &claimEnv{ns: e.ns, runtime: &airlockv1alpha1.AgentRuntime{Spec: airlockv1alpha1.AgentRuntimeSpec{ToolRegistryRef: airlockv1alpha1.LocalObjectReference{Name: "tools"}}}}
	ce.waitWarm(t, warm, 5*time.Minute)

	// Which claims were bound warm: a watch, since the claims are gone after their close.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := airlockClient.AirlockV1alpha1().SandboxClaims(e.ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu         sync.Mutex
		warmClaims = map[string]string{}
		coldClaims = map[string]bool{}
		// seen is when the watch first saw each claim in a phase ("" for its creation).
		seen = map[string]map[airlockv1alpha1.ClaimPhase]time.Time{}
	)
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		for ev := range w.ResultChan() {
			c, ok := ev.Object.(*airlockv1alpha1.SandboxClaim)
			if !ok {
				continue
			}
			mu.Lock()
			if seen[c.Name] == nil {
				seen[c.Name] = map[airlockv1alpha1.ClaimPhase]time.Time{}
			}
			if _, ok := seen[c.Name][c.Status.Phase]; !ok {
				seen[c.Name][c.Status.Phase] = time.Now()
			}
			if c.Status.Phase != airlockv1alpha1.ClaimBound {
				mu.Unlock()
				continue
			}
			if c.Status.Warm != nil {
				warmClaims[c.Name] = c.Status.Warm.Member
			} else {
				coldClaims[c.Name] = true
			}
			mu.Unlock()
		}
	}()

	var res struct {
		AcquireMillis     []float64 `json:"acquireMillis"`
		FirstCallMillis   []float64 `json:"firstCallMillis"`
		ReachableMillis   []float64 `json:"reachableMillis"`
		FirstResultMillis []float64 `json:"firstResultMillis"`
		ConnectMillis     float64   `json:"connectMillis"`
		Error             string    `json:"error"`
	}
	// Paced: each session's close starts a cleanup Job and the refill of a member (two pods
	// starting on this 2-core node); back to back, the next acquire would measure their start.
	plan := map[string]any{"api": apiURL(), "namespace": e.ns, "runtime": "agent", "session": "warm", "handle": "codegen/default", "sessions": sessions, "gapMillis": 4000, "connect": true}
	e.runClient(t, "warm", "bench", plan, 10*time.Minute, &res)
	w.Stop()
	<-watchDone
	if res.Error != "" {
		t.Fatalf("bench: %s", res.Error)
	}
	if len(res.AcquireMillis) != sessions {
		t.Fatalf("%d acquires measured, want %d", len(res.AcquireMillis), sessions)
	}
	mu.Lock()
	defer mu.Unlock()
	members := map[string]bool{}
	for claim, member := range warmClaims {
		if members[member] {
			t.Errorf("member %s adopted twice (again by %s)", member, claim)
		}
		members[member] = true
	}
	if len(coldClaims) > 0 || len(warmClaims) != sessions {
		t.Errorf("%d claims bound warm, %d cold, want all %d warm (the pool of %d outlasts them)", len(warmClaims), len(coldClaims), sessions, warm)
	}
	// Where the time goes, as this process's watch saw it: creation → Bound (admission and
	// adoption; a warm claim is never Binding).
	var toBound []float64
	for name, phases := range seen {
		if _, ok := phases[airlockv1alpha1.ClaimBinding]; ok {
			t.Errorf("warm claim %s was Binding: a warm admission is written Bound at once", name)
		}
		created, bound := phases[""], phases[airlockv1alpha1.ClaimBound]
		if created.IsZero() || bound.IsZero() {
			continue
		}
		toBound = append(toBound, float64(bound.Sub(created).Microseconds())/1000)
	}
	t.Logf("warm: seen by a watch: creation → Bound p50 %.0f ms, max %.0f ms (%d claims)",
		percentile(toBound, 0.5), percentile(toBound, 1), len(toBound))
	t.Logf("warm: the runtime's first call of the Sandbox API (DNS, TLS, TokenReview; once per runtime process, before the sessions): %.0f ms", res.ConnectMillis)
	t.Logf("warm: acquire → 200 by session, in order (ms): %.0f", res.AcquireMillis)
	t.Logf("warm: acquire → first tool result by session (ms): %.0f", res.FirstResultMillis)
	t.Logf("warm: acquire → 200 over %d sessions: p50 %.0f ms, p90 %.0f ms, max %.0f ms",
		sessions, percentile(res.AcquireMillis, 0.5), percentile(res.AcquireMillis, 0.9), percentile(res.AcquireMillis, 1))
	t.Logf("warm: acquire → first tool result (Bash echo): p50 %.0f ms, p90 %.0f ms, max %.0f ms",
		percentile(res.FirstResultMillis, 0.5), percentile(res.FirstResultMillis, 0.9), percentile(res.FirstResultMillis, 1))
	t.Logf("warm: Bound → first MCP session p50 %.0f ms; first call after connecting p50 %.1f ms (the adoption)",
		percentile(res.ReachableMillis, 0.5), percentile(res.FirstCallMillis, 0.5))
	// Each warm session's record holds what its member's sandboxd did (docs/record.md §2.1).
	names := make([]string, 0, len(warmClaims))
	for name := range warmClaims {
		names = append(names, name)
	}
	slices.Sort(names)
	checkWarmRecords(t, e.ns, names[:min(3, len(names))])
}
