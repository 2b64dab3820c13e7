package workspacegc

import (
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/controller/workers"
	"github.com/airlock-dev/airlock/pkg/workspace"
)

// TestSync: a kept workspace is looked at again when its retention passes (AddAfter, on the
// fake clock), collected past it or at once when its runtime (by UID) is gone, never while a
// live claim is on its directory (a fresh list), and a collection that completed is deleted.
func TestSync(t *testing.T) {
	dir := claimDir("c1")
	base := newClaim("c1", airlockv1alpha1.ClaimBinding, t0)
	liveClaim := func(phase airlockv1alpha1.ClaimPhase, uid string) func(f *fixture) {
		return func(f *fixture) {
			c := newClaim("c1", phase, t0.Add(-time.Minute))
			c.Spec.RuntimeUID = types.UID(uid)
			f.claims = append(f.claims, c)
		}
	}
	tests := map[string]struct {
		keptAt      time.Time
		retention   *time.Duration
		suspended   *bool
		cond        batchv1.JobConditionType
		setup       func(f *fixture)
		wantRequeue *time.Duration
		wantCollect string // the collected annotation; "" : not collected
		wantActions []string
	}{
		"within the default retention: looked at when it passes": {
			keptAt:      t0.Add(-time.Hour),
			wantRequeue: ptr.To(23 * time.Hour),
		},
		"within a runtime's own retention": {
			keptAt:      t0.Add(-30 * time.Second),
			retention:   ptr.To(time.Minute),
			wantRequeue: ptr.To(30 * time.Second),
		},
		"past the retention: collected": {
			keptAt:      t0.Add(-25 * time.Hour),
			wantCollect: workspace.CollectedRetentionPassed,
		},
		"retention 0: collected at once": {
			keptAt:      t0,
			retention:   ptr.To(time.Duration(0)),
			wantCollect: workspace.CollectedRetentionPassed,
		},
		"runtime gone: collected within the retention": {
			keptAt:      t0.Add(-time.Hour),
			setup:       func(f *fixture) { f.runtimes = nil },
			wantCollect: workspace.CollectedRuntimeGone,
		},
		"runtime created again (another UID): collected": {
			keptAt:      t0.Add(-time.Hour),
			setup:       func(f *fixture) { f.runtimes[0].UID = "uid-new-agent" },
			wantCollect: workspace.CollectedRuntimeGone,
		},
		"past the retention, a live claim of the runtime on it: kept": {
			keptAt: t0.Add(-25 * time.Hour),
			setup:  liveClaim(airlockv1alpha1.ClaimBound, "uid-rt-agent"),
		},
		"past the retention, a Queued claim of the runtime (it resumes): kept": {
			keptAt: t0.Add(-25 * time.Hour),
			setup:  liveClaim(airlockv1alpha1.ClaimQueued, "uid-rt-agent"),
		},
		"runtime created again, a Bound claim of the new one on it: kept": {
			keptAt: t0.Add(-time.Hour),
			setup: func(f *fixture) {
				f.runtimes[0].UID = "uid-new-agent"
				liveClaim(airlockv1alpha1.ClaimBound, "uid-new-agent")(f)
			},
		},
		"runtime created again, its claim waiting for the collection: collected": {
			keptAt: t0.Add(-time.Hour),
			setup: func(f *fixture) {
				f.runtimes[0].UID = "uid-new-agent"
				f.claims = append(f.claims, waiting("c1", "uid-new-agent"))
			},
			wantCollect: workspace.CollectedRuntimeGone,
		},
		"past the retention, a Refused claim on it: collected": {
			keptAt:      t0.Add(-25 * time.Hour),
			setup:       liveClaim(airlockv1alpha1.ClaimRefused, "uid-rt-agent"),
			wantCollect: workspace.CollectedRetentionPassed,
		},
		"collection running: nothing": {
			keptAt:    t0.Add(-25 * time.Hour),
			suspended: ptr.To(false),
		},
		"collection complete: the record deleted": {
			keptAt:      t0.Add(-25 * time.Hour),
			suspended:   ptr.To(false),
			cond:        batchv1.JobComplete,
			wantActions: []string{"delete jobs " + workspace.RecordName(dir)},
		},
		"collection failed a second ago: reported, tried again after its backoff (retry_test.go)": {
			keptAt:      t0.Add(-25 * time.Hour),
			suspended:   ptr.To(false),
			cond:        batchv1.JobFailed,
			wantRequeue: ptr.To(collectBackoffBase - time.Second),
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(t)
			if tc.retention != nil {
				f.runtimes[0].Spec.Sandbox.WorkspaceRetention = &metav1.Duration{Duration: *tc.retention}
			}
			record := keptRecord(base, "c1", "uid-rt-agent", tc.keptAt)
			if tc.suspended != nil {
				record.Spec.Suspend = tc.suspended
			}
			if tc.cond != "" {
				record.Status.Conditions = []batchv1.JobCondition{{Type: tc.cond, Status: corev1.ConditionTrue, Message: "the detail", LastTransitionTime: metav1.NewTime(t0.Add(-time.Second))}}
			}
			f.jobs = append(f.jobs, record)
			if tc.setup != nil {
				tc.setup(f)
			}
			c := f.newController(ctx)
			requeue, err := c.sync(ctx, cache.MetaObjectToName(record))
			if err != nil {
				t.Fatal(err)
			}
			checkRequeue(t, requeue, tc.wantRequeue)
			want := tc.wantActions
			if tc.wantCollect != "" {
				want = []string{"update jobs " + record.Name}
			}
			checkActions(t, f, want)
			if tc.wantCollect == "" {
				return
			}
			job := f.writtenJob()
			if ptr.Deref(job.Spec.Suspend, true) || job.Annotations[workspace.AnnotationCollected] != tc.wantCollect || job.ResourceVersion != record.ResourceVersion {
				t.Errorf("collection suspend %v collected %q rv %q, want unsuspended, %q, conditional on rv %q",
					job.Spec.Suspend, job.Annotations[workspace.AnnotationCollected], job.ResourceVersion, tc.wantCollect, record.ResourceVersion)
			}
		})
	}
}

