package claim

import (
	"context"
	"errors"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
	"github.com/airlock-dev/airlock/pkg/workspace"
)

// reapingClaim is a Reaping claim created at created (its pods gone once the fixture has none),
// syncing back into targetPath ("" for none).
func reapingClaim(name string, created time.Time, targetPath string) *airlockv1alpha1.SandboxClaim {
	c := bound(name, t0.Add(-time.Hour))
	c.CreationTimestamp = metav1.NewTime(created)
	c.Status.Phase = airlockv1alpha1.ClaimReaping
	c.Status.Reason = ReasonIdleTimeout
	c.Spec.TargetPath = targetPath
	return c
}

// syncJob is the claim's sync-back Job as the controller built it, one minute old, with its pod
// ready, and the given condition (none when empty).
func syncJob(claim *airlockv1alpha1.SandboxClaim, remove bool, cond batchv1.JobConditionType) *batchv1.Job {
	j := buildSyncJob(claim, "workspace-content", testSyncImage, 1, remove, 3)
	j.CreationTimestamp = metav1.NewTime(t0.Add(-time.Minute))
	j.Status.Ready = ptr.To[int32](1)
	if cond != "" {
		j.Status.Conditions = []batchv1.JobCondition{{Type: cond, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(t0), Message: "remove failed"}}
	}
	return j
}

// createdJob returns the sync-back Job the clients created, or fails the test.
func (f *fixture) createdJob() *batchv1.Job {
	f.t.Helper()
	return f.written("jobs", "").(*batchv1.Job)
}

func jobArgs(job *batchv1.Job) []string {
	return job.Spec.Template.Spec.Containers[0].Args
}

// TestSyncJobArgs: the Job copies and then removes the workspace, or copies only (a workspace
// kept), or only removes it (nothing to save).
func TestSyncJobArgs(t *testing.T) {
	withTarget := newClaim("c1", "s1", airlockv1alpha1.ClaimReaping, t0)
	withTarget.Spec.TargetPath = "projects/demo"
	without := newClaim("c1", "s1", airlockv1alpha1.ClaimReaping, t0)
	tests := map[string]struct {
		claim    *airlockv1alpha1.SandboxClaim
		remove   bool
		versions int32
		want     []string
	}{
		"copy, then remove": {claim: withTarget, remove: true,
			want: []string{"sync", "--content-root=/content", "--from=" + claimDir("c1"), "--to=projects/demo", "--remove-source", "--sandboxes-dir=team-a/sandboxes"}},
		"copy, 12 versions of the target": {claim: withTarget, versions: 12,
			want: []string{"sync", "--content-root=/content", "--from=" + claimDir("c1"), "--to=projects/demo", "--keep-versions=12"}},
		"copy, workspace kept": {claim: withTarget,
			want: []string{"sync", "--content-root=/content", "--from=" + claimDir("c1"), "--to=projects/demo"}},
		"nothing to save: remove only": {claim: without, remove: true,
			want: []string{"sync", "--content-root=/content", "--from=" + claimDir("c1"), "--remove-only", "--sandboxes-dir=team-a/sandboxes"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, workspace.SyncJobArgs(tc.claim, tc.remove, tc.versions)); diff != "" {
				t.Errorf("args (-want +got):\n%s", diff)
			}
		})
	}
}

// TestWorkspaceRemovedAfterSyncBack: a Reaping claim's sync-back Job also removes the workspace
// (after the copy: `--remove-source`), and the claim is deleted only once that Job has succeeded.
func TestWorkspaceKeptAfterSyncBack(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t).withDefaults()
	claim := reapingClaim("c1", t0.Add(-2*time.Hour), "projects/demo")
	f.claims = append(f.claims, claim)
	f.withChildren(claim)
	c := f.newController(ctx)
	requeue, err := syncClaim(ctx, c, keyOf(claim))
	if err != nil {
		t.Fatal(err)
	}
	checkRequeue(t, requeue, nil)
	checkActions(t, f, []string{"create jobs c1-sync"})
	want := []string{"sync", "--content-root=/content", "--from=" + claimDir("c1"), "--to=projects/demo"}
	if diff := cmp.Diff(want, jobArgs(f.createdJob())); diff != "" {
		t.Errorf("sync Job args (-want +got):\n%s", diff)
	}

	// Running: the claim waits for it.
	f = newFixture(t).withDefaults()
	f.claims = append(f.claims, claim)
	f.withChildren(claim)
	f.jobs = append(f.jobs, syncJob(claim, true, ""))
	c = f.newController(ctx)
	if requeue, err := syncClaim(ctx, c, keyOf(claim)); err != nil || requeue != nil {
		t.Fatalf("sync = %v, %v", requeue, err)
	}
	checkActions(t, f, nil)

	// Succeeded: saved; the workspace is kept (its record written first), the claim deleted.
	f = newFixture(t).withDefaults()
	f.claims = append(f.claims, claim)
	f.withChildren(claim)
	f.jobs = append(f.jobs, syncJob(claim, true, batchv1.JobComplete))
	c = f.newController(ctx)
	if _, err := syncClaim(ctx, c, keyOf(claim)); err != nil {
		t.Fatal(err)
	}
	checkActions(t, f, []string{"update sandboxclaims/status c1", "create jobs " + workspace.RecordName(claimDir("c1")), "delete sandboxclaims c1"})
	checkKeptRecord(t, f.createdJob(), claim)
}

