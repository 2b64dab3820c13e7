package claim

import (
	"fmt"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/workspace"
)

// failedSyncJob is the claim's attempt-th sync-back (or cleanup) Job, failed at failedAt.
func failedSyncJob(claim *airlockv1alpha1.SandboxClaim, attempt int, failedAt time.Time) *batchv1.Job {
	j := buildSyncJob(claim, "workspace-content", testSyncImage, attempt, true, 3)
	j.CreationTimestamp = metav1.NewTime(failedAt.Add(-time.Minute))
	j.Status.Failed = 1
	j.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(failedAt),
		Reason: "BackoffLimitExceeded", Message: "target projects/demo: exists and is not a directory"}}
	return j
}

// TestSyncBackGivesUp (issue 24, item 2): a sync-back that keeps failing ends. The claim's last
// attempt failing moves it to Failed with a reason and a message that says where the work is
// (its workspace, untouched: no cleanup Job, no removal), with an event; before, it was retried
// with backoff without end, Reaping, holding its place.
func TestSyncBackGivesUp(t *testing.T) {
	tests := map[string]struct {
		targetPath string
		attempt    int
		wantPhase  airlockv1alpha1.ClaimPhase
		wantReason string
	}{
		"sync-back, attempt before the last: retried": {targetPath: "projects/demo", attempt: syncMaxAttempts - 1, wantPhase: airlockv1alpha1.ClaimReaping},
		"sync-back, last attempt: Failed, workspace kept": {
			targetPath: "projects/demo", attempt: syncMaxAttempts, wantPhase: airlockv1alpha1.ClaimFailed, wantReason: ReasonSyncBackFailed,
		},
		"a later attempt (an annotation from before): Failed": {
			targetPath: "projects/demo", attempt: syncMaxAttempts + 3, wantPhase: airlockv1alpha1.ClaimFailed, wantReason: ReasonSyncBackFailed,
		},
		"cleanup, last attempt: Failed, workspace left": {
			attempt: syncMaxAttempts, wantPhase: airlockv1alpha1.ClaimFailed, wantReason: ReasonCleanupFailed,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(t).withDefaults()
			claim := reapingClaim("c1", t0.Add(-time.Hour), tc.targetPath)
			claim.Annotations = map[string]string{AnnotationSyncFailures: fmt.Sprint(tc.attempt - 1)}
			f.claims = append(f.claims, claim)
			f.withChildren(claim)
			f.jobs = append(f.jobs, failedSyncJob(claim, tc.attempt, t0.Add(-time.Second)))
			c := f.newController(ctx)
			if _, err := syncClaim(ctx, c, keyOf(claim)); err != nil {
				t.Fatal(err)
			}
			got := f.writtenClaim()
			if got.Status.Phase != tc.wantPhase {
				t.Fatalf("phase %s (%s), want %s", got.Status.Phase, got.Status.Message, tc.wantPhase)
			}
			held := "create jobs " + workspace.RecordName(claim.Spec.WorkspaceDir)
			for _, a := range f.actions() {
				if a == held && tc.targetPath != "" {
					continue // the held record (TestGaveUpSyncBackHoldsItsWorkspace)
				}
				if strings.HasPrefix(a, "delete jobs") || strings.HasPrefix(a, "create jobs") || strings.HasPrefix(a, "delete sandboxclaims") {
					if tc.wantPhase == airlockv1alpha1.ClaimFailed {
						t.Errorf("%s after giving up: the workspace must be left as it is, and the claim kept", a)
					}
				}
			}
			if tc.wantPhase != airlockv1alpha1.ClaimFailed {
				return
			}
			if got.Status.Reason != tc.wantReason || !strings.Contains(got.Status.Message, claim.Spec.WorkspaceDir) ||
				!strings.Contains(got.Status.Message, "workspace-content") || !strings.Contains(got.Status.Message, "exists and is not a directory") {
				t.Errorf("status %s %q, want %s naming the workspace, its PVC and the last failure", got.Status.Reason, got.Status.Message, tc.wantReason)
			}
			if cond := findCondition(got, ConditionSyncBack); cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != ReasonSyncBackGaveUp {
				t.Errorf("SyncBack %+v, want False/%s", cond, ReasonSyncBackGaveUp)
			}
			if ready := findCondition(got, ConditionReady); ready == nil || !ready.LastTransitionTime.Time.Equal(t0) {
				t.Errorf("Ready %+v, want False since now (the Failed claim's expiry counts from it)", ready)
			}
			events := strings.Join(f.events(), "\n")
			if !strings.Contains(events, "Warning "+ReasonSyncBackGaveUp) {
				t.Errorf("events %q, want a Warning %s", events, ReasonSyncBackGaveUp)
			}
		})
	}
}

