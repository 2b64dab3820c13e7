//go:build e2e && realnode

package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
)

// resumeRun is what the runtime client's `resume` mode answers.
type resumeRun struct {
	Rounds []struct {
		Claim             string  `json:"claim"`
		AcquireMillis     float64 `json:"acquireMillis"`
		FirstResultMillis float64 `json:"firstResultMillis"`
		Resumed           bool    `json:"resumed"`
		StartSHA256       string  `json:"startSHA256"`
		EndSHA256         string  `json:"endSHA256"`
	} `json:"rounds"`
	Error string `json:"error"`
}

// checkChain checks that every round resumed and found the workspace, by its tree's SHA-256,
// exactly as the round before left it (want for the first round), and that each round changed it;
// it returns the last round's hash.
func (r *resumeRun) checkChain(t *testing.T, label string, n int, want string) string {
	t.Helper()
	if r.Error != "" {
		t.Fatalf("%s: after %d rounds: %s", label, len(r.Rounds), r.Error)
	}
	if len(r.Rounds) != n {
		t.Fatalf("%s: %d rounds, want %d", label, len(r.Rounds), n)
	}
	for i, round := range r.Rounds {
		if !round.Resumed {
			t.Errorf("%s round %d: the acquire did not say resumedWorkspace", label, i)
		}
		if round.StartSHA256 != want {
			t.Errorf("%s round %d: the workspace's tree has sha256 %s, want %s (what the round before left)", label, i, round.StartSHA256, want)
		}
		if round.EndSHA256 == round.StartSHA256 || len(round.EndSHA256) != 64 {
			t.Errorf("%s round %d: the tree after the round's change %q, want another sha256", label, i, round.EndSHA256)
		}
		want = round.EndSHA256
	}
	return want
}

// boundWatch records, by claim UID, whether each claim of the namespace was Bound on a resume
// member (status.warm with status.resumedWorkspace) or cold.
type boundWatch struct {
	mu    sync.Mutex
	warm  map[types.UID]string // claim UID -> the member
	cold  map[types.UID]bool
	order []types.UID
}

func watchBound(ctx context.Context, t *testing.T, ns string) *boundWatch {
	t.Helper()
	w, err := airlockClient.AirlockV1alpha1().SandboxClaims(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b := &boundWatch{warm: map[types.UID]string{}, cold: map[types.UID]bool{}}
	go func() {
		for ev := range w.ResultChan() {
			c, ok := ev.Object.(*airlockv1alpha1.SandboxClaim)
			if !ok || c.Status.Phase != airlockv1alpha1.ClaimBound {
				continue
			}
			b.mu.Lock()
			if _, seen := b.warm[c.UID]; !seen && !b.cold[c.UID] {
				b.order = append(b.order, c.UID)
				if c.Status.Warm != nil {
					b.warm[c.UID] = c.Status.Warm.Member
				} else {
					b.cold[c.UID] = true
				}
			}
			b.mu.Unlock()
		}
	}()
	return b
}

// since returns how many claims were Bound warm and cold after the first `from` seen.
func (b *boundWatch) since(from int) (warm, cold int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, uid := range b.order[min(from, len(b.order)):] {
		if _, ok := b.warm[uid]; ok {
			warm++
		} else {
			cold++
		}
	}
	return warm, cold
}

func (b *boundWatch) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.order)
}

