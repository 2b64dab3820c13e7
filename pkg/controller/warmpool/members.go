package warmpool

import (
	"sort"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
)

// Members finds a pool's members in the pod cache, for the claim controller's adoptions.
type Members struct {
	Pods corelisters.PodLister
}

// Idle returns the Ready, idle members of the pool of the registry's entry built from record
// (its pool key), that the registry controls, oldest first (they have waited longest).
func (m Members) Idle(reg *airlockv1alpha1.ToolRegistry, entry string, record *airlockv1alpha1.FrozenSandbox) ([]*corev1.Pod, error) {
	pods, err := m.Pods.Pods(reg.Namespace).List(labels.SelectorFromSet(labels.Set{
		airlockv1alpha1.LabelWarmPool: sandboxpod.PoolKey(reg.UID, entry, record),
		airlockv1alpha1.LabelClaim:    "",
	}))
	if err != nil {
		return nil, err
	}
	var out []*corev1.Pod
	for _, pod := range pods {
		if metav1.IsControlledBy(pod, reg) && sandboxpod.ReadyPod([]*corev1.Pod{pod}) != nil {
			out = append(out, pod)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreationTimestamp.Equal(&out[j].CreationTimestamp) {
			return out[i].CreationTimestamp.Before(&out[j].CreationTimestamp)
		}
		return out[i].Name < out[j].Name
	})
	return out, nil
}
