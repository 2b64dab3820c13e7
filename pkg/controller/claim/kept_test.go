package claim

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	core "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/claimtoken"
)

// keptRecord returns the record of claim's workspace, kept at keptAt by the claim named keptBy
// of the runtime with that UID.
func keptRecord(claim *airlockv1alpha1.SandboxClaim, keptBy, runtimeUID string, keptAt time.Time) *batchv1.Job {
	kept := claim.DeepCopy()
	kept.Name, kept.Spec.RuntimeUID = keptBy, types.UID(runtimeUID)
	job := buildKeptJob(kept, "workspace-content", testSyncImage, keptAt)
	job.UID, job.ResourceVersion = "uid-record", "7"
	job.CreationTimestamp = metav1.NewTime(keptAt)
	return job
}

// TestResumeKeptWorkspace: a new claim of the same runtime (UID), session and handle takes the
// record of its kept workspace before its pod is made (a delete conditional on the record's UID
// and resourceVersion), its pod carries the labels that say so, and once Bound its status says
// which workspace it resumed.
func TestResumeKeptWorkspace(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t).withDefaults()
	claim := binding("c1", t0.Add(-time.Second))
	keptAt := t0.Add(-time.Hour)
	record := keptRecord(claim, "c1", "uid-rt-agent", keptAt)
	f.claims = append(f.claims, claim)
	f.withChildren(claim)
	f.jobs = append(f.jobs, record)
	c := f.newController(ctx)
	if _, err := c.sync(ctx, keyOf(claim)); err != nil {
		t.Fatal(err)
	}
	checkActions(t, f, []string{"create secrets " + claimtoken.ClaimSecretName("c1", testToken), "delete jobs " + record.Name, "create pods c1"})
	for _, a := range f.log {
		if a.GetVerb() == "delete" && a.GetResource().Resource == "jobs" {
			pre := a.(interface{ GetDeleteOptions() metav1.DeleteOptions }).GetDeleteOptions().Preconditions
			if pre == nil || ptr.Deref(pre.UID, "") != record.UID || ptr.Deref(pre.ResourceVersion, "") != record.ResourceVersion {
				t.Errorf("record deleted with preconditions %+v, want its UID and resourceVersion", pre)
			}
		}
	}
	pod := f.written("pods", "").(*corev1.Pod)
	want := map[string]string{LabelResumedKeptAt: strconv.FormatInt(keptAt.Unix(), 10), LabelResumedKeptBy: "c1"}
	if got := map[string]string{LabelResumedKeptAt: pod.Labels[LabelResumedKeptAt], LabelResumedKeptBy: pod.Labels[LabelResumedKeptBy]}; !cmp.Equal(want, got) {
		t.Errorf("pod labels %v, want %v", got, want)
	}
	if events := f.events(); len(events) != 1 || !strings.HasPrefix(events[0], "Normal "+ReasonWorkspaceResumed) {
		t.Errorf("events %v, want one %s", events, ReasonWorkspaceResumed)
	}

	// Its pod ready: Bound, saying which workspace it resumed.
	f = newFixture(t).withDefaults()
	f.claims = append(f.claims, claim)
	f.withChildren(claim)
	f.pods = append(f.pods, newPod(claim, func(p *corev1.Pod) {
		markReady(p)
		for k, v := range pod.Labels {
			if k == LabelResumedKeptAt || k == LabelResumedKeptBy {
				p.Labels[k] = v
			}
		}
	}))
	c = f.newController(ctx)
	if _, err := c.sync(ctx, keyOf(claim)); err != nil {
		t.Fatal(err)
	}
	got := f.writtenClaim()
	wantResumed := &airlockv1alpha1.ResumedWorkspace{KeptAt: metav1.NewTime(time.Unix(keptAt.Unix(), 0).UTC()), KeptBy: "c1"}
	if got.Status.Phase != airlockv1alpha1.ClaimBound || !cmp.Equal(wantResumed, got.Status.ResumedWorkspace) {
		t.Errorf("phase %s resumedWorkspace %+v, want Bound %+v", got.Status.Phase, got.Status.ResumedWorkspace, wantResumed)
	}
}