// checkKeptRecord checks the record of a kept workspace: a suspended cleanup Job of the claim's
// workspace, owned by nothing, saying whose workspace it is and when it was kept.
func checkKeptRecord(t *testing.T, job *batchv1.Job, claim *airlockv1alpha1.SandboxClaim) {
	t.Helper()
	if job.Name != workspace.RecordName(claim.Spec.WorkspaceDir) || !ptr.Deref(job.Spec.Suspend, false) || len(job.OwnerReferences) != 0 {
		t.Errorf("record %s suspend %v owners %v, want %s, suspended, no owner", job.Name, job.Spec.Suspend, job.OwnerReferences, workspace.RecordName(claim.Spec.WorkspaceDir))
	}
	want := []string{"sync", "--content-root=/content", "--from=" + claim.Spec.WorkspaceDir, "--remove-only", "--sandboxes-dir=team-a/sandboxes"}
	if diff := cmp.Diff(want, jobArgs(job)); diff != "" {
		t.Errorf("record Job args (-want +got):\n%s", diff)
	}
	wantMeta := map[string]string{airlockv1alpha1.AnnotationKeptRuntimeUID: string(claim.Spec.RuntimeUID), airlockv1alpha1.AnnotationKeptDir: claim.Spec.WorkspaceDir, workspace.AnnotationKeptAt: t0.UTC().Format(time.RFC3339)}
	if diff := cmp.Diff(wantMeta, job.Annotations); diff != "" {
		t.Errorf("record annotations (-want +got):\n%s", diff)
	}
	if job.Labels[airlockv1alpha1.LabelKeptWorkspace] != "true" || job.Labels[LabelClaim] != claim.Name || job.Labels[airlockv1alpha1.LabelRuntime] != claim.Spec.RuntimeName {
		t.Errorf("record labels %v", job.Labels)
	}
}

// TestWorkspaceCleanupWithoutTargetPath: a claim with nothing to save keeps its workspace (its
// record) and is deleted at once, with no Job to wait for; a cleanup Job an earlier version
// started is waited for, and the claim is deleted once it has succeeded.
func TestWorkspaceCleanupWithoutTargetPath(t *testing.T) {
	tests := map[string]struct {
		job         batchv1.JobConditionType // "-": no Job yet
		wantActions []string
		wantEvents  []string
	}{
		"no Job yet: the workspace kept, the claim deleted": {
			job:         "-",
			wantActions: []string{"create jobs " + workspace.RecordName(claimDir("c1")), "delete sandboxclaims c1"},
			wantEvents: []string{"Normal WorkspaceKept Kept the workspace " + claimDir("c1") + " for 24h0m0s (record Job " + workspace.RecordName(claimDir("c1")) +
				"): a new claim of the same runtime, session and handle resumes with its files", "Normal Reaped Deleting the claim (Reaped)"},
		},
		"cleanup running: the claim stays": {},
		"cleanup succeeded: the claim is deleted": {
			job:         batchv1.JobComplete,
			wantActions: []string{"delete sandboxclaims c1"},
			wantEvents: []string{
				"Normal WorkspaceRemoved Workspace cleanup Job c1-sync removed the workspace " + claimDir("c1"),
				"Normal Reaped Deleting the claim (Reaped)",
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(t).withDefaults()
			claim := reapingClaim("c1", t0.Add(-2*time.Hour), "")
			f.claims = append(f.claims, claim)
			f.withChildren(claim)
			if tc.job != "-" {
				f.jobs = append(f.jobs, syncJob(claim, true, tc.job))
			}
			c := f.newController(ctx)
			requeue, err := syncClaim(ctx, c, keyOf(claim))
			if err != nil {
				t.Fatal(err)
			}
			checkRequeue(t, requeue, nil)
			checkActions(t, f, tc.wantActions)
			if diff := cmp.Diff(tc.wantEvents, f.events()); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
			if tc.job == "-" {
				checkKeptRecord(t, f.createdJob(), claim)
			}
		})
	}
}

