package workspacegc

// When a record is collected, what holds it back, and what a collection that ended leaves.

import (
	"context"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/airlock-dev/airlock/pkg/admission"
	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/controller/objectcontrol"
	"github.com/airlock-dev/airlock/pkg/workspace"
)

// Event reasons and messages of collections.
const (
	ReasonWorkspaceCollected     = "WorkspaceCollected"
	ReasonWorkspaceCollecting    = "WorkspaceCollecting"
	ReasonWorkspaceCollectFailed = "WorkspaceCollectionFailed"
	messageWorkspaceCollecting   = "Collecting the kept workspace %s: %s"
	messageWorkspaceCollected    = "Collected the kept workspace %s"
	messageCollectionFailed      = "the collection of the kept workspace %s failed (attempt %d): %s; trying again in %s"
)

// syncPodRecheck is how long after a record was not collected because a sync-back pod of its
// claim was still there it is looked at again: those pods are in no cache, so no event says
// when they go.
const syncPodRecheck = 5 * time.Second

// sync looks at one record: a collection that completed is deleted; a kept workspace is
// collected when its retention has passed or its runtime is gone, and otherwise looked at again
// when its retention passes. The record of a workspace garbage collection left is written first.
func (c *Controller) sync(ctx context.Context, key cache.ObjectName) (*time.Duration, error) {
	job, err := c.jobLister.Jobs(key.Namespace).Get(key.Name)
	if apierrors.IsNotFound(err) {
		if orphan, ok := c.orphans.LoadAndDelete(key); ok {
			if err := c.recordOrphanedWorkspace(ctx, orphan.(*airlockv1alpha1.SandboxClaim)); err != nil {
				c.orphans.LoadOrStore(key, orphan) // tried again with the queue's backoff
				return nil, err
			}
		}
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	c.orphans.Delete(key) // a record is there: collected as any other
	if !workspace.IsRecord(job) || job.DeletionTimestamp != nil {
		return nil, nil
	}
	if !workspace.RecordIsOurs(job) {
		klog.FromContext(ctx).Info("Ignoring a Job that looks like a kept workspace's record but is not the operator's", "job", klog.KObj(job))
		return nil, nil
	}
	if !ptr.Deref(job.Spec.Suspend, false) {
		return c.syncCollection(ctx, job)
	}
	if workspace.IsHeld(job) {
		return c.syncHeld(ctx, job)
	}
	why, left, err := c.collectReason(job)
	if err != nil || why == "" {
		return left, err
	}
	if held, requeue, err := c.heldBack(ctx, job); err != nil || held {
		return requeue, err
	}
	updated := job.DeepCopy()
	updated.Spec.Suspend = ptr.To(false)
	updated.Annotations[workspace.AnnotationCollected] = why
	if err := c.jobs.Update(ctx, updated); err != nil {
		return nil, err // a conflict (taken or kept again meanwhile) is looked at again
	}
	klog.FromContext(ctx).V(2).Info("Collecting a kept workspace", "record", klog.KObj(job), "workspaceDir", job.Annotations[airlockv1alpha1.AnnotationKeptDir], "why", why)
	c.recorder.Eventf(job, corev1.EventTypeNormal, ReasonWorkspaceCollecting, messageWorkspaceCollecting, job.Annotations[airlockv1alpha1.AnnotationKeptDir], why)
	return nil, nil
}

// heldBack says whether something may still use the record's workspace, so that it is not
// collected now (and when to look again, if no event will say).
func (c *Controller) heldBack(ctx context.Context, job *batchv1.Job) (bool, *time.Duration, error) {
	if held, requeue, err := c.podsOnWorkspace(ctx, job); err != nil || held {
		return true, requeue, err
	}
	// Decided with a fresh read: no live claim may be on the directory.
	claims, err := c.claims.List(ctx, job.Namespace)
	if err != nil {
		return true, nil, err
	}
	if user := keptWorkspaceUser(claims.Items, job); user != nil {
		klog.FromContext(ctx).V(2).Info("Not collecting a kept workspace: a live claim is on it", "record", klog.KObj(job),
			"workspaceDir", job.Annotations[airlockv1alpha1.AnnotationKeptDir], "claim", klog.KObj(user))
		return true, nil, nil // the claim's deletion, or its keeping the workspace again, enqueues the record
	}
	return false, nil, nil
}

// podsOnWorkspace says whether a pod of the claim that kept the record, or a sync-back pod of it,
// may still write or read the workspace (and when to look again, if no event will say).
func (c *Controller) podsOnWorkspace(ctx context.Context, job *batchv1.Job) (bool, *time.Duration, error) {
	logger := klog.FromContext(ctx)
	claimName := job.Labels[airlockv1alpha1.LabelClaim]
	// No pod of the claim that kept it may be left (one of a claim garbage collection deleted
	// may still be terminating); its deletion enqueues the record.
	pods, err := c.podLister.Pods(job.Namespace).List(labels.SelectorFromSet(labels.Set{airlockv1alpha1.LabelClaim: claimName}))
	if err != nil {
		return true, nil, err
	}
	if len(pods) > 0 {
		logger.V(2).Info("Not collecting a kept workspace yet: a pod of its claim is still there", "record", klog.KObj(job), "pod", klog.KObj(pods[0]))
		return true, nil, nil
	}
	// Nor a sync-back pod of it that may still copy the workspace: a runtime deleted while its
	// claim synced back has the claim and its Job deleted by garbage collection, and the Job's pod
	// goes after them (found by the fault suite: the collection's pod beside the copy's).
	syncPods, err := c.syncPods.SyncPods(ctx, job.Namespace, claimName)
	if err != nil {
		return true, nil, err
	}
	if p := syncingPod(syncPods); p != nil {
		logger.V(2).Info("Not collecting a kept workspace yet: a sync-back pod of its claim is still there", "record", klog.KObj(job), "pod", klog.KObj(p))
		return true, ptr.To(syncPodRecheck), nil
	}
	return c.resumeMembersOn(ctx, job)
}

// resumeMembersOn says whether a resume member of the record may still mount its workspace
// (docs/nothing-lost.md, "Resume members"), read from the API server: one the pool created a
// moment ago may not be cached, and one created after this read never starts (the pool names it
// on the record before its key Secret, and the collection's unsuspension, conditional on the
// record as read, makes that write fail). An idle one (adopted by no claim) is deleted now; one a
// claim adopted is that claim's, which takes the record or lets the member go. Looked at again
// when one is deleted (the pod handler) and every syncPodRecheck.
func (c *Controller) resumeMembersOn(ctx context.Context, job *batchv1.Job) (bool, *time.Duration, error) {
	members, err := c.syncPods.ResumeMembers(ctx, job.Namespace, job.Name)
	if err != nil {
		return true, nil, err
	}
	if len(members) == 0 {
		return false, nil, nil
	}
	for i := range members {
		m := &members[i]
		if m.DeletionTimestamp != nil || m.Labels[airlockv1alpha1.LabelClaim] != "" {
			continue
		}
		klog.FromContext(ctx).V(2).Info("Deleting a resume member of a kept workspace before its collection", "record", klog.KObj(job), "member", klog.KObj(m))
		if err := objectcontrol.IgnoreGone(c.pods.Delete(ctx, m.Namespace, m.Name, m.UID)); err != nil {
			return true, nil, err
		}
	}
	klog.FromContext(ctx).V(2).Info("Not collecting a kept workspace yet: a resume member of it is still there", "record", klog.KObj(job), "members", len(members))
	return true, ptr.To(syncPodRecheck), nil
}

// syncingPod returns a sync-back pod of the claim that has not ended (it may still read the
// workspace), or nil.
func syncingPod(pods []corev1.Pod) *corev1.Pod {
	for i := range pods {
		if p := pods[i].Status.Phase; p != corev1.PodSucceeded && p != corev1.PodFailed {
			return &pods[i]
		}
	}
	return nil
}

// syncCollection deletes a collection Job that completed (the claims waiting for it are woken by
// the deletion) and tries one that failed again, with backoff (retry.go).
func (c *Controller) syncCollection(ctx context.Context, job *batchv1.Job) (*time.Duration, error) {
	dir := job.Annotations[airlockv1alpha1.AnnotationKeptDir]
	if cond := workspace.JobCondition(job, batchv1.JobFailed); cond != nil {
		return c.syncFailedCollection(ctx, job, cond)
	}
	if workspace.JobCondition(job, batchv1.JobComplete) == nil {
		return nil, nil // running; its completion enqueues it
	}
	c.recorder.Eventf(job, corev1.EventTypeNormal, ReasonWorkspaceCollected, messageWorkspaceCollected, dir)
	return nil, c.jobs.Delete(ctx, job.Namespace, job.Name, job.UID)
}

// collectReason says why the record is to be collected now ("" when not yet, with when to look
// again).
func (c *Controller) collectReason(job *batchv1.Job) (string, *time.Duration, error) {
	if job.Annotations[airlockv1alpha1.AnnotationKeptResumable] == airlockv1alpha1.AnnotationValueNotResumable {
		return workspace.CollectedNotResumable, nil, nil
	}
	rt, err := c.runtimeLister.AgentRuntimes(job.Namespace).Get(job.Labels[airlockv1alpha1.LabelRuntime])
	if apierrors.IsNotFound(err) {
		return workspace.CollectedRuntimeGone, nil, nil
	}
	if err != nil {
		return "", nil, err
	}
	if rt.DeletionTimestamp != nil || job.Annotations[airlockv1alpha1.AnnotationKeptRuntimeUID] == "" || string(rt.UID) != job.Annotations[airlockv1alpha1.AnnotationKeptRuntimeUID] {
		return workspace.CollectedRuntimeGone, nil, nil
	}
	keptAt, err := time.Parse(time.RFC3339, job.Annotations[workspace.AnnotationKeptAt])
	if err != nil {
		keptAt = job.CreationTimestamp.Time // unreadable: kept since the record was made
	}
	if left, ok := timeLeft(keptAt, workspace.Retention(rt), c.clock.Now()); ok {
		return "", ptr.To(left), nil
	}
	return workspace.CollectedRetentionPassed, nil, nil
}

// timeLeft returns how long is left of ttl since since at now, and whether any is.
func timeLeft(since time.Time, ttl time.Duration, now time.Time) (time.Duration, bool) {
	left := since.Add(ttl).Sub(now)
	return left, left > 0
}

// keptWorkspaceUser returns a live claim (fresh from the API server) whose workspace is the
// record's directory, lies in it or holds it, other than a claim of another owner that has no pod
// on it yet (undecided, or waiting for this collection), or nil when there is none.
func keptWorkspaceUser(claims []airlockv1alpha1.SandboxClaim, job *batchv1.Job) *airlockv1alpha1.SandboxClaim {
	dir := job.Annotations[airlockv1alpha1.AnnotationKeptDir]
	ptrs := make([]*airlockv1alpha1.SandboxClaim, 0, len(claims))
	for i := range claims {
		ptrs = append(ptrs, &claims[i])
	}
	replaced := admission.Replaced(ptrs)
	for _, claim := range ptrs {
		switch {
		case claim.DeletionTimestamp != nil, claim.Status.Phase == airlockv1alpha1.ClaimRefused,
			claim.Status.Phase == airlockv1alpha1.ClaimFailed && replaced[claim.Name],
			!workspace.Overlaps(workspace.DirOf(claim), dir):
			continue
		}
		if string(admission.RuntimeUID(claim)) != job.Annotations[airlockv1alpha1.AnnotationKeptRuntimeUID] && workspace.WaitsForCollection(claim) {
			continue
		}
		return claim
	}
	return nil
}
