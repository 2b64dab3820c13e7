package claim

// The controller's event handlers: they only enqueue (claims by name, namespaces for admission
// passes) and tell the expectations what the cache has now shown.

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/workspace"
)

// addEventHandlers adds the controller's handlers to the informers (removed when Run returns):
// claims, the runtimes and registries that change their namespace's admission, the children and
// pods of claims (addChildHandlers), and the allowed Services.
func (c *Controller) addEventHandlers(logger klog.Logger, informers Informers) error {
	if err := addAllowedServiceIndex(informers.Claims.Informer()); err != nil {
		return err
	}
	if err := c.handlers.Add(informers.Claims.Informer(), cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.addClaim(logger, obj) },
		UpdateFunc: func(old, cur any) { c.updateClaim(logger, old, cur) },
		DeleteFunc: func(obj any) { c.deleteClaim(logger, obj) },
	}); err != nil {
		return fmt.Errorf("adding the claim event handler: %w", err)
	}
	// A runtime's or registry's change can change admission and idle timers: look at the
	// namespace's claims again.
	// Status-only changes (a runtime's claim counts) change nothing here and are ignored.
	namespaceHandler := cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { c.enqueueNamespaceOf(obj) },
		UpdateFunc: func(old, cur any) {
			if old.(metav1.Object).GetGeneration() != cur.(metav1.Object).GetGeneration() {
				c.enqueueNamespaceOf(cur)
			}
		},
		DeleteFunc: func(obj any) { c.enqueueNamespaceOf(obj) },
	}
	if err := c.handlers.Add(informers.Runtimes.Informer(), namespaceHandler); err != nil {
		return fmt.Errorf("adding the runtime event handler: %w", err)
	}
	if err := c.handlers.Add(informers.Registries.Informer(), namespaceHandler); err != nil {
		return fmt.Errorf("adding the registry event handler: %w", err)
	}
	if err := c.addChildHandlers(informers); err != nil {
		return err
	}
	if err := c.handlers.Add(informers.AllowedServices.Informer(), cache.ResourceEventHandlerFuncs{
		AddFunc:    c.addAllowedService,
		UpdateFunc: c.updateAllowedService,
		DeleteFunc: c.deleteAllowedService,
	}); err != nil {
		return fmt.Errorf("adding the allowed-Service event handler: %w", err)
	}
	return nil
}

// addChildHandlers adds the handlers of the claims' children: NetworkPolicies, Jobs (sync-back
// Jobs and kept workspaces' records too) and pods.
func (c *Controller) addChildHandlers(informers Informers) error {
	// Children, including pods: enqueue the claim they belong to.
	childHandler := cache.ResourceEventHandlerFuncs{
		AddFunc: c.handleObject,
		UpdateFunc: func(old, cur any) {
			if old.(metav1.Object).GetResourceVersion() == cur.(metav1.Object).GetResourceVersion() {
				return // a periodic resync
			}
			c.handleObject(cur)
		},
		DeleteFunc: c.handleObject,
	}
	// The children a pass builds: their adds meet the claim's child expectations.
	builtHandler := childHandler
	builtHandler.AddFunc = c.addChild
	if err := c.handlers.Add(informers.NetworkPolicies.Informer(), builtHandler); err != nil {
		return fmt.Errorf("adding the networkpolicy event handler: %w", err)
	}
	if err := c.handlers.Add(informers.Jobs.Informer(), childHandler); err != nil {
		return fmt.Errorf("adding the job event handler: %w", err)
	}
	podHandler := builtHandler
	podHandler.DeleteFunc = func(obj any) {
		if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tombstone.Obj
		}
		if pod, ok := obj.(*corev1.Pod); ok {
			c.podsChecked.Delete(pod.UID)
			c.adopting.Delete(pod.UID)
			c.forgetStop(pod.UID)
			c.forgetRead(pod.UID)
			c.enqueueResumeWaiters(pod)
		}
		c.handleObject(obj)
	}
	if err := c.handlers.Add(informers.Pods.Informer(), podHandler); err != nil {
		return fmt.Errorf("adding the pod event handler: %w", err)
	}
	if err := c.handlers.Add(informers.Jobs.Informer(), c.syncJobHandler()); err != nil {
		return fmt.Errorf("adding the sync-back Job event handler: %w", err)
	}
	if err := c.handlers.Add(informers.Jobs.Informer(), c.keptHandler()); err != nil {
		return fmt.Errorf("adding the kept workspace event handler: %w", err)
	}
	return nil
}

// enqueueAdmission asks for an admission pass over the namespace.
func (c *Controller) enqueueAdmission(namespace string) {
	c.admitQueue.Add(namespace)
}

func (c *Controller) addClaim(logger klog.Logger, obj any) {
	claim := obj.(*airlockv1alpha1.SandboxClaim)
	logger.V(4).Info("Claim added", "claim", klog.KObj(claim))
	if claim.Spec.Replaces != "" {
		// The claim it replaces is now replaced: the leader links the two (syncFailed).
		c.queue.Add(cache.ObjectName{Namespace: claim.Namespace, Name: claim.Spec.Replaces})
	}
	if c.expectations.observe(claim.Namespace, claim.Name, claim) || isUndecided(claim) {
		c.enqueueAdmission(claim.Namespace)
	}
	c.enqueueClaim(claim)
}

