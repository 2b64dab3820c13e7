package claim

import (
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	core "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/claimtoken"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
	"github.com/airlock-dev/airlock/pkg/sandboxpod/sandboxpodtest"
	"github.com/airlock-dev/airlock/pkg/workspace"
)

// Resume members (resume.go; docs/nothing-lost.md, "Resume members").

const resumeMemberName = "tools-codegen-rrrrrrrrrrrr"

// resumeCase is a claim c1 of the runtime "agent" that would resume its kept workspace, the
// record of that workspace (kept by the earlier c1, naming its resume member), and the resume
// member the pool started on it, Ready.
type resumeCase struct {
	claim  *airlockv1alpha1.SandboxClaim
	record *batchv1.Job
	member *corev1.Pod
	keptAt time.Time
}

// adopt makes the member the claim's, as an adoption whose write did not go through leaves it:
// owned by the claim and labelled as its pod, and with resumed the resume labels of the record.
func (rc *resumeCase) adopt(resumed bool) {
	adopted := rc.member.DeepCopy()
	adopted.OwnerReferences = []metav1.OwnerReference{sandboxpod.OwnerReference(rc.claim)}
	for k, v := range sandboxpod.PodLabels(rc.claim) {
		adopted.Labels[k] = v
	}
	if resumed {
		for k, v := range workspace.ResumedLabels(rc.record) {
			adopted.Labels[k] = v
		}
	}
	rc.member = adopted
}

func newResumeCase() resumeCase {
	keptAt := t0.Add(-2 * time.Minute)
	claim := newClaim("c1", "s-c1", "", t0)
	record := keptRecord(claim, "c1", "uid-rt-agent", keptAt)
	reg := warmRegistry(3)
	key := sandboxpod.PoolKey(reg.UID, "codegen", testRecord())
	member := sandboxpodtest.AsCached(sandboxpod.ResumeMemberPod(reg, "codegen", key, resumeMemberName, testRecord(), record), keptAt.Add(time.Second), "10.244.0.50")
	record.Annotations[airlockv1alpha1.AnnotationResumeMember] = member.Name
	record.Annotations[airlockv1alpha1.AnnotationResumeMemberUID] = string(member.UID)
	return resumeCase{claim: claim, record: record, member: member, keptAt: keptAt}
}

// fixture is a warm fixture (warm 3, the default resumeWindow) holding the case's objects.
func (rc resumeCase) fixture(t *testing.T, pods ...*corev1.Pod) *fixture {
	f := warmFixture(t, 5, append([]*corev1.Pod{rc.member}, pods...)...)
	f.claims = append(f.claims, rc.claim)
	f.jobs = append(f.jobs, rc.record)
	return f
}

