package claim

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/airlock-dev/airlock/pkg/admission"
	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/workspace"
)

// A claim is its runtime's by name and UID (admission.OwnedBy): an AgentRuntime deleted and
// created again under the same name is someone else, and c.runtime answers nil for the old
// runtime's claims, as for a runtime that is gone. Such a claim goes one of two ways:
//
//   - It still has its controller ownerReference: garbage collection deletes it (its owner's UID
//     is gone), without sync-back (SPEC section 3), and this controller starts nothing for it.
//     But garbage collection may not delete one whose workspace may hold files
//     (workspace.HeldFromCollector, the policy airlock-workspaces-recorded): its runtime's
//     deletion waits for the operator to delete it (pkg/controller/agentruntime), unless a person
//     took the runtime's finalizer off first. Such a claim is deleted here, as garbage collection
//     would (ReasonRuntimeGone), and workspacegc records its workspace from the deletion.
//   - It has none (kubectl delete ar --cascade=orphan, or an ownerReference removed): nothing would
//     ever delete it, and nobody can renew or close it (the Sandbox API answers only the runtime
//     that owns a claim). It is reaped like any other, with sync-back, at once: a Binding or Bound
//     claim turns Reaping (ReasonOrphaned), an undecided one is refused (RuntimeNotFound), and
//     Failed and Refused claims expire as they do.

// ReasonOrphaned is the reason of a claim reaped because its runtime is gone and nothing else
// would delete it.
const ReasonOrphaned = "Orphaned"

// ReasonRuntimeGone is the reason of a claim deleted because its runtime is gone and garbage
// collection may not delete it.
const ReasonRuntimeGone = "RuntimeGone"

// heldFromGarbageCollection says whether the claim's runtime is gone (by name and UID; not one
// being deleted, whose finalizer deletes its claims), the claim is garbage collection's to delete
// (its controller ownerReference), and garbage collection may not (workspace.HeldFromCollector).
func heldFromGarbageCollection(claim *airlockv1alpha1.SandboxClaim, rt *airlockv1alpha1.AgentRuntime) bool {
	return rt == nil && metav1.GetControllerOf(claim) != nil && workspace.HeldFromCollector(claim)
}

const messageOrphaned = "its AgentRuntime %s (uid %s) is gone and the claim has no owner to be deleted with: reaped, with sync-back"

// leftToGarbageCollection says whether the claim's runtime is gone (or being deleted) and the
// claim has a controller ownerReference: garbage collection deletes it, without sync-back.
func leftToGarbageCollection(claim *airlockv1alpha1.SandboxClaim, rt *airlockv1alpha1.AgentRuntime) bool {
	return runtimeGone(rt) && metav1.GetControllerOf(claim) != nil
}

// orphaned says whether the claim's runtime is gone and nothing but this controller will delete
// the claim.
func orphaned(claim *airlockv1alpha1.SandboxClaim, rt *airlockv1alpha1.AgentRuntime) bool {
	return runtimeGone(rt) && metav1.GetControllerOf(claim) == nil
}

// reapOrphan turns an orphaned Binding or Bound claim Reaping. done says whether it did (or the
// claim is in another phase and is left to its phase's sync).
func (c *Controller) reapOrphan(ctx context.Context, claim *airlockv1alpha1.SandboxClaim) (*time.Duration, bool, error) {
	switch claim.Status.Phase {
	case airlockv1alpha1.ClaimBinding, airlockv1alpha1.ClaimBound:
	default:
		return nil, false, nil
	}
	klog.FromContext(ctx).V(2).Info("The claim's runtime is gone and the claim has no owner; reaping it", "claim", klog.KObj(claim), "runtime", claim.Spec.RuntimeName, "runtimeUID", admission.RuntimeUID(claim))
	requeue, err := c.beginReaping(ctx, claim, nil, ReasonOrphaned, fmt.Sprintf(messageOrphaned, claim.Spec.RuntimeName, admission.RuntimeUID(claim)), nil)
	return requeue, true, err
}
