package agentruntime

// The runtime's finalizer (airlockv1alpha1.FinalizerWorkspaces). Garbage collection deletes a
// runtime's claims without sync-back when the runtime goes (SPEC section 3), and their
// workspaces get records (pkg/controller/workspacegc) only if the operator sees those claims go:
// a runtime deleted while the operator was down left workspaces nobody would ever collect. With
// the finalizer, a runtime being deleted stays (garbage collection deletes the dependents of an
// owner only once the owner is gone, in a background deletion), and with the admission policy
// airlock-workspaces-recorded garbage collection may not delete a claim whose workspace may hold
// files (workspace.HeldFromCollector), in a foreground deletion either. workspacegc writes a
// record of every workspace such a claim may have written, this controller then deletes the
// claim, and once none is left removes the finalizer. An operator that starts after the deletion
// finds the runtime, being deleted, and its claims in its informers' first list.

import (
	"context"
	"encoding/json"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/airlock-dev/airlock/pkg/admission"
	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/workspace"
)

// syncFinalizer adds the finalizer to a runtime that lacks it, and removes it from a runtime
// being deleted once every workspace of its claims has a record. It returns the runtime as it is
// now, and whether it is being deleted (then its status is not written).
func (c *Controller) syncFinalizer(ctx context.Context, rt *airlockv1alpha1.AgentRuntime) (*airlockv1alpha1.AgentRuntime, bool, error) {
	has := slices.Contains(rt.Finalizers, airlockv1alpha1.FinalizerWorkspaces)
	if rt.DeletionTimestamp == nil {
		if has {
			return rt, false, nil
		}
		patched, err := c.patchFinalizers(ctx, rt, append(slices.Clone(rt.Finalizers), airlockv1alpha1.FinalizerWorkspaces))
		return patched, false, err
	}
	if !has {
		return rt, true, nil
	}
	if slices.Contains(rt.Finalizers, metav1.FinalizerOrphanDependents) {
		// kubectl delete --cascade=orphan: garbage collection takes the runtime's owner reference
		// off its claims, which stay and are reaped as orphans, with their sync-back. Until it has
		// (the orphan finalizer's removal enqueues the runtime), they are not this deletion's.
		klog.FromContext(ctx).V(2).Info("Runtime being deleted waits for garbage collection to orphan its claims", "runtime", klog.KObj(rt))
		return rt, true, nil
	}
	waiting, err := c.claimsInTheWay(ctx, rt)
	if err != nil {
		return rt, true, err
	}
	if len(waiting) > 0 {
		klog.FromContext(ctx).V(2).Info("Runtime being deleted waits for its claims' workspaces to be recorded and the claims deleted",
			"runtime", klog.KObj(rt), "claims", waiting)
		return rt, true, nil // a record's add, and a claim's deletion, enqueue the runtime
	}
	klog.FromContext(ctx).V(2).Info("Every workspace of the runtime's claims has a record; letting its deletion go on", "runtime", klog.KObj(rt))
	_, err = c.patchFinalizers(ctx, rt, slices.DeleteFunc(slices.Clone(rt.Finalizers), func(f string) bool {
		return f == airlockv1alpha1.FinalizerWorkspaces
	}))
	return rt, true, err
}

// claimsInTheWay returns the names of the runtime's claims (its controller reference: garbage
// collection's to delete with it) that garbage collection may not delete
// (workspace.HeldFromCollector) and that are still there. It deletes those whose workspace needs
// no record (workspace.RecordedWhenRuntimeGoes) or has one in the Job cache, by UID: such a
// claim is deleted by the operator, not by garbage collection, whether the runtime's deletion is
// in the background or the foreground (docs/nothing-lost.md, "A runtime's deletion").
func (c *Controller) claimsInTheWay(ctx context.Context, rt *airlockv1alpha1.AgentRuntime) ([]string, error) {
	claims, err := c.claimLister.SandboxClaims(rt.Namespace).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	var waiting []string
	for _, claim := range claims {
		if !admission.OwnedBy(claim, rt) || !metav1.IsControlledBy(claim, rt) || !workspace.HeldFromCollector(claim) {
			continue // not garbage collection's to delete with the runtime, or not held from it
		}
		waiting = append(waiting, claim.Name)
		if claim.DeletionTimestamp != nil {
			continue
		}
		if workspace.RecordedWhenRuntimeGoes(claim) {
			_, err := c.jobLister.Jobs(claim.Namespace).Get(workspace.RecordName(workspace.DirOf(claim)))
			switch {
			case apierrors.IsNotFound(err):
				continue // workspacegc writes it
			case err != nil:
				return nil, err
			}
		}
		klog.FromContext(ctx).V(2).Info("Deleting a claim of a runtime being deleted, its workspace recorded", "claim", klog.KObj(claim), "runtime", klog.KObj(rt))
		err := c.airlockClient.AirlockV1alpha1().SandboxClaims(claim.Namespace).Delete(ctx, claim.Name, metav1.DeleteOptions{
			Preconditions: &metav1.Preconditions{UID: &claim.UID},
		})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return nil, err
		}
	}
	return waiting, nil
}

// patchFinalizers writes the runtime's finalizers, conditional on its resourceVersion, and
// returns the runtime as written.
func (c *Controller) patchFinalizers(ctx context.Context, rt *airlockv1alpha1.AgentRuntime, finalizers []string) (*airlockv1alpha1.AgentRuntime, error) {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"finalizers": finalizers, "resourceVersion": rt.ResourceVersion,
	}})
	if err != nil {
		return nil, err
	}
	return c.airlockClient.AirlockV1alpha1().AgentRuntimes(rt.Namespace).Patch(ctx, rt.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager})
}