// TestResumeAdoptsItsMember: a claim that would resume its kept workspace adopts the resume
// member the pool started on it: the record read fresh names the member; one conditional patch
// makes it the claim's, with the resume labels; the record's session records move to the claim
// and the record is taken (deleted on its UID and resourceVersion); and the admission is written
// Bound at the member, with status.warm naming it and the kept directory, and
// status.resumedWorkspace. No pod, Secret or policy is created: no pod starts.
func TestResumeAdoptsItsMember(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	rc := newResumeCase()
	f := rc.fixture(t)
	c := f.newController(ctx)
	records := &fakeRecords{}
	c.SetSessionRecords(records)
	if err := admitAndBuild(ctx, c); err != nil {
		t.Fatal(err)
	}
	checkActions(t, f, []string{"patch pods " + rc.member.Name, "delete jobs " + rc.record.Name, "update sandboxclaims/status c1"})
	for _, a := range f.log {
		switch a := a.(type) {
		case core.PatchAction:
			for _, want := range []string{`"resourceVersion":"7"`, `"airlock.dev/claim":"c1"`, `"airlock.dev/claim-uid":"uid-c1"`,
				`"` + workspace.LabelResumedKeptBy + `":"c1"`, `"` + workspace.LabelResumedKeptAt + `":"`} {
				if !strings.Contains(string(a.GetPatch()), want) {
					t.Errorf("adoption patch %s lacks %s", a.GetPatch(), want)
				}
			}
		case core.DeleteAction:
			pre := a.(interface{ GetDeleteOptions() metav1.DeleteOptions }).GetDeleteOptions().Preconditions
			if pre == nil || ptr.Deref(pre.UID, "") != rc.record.UID || ptr.Deref(pre.ResourceVersion, "") != rc.record.ResourceVersion {
				t.Errorf("record taken with preconditions %+v, want its UID and resourceVersion", pre)
			}
		}
	}
	if want := []string{"uid-record -> SandboxClaim/c1/uid-c1"}; strings.Join(records.moves, ",") != strings.Join(want, ",") {
		t.Errorf("record moves %v, want %v", records.moves, want)
	}
	got := f.writtenClaim()
	if got.Status.Phase != airlockv1alpha1.ClaimBound || got.Status.Warm == nil || got.Status.Warm.Member != rc.member.Name {
		t.Fatalf("phase %s warm %+v, want Bound to the resume member", got.Status.Phase, got.Status.Warm)
	}
	if got.Status.Warm.WorkspaceDir != rc.claim.Spec.WorkspaceDir || workspace.DirOf(got) != rc.claim.Spec.WorkspaceDir {
		t.Errorf("workspace %q, want the kept %q", got.Status.Warm.WorkspaceDir, rc.claim.Spec.WorkspaceDir)
	}
	want := &airlockv1alpha1.ResumedWorkspace{KeptAt: metav1.NewTime(time.Unix(rc.keptAt.Unix(), 0).UTC()), KeptBy: "c1"}
	if r := got.Status.ResumedWorkspace; r == nil || !r.KeptAt.Equal(&want.KeptAt) || r.KeptBy != want.KeptBy {
		t.Errorf("resumedWorkspace %+v, want %+v", r, want)
	}
	if len(got.Status.Addresses) != 1 || got.Status.Addresses[0].URL != "http://10.244.0.50:8080" {
		t.Errorf("addresses %+v, want the member's IP", got.Status.Addresses)
	}
	if events := strings.Join(f.events(), "\n"); !strings.Contains(events, ReasonWorkspaceResumed) || !strings.Contains(events, rc.member.Name) {
		t.Errorf("events %q, want %s naming the member", events, ReasonWorkspaceResumed)
	}
}