// TestNewClaimWithoutRecordResumesNothing: with no record of its workspace a claim's pod carries
// no resume labels, and its Bound status says nothing was resumed.
func TestNewClaimWithoutRecordResumesNothing(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t).withDefaults()
	claim := binding("c1", t0.Add(-time.Second))
	f.claims = append(f.claims, claim)
	f.withChildren(claim)
	c := f.newController(ctx)
	if _, err := c.sync(ctx, keyOf(claim)); err != nil {
		t.Fatal(err)
	}
	checkActions(t, f, []string{"create secrets " + claimtoken.ClaimSecretName("c1", testToken), "create pods c1"})
	if pod := f.written("pods", "").(*corev1.Pod); pod.Labels[LabelResumedKeptAt] != "" {
		t.Errorf("pod labels %v, want no %s", pod.Labels, LabelResumedKeptAt)
	}
}

// TestKeptWorkspaceNotResumedByAnotherOwner: a record of another runtime UID (a runtime deleted
// and created again under its name), a warm member's, or one being collected, is never resumed:
// the claim gets no pod, says why (Ready False WaitingForWorkspaceCollection) and, for a record
// still kept, asks for its collection now.
func TestKeptWorkspaceNotResumedByAnotherOwner(t *testing.T) {
	tests := map[string]struct {
		record      func(*airlockv1alpha1.SandboxClaim) *batchv1.Job
		wantCollect bool
	}{
		"another runtime UID": {
			record: func(c *airlockv1alpha1.SandboxClaim) *batchv1.Job {
				return keptRecord(c, "c1", "uid-old-agent", t0.Add(-time.Hour))
			},
			wantCollect: true,
		},
		"a record without a runtime UID": {
			record: func(c *airlockv1alpha1.SandboxClaim) *batchv1.Job {
				j := keptRecord(c, "c1", "uid-rt-agent", t0.Add(-time.Hour))
				delete(j.Annotations, AnnotationKeptRuntimeUID)
				return j
			},
			wantCollect: true,
		},
		"not resumable": {
			record: func(c *airlockv1alpha1.SandboxClaim) *batchv1.Job {
				j := keptRecord(c, "c1", "uid-rt-agent", t0.Add(-time.Hour))
				j.Annotations[AnnotationKeptResumable] = annotationValueNotResumable
				return j
			},
			wantCollect: true,
		},
		"being collected": {
			record: func(c *airlockv1alpha1.SandboxClaim) *batchv1.Job {
				j := keptRecord(c, "c1", "uid-rt-agent", t0.Add(-48*time.Hour))
				j.Spec.Suspend = ptr.To(false)
				return j
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(t).withDefaults()
			claim := binding("c1", t0.Add(-time.Second))
			record := tc.record(claim)
			f.claims = append(f.claims, claim)
			f.withChildren(claim)
			f.jobs = append(f.jobs, record)
			c := f.newController(ctx)
			requeue, err := c.sync(ctx, keyOf(claim))
			if err != nil {
				t.Fatal(err)
			}
			if requeue == nil || *requeue <= 0 {
				t.Errorf("requeue %v, want the startupTimeout's", requeue)
			}
			checkActions(t, f, []string{"create secrets " + claimtoken.ClaimSecretName("c1", testToken), "update sandboxclaims/status c1"})
			cond := findCondition(f.writtenClaim(), ConditionReady)
			if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != ReasonWaitingForCollection || !strings.Contains(cond.Message, record.Name) {
				t.Errorf("Ready %+v, want False %s naming %s", cond, ReasonWaitingForCollection, record.Name)
			}
			if got := c.keptQueue.Len() > 0; got != tc.wantCollect {
				t.Errorf("record enqueued for collection: %v, want %v", got, tc.wantCollect)
			}
		})
	}
}

