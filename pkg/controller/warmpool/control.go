package warmpool

// The pool controller's API writes that are not one of its objects' (objectcontrol): the
// registry's status, and a member's annotation.

import (
	"context"
	"encoding/json"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	airlockclientset "github.com/airlock-dev/airlock/pkg/generated/clientset/versioned"
)

// poolRegistryControl writes a registry's status.
type poolRegistryControl interface {
	UpdateStatus(ctx context.Context, reg *airlockv1alpha1.ToolRegistry) error
}

type realPoolRegistryControl struct {
	client airlockclientset.Interface
}

func (r realPoolRegistryControl) UpdateStatus(ctx context.Context, reg *airlockv1alpha1.ToolRegistry) error {
	_, err := r.client.AirlockV1alpha1().ToolRegistries(reg.Namespace).UpdateStatus(ctx, reg, metav1.UpdateOptions{FieldManager: ControllerName})
	return err
}

// memberControl writes a member's annotation: a merge patch of that one key, conditional on the
// pod's UID (a pod created again under the name is another member). The cached pod is stripped
// (sandboxpod.StripPod) and never written back whole.
type memberControl interface {
	Annotate(ctx context.Context, pod *corev1.Pod, key, value string) error
}

type realMemberControl struct {
	client kubernetes.Interface
}

func (r realMemberControl) Annotate(ctx context.Context, pod *corev1.Pod, key, value string) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"uid":         pod.UID, // a precondition: the API server refuses to change it
		"annotations": map[string]string{key: value},
	}})
	if err != nil {
		return err
	}
	_, err = r.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: ControllerName})
	return err
}
