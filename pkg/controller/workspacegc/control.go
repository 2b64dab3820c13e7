package workspacegc

// The controller's reads from the API server (its writes are objectcontrol's, of Jobs only).

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	airlockclientset "github.com/airlock-dev/airlock/pkg/generated/clientset/versioned"
)

// claimReader lists a namespace's claims from the API server (not the cache): a collection is
// decided on a fresh read.
type claimReader interface {
	List(ctx context.Context, namespace string) (*airlockv1alpha1.SandboxClaimList, error)
}

type realClaimReader struct{ client airlockclientset.Interface }

func (r realClaimReader) List(ctx context.Context, namespace string) (*airlockv1alpha1.SandboxClaimList, error) {
	return r.client.AirlockV1alpha1().SandboxClaims(namespace).List(ctx, metav1.ListOptions{})
}

// syncPodControl reads the pods of a claim's sync-back Jobs from the API server: the operator's
// pod cache holds only pods that carry LabelClaim, and sync-back pods carry LabelSyncOf instead.
// It also reads a record's resume members from the API server (a fresh read: one created a
// moment ago may not be cached yet).
type syncPodControl interface {
	SyncPods(ctx context.Context, namespace, claim string) ([]corev1.Pod, error)
	ResumeMembers(ctx context.Context, namespace, record string) ([]corev1.Pod, error)
}

type realSyncPods struct {
	client kubernetes.Interface
}

func (r realSyncPods) SyncPods(ctx context.Context, namespace, claim string) ([]corev1.Pod, error) {
	list, err := r.client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(labels.Set{airlockv1alpha1.LabelSyncOf: claim}).String(),
	})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

func (r realSyncPods) ResumeMembers(ctx context.Context, namespace, record string) ([]corev1.Pod, error) {
	list, err := r.client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(labels.Set{airlockv1alpha1.LabelResumes: record}).String(),
	})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}
