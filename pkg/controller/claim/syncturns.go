package claim

// Sync-back turns (issue 13; docs/decisions.md, "Workspaces are collected"): sync-backs whose
// targetPaths overlap, in one namespace, run one at a time, oldest claim first. A Reaping claim's
// own sync builds its sync-back Job and asks for its turn (askSyncTurn); the turn is taken on a
// namespace-keyed queue of its own, as admission is: the workqueue never hands one namespace to
// two workers at once, so the check that the way is free (syncAhead) and the Job's creation are
// one step per namespace without any lock held across the API call, and a slow create holds up
// only that namespace's turns, never a claim worker.

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/controller/workers"
)

// turnRequest is a Reaping claim's request for its sync-back turn: the claim as its sync last
// wrote or read it, and the Job its sync built.
type turnRequest struct {
	claim   *airlockv1alpha1.SandboxClaim
	job     *batchv1.Job
	attempt int
}

// turnRequests are the requests not yet taken, by namespace and claim UID (a newer request of a
// claim replaces its older one).
type turnRequests struct {
	mu   sync.Mutex
	byNS map[string]map[types.UID]turnRequest
}

func (r *turnRequests) add(namespace string, req turnRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byNS == nil {
		r.byNS = map[string]map[types.UID]turnRequest{}
	}
	if r.byNS[namespace] == nil {
		r.byNS[namespace] = map[types.UID]turnRequest{}
	}
	r.byNS[namespace][req.claim.UID] = req
}

// take removes and returns the namespace's requests.
func (r *turnRequests) take(namespace string) []turnRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	reqs := make([]turnRequest, 0, len(r.byNS[namespace]))
	for _, req := range r.byNS[namespace] {
		reqs = append(reqs, req)
	}
	delete(r.byNS, namespace)
	return reqs
}

// putBack returns a request that could not be served (an error) unless a newer one came since.
func (r *turnRequests) putBack(namespace string, req turnRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, newer := r.byNS[namespace][req.claim.UID]; newer {
		return
	}
	if r.byNS == nil {
		r.byNS = map[string]map[types.UID]turnRequest{}
	}
	if r.byNS[namespace] == nil {
		r.byNS[namespace] = map[types.UID]turnRequest{}
	}
	r.byNS[namespace][req.claim.UID] = req
}

// pending is the number of the namespace's requests not yet taken.
func (r *turnRequests) pending(namespace string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.byNS[namespace])
}

// forget drops the requests of a claim that is gone.
func (r *turnRequests) forget(namespace string, uid types.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.byNS[namespace], uid)
	if len(r.byNS[namespace]) == 0 {
		delete(r.byNS, namespace)
	}
}

// askSyncTurn asks for the claim's sync-back turn, to create job (its attempt-th): the namespace's
// turn pass creates it, or records why the claim waits. The claim is synced again when its Job
// appears, or when its condition says it waits.
func (c *Controller) askSyncTurn(claim *airlockv1alpha1.SandboxClaim, job *batchv1.Job, attempt int) {
	c.turns.add(claim.Namespace, turnRequest{claim: claim, job: job, attempt: attempt})
	c.turnQueue.Add(claim.Namespace)
}

func (c *Controller) runSyncTurnWorker(ctx context.Context) {
	for c.processNextSyncTurns(ctx) {
	}
}

func (c *Controller) processNextSyncTurns(ctx context.Context) bool {
	namespace, shutdown := c.turnQueue.Get()
	if shutdown {
		return false
	}
	defer c.turnQueue.Done(namespace)
	switch err := c.takeSyncTurns(ctx, namespace); {
	case workers.NamespaceTerminating(err):
		// No sync-back Job can be created in a namespace being deleted; its claims go with it.
		klog.FromContext(ctx).V(2).Info("Not taking sync-back turns again: the namespace is being deleted", "namespace", namespace, "err", err)
	case apierrors.IsConflict(err):
		// A waiting claim's condition written from a claim the cache had not updated yet: normal.
		klog.FromContext(ctx).V(4).Info("Conflict taking sync-back turns; taking them again", "namespace", namespace, "err", err)
		c.turnQueue.AddRateLimited(namespace)
		return true
	case err != nil:
		utilruntime.HandleErrorWithContext(ctx, err, "Error taking the namespace's sync-back turns", "namespace", namespace)
		c.turnQueue.AddRateLimited(namespace)
		return true
	}
	c.turnQueue.Forget(namespace)
	return true
}

