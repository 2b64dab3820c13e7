package workspacegc

// The controller's event handlers: they only enqueue records (and remember the claims garbage
// collection deleted, whose records are to be written).

import (
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/airlock-dev/airlock/pkg/admission"
	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/workspace"
)

// addEventHandlers adds the controller's handlers to the informers (removed when Run returns):
// records, the runtimes whose workspaces they are, the pods and the claims that may hold them.
func (c *Controller) addEventHandlers(logger klog.Logger, informers Informers) error {
	if err := c.handlers.Add(informers.Jobs.Informer(), cache.ResourceEventHandlerFuncs{
		AddFunc: c.enqueueRecord,
		UpdateFunc: func(old, cur any) {
			o, n := old.(*batchv1.Job), cur.(*batchv1.Job)
			if o.ResourceVersion != n.ResourceVersion {
				c.enqueueRecord(cur)
				if !workspace.JobFinished(o) && workspace.JobFinished(n) {
					c.enqueueRetries(n)
				}
			}
		},
		DeleteFunc: func(obj any) {
			c.enqueueRecord(obj) // a collection attempt or a retry deleted
			c.enqueueRetries(obj)
		},
	}); err != nil {
		return fmt.Errorf("adding the kept workspace event handler: %w", err)
	}
	// A runtime that goes, or comes again under its name (another UID): its kept workspaces are
	// collected.
	if err := c.handlers.Add(informers.Runtimes.Informer(), cache.ResourceEventHandlerFuncs{
		AddFunc: c.enqueueRecordsOf,
		UpdateFunc: func(old, cur any) {
			o, ok1 := old.(*airlockv1alpha1.AgentRuntime)
			n, ok2 := cur.(*airlockv1alpha1.AgentRuntime)
			if ok1 && ok2 && runtimeChanged(o, n) {
				c.enqueueRecordsOf(cur)
			}
		},
		DeleteFunc: c.enqueueRecordsOf,
	}); err != nil {
		return fmt.Errorf("adding the runtime event handler: %w", err)
	}
	if err := c.handlers.Add(informers.Pods.Informer(), cache.ResourceEventHandlerFuncs{
		DeleteFunc: func(obj any) {
			if pod, ok := untombstone(obj).(*corev1.Pod); ok {
				c.enqueueRecordsOfPod(pod)
			}
		},
	}); err != nil {
		return fmt.Errorf("adding the pod event handler: %w", err)
	}
	if err := c.handlers.Add(informers.Claims.Informer(), cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			c.enqueueWaitingClaim(obj)
			c.enqueueClaimOfDeletingRuntime(obj)
		},
		UpdateFunc: func(old, cur any) {
			if old.(*airlockv1alpha1.SandboxClaim).ResourceVersion != cur.(*airlockv1alpha1.SandboxClaim).ResourceVersion {
				c.enqueueWaitingClaim(cur)
				c.enqueueClaimOfDeletingRuntime(cur)
			}
		},
		DeleteFunc: func(obj any) { c.deleteClaim(logger, obj) },
	}); err != nil {
		return fmt.Errorf("adding the claim event handler: %w", err)
	}
	return nil
}

// deleteClaim enqueues the record of a deleted claim's workspace: the claim may have kept it
// from collection; or garbage collection deleted the claim, and its workspace gets a record.
func (c *Controller) deleteClaim(logger klog.Logger, obj any) {
	if claim, ok := untombstone(obj).(*airlockv1alpha1.SandboxClaim); ok {
		logger.V(4).Info("Claim deleted", "claim", klog.KObj(claim))
		c.enqueueRecordOfDir(claim)
		c.enqueueOrphanedWorkspace(claim)
	}
}

// untombstone returns the object of a tombstone, or obj.
func untombstone(obj any) any {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return tombstone.Obj
	}
	return obj
}

// enqueueRecord enqueues a Job that is a kept workspace's record, or the record of a Job that is
// one's child (a collection attempt, a held workspace's retry).
func (c *Controller) enqueueRecord(obj any) {
	job, ok := untombstone(obj).(*batchv1.Job)
	if !ok {
		return
	}
	if workspace.IsRecord(job) {
		c.queue.Add(cache.MetaObjectToName(job))
		return
	}
	if ref := metav1.GetControllerOf(job); ref != nil && ref.Kind == "Job" && ref.APIVersion == batchv1.SchemeGroupVersion.String() {
		c.queue.Add(cache.ObjectName{Namespace: job.Namespace, Name: ref.Name})
	}
}

// enqueueRetries enqueues the held records of the namespace whose retry a person asked for, when
// a claim's sync-back Job ends or goes: a retry may wait for its turn (syncBackRunning).
func (c *Controller) enqueueRetries(obj any) {
	job, ok := untombstone(obj).(*batchv1.Job)
	if !ok {
		return
	}
	if ref := metav1.GetControllerOf(job); ref == nil || ref.Kind != "SandboxClaim" {
		return
	}
	records, err := c.jobLister.Jobs(job.Namespace).List(labels.SelectorFromSet(labels.Set{
		airlockv1alpha1.LabelKeptWorkspace: airlockv1alpha1.LabelValueKeptWorkspace,
	}))
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	for _, record := range records {
		if _, ok := workspace.RetryTarget(record); ok {
			c.queue.Add(cache.MetaObjectToName(record))
		}
	}
}