// TestTimerOnFakeClock: a kept workspace is collected when its retention passes on the injected
// clock, through the queue's AddAfter; nothing looks at it before.
func TestTimerOnFakeClock(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	f.runtimes[0].Spec.Sandbox.WorkspaceRetention = &metav1.Duration{Duration: time.Minute}
	record := keptRecord(newClaim("c1", airlockv1alpha1.ClaimBinding, t0), "c1", "uid-rt-agent", t0)
	f.jobs = append(f.jobs, record)
	c := f.newController(ctx)
	key := cache.MetaObjectToName(record)
	c.queue.Add(key)
	if !workers.ProcessNext(ctx, c.queue, "record", c.sync) {
		t.Fatal("queue shut down")
	}
	checkActions(t, f, nil)
	if c.queue.Len() != 0 {
		t.Fatalf("queue length %d before the retention passed, want 0", c.queue.Len())
	}
	f.clock.Step(59 * time.Second)
	if c.queue.Len() != 0 {
		t.Fatalf("queue length %d a second before the retention passed, want 0", c.queue.Len())
	}
	f.clock.Step(time.Second)
	// The delaying queue hands the item over on its own goroutine once the clock has passed.
	got, _ := c.queue.Get()
	if got != key {
		t.Fatalf("got %v, want %v", got, key)
	}
	if _, err := c.sync(ctx, got); err != nil {
		t.Fatal(err)
	}
	c.queue.Done(got)
	checkActions(t, f, []string{"update jobs " + record.Name})
	c.queue.ShutDown()
}

