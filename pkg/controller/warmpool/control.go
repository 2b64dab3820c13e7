package warmpool

// The pool controller's API writes that are not one of its objects' (objectcontrol): the
// registry's status.

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
