//go:build e2e

package e2e

import (
	"context"
	"slices"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/workspace"
)

// TestWarmKeptWorkspaceResumed (issue 39): the workspace of a claim that adopted a warm member is
// kept as any other (its record resumable, kept for the claim's own directory), and the next
// claim of the same runtime, session and handle resumes it, cold, in the member's directory
// (status.workspaceDir, status.resumedWorkspace, its pod's subPath), rather than adopting another
// member. Before, it was collected at once and the next claim started empty. Resume members are
// off here (resumeWindow 0): the cold resume is what is tested (TestResumeMemberAdopted tests
// them).
func TestWarmKeptWorkspaceResumed(t *testing.T) {
	retention := time.Hour
	e := newClaimEnv(t, "airlock-warm-kept", claimEnvOptions{maxConcurrent: 5, maxPerSession: 3, maxInstances: 10,
		idleTimeout: 5 * time.Second, workspaceRetention: &retention})
	e.updateRegistry(t, func(r *airlockv1alpha1.ToolRegistry) {
		r.Spec.Sandboxes[0].Warm = 1
		r.Spec.Sandboxes[0].ResumeWindow = &metav1.Duration{}
	})
	startClaimOperator(t, e.ns)
	e.waitWarm(t, 1, 60*time.Second)

	first := e.waitPhase(t, e.createClaim(t, "session-1", "codegen/default", "").Name, airlockv1alpha1.ClaimBound, 30*time.Second)
	if first.Status.Warm == nil {
		t.Fatalf("the first claim was bound cold: %+v", first.Status)
	}
	memberDir := first.Status.Warm.WorkspaceDir
	e.waitGone(t, first.Name, 60*time.Second) // idle: reaped, kept
	record := waitKeptRecord(t, e.ns, memberDir, 30*time.Second)
	if record.Annotations[airlockv1alpha1.AnnotationKeptResumable] == airlockv1alpha1.AnnotationValueNotResumable {
		t.Errorf("the warm member's workspace was kept not resumable: %v", record.Annotations)
	}
	if got, want := record.Labels[airlockv1alpha1.LabelKeptFor], workspace.RecordName(first.Spec.WorkspaceDir); got != want {
		t.Errorf("record kept for %q, want %q", got, want)
	}
	e.waitWarm(t, 1, 60*time.Second) // a member is there to adopt: the next claim resumes instead

	second := e.waitPhase(t, e.createClaim(t, "session-1", "codegen/default", "").Name, airlockv1alpha1.ClaimBound, 60*time.Second)
	if second.Status.Warm != nil || second.Status.WorkspaceDir != memberDir {
		t.Errorf("the next claim: warm %+v workspaceDir %q, want cold in %q", second.Status.Warm, second.Status.WorkspaceDir, memberDir)
	}
	if r := second.Status.ResumedWorkspace; r == nil || r.KeptBy != first.Name {
		t.Errorf("resumedWorkspace %+v, want kept by %s", r, first.Name)
	}
	pod := e.pod(t, second.Name)
	var subPaths []string
	for _, m := range pod.Spec.Containers[0].VolumeMounts {
		subPaths = append(subPaths, m.SubPath)
	}
	if !slices.Contains(subPaths, memberDir) {
		t.Errorf("the resuming pod mounts %v, want %s", subPaths, memberDir)
	}
	if _, err := kubeClient.BatchV1().Jobs(e.ns).Get(context.Background(), record.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the record after the resume: %v, want it taken", err)
	}
	// Kept again, for its own directory, when it is reaped in turn.
	e.waitGone(t, second.Name, 60*time.Second)
	again := waitKeptRecord(t, e.ns, memberDir, 30*time.Second)
	if again.Labels[airlockv1alpha1.LabelKeptFor] != workspace.RecordName(second.Spec.WorkspaceDir) || again.Labels[airlockv1alpha1.LabelClaim] != second.Name {
		t.Errorf("kept again: labels %v", again.Labels)
	}
}

// TestRuntimeDeletedWhileOperatorDown (issue 39): a runtime deleted while no operator runs keeps
// its claims (its finalizer holds it, and garbage collection deletes dependents only once their
// owner is gone); the operator that starts next records every workspace its claims wrote, lets
// the deletion go on, and collects them. Before, garbage collection deleted the claims at once and
// their workspaces stayed in the content volume, never collected.
func TestRuntimeDeletedWhileOperatorDown(t *testing.T) {
	ctx := context.Background()
	e := newClaimEnv(t, "airlock-rt-down", claimEnvOptions{maxConcurrent: 5, maxPerSession: 3})
	op := startClaimOperator(t, e.ns)
	c := e.waitPhase(t, e.createClaim(t, "session-1", "codegen/default", "").Name, airlockv1alpha1.ClaimBound, 60*time.Second)
	eventually(t, 30*time.Second, "the runtime's finalizer", func(ctx context.Context) (bool, error) {
		rt, err := airlockClient.AirlockV1alpha1().AgentRuntimes(e.ns).Get(ctx, e.runtime.Name, metav1.GetOptions{})
		return err == nil && slices.Contains(rt.Finalizers, airlockv1alpha1.FinalizerWorkspaces), err
	})
	_ = op.stop(t, syscall.SIGKILL)

	if err := airlockClient.AirlockV1alpha1().AgentRuntimes(e.ns).Delete(ctx, e.runtime.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	rt, err := airlockClient.AirlockV1alpha1().AgentRuntimes(e.ns).Get(ctx, e.runtime.Name, metav1.GetOptions{})
	if err != nil || rt.DeletionTimestamp == nil {
		t.Fatalf("the runtime right after its deletion: %v (%v), want it there, being deleted", rt, err)
	}
	if _, err := e.getClaim(ctx, c.Name); err != nil {
		t.Fatalf("the claim of the runtime being deleted: %v, want it kept", err)
	}

	startClaimOperator(t, e.ns)
	record := waitKeptRecord(t, e.ns, c.Spec.WorkspaceDir, 60*time.Second)
	if record.Annotations[airlockv1alpha1.AnnotationKeptRuntimeUID] != string(e.runtime.UID) {
		t.Errorf("record of runtime UID %q, want %q", record.Annotations[airlockv1alpha1.AnnotationKeptRuntimeUID], e.runtime.UID)
	}
	eventually(t, 60*time.Second, "the runtime and its claim gone", func(ctx context.Context) (bool, error) {
		_, rtErr := airlockClient.AirlockV1alpha1().AgentRuntimes(e.ns).Get(ctx, e.runtime.Name, metav1.GetOptions{})
		_, claimErr := e.getClaim(ctx, c.Name)
		return apierrors.IsNotFound(rtErr) && apierrors.IsNotFound(claimErr), nil
	})
	waitRecordCollected(t, e.ns, c.Spec.WorkspaceDir, 90*time.Second)
}