// enqueueRecordsOf enqueues the records of the runtime's workspaces (its deletion, or a runtime
// created again under its name: an old UID's records are collected).
func (c *Controller) enqueueRecordsOf(obj any) {
	rt, ok := untombstone(obj).(*airlockv1alpha1.AgentRuntime)
	if !ok {
		return
	}
	c.enqueueRecordsLabelled(rt.Namespace, airlockv1alpha1.LabelRuntime, rt.Name)
	if rt.DeletionTimestamp != nil {
		c.enqueueWorkspacesOfDeletedRuntime(rt)
	}
}

// enqueueWorkspacesOfDeletedRuntime records the workspaces of the claims of a runtime being
// deleted before garbage collection deletes them: the runtime's finalizer (FinalizerWorkspaces)
// holds them until every one has a record, so that an operator that was down when the runtime
// was deleted finds them when it starts (the informer lists the runtime, deleting, and its
// claims).
func (c *Controller) enqueueWorkspacesOfDeletedRuntime(rt *airlockv1alpha1.AgentRuntime) {
	claims, err := c.claimLister.SandboxClaims(rt.Namespace).List(labels.Everything())
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	for _, claim := range claims {
		if claim.Spec.RuntimeName == rt.Name && admission.OwnedBy(claim, rt) {
			c.enqueueOrphanedWorkspace(claim)
		}
	}
}

// enqueueClaimOfDeletingRuntime records the workspace of a claim that its runtime's deletion
// waits for (pkg/controller/agentruntime, finalizer.go) and that came after the runtime's
// deletion was seen (created by then, or Binding since): the runtime's update enqueued only the
// claims there were.
func (c *Controller) enqueueClaimOfDeletingRuntime(obj any) {
	claim, ok := obj.(*airlockv1alpha1.SandboxClaim)
	if !ok || !workspace.RecordedWhenRuntimeGoes(claim) {
		return
	}
	rt, err := c.runtimeLister.AgentRuntimes(claim.Namespace).Get(claim.Spec.RuntimeName)
	if err == nil && rt.DeletionTimestamp != nil && admission.OwnedBy(claim, rt) && metav1.IsControlledBy(claim, rt) {
		c.enqueueOrphanedWorkspace(claim)
	}
}

// enqueueRecordsOfPod enqueues the records the claim of a deleted pod kept, and the record a
// deleted resume member waited on: the pod may have been what kept them from collection.
func (c *Controller) enqueueRecordsOfPod(pod *corev1.Pod) {
	if name := pod.Labels[airlockv1alpha1.LabelClaim]; name != "" {
		c.enqueueRecordsLabelled(pod.Namespace, airlockv1alpha1.LabelClaim, name)
	}
	if record := pod.Labels[airlockv1alpha1.LabelResumes]; record != "" {
		c.queue.Add(cache.ObjectName{Namespace: pod.Namespace, Name: record}) // a resume member held it
	}
}

func (c *Controller) enqueueRecordsLabelled(namespace, key, value string) {
	jobs, err := c.jobLister.Jobs(namespace).List(labels.SelectorFromSet(labels.Set{
		airlockv1alpha1.LabelKeptWorkspace: airlockv1alpha1.LabelValueKeptWorkspace, key: value,
	}))
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	for _, job := range jobs {
		c.queue.Add(cache.MetaObjectToName(job))
	}
}

// runtimeChanged says whether a runtime's update may change what happens to its kept
// workspaces: its deletion began, or its retention changed (not its status writes, which come
// once a second in a burst).
func runtimeChanged(old, cur *airlockv1alpha1.AgentRuntime) bool {
	return (old.DeletionTimestamp == nil) != (cur.DeletionTimestamp == nil) || workspace.Retention(old) != workspace.Retention(cur)
}

// enqueueRecordOfDir enqueues the record of the claim's workspace, if there is one.
func (c *Controller) enqueueRecordOfDir(claim *airlockv1alpha1.SandboxClaim) {
	name := workspace.RecordName(workspace.DirOf(claim))
	if _, err := c.jobLister.Jobs(claim.Namespace).Get(name); err == nil {
		c.queue.Add(cache.ObjectName{Namespace: claim.Namespace, Name: name})
	}
}

// enqueueWaitingClaim enqueues the record of the workspace that a claim waits for
// (workspace.WaitsForCollection with the claim controller's reason): another owner's kept
// workspace, collected now.
func (c *Controller) enqueueWaitingClaim(obj any) {
	if claim, ok := obj.(*airlockv1alpha1.SandboxClaim); ok && workspace.WaitingForCollection(claim) {
		c.enqueueRecordOfDir(claim)
	}
}

// enqueueOrphanedWorkspace is asked when a claim is deleted: a claim that may have had a pod on
// its workspace, whose runtime (by name and UID) is gone, was deleted by garbage collection
// without sync-back (SPEC section 3), and its workspace, which no claim of a runtime created
// again under the name may resume, gets a record that is collected at once (sync).
func (c *Controller) enqueueOrphanedWorkspace(claim *airlockv1alpha1.SandboxClaim) {
	if !workspace.RecordedWhenRuntimeGoes(claim) {
		return // never had a pod (nothing was written), or not the operator's to remove
	}
	rt, err := c.runtimeLister.AgentRuntimes(claim.Namespace).Get(claim.Spec.RuntimeName)
	if err == nil && rt.DeletionTimestamp == nil && admission.OwnedBy(claim, rt) {
		return // its runtime's: kept (or not) by its reaping
	}
	if err != nil && !apierrors.IsNotFound(err) {
		utilruntime.HandleError(err)
		return
	}
	key := cache.ObjectName{Namespace: claim.Namespace, Name: workspace.RecordName(workspace.DirOf(claim))}
	c.orphans.Store(key, claim.DeepCopy())
	c.queue.Add(key)
}
