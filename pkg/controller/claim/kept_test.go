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
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/claimtoken"
	"github.com/airlock-dev/airlock/pkg/workspace"
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
	want := map[string]string{workspace.LabelResumedKeptAt: strconv.FormatInt(keptAt.Unix(), 10), workspace.LabelResumedKeptBy: "c1"}
	if got := map[string]string{workspace.LabelResumedKeptAt: pod.Labels[workspace.LabelResumedKeptAt], workspace.LabelResumedKeptBy: pod.Labels[workspace.LabelResumedKeptBy]}; !cmp.Equal(want, got) {
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
			if k == workspace.LabelResumedKeptAt || k == workspace.LabelResumedKeptBy {
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
	if pod := f.written("pods", "").(*corev1.Pod); pod.Labels[workspace.LabelResumedKeptAt] != "" {
		t.Errorf("pod labels %v, want no %s", pod.Labels, workspace.LabelResumedKeptAt)
	}
}

// TestKeptWorkspaceNotResumedByAnotherOwner: a record of another runtime UID (a runtime deleted
// and created again under its name), a warm member's, or one being collected, is never resumed:
// the claim gets no pod, says why (Ready False WaitingForWorkspaceCollection) and, for a record
// still kept, asks for its collection now (by saying it waits: workspacegc collects it).
func TestKeptWorkspaceNotResumedByAnotherOwner(t *testing.T) {
	tests := map[string]struct {
		record func(*airlockv1alpha1.SandboxClaim) *batchv1.Job
	}{
		"another runtime UID": {
			record: func(c *airlockv1alpha1.SandboxClaim) *batchv1.Job {
				return keptRecord(c, "c1", "uid-old-agent", t0.Add(-time.Hour))
			},
		},
		"a record without a runtime UID": {
			record: func(c *airlockv1alpha1.SandboxClaim) *batchv1.Job {
				j := keptRecord(c, "c1", "uid-rt-agent", t0.Add(-time.Hour))
				delete(j.Annotations, airlockv1alpha1.AnnotationKeptRuntimeUID)
				return j
			},
		},
		"not resumable": {
			record: func(c *airlockv1alpha1.SandboxClaim) *batchv1.Job {
				j := keptRecord(c, "c1", "uid-rt-agent", t0.Add(-time.Hour))
				j.Annotations[airlockv1alpha1.AnnotationKeptResumable] = airlockv1alpha1.AnnotationValueNotResumable
				return j
			},
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
			// The claim says it waits, which is what asks workspacegc for the collection
			// (its TestWaitingClaimEnqueuesItsRecord).
			if got := workspace.WaitingForCollection(f.writtenClaim()); !got {
				t.Errorf("claim waits for the collection: %v, want true", got)
			}
		})
	}
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
	checkActions(t, f, []string{"create jobs " + workspace.RecordName(claim.Spec.WorkspaceDir), "update jobs " + workspace.RecordName(claim.Spec.WorkspaceDir), "delete sandboxclaims c1"})
	if got := f.written("jobs", "").(*batchv1.Job).Annotations[workspace.AnnotationKeptAt]; got != t0.UTC().Format(time.RFC3339) {
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
	checkActions(t, f, []string{"create jobs " + workspace.RecordName(claim.Spec.WorkspaceDir)})
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
	if pod.Labels[workspace.LabelResumedKeptBy] != "c1" || pod.Labels[workspace.LabelResumedKeptAt] == "" {
		t.Errorf("pod labels %v, want the resume labels", pod.Labels)
	}
}

// TestForgedRecordIgnored: a Job that wears the record's label but is not of the shape the
// operator writes (another command, a directory the operator may not remove, a name that is not
// its directory's) is never taken, or waited for (nor collected: workspacegc's
// TestForgedRecordNotCollected).
func TestForgedRecordIgnored(t *testing.T) {
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
			f := newFixture(t).withDefaults()
			f.runtimes = nil // its runtime gone: a record of ours would be collected at once
			claim := binding("c1", t0.Add(-time.Second))
			record := keptRecord(claim, "c1", "uid-rt-agent", t0.Add(-48*time.Hour))
			forge(record)
			f.jobs = append(f.jobs, record)
			c := f.newController(ctx)
			if _, err := c.takeKeptWorkspace(ctx, claim); err != nil {
				t.Errorf("take over a forged record: %v, want it ignored", err)
			}
			checkActions(t, f, nil)
		})
	}
}

