package claim

// The controller's API calls that do not go through its informers' caches, behind small
// interfaces (as kube-controller-manager's cronjob controller does in injection.go), so that tests
// can fake the API server's answers: the writes to claims and to their children, and the few
// uncached reads of claims that guard a decision or a deletion.

import (
	"context"
	"encoding/json"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/controller/objectcontrol"
	airlockclientset "github.com/airlock-dev/airlock/pkg/generated/clientset/versioned"
)

// claimControl is what the controller asks of the API server about claims themselves.
type claimControl interface {
	// Get reads a claim from the API server (not the cache).
	Get(ctx context.Context, namespace, name string) (*airlockv1alpha1.SandboxClaim, error)
	// List reads a namespace's claims (every namespace's for metav1.NamespaceAll) from the API
	// server, as of now (a quorum read).
	List(ctx context.Context, namespace string) (*airlockv1alpha1.SandboxClaimList, error)
	// Update writes a claim's metadata and spec; UpdateStatus writes its status.
	Update(ctx context.Context, claim *airlockv1alpha1.SandboxClaim) (*airlockv1alpha1.SandboxClaim, error)
	UpdateStatus(ctx context.Context, claim *airlockv1alpha1.SandboxClaim) (*airlockv1alpha1.SandboxClaim, error)
	// Delete deletes a claim under preconditions; its children go in the background.
	Delete(ctx context.Context, namespace, name string, preconditions *metav1.Preconditions) error
}

// podAdopter moves an idle warm member to a claim: one merge patch of its owner references and
// labels, conditional on the UID and the resourceVersion of the pod as it was read, so that of two
// claims adopting one member at once (two workers, or a failover's old and new leader) one
// wins and the other is refused with a conflict.
type podAdopter interface {
	Adopt(ctx context.Context, pod *corev1.Pod, owner metav1.OwnerReference, labels map[string]string) error
	// DropLabel removes a label from the pod with that UID (a merge patch).
	DropLabel(ctx context.Context, pod *corev1.Pod, key string) error
}

type realPodAdopter struct {
	client kubernetes.Interface
}

func (r realPodAdopter) Adopt(ctx context.Context, pod *corev1.Pod, owner metav1.OwnerReference, labels map[string]string) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"uid":             pod.UID,
		"resourceVersion": pod.ResourceVersion,
		"ownerReferences": []metav1.OwnerReference{owner},
		"labels":          labels,
	}})
	if err != nil {
		return err
	}
	_, err = r.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager})
	return err
}

func (r realPodAdopter) DropLabel(ctx context.Context, pod *corev1.Pod, key string) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"uid":    pod.UID,
		"labels": map[string]any{key: nil},
	}})
	if err != nil {
		return err
	}
	_, err = r.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager})
	return err
}

// childControls are the writers of each kind of child.
type childControls struct {
	secrets         objectcontrol.Interface[*corev1.Secret]
	pods            objectcontrol.Interface[*corev1.Pod]
	adopter         podAdopter
	networkPolicies objectcontrol.Interface[*networkingv1.NetworkPolicy]
	jobs            objectcontrol.Interface[*batchv1.Job]
}

// legacyDeploymentControl reads and deletes the Deployment an earlier version of the operator
// built for a claim (children.go, deleteLegacyDeployment): no Deployment is cached.
type legacyDeploymentControl interface {
	Get(ctx context.Context, namespace, name string) (*appsv1.Deployment, error)
	Delete(ctx context.Context, namespace, name string, uid types.UID) error
}

// realLegacyDeployments is legacyDeploymentControl on a kube clientset.
type realLegacyDeployments struct {
	client kubernetes.Interface
}

func (r realLegacyDeployments) Get(ctx context.Context, namespace, name string) (*appsv1.Deployment, error) {
	return r.client.AppsV1().Deployments(namespace).Get(ctx, name, metav1.GetOptions{})
}

func (r realLegacyDeployments) Delete(ctx context.Context, namespace, name string, uid types.UID) error {
	return r.client.AppsV1().Deployments(namespace).Delete(ctx, name, metav1.DeleteOptions{
		Preconditions:     &metav1.Preconditions{UID: &uid},
		PropagationPolicy: ptr.To(metav1.DeletePropagationBackground),
	})
}

// podEvents reads what the kubelet reported about a pod: an evicted pod can end
// Succeeded (its container exits 0 on SIGTERM), its status says nothing of the eviction, and only
// the kubelet's Evicted event does.
type podEvents interface {
	// EvictionMessage returns the message of the kubelet's Evicted event of the pod, or "".
	EvictionMessage(ctx context.Context, pod *corev1.Pod) (string, error)
}

// realPodEvents is podEvents on a kube clientset (a LIST of the pod's events by field selector).
type realPodEvents struct {
	client kubernetes.Interface
}

func (r realPodEvents) EvictionMessage(ctx context.Context, pod *corev1.Pod) (string, error) {
	events, err := r.client.CoreV1().Events(pod.Namespace).List(ctx, metav1.ListOptions{
		FieldSelector: fields.Set{"involvedObject.uid": string(pod.UID), "reason": ReasonEvicted}.AsSelector().String(),
	})
	if err != nil {
		return "", err
	}
	for _, e := range events.Items {
		if e.Source.Component == "kubelet" || e.ReportingController == "kubelet" {
			return e.Message, nil
		}
	}
	return "", nil
}

// realClaimControl is claimControl on an airlock clientset.
type realClaimControl struct {
	client airlockclientset.Interface
}

var _ claimControl = realClaimControl{}

func (r realClaimControl) Get(ctx context.Context, namespace, name string) (*airlockv1alpha1.SandboxClaim, error) {
	return r.client.AirlockV1alpha1().SandboxClaims(namespace).Get(ctx, name, metav1.GetOptions{})
}

func (r realClaimControl) List(ctx context.Context, namespace string) (*airlockv1alpha1.SandboxClaimList, error) {
	return r.client.AirlockV1alpha1().SandboxClaims(namespace).List(ctx, metav1.ListOptions{})
}

func (r realClaimControl) Update(ctx context.Context, claim *airlockv1alpha1.SandboxClaim) (*airlockv1alpha1.SandboxClaim, error) {
	return r.client.AirlockV1alpha1().SandboxClaims(claim.Namespace).Update(ctx, claim, metav1.UpdateOptions{FieldManager: FieldManager})
}

func (r realClaimControl) UpdateStatus(ctx context.Context, claim *airlockv1alpha1.SandboxClaim) (*airlockv1alpha1.SandboxClaim, error) {
	return r.client.AirlockV1alpha1().SandboxClaims(claim.Namespace).UpdateStatus(ctx, claim, metav1.UpdateOptions{FieldManager: FieldManager})
}

func (r realClaimControl) Delete(ctx context.Context, namespace, name string, preconditions *metav1.Preconditions) error {
	return r.client.AirlockV1alpha1().SandboxClaims(namespace).Delete(ctx, name, metav1.DeleteOptions{
		Preconditions:     preconditions,
		PropagationPolicy: ptr.To(metav1.DeletePropagationBackground),
	})
}

// realChildControls are the child writers on a kube clientset.
func realChildControls(client kubernetes.Interface) childControls {
	return childControls{
		adopter:         realPodAdopter{client: client},
		secrets:         objectcontrol.Secrets(client, FieldManager),
		pods:            objectcontrol.Pods(client, FieldManager),
		networkPolicies: objectcontrol.NetworkPolicies(client, FieldManager),
		jobs:            objectcontrol.Jobs(client, FieldManager),
	}
}
