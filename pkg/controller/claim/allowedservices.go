package claim

// Allowed Services (SPEC section 5): a claim's NetworkPolicy opens egress to the pods of each
// Service its frozen record allows that exists. The Services are read from a Service informer of
// their own (not the label-filtered one of the claims' children), and a claims index maps each
// allowed Service to the claims whose record allows it, so that a Service's add, change or
// deletion enqueues exactly those claims: a Service created after its claim bound is opened on
// its own event, not at the claim's next unrelated sync.

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
)

// allowedServiceIndex indexes claims by the "<namespace>/<name>" of each Service their frozen
// record allows.
const allowedServiceIndex = "airlock.dev/allowed-service"

// allowedServiceKeys is the index function of allowedServiceIndex. Claims without a record
// (not admitted yet) allow nothing.
func allowedServiceKeys(obj any) ([]string, error) {
	claim, ok := obj.(*airlockv1alpha1.SandboxClaim)
	if !ok || claim.Status.Frozen == nil {
		return nil, nil
	}
	keys := make([]string, 0, len(claim.Status.Frozen.AllowedServices))
	for _, ref := range claim.Status.Frozen.AllowedServices {
		keys = append(keys, ref.Namespace+"/"+ref.Name)
	}
	return keys, nil
}

// addAllowedServiceIndex adds allowedServiceIndex to the claims informer unless it has it: the
// informer is shared, runs on every replica, and outlives a controller (a replica that lost the
// lease builds a new one when it leads again).
func addAllowedServiceIndex(informer cache.SharedIndexInformer) error {
	if _, ok := informer.GetIndexer().GetIndexers()[allowedServiceIndex]; ok {
		return nil
	}
	if err := informer.AddIndexers(cache.Indexers{allowedServiceIndex: allowedServiceKeys}); err != nil {
		return fmt.Errorf("adding the claims' allowed-Service index: %w", err)
	}
	return nil
}

// addAllowedService, updateAllowedService and deleteAllowedService enqueue the claims whose
// record allows the Service.
func (c *Controller) addAllowedService(obj any) { c.enqueueClaimsAllowing(obj) }

func (c *Controller) updateAllowedService(old, cur any) {
	oldSvc, curSvc := old.(*corev1.Service), cur.(*corev1.Service)
	if oldSvc.ResourceVersion == curSvc.ResourceVersion {
		return // a periodic resync
	}
	if apiequality.Semantic.DeepEqual(oldSvc.Spec.Selector, curSvc.Spec.Selector) &&
		apiequality.Semantic.DeepEqual(oldSvc.Spec.Ports, curSvc.Spec.Ports) {
		return // nothing a NetworkPolicy is built from changed
	}
	c.enqueueClaimsAllowing(cur)
}

func (c *Controller) deleteAllowedService(obj any) { c.enqueueClaimsAllowing(obj) }

// enqueueClaimsAllowing enqueues the claims whose frozen record allows the Service obj.
func (c *Controller) enqueueClaimsAllowing(obj any) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	svc, ok := obj.(metav1.Object)
	if !ok {
		utilruntime.HandleError(fmt.Errorf("allowed-Service handler: unexpected object %T", obj))
		return
	}
	claims, err := c.claimIndexer.ByIndex(allowedServiceIndex, svc.GetNamespace()+"/"+svc.GetName())
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	for _, obj := range claims {
		c.queue.Add(cache.MetaObjectToName(obj.(*airlockv1alpha1.SandboxClaim)))
	}
}

// allowedServices returns the recorded allowed Services that exist, from the allowed-Service
// informer's cache.
func (c *Controller) allowedServices(refs []airlockv1alpha1.ServiceReference) ([]*corev1.Service, error) {
	return sandboxpod.ExistingServices(c.allowedServiceLister, refs)
}
