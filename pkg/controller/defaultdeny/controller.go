// Package defaultdeny keeps, in every namespace where airlock may run sandboxes (one with an
// AgentRuntime or a ToolRegistry), the standing default-deny NetworkPolicy that selects every
// airlock sandbox pod (sandboxpod.DefaultDenyPolicy): created before the namespace's first pod,
// put back when it is deleted or changed, and never deleted. The claim and warm pool controllers
// ask Ensure before they create a sandbox pod, so that no pod exists without it even when this
// controller has not run yet for the namespace.
package defaultdeny

import (
	"context"
	"fmt"

	networkingv1 "k8s.io/api/networking/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	networkinginformers "k8s.io/client-go/informers/networking/v1"
	"k8s.io/client-go/kubernetes"
	networkinglisters "k8s.io/client-go/listers/networking/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/controller/handlers"
	"github.com/airlock-dev/airlock/pkg/controller/objectcontrol"
	"github.com/airlock-dev/airlock/pkg/controller/workers"
	airlockinformers "github.com/airlock-dev/airlock/pkg/generated/informers/externalversions/airlock/v1alpha1"
	airlocklisters "github.com/airlock-dev/airlock/pkg/generated/listers/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
)

// ControllerName is the queue's name and the field manager of the policy writes.
const ControllerName = "airlock-default-deny-controller"

// Informers are the shared informers the controller reads: the operator's filtered cache of
// NetworkPolicies (the policy carries LabelClaim), and the runtimes and registries that say
// which namespaces need one.
type Informers struct {
	NetworkPolicies networkinginformers.NetworkPolicyInformer
	Runtimes        airlockinformers.AgentRuntimeInformer
	Registries      airlockinformers.ToolRegistryInformer
}

// Controller keeps the namespaces' default-deny policies.
type Controller struct {
	policies       objectcontrol.Interface[*networkingv1.NetworkPolicy]
	npLister       networkinglisters.NetworkPolicyLister
	runtimeLister  airlocklisters.AgentRuntimeLister
	registryLister airlocklisters.ToolRegistryLister
	synced         []cache.InformerSynced
	handlers       handlers.Registrations
	queue          workqueue.TypedRateLimitingInterface[cache.ObjectName]
}

// NewController returns the controller on the informers, writing with client.
func NewController(_ context.Context, client kubernetes.Interface, inf Informers) (*Controller, error) {
	c := &Controller{
		policies:       objectcontrol.NetworkPolicies(client, ControllerName),
		npLister:       inf.NetworkPolicies.Lister(),
		runtimeLister:  inf.Runtimes.Lister(),
		registryLister: inf.Registries.Lister(),
		synced:         []cache.InformerSynced{inf.NetworkPolicies.Informer().HasSynced, inf.Runtimes.Informer().HasSynced, inf.Registries.Informer().HasSynced},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[cache.ObjectName](),
			workqueue.TypedRateLimitingQueueConfig[cache.ObjectName]{Name: ControllerName}),
	}
	byNamespace := cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueueNamespaceOf,
		UpdateFunc: func(_, cur any) { c.enqueueNamespaceOf(cur) },
	}
	if err := c.handlers.Add(inf.Runtimes.Informer(), byNamespace); err != nil {
		return nil, fmt.Errorf("adding the runtime event handler: %w", err)
	}
	if err := c.handlers.Add(inf.Registries.Informer(), byNamespace); err != nil {
		return nil, fmt.Errorf("adding the registry event handler: %w", err)
	}
	if err := c.handlers.Add(inf.NetworkPolicies.Informer(), cache.FilteringResourceEventHandler{
		FilterFunc: isDefaultDeny,
		Handler: cache.ResourceEventHandlerFuncs{
			UpdateFunc: func(_, cur any) { c.enqueueNamespaceOf(cur) },
			DeleteFunc: c.enqueueNamespaceOf,
		},
	}); err != nil {
		return nil, fmt.Errorf("adding the NetworkPolicy event handler: %w", err)
	}
	return c, nil
}

// isDefaultDeny says whether obj (or a tombstone of it) is a namespace's default-deny policy.
func isDefaultDeny(obj any) bool {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	np, ok := obj.(*networkingv1.NetworkPolicy)
	return ok && np.Name == sandboxpod.DefaultDenyPolicyName
}

func (c *Controller) enqueueNamespaceOf(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	switch o := obj.(type) {
	case *airlockv1alpha1.AgentRuntime:
		c.queue.Add(cache.ObjectName{Namespace: o.Namespace, Name: sandboxpod.DefaultDenyPolicyName})
	case *airlockv1alpha1.ToolRegistry:
		c.queue.Add(cache.ObjectName{Namespace: o.Namespace, Name: sandboxpod.DefaultDenyPolicyName})
	case *networkingv1.NetworkPolicy:
		c.queue.Add(cache.ObjectName{Namespace: o.Namespace, Name: sandboxpod.DefaultDenyPolicyName})
	}
}

// Run runs the workers until ctx is done, and returns once they all have.
func (c *Controller) Run(ctx context.Context, n int) error {
	defer utilruntime.HandleCrashWithContext(ctx)
	defer c.handlers.RemoveAll()
	defer c.queue.ShutDown()
	logger := klog.FromContext(ctx)
	logger.Info("Starting controller", "controller", ControllerName, "workers", n)
	defer logger.Info("Shutting down controller", "controller", ControllerName)
	if !cache.WaitForNamedCacheSyncWithContext(ctx, c.synced...) {
		return fmt.Errorf("waiting for the informer caches to sync: %w", ctx.Err())
	}
	workers.Run(ctx, n, c.queue, "namespace", c.sync)
	return nil
}