// TestWorkspaceNotTheOperators: a mount role's directory is never removed, even one inside
// sandboxes/; nor is a workspaceDir of a shape the operator does not give. With a targetPath the
// Job copies only; without one the claim is deleted with no Job at all.
func TestWorkspaceNotTheOperators(t *testing.T) {
	tests := map[string]struct {
		mountRole, workspaceDir string
	}{
		"mount role":                         {mountRole: "repo", workspaceDir: "team-a/repos/web"},
		"mount role inside sandboxes/":       {mountRole: "repo", workspaceDir: "team-a/sandboxes/shared"},
		"mount role, session-like directory": {mountRole: "repo", workspaceDir: "team-a/sandboxes/sessions/abc"},
		"not a workspace of this namespace":  {workspaceDir: "team-b/sandboxes/c1"},
		"not the shape of a workspace":       {workspaceDir: "team-a/sandboxes/c1/sub"},
	}
	for name, tc := range tests {
		for _, targetPath := range []string{"projects/demo", ""} {
			t.Run(name+", targetPath "+targetPath, func(t *testing.T) {
				_, ctx := ktesting.NewTestContext(t)
				f := newFixture(t).withDefaults()
				claim := reapingClaim("c1", t0.Add(-2*time.Hour), targetPath)
				claim.Spec.MountRole, claim.Spec.WorkspaceDir = tc.mountRole, tc.workspaceDir
				f.claims = append(f.claims, claim)
				f.withChildren(claim)
				c := f.newController(ctx)
				if _, err := syncClaim(ctx, c, keyOf(claim)); err != nil {
					t.Fatal(err)
				}
				if targetPath == "" {
					checkActions(t, f, []string{"delete sandboxclaims c1"})
					return
				}
				checkActions(t, f, []string{"create jobs c1-sync"})
				want := []string{"sync", "--content-root=/content", "--from=" + tc.workspaceDir, "--to=projects/demo"}
				if diff := cmp.Diff(want, jobArgs(f.createdJob())); diff != "" {
					t.Errorf("sync Job args (-want +got):\n%s", diff)
				}
			})
		}
	}
}

