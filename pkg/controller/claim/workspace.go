package claim

// Workspaces are collected, and sync-backs into one target run one at a time (issue 13;
// docs/decisions.md, "Workspaces are collected").
//
// Removal. Once a Reaping claim's work is saved, its workspace directory is removed by the same
// Job that saves it: `airlock sync --remove-source` removes the workspace after its copy is in
// place, and a claim with nothing to save (no targetPath) gets a cleanup Job (`airlock sync
// --remove-only`) before it is deleted. Both are the claim's "-sync" Job, so a failed removal is
// retried with backoff and reported as a failed sync-back is, and the claim is deleted only once
// the Job has succeeded. Not removed: a mount role's directory (the runtime's, never the
// operator's), anything not of the shape the operator gives workspaces
// (<ns>/sandboxes/<name>, <ns>/sandboxes/sessions/<name>), and a workspace that another live claim
// uses (a session's, shared by a claim and its replacement): the last claim to go removes it.
//
// Serialization. Sync-backs whose targetPaths overlap (one is the other or lies inside it), in one
// namespace, run one at a time, oldest claim first: a Reaping claim creates its Job only when no
// other claim's sync-back Job into an overlapping target is unfinished and no older Reaping claim
// (creationTimestamp, then name) waits for an overlapping target. A waiting claim says why in its
// SyncBack condition (Unknown, SyncBackWaiting) and is enqueued again when a sync-back Job
// finishes or is deleted, or when a Reaping claim with a targetPath is deleted: a claim ahead that
// goes away frees the way. The check and the Job's creation are one step of the namespace's turn
// pass, on a namespace-keyed queue (syncturns.go), and Jobs created but not yet in the cache count
// as unfinished (syncJobs), so that no pass starts a Job on a cache that does not show the last.

import (
	"context"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/airlock-dev/airlock/pkg/admission"
	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/controller/expectations"
	"github.com/airlock-dev/airlock/pkg/workspace"
)

// Event and condition reasons, and messages, of workspace removal and sync-back turns.
const (
	ReasonSyncBackWaiting  = "SyncBackWaiting"
	ReasonCleanupStarted   = "WorkspaceCleanupStarted"
	ReasonCleanupFailed    = airlockv1alpha1.ReasonWorkspaceCleanupFailed
	ReasonWorkspaceRemoved = "WorkspaceRemoved"

	MessageCleanupStarted = "Started workspace cleanup Job %s (attempt %d)"
	MessageCleanupFailed  = "Workspace cleanup Job %s failed (attempt %d), retrying in %s: %s"
	MessageRemoved        = "Workspace cleanup Job %s removed the workspace %s"

	messageSyncWaiting     = "waiting to sync back into %s: %s"
	messageSyncWaitRunning = "sync-back Job %s of claim %s is running into %s"
	messageSyncWaitOlder   = "claim %s, older, syncs back into %s first"
	messageSyncWaitRetry   = "the retry %s of a held workspace's sync-back is running into %s"
)

// workspaceUser returns another live claim in the cache whose workspace is the claim's, lies
// inside it or contains it, or "" when there is none. Live as SPEC section 3 says: not Refused,
// not being deleted, and not a Failed claim that has been replaced.
func (c *Controller) workspaceUser(claim *airlockv1alpha1.SandboxClaim) (string, error) {
	claims, err := c.claimLister.SandboxClaims(claim.Namespace).List(labels.Everything())
	if err != nil {
		return "", err
	}
	replaced := admission.Replaced(claims)
	for _, other := range claims {
		switch {
		case other.UID == claim.UID, other.DeletionTimestamp != nil, other.Status.Phase == airlockv1alpha1.ClaimRefused,
			other.Status.Phase == airlockv1alpha1.ClaimFailed && replaced[other.Name]:
			continue
		}
		if workspace.Overlaps(workspace.DirOf(other), workspace.DirOf(claim)) {
			return other.Name, nil
		}
	}
	return "", nil
}

// removesWorkspace says whether the claim's Job, created now, should remove its workspace, and
// logs why not when it should not.
func (c *Controller) removesWorkspace(ctx context.Context, claim *airlockv1alpha1.SandboxClaim) (bool, error) {
	logger := klog.FromContext(ctx)
	if !workspace.Removable(claim) {
		logger.V(4).Info("The claim's workspace is not the operator's to remove", "claim", klog.KObj(claim),
			"workspaceDir", workspace.DirOf(claim), "mountRole", claim.Spec.MountRole)
		return false, nil
	}
	user, err := c.workspaceUser(claim)
	if err != nil {
		return false, err
	}
	if user != "" {
		logger.V(2).Info("Keeping the claim's workspace: another live claim uses it", "claim", klog.KObj(claim),
			"workspaceDir", workspace.DirOf(claim), "user", klog.KRef(claim.Namespace, user))
		return false, nil
	}
	return true, nil
}

