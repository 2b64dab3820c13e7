package claim

// The collection of kept workspaces (kept.go): when a record is collected, what holds it back,
// and the queue that looks at records.

import (
	"context"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/airlock-dev/airlock/pkg/admission"
	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/syncback"
)

// syncPodRecheck is how long after a record was not collected because a sync-back pod of its
// claim was still there it is looked at again: those pods are in no cache, so no event says
// when they go.
const syncPodRecheck = 5 * time.Second

// syncPodControl reads the pods of a claim's sync-back Jobs from the API server: the operator's
// pod cache holds only pods that carry LabelClaim, and sync-back pods carry LabelSyncOf instead.
type syncPodControl interface {
	SyncPods(ctx context.Context, namespace, claim string) ([]corev1.Pod, error)
}

type realSyncPods struct {
	client kubernetes.Interface
}

func (r realSyncPods) SyncPods(ctx context.Context, namespace, claim string) ([]corev1.Pod, error) {
	list, err := r.client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(labels.Set{LabelSyncOf: claim}).String(),
	})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
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

// syncKept looks at one record: a collection that completed is deleted; a kept workspace is
// collected when its retention has passed or its runtime is gone, and otherwise looked at again
// when its retention passes.
func (c *Controller) syncKept(ctx context.Context, key cache.ObjectName) (*time.Duration, error) {
	job, err := c.jobLister.Jobs(key.Namespace).Get(key.Name)
	if apierrors.IsNotFound(err) {
		if orphan, ok := c.orphanedWorkspaces.LoadAndDelete(key); ok {
			return nil, c.recordOrphanedWorkspace(ctx, orphan.(*airlockv1alpha1.SandboxClaim))
		}
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	c.orphanedWorkspaces.Delete(key) // a record is there: collected as any other
	if !isKeptRecord(job) || job.DeletionTimestamp != nil {
		return nil, nil
	}
	if !recordIsOurs(job) {
		klog.FromContext(ctx).Info("Ignoring a Job that looks like a kept workspace's record but is not the operator's", "job", klog.KObj(job))
		return nil, nil
	}
	if !ptr.Deref(job.Spec.Suspend, false) {
		return nil, c.syncCollection(ctx, job)
	}
	why, left, err := c.collectReason(job)
	if err != nil || why == "" {
		return left, err
	}
	// No pod of the claim that kept it may be left (one of a claim garbage collection deleted
	// may still be terminating); its deletion enqueues the record.
	pods, err := c.podLister.Pods(job.Namespace).List(labels.SelectorFromSet(labels.Set{LabelClaim: job.Labels[LabelClaim]}))
	if err != nil {
		return nil, err
	}
	if len(pods) > 0 {
		klog.FromContext(ctx).V(2).Info("Not collecting a kept workspace yet: a pod of its claim is still there", "record", klog.KObj(job), "pod", klog.KObj(pods[0]))
		return nil, nil
	}
	// Nor a sync-back pod of it that may still copy the workspace: a runtime deleted while its
	// claim synced back has the claim and its Job deleted by garbage collection, and the Job's pod
	// goes after them (found by the fault suite: the collection's pod beside the copy's).
	syncPods, err := c.syncPods.SyncPods(ctx, job.Namespace, job.Labels[LabelClaim])
	if err != nil {
		return nil, err
	}
	if p := syncingPod(syncPods); p != nil {
		klog.FromContext(ctx).V(2).Info("Not collecting a kept workspace yet: a sync-back pod of its claim is still there", "record", klog.KObj(job), "pod", klog.KObj(p))
		return ptr.To(syncPodRecheck), nil
	}
	// Decided with a fresh read: no live claim may be on the directory.
	claims, err := c.claims.List(ctx, job.Namespace)
	if err != nil {
		return nil, err
	}
	if user := keptWorkspaceUser(claims.Items, job); user != nil {
		klog.FromContext(ctx).V(2).Info("Not collecting a kept workspace: a live claim is on it", "record", klog.KObj(job),
			"workspaceDir", job.Annotations[AnnotationKeptDir], "claim", klog.KObj(user))
		return nil, nil // the claim's deletion, or its keeping the workspace again, enqueues the record
	}
	updated := job.DeepCopy()
	updated.Spec.Suspend = ptr.To(false)
	updated.Annotations[AnnotationCollected] = why
	if err := c.children.jobs.Update(ctx, updated); err != nil {
		return nil, err // a conflict (taken or kept again meanwhile) is looked at again
	}
	klog.FromContext(ctx).V(2).Info("Collecting a kept workspace", "record", klog.KObj(job), "workspaceDir", job.Annotations[AnnotationKeptDir], "why", why)
	c.recorder.Eventf(job, corev1.EventTypeNormal, ReasonWorkspaceCollecting, messageWorkspaceCollecting, job.Annotations[AnnotationKeptDir], why)
	return nil, nil
}

// syncCollection deletes a collection Job that completed (its claims waiting are woken by the
// deletion) and reports one that failed.
func (c *Controller) syncCollection(ctx context.Context, job *batchv1.Job) error {
	if cond := jobCondition(job, batchv1.JobFailed); cond != nil {
		c.recorder.Eventf(job, corev1.EventTypeWarning, ReasonWorkspaceCollectFailed, messageWaitingCollectionFail, job.Annotations[AnnotationKeptDir], job.Name, cond.Message)
		c.enqueueWorkspaceClaims(job)
		return nil
	}
	if jobCondition(job, batchv1.JobComplete) == nil {
		return nil // running; its completion enqueues it
	}
	c.recorder.Eventf(job, corev1.EventTypeNormal, ReasonWorkspaceCollected, messageWorkspaceCollected, job.Annotations[AnnotationKeptDir])
	return c.children.jobs.Delete(ctx, job.Namespace, job.Name, job.UID)
}

// collectReason says why the record is to be collected now ("" when not yet, with when to look
// again).
func (c *Controller) collectReason(job *batchv1.Job) (string, *time.Duration, error) {
	if job.Annotations[AnnotationKeptResumable] == annotationValueNotResumable {
		return CollectedNotResumable, nil, nil
	}
	rt, err := c.runtimeLister.AgentRuntimes(job.Namespace).Get(job.Labels[airlockv1alpha1.LabelRuntime])
	if apierrors.IsNotFound(err) {
		return CollectedRuntimeGone, nil, nil
	}
	if err != nil {
		return "", nil, err
	}
	if rt.DeletionTimestamp != nil || job.Annotations[AnnotationKeptRuntimeUID] == "" || string(rt.UID) != job.Annotations[AnnotationKeptRuntimeUID] {
		return CollectedRuntimeGone, nil, nil
	}
	keptAt, err := time.Parse(time.RFC3339, job.Annotations[AnnotationKeptAt])
	if err != nil {
		keptAt = job.CreationTimestamp.Time // unreadable: kept since the record was made
	}
	if left, ok := timeLeft(keptAt, workspaceRetention(rt), c.clock.Now()); ok {
		return "", ptr.To(left), nil
	}
	return CollectedRetentionPassed, nil, nil
}

// keptWorkspaceUser returns a live claim (fresh from the API server) whose workspace is the
// record's directory, lies in it or holds it, other than a claim of another owner that has no pod
// on it yet (undecided, or waiting for this collection), or nil when there is none.
func keptWorkspaceUser(claims []airlockv1alpha1.SandboxClaim, job *batchv1.Job) *airlockv1alpha1.SandboxClaim {
	dir := job.Annotations[AnnotationKeptDir]
	ptrs := make([]*airlockv1alpha1.SandboxClaim, 0, len(claims))
	for i := range claims {
		ptrs = append(ptrs, &claims[i])
	}
	replaced := admission.Replaced(ptrs)
	for _, claim := range ptrs {
		switch {
		case claim.DeletionTimestamp != nil, claim.Status.Phase == airlockv1alpha1.ClaimRefused,
			claim.Status.Phase == airlockv1alpha1.ClaimFailed && replaced[claim.Name],
			!syncback.Overlaps(workspaceDirOf(claim), dir):
			continue
		}
		if string(admission.RuntimeUID(claim)) != job.Annotations[AnnotationKeptRuntimeUID] && waitsForCollection(claim) {
			continue
		}
		return claim
	}
	return nil
}

// waitsForCollection says whether the claim has no pod on its workspace because it waits for a
// collection (or is not decided yet).
func waitsForCollection(claim *airlockv1alpha1.SandboxClaim) bool {
	switch claim.Status.Phase {
	case "", airlockv1alpha1.ClaimPending, airlockv1alpha1.ClaimQueued:
		return true
	case airlockv1alpha1.ClaimBinding:
		cond := findCondition(claim, ConditionReady)
		return cond != nil && cond.Reason == ReasonWaitingForCollection
	}
	return false
}

// enqueueWorkspaceClaims enqueues the claims of the namespace whose workspace is the record's
// directory: one may wait for it.
func (c *Controller) enqueueWorkspaceClaims(job *batchv1.Job) {
	claims, err := c.claimLister.SandboxClaims(job.Namespace).List(labels.Everything())
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	for _, claim := range claims {
		if workspaceDirOf(claim) == job.Annotations[AnnotationKeptDir] {
			c.enqueueClaim(claim)
		}
	}
}

// enqueueKeptOf enqueues the records of the runtime's workspaces (its deletion, or a runtime
// created again under its name: an old UID's records are collected).
func (c *Controller) enqueueKeptOf(obj any) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	rt, ok := obj.(*airlockv1alpha1.AgentRuntime)
	if !ok {
		return
	}
	jobs, err := c.jobLister.Jobs(rt.Namespace).List(labels.SelectorFromSet(labels.Set{
		LabelKeptWorkspace: labelValueKeptWorkspace, airlockv1alpha1.LabelRuntime: rt.Name,
	}))
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	for _, job := range jobs {
		c.keptQueue.Add(cache.MetaObjectToName(job))
	}
}