// TestFailingSyncBackDoesNotHoldUpTheYounger: a younger claim whose target overlaps a failing one
// waits its turn while the older is retried, and gets it once the older gave up (the update of the
// older enqueues it): no claim waits behind a failing target forever.
func TestFailingSyncBackDoesNotHoldUpTheYounger(t *testing.T) {
	older := reapingClaim("old", t0.Add(-2*time.Hour), "projects/demo")
	younger := reapingClaim("young", t0.Add(-time.Hour), "projects/demo/sub")

	t.Run("while the older is retried, the younger waits", func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		f := newFixture(t).withDefaults()
		o := older.DeepCopy()
		o.Annotations = map[string]string{AnnotationSyncFailures: "1"}
		f.claims = append(f.claims, o, younger.DeepCopy())
		f.jobs = append(f.jobs, failedSyncJob(o, 1, t0.Add(-time.Second)))
		c := f.newController(ctx)
		if _, err := syncClaim(ctx, c, keyOf(younger)); err != nil {
			t.Fatal(err)
		}
		if cond := findCondition(f.writtenClaimNamed("young"), ConditionSyncBack); cond == nil || cond.Reason != ReasonSyncBackWaiting {
			t.Errorf("younger's SyncBack %+v, want %s", cond, ReasonSyncBackWaiting)
		}
	})

	t.Run("the older gives up: the younger is enqueued and gets its turn", func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		f := newFixture(t).withDefaults()
		o := older.DeepCopy()
		o.Annotations = map[string]string{AnnotationSyncFailures: fmt.Sprint(syncMaxAttempts - 1)}
		y := younger.DeepCopy()
		f.claims = append(f.claims, o, y)
		f.jobs = append(f.jobs, failedSyncJob(o, syncMaxAttempts, t0.Add(-time.Second)))
		c := f.newController(ctx)
		if _, err := syncClaim(ctx, c, keyOf(o)); err != nil {
			t.Fatal(err)
		}
		gaveUp := f.writtenClaimNamed("old")
		if gaveUp.Status.Phase != airlockv1alpha1.ClaimFailed {
			t.Fatalf("older's phase %s, want Failed", gaveUp.Status.Phase)
		}
		// The cache shows the older's write: its update event enqueues the younger.
		for c.queue.Len() > 0 {
			key, _ := c.queue.Get()
			c.queue.Done(key)
			c.queue.Forget(key)
		}
		gaveUp.ResourceVersion = "2" // a new version, not a resync
		f.cacheClaim(t, c, gaveUp)
		enqueued := map[cache.ObjectName]bool{}
		for c.queue.Len() > 0 {
			key, _ := c.queue.Get()
			enqueued[key] = true
			c.queue.Done(key)
		}
		if !enqueued[keyOf(y)] {
			t.Errorf("enqueued %v, want the younger claim waiting behind the older", enqueued)
		}
		f.log = nil
		if _, err := syncClaim(ctx, c, keyOf(y)); err != nil {
			t.Fatal(err)
		}
		if got := f.createdJob(); got.Name != workspace.SyncJobName(y) {
			t.Errorf("created Job %s, want the younger's sync-back", got.Name)
		}
	})
}

// TestGaveUpClaimOfAClosedSessionIsKept: the session of a claim whose sync-back gave up was
// closed (the reap-requested annotation, which deletes a Failed claim at once: it never ran); it
// is kept, saying where its work is, and expires as any Failed claim. Found on the real node: it
// was deleted the moment it gave up.
func TestGaveUpClaimOfAClosedSessionIsKept(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t).withDefaults()
	claim := reapingClaim("c1", t0.Add(-time.Hour), "projects/demo")
	claim.Annotations = map[string]string{airlockv1alpha1.AnnotationReapRequested: t0.Format(time.RFC3339)}
	setPhase(claim, airlockv1alpha1.ClaimFailed, ReasonSyncBackFailed, "gave up: the work is kept in ns/sandboxes/c1")
	setCondition(&claim.Status, ConditionReady, metav1.ConditionFalse, ReasonSyncBackFailed, "gave up", t0.Add(-time.Minute))
	setCondition(&claim.Status, ConditionSyncBack, metav1.ConditionFalse, ReasonSyncBackGaveUp, "gave up", t0.Add(-time.Minute))
	f.claims = append(f.claims, claim)
	c := f.newController(ctx)
	requeue, err := syncClaim(ctx, c, keyOf(claim))
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range f.actions() {
		if a == "delete sandboxclaims c1" {
			t.Fatalf("the claim was deleted at once: %v", f.actions())
		}
	}
	checkRequeue(t, requeue, ptr.To(waitingTTL(f.runtimes[0])-time.Minute))
}
