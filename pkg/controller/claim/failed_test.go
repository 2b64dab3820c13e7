package claim

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/workspace"
)

// failed returns a claim that failed at failedAt, replaced by replacedBy if set.
func failed(name string, failedAt time.Time, replacedBy string) *airlockv1alpha1.SandboxClaim {
	c := binding(name, failedAt.Add(-time.Minute))
	setPhase(c, airlockv1alpha1.ClaimFailed, "ImagePullBackOff", "the detail")
	setCondition(&c.Status, ConditionReady, metav1.ConditionFalse, "ImagePullBackOff", "the detail", failedAt)
	c.Status.ReplacedBy = replacedBy
	return c
}

// replacementOf makes c the replacement of the claim named original.
func replacementOf(original string, c *airlockv1alpha1.SandboxClaim) *airlockv1alpha1.SandboxClaim {
	c.Spec.Replaces = original
	return c
}

// TestSyncFailedReplacementNotCachedYet: the leader never deletes a Failed claim as
// ReplacementGone while its replacement exists on the API server but not yet in its cache (the
// Sandbox API marked it replaced and created the replacement a moment ago). Deleting it there
// let an acquire that found neither claim in its cache create the handle's base claim again,
// next to the replacement: two claims, two sandboxes, for one handle.
func TestSyncFailedReplacementNotCachedYet(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixtureWithLimits(t, 1, 3)
	original := failed("c1", t0.Add(-time.Minute), "c1-r1")
	f.claims = append(f.claims, original)
	c := f.newController(ctx)
	if err := f.airlockClient.Tracker().Add(replacementOf("c1", newClaim("c1-r1", original.Spec.Session, "", t0))); err != nil {
		t.Fatal(err)
	}
	f.log = nil
	requeue, err := c.sync(ctx, keyOf(original))
	if err != nil {
		t.Fatal(err)
	}
	checkRequeue(t, requeue, nil)
	checkActions(t, f, []string{"get sandboxclaims c1-r1"})

	// The replacement's add event brings the original back (and the replacement itself).
	c.addClaim(klog.FromContext(ctx), replacementOf("c1", newClaim("c1-r1", original.Spec.Session, "", t0)))
	var keys []string
	for c.queue.Len() > 0 {
		key, _ := c.queue.Get()
		keys = append(keys, key.Name)
		c.queue.Done(key)
	}
	slices.Sort(keys)
	if diff := cmp.Diff([]string{"c1", "c1-r1"}, keys); diff != "" {
		t.Errorf("enqueued after the replacement's add event (-want +got):\n%s", diff)
	}
}

// TestFailedClaimWorkspaceKept: a Failed claim deleted when it expires keeps its workspace (the
// record written before the delete), resumable by the next claim of its runtime, session and
// handle: its pod never became ready, but the claim may have taken the record of a kept workspace
// it resumed, and that work must not be left without one. A claim that never got a frozen record
// never had a pod (nothing to keep), and one whose sync-back gave up gets no record: a collection
// would destroy the only copy of work its target never got.
func TestFailedClaimWorkspaceKept(t *testing.T) {
	gaveUp := func() *airlockv1alpha1.SandboxClaim {
		c := failed("c1", t0, "")
		setCondition(&c.Status, ConditionSyncBack, metav1.ConditionFalse, ReasonSyncBackGaveUp, "gave up", t0)
		return c
	}
	neverFrozen := func() *airlockv1alpha1.SandboxClaim {
		c := failed("c1", t0, "")
		c.Status.Frozen = nil
		return c
	}
	for name, tc := range map[string]struct {
		claim    *airlockv1alpha1.SandboxClaim
		wantKept bool
	}{
		"its pod never ready (it may have resumed a kept workspace): kept": {claim: failed("c1", t0, ""), wantKept: true},
		"never frozen (no pod ever): nothing kept":                         {claim: neverFrozen()},
		"its sync-back gave up: left, no record":                           {claim: gaveUp()},
	} {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(t).withDefaults()
			f.claims = append(f.claims, tc.claim)
			c := f.newController(ctx)
			f.clock.Step(time.Hour) // past max(idleTimeout, 10m)
			if _, err := c.sync(ctx, keyOf(tc.claim)); err != nil {
				t.Fatal(err)
			}
			want := []string{"get sandboxclaims c1", "delete sandboxclaims c1"}
			if tc.wantKept {
				want = append([]string{"create jobs " + workspace.RecordName(tc.claim.Spec.WorkspaceDir)}, want...)
			}
			checkActions(t, f, want)
			if !tc.wantKept {
				return
			}
			record := f.createdJob()
			if record.Annotations[airlockv1alpha1.AnnotationKeptDir] != tc.claim.Spec.WorkspaceDir || record.Annotations[airlockv1alpha1.AnnotationKeptRuntimeUID] != string(f.runtimes[0].UID) {
				t.Errorf("record annotations %v, want the claim's directory and its runtime's UID", record.Annotations)
			}
			// The next claim of the handle (the same name, runtime and directory) resumes it.
			next := binding("c1", f.clock.Now())
			if !workspace.ResumableBy(record, next) {
				t.Errorf("the record %s is not resumable by the next claim of the handle", record.Name)
			}
			if events := f.events(); !slices.ContainsFunc(events, func(e string) bool { return strings.HasPrefix(e, "Normal "+ReasonWorkspaceKept) }) {
				t.Errorf("events %v, want a %s", events, ReasonWorkspaceKept)
			}
		})
	}
}