// TestResumeMemberAdoptedByNoOtherClaim: a resume member waits for one claim only. A claim of
// another session or handle (another name and directory), a claim of a runtime deleted and created
// again under the same name (another UID), an ordinary claim (nothing to resume), a claim whose
// record names another member or none, is of another UID (written again), or whose member is of
// another runtime or directory, adopts nothing of it: it is built cold, or adopts an ordinary
// member of the pool when it has no kept workspace.
func TestResumeMemberAdoptedByNoOtherClaim(t *testing.T) {
	tests := map[string]struct {
		modify func(rc *resumeCase)
		// wantOrdinary: the claim adopts the pool's ordinary member (it resumes nothing).
		wantOrdinary bool
	}{
		"another session's claim": {modify: func(rc *resumeCase) {
			rc.claim = newClaim("c2", "s-c2", "", t0)
		}, wantOrdinary: true},
		"another handle's claim": {modify: func(rc *resumeCase) {
			rc.claim = newClaim("c3", "s-c1", "", t0)
			rc.claim.Spec.Handle = "codegen/second"
		}, wantOrdinary: true},
		// A kept workspace the claim may not resume is not its own: it adopts a member of the
		// pool as a new claim does (kept.go's rule), never the resume member.
		"a runtime created again under the name": {modify: func(rc *resumeCase) {
			rc.record.Annotations[airlockv1alpha1.AnnotationKeptRuntimeUID] = "uid-old-agent"
			rc.member.Labels[airlockv1alpha1.LabelResumesRuntimeUID] = "uid-old-agent"
		}, wantOrdinary: true},
		"a record naming another member": {modify: func(rc *resumeCase) {
			rc.record.Annotations[airlockv1alpha1.AnnotationResumeMember] = "tools-codegen-ssssssssssss"
			rc.record.Annotations[airlockv1alpha1.AnnotationResumeMemberUID] = "uid-tools-codegen-ssssssssssss"
		}},
		"a record naming no member": {modify: func(rc *resumeCase) {
			delete(rc.record.Annotations, airlockv1alpha1.AnnotationResumeMember)
			delete(rc.record.Annotations, airlockv1alpha1.AnnotationResumeMemberUID)
		}},
		"a record written again (another UID)": {modify: func(rc *resumeCase) { rc.record.UID = "uid-record-again" }},
		"a member of another runtime": {modify: func(rc *resumeCase) {
			rc.member.Labels[airlockv1alpha1.LabelResumesRuntimeUID] = "uid-someone-else"
		}},
		"a member on another directory": {modify: func(rc *resumeCase) {
			rc.member.Annotations[airlockv1alpha1.AnnotationResumesDir] = claimDir("c9")
		}},
		"a record being collected": {modify: func(rc *resumeCase) { rc.record.Spec.Suspend = ptr.To(false) }, wantOrdinary: true},
		"a held record being retried": {modify: func(rc *resumeCase) {
			rc.record.Annotations[airlockv1alpha1.AnnotationHeld] = "gave up"
			rc.record.Annotations[airlockv1alpha1.AnnotationHeldAction] = airlockv1alpha1.HeldActionRetry
		}},
		"a resumeWindow of 0": {modify: func(rc *resumeCase) {}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			rc := newResumeCase()
			tc.modify(&rc)
			reg := warmRegistry(3)
			ordinary := warmMember(reg, "tools-codegen-oooooooooooo", testRecord(), t0.Add(-time.Hour), "10.244.0.60")
			f := rc.fixture(t, ordinary)
			if name == "a resumeWindow of 0" {
				f.registries[0].Spec.Sandboxes[0].ResumeWindow = &metav1.Duration{}
			}
			c := f.newController(ctx)
			if err := admitAndBuild(ctx, c); err != nil {
				t.Fatal(err)
			}
			for _, a := range f.actions() {
				if a == "patch pods "+rc.member.Name {
					t.Fatalf("the resume member was adopted: %v", f.actions())
				}
			}
			got := f.writtenClaimNamed(rc.claim.Name)
			switch {
			case tc.wantOrdinary:
				if got.Status.Warm == nil || got.Status.Warm.Member != ordinary.Name {
					t.Errorf("warm %+v, want the ordinary member %s", got.Status.Warm, ordinary.Name)
				}
			case got.Status.Warm != nil:
				t.Errorf("a claim with a kept workspace adopted %+v", got.Status.Warm)
			}
		})
	}
}

// TestOrdinaryClaimNeverGetsAResumeMember: a claim with nothing to resume never adopts a resume
// member, even when it is the only Ready member of its pool: it is built cold.
func TestOrdinaryClaimNeverGetsAResumeMember(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	rc := newResumeCase()
	f := warmFixture(t, 5, rc.member)
	f.jobs = append(f.jobs, rc.record)
	f.claims = append(f.claims, newClaim("c2", "s-c2", "", t0))
	c := f.newController(ctx)
	if err := admitAndBuild(ctx, c); err != nil {
		t.Fatal(err)
	}
	got := f.writtenClaimNamed("c2")
	if got.Status.Phase != airlockv1alpha1.ClaimBinding || got.Status.Warm != nil {
		t.Errorf("phase %s warm %+v, want Binding cold", got.Status.Phase, got.Status.Warm)
	}
	for _, a := range f.actions() {
		if strings.Contains(a, rc.member.Name) || strings.Contains(a, rc.record.Name) {
			t.Errorf("%s: an ordinary claim touched the resume member or its record", a)
		}
	}
}