// TestSyncKept: a kept workspace is looked at again when its retention passes (AddAfter, on the
// fake clock), collected past it or at once when its runtime (by UID) is gone, never while a
// live claim is on its directory (a fresh list), and a collection that completed is deleted.
func TestSyncKept(t *testing.T) {
	dir := claimDir("c1")
	base := binding("c1", t0)
	liveClaim := func(phase airlockv1alpha1.ClaimPhase, uid string) func(f *fixture) {
		return func(f *fixture) {
			c := newClaim("c1", "s-c1", phase, t0.Add(-time.Minute))
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
			wantCollect: CollectedRetentionPassed,
		},
		"retention 0: collected at once": {
			keptAt:      t0,
			retention:   ptr.To(time.Duration(0)),
			wantCollect: CollectedRetentionPassed,
		},
		"runtime gone: collected within the retention": {
			keptAt:      t0.Add(-time.Hour),
			setup:       func(f *fixture) { f.runtimes = nil },
			wantCollect: CollectedRuntimeGone,
		},
		"runtime created again (another UID): collected": {
			keptAt:      t0.Add(-time.Hour),
			setup:       func(f *fixture) { f.runtimes[0].UID = "uid-new-agent" },
			wantCollect: CollectedRuntimeGone,
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
				c := binding("c1", t0)
				c.Spec.RuntimeUID = "uid-new-agent"
				setCondition(&c.Status, ConditionReady, metav1.ConditionFalse, ReasonWaitingForCollection, "waiting", t0)
				f.claims = append(f.claims, c)
			},
			wantCollect: CollectedRuntimeGone,
		},
		"past the retention, a Refused claim on it: collected": {
			keptAt:      t0.Add(-25 * time.Hour),
			setup:       liveClaim(airlockv1alpha1.ClaimRefused, "uid-rt-agent"),
			wantCollect: CollectedRetentionPassed,
		},
		"collection running: nothing": {
			keptAt:    t0.Add(-25 * time.Hour),
			suspended: ptr.To(false),
		},
		"collection complete: the record deleted": {
			keptAt:      t0.Add(-25 * time.Hour),
			suspended:   ptr.To(false),
			cond:        batchv1.JobComplete,
			wantActions: []string{"delete jobs " + keptJobName(dir)},
		},
		"collection failed: reported, kept": {
			keptAt:    t0.Add(-25 * time.Hour),
			suspended: ptr.To(false),
			cond:      batchv1.JobFailed,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(t).withDefaults()
			if tc.retention != nil {
				f.runtimes[0].Spec.Sandbox.WorkspaceRetention = &metav1.Duration{Duration: *tc.retention}
			}
			record := keptRecord(base, "c1", "uid-rt-agent", tc.keptAt)
			if tc.suspended != nil {
				record.Spec.Suspend = tc.suspended
			}
			if tc.cond != "" {
				record.Status.Conditions = []batchv1.JobCondition{{Type: tc.cond, Status: corev1.ConditionTrue, Message: "the detail"}}
			}
			f.jobs = append(f.jobs, record)
			if tc.setup != nil {
				tc.setup(f)
			}
			c := f.newController(ctx)
			requeue, err := c.syncKept(ctx, cache.MetaObjectToName(record))
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
			job := f.written("jobs", "").(*batchv1.Job)
			if ptr.Deref(job.Spec.Suspend, true) || job.Annotations[AnnotationCollected] != tc.wantCollect || job.ResourceVersion != record.ResourceVersion {
				t.Errorf("collection suspend %v collected %q rv %q, want unsuspended, %q, conditional on rv %q",
					job.Spec.Suspend, job.Annotations[AnnotationCollected], job.ResourceVersion, tc.wantCollect, record.ResourceVersion)
			}
		})
	}
}