// TestRecordEnqueuedByItsRuntime: a runtime deleted (or created again) enqueues its records.
func TestRecordEnqueuedByItsRuntime(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	mine := keptRecord(newClaim("c1", airlockv1alpha1.ClaimBinding, t0), "c1", "uid-rt-agent", t0)
	other := keptRecord(newClaim("c2", airlockv1alpha1.ClaimBinding, t0), "c2", "uid-rt-agent", t0)
	other.Labels[airlockv1alpha1.LabelRuntime] = "other"
	f.jobs = append(f.jobs, mine, other)
	c := f.newController(ctx)
	c.enqueueRecordsOf(cache.DeletedFinalStateUnknown{Obj: f.runtimes[0]})
	if c.queue.Len() != 1 {
		t.Fatalf("queue length %d, want 1", c.queue.Len())
	}
	if got, _ := c.queue.Get(); got != cache.MetaObjectToName(mine) {
		t.Errorf("enqueued %v, want %v", got, cache.MetaObjectToName(mine))
	}
}

// TestWaitingClaimEnqueuesItsRecord: a claim that waits for its workspace's collection (another
// owner's kept workspace: the claim controller says so on the claim) has the record looked at now;
// a claim that does not wait has not.
func TestWaitingClaimEnqueuesItsRecord(t *testing.T) {
	for name, tc := range map[string]struct {
		claim *airlockv1alpha1.SandboxClaim
		want  bool
	}{
		"waiting":     {claim: waiting("c1", "uid-new-agent"), want: true},
		"not waiting": {claim: newClaim("c1", airlockv1alpha1.ClaimBinding, t0)},
	} {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(t)
			record := keptRecord(newClaim("c1", airlockv1alpha1.ClaimBinding, t0), "c1", "uid-rt-agent", t0)
			f.jobs = append(f.jobs, record)
			c := f.newController(ctx)
			c.enqueueWaitingClaim(tc.claim)
			if got := c.queue.Len() == 1; got != tc.want {
				t.Fatalf("record enqueued: %v, want %v", got, tc.want)
			}
			if tc.want {
				if got, _ := c.queue.Get(); got != cache.MetaObjectToName(record) {
					t.Errorf("enqueued %v, want %v", got, cache.MetaObjectToName(record))
				}
			}
		})
	}
}

// TestOrphanedWorkspaceRecorded: a claim that had a pod, deleted by garbage collection with its
// runtime, gets a record of its workspace that no claim may resume (a runtime created again under
// the name inherits nothing); a claim that never had a pod, or whose runtime lives, gets none.
//
// So does a live claim that its runtime's deletion waits for (seen: its add or update, after the
// runtime's deletion was seen: created then, or Binding since): before, only the claims there
// when the runtime's deletion was seen were recorded, and the deletion waited for the others for
// ever (TestFaultSuiteAPIOnly, an acquire of the runtime as it was deleted). Not one of a runtime
// that is not being deleted, or that its runtime does not control (made by hand).
func TestOrphanedWorkspaceRecorded(t *testing.T) {
	const frozenSyncImage = "registry.local/airlock:frozen"
	tests := map[string]struct {
		phase       airlockv1alpha1.ClaimPhase
		runtimeGone bool
		recreated   bool
		seen        bool // the claim's add or update, not its deletion
		deleting    bool // the runtime is being deleted
		unowned     bool // the claim has no controller reference
		want        bool
	}{
		"Bound, runtime gone":                 {phase: airlockv1alpha1.ClaimBound, runtimeGone: true, want: true},
		"Reaping, runtime created again":      {phase: airlockv1alpha1.ClaimReaping, recreated: true, want: true},
		"Queued, runtime gone: no workspace":  {phase: airlockv1alpha1.ClaimQueued, runtimeGone: true},
		"Bound, runtime there: its reaping's": {phase: airlockv1alpha1.ClaimBound},
		"seen Bound, runtime being deleted":   {phase: airlockv1alpha1.ClaimBound, seen: true, deleting: true, want: true},
		"seen Binding, runtime being deleted": {phase: airlockv1alpha1.ClaimBinding, seen: true, deleting: true, want: true},
		"seen Queued, runtime being deleted":  {phase: airlockv1alpha1.ClaimQueued, seen: true, deleting: true},
		"seen Bound, runtime not deleted":     {phase: airlockv1alpha1.ClaimBound, seen: true},
		"seen Bound, not the runtime's":       {phase: airlockv1alpha1.ClaimBound, seen: true, deleting: true, unowned: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(t)
			if tc.runtimeGone {
				f.runtimes = nil
			}
			if tc.recreated {
				f.runtimes[0].UID = "uid-new-agent"
			}
			if tc.deleting {
				f.runtimes[0].DeletionTimestamp = ptr.To(metav1.NewTime(t0))
			}
			claim := newClaim("c1", tc.phase, t0.Add(-time.Hour))
			claim.Status.Frozen.SyncImage = frozenSyncImage
			if tc.unowned {
				claim.OwnerReferences = nil
			}
			if tc.seen {
				f.claims = append(f.claims, claim) // a live claim, in the cache
			}
			c := f.newController(ctx)
			if tc.seen {
				c.enqueueClaimOfDeletingRuntime(claim)
			} else {
				c.deleteClaim(klog.FromContext(ctx), cache.DeletedFinalStateUnknown{Obj: claim})
			}
			key := cache.ObjectName{Namespace: testNamespace, Name: workspace.RecordName(claim.Spec.WorkspaceDir)}
			if got := c.queue.Len() > 0; got != tc.want {
				t.Fatalf("record key enqueued: %v, want %v", got, tc.want)
			}
			if !tc.want {
				return
			}
			if _, err := c.sync(ctx, key); err != nil {
				t.Fatal(err)
			}
			checkActions(t, f, []string{"create jobs " + key.Name})
			job := f.writtenJob()
			if job.Annotations[airlockv1alpha1.AnnotationKeptResumable] != airlockv1alpha1.AnnotationValueNotResumable || !ptr.Deref(job.Spec.Suspend, false) {
				t.Errorf("record resumable %q suspend %v, want not resumable, suspended", job.Annotations[airlockv1alpha1.AnnotationKeptResumable], job.Spec.Suspend)
			}
			if workspace.ResumableBy(job, claim) {
				t.Error("the record of a garbage-collected claim is resumable")
			}
			// A live claim's record runs its frozen sync image (the policies tie it to the
			// claim); a deleted claim's, the operator's --sync-image (the records webhook ties
			// it to that flag: no object holds the deleted claim's record).
			wantImage := testSyncImage
			if tc.seen {
				wantImage = frozenSyncImage
			}
			if got := job.Spec.Template.Spec.Containers[0].Image; got != wantImage {
				t.Errorf("record image %q, want %q", got, wantImage)
			}
		})
	}
}

