package sandboxclass

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	airlockclientset "github.com/airlock-dev/airlock/pkg/generated/clientset/versioned"
)

// classStatusControl writes a class's status: the controller's one API write, behind an interface
// tests fake.
type classStatusControl interface {
	UpdateStatus(ctx context.Context, class *airlockv1alpha1.SandboxClass) error
}

type realClassStatusControl struct {
	client airlockclientset.Interface
}

func (r realClassStatusControl) UpdateStatus(ctx context.Context, class *airlockv1alpha1.SandboxClass) error {
	_, err := r.client.AirlockV1alpha1().SandboxClasses().UpdateStatus(ctx, class, metav1.UpdateOptions{FieldManager: ControllerName})
	return err
}
