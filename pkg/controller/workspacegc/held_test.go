package workspacegc

import (
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	core "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
	"github.com/airlock-dev/airlock/pkg/workspace"
)

// heldImage is the sync image c1's record froze: not the operator's --sync-image of now
// (testSyncImage), which the retry must not run.
const heldImage = "ghcr.io/airlock-dev/airlock:frozen"

// heldRecord returns the record of claim c1's workspace, whose sync-back into projects/demo gave
// up keptAt, with the given action asked of it ("" none).
func heldRecord(keptAt time.Time, action string) *batchv1.Job {
	claim := newClaim("c1", airlockv1alpha1.ClaimFailed, t0)
	claim.Spec.TargetPath = "projects/demo"
	job := workspace.HeldRecord(claim, "workspace-content", sandboxpod.JobConfig(heldImage), keptAt, "sync-back Job c1-sync failed 5 times", 7)
	job.UID, job.ResourceVersion = "uid-record", "7"
	if action != "" {
		job.Annotations[airlockv1alpha1.AnnotationHeldAction] = action
	}
	return job
}

// retryJob is the held record's retry Job, ended with cond (none: running).
func retryJob(record *batchv1.Job, cond batchv1.JobConditionType) *batchv1.Job {
	job := workspace.RetryJob(record, "workspace-content", sandboxpod.JobConfig(testSyncImage))
	job.UID = "uid-retry"
	if cond != "" {
		job.Status.Conditions = []batchv1.JobCondition{{Type: cond, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded", Message: "no space left on device"}}
	}
	return job
}

// TestHeldWorkspaceNeverCollected (issue 39): the workspace of a claim whose sync-back gave up is
// not collected past its retention, when its runtime is gone, nor for a claim of another owner
// that waits: nothing is written.
func TestHeldWorkspaceNeverCollected(t *testing.T) {
	for name, setup := range map[string]func(f *fixture){
		"past the retention": func(*fixture) {},
		"its runtime gone":   func(f *fixture) { f.runtimes = nil },
		"a claim of another owner waits for it": func(f *fixture) {
			f.runtimes[0].UID = "uid-new-agent"
			f.claims = append(f.claims, waiting("c1", "uid-new-agent"))
		},
	} {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(t)
			record := heldRecord(t0.Add(-30*24*time.Hour), "")
			f.jobs = append(f.jobs, record)
			setup(f)
			c := f.newController(ctx)
			requeue, err := c.sync(ctx, cache.MetaObjectToName(record))
			if err != nil {
				t.Fatal(err)
			}
			checkRequeue(t, requeue, nil)
			checkActions(t, f, nil)
		})
	}
}

// TestHeldWorkspaceReleased: the annotation airlock.dev/held-action=release makes a held record
// an ordinary kept one, kept from now (then resumed, or collected past the retention).
func TestHeldWorkspaceReleased(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	record := heldRecord(t0.Add(-30*24*time.Hour), airlockv1alpha1.HeldActionRelease)
	f.jobs = append(f.jobs, record)
	c := f.newController(ctx)
	if _, err := c.sync(ctx, cache.MetaObjectToName(record)); err != nil {
		t.Fatal(err)
	}
	checkActions(t, f, []string{"update jobs " + record.Name})
	got := f.writtenJob()
	if workspace.IsHeld(got) || got.Annotations[airlockv1alpha1.AnnotationHeldAction] != "" || !ptr.Deref(got.Spec.Suspend, false) {
		t.Errorf("released record %v suspend %v, want kept: not held, no action, suspended", got.Annotations, got.Spec.Suspend)
	}
	if got.Annotations[workspace.AnnotationKeptAt] != t0.UTC().Format(time.RFC3339) || got.ResourceVersion != record.ResourceVersion {
		t.Errorf("kept-at %q rv %q, want now, conditional on %q", got.Annotations[workspace.AnnotationKeptAt], got.ResourceVersion, record.ResourceVersion)
	}
}