// TestNotCollectedWhileAPodIsThere: a pod of the claim that kept a workspace (one garbage
// collection is still deleting) keeps it from collection; its deletion enqueues the record.
func TestNotCollectedWhileAPodIsThere(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	f.runtimes = nil
	claim := newClaim("c1", airlockv1alpha1.ClaimBound, t0.Add(-time.Hour))
	record := keptRecord(claim, "c1", "uid-rt-agent", t0.Add(-time.Minute))
	pod := claimPod(claim)
	f.jobs = append(f.jobs, record)
	f.pods = append(f.pods, pod)
	c := f.newController(ctx)
	if _, err := c.sync(ctx, cache.MetaObjectToName(record)); err != nil {
		t.Fatal(err)
	}
	checkActions(t, f, nil)
	c.enqueueRecordsOfPod(pod)
	if c.queue.Len() != 1 {
		t.Errorf("queue length %d after the pod's deletion, want 1", c.queue.Len())
	}
}

// TestForgedRecordNotCollected: a Job that wears the record's label but is not of the shape the
// operator writes (another command, a directory the operator may not remove, a name that is not
// its directory's) is never collected (unsuspended).
func TestForgedRecordNotCollected(t *testing.T) {
	forgeries := map[string]func(*batchv1.Job){
		"other args": func(j *batchv1.Job) {
			j.Spec.Template.Spec.Containers[0].Args = []string{"sh", "-c", "rm -rf /content"}
		},
		"a command": func(j *batchv1.Job) { j.Spec.Template.Spec.Containers[0].Command = []string{"/bin/sh"} },
		"a mount role's directory": func(j *batchv1.Job) {
			j.Annotations[airlockv1alpha1.AnnotationKeptDir] = "team-a/repos/web"
			j.Spec.Template.Spec.Containers[0].Args = workspace.RecordArgs(testNamespace, "team-a/repos/web")
		},
		"a second container": func(j *batchv1.Job) {
			j.Spec.Template.Spec.Containers = append(j.Spec.Template.Spec.Containers, j.Spec.Template.Spec.Containers[0])
		},
	}
	for name, forge := range forgeries {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(t)
			f.runtimes = nil // its runtime gone: a record of ours would be collected at once
			record := keptRecord(newClaim("c1", airlockv1alpha1.ClaimBinding, t0), "c1", "uid-rt-agent", t0.Add(-48*time.Hour))
			forge(record)
			f.jobs = append(f.jobs, record)
			c := f.newController(ctx)
			if _, err := c.sync(ctx, cache.MetaObjectToName(record)); err != nil {
				t.Fatal(err)
			}
			checkActions(t, f, nil)
		})
	}
}