// keptRuntimeChanged says whether a runtime's update may change what happens to its kept
// workspaces: its deletion began, or its retention changed (not its status writes, which come
// once a second in a burst).
func keptRuntimeChanged(old, cur *airlockv1alpha1.AgentRuntime) bool {
	return (old.DeletionTimestamp == nil) != (cur.DeletionTimestamp == nil) || workspaceRetention(old) != workspaceRetention(cur)
}

// keptHandler is the Job informer's handler for records: a record that appears or changes is
// looked at; one that goes wakes the claims of its directory.
func (c *Controller) keptHandler() cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if job, ok := obj.(*batchv1.Job); ok && isKeptRecord(job) {
				c.keptQueue.Add(cache.MetaObjectToName(job))
			}
		},
		UpdateFunc: func(old, cur any) {
			oldJob, ok1 := old.(*batchv1.Job)
			job, ok2 := cur.(*batchv1.Job)
			if ok1 && ok2 && oldJob.ResourceVersion != job.ResourceVersion && isKeptRecord(job) {
				c.keptQueue.Add(cache.MetaObjectToName(job))
			}
		},
		DeleteFunc: func(obj any) {
			if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tombstone.Obj
			}
			if job, ok := obj.(*batchv1.Job); ok && isKeptRecord(job) {
				c.enqueueWorkspaceClaims(job)
			}
		},
	}
}