// TestSessionWorkspaceKeptWhileShared: a session's workspace is kept while another live claim uses
// it (its replacement); claims that are not live (being deleted, Refused, a Failed claim that has
// been replaced) do not keep it, so the last claim to go removes it.
func TestSessionWorkspaceKeptWhileShared(t *testing.T) {
	const dir = "team-a/sandboxes/sessions/0123456789abcdef"
	deleting := func(c *airlockv1alpha1.SandboxClaim) *airlockv1alpha1.SandboxClaim {
		c.DeletionTimestamp = ptr.To(metav1.NewTime(t0))
		c.Finalizers = []string{"test"}
		return c
	}
	refused := func(c *airlockv1alpha1.SandboxClaim) *airlockv1alpha1.SandboxClaim {
		c.Status.Phase = airlockv1alpha1.ClaimRefused
		return c
	}
	tests := map[string]struct {
		claim      *airlockv1alpha1.SandboxClaim
		others     []*airlockv1alpha1.SandboxClaim
		wantRemove bool
	}{
		"another live claim, Bound, shares it: kept": {
			claim:  reapingClaim("c1", t0.Add(-2*time.Hour), ""),
			others: []*airlockv1alpha1.SandboxClaim{bound("c2", t0.Add(-time.Minute))},
		},
		"another claim, Reaping too, shares it: kept": {
			claim:  reapingClaim("c1", t0.Add(-2*time.Hour), ""),
			others: []*airlockv1alpha1.SandboxClaim{reapingClaim("c2", t0.Add(-time.Hour), "")},
		},
		"a mount role's claim inside it: kept": {
			claim:  reapingClaim("c1", t0.Add(-2*time.Hour), ""),
			others: []*airlockv1alpha1.SandboxClaim{withWorkspace(bound("c2", t0.Add(-time.Minute)), dir+"/repo", "repo")},
		},
		"the last claim, its Failed predecessor replaced: removed": {
			claim:      replacementOf("c1", reapingClaim("c1-r1", t0.Add(-time.Hour), "")),
			others:     []*airlockv1alpha1.SandboxClaim{failed("c1", t0.Add(-2*time.Hour), "c1-r1")},
			wantRemove: true,
		},
		"the other claim is being deleted: removed": {
			claim:      reapingClaim("c1", t0.Add(-2*time.Hour), ""),
			others:     []*airlockv1alpha1.SandboxClaim{deleting(bound("c2", t0.Add(-time.Minute)))},
			wantRemove: true,
		},
		"the other claim was Refused: removed": {
			claim:      reapingClaim("c1", t0.Add(-2*time.Hour), ""),
			others:     []*airlockv1alpha1.SandboxClaim{refused(newClaim("c2", "s", "", t0))},
			wantRemove: true,
		},
		"alone: removed": {
			claim:      reapingClaim("c1", t0.Add(-2*time.Hour), ""),
			wantRemove: true,
		},
	}
	for name, tc := range tests {
		for _, targetPath := range []string{"", "projects/demo"} {
			t.Run(name+", targetPath "+targetPath, func(t *testing.T) {
				_, ctx := ktesting.NewTestContext(t)
				f := newFixture(t).withDefaults()
				claim := tc.claim.DeepCopy()
				claim.Spec.WorkspaceDir, claim.Spec.TargetPath = dir, targetPath
				claim.Status.Phase = airlockv1alpha1.ClaimReaping
				f.claims = append(f.claims, claim)
				for _, o := range tc.others {
					o = o.DeepCopy()
					if o.Spec.MountRole == "" {
						o.Spec.WorkspaceDir = dir
					}
					f.claims = append(f.claims, o)
				}
				f.withChildren(claim)
				c := f.newController(ctx)
				if _, err := syncClaim(ctx, c, keyOf(claim)); err != nil {
					t.Fatal(err)
				}
				switch {
				case targetPath == "" && !tc.wantRemove:
					checkActions(t, f, []string{"delete sandboxclaims " + claim.Name})
				case targetPath == "":
					// Its record: collected past the retention, as the last claim's.
					checkActions(t, f, []string{"create jobs " + workspace.RecordName(dir), "delete sandboxclaims " + claim.Name})
					if args := jobArgs(f.createdJob()); !contains(args, "--remove-only") || !ptr.Deref(f.createdJob().Spec.Suspend, false) {
						t.Errorf("record Job args %q suspend %v, want --remove-only, suspended", args, f.createdJob().Spec.Suspend)
					}
				default:
					// The sync-back only copies; the record is written once it succeeded.
					checkActions(t, f, []string{"create jobs " + claim.Name + "-sync"})
					if args := jobArgs(f.createdJob()); contains(args, "--remove-source") {
						t.Errorf("sync Job args %q; want no --remove-source", args)
					}
				}
			})
		}
	}
}

func withWorkspace(c *airlockv1alpha1.SandboxClaim, dir, mountRole string) *airlockv1alpha1.SandboxClaim {
	c.Spec.WorkspaceDir, c.Spec.MountRole = dir, mountRole
	return c
}

func contains(args []string, s string) bool {
	for _, a := range args {
		if a == s {
			return true
		}
	}
	return false
}

// syncBackCondition returns the claim's last written SyncBack condition.
func (f *fixture) syncBackCondition(name string) *metav1.Condition {
	f.t.Helper()
	return findCondition(f.writtenClaimNamed(name), ConditionSyncBack)
}

