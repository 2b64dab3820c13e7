package claim

import (
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/workspace"
)

// TestSyncWaitsForItsOwnStatusWrite: a claim synced again before the cache shows the status the
// controller just wrote (its pod's event came first) is left alone, rather than written again
// from the same resourceVersion (a conflict at the API server); once the cache shows the write,
// it is synced as usual.
func TestSyncWaitsForItsOwnStatusWrite(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t).withDefaults()
	claim := binding("c1", t0.Add(-time.Minute))
	claim.ResourceVersion = "7"
	f.claims = append(f.claims, claim)
	f.withChildren(claim)
	f.pods = append(f.pods, newPod(claim, markReady))
	c := f.newController(ctx)
	if _, err := c.sync(ctx, keyOf(claim)); err != nil {
		t.Fatal(err)
	}
	checkActions(t, f, []string{"update sandboxclaims/status c1"})
	written := f.writtenClaimNamed("c1")

	// The pod's next event brings the claim on again; the cache still has it Binding at 7.
	f.log = nil
	if _, err := c.sync(ctx, keyOf(claim)); err != nil {
		t.Fatal(err)
	}
	checkActions(t, f, nil)

	// The cache shows the write: synced as usual (Bound, nothing to write), and the claim is no
	// longer held back.
	written.ResourceVersion = "8"
	f.cacheClaim(t, c, written)
	if _, err := c.sync(ctx, keyOf(written)); err != nil {
		t.Fatal(err)
	}
	checkActions(t, f, nil)
	if written.Status.Phase != airlockv1alpha1.ClaimBound || c.statusWrites.stale(written) {
		t.Errorf("phase %s, held back %v: want Bound and synced", written.Status.Phase, c.statusWrites.stale(written))
	}
	// A later change of the pod is acted on (the claim is not held back any more).
	f.log = nil
	if err := f.podInformer.GetIndexer().Update(newPod(written, func(p *corev1.Pod) {})); err != nil {
		t.Fatal(err)
	}
	if _, err := c.sync(ctx, keyOf(written)); err != nil {
		t.Fatal(err)
	}
	checkActions(t, f, []string{"update sandboxclaims/status c1"}) // Ready False: PodNotReady
}

// TestSyncAfterItsOwnDeletion: a claim this controller deleted (its work synced back) is left
// alone until the cache shows it gone: a sync over the cached claim, still Reaping, whose
// sync-back Job garbage collection has already removed, would otherwise start that Job again.
func TestSyncAfterItsOwnDeletion(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t).withDefaults()
	claim := reapingClaim("c1", t0.Add(-time.Hour), "projects/demo")
	f.claims = append(f.claims, claim)
	f.withChildren(claim)
	f.jobs = append(f.jobs, syncJob(claim, true, batchv1.JobComplete))
	c := f.newController(ctx)
	if _, err := c.sync(ctx, keyOf(claim)); err != nil {
		t.Fatal(err)
	}
	checkActions(t, f, []string{"update sandboxclaims/status c1", "create jobs " + workspace.RecordName(claim.Spec.WorkspaceDir), "delete sandboxclaims c1"})

	// The cache shows the status write (the claim still Reaping), then garbage collection
	// removes the Job: the Job's deletion event comes before the claim's.
	written := f.writtenClaimNamed("c1")
	written.ResourceVersion = "8"
	f.cacheClaim(t, c, written)
	f.log = nil
	if err := f.jobInformer.GetIndexer().Delete(f.jobs[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := c.sync(ctx, keyOf(written)); err != nil {
		t.Fatal(err)
	}
	checkActions(t, f, nil)
}

// TestStatusWritesExpire: a record of a write (or a deletion) whose change the cache never shows
// holds the claim's syncs back for statusWritesTimeout at most, then the claim is synced again;
// a sync-back Job the cache never shows counts as unfinished for syncJobsTimeout at most.
func TestStatusWritesExpire(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	clk := clocktesting.NewFakePassiveClock(t0)
	w := newStatusWrites(logger, clk)
	claim := binding("c1", t0)
	claim.ResourceVersion = "7"
	w.wrote(claim)
	other := binding("c2", t0)
	w.deleted(other.UID)
	clk.SetTime(t0.Add(statusWritesTimeout))
	if !w.stale(claim) || !w.stale(other) {
		t.Fatal("a write's record dropped before its timeout")
	}
	clk.SetTime(t0.Add(statusWritesTimeout + time.Second))
	if w.stale(claim) || w.stale(other) {
		t.Error("a write's record holds the claim back past its timeout")
	}

	jobs := newSyncJobsStarted(logger, clk)
	job := cache.ObjectName{Namespace: testNamespace, Name: "c1-sync"}
	jobs.add(job)
	if !jobs.has(job) {
		t.Fatal("a Job just created does not count as unfinished")
	}
	clk.SetTime(clk.Now().Add(syncJobsTimeout + time.Second))
	if jobs.has(job) {
		t.Error("a created Job the cache never showed counts as unfinished past its timeout")
	}
}
