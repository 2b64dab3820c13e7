package claim

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/klog/v2/ktesting"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/workspace"
)

func resourceQuantity(s string) resource.Quantity { return resource.MustParse(s) }

// TestSyncReapRequested covers sessions/close: the reap-requested annotation reaps a Binding or
// Bound claim now, with sync-back, and deletes one that never ran.
func TestSyncReapRequested(t *testing.T) {
	// A Failed claim's workspace is kept (its record written) before the claim is deleted.
	keptC1 := "create jobs " + workspace.RecordName(failed("c1", t0, "").Spec.WorkspaceDir)
	tests := map[string]struct {
		claim       *airlockv1alpha1.SandboxClaim
		others      []*airlockv1alpha1.SandboxClaim
		runtimeGone bool
		wantActions []string
		wantPhase   airlockv1alpha1.ClaimPhase
	}{
		"bound and in use: reaped now": {
			claim:       bound("c1", t0.Add(-time.Minute)),
			wantActions: []string{"get sandboxclaims c1", "update sandboxclaims/status c1", "delete pods c1"},
			wantPhase:   airlockv1alpha1.ClaimReaping,
		},
		"binding: reaped now": {
			claim:       binding("c1", t0.Add(-time.Second)),
			wantActions: []string{"get sandboxclaims c1", "update sandboxclaims/status c1", "delete pods c1"},
			wantPhase:   airlockv1alpha1.ClaimReaping,
		},
		"queued: deleted, nothing to save": {
			claim:       newClaim("c1", "s1", airlockv1alpha1.ClaimQueued, t0.Add(-time.Minute)),
			wantActions: []string{"get sandboxclaims c1", "delete sandboxclaims c1"},
		},
		"pending: deleted, nothing to save": {
			claim:       newClaim("c1", "s1", "", t0.Add(-time.Second)),
			wantActions: []string{"get sandboxclaims c1", "delete sandboxclaims c1"},
		},
		// sessions/close ends a Failed claim too: a re-acquire of its handle would otherwise
		// wait on it (202s) until it expires.
		"failed: deleted, nothing ran to save": {
			claim:       failed("c1", t0.Add(-time.Minute), ""),
			wantActions: []string{"delete pods c1", keptC1, "get sandboxclaims c1", "delete sandboxclaims c1"},
		},
		"failed and replaced, its replacement still there: deleted": {
			claim:       failed("c1", t0.Add(-time.Minute), "c1-r1"),
			others:      []*airlockv1alpha1.SandboxClaim{bound("c1-r1", t0.Add(-time.Second))},
			wantActions: []string{"delete pods c1", keptC1, "get sandboxclaims c1", "delete sandboxclaims c1"},
		},
		// Garbage collection may not delete it (airlock-workspaces-recorded): deleted as it would,
		// without reaping or sync-back (orphan.go).
		"runtime gone: deleted as garbage collection would, no reaping": {
			claim:       bound("c1", t0.Add(-time.Minute)),
			runtimeGone: true,
			wantActions: []string{"delete sandboxclaims c1"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(t).withDefaults()
			if tc.runtimeGone {
				f.runtimes = nil
			}
			claim := tc.claim
			claim.Annotations = map[string]string{airlockv1alpha1.AnnotationReapRequested: t0.Format(time.RFC3339)}
			f.claims = append(append(f.claims, claim), tc.others...)
			switch claim.Status.Phase {
			case airlockv1alpha1.ClaimBound, airlockv1alpha1.ClaimBinding:
				f.withChildren(claim)
				f.pods = append(f.pods, newPod(claim, markReady))
			case airlockv1alpha1.ClaimFailed:
				f.withChildren(claim)
				f.pods = append(f.pods, newPod(claim, nil)) // a Failed claim's pod, not yet deleted
			}
			c := f.newController(ctx)
			requeue, err := syncClaim(ctx, c, keyOf(claim))
			if err != nil {
				t.Fatal(err)
			}
			checkRequeue(t, requeue, nil)
			checkActions(t, f, tc.wantActions)
			if tc.wantPhase != "" {
				got := f.writtenClaim()
				if got.Status.Phase != tc.wantPhase || got.Status.Reason != ReasonSessionClosed {
					t.Errorf("status %s/%s, want %s/%s", got.Status.Phase, got.Status.Reason, tc.wantPhase, ReasonSessionClosed)
				}
				if len(got.Status.Addresses) != 0 {
					t.Errorf("a Reaping claim still has addresses %v", got.Status.Addresses)
				}
			}
		})
	}
}
