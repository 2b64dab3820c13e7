package claim

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/airlock-dev/airlock/pkg/admission"
	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
)

// Timers of the lifecycle (SPEC section 3; docs/decisions.md "Claim controller").
const (
	// refusedTTL is how long a Refused claim is kept, so that the Sandbox API and kubectl can see
	// why, before it is deleted.
	refusedTTL = 5 * time.Second
	// minWaitingTTL is the least time a Queued claim waits, and a Failed claim that was not
	// replaced is kept: max(idleTimeout, minWaitingTTL).
	minWaitingTTL = 10 * time.Minute
	// defaultStartupTimeout is SandboxClass.spec.startupTimeout's default.
	defaultStartupTimeout = airlockv1alpha1.DefaultStartupTimeout
	// syncBackoffBase and syncBackoffMax bound the wait before a failed sync-back is retried:
	// 10 s, doubling per failed attempt, at most 5 min.
	syncBackoffBase = 10 * time.Second
	syncBackoffMax  = 5 * time.Minute
	// syncStartTimeout is how long a sync-back Job's pod may take to become ready (be pulled,
	// scheduled, mounted) before the attempt counts as failed; workspace.SyncDeadline bounds a whole
	// attempt (the Job's activeDeadlineSeconds).
	syncStartTimeout = 5 * time.Minute
	// recreateDelay is the wait before creating a child whose name is still taken by an object
	// being deleted (a sync-back Job of an earlier attempt).
	recreateDelay = time.Second
	// decisionWriters bounds the status writes of one namespace's decisions in flight at once.
	decisionWriters = 8
)