// enqueueKeptDir enqueues the record of a deleted claim's workspace, if there is one: the claim
// may have been what kept it from collection.
func (c *Controller) enqueueKeptDir(claim *airlockv1alpha1.SandboxClaim) {
	name := keptJobName(workspaceDirOf(claim))
	if _, err := c.jobLister.Jobs(claim.Namespace).Get(name); err == nil {
		c.keptQueue.Add(cache.ObjectName{Namespace: claim.Namespace, Name: name})
	}
}

func (c *Controller) runKeptWorker(ctx context.Context) {
	for c.processNextKept(ctx) {
	}
}

func (c *Controller) processNextKept(ctx context.Context) bool {
	key, shutdown := c.keptQueue.Get()
	if shutdown {
		return false
	}
	defer c.keptQueue.Done(key)
	requeueAfter, err := c.syncKept(ctx, key)
	switch {
	case err != nil:
		if !apierrors.IsConflict(err) {
			utilruntime.HandleErrorWithContext(ctx, err, "Error syncing a kept workspace", "record", klog.KRef(key.Namespace, key.Name))
		}
		c.keptQueue.AddRateLimited(key)
	case requeueAfter != nil:
		c.keptQueue.Forget(key)
		c.keptQueue.AddAfter(key, *requeueAfter)
	default:
		c.keptQueue.Forget(key)
	}
	return true
}