// syncJobsStarted are the sync-back Jobs this controller created that its cache may not show yet:
// until the Job informer has them, they count as unfinished when a claim asks for its turn.
type syncJobsStarted struct {
	store *expectations.Store[cache.ObjectName, struct{}]
}

// syncJobsTimeout bounds how long a created Job the cache never shows counts as unfinished.
const syncJobsTimeout = expectationsTimeout

func newSyncJobsStarted(logger klog.Logger, clk clock.PassiveClock) *syncJobsStarted {
	return &syncJobsStarted{store: expectations.New[cache.ObjectName, struct{}](logger, ControllerName, "sync-job", syncJobsTimeout, clk)}
}

func (s *syncJobsStarted) add(job cache.ObjectName) {
	s.store.Expect(job, struct{}{})
}

// observed forgets a Job that the cache has now (or that is gone).
func (s *syncJobsStarted) observed(job cache.ObjectName) {
	s.store.Delete(job)
}

func (s *syncJobsStarted) has(job cache.ObjectName) bool {
	_, ok := s.store.Get(job)
	return ok
}

// syncAhead returns why the claim must wait before its sync-back Job is created, or "" when it is
// its turn: another claim's unfinished sync-back Job into an overlapping target, or an older
// Reaping claim waiting for one.
func (c *Controller) syncAhead(claim *airlockv1alpha1.SandboxClaim) (string, error) {
	claims, err := c.claimLister.SandboxClaims(claim.Namespace).List(labels.Everything())
	if err != nil {
		return "", err
	}
	var older *airlockv1alpha1.SandboxClaim
	for _, other := range claims {
		if other.UID == claim.UID || other.DeletionTimestamp != nil || other.Spec.TargetPath == "" ||
			!workspace.Overlaps(other.Spec.TargetPath, claim.Spec.TargetPath) {
			continue
		}
		running, err := c.syncJobRunning(other)
		if err != nil {
			return "", err
		}
		if running {
			return fmt.Sprintf(messageSyncWaitRunning, workspace.SyncJobName(other), other.Name, other.Spec.TargetPath), nil
		}
		if other.Status.Phase != airlockv1alpha1.ClaimReaping || !claimBefore(other, claim) {
			continue
		}
		if rt, err := c.runtime(other); err != nil {
			return "", err
		} else if leftToGarbageCollection(other, rt) {
			continue // garbage collection deletes it without sync-back
		}
		if older == nil || claimBefore(other, older) {
			older = other
		}
	}
	if older != nil {
		return fmt.Sprintf(messageSyncWaitOlder, older.Name, older.Spec.TargetPath), nil
	}
	return c.retryAhead(claim)
}

// retryAhead says why the claim's sync-back waits for a held workspace's retry
// (pkg/controller/workspacegc, held.go) into an overlapping target: one is running. A retry takes
// its turn as a sync-back does (it waits in turn for the sync-backs running), so that the two do
// not copy into one target at once. The retry's end enqueues the claim (syncJobHandler).
func (c *Controller) retryAhead(claim *airlockv1alpha1.SandboxClaim) (string, error) {
	records, err := c.jobLister.Jobs(claim.Namespace).List(labels.SelectorFromSet(labels.Set{
		airlockv1alpha1.LabelKeptWorkspace: airlockv1alpha1.LabelValueKeptWorkspace,
	}))
	if err != nil {
		return "", err
	}
	for _, record := range records {
		target, ok := workspace.RetryTarget(record)
		if !ok || !workspace.Overlaps(target, claim.Spec.TargetPath) {
			continue
		}
		retry, err := c.jobLister.Jobs(claim.Namespace).Get(workspace.RetryJobName(record.Name))
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return "", err
		}
		if metav1.IsControlledBy(retry, record) && !workspace.JobFinished(retry) {
			return fmt.Sprintf(messageSyncWaitRetry, retry.Name, target), nil
		}
	}
	return "", nil
}