// TestResumeTakeLost: the record changed between the adoption and the take (a collection began:
// unsuspended): the take loses, the member is let go (deleted with a grace period of 0: it served
// nobody) and the claim is admitted cold; its pod waits until no resume member is left on the
// workspace, then waits for the collection as any claim whose record is being collected.
func TestResumeTakeLost(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	rc := newResumeCase()
	f := rc.fixture(t)
	c := f.newController(ctx)
	collected := rc.record.DeepCopy()
	collected.Spec.Suspend = ptr.To(false)
	collected.ResourceVersion = "12"
	takes := 0
	f.kubeClient.PrependReactor("delete", "jobs", func(core.Action) (bool, runtime.Object, error) {
		// The collection's update went first: the record is unsuspended at the API server.
		takes++
		if err := f.kubeClient.Tracker().Update(batchv1.SchemeGroupVersion.WithResource("jobs"), collected, collected.Namespace); err != nil {
			t.Fatal(err)
		}
		return true, nil, apierrors.NewConflict(batchv1.Resource("jobs"), rc.record.Name, nil)
	})
	if err := admitAndBuild(ctx, c); err != nil {
		t.Fatal(err)
	}
	if takes != 1 {
		t.Errorf("%d takes, want 1 (refused)", takes)
	}
	acts := f.actions()
	want := []string{"patch pods " + rc.member.Name, "delete pods " + rc.member.Name}
	if len(acts) < len(want) || strings.Join(acts[:len(want)], ",") != strings.Join(want, ",") {
		t.Fatalf("actions %v, want %v first", acts, want)
	}
	for _, a := range f.log {
		if d, ok := a.(core.DeleteAction); ok && d.GetResource().Resource == "pods" {
			if g := d.(interface{ GetDeleteOptions() metav1.DeleteOptions }).GetDeleteOptions().GracePeriodSeconds; g == nil || *g != 0 {
				t.Errorf("the member deleted with grace period %v, want 0", g)
			}
		}
	}
	got := f.writtenClaimNamed("c1")
	if got.Status.Phase != airlockv1alpha1.ClaimBinding || got.Status.Warm != nil || got.Status.ResumedWorkspace != nil {
		t.Fatalf("phase %s warm %+v resumed %+v, want Binding cold", got.Status.Phase, got.Status.Warm, got.Status.ResumedWorkspace)
	}
	for _, a := range acts {
		if a == "create pods c1" {
			t.Errorf("the claim's pod was made while the member (in the cache) may still be there: %v", acts)
		}
	}
}

// TestResumeAfterACrashBetweenAdoptionAndTake: a claim that adopted its resume member in a pass
// whose write did not go through (undecided, controlling the member) takes the record at its
// next pass and is written Bound at the member; a record already gone was taken by that pass,
// and the claim is Bound all the same, resumed, never in another directory.
func TestResumeAfterACrashBetweenAdoptionAndTake(t *testing.T) {
	for name, recordThere := range map[string]bool{"the record still there": true, "the record taken": false} {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			rc := newResumeCase()
			rc.adopt(true)
			f := rc.fixture(t)
			if !recordThere {
				f.jobs = nil
			}
			c := f.newController(ctx)
			if err := admitAndBuild(ctx, c); err != nil {
				t.Fatal(err)
			}
			want := []string{"update sandboxclaims/status c1"}
			if recordThere {
				want = []string{"delete jobs " + rc.record.Name, "update sandboxclaims/status c1"}
			}
			checkActions(t, f, want)
			got := f.writtenClaim()
			if got.Status.Phase != airlockv1alpha1.ClaimBound || got.Status.Warm == nil || got.Status.Warm.WorkspaceDir != rc.claim.Spec.WorkspaceDir {
				t.Fatalf("phase %s warm %+v, want Bound to the member in the kept workspace", got.Status.Phase, got.Status.Warm)
			}
			if r := got.Status.ResumedWorkspace; r == nil || r.KeptBy != "c1" {
				t.Errorf("resumedWorkspace %+v, want kept by c1", r)
			}
		})
	}
}