// TestRealNodeResumeMember (issue 39 item 5, issue 40 item 3; docs/nothing-lost.md, "Resume
// members"): one session and handle, its files written once, then closed and acquired again
// `rounds` times with resume members on (the default resumeWindow: each round's acquire comes a
// gap after the close, once the pool's member on the kept workspace is Ready) and `rounds` times
// with them off (resumeWindow 0: a cold resume, a pod of its own on the same directory), the same
// gap. Every round must resume the very files the round before left, by the SHA-256 of the whole
// tree (2 MiB of random bytes among them), then change them; every round with resume members on
// must be Bound on a resume member, every round with them off cold. It logs both p50s of acquire
// -> 200 and of acquire -> first tool result (the tree hash's Bash call), as TestRealNodeReacquire
// and TestRealNodeWarm measure them.
func TestRealNodeResumeMember(t *testing.T) {
	requireRealNode(t)
	const (
		rounds = 10
		// gap is the pause after a close before the next acquire: the kept workspace's record,
		// the resume member's start and readiness (about 1 s on this node) and its evidence.
		gap = 6000
	)
	e := newRealnodeEnv(t, "airlock-rn-resume", realnodeOptions{maxConcurrent: 2, maxPerSession: 1, maxInstances: 4, warm: 1})
	ce := &claimEnv{ns: e.ns, runtime: &airlockv1alpha1.AgentRuntime{Spec: airlockv1alpha1.AgentRuntimeSpec{ToolRegistryRef: airlockv1alpha1.LocalObjectReference{Name: "tools"}}}}
	ce.waitWarm(t, 1, 5*time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bound := watchBound(ctx, t, e.ns)
	plan := func(n int, seed bool, expect string) map[string]any {
		return map[string]any{"api": apiURL(), "namespace": e.ns, "runtime": "agent", "session": "resume", "handle": "codegen/default",
			"sessions": n, "gapMillis": gap, "seed": seed, "expectSHA256": expect}
	}

	// The files, written once (the first claim adopts the pool's member: a fresh workspace).
	var seed resumeRun
	e.runClient(t, "resume-seed", "resume", plan(1, true, ""), 5*time.Minute, &seed)
	if seed.Error != "" || len(seed.Rounds) != 1 {
		t.Fatalf("seed: %+v", seed)
	}
	hash := seed.Rounds[0].EndSHA256

	// Resume members on.
	from := bound.count()
	var members resumeRun
	e.runClient(t, "resume-members", "resume", plan(rounds, false, hash), 15*time.Minute, &members)
	hash = members.checkChain(t, "resume members", rounds, hash)
	eventually(t, 30*time.Second, "every round's Bound seen", func(context.Context) (bool, error) { return bound.count() >= from+rounds, nil })
	if warm, cold := bound.since(from); warm != rounds || cold != 0 {
		t.Errorf("with resume members: %d rounds Bound on a resume member, %d cold, want all %d on one", warm, cold, rounds)
	}

	// Resume members off: the same rounds resume cold, a pod of their own on the same directory.
	ce.updateRegistry(t, func(r *airlockv1alpha1.ToolRegistry) { r.Spec.Sandboxes[0].ResumeWindow = &metav1.Duration{} })
	eventually(t, time.Minute, "no resume member left", func(ctx context.Context) (bool, error) {
		m, err := ce.resumeMembers(ctx)
		return err == nil && len(m) == 0, err
	})
	from = bound.count()
	var cold resumeRun
	e.runClient(t, "resume-cold", "resume", plan(rounds, false, hash), 15*time.Minute, &cold)
	cold.checkChain(t, "cold", rounds, hash)
	eventually(t, 30*time.Second, "every round's Bound seen", func(context.Context) (bool, error) { return bound.count() >= from+rounds, nil })
	if warm, c := bound.since(from); warm != 0 || c != rounds {
		t.Errorf("without resume members: %d rounds Bound warm, %d cold, want all %d cold", warm, c, rounds)
	}

	stats := func(r *resumeRun) (acq, first []float64) {
		for _, round := range r.Rounds {
			acq = append(acq, round.AcquireMillis)
			first = append(first, round.FirstResultMillis)
		}
		return acq, first
	}
	ma, mf := stats(&members)
	ca, cf := stats(&cold)
	report := func(label string, acq, first []float64) string {
		return fmt.Sprintf("%s, n=%d: acquire -> 200 p50 %.0f ms, p90 %.0f ms; acquire -> first tool result p50 %.0f ms, p90 %.0f ms, max %.0f ms",
			label, len(acq), percentile(acq, 0.5), percentile(acq, 0.9), percentile(first, 0.5), percentile(first, 0.9), percentile(first, 1))
	}
	t.Logf("resume, %s", report("in a resume member", ma, mf))
	t.Logf("resume, %s", report("cold (resumeWindow 0)", ca, cf))
	if p := percentile(cf, 0.5); p > 0 {
		t.Logf("resume: a resume member's first tool result comes at %.2f× the cold resume's (p50)", percentile(mf, 0.5)/p)
	}
}