// syncJobRunning says whether the claim has a sync-back Job that has not finished: in the cache
// and neither complete nor failed, or created by this controller and not yet in the cache.
func (c *Controller) syncJobRunning(claim *airlockv1alpha1.SandboxClaim) (bool, error) {
	job, err := c.jobLister.Jobs(claim.Namespace).Get(workspace.SyncJobName(claim))
	if apierrors.IsNotFound(err) {
		return c.syncJobs.has(cache.ObjectName{Namespace: claim.Namespace, Name: workspace.SyncJobName(claim)}), nil
	}
	if err != nil {
		return false, err
	}
	if !metav1.IsControlledBy(job, claim) {
		return false, nil
	}
	return !workspace.JobFinished(job), nil
}

// claimBefore orders claims oldest first: by creationTimestamp, then name.
func claimBefore(a, b *airlockv1alpha1.SandboxClaim) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	return a.Name < b.Name
}

// waitForSyncTurn records on the claim why its sync-back waits (condition SyncBack Unknown with
// reason SyncBackWaiting, and an event when it starts waiting). It is enqueued again by the
// events that may give it its turn (enqueueSyncWaiters).
func (c *Controller) waitForSyncTurn(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, why string) error {
	klog.FromContext(ctx).V(2).Info("Sync-back waits for its turn", "claim", klog.KObj(claim), "targetPath", claim.Spec.TargetPath, "why", why)
	message := fmt.Sprintf(messageSyncWaiting, claim.Spec.TargetPath, why)
	cond := findCondition(claim, ConditionSyncBack)
	if cond != nil && cond.Reason == ReasonSyncBackWaiting && cond.Message == message {
		return nil
	}
	updated := claim.DeepCopy()
	setCondition(&updated.Status, ConditionSyncBack, metav1.ConditionUnknown, ReasonSyncBackWaiting, message, c.clock.Now())
	if _, err := c.updateClaimStatus(ctx, claim, updated); err != nil {
		return err
	}
	if cond == nil || cond.Reason != ReasonSyncBackWaiting {
		c.recorder.Event(claim, corev1.EventTypeNormal, ReasonSyncBackWaiting, message)
	}
	return nil
}

// enqueueSyncWaiters enqueues the namespace's Reaping claims that have a targetPath overlapping
// targetPath (every one when targetPath is empty): one of them may now have its turn.
func (c *Controller) enqueueSyncWaiters(namespace, targetPath string) {
	claims, err := c.claimLister.SandboxClaims(namespace).List(labels.Everything())
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	for _, claim := range claims {
		if claim.Status.Phase != airlockv1alpha1.ClaimReaping || claim.DeletionTimestamp != nil || claim.Spec.TargetPath == "" {
			continue
		}
		if targetPath == "" || workspace.Overlaps(targetPath, claim.Spec.TargetPath) {
			c.enqueueClaim(claim)
		}
	}
}

// leftSyncLine says whether a claim change may give another claim its sync-back turn: a Reaping
// claim with a targetPath that is now being deleted or gone.
func leftSyncLine(old, cur *airlockv1alpha1.SandboxClaim) bool {
	return old.Status.Phase == airlockv1alpha1.ClaimReaping && old.Spec.TargetPath != "" &&
		(cur == nil || (old.DeletionTimestamp == nil && cur.DeletionTimestamp != nil))
}

// syncJobHandler is the Job informer's handler for sync-back turns: a Job that appears is observed
// (syncJobs); a sync-back Job that finishes or goes may give a waiting claim its turn.
func (c *Controller) syncJobHandler() cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if job, ok := obj.(*batchv1.Job); ok {
				c.syncJobs.observed(cache.MetaObjectToName(job))
			}
		},
		UpdateFunc: func(old, cur any) {
			oldJob, ok1 := old.(*batchv1.Job)
			job, ok2 := cur.(*batchv1.Job)
			if !ok1 || !ok2 || oldJob.ResourceVersion == job.ResourceVersion {
				return
			}
			c.syncJobs.observed(cache.MetaObjectToName(job))
			if !workspace.JobFinished(oldJob) && workspace.JobFinished(job) {
				c.enqueueSyncWaiters(job.Namespace, "")
			}
		},
		DeleteFunc: func(obj any) {
			if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tombstone.Obj
			}
			if job, ok := obj.(*batchv1.Job); ok {
				c.syncJobs.observed(cache.MetaObjectToName(job))
				c.enqueueSyncWaiters(job.Namespace, "")
			}
		},
	}
}
