package record

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/airlock-dev/airlock/pkg/recordstore"
)

// configMapControl is the controller's reads and writes of record segments, from and to the API
// server (no cache holds them: an informer would hold every record's entries in memory).
type configMapControl interface {
	List(ctx context.Context, namespace, selector string) ([]corev1.ConfigMap, error)
	Get(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error)
	Create(ctx context.Context, cm *corev1.ConfigMap) (*corev1.ConfigMap, error)
	// Update is conditional on cm's resourceVersion.
	Update(ctx context.Context, cm *corev1.ConfigMap) (*corev1.ConfigMap, error)
}

type realConfigMaps struct{ client kubernetes.Interface }

func (r realConfigMaps) List(ctx context.Context, namespace, selector string) ([]corev1.ConfigMap, error) {
	list, err := r.client.CoreV1().ConfigMaps(namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

func (r realConfigMaps) Get(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error) {
	return r.client.CoreV1().ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
}

func (r realConfigMaps) Create(ctx context.Context, cm *corev1.ConfigMap) (*corev1.ConfigMap, error) {
	return r.client.CoreV1().ConfigMaps(cm.Namespace).Create(ctx, cm, metav1.CreateOptions{FieldManager: FieldManager})
}

func (r realConfigMaps) Update(ctx context.Context, cm *corev1.ConfigMap) (*corev1.ConfigMap, error) {
	return r.client.CoreV1().ConfigMaps(cm.Namespace).Update(ctx, cm, metav1.UpdateOptions{FieldManager: FieldManager})
}

// MoveRecords makes owner the owner of every record segment in namespace that from owns
// (docs/record.md §2.5): the claim controller moves a claim's records to its kept workspace's Job
// before it deletes the claim, and a kept workspace's records to the claim that resumes it
// before it deletes the Job. Each move is an Update conditional on the segment's
// resourceVersion; an error leaves the caller to try again (a move done twice is no move).
func (c *Controller) MoveRecords(ctx context.Context, namespace string, from types.UID, owner metav1.OwnerReference) error {
	return moveRecords(ctx, c.configMaps, namespace, from, owner)
}

func moveRecords(ctx context.Context, cms configMapControl, namespace string, from types.UID, owner metav1.OwnerReference) error {
	list, err := cms.List(ctx, namespace, recordstore.LabelRecordOf)
	if err != nil {
		return fmt.Errorf("listing the records in %s: %w", namespace, err)
	}
	moved := 0
	for i := range list {
		cm := &list[i]
		if !ownedBy(cm, from) {
			continue
		}
		if _, err := cms.Update(ctx, recordstore.OwnedBy(cm, owner)); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("moving record segment %s to %s %s: %w", cm.Name, owner.Kind, owner.Name, err)
		}
		moved++
	}
	if moved > 0 {
		klog.FromContext(ctx).V(2).Info("Moved record segments", "namespace", namespace, "count", moved, "ownerKind", owner.Kind, "owner", owner.Name)
	}
	return nil
}

func ownedBy(cm *corev1.ConfigMap, uid types.UID) bool {
	for _, o := range cm.OwnerReferences {
		if o.UID == uid {
			return true
		}
	}
	return false
}
