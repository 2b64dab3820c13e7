package claim

import (
	"context"
	"fmt"
	"strconv"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
	"github.com/airlock-dev/airlock/pkg/workspace"
)

// What sync-back Jobs are built with.
const (
	LabelSyncOf            = airlockv1alpha1.LabelSyncOf
	AnnotationSyncAttempt  = airlockv1alpha1.AnnotationSyncAttempt
	AnnotationSyncFailures = airlockv1alpha1.AnnotationSyncFailures
)

// Sync-back (SPEC section 3, "Reaping"): a Job copies the Reaping claim's workspace into its
// targetPath; the claim is deleted only once the Job has succeeded. Every attempt has an end: the
// Job has a deadline (activeDeadlineSeconds, workspace.SyncDeadline), and a Job whose pod has not become
// ready within syncStartTimeout of its creation (an image that cannot be pulled, a PVC that is not
// bound, a pod the API server refuses) is a failed attempt too. A failed attempt is counted on the
// claim, reported (condition SyncBack=False with the reason, a Warning event) and retried after a
// backoff; the claim is never deleted while its work is unsaved.

// Bounded retries (issue 24): after syncMaxAttempts failed attempts the claim leaves Reaping for
// Failed (reason SyncBackFailed, or WorkspaceCleanupFailed), with its workspace left exactly as it
// is in the content volume: nothing saved is destroyed, and the message says where the work is.
// It no longer holds up the younger claims of an overlapping target (they sync back in turn), nor
// its maxConcurrent slot; it counts as live for maxPerSession and maxInstances, as any Failed
// claim, until it is replaced or expires (max(idleTimeout, 10m)); the next acquire of its handle
// replaces it.
const (
	// syncMaxAttempts is how many sync-back (or cleanup) attempts a claim gets: with the backoff
	// of 10 s doubling, the last starts some five minutes after the first failed.
	syncMaxAttempts = 5
	// ReasonSyncBackGaveUp is the SyncBack condition's reason and the event of a claim whose
	// sync-back (or cleanup) failed syncMaxAttempts times.
	ReasonSyncBackGaveUp = airlockv1alpha1.ReasonSyncBackGaveUp
	// ReasonSyncJobNotStarted is the SyncBack condition's reason (and the event) of an attempt
	// whose Job pod did not become ready within syncStartTimeout.
	ReasonSyncJobNotStarted = airlockv1alpha1.ReasonSyncJobNotStarted
	// messageSyncGaveUp: the Job's name, the attempts, the last failure, the workspace and its PVC.
	messageSyncGaveUp = "sync-back Job %s failed %d times (last: %s); gave up: the work is kept, untouched, in %s of PVC %s; the target is as the last successful sync-back left it"
	// messageCleanupGaveUp: the same for the cleanup of a workspace with nothing to save.
	messageCleanupGaveUp = "workspace cleanup Job %s failed %d times (last: %s); gave up: %s of PVC %s is left as it is"
)

// giveUpSyncBack moves a Reaping claim whose sync-back (or cleanup) failed syncMaxAttempts times to
// Failed, keeping its workspace, and tells the claims waiting behind it that the way is free.
func (c *Controller) giveUpSyncBack(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, job *batchv1.Job, attempt int, why string) error {
	pvc, err := c.contentClaimName(claim)
	if err != nil {
		return err
	}
	reason, format := ReasonSyncBackFailed, messageSyncGaveUp
	if claim.Spec.TargetPath == "" {
		reason, format = ReasonCleanupFailed, messageCleanupGaveUp
	}
	message := fmt.Sprintf(format, job.Name, attempt, why, workspace.DirOf(claim), pvc)
	if claim.Spec.TargetPath != "" {
		// Held before the claim says it gave up: the work that never reached its target is
		// never collected until a person retries or releases it.
		if err := c.holdWorkspace(ctx, claim, message); err != nil {
			return err
		}
	}
	now := c.clock.Now()
	updated := claim.DeepCopy()
	setPhase(updated, airlockv1alpha1.ClaimFailed, reason, message)
	setCondition(&updated.Status, ConditionReady, metav1.ConditionFalse, reason, message, now)
	setCondition(&updated.Status, ConditionSyncBack, metav1.ConditionFalse, ReasonSyncBackGaveUp, message, now)
	if _, err := c.updateClaimStatus(ctx, claim, updated); err != nil {
		return err
	}
	if claim.Spec.TargetPath != "" {
		syncBackResults.WithLabelValues("gaveup").Inc()
		c.traceSyncBack(claim, job, now, why)
	}
	c.recorder.Event(claim, corev1.EventTypeWarning, ReasonSyncBackGaveUp, message)
	klog.FromContext(ctx).Info("Gave up syncing back; the workspace is kept", "claim", klog.KObj(claim), "job", klog.KObj(job),
		"attempts", attempt, "workspaceDir", workspace.DirOf(claim), "pvc", pvc)
	return nil
}

