package claim

import (
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/claimtoken"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
	"github.com/airlock-dev/airlock/pkg/workspace"
)

const testMember = "tools-codegen-aaaaaaaaaaaa"

// warmReaping returns a Reaping claim that adopted the warm member testMember, without a
// targetPath (its member pod gone).
func warmReaping(name string) *airlockv1alpha1.SandboxClaim {
	c := reapingClaim(name, t0.Add(-2*time.Hour), "")
	c.Status.Warm = &airlockv1alpha1.WarmAdoption{Member: testMember, WorkspaceDir: workspace.MemberDir(testNamespace, testMember), AdoptedAt: metav1.NewTime(t0.Add(-time.Hour))}
	return c
}

// warmKeptRecord is the record a warm claim named name of the runtime "agent" left: its
// member's workspace, kept for the claim's own directory.
func warmKeptRecord(name string, keptAt time.Time) *batchv1.Job {
	job := buildKeptJob(warmReaping(name), "workspace-content", testSyncImage, keptAt)
	job.UID, job.ResourceVersion = "uid-warm-record", "11"
	job.CreationTimestamp = metav1.NewTime(keptAt)
	return job
}

// TestWarmAdoptedWorkspaceKept (issue 39): the workspace of a claim that adopted a warm member is
// kept as any other, resumable (before: not resumable, collected at once), and its record says
// for which directory it is kept (the claim's own), so that the next claim of the handle finds
// it.
func TestWarmAdoptedWorkspaceKept(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t).withDefaults()
	claim := warmReaping("c1")
	f.claims = append(f.claims, claim)
	c := f.newController(ctx)
	if _, err := syncClaim(ctx, c, keyOf(claim)); err != nil {
		t.Fatal(err)
	}
	memberDir := workspace.MemberDir(testNamespace, testMember)
	checkActions(t, f, []string{"create jobs " + workspace.RecordName(memberDir), "delete sandboxclaims c1"})
	record := f.written("jobs", "").(*batchv1.Job)
	if record.Annotations[airlockv1alpha1.AnnotationKeptResumable] == airlockv1alpha1.AnnotationValueNotResumable {
		t.Error("a warm member's kept workspace is not resumable")
	}
	if got, want := record.Labels[airlockv1alpha1.LabelKeptFor], workspace.RecordName(claim.Spec.WorkspaceDir); got != want {
		t.Errorf("kept-for %q, want %q (the claim's own directory's record name)", got, want)
	}
	if !workspace.RecordIsOurs(record) || record.Annotations[airlockv1alpha1.AnnotationKeptDir] != memberDir {
		t.Errorf("record %v is not the operator's record of %s", record.Annotations, memberDir)
	}
	// The next claim of the name, before the cache shows the record, adopts no warm member.
	next := binding("c1", t0)
	if !c.hasKeptWorkspace(next) {
		t.Error("the next claim of the name would adopt a warm member over its kept workspace")
	}
}

// TestResumeWarmKeptWorkspace (issue 39): a new claim of the same runtime, session and handle
// resumes the kept workspace of a warm member its predecessor adopted: it first writes the
// member's directory into status.workspaceDir (no pod yet), then, at its next sync, takes the
// record as any other and its pod works in that directory, with the resume labels. A claim of
// another runtime UID, or a record being collected, leaves the claim in its own directory.
func TestResumeWarmKeptWorkspace(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	memberDir := workspace.MemberDir(testNamespace, testMember)
	f := newFixture(t).withDefaults()
	claim := binding("c1", t0.Add(-time.Second))
	record := warmKeptRecord("c1", t0.Add(-time.Hour))
	f.claims = append(f.claims, claim)
	f.withChildren(claim)
	f.jobs = append(f.jobs, record)
	c := f.newController(ctx)
	if _, err := c.sync(ctx, keyOf(claim)); err != nil {
		t.Fatal(err)
	}
	checkActions(t, f, []string{"create secrets " + claimtoken.ClaimSecretName("c1", testToken), "update sandboxclaims/status c1"})
	written := f.writtenClaim()
	if written.Status.WorkspaceDir != memberDir || workspace.DirOf(written) != memberDir {
		t.Fatalf("status.workspaceDir %q, want %q", written.Status.WorkspaceDir, memberDir)
	}

	// The next sync, on the claim as written: the record taken, the pod in the member's directory.
	f = newFixture(t).withDefaults()
	f.claims = append(f.claims, written)
	f.withChildren(written)
	f.jobs = append(f.jobs, record)
	c = f.newController(ctx)
	if _, err := c.sync(ctx, keyOf(written)); err != nil {
		t.Fatal(err)
	}
	checkActions(t, f, []string{"create secrets " + claimtoken.ClaimSecretName("c1", testToken), "delete jobs " + record.Name, "create pods c1"})
	pod := f.written("pods", "").(*corev1.Pod)
	if got := podWorkspaceDir(pod); got != memberDir {
		t.Errorf("pod's workspace %q, want the kept member's %q", got, memberDir)
	}
	if pod.Labels[workspace.LabelResumedKeptBy] != "c1" {
		t.Errorf("pod labels %v, want the resume labels", pod.Labels)
	}

	for name, modify := range map[string]func(*batchv1.Job){
		"another runtime UID": func(j *batchv1.Job) { j.Annotations[airlockv1alpha1.AnnotationKeptRuntimeUID] = "uid-old-agent" },
		"being collected":     func(j *batchv1.Job) { j.Spec.Suspend = ptr.To(false) },
	} {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(t).withDefaults()
			claim := binding("c1", t0.Add(-time.Second))
			other := warmKeptRecord("c1", t0.Add(-time.Hour))
			modify(other)
			f.claims = append(f.claims, claim)
			f.withChildren(claim)
			f.jobs = append(f.jobs, other)
			c := f.newController(ctx)
			if _, err := c.sync(ctx, keyOf(claim)); err != nil {
				t.Fatal(err)
			}
			checkActions(t, f, []string{"create secrets " + claimtoken.ClaimSecretName("c1", testToken), "create pods c1"})
			if got := podWorkspaceDir(f.written("pods", "").(*corev1.Pod)); got != claim.Spec.WorkspaceDir {
				t.Errorf("pod's workspace %q, want its own %q", got, claim.Spec.WorkspaceDir)
			}
		})
	}
}