// TestKeptHandlerWakesWaitingClaims: a record whose collection failed, or that is deleted (its
// collection complete), enqueues the claims of its directory (one may wait for it); a record
// that changes otherwise does not.
func TestKeptHandlerWakesWaitingClaims(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t).withDefaults()
	claim := binding("c1", t0.Add(-time.Second))
	other := binding("c2", t0.Add(-time.Second))
	f.claims = append(f.claims, claim, other)
	record := keptRecord(claim, "c1", "uid-old-agent", t0.Add(-time.Hour))
	c := f.newController(ctx)
	handler := c.keptHandler()

	running := record.DeepCopy()
	running.ResourceVersion, running.Spec.Suspend = "8", ptr.To(false)
	handler.OnUpdate(record, running)
	if c.queue.Len() != 0 {
		t.Fatalf("queue length %d after a collection began, want 0", c.queue.Len())
	}
	failed := running.DeepCopy()
	failed.ResourceVersion = "9"
	failed.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobFailed, Status: corev1.ConditionTrue}}
	handler.OnUpdate(running, failed)
	if c.queue.Len() != 1 {
		t.Fatalf("queue length %d after the collection failed, want 1", c.queue.Len())
	}
	if got, _ := c.queue.Get(); got != keyOf(claim) {
		t.Errorf("enqueued %v, want %v", got, keyOf(claim))
	}
	c.queue.Done(keyOf(claim))
	handler.OnDelete(cache.DeletedFinalStateUnknown{Obj: running})
	if c.queue.Len() != 1 {
		t.Fatalf("queue length %d after the record's deletion, want 1", c.queue.Len())
	}
}

// jobLists counts the Job lists the controller sent to the API server.
func jobLists(f *fixture) int {
	n := 0
	for _, a := range f.log {
		if a.GetVerb() == "list" && a.GetResource().Resource == "jobs" {
			n++
		}
	}
	return n
}

// TestNewClaimListsNoJobs: building a new claim whose workspace has no record (none in the Job
// cache, none written by this controller) costs no API round trip: the take reads the API server
// only when a record may exist (issue 40: a consistent list of Jobs sat on every cold acquire's
// path between the claim's children and its pod).
func TestNewClaimListsNoJobs(t *testing.T) {
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
	if n := jobLists(f); n != 0 {
		t.Errorf("%d Job lists on the API server, want none", n)
	}
}

// TestTakeReadsARecordNotCachedYet: a record this controller wrote a moment ago, which the Job
// cache does not show yet, is still read fresh and taken; once the cache shows it (its add
// event), the controller no longer counts it as written-not-seen.
func TestTakeReadsARecordNotCachedYet(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t).withDefaults()
	claim := binding("c1", t0.Add(-time.Second))
	record := keptRecord(claim, "c1", "uid-rt-agent", t0.Add(-time.Minute))
	f.claims = append(f.claims, claim)
	f.withChildren(claim)
	f.jobs = append(f.jobs, record)
	c := f.newController(ctx)
	// The API server has the record, the cache does not yet.
	if err := f.jobInformer.GetIndexer().Delete(record); err != nil {
		t.Fatal(err)
	}
	c.keptWritten.Expect(cache.MetaObjectToName(record), struct{}{})
	if _, err := c.sync(ctx, keyOf(claim)); err != nil {
		t.Fatal(err)
	}
	checkActions(t, f, []string{"create secrets " + claimtoken.ClaimSecretName("c1", testToken), "delete jobs " + record.Name, "create pods c1"})
	if n := jobLists(f); n != 1 {
		t.Errorf("%d Job lists on the API server, want 1", n)
	}
	c.keptHandler().OnAdd(record, false)
	if _, written := c.keptWritten.Get(cache.MetaObjectToName(record)); written {
		t.Error("the record is still written-not-seen after its add event")
	}
}