// gaveUpSyncBack says whether the claim is Failed because its sync-back gave up: its workspace
// holds work that is not saved, so a closed session does not delete it at once (sync.go); it is
// kept, saying where the work is, until it is replaced or expires, as any Failed claim.
func gaveUpSyncBack(claim *airlockv1alpha1.SandboxClaim) bool {
	cond := findCondition(claim, ConditionSyncBack)
	return claim.Status.Phase == airlockv1alpha1.ClaimFailed && cond != nil && cond.Reason == ReasonSyncBackGaveUp
}

// gaveUpSync says whether a claim change took a claim out of the sync-back line without deleting
// it (Reaping to Failed, giveUpSyncBack): the claims behind it may have their turn.
func gaveUpSync(old, cur *airlockv1alpha1.SandboxClaim) bool {
	return cur != nil && old.Status.Phase == airlockv1alpha1.ClaimReaping && cur.Status.Phase != airlockv1alpha1.ClaimReaping && old.Spec.TargetPath != ""
}

// syncBack runs the claim's sync-back Job (or, for a claim without a targetPath, its workspace
// cleanup Job: workspace.go), retrying a failed one with backoff, and deletes the claim once the
// Job has succeeded.
func (c *Controller) syncBack(ctx context.Context, claim *airlockv1alpha1.SandboxClaim) (*time.Duration, error) {
	logger := klog.FromContext(ctx)
	now := c.clock.Now()
	failures := syncFailures(claim)
	saves := claim.Spec.TargetPath != ""
	job, err := c.jobLister.Jobs(claim.Namespace).Get(workspace.SyncJobName(claim))
	if apierrors.IsNotFound(err) {
		return c.startSyncJob(ctx, claim, failures+1)
	}
	if err != nil {
		return nil, err
	}
	if !metav1.IsControlledBy(job, claim) {
		c.recorder.Eventf(claim, corev1.EventTypeWarning, ReasonErrResourceExists, MessageResourceExists, "Job", job.Name)
		return nil, fmt.Errorf(MessageResourceExists, "Job", job.Name)
	}
	if job.DeletionTimestamp != nil {
		return nil, nil // its deletion enqueues the claim
	}
	if cond := workspace.JobCondition(job, batchv1.JobComplete); cond != nil {
		if !saves {
			c.recorder.Eventf(claim, corev1.EventTypeNormal, ReasonWorkspaceRemoved, MessageRemoved, job.Name, workspace.DirOf(claim))
			return nil, c.removeClaim(ctx, claim, ReasonReaped)
		}
		syncBackResults.WithLabelValues("succeeded").Inc()
		c.recorder.Eventf(claim, corev1.EventTypeNormal, ReasonSyncedBack, MessageSynced, job.Name, claim.Spec.TargetPath)
		updated := claim.DeepCopy()
		setCondition(&updated.Status, ConditionSyncBack, metav1.ConditionTrue, ReasonSyncedBack, fmt.Sprintf(messageSyncBackOK, claim.Spec.TargetPath), now)
		if _, err := c.updateClaimStatus(ctx, claim, updated); err != nil {
			return nil, err
		}
		if cond := findCondition(claim, ConditionSyncBack); cond == nil || cond.Reason != ReasonSyncedBack {
			c.traceSyncBack(claim, job, cond2time(workspace.JobCondition(job, batchv1.JobComplete), now), "")
		}
		if err := c.keepWorkspace(ctx, claim); err != nil {
			return nil, err
		}
		return nil, c.removeClaim(ctx, claim, ReasonSyncedBack)
	}
	failedAt, why, failed := syncJobFailure(job, now)
	if !failed {
		if !syncJobStarted(job) {
			// Looked at again when its pod should have started.
			left, _ := timeLeft(job.CreationTimestamp.Time, syncStartTimeout, now)
			return ptr.To(left), nil
		}
		return nil, nil // running; its completion (or its deadline) enqueues the claim
	}
	attempt, _ := strconv.Atoi(job.Annotations[AnnotationSyncAttempt])
	attempt = max(attempt, 1)
	if attempt >= syncMaxAttempts {
		return nil, c.giveUpSyncBack(ctx, claim, job, attempt, why)
	}
	backoff := syncBackoff(attempt)
	if failures < attempt {
		// First look at this failure: count it on the claim (so the count survives the Job's
		// deletion), report it, then wait out the backoff.
		if err := c.countSyncFailure(ctx, claim, job, attempt, backoff, why); err != nil {
			return nil, err
		}
	}
	if left, ok := timeLeft(failedAt, backoff, now); ok {
		return ptr.To(left), nil
	}
	logger.V(2).Info("Retrying sync-back", "claim", klog.KObj(claim), "job", klog.KObj(job), "attempt", attempt+1)
	err = c.children.jobs.Delete(ctx, job.Namespace, job.Name, job.UID)
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, err
	}
	return nil, nil // the Job's deletion enqueues the claim, which then creates the next attempt
}

