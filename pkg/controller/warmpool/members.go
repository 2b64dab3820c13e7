package warmpool

import (
	"sort"

	batchv1 "k8s.io/api/batch/v1"
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
// (its pool key), that the registry controls, oldest first (they have waited longest). A resume
// member is never among them: it waits for one claim only (Resuming).
func (m Members) Idle(reg *airlockv1alpha1.ToolRegistry, entry string, record *airlockv1alpha1.FrozenSandbox) ([]*corev1.Pod, error) {
	return m.ready(reg, labels.Set{
		airlockv1alpha1.LabelWarmPool: sandboxpod.PoolKey(reg.UID, entry, record),
		airlockv1alpha1.LabelClaim:    "",
	}, false)
}

// Resuming returns the Ready, idle resume members of the pool of the registry's entry built from
// record that wait on the kept workspace of the record kept (by its name and UID), that the
// registry controls, oldest first (docs/nothing-lost.md, "Resume members").
func (m Members) Resuming(reg *airlockv1alpha1.ToolRegistry, entry string, record *airlockv1alpha1.FrozenSandbox, kept *batchv1.Job) ([]*corev1.Pod, error) {
	return m.ready(reg, labels.Set{
		airlockv1alpha1.LabelWarmPool:   sandboxpod.PoolKey(reg.UID, entry, record),
		airlockv1alpha1.LabelClaim:      "",
		airlockv1alpha1.LabelResumes:    kept.Name,
		airlockv1alpha1.LabelResumesUID: string(kept.UID),
	}, true)
}

// ready returns the Ready pods of the registry that have the labels set, resume members or not.
func (m Members) ready(reg *airlockv1alpha1.ToolRegistry, set labels.Set, resume bool) ([]*corev1.Pod, error) {
	pods, err := m.Pods.Pods(reg.Namespace).List(labels.SelectorFromSet(set))
	if err != nil {
		return nil, err
	}
	var out []*corev1.Pod
	for _, pod := range pods {
		if sandboxpod.IsResumeMember(pod) == resume && pod.DeletionTimestamp == nil &&
			metav1.IsControlledBy(pod, reg) && sandboxpod.ReadyPod([]*corev1.Pod{pod}) != nil {
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