// TestKeptTimerOnFakeClock: a kept workspace is collected when its retention passes on the
// injected clock, through the keep queue's AddAfter; nothing looks at it before.
func TestKeptTimerOnFakeClock(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t).withDefaults()
	f.runtimes[0].Spec.Sandbox.WorkspaceRetention = &metav1.Duration{Duration: time.Minute}
	record := keptRecord(binding("c1", t0), "c1", "uid-rt-agent", t0)
	f.jobs = append(f.jobs, record)
	c := f.newController(ctx)
	key := cache.MetaObjectToName(record)
	c.keptQueue.Add(key)
	if !c.processNextKept(ctx) {
		t.Fatal("queue shut down")
	}
	checkActions(t, f, nil)
	if c.keptQueue.Len() != 0 {
		t.Fatalf("queue length %d before the retention passed, want 0", c.keptQueue.Len())
	}
	f.clock.Step(59 * time.Second)
	if c.keptQueue.Len() != 0 {
		t.Fatalf("queue length %d a second before the retention passed, want 0", c.keptQueue.Len())
	}
	f.clock.Step(time.Second)
	// The delaying queue hands the item over on its own goroutine once the clock has passed.
	got, _ := c.keptQueue.Get()
	if got != key {
		t.Fatalf("got %v, want %v", got, key)
	}
	if _, err := c.syncKept(ctx, got); err != nil {
		t.Fatal(err)
	}
	c.keptQueue.Done(got)
	checkActions(t, f, []string{"update jobs " + record.Name})
	c.keptQueue.ShutDown()
}

// TestKeepWorkspaceAgain: a workspace kept again while an older record of it is still there (no
// claim took it) refreshes that record; one being collected is not overwritten (retried).
func TestKeepWorkspaceAgain(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t).withDefaults()
	claim := reapingClaim("c1", t0.Add(-2*time.Hour), "")
	f.claims = append(f.claims, claim)
	f.withChildren(claim)
	f.jobs = append(f.jobs, keptRecord(claim, "c1", "uid-rt-agent", t0.Add(-3*time.Hour)))
	c := f.newController(ctx)
	if _, err := syncClaim(ctx, c, keyOf(claim)); err != nil {
		t.Fatal(err)
	}
	checkActions(t, f, []string{"create jobs " + keptJobName(claim.Spec.WorkspaceDir), "update jobs " + keptJobName(claim.Spec.WorkspaceDir), "delete sandboxclaims c1"})
	if got := f.written("jobs", "").(*batchv1.Job).Annotations[AnnotationKeptAt]; got != t0.UTC().Format(time.RFC3339) {
		t.Errorf("kept-at %q, want %q", got, t0.UTC().Format(time.RFC3339))
	}

	f = newFixture(t).withDefaults()
	f.claims = append(f.claims, claim)
	f.withChildren(claim)
	collecting := keptRecord(claim, "c1", "uid-rt-agent", t0.Add(-30*time.Hour))
	collecting.Spec.Suspend = ptr.To(false)
	f.jobs = append(f.jobs, collecting)
	c = f.newController(ctx)
	if _, err := syncClaim(ctx, c, keyOf(claim)); err == nil {
		t.Fatal("kept over a record being collected")
	}
	checkActions(t, f, []string{"create jobs " + keptJobName(claim.Spec.WorkspaceDir)})
}

// TestKeptRecordEnqueuedByItsRuntime: a runtime deleted (or created again) enqueues its records.
func TestKeptRecordEnqueuedByItsRuntime(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t).withDefaults()
	mine := keptRecord(binding("c1", t0), "c1", "uid-rt-agent", t0)
	other := keptRecord(binding("c2", t0), "c2", "uid-rt-agent", t0)
	other.Labels[airlockv1alpha1.LabelRuntime] = "other"
	f.jobs = append(f.jobs, mine, other)
	c := f.newController(ctx)
	c.enqueueKeptOf(cache.DeletedFinalStateUnknown{Obj: f.runtimes[0]})
	if c.keptQueue.Len() != 1 {
		t.Fatalf("queue length %d, want 1", c.keptQueue.Len())
	}
	if got, _ := c.keptQueue.Get(); got != cache.MetaObjectToName(mine) {
		t.Errorf("enqueued %v, want %v", got, cache.MetaObjectToName(mine))
	}
}