// TestSyncBackOneAtATimeOldestFirst: two claims syncing back into one targetPath: the younger
// waits while the older one is Reaping (and says why), the older one goes first, the younger
// waits while the older one's Job runs, is enqueued when that Job finishes, and goes once the
// older claim is gone.
func TestSyncBackOneAtATimeOldestFirst(t *testing.T) {
	older := reapingClaim("older", t0.Add(-2*time.Hour), "projects/demo")
	younger := reapingClaim("younger", t0.Add(-time.Hour), "projects/demo")
	setup := func(t *testing.T, claims []*airlockv1alpha1.SandboxClaim, jobs ...*batchv1.Job) (*fixture, *Controller) {
		_, ctx := ktesting.NewTestContext(t)
		f := newFixture(t).withDefaults()
		for _, c := range claims {
			f.claims = append(f.claims, c)
			f.withChildren(c)
		}
		f.jobs = append(f.jobs, jobs...)
		return f, f.newController(ctx)
	}
	_, ctx := ktesting.NewTestContext(t)

	// 1. The younger is looked at first: it waits for the older, and says so.
	f, c := setup(t, []*airlockv1alpha1.SandboxClaim{older, younger})
	if requeue, err := syncClaim(ctx, c, keyOf(younger)); err != nil || requeue != nil {
		t.Fatalf("sync = %v, %v; want nil, nil (events enqueue it)", requeue, err)
	}
	checkActions(t, f, []string{"update sandboxclaims/status younger"})
	cond := f.syncBackCondition("younger")
	wantMessage := "waiting to sync back into projects/demo: claim older, older, syncs back into projects/demo first"
	if cond == nil || cond.Status != metav1.ConditionUnknown || cond.Reason != ReasonSyncBackWaiting || cond.Message != wantMessage {
		t.Errorf("SyncBack condition %+v, want Unknown/%s %q", cond, ReasonSyncBackWaiting, wantMessage)
	}
	if diff := cmp.Diff([]string{"Normal SyncBackWaiting " + wantMessage}, f.events()); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	// Looked at again with the condition written: no second write, no second event.
	waiting := f.writtenClaimNamed("younger")
	f, c = setup(t, []*airlockv1alpha1.SandboxClaim{older, waiting})
	if _, err := syncClaim(ctx, c, keyOf(waiting)); err != nil {
		t.Fatal(err)
	}
	checkActions(t, f, nil)
	if events := f.events(); len(events) != 0 {
		t.Errorf("events %q for a claim still waiting", events)
	}

	// 2. The older one goes first.
	f, c = setup(t, []*airlockv1alpha1.SandboxClaim{older, waiting})
	if _, err := syncClaim(ctx, c, keyOf(older)); err != nil {
		t.Fatal(err)
	}
	checkActions(t, f, []string{"create jobs older-sync"})

	// 3. While the older one's Job runs, the younger waits for it.
	running := syncJob(older, true, "")
	f, c = setup(t, []*airlockv1alpha1.SandboxClaim{older, waiting}, running)
	if _, err := syncClaim(ctx, c, keyOf(waiting)); err != nil {
		t.Fatal(err)
	}
	checkActions(t, f, []string{"update sandboxclaims/status younger"})
	if cond := f.syncBackCondition("younger"); cond == nil || !strings.Contains(cond.Message, "sync-back Job older-sync of claim older is running into projects/demo") {
		t.Errorf("SyncBack condition %+v, want the running Job named", cond)
	}

	// 4. The older one's Job finishes: the younger (and only the claims syncing back) is enqueued.
	idle := bound("idle", t0.Add(-time.Minute))
	other := reapingClaim("other", t0.Add(-time.Hour), "projects/other")
	_, c = setup(t, []*airlockv1alpha1.SandboxClaim{older, waiting, idle, other}, running)
	done := syncJob(older, true, batchv1.JobComplete)
	running.ResourceVersion, done.ResourceVersion = "1", "2"
	c.syncJobHandler().UpdateFunc(running, done)
	if diff := cmp.Diff([]string{"team-a/older", "team-a/other", "team-a/younger"}, drainQueue(c)); diff != "" {
		t.Errorf("enqueued when the Job finished (-want +got):\n%s", diff)
	}
	// ... and when the older claim is deleted.
	logger, _ := ktesting.NewTestContext(t)
	c.deleteClaim(logger, older)
	if got := drainQueue(c); !contains(got, "team-a/younger") || contains(got, "team-a/idle") {
		t.Errorf("enqueued when the claim ahead was deleted: %q, want team-a/younger (and not team-a/idle)", got)
	}

	// 5. The older claim gone (deleted after its sync-back): the younger goes; its condition
	// says it started.
	f, c = setup(t, []*airlockv1alpha1.SandboxClaim{waiting})
	if _, err := syncClaim(ctx, c, keyOf(waiting)); err != nil {
		t.Fatal(err)
	}
	checkActions(t, f, []string{"create jobs younger-sync", "update sandboxclaims/status younger"})
	if cond := f.syncBackCondition("younger"); cond == nil || cond.Reason != ReasonSyncBackStarted {
		t.Errorf("SyncBack condition %+v, want %s", cond, ReasonSyncBackStarted)
	}
}

