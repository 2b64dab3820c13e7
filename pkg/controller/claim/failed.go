package claim

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/airlock-dev/airlock/pkg/admission"
	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
)

// Failed claims and their replacement (SPEC section 3, "Failure and replacement, once").
//
// Whether a Failed claim is replaced follows from the claims themselves: a claim whose
// spec.replaces names it (admission.Replaced, the same function admission counts with). The
// Sandbox API only creates the replacement; the leader links the two by writing the Failed
// claim's status.replacedBy once it has seen the replacement. A Failed claim is kept while its
// replacement exists, so that the next acquire of the handle finds the replacement rather than
// making a second claim, and deleted (ReplacementGone) once the replacement is gone, which is
// confirmed with the API server: the cache may not have a replacement created a moment ago.

// syncFailed keeps a Failed claim without a pod (kept while its pods go), links it to its replacement, keeps it
// while the replacement lives, and deletes it max(idleTimeout, 10m) after it failed when it was
// never replaced.
func (c *Controller) syncFailed(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, rt *airlockv1alpha1.AgentRuntime) (*time.Duration, error) {
	if err := c.stopPods(ctx, claim); err != nil {
		return nil, err
	}
	pods, err := c.claimPods(claim)
	if err != nil {
		return nil, err
	}
	if len(pods) > 0 {
		// Kept while its pods go: a replacement on the same workspace waits for them (binding.go,
		// waitForPredecessor), and a pod that cannot go is reported (nodeloss.go).
		return c.waitForPods(ctx, claim, pods)
	}
	if cond := findCondition(claim, ConditionPodLost); cond != nil && cond.Status == metav1.ConditionTrue {
		_, err := c.reportPodLoss(ctx, claim, nil, nil)
		return nil, err // its update syncs it again
	}
	replacement, err := c.cachedReplacement(claim)
	if err != nil {
		return nil, err
	}
	if replacement != "" {
		// Its pods are gone: a replacement waiting for them may start.
		c.queue.Add(cache.ObjectName{Namespace: claim.Namespace, Name: replacement})
		if claim.Status.ReplacedBy == replacement {
			return nil, nil // kept; the replacement's deletion enqueues it
		}
		updated := claim.DeepCopy()
		updated.Status.ReplacedBy = replacement
		_, err := c.updateClaimStatus(ctx, claim, updated)
		return nil, err
	}
	if claim.Status.ReplacedBy != "" {
		return nil, c.removeIfReplacementGone(ctx, claim)
	}
	if left, ok := timeLeft(conditionTime(claim, ConditionReady, metav1.ConditionFalse), waitingTTL(rt), c.clock.Now()); ok {
		return ptr.To(left), nil
	}
	if err := c.keepFailedWorkspace(ctx, claim); err != nil {
		return nil, err
	}
	return nil, c.removeClaimIfStill(ctx, claim, airlockv1alpha1.ClaimFailed, ReasonFailedExpired)
}

// keepFailedWorkspace writes the record of a Failed claim's workspace before the claim is deleted
// (it expired, its replacement went, its session was closed), so that the workspace is kept and
// collected as any other: resumed by the next claim of the handle within the runtime's
// retention, collected past it or when the runtime goes (kept.go). Its pod never became ready,
// so no agent wrote there; but the claim may have resumed a kept workspace (taken its record)
// before its pod failed, and that work is kept again rather than left without a record. A claim
// that never got a frozen record never had a pod, so there is nothing to keep. A claim whose
// sync-back gave up gets no record: its workspace holds work that never reached its target, and
// a collection would destroy the only copy; it is left in the content volume, as its message
// says (docs/nothing-lost.md).
func (c *Controller) keepFailedWorkspace(ctx context.Context, claim *airlockv1alpha1.SandboxClaim) error {
	if claim.Status.Frozen == nil || gaveUpSyncBack(claim) {
		return nil
	}
	return c.keepWorkspace(ctx, claim)
}

// cachedReplacement returns the name of the claim in the cache that replaces claim, or "".
func (c *Controller) cachedReplacement(claim *airlockv1alpha1.SandboxClaim) (string, error) {
	claims, err := c.claimLister.SandboxClaims(claim.Namespace).List(labels.Everything())
	if err != nil {
		return "", err
	}
	if !admission.Replaced(claims)[claim.Name] {
		return "", nil
	}
	for _, other := range claims {
		if other.Spec.Replaces == claim.Name && other.DeletionTimestamp == nil && other.Status.Phase != airlockv1alpha1.ClaimRefused {
			return other.Name, nil
		}
	}
	return "", nil
}

// removeIfReplacementGone deletes a Failed claim whose replacement (status.replacedBy) is not in
// the cache, once the API server confirms that it is gone: a replacement created a moment ago
// (by an operator that wrote replacedBy before creating it) may not be in the cache yet.
func (c *Controller) removeIfReplacementGone(ctx context.Context, claim *airlockv1alpha1.SandboxClaim) error {
	fresh, err := c.claims.Get(ctx, claim.Namespace, claim.Status.ReplacedBy)
	switch {
	case err == nil && fresh.Spec.Replaces == claim.Name && fresh.DeletionTimestamp == nil:
		klog.FromContext(ctx).V(4).Info("The replacement of a Failed claim is not in the cache yet; keeping the claim",
			"claim", klog.KObj(claim), "replacement", klog.KObj(fresh))
		return nil // its add event enqueues the claim
	case err != nil && !apierrors.IsNotFound(err):
		return err
	}
	if err := c.keepFailedWorkspace(ctx, claim); err != nil {
		return err
	}
	return c.removeClaimIfStill(ctx, claim, airlockv1alpha1.ClaimFailed, ReasonReplacementGone)
}