// takeSyncTurns serves the namespace's turn requests, oldest claim first: a claim whose way is
// free gets its Job, one that must wait says why. A request that fails is put back and the pass
// retried with backoff.
func (c *Controller) takeSyncTurns(ctx context.Context, namespace string) error {
	type pending struct {
		req   turnRequest
		claim *airlockv1alpha1.SandboxClaim
	}
	var queue []pending
	for _, req := range c.turns.take(namespace) {
		claim, err := c.turnClaim(req)
		if err != nil {
			c.turns.putBack(namespace, req)
			return err
		}
		if claim != nil {
			queue = append(queue, pending{req: req, claim: claim})
		}
	}
	sort.Slice(queue, func(i, j int) bool { return claimBefore(queue[i].claim, queue[j].claim) })
	var errs []error
	for _, p := range queue {
		if err := c.takeSyncTurn(ctx, p.claim, p.req); err != nil {
			c.turns.putBack(namespace, p.req)
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// turnClaim returns the claim of a request as it is now: the newer of the request's and the
// cache's (the request's may be newer: the sync that asked wrote it, and the cache has not shown
// that yet), or nil when the claim is gone, being deleted, another claim of its name, or no
// longer Reaping (its own sync asks again if need be).
func (c *Controller) turnClaim(req turnRequest) (*airlockv1alpha1.SandboxClaim, error) {
	cached, err := c.claimLister.SandboxClaims(req.claim.Namespace).Get(req.claim.Name)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if cached.UID != req.claim.UID || cached.DeletionTimestamp != nil {
		return nil, nil
	}
	claim := req.claim
	if newerThan(cached, claim) {
		claim = cached
	}
	if claim.Status.Phase != airlockv1alpha1.ClaimReaping {
		return nil, nil
	}
	return claim, nil
}

// newerThan says whether a is a later version of the object than b (by resourceVersion, which the
// API server gives as an integer; one that does not parse is not newer).
func newerThan(a, b *airlockv1alpha1.SandboxClaim) bool {
	ra, errA := strconv.ParseUint(a.ResourceVersion, 10, 64)
	rb, errB := strconv.ParseUint(b.ResourceVersion, 10, 64)
	return errA == nil && errB == nil && ra > rb
}

// takeSyncTurn creates the claim's sync-back Job when it is its turn (syncAhead), and records that
// its turn came; else it records why it waits.
func (c *Controller) takeSyncTurn(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, req turnRequest) error {
	key := cache.MetaObjectToName(req.job)
	if running, err := c.syncJobRunning(claim); err != nil || running {
		return err // created already (a request asked twice): its events bring the claim back
	}
	why, err := c.syncAhead(claim)
	if err != nil {
		return err
	}
	if why != "" {
		return c.waitForSyncTurn(ctx, claim, why)
	}
	// Counted as running from before its creation, so that the Job informer's add event, which
	// may come before Create returns, is what clears it.
	c.syncJobs.add(key)
	if err := c.children.jobs.Create(ctx, req.job); err != nil {
		c.syncJobs.observed(key)
		if apierrors.IsAlreadyExists(err) {
			// An earlier attempt's Job is still being deleted: its deletion enqueues the claim.
			c.queue.AddAfter(cache.MetaObjectToName(claim), recreateDelay)
			return nil
		}
		return err
	}
	c.recorder.Eventf(claim, corev1.EventTypeNormal, ReasonSyncBackStarted, MessageSyncStarted, req.job.Name, req.attempt)
	if cond := findCondition(claim, ConditionSyncBack); cond != nil && cond.Reason == ReasonSyncBackWaiting {
		// Its turn came: the condition says so rather than that it waits.
		updated := claim.DeepCopy()
		setCondition(&updated.Status, ConditionSyncBack, metav1.ConditionUnknown, ReasonSyncBackStarted,
			fmt.Sprintf(MessageSyncStarted, req.job.Name, req.attempt), c.clock.Now())
		if _, err := c.updateClaimStatus(ctx, claim, updated); err != nil {
			return err
		}
	}
	klog.FromContext(ctx).V(4).Info("Sync-back turn taken", "claim", klog.KObj(claim), "job", klog.KObj(req.job))
	return nil
}