// TestSyncBackTurn covers who waits for whom.
func TestSyncBackTurn(t *testing.T) {
	claim := reapingClaim("c1", t0.Add(-time.Hour), "projects/demo")
	before, after := t0.Add(-2*time.Hour), t0.Add(-time.Minute)
	tests := map[string]struct {
		other    *airlockv1alpha1.SandboxClaim
		otherJob batchv1.JobConditionType // "-": none
		noRT     bool                     // the other claim's runtime is gone
		wantWait string
	}{
		"older, Reaping, same target":                  {other: reapingClaim("c0", before, "projects/demo"), otherJob: "-", wantWait: "claim c0, older"},
		"older, Reaping, target inside ours":           {other: reapingClaim("c0", before, "projects/demo/sub"), otherJob: "-", wantWait: "claim c0, older"},
		"older, Reaping, target containing ours":       {other: reapingClaim("c0", before, "projects"), otherJob: "-", wantWait: "claim c0, older"},
		"same age, name first":                         {other: reapingClaim("c0", t0.Add(-time.Hour), "projects/demo"), otherJob: "-", wantWait: "claim c0, older"},
		"same age, name after":                         {other: reapingClaim("c2", t0.Add(-time.Hour), "projects/demo"), otherJob: "-"},
		"younger, its Job running: one at a time":      {other: reapingClaim("c2", after, "projects/demo"), wantWait: "sync-back Job c2-sync of claim c2 is running"},
		"younger, its Job failed (backoff): not ahead": {other: reapingClaim("c2", after, "projects/demo"), otherJob: batchv1.JobFailed},
		"younger, no Job yet":                          {other: reapingClaim("c2", after, "projects/demo"), otherJob: "-"},
		"older, another target":                        {other: reapingClaim("c0", before, "projects/demo2"), otherJob: "-"},
		"older, no target":                             {other: reapingClaim("c0", before, ""), otherJob: "-"},
		"older, Bound (not syncing yet)":               {other: withTarget(bound("c0", before), "projects/demo"), otherJob: "-"},
		"older, Reaping, being deleted: frees the way": {other: beingDeleted(reapingClaim("c0", before, "projects/demo")), otherJob: "-"},
		"older, Reaping, its runtime gone":             {other: reapingClaim("c0", before, "projects/demo"), otherJob: "-", noRT: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(t).withDefaults()
			other := tc.other
			if tc.noRT {
				other.Spec.RuntimeName = "gone"
			}
			f.claims = append(f.claims, claim, other)
			f.withChildren(claim)
			if tc.otherJob != "-" {
				f.jobs = append(f.jobs, syncJob(other, true, tc.otherJob))
			}
			f.checkSyncTurn(ctx, claim, tc.wantWait)
		})
	}
}

// TestSyncBackTurnWaitsForAHeldRetry (issue 39): a held workspace's retry (a person asked for it,
// pkg/controller/workspacegc) into an overlapping target takes the sync-back turn: while its Job
// runs, a claim's sync-back waits, saying so; before, the two copied into one target at once.
func TestSyncBackTurnWaitsForAHeldRetry(t *testing.T) {
	claim := reapingClaim("c1", t0.Add(-time.Hour), "projects/demo")
	tests := map[string]struct {
		target   string
		action   string
		retry    batchv1.JobConditionType // "-": no retry Job
		wantWait string
	}{
		"a retry into the same target running: waits":     {target: "projects/demo", action: airlockv1alpha1.HeldActionRetry, wantWait: "the retry gone-record-retry of a held workspace's sync-back is running into projects/demo"},
		"a retry into a containing target running: waits": {target: "projects", action: airlockv1alpha1.HeldActionRetry, wantWait: "is running into projects"},
		"a retry that ended: goes":                        {target: "projects/demo", action: airlockv1alpha1.HeldActionRetry, retry: batchv1.JobComplete},
		"a retry asked, its Job not made yet: goes":       {target: "projects/demo", action: airlockv1alpha1.HeldActionRetry, retry: "-"},
		"a retry into another target running: goes":       {target: "projects/other", action: airlockv1alpha1.HeldActionRetry},
		"held, no retry asked: goes":                      {target: "projects/demo", retry: "-"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(t).withDefaults()
			f.claims = append(f.claims, claim)
			f.withChildren(claim)
			gone := reapingClaim("gone", t0.Add(-2*time.Hour), tc.target)
			record := workspace.HeldRecord(gone, "workspace-content", sandboxpod.JobConfig(testSyncImage), t0.Add(-time.Hour), "gave up", 3)
			record.Name, record.UID = "gone-record", "uid-gone-record"
			if tc.action != "" {
				record.Annotations[airlockv1alpha1.AnnotationHeldAction] = tc.action
			}
			f.jobs = append(f.jobs, record)
			if tc.retry != "-" {
				retry := workspace.RetryJob(record, "workspace-content", sandboxpod.JobConfig(testSyncImage))
				if tc.retry != "" {
					retry.Status.Conditions = []batchv1.JobCondition{{Type: tc.retry, Status: corev1.ConditionTrue}}
				}
				f.jobs = append(f.jobs, retry)
			}
			f.checkSyncTurn(ctx, claim, tc.wantWait)
		})
	}
}

