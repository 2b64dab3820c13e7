package claim

// Reaping: a Binding or Bound claim that is reaped (idle, closed, its pod failed) has its pod
// deleted, its work synced back, and is deleted.

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/airlock-dev/airlock/pkg/admission"
	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
)

// idleRequeue returns when the Bound claim's idle timeout passes.
func (c *Controller) idleRequeue(claim *airlockv1alpha1.SandboxClaim, rt *airlockv1alpha1.AgentRuntime) *time.Duration {
	left, _ := timeLeft(lastUsed(claim), admission.IdleTimeout(rt), c.clock.Now())
	return ptr.To(max(left, 0))
}

// beginReaping moves a Binding or Bound claim to Reaping and starts reaping it. It re-reads the
// claim from the API server first, since the cache may miss a renewal or a phase change; notYet,
// when set, is asked of that fresh object and may put the transition off by the time it returns.
func (c *Controller) beginReaping(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, rt *airlockv1alpha1.AgentRuntime,
	reason, message string, notYet func(fresh *airlockv1alpha1.SandboxClaim) (time.Duration, bool)) (*time.Duration, error) {
	fresh, err := c.claims.Get(ctx, claim.Namespace, claim.Name)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if fresh.UID != claim.UID || fresh.Status.Phase != claim.Status.Phase || fresh.DeletionTimestamp != nil {
		return nil, nil // the cache will catch up and enqueue it
	}
	if notYet != nil {
		if left, ok := notYet(fresh); ok {
			return ptr.To(left), nil
		}
	}
	updated := fresh.DeepCopy()
	setPhase(updated, airlockv1alpha1.ClaimReaping, reason, message)
	updated.Status.Addresses = nil
	written, err := c.updateClaimStatus(ctx, fresh, updated)
	if err != nil {
		return nil, err
	}
	return c.syncReaping(ctx, written, rt)
}

// syncReaping deletes the claim's pod, waits for its pods to go (saying why when one cannot), runs the
// sync-back Job when the claim has a targetPath (or the cleanup Job that removes its workspace
// when it has none: workspace.go), and deletes the claim when its work is saved.
func (c *Controller) syncReaping(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, rt *airlockv1alpha1.AgentRuntime) (*time.Duration, error) {
	if leftToGarbageCollection(claim, rt) {
		return nil, nil // garbage collection deletes the claim, without sync-back
	}
	pods, err := c.claimPods(claim)
	if err != nil {
		return nil, err
	}
	// The operator's stop, when on, asks a running pod's sandboxd to stop before the pod is
	// deleted, and deletes it at once when it did (stop.go); the others are deleted now.
	held, stopRecheck := c.stopSandboxes(ctx, claim, pods)
	if err := c.deletePods(ctx, claim, held); err != nil {
		return nil, err
	}
	if len(pods) > 0 {
		// Their deletion enqueues the claim; a pod that cannot go (its Node lost, or stuck
		// terminating) is reported, and released once Kubernetes says it is dead (nodeloss.go).
		recheck, err := c.waitForPods(ctx, claim, pods)
		return sooner(recheck, stopRecheck), err
	}
	// The pod is gone: the claim no longer holds a slot.
	c.enqueueWaiting(claim.Namespace)
	if cond := findCondition(claim, ConditionPodLost); cond != nil && cond.Status == metav1.ConditionTrue {
		written, err := c.reportPodLoss(ctx, claim, nil, nil)
		if err != nil {
			return nil, err
		}
		claim = written
	}
	return c.syncBack(ctx, claim)
}

// removeClaimIfStill deletes the claim after an uncached GET confirms that it is still in phase,
// with the fresh object's UID and resourceVersion as preconditions.
func (c *Controller) removeClaimIfStill(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, phase airlockv1alpha1.ClaimPhase, reason string) error {
	fresh, err := c.claims.Get(ctx, claim.Namespace, claim.Name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if fresh.UID != claim.UID || fresh.DeletionTimestamp != nil {
		return nil
	}
	freshPhase := fresh.Status.Phase
	if freshPhase == "" {
		freshPhase = airlockv1alpha1.ClaimPending
	}
	if want := phase; freshPhase != want && !(want == airlockv1alpha1.ClaimQueued && freshPhase == airlockv1alpha1.ClaimPending) {
		return nil // moved on; the cache will catch up and enqueue it
	}
	return c.delete(ctx, fresh, &metav1.Preconditions{UID: &fresh.UID, ResourceVersion: &fresh.ResourceVersion}, reason)
}

// removeClaim deletes the claim, if it is still the object with the claim's UID.
func (c *Controller) removeClaim(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, reason string) error {
	return c.delete(ctx, claim, &metav1.Preconditions{UID: &claim.UID}, reason)
}

func (c *Controller) delete(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, preconditions *metav1.Preconditions, reason string) error {
	klog.FromContext(ctx).V(2).Info("Deleting claim", "claim", klog.KObj(claim), "reason", reason)
	err := c.claims.Delete(ctx, claim.Namespace, claim.Name, preconditions)
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil // gone, or changed: a changed claim is enqueued again by its update
	}
	if err != nil {
		return err
	}
	c.statusWrites.deleted(claim.UID)
	c.recorder.Eventf(claim, corev1.EventTypeNormal, reason, MessageDeleted, reason)
	return nil
}