// TestHeldWorkspaceRetried: airlock.dev/held-action=retry runs the sync-back once more, as the
// record's child Job (a sync-back pod of the claim: no collection beside it), into the record's
// target keeping its versions, once no pod of the claim is left; its success releases the record
// and deletes the Job; its failure keeps the record held, saying why, and clears the action.
func TestHeldWorkspaceRetried(t *testing.T) {
	tests := map[string]struct {
		retry       *batchv1.JobConditionType // nil: no retry Job yet
		podLeft     bool
		syncBack    string // another claim's sync-back Job into this target
		syncEnded   bool   // and it has ended
		wantActions func(record string) []string
		check       func(t *testing.T, f *fixture, record *batchv1.Job)
	}{
		"asked, another claim's sync-back into an overlapping target running: waits its turn": {
			syncBack:    "projects/demo/sub",
			wantActions: func(string) []string { return nil },
		},
		"asked, another claim's sync-back into an overlapping target ended: the retry Job made": {
			syncBack: "projects", syncEnded: true,
			wantActions: func(r string) []string { return []string{"create jobs " + workspace.RetryJobName(r)} },
		},
		"asked, another claim's sync-back into another target running: the retry Job made": {
			syncBack:    "projects/other",
			wantActions: func(r string) []string { return []string{"create jobs " + workspace.RetryJobName(r)} },
		},
		"asked: the retry Job made": {
			wantActions: func(r string) []string { return []string{"create jobs " + workspace.RetryJobName(r)} },
			check: func(t *testing.T, f *fixture, record *batchv1.Job) {
				job := f.writtenJob()
				args := job.Spec.Template.Spec.Containers[0].Args
				if !metav1.IsControlledBy(job, record) || !slices.Contains(args, "--to=projects/demo") ||
					!slices.Contains(args, "--keep-versions=7") || !slices.Contains(args, "--from="+claimDir("c1")) ||
					slices.Contains(args, "--remove-source") || job.Spec.Template.Labels[airlockv1alpha1.LabelSyncOf] != "c1" {
					t.Errorf("retry Job %s args %v labels %v, want the record's child copying into projects/demo, 7 versions, a sync-back pod of c1",
						job.Name, args, job.Spec.Template.Labels)
				}
				// What the admission policy ties it to its record by: the record's image and PVC,
				// and labels naming the record, the claim's UID and shard.
				vols := job.Spec.Template.Spec.Volumes
				if img := job.Spec.Template.Spec.Containers[0].Image; img != heldImage || len(vols) != 1 || vols[0].PersistentVolumeClaim == nil ||
					vols[0].PersistentVolumeClaim.ClaimName != "workspace-content" {
					t.Errorf("retry Job %s runs %q on %+v, want the record's image %q and PVC", job.Name, img, vols, heldImage)
				}
				if l := job.Labels; l[airlockv1alpha1.LabelRetryOf] != record.Name || l[airlockv1alpha1.LabelClaimUID] != record.Labels[airlockv1alpha1.LabelClaimUID] ||
					l[airlockv1alpha1.LabelClaimUID] == "" || l[airlockv1alpha1.LabelClaimShard] != "1" {
					t.Errorf("retry Job %s labels %v, want retry-of %s, the record's claim UID and shard 1", job.Name, l, record.Name)
				}
			},
		},
		"asked, a pod of the claim still there: waits": {
			podLeft:     true,
			wantActions: func(string) []string { return nil },
		},
		"running: nothing": {
			retry:       ptr.To(batchv1.JobConditionType("")),
			wantActions: func(string) []string { return nil },
		},
		"succeeded: released, the Job deleted": {
			retry: ptr.To(batchv1.JobComplete),
			wantActions: func(r string) []string {
				return []string{"update jobs " + r, "delete jobs " + workspace.RetryJobName(r)}
			},
			check: func(t *testing.T, f *fixture, _ *batchv1.Job) {
				if got := updatedJob(f); workspace.IsHeld(got) || got.Annotations[airlockv1alpha1.AnnotationHeldAction] != "" {
					t.Errorf("record %v, want released", got.Annotations)
				}
			},
		},
		"failed: held, saying why, the action cleared, the Job deleted": {
			retry: ptr.To(batchv1.JobFailed),
			wantActions: func(r string) []string {
				return []string{"update jobs " + r, "delete jobs " + workspace.RetryJobName(r)}
			},
			check: func(t *testing.T, f *fixture, _ *batchv1.Job) {
				got := updatedJob(f)
				if !workspace.IsHeld(got) || !strings.Contains(got.Annotations[airlockv1alpha1.AnnotationHeld], "no space left on device") ||
					got.Annotations[airlockv1alpha1.AnnotationHeldAction] != "" {
					t.Errorf("record %v, want held with the retry's failure, no action", got.Annotations)
				}
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(t)
			record := heldRecord(t0.Add(-time.Hour), airlockv1alpha1.HeldActionRetry)
			f.jobs = append(f.jobs, record)
			if tc.retry != nil {
				f.jobs = append(f.jobs, retryJob(record, *tc.retry))
			}
			if tc.podLeft {
				f.pods = append(f.pods, claimPod(newClaim("c1", airlockv1alpha1.ClaimFailed, t0)))
			}
			if tc.syncBack != "" {
				other := newClaim("c2", airlockv1alpha1.ClaimReaping, t0)
				other.Spec.TargetPath = tc.syncBack
				f.claims = append(f.claims, other)
				f.jobs = append(f.jobs, syncJob(other, tc.syncEnded))
			}
			c := f.newController(ctx)
			if _, err := c.sync(ctx, cache.MetaObjectToName(record)); err != nil {
				t.Fatal(err)
			}
			checkActions(t, f, tc.wantActions(record.Name))
			if tc.check != nil {
				tc.check(t, f, record)
			}
		})
	}
}

