package claim

// The claim's children (SPEC section 5): created, and their drift repaired, from the claim's
// frozen record. A child with the claim's name that the claim does not control is reported and
// never touched.

import (
	"context"
	"errors"
	"fmt"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/claimtoken"
)

// ensureChildren creates the claim's Secret, Deployment, Service and NetworkPolicy, and repairs
// the drift of what it set on them. The Secret's token is never changed once created. The four
// are independent, so they are written concurrently: a new claim costs one round trip, not four.
//
// Everything comes from the claim's frozen record: the live class and registry are not read.
// The allowed Services it names are read from the allowed-Service informer's cache.
func (c *Controller) ensureChildren(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, record *airlockv1alpha1.FrozenSandbox, replicas int32) error {
	allowed, err := c.allowedServices(record.AllowedServices)
	if err != nil {
		return err
	}
	token, err := c.newToken(ctx, claim)
	if err != nil {
		return fmt.Errorf("deriving the claim's token: %w", err)
	}
	if token == "" {
		return errors.New("deriving the claim's token: empty token")
	}
	// The Secret first: the sandbox pod mounts it. The other three are independent, so they are
	// written concurrently.
	secretName := claimtoken.ClaimSecretName(claim.Name, token)
	if err := c.ensureSecret(ctx, claim, secretName, token); err != nil {
		return err
	}
	deployment := buildDeployment(claim, record, replicas)
	useTokenSecret(deployment, secretName)
	ensures := []func() error{
		func() error { return c.ensureDeployment(ctx, claim, deployment) },
		func() error { return c.ensureService(ctx, claim, buildService(claim, record)) },
		func() error { return c.ensureNetworkPolicy(ctx, claim, buildNetworkPolicy(claim, record, allowed)) },
	}
	errs := make([]error, len(ensures))
	var wg sync.WaitGroup
	for i, ensure := range ensures {
		wg.Go(func() { errs[i] = ensure() })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// ensureChildrenIfSeen is ensureChildren once the cache shows every child the leader created for
// the claim (childExpectations); until then it writes nothing.
func (c *Controller) ensureChildrenIfSeen(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, record *airlockv1alpha1.FrozenSandbox, replicas int32) error {
	if !c.childExpect.satisfied(claim.UID) {
		klog.FromContext(ctx).V(4).Info("Children created and not in the cache yet; leaving them alone", "claim", klog.KObj(claim))
		return nil
	}
	return c.ensureChildren(ctx, claim, record, replicas)
}

// controlled checks that a child is controlled by the claim, and reports it when not. A child of
// an earlier claim of the same name (garbage collection deletes children in the background, so a
// claim closed and acquired again can meet its predecessor's) is never adopted: it is deleted, if
// it is not being deleted already, and the claim waits for it to go (errPredecessorChild; its
// deletion enqueues the claim, by the owner's name).
func controlled[T metav1.Object](ctx context.Context, c *Controller, claim *airlockv1alpha1.SandboxClaim, child T, kind string, writer objectControl[T]) error {
	if metav1.IsControlledBy(child, claim) {
		return nil
	}
	if ref := metav1.GetControllerOf(child); ref != nil && ref.Kind == "SandboxClaim" && ref.Name == claim.Name {
		if child.GetDeletionTimestamp() == nil {
			klog.FromContext(ctx).V(2).Info("Deleting a child of an earlier claim of the same name", "claim", klog.KObj(claim), "kind", kind, "child", klog.KObj(child))
			err := writer.Delete(ctx, child.GetNamespace(), child.GetName(), child.GetUID())
			if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				return err
			}
		}
		return errPredecessorChild
	}
	c.recorder.Eventf(claim, corev1.EventTypeWarning, ReasonErrResourceExists, MessageResourceExists, kind, child.GetName())
	return &notControlledError{kind: kind, name: child.GetName()}
}

// errPredecessorChild says that a child of an earlier claim of the same name is still there.
var errPredecessorChild = errors.New("a child of an earlier claim of the same name is still being deleted")

// notControlledError says that an object the claim does not control holds a child's name.
type notControlledError struct{ kind, name string }

func (e *notControlledError) Error() string {
	return fmt.Sprintf(MessageResourceExists, e.kind, e.name)
}

// mergeLabels returns live with want's labels set, and whether that changed anything.
func mergeLabels(live, want map[string]string) (map[string]string, bool) {
	changed := false
	out := make(map[string]string, len(live)+len(want))
	for k, v := range live {
		out[k] = v
	}
	for k, v := range want {
		if out[k] != v {
			out[k] = v
			changed = true
		}
	}
	return out, changed
}

// ensureSecret creates the claim's token Secret, name (claimtoken.ClaimSecretName), holding the
// token derived from the operator's key. The operator may create Secrets outside its own
// namespace but not read them, so the Secret is created, never read or repaired: only while the
// claim's Deployment (in the cache) does not mount it yet (the Deployment is written after the
// Secret, so once it mounts it the Secret was created), and AlreadyExists counts as done: the
// name is a hash of the token, which nobody can compute without the key, so a Secret of that name
// is one an earlier sync created (docs/decisions.md, "Least privilege"). The token is derived from
// the claim's UID, so an earlier claim of the same name had another token and another Secret: a
// predecessor's Secret is never taken for this claim's.
func (c *Controller) ensureSecret(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, name, token string) error {
	d, err := c.deploymentLister.Deployments(claim.Namespace).Get(claim.Name)
	switch {
	case err == nil && metav1.IsControlledBy(d, claim) && tokenSecretOf(d) == name:
		return nil
	case err != nil && !apierrors.IsNotFound(err):
		return err
	}
	err = c.children.secrets.Create(ctx, buildSecret(claim, name, token))
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

func (c *Controller) ensureDeployment(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, want *appsv1.Deployment) error {
	live, err := c.deploymentLister.Deployments(claim.Namespace).Get(want.Name)
	if apierrors.IsNotFound(err) {
		c.childExpect.raise(claim.UID, 1) // lowered when the cache shows it
		err = c.children.deployments.Create(ctx, want)
		if err != nil {
			c.childExpect.lower(claim.UID)
		}
		if apierrors.IsAlreadyExists(err) {
			return nil // the cache will show it and enqueue the claim
		}
		return err
	}
	if err != nil {
		return err
	}
	if err := controlled(ctx, c, claim, live, "Deployment", c.children.deployments); err != nil {
		return err
	}
	l, labelsChanged := mergeLabels(live.Labels, want.Labels)
	// want is built from the claim's frozen record, which never changes: a template that differs
	// from it drifted (someone edited the Deployment), and is repaired.
	if !labelsChanged &&
		ptr.Deref(live.Spec.Replicas, 1) == *want.Spec.Replicas &&
		live.Spec.Strategy.Type == want.Spec.Strategy.Type && live.Spec.Strategy.RollingUpdate == nil &&
		apiequality.Semantic.DeepEqual(live.Spec.Template, want.Spec.Template) {
		return nil
	}
	updated := live.DeepCopy()
	updated.Labels = l
	updated.Spec.Replicas = want.Spec.Replicas
	updated.Spec.Strategy = want.Spec.Strategy
	updated.Spec.Template = want.Spec.Template
	klog.FromContext(ctx).V(2).Info("Repairing the claim's Deployment", "claim", klog.KObj(claim))
	err = c.children.deployments.Update(ctx, updated)
	return err
}

// scaleDown sets the claim's Deployment, if it has one, to zero replicas.
func (c *Controller) scaleDown(ctx context.Context, claim *airlockv1alpha1.SandboxClaim) error {
	live, err := c.deploymentLister.Deployments(claim.Namespace).Get(claim.Name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if !metav1.IsControlledBy(live, claim) || ptr.Deref(live.Spec.Replicas, 1) == 0 {
		return nil
	}
	updated := live.DeepCopy()
	updated.Spec.Replicas = ptr.To[int32](0)
	err = c.children.deployments.Update(ctx, updated)
	return err
}

func (c *Controller) ensureService(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, want *corev1.Service) error {
	live, err := c.serviceLister.Services(claim.Namespace).Get(want.Name)
	if apierrors.IsNotFound(err) {
		c.childExpect.raise(claim.UID, 1) // lowered when the cache shows it
		err = c.children.services.Create(ctx, want)
		if err != nil {
			c.childExpect.lower(claim.UID)
		}
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	}
	if err != nil {
		return err
	}
	if err := controlled(ctx, c, claim, live, "Service", c.children.services); err != nil {
		return err
	}
	l, labelsChanged := mergeLabels(live.Labels, want.Labels)
	if !labelsChanged && live.Spec.Type == want.Spec.Type &&
		apiequality.Semantic.DeepEqual(live.Spec.Selector, want.Spec.Selector) &&
		servicePortsEqual(live.Spec.Ports, want.Spec.Ports) {
		return nil
	}
	updated := live.DeepCopy()
	updated.Labels = l
	updated.Spec.Type = want.Spec.Type
	updated.Spec.Selector = want.Spec.Selector
	updated.Spec.Ports = want.Spec.Ports
	err = c.children.services.Update(ctx, updated)
	return err
}

// servicePortsEqual compares the fields of Service ports that the controller sets.
func servicePortsEqual(live, want []corev1.ServicePort) bool {
	if len(live) != len(want) {
		return false
	}
	for i := range want {
		l, w := live[i], want[i]
		if l.Name != w.Name || l.Port != w.Port || l.TargetPort != w.TargetPort || l.Protocol != w.Protocol {
			return false
		}
	}
	return true
}

func (c *Controller) ensureNetworkPolicy(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, want *networkingv1.NetworkPolicy) error {
	live, err := c.networkPolicyLister.NetworkPolicies(claim.Namespace).Get(want.Name)
	if apierrors.IsNotFound(err) {
		c.childExpect.raise(claim.UID, 1) // lowered when the cache shows it
		err = c.children.networkPolicies.Create(ctx, want)
		if err != nil {
			c.childExpect.lower(claim.UID)
		}
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	}
	if err != nil {
		return err
	}
	if err := controlled(ctx, c, claim, live, "NetworkPolicy", c.children.networkPolicies); err != nil {
		return err
	}
	l, labelsChanged := mergeLabels(live.Labels, want.Labels)
	if !labelsChanged && apiequality.Semantic.DeepEqual(live.Spec, want.Spec) {
		return nil
	}
	updated := live.DeepCopy()
	updated.Labels = l
	updated.Spec = want.Spec
	err = c.children.networkPolicies.Update(ctx, updated)
	return err
}
