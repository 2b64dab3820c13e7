//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
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
// owner is gone); the operator that starts next records every workspace its claims wrote, deletes
// the claims, lets the deletion go on, and collects them. Before, garbage collection deleted the
// claims at once and their workspaces stayed in the content volume, never collected.
//
// In the foreground (kubectl delete --cascade=foreground) garbage collection deletes the claims
// first, whatever the finalizer: the admission policy airlock-workspaces-recorded refuses it
// (manifests/rbac/admission_policy_workspaces.yaml), and the claim stays until the operator has
// recorded its workspace. Before, the foreground deletion took the claim while the operator was
// down, and its workspace was never recorded nor collected.
func TestRuntimeDeletedWhileOperatorDown(t *testing.T) {
	for name, propagation := range map[string]metav1.DeletionPropagation{
		"background": metav1.DeletePropagationBackground,
		"foreground": metav1.DeletePropagationForeground,
	} {
		t.Run(name, func(t *testing.T) { testRuntimeDeletedWhileOperatorDown(t, propagation) })
	}
}

func testRuntimeDeletedWhileOperatorDown(t *testing.T, propagation metav1.DeletionPropagation) {
	ctx := context.Background()
	e := newClaimEnv(t, "airlock-rt-down-"+strings.ToLower(string(propagation)), claimEnvOptions{maxConcurrent: 5, maxPerSession: 3})
	op := startClaimOperator(t, e.ns)
	c := e.waitPhase(t, e.createClaim(t, "session-1", "codegen/default", "").Name, airlockv1alpha1.ClaimBound, 60*time.Second)
	eventually(t, 30*time.Second, "the runtime's finalizer", func(ctx context.Context) (bool, error) {
		rt, err := airlockClient.AirlockV1alpha1().AgentRuntimes(e.ns).Get(ctx, e.runtime.Name, metav1.GetOptions{})
		return err == nil && slices.Contains(rt.Finalizers, airlockv1alpha1.FinalizerWorkspaces), err
	})
	_ = op.stop(t, syscall.SIGKILL)

	if err := airlockClient.AirlockV1alpha1().AgentRuntimes(e.ns).Delete(ctx, e.runtime.Name, metav1.DeleteOptions{PropagationPolicy: &propagation}); err != nil {
		t.Fatal(err)
	}
	rt, err := airlockClient.AirlockV1alpha1().AgentRuntimes(e.ns).Get(ctx, e.runtime.Name, metav1.GetOptions{})
	if err != nil || rt.DeletionTimestamp == nil {
		t.Fatalf("the runtime right after its deletion: %v (%v), want it there, being deleted", rt, err)
	}
	if propagation == metav1.DeletePropagationForeground {
		waitGarbageCollectorRefused(t, c.Name)
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

// waitGarbageCollectorRefused waits until kube-controller-manager's log (the cluster hack/e2e.sh
// started: AIRLOCK_E2E_CLUSTER_DIR) shows garbage collection's deletion of the claim refused by
// the policy airlock-workspaces-recorded: it tried, and the claim stayed.
func waitGarbageCollectorRefused(t *testing.T, claim string) {
	t.Helper()
	dir := os.Getenv("AIRLOCK_E2E_CLUSTER_DIR")
	if dir == "" {
		t.Log("AIRLOCK_E2E_CLUSTER_DIR is not set (a cluster hack/e2e.sh did not start): kube-controller-manager's log, which would say that garbage collection tried, is not here; the record and the collection are still checked")
		return
	}
	eventually(t, 60*time.Second, "garbage collection's deletion of the claim refused by airlock-workspaces-recorded", func(context.Context) (bool, error) {
		b, err := os.ReadFile(filepath.Join(dir, "kube-controller-manager.log"))
		if err != nil {
			return false, err
		}
		for line := range strings.Lines(string(b)) {
			if strings.Contains(line, "airlock-workspaces-recorded") && strings.Contains(line, claim) {
				return true, nil
			}
		}
		return false, nil
	})
}