// startSyncJob creates the claim's sync-back Job for the given attempt, when it is the claim's
// turn. The Job only copies: the workspace is kept (kept.go). A claim with nothing to save keeps
// its workspace and is deleted now, with no Job: a re-acquire of its handle waits for nothing.
func (c *Controller) startSyncJob(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, attempt int) (*time.Duration, error) {
	logger := klog.FromContext(ctx)
	if claim.Spec.TargetPath == "" {
		if err := c.keepWorkspace(ctx, claim); err != nil {
			return nil, err
		}
		return nil, c.removeClaim(ctx, claim, ReasonReaped)
	}
	pvc, err := c.contentClaimName(claim)
	if err != nil {
		return nil, err
	}
	if pvc == "" {
		// A claim without a record and without its class: the content PVC is unknown. The
		// class's creation enqueues nothing, so look again later.
		logger.Info("Cannot sync back: the class is gone", "claim", klog.KObj(claim), "class", claim.Spec.ClassName)
		return ptr.To(syncBackoffMax), nil
	}
	// One sync-back at a time into a target: the turn is taken by the namespace's turn pass.
	c.askSyncTurn(claim, buildSyncJob(claim, pvc, workspace.SyncImage(claim, c.syncImage), attempt, false, c.targetVersions(claim)), attempt)
	return nil, nil
}

// syncJobFailure says whether the sync-back Job failed, when, and why: its Failed condition (its
// pod failed, or its deadline passed), or its pod not ready syncStartTimeout after its creation.
func syncJobFailure(job *batchv1.Job, now time.Time) (time.Time, string, bool) {
	if cond := workspace.JobCondition(job, batchv1.JobFailed); cond != nil {
		why := cond.Message
		if cond.Reason != "" {
			why = cond.Reason + ": " + cond.Message
		}
		return cond.LastTransitionTime.Time, why, true
	}
	if syncJobStarted(job) {
		return time.Time{}, "", false
	}
	if _, ok := timeLeft(job.CreationTimestamp.Time, syncStartTimeout, now); ok {
		return time.Time{}, "", false
	}
	return job.CreationTimestamp.Add(syncStartTimeout), fmt.Sprintf(messageSyncNotStarted, syncStartTimeout), true
}