// enqueueOrphanedWorkspace is asked when a claim is deleted: a claim that may have had a pod on
// its workspace, whose runtime (by name and UID) is gone, was deleted by garbage collection
// without sync-back (SPEC section 3), and its workspace, which no claim of a runtime created
// again under the name may resume, gets a record that is collected at once (syncKept).
func (c *Controller) enqueueOrphanedWorkspace(claim *airlockv1alpha1.SandboxClaim) {
	switch claim.Status.Phase {
	case airlockv1alpha1.ClaimBinding, airlockv1alpha1.ClaimBound, airlockv1alpha1.ClaimReaping, airlockv1alpha1.ClaimFailed:
	default:
		return // never had a pod: nothing was written
	}
	if !workspaceRemovable(claim) {
		return
	}
	rt, err := c.runtimeLister.AgentRuntimes(claim.Namespace).Get(claim.Spec.RuntimeName)
	if err == nil && rt.DeletionTimestamp == nil && admission.OwnedBy(claim, rt) {
		return // its runtime's: kept (or not) by its reaping
	}
	if err != nil && !apierrors.IsNotFound(err) {
		utilruntime.HandleError(err)
		return
	}
	key := cache.ObjectName{Namespace: claim.Namespace, Name: keptJobName(workspaceDirOf(claim))}
	c.orphanedWorkspaces.Store(key, claim.DeepCopy())
	c.keptQueue.Add(key)
}

// recordOrphanedWorkspace writes the record of a workspace whose claim garbage collection
// deleted: not resumable, so collected once no pod or live claim is on it.
func (c *Controller) recordOrphanedWorkspace(ctx context.Context, claim *airlockv1alpha1.SandboxClaim) error {
	pvc, err := c.contentClaimName(claim)
	if err != nil || pvc == "" {
		return err
	}
	job := buildKeptJob(claim, pvc, c.syncImage, c.clock.Now())
	job.Annotations[AnnotationKeptResumable] = annotationValueNotResumable
	klog.FromContext(ctx).V(2).Info("Recording the workspace of a claim garbage collection deleted, for collection", "claim", klog.KObj(claim), "workspaceDir", workspaceDirOf(claim))
	if err := c.children.jobs.Create(ctx, job); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// enqueueKeptOfPod enqueues the records the claim of a deleted pod kept: the pod may have been
// what kept them from collection.
func (c *Controller) enqueueKeptOfPod(pod *corev1.Pod) {
	name := pod.Labels[LabelClaim]
	if name == "" {
		return
	}
	jobs, err := c.jobLister.Jobs(pod.Namespace).List(labels.SelectorFromSet(labels.Set{LabelKeptWorkspace: labelValueKeptWorkspace, LabelClaim: name}))
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	for _, job := range jobs {
		c.keptQueue.Add(cache.MetaObjectToName(job))
	}
}
