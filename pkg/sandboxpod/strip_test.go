package sandboxpod

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/sandboxpod/sandboxpodtest"
)

// TestStripPod: the stripped pod keeps everything the controller reads, so that every decision
// over it is the one over the whole pod, and drops the rest.
func TestStripPod(t *testing.T) {
	claim := bound("c1")
	whole := newPod(claim, func(p *corev1.Pod) {
		sandboxpodtest.MarkReady(p)
		p.UID, p.ResourceVersion = "uid-pod", "42"
		p.Spec.NodeName = "node-a"
		p.DeletionTimestamp = ptr.To(metav1.NewTime(sandboxpodtest.T0))
		p.Annotations = map[string]string{"big": "annotation"}
		p.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}
		p.Status.Phase, p.Status.Reason, p.Status.Message = corev1.PodFailed, "Evicted", "the kubelet's message"
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: ContainerName, Image: "x", ImageID: "sha", State: corev1.ContainerState{
			Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off"},
		}}}
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
			Reason: corev1.PodReasonUnschedulable, Message: "0/2 nodes", LastTransitionTime: metav1.NewTime(sandboxpodtest.T0)})
	})
	got, err := StripPod(whole.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	pod := got.(*corev1.Pod)
	if pod.Annotations != nil || pod.ManagedFields != nil || pod.Spec.Containers[0].ReadinessProbe != nil || pod.Spec.SecurityContext != nil {
		t.Errorf("stripped pod keeps what is never read: %+v", pod)
	}
	// What the controller reads of it is the same.
	if Ended(pod) != Ended(whole) || !metav1.IsControlledBy(pod, claim) ||
		pod.Labels[LabelClaimUID] != string(claim.UID) || pod.DeletionTimestamp == nil || pod.UID != "uid-pod" || pod.ResourceVersion != "42" ||
		pod.Spec.NodeName != "node-a" {
		t.Errorf("stripped pod %+v differs where the controller reads it", pod.ObjectMeta)
	}
	if TokenSecretOf(pod) != TokenSecretOf(whole) || !sameContainers(pod.Spec.Containers, whole.Spec.Containers) {
		t.Errorf("stripped pod's token Secret %q or containers %+v differ", TokenSecretOf(pod), pod.Spec.Containers)
	}
	r1, m1 := Failure([]*corev1.Pod{whole})
	r2, m2 := Failure([]*corev1.Pod{pod})
	if r1 != r2 || m1 != m2 || Unschedulable([]*corev1.Pod{whole}) != Unschedulable([]*corev1.Pod{pod}) {
		t.Errorf("failure %s/%q vs %s/%q; unschedulable %q vs %q", r1, m1, r2, m2, Unschedulable([]*corev1.Pod{whole}), Unschedulable([]*corev1.Pod{pod}))
	}
	whole.DeletionTimestamp = nil
	pod.DeletionTimestamp = nil
	if diff := cmp.Diff(ReadyPod([]*corev1.Pod{whole}).Status.PodIP, ReadyPod([]*corev1.Pod{pod}).Status.PodIP); diff != "" {
		t.Errorf("ready pod IP (-whole +stripped):\n%s", diff)
	}
	// A warm member keeps its evidence record (the claim controller judges it at adoption),
	// and nothing else of its annotations; a claim's pod keeps none.
	member := whole.DeepCopy()
	member.Labels[airlockv1alpha1.LabelWarmMember] = member.Name
	member.Annotations[airlockv1alpha1.AnnotationIsolationEvidence] = "sealed"
	strippedMember, _ := StripPod(member)
	if got := strippedMember.(*corev1.Pod).Annotations; len(got) != 1 || got[airlockv1alpha1.AnnotationIsolationEvidence] != "sealed" {
		t.Errorf("stripped member's annotations %v, want its evidence record alone", got)
	}
	notMember := whole.DeepCopy()
	notMember.Annotations[airlockv1alpha1.AnnotationIsolationEvidence] = "sealed"
	if stripped, _ := StripPod(notMember); stripped.(*corev1.Pod).Annotations != nil {
		t.Errorf("a claim's own pod keeps annotations %v", stripped.(*corev1.Pod).Annotations)
	}
	tombstone := cache.DeletedFinalStateUnknown{Key: "ns/p", Obj: whole}
	if got, err := StripPod(tombstone); err != nil || got != any(tombstone) {
		t.Errorf("tombstone: %v, %v; want it unchanged", got, err)
	}
}

// TestStripManagedFields: the caches' transform drops managed fields and keeps the rest; what is
// not an object (a tombstone) passes through.
func TestStripManagedFields(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Labels: map[string]string{"a": "b"},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate}}}}
	got, err := StripManagedFields(pod)
	if err != nil {
		t.Fatal(err)
	}
	if p := got.(*corev1.Pod); p.ManagedFields != nil || p.Name != "p" || p.Labels["a"] != "b" {
		t.Errorf("transformed pod %+v, want its managed fields dropped and nothing else", p.ObjectMeta)
	}
	tombstone := cache.DeletedFinalStateUnknown{Key: "ns/p", Obj: pod}
	if got, err := StripManagedFields(tombstone); err != nil || got != any(tombstone) {
		t.Errorf("tombstone: %v, %v; want it unchanged", got, err)
	}
}