// TestOrphanedWorkspaceRecorded: a claim that had a pod, deleted by garbage collection with its
// runtime, gets a record of its workspace that no claim may resume (a runtime created again under
// the name inherits nothing); a claim that never had a pod, or whose runtime lives, gets none.
func TestOrphanedWorkspaceRecorded(t *testing.T) {
	tests := map[string]struct {
		phase       airlockv1alpha1.ClaimPhase
		runtimeGone bool
		recreated   bool
		want        bool
	}{
		"Bound, runtime gone":                 {phase: airlockv1alpha1.ClaimBound, runtimeGone: true, want: true},
		"Reaping, runtime created again":      {phase: airlockv1alpha1.ClaimReaping, recreated: true, want: true},
		"Queued, runtime gone: no workspace":  {phase: airlockv1alpha1.ClaimQueued, runtimeGone: true},
		"Bound, runtime there: its reaping's": {phase: airlockv1alpha1.ClaimBound},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(t).withDefaults()
			if tc.runtimeGone {
				f.runtimes = nil
			}
			if tc.recreated {
				f.runtimes[0].UID = "uid-new-agent"
			}
			claim := bound("c1", t0.Add(-time.Hour))
			claim.Status.Phase = tc.phase
			c := f.newController(ctx)
			c.deleteClaim(klog.FromContext(ctx), cache.DeletedFinalStateUnknown{Obj: claim})
			key := cache.ObjectName{Namespace: testNamespace, Name: keptJobName(claim.Spec.WorkspaceDir)}
			if got := c.keptQueue.Len() > 0; got != tc.want {
				t.Fatalf("record key enqueued: %v, want %v", got, tc.want)
			}
			if !tc.want {
				return
			}
			if _, err := c.syncKept(ctx, key); err != nil {
				t.Fatal(err)
			}
			checkActions(t, f, []string{"create jobs " + key.Name})
			job := f.createdJob()
			if job.Annotations[AnnotationKeptResumable] != annotationValueNotResumable || !ptr.Deref(job.Spec.Suspend, false) {
				t.Errorf("record resumable %q suspend %v, want not resumable, suspended", job.Annotations[AnnotationKeptResumable], job.Spec.Suspend)
			}
			if resumableBy(job, claim) {
				t.Error("the record of a garbage-collected claim is resumable")
			}
		})
	}
}

// TestKeptNotCollectedWhileAPodIsThere: a pod of the claim that kept a workspace (one garbage
// collection is still deleting) keeps it from collection; its deletion enqueues the record.
func TestKeptNotCollectedWhileAPodIsThere(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t).withDefaults()
	f.runtimes = nil
	claim := bound("c1", t0.Add(-time.Hour))
	record := keptRecord(claim, "c1", "uid-rt-agent", t0.Add(-time.Minute))
	pod := newPod(claim, markReady)
	f.jobs = append(f.jobs, record)
	f.pods = append(f.pods, pod)
	c := f.newController(ctx)
	if _, err := c.syncKept(ctx, cache.MetaObjectToName(record)); err != nil {
		t.Fatal(err)
	}
	checkActions(t, f, nil)
	c.enqueueKeptOfPod(pod)
	if c.keptQueue.Len() != 1 {
		t.Errorf("queue length %d after the pod's deletion, want 1", c.keptQueue.Len())
	}
}

// TestResumeSurvivesAFailedPodCreate: a claim that took its record and whose pod's create then
// failed makes its pod again with the resume labels (the record is gone by then).
func TestResumeSurvivesAFailedPodCreate(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t).withDefaults()
	claim := binding("c1", t0.Add(-time.Second))
	record := keptRecord(claim, "c1", "uid-rt-agent", t0.Add(-time.Hour))
	f.claims = append(f.claims, claim)
	f.withChildren(claim)
	f.jobs = append(f.jobs, record)
	c := f.newController(ctx)
	failed := false
	f.kubeClient.PrependReactor("create", "pods", func(core.Action) (bool, runtime.Object, error) {
		if !failed {
			failed = true
			return true, nil, errors.New("injected create failure")
		}
		return false, nil, nil
	})
	if _, err := c.sync(ctx, keyOf(claim)); err == nil {
		t.Fatal("sync succeeded over a failed pod create")
	}
	if err := f.kubeClient.Tracker().Delete(batchv1.SchemeGroupVersion.WithResource("jobs"), testNamespace, record.Name); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	if err := f.jobInformer.GetIndexer().Delete(record); err != nil {
		t.Fatal(err)
	}
	if _, err := c.sync(ctx, keyOf(claim)); err != nil {
		t.Fatal(err)
	}
	pod := f.written("pods", "").(*corev1.Pod)
	if pod.Labels[LabelResumedKeptBy] != "c1" || pod.Labels[LabelResumedKeptAt] == "" {
		t.Errorf("pod labels %v, want the resume labels", pod.Labels)
	}
}

