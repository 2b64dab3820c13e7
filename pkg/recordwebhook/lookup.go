package recordwebhook

import (
	"context"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	airlockclientset "github.com/airlock-dev/airlock/pkg/generated/clientset/versioned"
)

// clientLookup reads each object from the API server when asked: the operator writes a claim's
// record, a pool's record or a member's pod the instant before the object that names it, and a
// cache a moment behind would refuse it, so a refusal over the cache is judged again over this
// (Judge). A read is a plain GET (consistent, from etcd).
type clientLookup struct {
	kube    kubernetes.Interface
	airlock airlockclientset.Interface
}

// NewLookup returns the Lookup of the API server behind the two clients.
func NewLookup(kube kubernetes.Interface, airlock airlockclientset.Interface) Lookup {
	return &clientLookup{kube: kube, airlock: airlock}
}

// absent turns NotFound into no object.
func absent[T any](obj *T, err error) (*T, error) {
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return obj, nil
}

func (l *clientLookup) Claim(ctx context.Context, namespace, name string) (*airlockv1alpha1.SandboxClaim, error) {
	return absent(l.airlock.AirlockV1alpha1().SandboxClaims(namespace).Get(ctx, name, metav1.GetOptions{}))
}

func (l *clientLookup) Registry(ctx context.Context, namespace, name string) (*airlockv1alpha1.ToolRegistry, error) {
	return absent(l.airlock.AirlockV1alpha1().ToolRegistries(namespace).Get(ctx, name, metav1.GetOptions{}))
}

func (l *clientLookup) Job(ctx context.Context, namespace, name string) (*batchv1.Job, error) {
	return absent(l.kube.BatchV1().Jobs(namespace).Get(ctx, name, metav1.GetOptions{}))
}

func (l *clientLookup) Pod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	return absent(l.kube.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{}))
}

func (l *clientLookup) Service(ctx context.Context, namespace, name string) (*corev1.Service, error) {
	return absent(l.kube.CoreV1().Services(namespace).Get(ctx, name, metav1.GetOptions{}))
}

func (l *clientLookup) Served(ctx context.Context, namespace string) (bool, error) {
	one := metav1.ListOptions{Limit: 1}
	runtimes, err := l.airlock.AirlockV1alpha1().AgentRuntimes(namespace).List(ctx, one)
	if err != nil {
		return false, err
	}
	if len(runtimes.Items) > 0 {
		return true, nil
	}
	registries, err := l.airlock.AirlockV1alpha1().ToolRegistries(namespace).List(ctx, one)
	if err != nil {
		return false, err
	}
	return len(registries.Items) > 0, nil
}

func (l *clientLookup) Class(ctx context.Context, name string) (*airlockv1alpha1.SandboxClass, error) {
	return absent(l.airlock.AirlockV1alpha1().SandboxClasses().Get(ctx, name, metav1.GetOptions{}))
}

func (l *clientLookup) Runtime(ctx context.Context, namespace, name string) (*airlockv1alpha1.AgentRuntime, error) {
	return absent(l.airlock.AirlockV1alpha1().AgentRuntimes(namespace).Get(ctx, name, metav1.GetOptions{}))
}
