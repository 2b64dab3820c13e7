package claim

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
)

// TestClaimOfAnEarlierRuntime: a claim whose runtime was deleted and created again under the same
// name (another UID) is not the new runtime's. With its controller ownerReference (the deleted
// runtime's) it is garbage collection's: it is not reaped nor renewed on the new runtime's terms,
// and nothing is written, unless garbage collection may not delete it (a workspace that may hold
// files: airlock-workspaces-recorded), when it is deleted here, without sync-back, as garbage
// collection would (before, it stayed for ever once a person had taken the runtime's finalizer
// off). Orphaned (no ownerReference: kubectl delete --cascade=orphan), it is reaped at once, with
// sync-back, whether a runtime of the name exists or none does.
func TestClaimOfAnEarlierRuntime(t *testing.T) {
	tests := map[string]struct {
		orphan      bool
		recreated   bool // a runtime of the same name and another UID exists
		mountRole   bool // garbage collection may delete it
		wantActions []string
	}{
		"owned by the deleted runtime, name taken again: deleted as garbage collection would": {recreated: true,
			wantActions: []string{"delete sandboxclaims c1"}},
		"owned by the deleted runtime, none of the name: deleted as garbage collection would": {
			wantActions: []string{"delete sandboxclaims c1"}},
		"owned by the deleted runtime, a mount role's: garbage collection's": {mountRole: true},
		"orphaned, name taken again: reaped with sync-back": {orphan: true, recreated: true,
			wantActions: []string{"get sandboxclaims c1", "update sandboxclaims/status c1", "delete pods c1"}},
		"orphaned, none of the name: reaped with sync-back": {orphan: true,
			wantActions: []string{"get sandboxclaims c1", "update sandboxclaims/status c1", "delete pods c1"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(t).withDefaults()
			if tc.recreated {
				f.runtimes[0].UID = types.UID("uid-rt-agent-created-again")
			} else {
				f.runtimes = nil
			}
			// Idle by the runtime's idleTimeout: the new runtime's terms would reap it as idle.
			claim := bound("c1", t0.Add(-2*time.Hour))
			claim.Spec.TargetPath = "projects/demo"
			if tc.orphan {
				claim.OwnerReferences = nil
			}
			if tc.mountRole {
				claim.Spec.MountRole = "repo"
			}
			f.claims = append(f.claims, claim)
			f.withChildren(claim)
			f.pods = append(f.pods, newPod(claim, markReady))
			c := f.newController(ctx)
			if _, err := syncClaim(ctx, c, keyOf(claim)); err != nil {
				t.Fatal(err)
			}
			checkActions(t, f, tc.wantActions)
			if tc.orphan {
				if got := f.writtenClaim(); got.Status.Phase != airlockv1alpha1.ClaimReaping || got.Status.Reason != ReasonOrphaned || len(got.Status.Addresses) != 0 {
					t.Errorf("status %s/%s %q, addresses %v: want Reaping/%s and none", got.Status.Phase, got.Status.Reason, got.Status.Message, got.Status.Addresses, ReasonOrphaned)
				}
			}
		})
	}
}

// TestOrphanedReapingSyncsBack: an orphaned claim that is Reaping, its runtime gone and its pod
// gone, runs its sync-back like any other (a claim left to garbage collection would not).
func TestOrphanedReapingSyncsBack(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t).withDefaults()
	f.runtimes = nil
	claim := bound("c1", t0.Add(-time.Hour))
	claim.Status.Phase, claim.Status.Reason = airlockv1alpha1.ClaimReaping, ReasonOrphaned
	claim.Spec.TargetPath = "projects/demo"
	claim.OwnerReferences = nil
	f.claims = append(f.claims, claim)
	c := f.newController(ctx)
	if _, err := syncClaim(ctx, c, keyOf(claim)); err != nil {
		t.Fatal(err)
	}
	checkActions(t, f, []string{"create jobs c1-sync"})
}