// TestColdResumeClearsTheResumeMember: a claim resuming cold (Binding: it did not adopt the
// member, here one built from an older class generation) deletes the resume member its record
// names (grace period 0: it served nobody), confirmed gone by the API server, and makes its pod
// only once the cache shows no member on the workspace: never two pods on one workspace. Then it
// takes the record and its pod resumes the workspace.
func TestColdResumeClearsTheResumeMember(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	rc := newResumeCase()
	claim := binding("c1", t0.Add(-time.Second))
	f := newFixture(t).withDefaults()
	f.registries = []*airlockv1alpha1.ToolRegistry{warmRegistry(3)}
	f.claims = append(f.claims, claim)
	f.withChildren(claim)
	f.jobs = append(f.jobs, rc.record)
	f.pods = append(f.pods, rc.member)
	c := f.newController(ctx)
	if _, err := c.sync(ctx, keyOf(claim)); err != nil {
		t.Fatal(err)
	}
	checkActions(t, f, []string{"create secrets " + claimtoken.ClaimSecretName("c1", testToken), "delete pods " + rc.member.Name, "delete pods " + rc.member.Name})
	if err := c.clearResumeMembers(ctx, claim, rc.record.Name, nil); err != errResumeMemberGoing {
		t.Errorf("clearResumeMembers while the cache shows the member: %v, want errResumeMemberGoing", err)
	}
	for _, a := range f.actions() {
		if a == "create pods c1" || strings.HasPrefix(a, "delete jobs") {
			t.Fatalf("%s while the member may still be there", a)
		}
	}

	// The member gone from the API server and the cache: the record is taken, the pod made.
	f = newFixture(t).withDefaults()
	f.registries = []*airlockv1alpha1.ToolRegistry{warmRegistry(3)}
	f.claims = append(f.claims, claim)
	f.withChildren(claim)
	f.jobs = append(f.jobs, rc.record)
	c = f.newController(ctx)
	if _, err := c.sync(ctx, keyOf(claim)); err != nil {
		t.Fatal(err)
	}
	checkActions(t, f, []string{"create secrets " + claimtoken.ClaimSecretName("c1", testToken), "delete pods " + rc.member.Name, "delete jobs " + rc.record.Name, "create pods c1"})
	if pod := f.written("pods", "").(*corev1.Pod); pod.Labels[workspace.LabelResumedKeptBy] != "c1" || podWorkspaceDir(pod) != claim.Spec.WorkspaceDir {
		t.Errorf("pod labels %v, workspace %q: want it resuming the kept workspace", pod.Labels, podWorkspaceDir(pod))
	}
}

// TestResumeMemberDeletionWakesTheClaim: the deletion of a resume member enqueues the claim whose
// workspace it mounted (it may wait for it before its own pod), and no other.
func TestResumeMemberDeletionWakesTheClaim(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	rc := newResumeCase()
	claim := binding("c1", t0.Add(-time.Second))
	other := binding("c2", t0.Add(-time.Second))
	f := newFixture(t).withDefaults()
	f.claims = append(f.claims, claim, other)
	c := f.newController(ctx)
	for c.queue.Len() > 0 {
		key, _ := c.queue.Get()
		c.queue.Done(key)
	}
	c.enqueueResumeWaiters(rc.member)
	if c.queue.Len() != 1 {
		t.Fatalf("%d claims enqueued, want 1", c.queue.Len())
	}
	if key, _ := c.queue.Get(); key.Name != "c1" {
		t.Errorf("enqueued %v, want c1", key)
	}
}

// TestClosedUndecidedClaimKeepsATakenResume: an undecided claim that adopted its resume member and
// took the record (its Bound write did not go through) and is then closed, or stays Queued, lets
// the member go (grace period 0) only after it kept the workspace again: a new record of the
// member's directory. One whose record was not taken leaves the record as it is.
func TestClosedUndecidedClaimKeepsATakenResume(t *testing.T) {
	for name, taken := range map[string]bool{"the record taken": true, "the record not taken": false} {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			rc := newResumeCase()
			rc.adopt(false)
			rc.claim.Annotations = map[string]string{airlockv1alpha1.AnnotationReapRequested: t0.Format(time.RFC3339)}
			f := rc.fixture(t)
			if taken {
				f.jobs = nil
			}
			c := f.newController(ctx)
			if _, err := c.sync(ctx, keyOf(rc.claim)); err != nil {
				t.Fatal(err)
			}
			want := []string{"delete pods " + rc.member.Name, "delete pods " + rc.member.Name, "get sandboxclaims c1", "delete sandboxclaims c1"}
			if taken {
				want = append([]string{"create jobs " + rc.record.Name}, want...)
			}
			checkActions(t, f, want)
			if taken {
				record := f.written("jobs", "").(*batchv1.Job)
				if record.Annotations[airlockv1alpha1.AnnotationKeptDir] != rc.claim.Spec.WorkspaceDir || !workspace.RecordIsOurs(record) {
					t.Errorf("record %v, want the operator's record of %s", record.Annotations, rc.claim.Spec.WorkspaceDir)
				}
			}
		})
	}
}