// syncJobStarted says whether the Job's pod has become ready (or already finished).
func syncJobStarted(job *batchv1.Job) bool {
	return ptr.Deref(job.Status.Ready, 0) > 0 || job.Status.Succeeded > 0 || job.Status.Failed > 0
}

// contentClaimName is the content PVC that the claim's workspace is in (empty when its class is
// gone and its record does not say).
func (c *Controller) contentClaimName(claim *airlockv1alpha1.SandboxClaim) (string, error) {
	return sandboxpod.ContentClaimNameOf(claim, c.classLister.Get)
}

// syncFailures is the number of failed sync-back attempts recorded on the claim.
func syncFailures(claim *airlockv1alpha1.SandboxClaim) int {
	n, err := strconv.Atoi(claim.Annotations[AnnotationSyncFailures])
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// syncBackoff is the wait after the given failed attempt: 10 s doubling, at most 5 min.
func syncBackoff(attempt int) time.Duration {
	d := syncBackoffBase
	for i := 1; i < attempt && d < syncBackoffMax; i++ {
		d *= 2
	}
	return min(d, syncBackoffMax)
}

// buildSyncJob returns the claim's sync-back Job (workspace.SyncJob), a child of the claim.
func buildSyncJob(claim *airlockv1alpha1.SandboxClaim, contentClaimName, image string, attempt int, removeWorkspace bool, versions int32) *batchv1.Job {
	meta := sandboxpod.ChildMeta(claim, workspace.SyncJobName(claim))
	return workspace.SyncJob(meta, claim, contentClaimName, sandboxpod.JobConfig(image), attempt, removeWorkspace, versions)
}

// buildKeptJob returns the record of the claim's workspace (workspace.Record).
func buildKeptJob(claim *airlockv1alpha1.SandboxClaim, contentClaimName, image string, now time.Time) *batchv1.Job {
	return workspace.Record(claim, contentClaimName, sandboxpod.JobConfig(image), now)
}

// countSyncFailure records the claim's attempt-th failed sync-back (or cleanup) attempt: the count
// in its annotation, condition SyncBack False with the failure, a Warning event.
func (c *Controller) countSyncFailure(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, job *batchv1.Job, attempt int, backoff time.Duration, why string) error {
	reason, format := ReasonSyncBackFailed, MessageSyncFailed
	if claim.Spec.TargetPath != "" {
		syncBackResults.WithLabelValues("failed").Inc()
	} else {
		reason, format = ReasonCleanupFailed, MessageCleanupFailed
	}
	if workspace.JobCondition(job, batchv1.JobFailed) == nil {
		// Failed because its pod never started (syncJobFailure): said apart, and counted apart
		// on the runtime's status.
		reason = ReasonSyncJobNotStarted
	}
	counted := claim.DeepCopy()
	if counted.Annotations == nil {
		counted.Annotations = map[string]string{}
	}
	counted.Annotations[AnnotationSyncFailures] = strconv.Itoa(attempt)
	written, err := c.claims.Update(ctx, counted)
	if err != nil {
		return err
	}
	if claim.Spec.TargetPath != "" {
		c.traceSyncBack(claim, job, c.clock.Now(), why)
	}
	message := fmt.Sprintf(format, job.Name, attempt, backoff, why)
	updated := written.DeepCopy()
	setCondition(&updated.Status, ConditionSyncBack, metav1.ConditionFalse, reason, message, c.clock.Now())
	if _, err := c.updateClaimStatus(ctx, written, updated); err != nil {
		return err
	}
	c.recorder.Event(claim, corev1.EventTypeWarning, reason, message)
	return nil
}

// cond2time is when the condition last changed, or now without one.
func cond2time(cond *batchv1.JobCondition, now time.Time) time.Time {
	if cond == nil || cond.LastTransitionTime.IsZero() {
		return now
	}
	return cond.LastTransitionTime.Time
}