// checkSyncTurn syncs the Reaping claim c1 and checks that it made its sync-back Job (wantWait
// "") or waits, its SyncBack condition mentioning wantWait.
func (f *fixture) checkSyncTurn(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, wantWait string) {
	t := f.t
	t.Helper()
	c := f.newController(ctx)
	if _, err := syncClaim(ctx, c, keyOf(claim)); err != nil {
		t.Fatal(err)
	}
	if wantWait == "" {
		checkActions(t, f, []string{"create jobs c1-sync"})
		return
	}
	checkActions(t, f, []string{"update sandboxclaims/status c1"})
	if cond := f.syncBackCondition("c1"); cond == nil || cond.Reason != ReasonSyncBackWaiting || !strings.Contains(cond.Message, wantWait) {
		t.Errorf("SyncBack condition %+v, want %s mentioning %q", cond, ReasonSyncBackWaiting, wantWait)
	}
}

// TestSyncBackTurnJobNotCachedYet: a sync-back Job this controller has just created counts as
// running before the cache has it, so that another claim does not start a second one into the
// same target on a cache that does not show it.
func TestSyncBackTurnJobNotCachedYet(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t).withDefaults()
	older := withTarget(bound("older", t0.Add(-3*time.Hour)), "projects/demo")
	older.CreationTimestamp = metav1.NewTime(t0.Add(-2 * time.Hour))
	younger := reapingClaim("younger", t0.Add(-time.Hour), "projects/demo")
	f.claims = append(f.claims, older, younger)
	f.withChildren(younger)
	f.withChildren(older)
	c := f.newController(ctx)
	// The younger goes while the older one is still Bound.
	if _, err := syncClaim(ctx, c, keyOf(younger)); err != nil {
		t.Fatal(err)
	}
	checkActions(t, f, []string{"create jobs younger-sync"})
	created := f.createdJob()
	// The older one is now Reaping; the Job informer has not delivered the younger's Job.
	reaping := older.DeepCopy()
	reaping.Status.Phase = airlockv1alpha1.ClaimReaping
	if err := c.claimIndexer.Update(reaping); err != nil {
		t.Fatal(err)
	}
	f.log = nil
	if _, err := syncClaim(ctx, c, keyOf(reaping)); err != nil {
		t.Fatal(err)
	}
	checkActions(t, f, []string{"update sandboxclaims/status older"})
	if cond := f.syncBackCondition("older"); cond == nil || !strings.Contains(cond.Message, "sync-back Job younger-sync of claim younger is running") {
		t.Errorf("SyncBack condition %+v, want the uncached Job named", cond)
	}
	// Once the informer has it, the cache decides.
	c.syncJobHandler().AddFunc(created)
	if c.syncJobs.has(cache.MetaObjectToName(created)) {
		t.Error("a Job the cache has is still counted as not observed")
	}
}