// TestForgedRecordIgnored: a Job that wears the record's label but is not of the shape the
// operator writes (another command, a directory the operator may not remove, a name that is not
// its directory's) is never collected (unsuspended), taken, or waited for.
func TestForgedRecordIgnored(t *testing.T) {
	forgeries := map[string]func(*batchv1.Job){
		"other args": func(j *batchv1.Job) {
			j.Spec.Template.Spec.Containers[0].Args = []string{"sh", "-c", "rm -rf /content"}
		},
		"a command": func(j *batchv1.Job) { j.Spec.Template.Spec.Containers[0].Command = []string{"/bin/sh"} },
		"a mount role's directory": func(j *batchv1.Job) {
			j.Annotations[AnnotationKeptDir] = "team-a/repos/web"
			j.Spec.Template.Spec.Containers[0].Args = keptJobArgs(testNamespace, "team-a/repos/web")
		},
		"a second container": func(j *batchv1.Job) {
			j.Spec.Template.Spec.Containers = append(j.Spec.Template.Spec.Containers, j.Spec.Template.Spec.Containers[0])
		},
	}
	for name, forge := range forgeries {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(t).withDefaults()
			f.runtimes = nil // its runtime gone: a record of ours would be collected at once
			claim := binding("c1", t0.Add(-time.Second))
			record := keptRecord(claim, "c1", "uid-rt-agent", t0.Add(-48*time.Hour))
			forge(record)
			f.jobs = append(f.jobs, record)
			c := f.newController(ctx)
			if _, err := c.syncKept(ctx, cache.MetaObjectToName(record)); err != nil {
				t.Fatal(err)
			}
			checkActions(t, f, nil)
			if _, err := c.takeKeptWorkspace(ctx, claim); err != nil {
				t.Errorf("take over a forged record: %v, want it ignored", err)
			}
			checkActions(t, f, nil)
		})
	}
}

// TestKeptRuntimeChanged: a runtime's deletion or retention change looks at its kept workspaces
// again; its status writes do not.
func TestKeptRuntimeChanged(t *testing.T) {
	base := newRuntime("agent", 5, 3)
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
		if got := keptRuntimeChanged(base, tc.cur); got != tc.want {
			t.Errorf("%s: %v, want %v", name, got, tc.want)
		}
	}
}

// TestKeptNotCollectedWhileItsSyncBackRuns: a record is not collected while a sync-back pod of
// the claim that kept it may still copy the workspace (its runtime deleted during the sync-back:
// garbage collection deleted the claim and the Job, and the Job's pod still runs; the fault
// suite saw the collection's pod start beside it). Those pods are in no cache: they are read from
// the API server, and the record is looked at again later. A pod that ended does not hold it.
func TestKeptNotCollectedWhileItsSyncBackRuns(t *testing.T) {
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
			f := newFixture(t).withDefaults()
			f.runtimes = nil // gone: collected at once, but for the pod
			claim := bound("c1", t0.Add(-time.Hour))
			record := keptRecord(claim, "c1", "uid-rt-agent", t0.Add(-time.Minute))
			f.jobs = append(f.jobs, record)
			c := f.newController(ctx)
			syncPod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "c1-sync-abcde", Namespace: testNamespace, Labels: map[string]string{LabelSyncOf: "c1"},
					DeletionTimestamp: ptr.To(metav1.NewTime(t0))},
				Status: corev1.PodStatus{Phase: tc.phase},
			}
			if err := f.kubeClient.Tracker().Add(syncPod); err != nil {
				t.Fatal(err)
			}
			requeue, err := c.syncKept(ctx, cache.MetaObjectToName(record))
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
