//go:build e2e

package e2e

import (
	"context"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/claimname"
	"github.com/airlock-dev/airlock/pkg/client"
	"github.com/airlock-dev/airlock/pkg/workspace"
)

// TestLegacyWorkspaceResumed (upgrade without loss; docs/decisions.md, "Per-claim workspaces
// carry the runtime's UID"): a workspace kept at the directory earlier versions gave a claim,
// <ns>/sandboxes/<claim>, is resumed there by the claim the Sandbox API creates for the same
// runtime, session and handle; a handle with no such record gets <ns>/sandboxes/<claim>-<8 hex
// of sha256(runtime UID)>.
func TestLegacyWorkspaceResumed(t *testing.T) {
	retention := time.Hour
	e := newClaimEnv(t, "airlock-legacy-ws", claimEnvOptions{maxConcurrent: 5, maxPerSession: 3, idleTimeout: 8 * time.Second, workspaceRetention: &retention})
	op := startAPIOperator(t, e.ns)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// The claim an earlier version's Sandbox API created, reaped when idle: its workspace kept.
	name := claimname.For(e.runtime.Name, "session-1", "codegen/default")
	legacyDir := e.ns + "/sandboxes/" + name
	earlier := e.createClaimIn(t, "session-1", "codegen/default", "", legacyDir)
	e.waitPhase(t, earlier.Name, airlockv1alpha1.ClaimBound, 60*time.Second)
	e.waitGone(t, earlier.Name, 60*time.Second)
	record := waitKeptRecord(t, e.ns, legacyDir, 30*time.Second)
	if record.Annotations[airlockv1alpha1.AnnotationKeptRuntimeUID] != string(e.runtime.UID) {
		t.Fatalf("record of %s: runtime UID %q, want %q", legacyDir, record.Annotations[airlockv1alpha1.AnnotationKeptRuntimeUID], e.runtime.UID)
	}

	c := op.client(serviceAccountToken(t, e.ns, "agent"))
	got, err := c.Acquire(ctx, client.AcquireRequest{Namespace: e.ns, Runtime: e.runtime.Name, Session: "session-1", Handle: "codegen/default", WaitSeconds: waitSeconds(90)})
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	resumed, err := e.getClaim(ctx, got.Claim)
	if err != nil {
		t.Fatal(err)
	}
	if resumed.Spec.WorkspaceDir != legacyDir || got.ResumedWorkspace == nil || got.ResumedWorkspace.KeptBy != earlier.Name {
		t.Errorf("claim %s: workspace %q, resumed %+v; want %q kept by %s", got.Claim, resumed.Spec.WorkspaceDir, got.ResumedWorkspace, legacyDir, earlier.Name)
	}
	if _, err := kubeClient.BatchV1().Jobs(e.ns).Get(ctx, record.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the legacy record after the resume: %v, want it taken (gone)", err)
	}

	// Another handle, with no kept workspace: the directory with the runtime's UID.
	other, err := c.Acquire(ctx, client.AcquireRequest{Namespace: e.ns, Runtime: e.runtime.Name, Session: "session-1", Handle: "codegen/other", WaitSeconds: waitSeconds(90)})
	if err != nil {
		t.Fatalf("acquire codegen/other: %v", err)
	}
	fresh, err := e.getClaim(ctx, other.Claim)
	if err != nil {
		t.Fatal(err)
	}
	if want := e.ns + "/sandboxes/" + workspace.ClaimDirName(other.Claim, e.runtime.UID); fresh.Spec.WorkspaceDir != want || other.ResumedWorkspace != nil {
		t.Errorf("claim %s: workspace %q resumed %+v, want %q and nothing resumed", other.Claim, fresh.Spec.WorkspaceDir, other.ResumedWorkspace, want)
	}
}