// syncJob is the claim's sync-back Job, running or complete.
func syncJob(claim *airlockv1alpha1.SandboxClaim, complete bool) *batchv1.Job {
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{
		Name: workspace.SyncJobName(claim), Namespace: claim.Namespace, UID: "uid-sync-" + claim.UID,
		Labels:          map[string]string{airlockv1alpha1.LabelClaim: claim.Name},
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(claim, airlockv1alpha1.SchemeGroupVersion.WithKind("SandboxClaim"))},
	}}
	if complete {
		job.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}
	}
	return job
}

// TestSyncBackEndEnqueuesRetries: a claim's sync-back Job that ends, or goes, enqueues the held
// records whose retry a person asked for (one may wait for its turn), and no other record; a Job
// that is not a claim's does not.
func TestSyncBackEndEnqueuesRetries(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	asked := heldRecord(t0.Add(-time.Hour), airlockv1alpha1.HeldActionRetry)
	held := heldRecord(t0.Add(-time.Hour), "")
	held.Name = "other-record"
	claim := newClaim("c2", airlockv1alpha1.ClaimReaping, t0)
	claim.Spec.TargetPath = "projects/demo"
	f.jobs = append(f.jobs, asked, held)
	c := f.newController(ctx)
	c.enqueueRetries(cache.DeletedFinalStateUnknown{Obj: syncJob(claim, true)})
	if c.queue.Len() != 1 {
		t.Fatalf("queue length %d, want 1", c.queue.Len())
	}
	got, _ := c.queue.Get()
	if got != cache.MetaObjectToName(asked) {
		t.Errorf("enqueued %v, want %v", got, cache.MetaObjectToName(asked))
	}
	c.queue.Done(got) // so that adding it again would show in Len
	// A record's child, not a claim's Job:
	c.enqueueRetries(retryJob(asked, batchv1.JobComplete))
	if c.queue.Len() != 0 {
		t.Errorf("a retry's end enqueued %d records, want none from this handler", c.queue.Len())
	}
}

// updatedJob returns the last Job the clients updated.
func updatedJob(f *fixture) *batchv1.Job {
	f.t.Helper()
	var job *batchv1.Job
	for _, a := range f.log {
		if a.GetVerb() == "update" && a.GetResource().Resource == "jobs" {
			job = a.(core.UpdateAction).GetObject().(*batchv1.Job)
		}
	}
	if job == nil {
		f.t.Fatal("no Job was updated")
	}
	return job
}

// TestDeletedRuntimesWorkspacesRecorded (issue 39): a runtime being deleted (held by the
// operator's finalizer, as an operator that starts after the deletion lists it) has the
// workspace of each of its claims that may have written one recorded while the claim is still
// there, not resumable; the record is not collected while the claim lives. A claim that never
// had a pod, or of another runtime, gets none.
func TestDeletedRuntimesWorkspacesRecorded(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	now := metav1.NewTime(t0)
	f.runtimes[0].DeletionTimestamp = &now
	f.runtimes[0].Finalizers = []string{airlockv1alpha1.FinalizerWorkspaces}
	bound := newClaim("c1", airlockv1alpha1.ClaimBound, t0.Add(-time.Hour))
	queued := newClaim("c2", airlockv1alpha1.ClaimQueued, t0.Add(-time.Hour))
	other := newClaim("c3", airlockv1alpha1.ClaimBound, t0.Add(-time.Hour))
	other.Spec.RuntimeName = "someone-else"
	f.claims = append(f.claims, bound, queued, other)
	c := f.newController(ctx)
	c.enqueueRecordsOf(f.runtimes[0]) // its add event, when the operator starts
	if c.queue.Len() != 1 {
		t.Fatalf("%d keys enqueued, want the one of c1's workspace", c.queue.Len())
	}
	key, _ := c.queue.Get()
	if key.Name != workspace.RecordName(bound.Spec.WorkspaceDir) {
		t.Fatalf("enqueued %v, want c1's workspace's record", key)
	}
	if _, err := c.sync(ctx, key); err != nil {
		t.Fatal(err)
	}
	checkActions(t, f, []string{"create jobs " + key.Name})
	record := f.writtenJob()
	if record.Annotations[airlockv1alpha1.AnnotationKeptResumable] != airlockv1alpha1.AnnotationValueNotResumable || !workspace.RecordIsOurs(record) {
		t.Errorf("record %v, want the operator's, not resumable", record.Annotations)
	}

	// The record, once cached, is not collected while c1 lives (its deletion enqueues it).
	g := newFixture(t)
	g.runtimes[0].DeletionTimestamp = &now
	g.claims = append(g.claims, bound)
	g.jobs = append(g.jobs, record)
	c = g.newController(ctx)
	if _, err := c.sync(ctx, key); err != nil {
		t.Fatal(err)
	}
	checkActions(t, g, nil)
}
