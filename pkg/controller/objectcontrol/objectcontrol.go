// Package objectcontrol writes the objects a controller owns (pods, Secrets, NetworkPolicies,
// Jobs) behind one small interface that tests fake, as kube-controller-manager's
// controller.PodControlInterface does: every write names its field manager, every delete is
// conditional on the object's UID.
package objectcontrol

import (
	"context"
	"encoding/json"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// Interface writes one kind of a controller's objects. Delete is always conditional on the
// object's UID and leaves the object's own children to garbage collection in the background.
// PatchLabels sets labels of the object with that UID (a merge patch: for an object whose cached
// copy is stripped, StripPod, and so cannot be written back whole).
type Interface[T metav1.Object] interface {
	Create(ctx context.Context, obj T) error
	Update(ctx context.Context, obj T) error
	PatchLabels(ctx context.Context, namespace, name string, uid types.UID, labels map[string]string) error
	Delete(ctx context.Context, namespace, name string, uid types.UID) error
	// DeleteUnchanged deletes the object only as it was read: its UID and resourceVersion are
	// preconditions, so that a decision taken over a stale cache (an idle warm member that a claim
	// adopted a moment ago) deletes nothing; the API server answers 409 Conflict then.
	DeleteUnchanged(ctx context.Context, obj T) error
}

// TypedClient is the part of a client-go typed client (one kind, one namespace) that
// an Interface is written with.
type TypedClient[T any] interface {
	Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error)
	Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (T, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
}

// New returns an Interface writing with the typed client of each namespace, as fieldManager.
func New[T metav1.Object](fieldManager string, client func(namespace string) TypedClient[T]) Interface[T] {
	return realObjectControl[T]{client: client, fieldManager: fieldManager}
}

// realObjectControl is Interface on a client-go typed client.
type realObjectControl[T metav1.Object] struct {
	client       func(namespace string) TypedClient[T]
	fieldManager string
}

func (r realObjectControl[T]) Create(ctx context.Context, obj T) error {
	_, err := r.client(obj.GetNamespace()).Create(ctx, obj, metav1.CreateOptions{FieldManager: r.fieldManager})
	return err
}

func (r realObjectControl[T]) Update(ctx context.Context, obj T) error {
	_, err := r.client(obj.GetNamespace()).Update(ctx, obj, metav1.UpdateOptions{FieldManager: r.fieldManager})
	return err
}

func (r realObjectControl[T]) PatchLabels(ctx context.Context, namespace, name string, uid types.UID, labels map[string]string) error {
	// The UID in the patch is a precondition: the API server refuses to change it.
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"uid": uid, "labels": labels}})
	if err != nil {
		return err
	}
	_, err = r.client(namespace).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: r.fieldManager})
	return err
}

func (r realObjectControl[T]) Delete(ctx context.Context, namespace, name string, uid types.UID) error {
	return r.client(namespace).Delete(ctx, name, metav1.DeleteOptions{
		Preconditions:     &metav1.Preconditions{UID: &uid},
		PropagationPolicy: ptr.To(metav1.DeletePropagationBackground),
	})
}

func (r realObjectControl[T]) DeleteUnchanged(ctx context.Context, obj T) error {
	uid, rv := obj.GetUID(), obj.GetResourceVersion()
	return r.client(obj.GetNamespace()).Delete(ctx, obj.GetName(), metav1.DeleteOptions{
		Preconditions:     &metav1.Preconditions{UID: &uid, ResourceVersion: &rv},
		PropagationPolicy: ptr.To(metav1.DeletePropagationBackground),
	})
}

// IgnoreGone treats a deletion that found the object gone, or another object in its place
// (the UID precondition), as done.
func IgnoreGone(err error) error {
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}

// Pods returns an Interface writing pods with client, as fieldManager.
func Pods(client kubernetes.Interface, fieldManager string) Interface[*corev1.Pod] {
	return New(fieldManager, func(ns string) TypedClient[*corev1.Pod] { return client.CoreV1().Pods(ns) })
}

// Secrets returns an Interface writing Secrets with client, as fieldManager.
func Secrets(client kubernetes.Interface, fieldManager string) Interface[*corev1.Secret] {
	return New(fieldManager, func(ns string) TypedClient[*corev1.Secret] { return client.CoreV1().Secrets(ns) })
}

// NetworkPolicies returns an Interface writing NetworkPolicies with client, as fieldManager.
func NetworkPolicies(client kubernetes.Interface, fieldManager string) Interface[*networkingv1.NetworkPolicy] {
	return New(fieldManager, func(ns string) TypedClient[*networkingv1.NetworkPolicy] {
		return client.NetworkingV1().NetworkPolicies(ns)
	})
}

// Jobs returns an Interface writing Jobs with client, as fieldManager.
func Jobs(client kubernetes.Interface, fieldManager string) Interface[*batchv1.Job] {
	return New(fieldManager, func(ns string) TypedClient[*batchv1.Job] { return client.BatchV1().Jobs(ns) })
}
