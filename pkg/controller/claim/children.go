package claim

// The claim's children (SPEC section 5): created, and their drift repaired, from the claim's
// frozen record. A child with the claim's name that the claim does not control is reported and
// never touched.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/claimtoken"
	"github.com/airlock-dev/airlock/pkg/controller/objectcontrol"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
	"github.com/airlock-dev/airlock/pkg/workspace"
)

// ensureChildren creates the claim's Secret, NetworkPolicy and pod, and repairs the drift of what
// it set on them. The Secret's token is never changed once created. The Secret and the
// NetworkPolicy are independent and written concurrently; the pod comes after both: it mounts
// the Secret, and it never runs a moment without its default-deny policy.
//
// Everything comes from the claim's frozen record: the live class and registry are not read.
// The allowed Services it names are read from the allowed-Service informer's cache.
func (c *Controller) ensureChildren(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, record *airlockv1alpha1.FrozenSandbox) error {
	allowed, err := c.allowedServices(record.AllowedServices)
	if err != nil {
		return err
	}
	if claim.Status.Warm != nil {
		// An adopted warm member: its pod and key are the member's. The claim adds its own
		// policy, kept from its record as any claim's, and once the cache shows it, the pod
		// leaves the pool's policy (leavePool).
		want := c.claimNetworkPolicy(claim, record, allowed)
		if err := c.ensureNetworkPolicy(ctx, claim, want); err != nil {
			return err
		}
		return c.leavePool(ctx, claim, want)
	}
	token, err := c.newToken(ctx, claim)
	if err != nil {
		return fmt.Errorf("deriving the claim's token: %w", err)
	}
	if token == "" {
		return errors.New("deriving the claim's token: empty token")
	}
	pods, err := c.claimPods(claim)
	if err != nil {
		return err
	}
	if len(legacyPods(pods)) > 0 {
		// A Deployment of an earlier version runs the claim's pod, with the claim's Secret: two
		// pods would write one workspace. Only its policy is kept up.
		return c.ensureNetworkPolicy(ctx, claim, c.claimNetworkPolicy(claim, record, allowed))
	}
	secret, err := c.claimSecret(ctx, claim, record, token)
	if err != nil {
		return err
	}
	secretName := secret.Name
	ensures := []func() error{
		func() error { return c.ensureSecret(ctx, claim, secret) },
		func() error {
			return c.ensureNetworkPolicy(ctx, claim, c.claimNetworkPolicy(claim, record, allowed))
		},
	}
	errs := make([]error, len(ensures))
	var wg sync.WaitGroup
	for i, ensure := range ensures {
		wg.Go(func() { errs[i] = ensure() })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	pod := sandboxpod.ClaimPod(claim, record)
	sandboxpod.UseTokenSecret(pod, secretName)
	if _, err := c.podLister.Pods(pod.Namespace).Get(pod.Name); apierrors.IsNotFound(err) {
		// Before the pod is made: the claim's workspace may be a kept one (kept.go).
		resumed, err := c.takeKeptWorkspace(ctx, claim)
		if errors.Is(err, errWorkspaceDirWritten) {
			return nil // the status update syncs the claim again, with its workspace
		}
		if err != nil {
			return err
		}
		if resumed != nil {
			c.resumedBy.Store(claim.UID, resumed)
		} else if earlier, ok := c.resumedBy.Load(claim.UID); ok {
			resumed = earlier.(map[string]string) // taken before: this pod resumes it too
		}
		// No resume member may still mount the workspace (resume.go): one writer.
		if err := c.clearResumeMembers(ctx, claim, workspace.RecordName(workspace.DirOf(claim)), nil); err != nil {
			return err
		}
		for k, v := range resumed {
			pod.Labels[k] = v
		}
	}
	return c.ensurePod(ctx, claim, pod)
}

// claimSecret is the claim's token Secret: its sandboxd token and, with egress in its record,
// its proxy credential for the gateway.
func (c *Controller) claimSecret(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, record *airlockv1alpha1.FrozenSandbox, token string) (*corev1.Secret, error) {
	secret := sandboxpod.TokenSecret(claim, claimtoken.ClaimSecretName(claim.Name, token), token)
	if record.Egress == nil {
		return secret, nil
	}
	proxy, err := c.newProxyCredential(ctx, claim)
	if err != nil {
		return nil, fmt.Errorf("deriving the claim's egress proxy credential: %w", err)
	}
	if proxy == "" {
		return nil, errors.New("deriving the claim's egress proxy credential: empty credential")
	}
	return sandboxpod.TokenSecretWithProxy(claim, secret.Name, token, proxy), nil
}

// ensureChildrenIfSeen is ensureChildren once the cache shows every child the leader created for
// the claim (childExpectations); until then it writes nothing.
func (c *Controller) ensureChildrenIfSeen(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, record *airlockv1alpha1.FrozenSandbox) error {
	if !c.childExpect.satisfied(claim.UID) {
		klog.FromContext(ctx).V(4).Info("Children created and not in the cache yet; leaving them alone", "claim", klog.KObj(claim))
		return nil
	}
	return c.ensureChildren(ctx, claim, record)
}

// controlled checks that a child is controlled by the claim, and reports it when not. A child of
// an earlier claim of the same name (garbage collection deletes children in the background, so a
// claim closed and acquired again can meet its predecessor's) is never adopted: it is deleted, if
// it is not being deleted already, and the claim waits for it to go (errPredecessorChild; its
// deletion enqueues the claim, by the owner's name).
func controlled[T metav1.Object](ctx context.Context, c *Controller, claim *airlockv1alpha1.SandboxClaim, child T, kind string, writer objectcontrol.Interface[T]) error {
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

// ensureSecret creates the claim's token Secret, secret (named claimtoken.ClaimSecretName), holding
// the token derived from the operator's key (and, with egress, the proxy credential). The operator may create Secrets outside its own
// namespace but not read them, so the Secret is created, never read or repaired: only while the
// claim's pod (in the cache) does not mount it yet (the pod is written after the Secret, so once
// it mounts it the Secret was created), and AlreadyExists counts as done: the name is a hash of
// the token, which nobody can compute without the key, so a Secret of that name is one an earlier
// sync created (docs/decisions.md, "Least privilege"). The token is derived from the claim's UID,
// so an earlier claim of the same name had another token and another Secret: a predecessor's
// Secret is never taken for this claim's.
func (c *Controller) ensureSecret(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, secret *corev1.Secret) error {
	pod, err := c.podLister.Pods(claim.Namespace).Get(claim.Name)
	switch {
	case err == nil && metav1.IsControlledBy(pod, claim) && sandboxpod.TokenSecretOf(pod) == secret.Name:
		return nil
	case err != nil && !apierrors.IsNotFound(err):
		return err
	}
	err = c.children.secrets.Create(ctx, secret)
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// ensurePod creates the claim's pod, and repairs what of its drift a pod allows: its labels are
// put back; a pod that does not run what the record says (another image or args, or another
// token Secret: only a pod the claim controls gets here, but anyone who may create pods can write
// an ownerReference) is deleted, and created again from the record once it is gone. A pod that has
// ended (evicted, its node gone) or is being deleted is left to replaceEndedPod and to its deletion.
func (c *Controller) ensurePod(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, want *corev1.Pod) error {
	live, err := c.podLister.Pods(claim.Namespace).Get(want.Name)
	if apierrors.IsNotFound(err) {
		// The namespace's standing deny-all first: whatever deletes the claim's own policy
		// before its pod, the pod is never without one (sandboxpod.DefaultDenyPolicy).
		if err := c.ensureDefaultDeny(ctx, claim.Namespace); err != nil {
			return err
		}
		c.childExpect.raise(claim.UID, 1) // lowered when the cache shows it
		err = c.children.pods.Create(ctx, want)
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
	if err := controlled(ctx, c, claim, live, "Pod", c.children.pods); err != nil {
		return err
	}
	if live.DeletionTimestamp != nil || sandboxpod.Ended(live) {
		return nil
	}
	if !containersMatch(live.Spec.Containers, want.Spec.Containers) || sandboxpod.TokenSecretOf(live) != sandboxpod.TokenSecretOf(want) {
		klog.FromContext(ctx).V(2).Info("The claim's pod does not run what its record says; deleting it, to be created again", "claim", klog.KObj(claim), "pod", klog.KObj(live))
		return objectcontrol.IgnoreGone(c.children.pods.Delete(ctx, live.Namespace, live.Name, live.UID))
	}
	if _, labelsChanged := mergeLabels(live.Labels, want.Labels); !labelsChanged {
		return nil
	}
	klog.FromContext(ctx).V(2).Info("Repairing the claim's pod labels", "claim", klog.KObj(claim))
	return objectcontrol.IgnoreGone(c.children.pods.PatchLabels(ctx, live.Namespace, live.Name, live.UID, want.Labels))
}

// ensureDefaultDeny puts the namespace's standing default-deny policy in place; without a way to
// (no DefaultDenyEnsurer) no pod is created.
func (c *Controller) ensureDefaultDeny(ctx context.Context, namespace string) error {
	if c.defaultDeny == nil {
		return errors.New("no writer of the namespace's default-deny NetworkPolicy: no sandbox pod is created without one")
	}
	if err := c.defaultDeny.Ensure(ctx, namespace); err != nil {
		return fmt.Errorf("putting the namespace's default-deny NetworkPolicy in place: %w", err)
	}
	return nil
}

// containersMatch says whether the live containers are want's: the same names, images and args.
func containersMatch(live, want []corev1.Container) bool {
	if len(live) != len(want) {
		return false
	}
	for i := range want {
		if live[i].Name != want[i].Name || live[i].Image != want[i].Image || !slices.Equal(live[i].Args, want[i].Args) {
			return false
		}
	}
	return true
}

// replaceEndedPod deletes the claim's own pod when it has ended (the kubelet evicted it, its node
// went away): ensurePod creates it again, on the same workspace, once the deletion is seen. The
// eviction is reported first (reportEviction), from the ended pod.
func (c *Controller) replaceEndedPod(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, pods []*corev1.Pod) error {
	for _, pod := range pods {
		if pod.DeletionTimestamp == nil && sandboxpod.Ended(pod) && metav1.IsControlledBy(pod, claim) {
			klog.FromContext(ctx).V(2).Info("The claim's pod has ended; deleting it, to be created again", "claim", klog.KObj(claim), "pod", klog.KObj(pod), "phase", pod.Status.Phase, "reason", pod.Status.Reason)
			if err := objectcontrol.IgnoreGone(c.children.pods.Delete(ctx, pod.Namespace, pod.Name, pod.UID)); err != nil {
				return err
			}
		}
	}
	return nil
}

// stopPods deletes the claim's pods (a Reaping or Failed claim runs nothing), or, for a claim
// whose pod a Deployment of an earlier version runs, that Deployment. Their deletions enqueue
// the claim.
func (c *Controller) stopPods(ctx context.Context, claim *airlockv1alpha1.SandboxClaim) error {
	return c.deletePods(ctx, claim, nil)
}

// deletePods is stopPods but for the pods held (by UID): those whose deletion waits for the
// operator's stop (stop.go).
func (c *Controller) deletePods(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, held map[types.UID]bool) error {
	pods, err := c.claimPods(claim)
	if err != nil {
		return err
	}
	if len(legacyPods(pods)) > 0 {
		if err := c.deleteLegacyDeployment(ctx, claim); err != nil {
			return err
		}
	}
	for _, pod := range pods {
		if pod.DeletionTimestamp != nil || !metav1.IsControlledBy(pod, claim) || held[pod.UID] {
			continue
		}
		if err := objectcontrol.IgnoreGone(c.children.pods.Delete(ctx, pod.Namespace, pod.Name, pod.UID)); err != nil {
			return err
		}
	}
	return nil
}

// legacyPods returns the claim's pods that the claim does not control: those of the Deployment
// an earlier version of the operator built for it (its ReplicaSet controls them; they carry the
// claim's labels). A claim that has one keeps it until it is reaped.
func legacyPods(pods []*corev1.Pod) []*corev1.Pod {
	var out []*corev1.Pod
	for _, pod := range pods {
		if ref := metav1.GetControllerOf(pod); ref != nil && ref.Kind == "ReplicaSet" {
			out = append(out, pod)
		}
	}
	return out
}

// deleteLegacyDeployment deletes the Deployment of the claim's name that an earlier version of
// the operator built, when the claim controls it (read from the API server: no Deployment is
// cached any more), with its UID as a precondition.
func (c *Controller) deleteLegacyDeployment(ctx context.Context, claim *airlockv1alpha1.SandboxClaim) error {
	d, err := c.legacyDeployments.Get(ctx, claim.Namespace, claim.Name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if !metav1.IsControlledBy(d, claim) || d.DeletionTimestamp != nil {
		return nil
	}
	klog.FromContext(ctx).V(2).Info("Deleting the claim's Deployment, built by an earlier version of the operator", "claim", klog.KObj(claim))
	return objectcontrol.IgnoreGone(c.legacyDeployments.Delete(ctx, d.Namespace, d.Name, d.UID))
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

// leavePool takes a warm claim's pod out of its pool's NetworkPolicy (drops its pool label) once
// the claim's own policy is in the cache as the record wants it: from then on only the claim's
// policy, which follows the claim's record and its allowed Services as any claim's does,
// confines the pod. The pool's policy follows the pool's current record only, and one of an
// older record is kept up by nobody; a pod it still selected would get the union of both. The
// policy's add event enqueues the claim, so the label goes right after the policy is seen.
func (c *Controller) leavePool(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, want *networkingv1.NetworkPolicy) error {
	np, err := c.networkPolicyLister.NetworkPolicies(claim.Namespace).Get(want.Name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil || !metav1.IsControlledBy(np, claim) || !apiequality.Semantic.DeepEqual(np.Spec, want.Spec) {
		return err
	}
	pod, err := c.podLister.Pods(claim.Namespace).Get(claim.Status.Warm.Member)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if _, inPool := pod.Labels[airlockv1alpha1.LabelWarmPool]; !inPool || !metav1.IsControlledBy(pod, claim) || pod.DeletionTimestamp != nil {
		return nil
	}
	klog.FromContext(ctx).V(2).Info("The warm claim's own policy is in place; taking its pod out of the pool's", "claim", klog.KObj(claim), "pod", klog.KObj(pod))
	return objectcontrol.IgnoreGone(c.children.adopter.DropLabel(ctx, pod, airlockv1alpha1.LabelWarmPool))
}