func (c *Controller) updateClaim(logger klog.Logger, old, cur any) {
	oldClaim, curClaim := old.(*airlockv1alpha1.SandboxClaim), cur.(*airlockv1alpha1.SandboxClaim)
	if oldClaim.ResourceVersion == curClaim.ResourceVersion {
		return // a periodic resync
	}
	c.enqueueClaim(curClaim)
	if c.expectations.observe(curClaim.Namespace, curClaim.Name, curClaim) || isUndecided(curClaim) {
		c.enqueueAdmission(curClaim.Namespace)
	}
	if holdsSlot(oldClaim) && !holdsSlot(curClaim) {
		logger.V(4).Info("Claim freed a slot", "claim", klog.KObj(curClaim), "phase", curClaim.Status.Phase)
		c.enqueueWaiting(curClaim.Namespace)
	}
	if leftSyncLine(oldClaim, curClaim) || gaveUpSync(oldClaim, curClaim) {
		c.enqueueSyncWaiters(curClaim.Namespace, oldClaim.Spec.TargetPath)
	}
}

func (c *Controller) deleteClaim(logger klog.Logger, obj any) {
	claim, ok := obj.(*airlockv1alpha1.SandboxClaim)
	if !ok {
		tombstone, ok := obj.(cache.DeletedFinalStateUnknown)
		if !ok {
			utilruntime.HandleError(fmt.Errorf("couldn't get object from tombstone %#v", obj))
			return
		}
		claim, ok = tombstone.Obj.(*airlockv1alpha1.SandboxClaim)
		if !ok {
			utilruntime.HandleError(fmt.Errorf("tombstone contained object that is not a SandboxClaim %#v", obj))
			return
		}
	}
	logger.V(4).Info("Claim deleted", "claim", klog.KObj(claim))
	c.expectations.observeDeleted(claim)
	c.childExpect.forget(claim.UID)
	c.statusWrites.forget(claim.UID)
	c.turns.forget(claim.Namespace, claim.UID)
	c.enqueueWaiting(claim.Namespace)
	c.syncJobs.observed(cache.ObjectName{Namespace: claim.Namespace, Name: workspace.SyncJobName(claim)})
	if leftSyncLine(claim, nil) {
		c.enqueueSyncWaiters(claim.Namespace, claim.Spec.TargetPath)
	}
	// A Failed claim is kept while its replacement lives.
	if claim.Spec.Replaces != "" {
		c.queue.Add(cache.ObjectName{Namespace: claim.Namespace, Name: claim.Spec.Replaces})
	}
	c.resumedBy.Delete(claim.UID)
}

// addChild meets the child expectations of the claim that controls a new pod or NetworkPolicy,
// and enqueues the claim.
func (c *Controller) addChild(obj any) {
	if object, ok := obj.(metav1.Object); ok {
		if ref := metav1.GetControllerOf(object); ref != nil && ref.Kind == "SandboxClaim" {
			c.childExpect.lower(ref.UID)
		}
	}
	c.handleObject(obj)
}

// handleObject enqueues the claim that controls obj (a child, or a sandbox pod by its label).
func (c *Controller) handleObject(obj any) {
	object, ok := obj.(metav1.Object)
	if !ok {
		tombstone, ok := obj.(cache.DeletedFinalStateUnknown)
		if !ok {
			utilruntime.HandleError(fmt.Errorf("error decoding object, invalid type"))
			return
		}
		object, ok = tombstone.Obj.(metav1.Object)
		if !ok {
			utilruntime.HandleError(fmt.Errorf("error decoding object tombstone, invalid type"))
			return
		}
	}
	if ref := metav1.GetControllerOf(object); ref != nil && ref.Kind == "SandboxClaim" {
		c.queue.Add(cache.ObjectName{Namespace: object.GetNamespace(), Name: ref.Name})
		return
	}
	// Pods of a Deployment an earlier version built are controlled by its ReplicaSet: their
	// claim is found by label.
	if name := object.GetLabels()[LabelClaim]; name != "" {
		c.queue.Add(cache.ObjectName{Namespace: object.GetNamespace(), Name: name})
	}
}

func (c *Controller) enqueueClaim(claim *airlockv1alpha1.SandboxClaim) {
	c.queue.Add(cache.MetaObjectToName(claim))
}

// enqueueWaiting asks for an admission pass over the namespace: a slot may have freed.
func (c *Controller) enqueueWaiting(namespace string) {
	c.enqueueAdmission(namespace)
}

// enqueueNamespaceOf enqueues every claim of obj's namespace.
func (c *Controller) enqueueNamespaceOf(obj any) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	object, ok := obj.(metav1.Object)
	if !ok {
		return
	}
	claims, err := c.claimLister.SandboxClaims(object.GetNamespace()).List(labels.Everything())
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	for _, claim := range claims {
		c.enqueueClaim(claim)
	}
}

// isUndecided says whether admission has yet to place the claim (Pending or Queued).
func isUndecided(claim *airlockv1alpha1.SandboxClaim) bool {
	switch claim.Status.Phase {
	case "", airlockv1alpha1.ClaimPending, airlockv1alpha1.ClaimQueued:
		return claim.DeletionTimestamp == nil
	}
	return false
}

// holdsSlot says whether the claim counts under its runtime's maxConcurrent as far as the
// handlers can tell (Reaping claims free theirs when their pods are gone, which sync notices).
func holdsSlot(claim *airlockv1alpha1.SandboxClaim) bool {
	switch claim.Status.Phase {
	case airlockv1alpha1.ClaimBinding, airlockv1alpha1.ClaimBound, airlockv1alpha1.ClaimReaping:
		return true
	}
	return false
}
