package agentruntime

// The runtime's finalizer (airlockv1alpha1.FinalizerWorkspaces). Garbage collection deletes a
// runtime's claims without sync-back once the runtime is gone (SPEC section 3), and their
// workspaces get records (pkg/controller/workspacegc) only if the operator sees those claims go:
// a runtime deleted while the operator was down left workspaces nobody would ever collect. With
// the finalizer, a runtime being deleted stays, and its claims with it (garbage collection deletes
// the dependents of an owner only once the owner is gone, unless the deletion is in the
// foreground), until workspacegc has written a record of every workspace its claims may have
// written; then the finalizer is removed, and the claims go. An operator that starts after the
// deletion finds the runtime, being deleted, and its claims in its informers' first list.

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
	missing, err := c.unrecordedWorkspaces(rt)
	if err != nil {
		return rt, true, err
	}
	if len(missing) > 0 {
		klog.FromContext(ctx).V(2).Info("Runtime being deleted waits for the records of its claims' workspaces",
			"runtime", klog.KObj(rt), "claims", missing)
		return rt, true, nil // a record's add enqueues the runtime
	}
	klog.FromContext(ctx).V(2).Info("Every workspace of the runtime's claims has a record; letting its deletion go on", "runtime", klog.KObj(rt))
	_, err = c.patchFinalizers(ctx, rt, slices.DeleteFunc(slices.Clone(rt.Finalizers), func(f string) bool {
		return f == airlockv1alpha1.FinalizerWorkspaces
	}))
	return rt, true, err
}

// unrecordedWorkspaces returns the names of the runtime's claims whose workspace gets a record
// when the runtime goes (workspace.RecordedWhenRuntimeGoes) and has none in the Job cache yet.
func (c *Controller) unrecordedWorkspaces(rt *airlockv1alpha1.AgentRuntime) ([]string, error) {
	claims, err := c.claimLister.SandboxClaims(rt.Namespace).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	var missing []string
	for _, claim := range claims {
		if !admission.OwnedBy(claim, rt) || !workspace.RecordedWhenRuntimeGoes(claim) {
			continue
		}
		_, err := c.jobLister.Jobs(claim.Namespace).Get(workspace.RecordName(workspace.DirOf(claim)))
		switch {
		case apierrors.IsNotFound(err):
			missing = append(missing, claim.Name)
		case err != nil:
			return nil, err
		}
	}
	return missing, nil
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
