package defaultdeny

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	networkinginformers "k8s.io/client-go/informers/networking/v1"
	"k8s.io/client-go/kubernetes"
	networkinglisters "k8s.io/client-go/listers/networking/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/airlock-dev/airlock/pkg/controller/objectcontrol"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
)

// sync puts the namespace's default-deny policy in place when the namespace has a runtime or a
// registry: creates it, or writes back its spec and labels when someone changed them. A
// namespace with neither keeps a policy it has (nothing ever deletes it: pods of a runtime
// deleted a moment ago may still run).
func (c *Controller) sync(ctx context.Context, key cache.ObjectName) error {
	runtimes, err := c.runtimeLister.AgentRuntimes(key.Namespace).List(labels.Everything())
	if err != nil {
		return err
	}
	registries, err := c.registryLister.ToolRegistries(key.Namespace).List(labels.Everything())
	if err != nil {
		return err
	}
	if len(runtimes) == 0 && len(registries) == 0 {
		return nil
	}
	err = ensure(ctx, c.npLister, c.policies, key.Namespace)
	if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
		// Nothing new may be created in it, pods included; its deletion ends the work.
		klog.FromContext(ctx).V(2).Info("The namespace is being deleted: no default-deny NetworkPolicy is created in it", "namespace", key.Namespace)
		return nil
	}
	return err
}

// Ensurer puts a namespace's default-deny policy in place if the cache does not show it: the
// claim and warm pool controllers are given one (claim.DefaultDenyEnsurer,
// warmpool.DefaultDenyEnsurer), and call it before they create a sandbox pod. It writes as this
// controller does.
type Ensurer struct {
	lister networkinglisters.NetworkPolicyLister
	writer policyWriter
}

// NewEnsurer returns an Ensurer reading the operator's filtered NetworkPolicy cache and writing
// with client.
func NewEnsurer(client kubernetes.Interface, policies networkinginformers.NetworkPolicyInformer) *Ensurer {
	return &Ensurer{lister: policies.Lister(), writer: objectcontrol.NetworkPolicies(client, ControllerName)}
}

// Ensure returns once the API server has the namespace's policy (created now, or there already).
func (e *Ensurer) Ensure(ctx context.Context, namespace string) error {
	return ensure(ctx, e.lister, e.writer, namespace)
}

// policyWriter is the part of objectcontrol.Interface that ensure writes with.
type policyWriter interface {
	Create(ctx context.Context, obj *networkingv1.NetworkPolicy) error
	Update(ctx context.Context, obj *networkingv1.NetworkPolicy) error
}

func ensure(ctx context.Context, lister networkinglisters.NetworkPolicyLister, w policyWriter, namespace string) error {
	want := sandboxpod.DefaultDenyPolicy(namespace)
	live, err := lister.NetworkPolicies(namespace).Get(want.Name)
	if apierrors.IsNotFound(err) {
		klog.FromContext(ctx).V(2).Info("Creating the namespace's default-deny NetworkPolicy", "networkPolicy", klog.KObj(want))
		if err := w.Create(ctx, want); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		return nil
	}
	if err != nil {
		return err
	}
	if apiequality.Semantic.DeepEqual(live.Spec, want.Spec) && labels.Equals(live.Labels, want.Labels) {
		return nil
	}
	klog.FromContext(ctx).V(2).Info("Writing back the namespace's default-deny NetworkPolicy", "networkPolicy", klog.KObj(live))
	updated := live.DeepCopy()
	updated.Spec = want.Spec
	updated.Labels = want.Labels
	return w.Update(ctx, updated)
}