// TestCleanupFailureRetriedAndReported: a cleanup Job that fails is reported (condition SyncBack
// False, a Warning event), counted, retried after the backoff, and the claim is not deleted.
func TestCleanupFailureRetriedAndReported(t *testing.T) {
	for _, targetPath := range []string{"", "projects/demo"} {
		t.Run("targetPath "+targetPath, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(t).withDefaults()
			claim := reapingClaim("c1", t0.Add(-2*time.Hour), targetPath)
			f.claims = append(f.claims, claim)
			f.withChildren(claim)
			f.jobs = append(f.jobs, syncJob(claim, true, batchv1.JobFailed))
			c := f.newController(ctx)
			requeue, err := syncClaim(ctx, c, keyOf(claim))
			if err != nil {
				t.Fatal(err)
			}
			checkRequeue(t, requeue, ptr.To(syncBackoffBase))
			checkActions(t, f, []string{"update sandboxclaims c1", "update sandboxclaims/status c1"})
			reason, what := ReasonCleanupFailed, "Workspace cleanup Job"
			if targetPath != "" {
				reason, what = ReasonSyncBackFailed, "Sync-back Job"
			}
			wantMessage := what + " c1-sync failed (attempt 1), retrying in 10s: remove failed"
			if cond := f.syncBackCondition("c1"); cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != reason || cond.Message != wantMessage {
				t.Errorf("SyncBack condition %+v, want False/%s %q", cond, reason, wantMessage)
			}
			if diff := cmp.Diff([]string{"Warning " + reason + " " + wantMessage}, f.events()); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}

			// Counted; the backoff over: the failed Job is deleted, then the next attempt made.
			counted := claim.DeepCopy()
			counted.Annotations = map[string]string{AnnotationSyncFailures: "1"}
			f = newFixture(t).withDefaults()
			f.claims = append(f.claims, counted)
			f.withChildren(counted)
			f.jobs = append(f.jobs, syncJob(counted, true, batchv1.JobFailed))
			c = f.newController(ctx)
			f.clock.Step(syncBackoffBase)
			if _, err := syncClaim(ctx, c, keyOf(counted)); err != nil {
				t.Fatal(err)
			}
			checkActions(t, f, []string{"delete jobs c1-sync"})

			f = newFixture(t).withDefaults()
			f.claims = append(f.claims, counted)
			f.withChildren(counted)
			c = f.newController(ctx)
			if _, err := syncClaim(ctx, c, keyOf(counted)); err != nil {
				t.Fatal(err)
			}
			if targetPath == "" {
				// An earlier version's cleanup Job that failed: no second one; the workspace
				// is kept (collected past the retention) and the claim deleted.
				checkActions(t, f, []string{"create jobs " + workspace.RecordName(claimDir("c1")), "delete sandboxclaims c1"})
				return
			}
			checkActions(t, f, []string{"create jobs c1-sync"})
			if got := f.createdJob().Annotations[AnnotationSyncAttempt]; got != "2" {
				t.Errorf("attempt %q, want 2", got)
			}
		})
	}
}

// TestLeftSyncLine: a Reaping claim with a targetPath that is deleted, or starts being deleted,
// may give another its turn; nothing else does.
func TestLeftSyncLine(t *testing.T) {
	r := reapingClaim("c1", t0, "projects/demo")
	if !leftSyncLine(r, nil) || !leftSyncLine(r, beingDeleted(r.DeepCopy())) {
		t.Error("a Reaping claim deleted, or being deleted, does not free the way")
	}
	if leftSyncLine(r, r) || leftSyncLine(reapingClaim("c1", t0, ""), nil) || leftSyncLine(bound("c1", t0), nil) {
		t.Error("a change that frees no sync-back turn counts as one")
	}
}

func withTarget(c *airlockv1alpha1.SandboxClaim, targetPath string) *airlockv1alpha1.SandboxClaim {
	c.Spec.TargetPath = targetPath
	return c
}

func beingDeleted(c *airlockv1alpha1.SandboxClaim) *airlockv1alpha1.SandboxClaim {
	c.DeletionTimestamp = ptr.To(metav1.NewTime(t0))
	c.Finalizers = []string{"test"}
	return c
}

// drainQueue returns the queued keys, sorted, and empties the queue.
func drainQueue(c *Controller) []string {
	var keys []string
	for c.queue.Len() > 0 {
		key, _ := c.queue.Get()
		keys = append(keys, key.String())
		c.queue.Done(key)
		c.queue.Forget(key)
	}
	sort.Strings(keys)
	return keys
}

// TestSyncBackJobNotCreatedNotCounted: a sync-back Job whose creation failed does not count as
// running: nobody waits for a Job that does not exist.
func TestSyncBackJobNotCreatedNotCounted(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t).withDefaults()
	claim := reapingClaim("c1", t0.Add(-time.Hour), "projects/demo")
	f.claims = append(f.claims, claim)
	f.withChildren(claim)
	c := f.newController(ctx)
	jobs := &fakeObjectControl[*batchv1.Job]{next: c.children.jobs, createErr: errors.New("the API server is away")}
	c.children.jobs = jobs
	if _, err := syncClaim(ctx, c, keyOf(claim)); err == nil {
		t.Fatal("sync succeeded though the Job was not created")
	}
	if len(jobs.calls) != 1 {
		t.Fatalf("Job calls %q, want one create", jobs.calls)
	}
	if c.syncJobs.has(cache.ObjectName{Namespace: testNamespace, Name: "c1-sync"}) {
		t.Error("a Job that was not created counts as running")
	}
}