// TestRuntimeChanged: a runtime's deletion or retention change looks at its kept workspaces
// again; its status writes do not.
func TestRuntimeChanged(t *testing.T) {
	base := newRuntime("agent")
	status := base.DeepCopy()
	status.Status.Claims.Bound = 3
	deleting := base.DeepCopy()
	deleting.DeletionTimestamp = ptr.To(metav1.NewTime(t0))
	shorter := base.DeepCopy()
	shorter.Spec.Sandbox.WorkspaceRetention = &metav1.Duration{Duration: time.Minute}
	defaulted := base.DeepCopy()
	defaulted.Spec.Sandbox.WorkspaceRetention = &metav1.Duration{Duration: airlockv1alpha1.DefaultWorkspaceRetention}
	for name, tc := range map[string]struct {
		cur  *airlockv1alpha1.AgentRuntime
		want bool
	}{
		"a status write":          {cur: status},
		"its deletion began":      {cur: deleting, want: true},
		"its retention changed":   {cur: shorter, want: true},
		"the default spelled out": {cur: defaulted},
	} {
		if got := runtimeChanged(base, tc.cur); got != tc.want {
			t.Errorf("%s: %v, want %v", name, got, tc.want)
		}
	}
}

// TestNotCollectedWhileItsSyncBackRuns: a record is not collected while a sync-back pod of the
// claim that kept it may still copy the workspace (its runtime deleted during the sync-back:
// garbage collection deleted the claim and the Job, and the Job's pod still runs; the fault
// suite saw the collection's pod start beside it). Those pods are in no cache: they are read from
// the API server, and the record is looked at again later. A pod that ended does not hold it.
func TestNotCollectedWhileItsSyncBackRuns(t *testing.T) {
	for name, tc := range map[string]struct {
		phase   corev1.PodPhase
		collect bool
	}{
		"running":   {phase: corev1.PodRunning},
		"pending":   {phase: corev1.PodPending},
		"succeeded": {phase: corev1.PodSucceeded, collect: true},
		"failed":    {phase: corev1.PodFailed, collect: true},
	} {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(t)
			f.runtimes = nil // gone: collected at once, but for the pod
			claim := newClaim("c1", airlockv1alpha1.ClaimBound, t0.Add(-time.Hour))
			record := keptRecord(claim, "c1", "uid-rt-agent", t0.Add(-time.Minute))
			f.jobs = append(f.jobs, record)
			c := f.newController(ctx)
			syncPod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "c1-sync-abcde", Namespace: testNamespace, Labels: map[string]string{airlockv1alpha1.LabelSyncOf: "c1"},
					DeletionTimestamp: ptr.To(metav1.NewTime(t0))},
				Status: corev1.PodStatus{Phase: tc.phase},
			}
			if err := f.kubeClient.Tracker().Add(syncPod); err != nil {
				t.Fatal(err)
			}
			requeue, err := c.sync(ctx, cache.MetaObjectToName(record))
			if err != nil {
				t.Fatal(err)
			}
			if !tc.collect {
				checkActions(t, f, nil)
				if requeue == nil || *requeue != syncPodRecheck {
					t.Errorf("looked at again after %v, want %v", requeue, syncPodRecheck)
				}
				return
			}
			checkActions(t, f, []string{"update jobs " + record.Name})
		})
	}
}