// sync reconciles one claim. It returns when to look at the claim again (nil: when an event
// says so), or an error to retry with backoff.
func (c *Controller) sync(ctx context.Context, key cache.ObjectName) (*time.Duration, error) {
	logger := klog.FromContext(ctx)
	start := c.clock.Now()
	logger.V(4).Info("Started syncing claim", "claim", klog.KRef(key.Namespace, key.Name))
	defer func() {
		logger.V(4).Info("Finished syncing claim", "claim", klog.KRef(key.Namespace, key.Name), "elapsed", c.clock.Since(start))
	}()

	claim, err := c.claimLister.SandboxClaims(key.Namespace).Get(key.Name)
	if apierrors.IsNotFound(err) {
		logger.V(4).Info("Claim not found", "claim", klog.KRef(key.Namespace, key.Name))
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if claim.DeletionTimestamp != nil {
		return nil, nil // garbage collection removes the children
	}
	if c.statusWrites.stale(claim) {
		// The cache has not seen the status this controller wrote a moment ago: a sync over it
		// would write again from the same resourceVersion and be refused (409). The update
		// event of that write enqueues the claim.
		logger.V(4).Info("The cache has not seen the claim's last status write yet", "claim", klog.KObj(claim))
		return nil, nil
	}
	rt, err := c.runtime(claim)
	if err != nil {
		return nil, err
	}
	if heldFromGarbageCollection(claim, rt) {
		return nil, c.removeClaim(ctx, claim, ReasonRuntimeGone)
	}
	if orphaned(claim, rt) {
		if requeue, done, err := c.reapOrphan(ctx, claim); done || err != nil {
			return requeue, err
		}
	}

	if _, ok := claim.Annotations[airlockv1alpha1.AnnotationReapRequested]; ok && !runtimeGone(rt) {
		if requeue, done, err := c.syncClosed(ctx, claim, rt); done || err != nil {
			return requeue, err
		}
	}

	switch claim.Status.Phase {
	case "", airlockv1alpha1.ClaimPending, airlockv1alpha1.ClaimQueued:
		return c.syncUndecided(ctx, claim, rt)
	case airlockv1alpha1.ClaimBinding:
		return c.syncBinding(ctx, claim, rt)
	case airlockv1alpha1.ClaimBound:
		return c.syncBound(ctx, claim, rt)
	case airlockv1alpha1.ClaimReaping:
		return c.syncReaping(ctx, claim, rt)
	case airlockv1alpha1.ClaimRefused:
		return c.syncRefused(ctx, claim)
	case airlockv1alpha1.ClaimFailed:
		return c.syncFailed(ctx, claim, rt)
	}
	logger.Info("Claim has an unknown phase; ignoring it", "claim", klog.KObj(claim), "phase", claim.Status.Phase)
	return nil, nil
}

// syncClosed ends a claim whose session was closed (AnnotationReapRequested) by its phase: an
// undecided one is removed, a Binding or Bound one begins reaping, a Failed one is removed with
// its workspace kept. done false: the claim's phase goes on as usual (Reaping, Refused, or a
// Failed one kept to say where its work is).
func (c *Controller) syncClosed(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, rt *airlockv1alpha1.AgentRuntime) (*time.Duration, bool, error) {
	switch claim.Status.Phase {
	case "", airlockv1alpha1.ClaimPending, airlockv1alpha1.ClaimQueued:
		// Nothing ran, so there is nothing to save; a resume member it adopted goes, its
		// workspace kept again if the claim took its record (resume.go).
		if err := c.releaseMember(ctx, claim); err != nil {
			return nil, true, err
		}
		return nil, true, c.removeClaimIfStill(ctx, claim, undecidedPhase(claim), ReasonSessionClosed)
	case airlockv1alpha1.ClaimBinding, airlockv1alpha1.ClaimBound:
		requeue, err := c.beginReaping(ctx, claim, rt, ReasonSessionClosed, messageSessionClosed, nil)
		return requeue, true, err
	case airlockv1alpha1.ClaimFailed:
		if gaveUpSyncBack(claim) {
			return nil, false, nil // its session was closed before: kept to say where its work is (syncback.go)
		}
		// Its pod never became ready, so no tool call ever wrote its workspace: nothing to
		// save. Deleted now, so that a new acquire of the handle does not wait on it; its
		// workspace kept (a kept one it resumed is kept again: failed.go).
		if err := c.stopPods(ctx, claim); err != nil {
			return nil, true, err
		}
		if err := c.keepFailedWorkspace(ctx, claim); err != nil {
			return nil, true, err
		}
		return nil, true, c.removeClaimIfStill(ctx, claim, airlockv1alpha1.ClaimFailed, ReasonSessionClosed)
	}
	return nil, false, nil
}

// runtime returns the claim's AgentRuntime, or nil when it is gone: a runtime of the claim's
// runtimeName that is not the claim's (created again since: admission.OwnedBy) is someone else,
// and answers nil too (orphan.go).
func (c *Controller) runtime(claim *airlockv1alpha1.SandboxClaim) (*airlockv1alpha1.AgentRuntime, error) {
	rt, err := c.runtimeLister.AgentRuntimes(claim.Namespace).Get(claim.Spec.RuntimeName)
	if apierrors.IsNotFound(err) || (err == nil && !admission.OwnedBy(claim, rt)) {
		return nil, nil
	}
	return rt, err
}

// runtimeGone says whether the claim's runtime is gone or being deleted: garbage collection
// deletes the claim without sync-back (SPEC section 3), so nothing is started for it.
func runtimeGone(rt *airlockv1alpha1.AgentRuntime) bool {
	return rt == nil || rt.DeletionTimestamp != nil
}

// waitingTTL is how long a claim may stay Queued, and a Failed claim that was not replaced is kept.
func waitingTTL(rt *airlockv1alpha1.AgentRuntime) time.Duration {
	return max(admission.IdleTimeout(rt), minWaitingTTL)
}

// timeLeft returns how long from now until since+ttl, and whether that is still ahead.
func timeLeft(since time.Time, ttl time.Duration, now time.Time) (time.Duration, bool) {
	left := since.Add(ttl).Sub(now)
	return left, left > 0
}

// lastUsed is when the claim was last used: lastUsedAt, else boundAt, else its creation.
func lastUsed(claim *airlockv1alpha1.SandboxClaim) time.Time {
	switch {
	case claim.Status.LastUsedAt != nil:
		return claim.Status.LastUsedAt.Time
	case claim.Status.BoundAt != nil:
		return claim.Status.BoundAt.Time
	}
	return claim.CreationTimestamp.Time
}