// podWorkspaceDir is the subPath of the content volume the pod's container mounts.
func podWorkspaceDir(pod *corev1.Pod) string {
	for _, m := range pod.Spec.Containers[0].VolumeMounts {
		if m.SubPath != "" {
			return m.SubPath
		}
	}
	return ""
}

// TestGaveUpSyncBackHoldsItsWorkspace (issue 39): a claim whose sync-back gave up writes the
// record of its workspace, held (never collected: workspacegc), saying why, with the target and
// the entry's targetVersions a retry copies into; a Warning event says how to retry or release
// it. Before, the workspace was left with no record, never reported nor collected.
func TestGaveUpSyncBackHoldsItsWorkspace(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t).withDefaults()
	f.registries[0].Spec.Sandboxes[0].TargetVersions = ptr.To[int32](9)
	claim := reapingClaim("c1", t0.Add(-time.Hour), "projects/demo")
	claim.Annotations = map[string]string{AnnotationSyncFailures: "4"}
	f.claims = append(f.claims, claim)
	f.withChildren(claim)
	f.jobs = append(f.jobs, failedSyncJob(claim, syncMaxAttempts, t0.Add(-time.Second)))
	c := f.newController(ctx)
	if _, err := syncClaim(ctx, c, keyOf(claim)); err != nil {
		t.Fatal(err)
	}
	acts := f.actions()
	want := "create jobs " + workspace.RecordName(claim.Spec.WorkspaceDir)
	if len(acts) < 2 || acts[0] != want || !strings.HasPrefix(acts[1], "update sandboxclaims/status") {
		t.Fatalf("actions %v, want %q before the status write", acts, want)
	}
	record := f.written("jobs", "").(*batchv1.Job)
	if !workspace.IsHeld(record) || !workspace.RecordIsOurs(record) || !ptr.Deref(record.Spec.Suspend, false) {
		t.Fatalf("record %v, want the operator's suspended record, held", record.Annotations)
	}
	if why := record.Annotations[airlockv1alpha1.AnnotationHeld]; !strings.Contains(why, "exists and is not a directory") {
		t.Errorf("held %q, want the last failure", why)
	}
	if record.Annotations[airlockv1alpha1.AnnotationHeldTarget] != "projects/demo" || workspace.HeldVersions(record) != 9 {
		t.Errorf("held target %q versions %d, want projects/demo and 9", record.Annotations[airlockv1alpha1.AnnotationHeldTarget], workspace.HeldVersions(record))
	}
	if events := strings.Join(f.events(), "\n"); !strings.Contains(events, "Warning "+ReasonWorkspaceHeld) || !strings.Contains(events, airlockv1alpha1.AnnotationHeldAction) {
		t.Errorf("events %q, want a Warning %s naming the annotation", events, ReasonWorkspaceHeld)
	}
}

// TestHeldWorkspaceWhileRetried: a claim of the same owner waits while a held workspace's
// sync-back is retried (no pod writes what is being copied); one of another owner waits for a
// person, never for a collection of held work.
func TestHeldWorkspaceWhileRetried(t *testing.T) {
	for name, tc := range map[string]struct {
		runtimeUID, action, wantInMessage string
	}{
		"retried":            {runtimeUID: "uid-rt-agent", action: airlockv1alpha1.HeldActionRetry, wantInMessage: "copied into its target again"},
		"another owner's":    {runtimeUID: "uid-old-agent", wantInMessage: "held workspace"},
		"retried, another's": {runtimeUID: "uid-old-agent", action: airlockv1alpha1.HeldActionRetry, wantInMessage: "held workspace"},
	} {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(t).withDefaults()
			claim := binding("c1", t0.Add(-time.Second))
			held := claim.DeepCopy()
			held.Spec.RuntimeUID = types.UID(tc.runtimeUID)
			held.Spec.TargetPath = "projects/demo"
			record := workspace.HeldRecord(held, "workspace-content", sandboxpod.JobConfig(testSyncImage), t0.Add(-time.Hour), "gave up", 3)
			record.UID, record.ResourceVersion = "uid-held", "5"
			if tc.action != "" {
				record.Annotations[airlockv1alpha1.AnnotationHeldAction] = tc.action
			}
			f.claims = append(f.claims, claim)
			f.withChildren(claim)
			f.jobs = append(f.jobs, record)
			c := f.newController(ctx)
			if _, err := c.sync(ctx, keyOf(claim)); err != nil {
				t.Fatal(err)
			}
			for _, a := range f.actions() {
				if a == "create pods c1" || strings.HasPrefix(a, "delete jobs") {
					t.Errorf("%s while the held workspace is %s", a, name)
				}
			}
			cond := findCondition(f.writtenClaim(), ConditionReady)
			if cond == nil || cond.Status != metav1.ConditionFalse || !strings.Contains(cond.Message, tc.wantInMessage) {
				t.Errorf("Ready %+v, want False saying %q", cond, tc.wantInMessage)
			}
		})
	}
}
