package claim

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	core "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/airlock-dev/airlock/pkg/admission"
	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/workspace"
)

func TestSyncAdmission(t *testing.T) {
	tests := map[string]struct {
		maxConcurrent, maxPerSession int32
		disabled                     bool
		others                       []*airlockv1alpha1.SandboxClaim
		claim                        *airlockv1alpha1.SandboxClaim
		wantPhase                    airlockv1alpha1.ClaimPhase
		wantReason                   string
		wantEvent                    string
		otherEvents                  []string // events of other claims decided in the same pass, first
	}{
		"over maxConcurrent is queued": {
			maxConcurrent: 1, maxPerSession: 3,
			others:     []*airlockv1alpha1.SandboxClaim{bound("old", t0.Add(-time.Minute))},
			claim:      newClaim("c1", "s1", airlockv1alpha1.ClaimPending, t0),
			wantPhase:  airlockv1alpha1.ClaimQueued,
			wantReason: ReasonMaxConcurrent,
			wantEvent:  "Normal Queued " + MessageQueued,
		},
		"over maxPerSession is refused": {
			maxConcurrent: 5, maxPerSession: 1,
			others: []*airlockv1alpha1.SandboxClaim{func() *airlockv1alpha1.SandboxClaim {
				c := bound("old", t0.Add(-time.Minute))
				c.Spec.Session = "s1"
				return c
			}()},
			claim:      newClaim("c1", "s1", airlockv1alpha1.ClaimPending, t0),
			wantPhase:  airlockv1alpha1.ClaimRefused,
			wantReason: "MaxPerSession",
			wantEvent:  `Warning Refused Refused (MaxPerSession): session "s1" of runtime "agent" already holds maxPerSession (1) live claims`,
		},
		"a disabled runtime refuses": {
			maxConcurrent: 5, maxPerSession: 3, disabled: true,
			claim:      newClaim("c1", "s1", airlockv1alpha1.ClaimPending, t0),
			wantPhase:  airlockv1alpha1.ClaimRefused,
			wantReason: "Disabled",
			wantEvent:  `Warning Refused Refused (Disabled): AgentRuntime "agent" may hold no sandbox (spec.sandbox.enabled is false)`,
		},
		"the oldest undecided claim wins, whatever the sync order": {
			maxConcurrent: 1, maxPerSession: 3,
			others:     []*airlockv1alpha1.SandboxClaim{newClaim("older", "s0", airlockv1alpha1.ClaimPending, t0.Add(-time.Second))},
			claim:      newClaim("c1", "s1", airlockv1alpha1.ClaimPending, t0),
			wantPhase:  airlockv1alpha1.ClaimQueued,
			wantReason: ReasonMaxConcurrent,
			// The older claim is decided in the same pass.
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
			claim:      newClaim("c1", "s1", airlockv1alpha1.ClaimQueued, t0),
			wantPhase:  airlockv1alpha1.ClaimBinding,
			wantReason: ReasonBinding,
			wantEvent:  "Normal Admitted " + MessageAdmitted,
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
			if err := admitAndBuild(ctx, c); err != nil {
				t.Fatal(err)
			}
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
	// A Failed claim's workspace is kept (its record written) before the claim is deleted.
	keptC1 := "create jobs " + workspace.RecordName(failed("").Spec.WorkspaceDir)
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
			wantActions: []string{keptC1, "get sandboxclaims c1", "delete sandboxclaims c1"},
		},
		"failed and replaced is kept while its replacement lives": {
			claim:  failed("c1-r1"),
			others: []*airlockv1alpha1.SandboxClaim{replacementOf("c1", bound("c1-r1", t0))},
			step:   time.Hour,
		},
		"failed and replaced is deleted when its replacement is gone (asked of the API server)": {
			claim:       failed("c1-r1"),
			wantActions: []string{"get sandboxclaims c1-r1", keptC1, "get sandboxclaims c1", "delete sandboxclaims c1"},
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
			wantActions: []string{keptC1, "get sandboxclaims c1", "delete sandboxclaims c1"},
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

// TestAdmissionFence: after a failover, the cache may lack what the previous leader wrote just
// before it died. The first pass of a term lists the claims from the API server and decides
// nothing until the cache has caught up with that list: an older claim already Binding (the
// younger would be admitted one too many) or Queued in the younger's session (it would be queued
// one live claim too many) is waited for, then counted.
func TestAdmissionFence(t *testing.T) {
	for name, tc := range map[string]struct {
		maxConcurrent, maxPerSession int32
		others                       []*airlockv1alpha1.SandboxClaim
		apiOnly                      *airlockv1alpha1.SandboxClaim
		wantPhase                    airlockv1alpha1.ClaimPhase
		wantReason                   string
	}{
		"an older Binding claim takes the only slot": {
			maxConcurrent: 1, maxPerSession: 3,
			apiOnly:   binding("c1", t0.Add(-time.Minute)),
			wantPhase: airlockv1alpha1.ClaimQueued, wantReason: ReasonMaxConcurrent,
		},
		"an older Queued claim of the session takes its only place": {
			maxConcurrent: 1, maxPerSession: 1,
			others: []*airlockv1alpha1.SandboxClaim{func() *airlockv1alpha1.SandboxClaim {
				c := bound("c0", t0.Add(-time.Hour))
				c.Spec.Session = "s0"
				return c
			}()},
			apiOnly:   newClaim("c1", "s2", airlockv1alpha1.ClaimQueued, t0.Add(-time.Minute)),
			wantPhase: airlockv1alpha1.ClaimRefused, wantReason: admission.ReasonMaxPerSession,
		},
	} {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixtureWithLimits(t, tc.maxConcurrent, tc.maxPerSession)
			younger := newClaim("c2", "s2", "", t0.Add(-time.Second))
			younger.ResourceVersion = "5"
			f.claims = append(append(f.claims, tc.others...), younger)
			c := f.newController(ctx)
			apiOnly := tc.apiOnly.DeepCopy()
			apiOnly.ResourceVersion = "7"
			if err := f.airlockClient.Tracker().Add(apiOnly); err != nil {
				t.Fatal(err)
			}

			if err := admitAndBuild(ctx, c); err != nil {
				t.Fatal(err)
			}
			if !f.listedClaims() {
				t.Error("the first pass of the term did not list the claims from the API server")
			}
			checkActions(t, f, nil)

			// The cache catches up: the namespace is asked for again, and decided.
			f.log = nil
			f.cacheClaim(t, c, apiOnly)
			if c.admitQueue.Len() != 1 {
				t.Fatalf("admission queue length %d once the cache caught up, want 1", c.admitQueue.Len())
			}
			if err := admitAndBuild(ctx, c); err != nil {
				t.Fatal(err)
			}
			if f.listedClaims() {
				t.Error("a later pass listed the claims again")
			}
			checkActions(t, f, []string{"update sandboxclaims/status c2"})
			if got := f.writtenClaim(); got.Status.Phase != tc.wantPhase || got.Status.Reason != tc.wantReason {
				t.Errorf("younger claim %s/%s, want %s/%s", got.Status.Phase, got.Status.Reason, tc.wantPhase, tc.wantReason)
			}
		})
	}
}

// TestAdmissionWaitsForItsOwnWrites: a pass decides nothing while the cache lacks a decision the
// leader wrote (here the admission of the runtime's only slot): over the stale cache, a claim
// created since would be admitted too. Once the cache shows the write, the namespace is decided
// again, and the new claim queued.
func TestAdmissionWaitsForItsOwnWrites(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixtureWithLimits(t, 1, 3)
	first := newClaim("c1", "s1", airlockv1alpha1.ClaimPending, t0.Add(-time.Second))
	first.ResourceVersion = "3"
	f.claims = append(f.claims, first)
	c := f.newController(ctx)
	if err := admitAndBuild(ctx, c); err != nil {
		t.Fatal(err)
	}
	admitted := f.writtenClaimNamed("c1")
	if admitted.Status.Phase != airlockv1alpha1.ClaimBinding {
		t.Fatalf("c1 %s, want Binding", admitted.Status.Phase)
	}

	// A second claim arrives before the cache has c1's Binding.
	second := newClaim("c2", "s2", airlockv1alpha1.ClaimPending, t0)
	second.ResourceVersion = "9"
	if err := f.airlockClient.Tracker().Add(second); err != nil {
		t.Fatal(err)
	}
	f.cacheClaim(t, c, second)
	f.log = nil
	if err := admitAndBuild(ctx, c); err != nil {
		t.Fatal(err)
	}
	checkActions(t, f, nil)
	if n := c.expectations.pending(testNamespace); n != 1 {
		t.Errorf("%d expectations, want the one write", n)
	}

	// The cache shows the write (the API server gave it a new resourceVersion): decided again,
	// and c2 is queued.
	for c.admitQueue.Len() > 0 {
		ns, _ := c.admitQueue.Get()
		c.admitQueue.Done(ns)
	}
	admitted.ResourceVersion = "4"
	f.cacheClaim(t, c, admitted)
	if c.admitQueue.Len() != 1 {
		t.Fatalf("admission queue length %d once the write was seen, want 1", c.admitQueue.Len())
	}
	if err := admitAndBuild(ctx, c); err != nil {
		t.Fatal(err)
	}
	checkActions(t, f, []string{"update sandboxclaims/status c2"})
	if got := f.writtenClaimNamed("c2"); got.Status.Phase != airlockv1alpha1.ClaimQueued {
		t.Errorf("c2 %s, want Queued: the runtime's only slot is c1's", got.Status.Phase)
	}
}

// TestAdmissionBuildsAdmittedChildrenOnce: the pass that admits a claim builds its children; the
// claim's own sync, which its Binding event brings on before the children are in the cache,
// writes none of them again (no AlreadyExists on the happy path). Once the cache shows them,
// the sync is free to repair them.
func TestAdmissionBuildsAdmittedChildrenOnce(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixtureWithLimits(t, 5, 3)
	claim := newClaim("c1", "s1", airlockv1alpha1.ClaimPending, t0)
	claim.UID = "uid-c1"
	f.claims = append(f.claims, claim)
	c := f.newController(ctx)
	if err := admitAndBuild(ctx, c); err != nil {
		t.Fatal(err)
	}
	got := f.actions()
	slices.Sort(got)
	want := []string{"create networkpolicies c1", "create pods c1", "create secrets " + tokenSecretName(claim), "update sandboxclaims/status c1"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the pass's writes (-want +got):\n%s", diff)
	}

	children := f.createdChildren(t)
	if len(children) != 2 {
		t.Fatalf("%d children created, want 2", len(children))
	}

	// The claim's Binding reaches the cache before its children do.
	written := f.writtenClaimNamed("c1")
	f.cacheClaim(t, c, written)
	f.log = nil
	if _, err := c.sync(ctx, keyOf(written)); err != nil {
		t.Fatal(err)
	}
	checkActions(t, f, nil)

	// The children reach the cache: their adds meet the expectations, and the sync may write.
	for _, obj := range children {
		c.addChild(obj)
	}
	if !c.childExpect.satisfied(written.UID) {
		t.Error("the claim still expects children the cache has shown")
	}
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

	if err := admitAndBuild(ctx, c); err != nil {
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

// TestAdmissionQueueByNamespace: undecided claims ask for a pass over their namespace, not one
// decision each: a burst of claims is one queue item (decided together by one pass), and two
// namespaces are two (decided in parallel).
func TestAdmissionQueueByNamespace(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixtureWithLimits(t, 5, 3)
	c := f.newController(ctx)
	logger, _ := ktesting.NewTestContext(t)
	for i := range 5 {
		c.addClaim(logger, newClaim(fmt.Sprintf("c%d", i), "s1", "", t0))
	}
	other := newClaim("x1", "s1", "", t0)
	other.Namespace = "team-b"
	c.addClaim(logger, other)
	c.addClaim(logger, bound("b1", t0)) // decided: no pass
	if n := c.admitQueue.Len(); n != 2 {
		t.Errorf("admission queue length %d, want 2 (one per namespace)", n)
	}
}

// TestAdmissionFenceUnlistedClaims: a cached claim that the fence's list lacks was deleted if the
// cache had it before the list was taken (older than the list's resourceVersion): the namespace
// waits for its deletion. One newer than the list was created since: nothing to wait for (waiting
// would stall admission of every claim created during a failover).
func TestAdmissionFenceUnlistedClaims(t *testing.T) {
	for name, tc := range map[string]struct {
		rv        string
		wantWrite bool
	}{
		"created after the list":  {rv: "20", wantWrite: true},
		"deleted before the list": {rv: "10", wantWrite: false},
	} {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixtureWithLimits(t, 5, 3)
			claim := newClaim("c1", "s1", airlockv1alpha1.ClaimPending, t0)
			claim.ResourceVersion = tc.rv
			f.claims = append(f.claims, claim)
			c := f.newController(ctx)
			c.claims = &fakeClaimControl{next: c.claims, list: &airlockv1alpha1.SandboxClaimList{ListMeta: metav1.ListMeta{ResourceVersion: "15"}}}
			if err := admitAndBuild(ctx, c); err != nil {
				t.Fatal(err)
			}
			wrote := false
			for _, a := range f.actions() {
				wrote = wrote || a == "update sandboxclaims/status c1"
			}
			if wrote != tc.wantWrite {
				t.Errorf("claim decided: %v, want %v (actions %v)", wrote, tc.wantWrite, f.actions())
			}
		})
	}
}

// TestAdmissionFenceListedClaimDeletedAtOnce: a claim the fence's list holds may be deleted, and
// its deletion seen by the cache, before the fence sets its expectation (the new leader reaps
// expired refusals as its term starts). The namespace does not wait for it: its other claims are
// decided in the same pass. (Found by TestClaimLeaderFailover: a namespace stalled for the
// expectation timeout.)
func TestAdmissionFenceListedClaimDeletedAtOnce(t *testing.T) {
	logger, ctx := ktesting.NewTestContext(t)
	f := newFixtureWithLimits(t, 5, 3)
	refused := newClaim("c0", "s0", airlockv1alpha1.ClaimRefused, t0.Add(-time.Hour))
	refused.ResourceVersion = "7"
	claim := newClaim("c1", "s1", airlockv1alpha1.ClaimPending, t0)
	claim.ResourceVersion = "8"
	f.claims = append(f.claims, refused, claim)
	c := f.newController(ctx)
	fake := &fakeClaimControl{next: c.claims, list: &airlockv1alpha1.SandboxClaimList{
		ListMeta: metav1.ListMeta{ResourceVersion: "8"},
		Items:    []airlockv1alpha1.SandboxClaim{*refused, *claim},
	}}
	fake.afterList = func() {
		// The deletion's event arrives between the list and the fence's expectations.
		if err := f.claimInformer.GetIndexer().Delete(refused); err != nil {
			t.Error(err)
		}
		c.deleteClaim(logger, refused)
	}
	c.claims = fake
	if err := admitAndBuild(ctx, c); err != nil {
		t.Fatal(err)
	}
	if got := f.writtenClaimNamed("c1"); got.Status.Phase != airlockv1alpha1.ClaimBinding {
		t.Errorf("c1 %s after the first pass, want Binding", got.Status.Phase)
	}
}

// TestWritesBudgetHappyPath: from creation to Bound, the operator writes six objects (Binding,
// the four children, Bound) and records two events (Admitted, Bound), with no write answered
// AlreadyExists or Conflict, even though the claim's own sync runs between the pass and the
// children reaching the cache (issue 12's writes budget). The fence's one LIST per term is the
// only other call.
func TestWritesBudgetHappyPath(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixtureWithLimits(t, 5, 3)
	claim := newClaim("c1", "s1", airlockv1alpha1.ClaimPending, t0)
	claim.UID, claim.ResourceVersion = "uid-c1", "1"
	f.claims = append(f.claims, claim)
	c := f.newController(ctx)
	if err := admitAndBuild(ctx, c); err != nil {
		t.Fatal(err)
	}
	children := f.createdChildren(t)
	written := f.writtenClaimNamed("c1")
	written.ResourceVersion = "2"

	// The Binding event brings the claim's sync on before the children are in the cache.
	f.cacheClaim(t, c, written)
	if _, err := c.sync(ctx, keyOf(written)); err != nil {
		t.Fatal(err)
	}
	// The children and the pod reach the cache; the sync binds.
	for _, obj := range children {
		switch o := obj.(type) {
		case *corev1.Pod:
			markReady(o) // as the kubelet reports it
			if err := f.podInformer.GetIndexer().Add(o); err != nil {
				t.Fatal(err)
			}
		case *networkingv1.NetworkPolicy:
			if err := f.netpolInformer.GetIndexer().Add(o); err != nil {
				t.Fatal(err)
			}
		}
		c.addChild(obj)
	}
	if _, err := c.sync(ctx, keyOf(written)); err != nil {
		t.Fatal(err)
	}
	bound := f.writtenClaimNamed("c1")
	if bound.Status.Phase != airlockv1alpha1.ClaimBound {
		t.Fatalf("phase %s, want Bound", bound.Status.Phase)
	}
	// Looked at again once Bound: nothing to write.
	bound.ResourceVersion = "3"
	f.cacheClaim(t, c, bound)
	if _, err := c.sync(ctx, keyOf(bound)); err != nil {
		t.Fatal(err)
	}

	var writes []string
	for _, a := range f.actions() {
		if !strings.HasPrefix(a, "get ") {
			writes = append(writes, a)
		}
	}
	slices.Sort(writes)
	want := []string{"create networkpolicies c1", "create pods c1", "create secrets " + tokenSecretName(claim),
		"update sandboxclaims/status c1", "update sandboxclaims/status c1"}
	if diff := cmp.Diff(want, writes); diff != "" {
		t.Errorf("writes from creation to Bound (-want +got):\n%s", diff)
	}
	events := f.events()
	if len(events) != 2 {
		t.Errorf("events %q, want Admitted and Bound", events)
	}
}

// TestAdmissionLooksAgainWhenAnExpectationTimesOut: an expectation that no event will ever meet
// (a claim listed by the fence whose events were lost) does not stall the namespace for good:
// the pass that finds it unmet asks for the namespace again at its timeout, and then decides
// without it.
func TestAdmissionLooksAgainWhenAnExpectationTimesOut(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixtureWithLimits(t, 5, 3)
	claim := newClaim("c1", "s1", airlockv1alpha1.ClaimPending, t0)
	f.claims = append(f.claims, claim)
	c := f.newController(ctx)
	c.fenced.Store(true)
	c.expectations.expectAtLeast(testNamespace, "lost", "lost-uid", 100) // never in the cache
	if err := admitAndBuild(ctx, c); err != nil {
		t.Fatal(err)
	}
	checkActions(t, f, nil)

	got := make(chan string, 1)
	go func() {
		ns, _ := c.admitQueue.Get()
		got <- ns
	}()
	f.clock.Step(expectationsTimeout + time.Second)
	select {
	case ns := <-got:
		c.admitQueue.Done(ns)
		if ns != testNamespace {
			t.Fatalf("namespace %q enqueued, want %q", ns, testNamespace)
		}
	case <-time.After(wait.ForeverTestTimeout):
		t.Fatal("the namespace was not looked at again when its expectation timed out")
	}
	if err := admitAndBuild(ctx, c); err != nil {
		t.Fatal(err)
	}
	if got := f.writtenClaimNamed("c1"); got.Status.Phase != airlockv1alpha1.ClaimBinding {
		t.Errorf("c1 %s after the timeout, want Binding", got.Status.Phase)
	}
	c.admitQueue.ShutDown()
}
