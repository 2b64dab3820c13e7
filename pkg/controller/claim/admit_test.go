package claim

import (
	"context"
	goruntime "runtime"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	core "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/airlock-dev/airlock/pkg/admission"
	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
)

func TestSyncAdmission(t *testing.T) {
	tests := map[string]struct {
		maxConcurrent, maxPerSession int32
		disabled                     bool
		others                       []*airlockv1alpha1.SandboxClaim
		claim                        *airlockv1alpha1.SandboxClaim
		wantPhase                    airlockv1alpha1.ClaimPhase
		wantReason                   string
		wantRequeue                  *time.Duration
		wantEvent                    string
		otherEvents                  []string // events of other claims decided in the same pass, first
	}{
		"over maxConcurrent is queued": {
			maxConcurrent: 1, maxPerSession: 3,
			others:      []*airlockv1alpha1.SandboxClaim{bound("old", t0.Add(-time.Minute))},
			claim:       newClaim("c1", "s1", airlockv1alpha1.ClaimPending, t0),
			wantPhase:   airlockv1alpha1.ClaimQueued,
			wantReason:  ReasonMaxConcurrent,
			wantRequeue: ptr.To(30 * time.Minute),
			wantEvent:   "Normal Queued " + MessageQueued,
		},
		"over maxPerSession is refused": {
			maxConcurrent: 5, maxPerSession: 1,
			others: []*airlockv1alpha1.SandboxClaim{func() *airlockv1alpha1.SandboxClaim {
				c := bound("old", t0.Add(-time.Minute))
				c.Spec.Session = "s1"
				return c
			}()},
			claim:       newClaim("c1", "s1", airlockv1alpha1.ClaimPending, t0),
			wantPhase:   airlockv1alpha1.ClaimRefused,
			wantReason:  "MaxPerSession",
			wantRequeue: ptr.To(refusedTTL),
			wantEvent:   `Warning Refused Refused (MaxPerSession): session "s1" of runtime "agent" already holds maxPerSession (1) live claims`,
		},
		"a disabled runtime refuses": {
			maxConcurrent: 5, maxPerSession: 3, disabled: true,
			claim:       newClaim("c1", "s1", airlockv1alpha1.ClaimPending, t0),
			wantPhase:   airlockv1alpha1.ClaimRefused,
			wantReason:  "Disabled",
			wantRequeue: ptr.To(refusedTTL),
			wantEvent:   `Warning Refused Refused (Disabled): AgentRuntime "agent" may hold no sandbox (spec.sandbox.enabled is false)`,
		},
		"the oldest undecided claim wins, whatever the sync order": {
			maxConcurrent: 1, maxPerSession: 3,
			others:      []*airlockv1alpha1.SandboxClaim{newClaim("older", "s0", airlockv1alpha1.ClaimPending, t0.Add(-time.Second))},
			claim:       newClaim("c1", "s1", airlockv1alpha1.ClaimPending, t0),
			wantPhase:   airlockv1alpha1.ClaimQueued,
			wantReason:  ReasonMaxConcurrent,
			wantRequeue: ptr.To(30 * time.Minute),
			// The older claim is decided in the same pass (one list for the namespace).
			otherEvents: []string{"Normal Admitted " + MessageAdmitted},
			wantEvent:   "Normal Queued " + MessageQueued,
		},
		"a Reaping claim whose pods are gone frees its slot": {
			maxConcurrent: 1, maxPerSession: 3,
			others: []*airlockv1alpha1.SandboxClaim{func() *airlockv1alpha1.SandboxClaim {
				c := bound("old", t0.Add(-time.Hour))
				c.Status.Phase = airlockv1alpha1.ClaimReaping
				return c
			}()},
			claim:       newClaim("c1", "s1", airlockv1alpha1.ClaimQueued, t0),
			wantPhase:   airlockv1alpha1.ClaimBinding,
			wantReason:  ReasonBinding,
			wantRequeue: ptr.To(5 * time.Minute),
			wantEvent:   "Normal Admitted " + MessageAdmitted,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(t)
			rt := newRuntime("agent", tc.maxConcurrent, tc.maxPerSession)
			rt.Spec.Sandbox.Enabled = !tc.disabled
			f.runtimes = append(f.runtimes, rt)
			f.registries = append(f.registries, newRegistry("tools", ""))
			f.classes = append(f.classes, newClass("codegen"))
			f.claims = append(append(f.claims, tc.others...), tc.claim)
			c := f.newController(ctx)
			requeue, err := c.sync(ctx, keyOf(tc.claim))
			if err != nil {
				t.Fatal(err)
			}
			checkRequeue(t, requeue, tc.wantRequeue)
			got := f.writtenClaimNamed(tc.claim.Name)
			if got.Status.Phase != tc.wantPhase || got.Status.Reason != tc.wantReason {
				t.Errorf("status %s/%s, want %s/%s", got.Status.Phase, got.Status.Reason, tc.wantPhase, tc.wantReason)
			}
			if tc.wantPhase == airlockv1alpha1.ClaimQueued && (got.Status.QueuedAt == nil || !got.Status.QueuedAt.Time.Equal(t0)) {
				t.Errorf("queuedAt %v, want %v", got.Status.QueuedAt, t0)
			}
			// Decisions of one pass are written concurrently: their events come in any order.
			if diff := cmp.Diff(append(tc.otherEvents, tc.wantEvent), f.events(), cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSyncExpiry(t *testing.T) {
	refused := func() *airlockv1alpha1.SandboxClaim {
		c := newClaim("c1", "s1", airlockv1alpha1.ClaimRefused, t0)
		c.Status.Reason = "MaxPerSession"
		setCondition(&c.Status, ConditionAdmitted, metav1.ConditionFalse, "MaxPerSession", messageRefusedDetail, t0)
		return c
	}
	queued := func() *airlockv1alpha1.SandboxClaim {
		c := newClaim("c1", "s1", airlockv1alpha1.ClaimQueued, t0)
		setPhase(c, airlockv1alpha1.ClaimQueued, ReasonMaxConcurrent, MessageQueued)
		c.Status.QueuedAt = ptr.To(metav1.NewTime(t0))
		setCondition(&c.Status, ConditionAdmitted, metav1.ConditionFalse, ReasonQueued, MessageQueued, t0)
		return c
	}
	failed := func(replacedBy string) *airlockv1alpha1.SandboxClaim {
		c := binding("c1", t0.Add(-time.Minute))
		c.Status.Phase = airlockv1alpha1.ClaimFailed
		c.Status.ReplacedBy = replacedBy
		setCondition(&c.Status, ConditionReady, metav1.ConditionFalse, ReasonStartupTimeout, "", t0)
		return c
	}
	tests := map[string]struct {
		claim       *airlockv1alpha1.SandboxClaim
		others      []*airlockv1alpha1.SandboxClaim
		blocker     bool // a Bound claim holds the runtime's only slot
		step        time.Duration
		wantRequeue *time.Duration
		wantActions []string
	}{
		"refused is kept for a few seconds": {
			claim: refused(), step: 2 * time.Second,
			wantRequeue: ptr.To(3 * time.Second),
		},
		"refused is deleted after a few seconds": {
			claim: refused(), step: refusedTTL,
			wantActions: []string{"get sandboxclaims c1", "delete sandboxclaims c1"},
		},
		"queued waits max(idleTimeout, 10m)": {
			claim: queued(), blocker: true, step: 29 * time.Minute,
			wantRequeue: ptr.To(time.Minute),
		},
		"queued past max(idleTimeout, 10m) is deleted": {
			claim: queued(), blocker: true, step: 30 * time.Minute,
			wantActions: []string{"get sandboxclaims c1", "delete sandboxclaims c1"},
		},
		"failed is kept max(idleTimeout, 10m)": {
			claim: failed(""), step: 10 * time.Minute,
			wantRequeue: ptr.To(20 * time.Minute),
		},
		"failed past max(idleTimeout, 10m) is deleted": {
			claim: failed(""), step: 30 * time.Minute,
			wantActions: []string{"get sandboxclaims c1", "delete sandboxclaims c1"},
		},
		"failed and replaced is kept while its replacement lives": {
			claim:  failed("c1-r1"),
			others: []*airlockv1alpha1.SandboxClaim{replacementOf("c1", bound("c1-r1", t0))},
			step:   time.Hour,
		},
		"failed and replaced is deleted when its replacement is gone (asked of the API server)": {
			claim:       failed("c1-r1"),
			wantActions: []string{"get sandboxclaims c1-r1", "get sandboxclaims c1", "delete sandboxclaims c1"},
		},
		"failed, replaced by a claim not linked yet: the leader links them, and keeps it": {
			claim:       failed(""),
			others:      []*airlockv1alpha1.SandboxClaim{replacementOf("c1", newClaim("c1-r1", "s-c1", airlockv1alpha1.ClaimPending, t0))},
			step:        time.Hour,
			wantActions: []string{"update sandboxclaims/status c1"},
		},
		"failed, its replacement refused: not replaced, expires": {
			claim:       failed(""),
			others:      []*airlockv1alpha1.SandboxClaim{replacementOf("c1", newClaim("c1-r1", "s-c1", airlockv1alpha1.ClaimRefused, t0))},
			step:        30 * time.Minute,
			wantActions: []string{"get sandboxclaims c1", "delete sandboxclaims c1"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixtureWithLimits(t, 1, 3)
			f.claims = append(append(f.claims, tc.others...), tc.claim)
			if tc.blocker {
				b := bound("blocker", t0.Add(-time.Hour))
				b.Status.LastUsedAt = ptr.To(metav1.NewTime(t0.Add(time.Hour))) // never idle here
				f.claims = append(f.claims, b)
			}
			c := f.newController(ctx)
			f.clock.Step(tc.step)
			requeue, err := c.sync(ctx, keyOf(tc.claim))
			if err != nil {
				t.Fatal(err)
			}
			checkRequeue(t, requeue, tc.wantRequeue)
			checkActions(t, f, tc.wantActions)
			if slices.Contains(tc.wantActions, "update sandboxclaims/status c1") {
				if got := f.writtenClaim(); got.Status.ReplacedBy != "c1-r1" || got.Status.Phase != airlockv1alpha1.ClaimFailed {
					t.Errorf("status %s replacedBy %q, want Failed replacedBy c1-r1", got.Status.Phase, got.Status.ReplacedBy)
				}
			}
		})
	}
}

// TestSyncDecidesOverAPIServerState: a claim that the cache would admit is queued instead when
// the API server has an older claim, already Binding, that the cache has not seen yet (one a
// previous leader admitted just before it died): admitting on the cache would run one claim too
// many. Once the older claim is gone, the claim is admitted.
func TestSyncDecidesOverAPIServerState(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixtureWithLimits(t, 1, 3)
	younger := newClaim("c2", "s2", "", t0.Add(-time.Second))
	f.claims = append(f.claims, younger)
	c := f.newController(ctx)

	syncWithAPIOnly(ctx, t, f, c, younger, binding("c1", t0.Add(-time.Minute)))
	checkActions(t, f, []string{"update sandboxclaims/status c2"})
	if got := f.writtenClaim(); got.Status.Phase != airlockv1alpha1.ClaimQueued {
		t.Errorf("phase %q with an older Binding claim on the API server, want Queued", got.Status.Phase)
	}

	if err := f.airlockClient.AirlockV1alpha1().SandboxClaims(testNamespace).Delete(ctx, "c1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.log = nil
	if _, err := c.sync(ctx, keyOf(younger)); err != nil {
		t.Fatal(err)
	}
	if got := f.writtenClaim(); got.Status.Phase != airlockv1alpha1.ClaimBinding {
		t.Errorf("phase %q once the older claim is gone, want Binding", got.Status.Phase)
	}
}

// TestSyncQueueDecidedOverAPIServerState: a claim that the cache would queue is refused instead
// when the API server has an older live claim of its session that the cache has not seen yet (one
// a previous leader queued just before it died): queuing it would make one live claim too many.
func TestSyncQueueDecidedOverAPIServerState(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixtureWithLimits(t, 1, 1)
	running := bound("c0", t0.Add(-time.Hour))
	running.Spec.Session = "s0"
	younger := newClaim("c2", "s1", airlockv1alpha1.ClaimPending, t0.Add(-time.Second))
	f.claims = append(f.claims, running, younger)
	c := f.newController(ctx)

	requeue := syncWithAPIOnly(ctx, t, f, c, younger, newClaim("c1", "s1", airlockv1alpha1.ClaimQueued, t0.Add(-time.Minute)))
	checkRequeue(t, requeue, ptr.To(refusedTTL))
	checkActions(t, f, []string{"update sandboxclaims/status c2"})
	if got := f.writtenClaim(); got.Status.Phase != airlockv1alpha1.ClaimRefused || got.Status.Reason != admission.ReasonMaxPerSession {
		t.Errorf("younger claim %s/%s, want Refused/MaxPerSession", got.Status.Phase, got.Status.Reason)
	}
}

// syncWithAPIOnly puts apiOnly into the API server only (the cache has not caught up with it),
// syncs claim and returns when to look at it again, checking that the claims were listed from the
// API server for the decision.
func syncWithAPIOnly(ctx context.Context, t *testing.T, f *fixture, c *Controller, claim, apiOnly *airlockv1alpha1.SandboxClaim) *time.Duration {
	t.Helper()
	if err := f.airlockClient.Tracker().Add(apiOnly); err != nil {
		t.Fatal(err)
	}
	f.log = nil
	requeue, err := c.sync(ctx, keyOf(claim))
	if err != nil {
		t.Fatal(err)
	}
	if !f.listedClaims() {
		t.Error("the decision was not made over a list from the API server")
	}
	return requeue
}

// TestSyncRefusalsFirst: when the walk gives a claim the place of a Queued claim that it now
// refuses (both created in the same second, sorted by name), the refusal is written before the
// decision that takes the place, so that there is never one live claim too many.
func TestSyncRefusalsFirst(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixtureWithLimits(t, 5, 1)
	queued := newClaim("zzz", "s1", airlockv1alpha1.ClaimQueued, t0)
	pending := newClaim("aaa", "s1", airlockv1alpha1.ClaimPending, t0)
	running := newClaim("run", "s0", airlockv1alpha1.ClaimBound, t0.Add(-time.Hour))
	f.claims = append(f.claims, queued, pending, running)
	c := f.newController(ctx)
	// Make aaa wait (Queue, not Admit): the runtime's one slot is taken.
	c.decide = func(in admission.Input) map[string]admission.Decision {
		d := admission.Decide(in)
		if d["aaa"].Action == admission.Admit {
			d["aaa"] = admission.Decision{Action: admission.Queue}
		}
		return d
	}

	if _, err := c.sync(ctx, keyOf(pending)); err != nil {
		t.Fatal(err)
	}
	checkActions(t, f, []string{"update sandboxclaims/status zzz", "update sandboxclaims/status aaa"})
	var phases []string
	for _, a := range f.log {
		if u, ok := a.(core.UpdateAction); ok {
			got := u.GetObject().(*airlockv1alpha1.SandboxClaim)
			phases = append(phases, got.Name+":"+string(got.Status.Phase)+"/"+got.Status.Reason)
		}
	}
	if diff := cmp.Diff([]string{"zzz:Refused/MaxPerSession", "aaa:Queued/MaxConcurrent"}, phases); diff != "" {
		t.Errorf("writes (-want +got):\n%s", diff)
	}
}

// TestSyncPlaceDecisionsSerialisedPerNamespace: a decision that takes a place is confirmed and
// written under the namespace's decision lock, so that two workers never confirm two decisions
// of one namespace over the same list. While the lock is held elsewhere, the sync writes nothing;
// once it is released, the claim is queued.
func TestSyncPlaceDecisionsSerialisedPerNamespace(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixtureWithLimits(t, 1, 3)
	running := bound("c0", t0.Add(-time.Hour))
	pending := newClaim("c1", "s1", airlockv1alpha1.ClaimPending, t0.Add(-time.Second))
	f.claims = append(f.claims, running, pending)
	c := f.newController(ctx)

	unlock := c.decisionLocks.lock(testNamespace)
	done := make(chan error)
	go func() {
		_, err := c.sync(ctx, keyOf(pending))
		done <- err
	}()
	// Wait until the sync waits for the lock: it then has the cache's decision in hand.
	for c.decisionLocks.users(testNamespace) < 2 {
		select {
		case err := <-done:
			t.Fatalf("the sync finished while another worker held the namespace's decision lock (err %v)", err)
		default:
			goruntime.Gosched()
		}
	}
	checkActions(t, f, nil)
	for _, a := range f.log {
		if a.GetVerb() == "list" {
			t.Errorf("the sync listed claims while another worker held the decision lock: %v", a)
		}
	}
	unlock()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := f.writtenClaim(); got.Status.Phase != airlockv1alpha1.ClaimQueued {
		t.Errorf("phase %q after the lock was released, want Queued", got.Status.Phase)
	}
	if n := c.decisionLocks.len(); n != 0 {
		t.Errorf("%d decision locks left after the sync", n)
	}
}
