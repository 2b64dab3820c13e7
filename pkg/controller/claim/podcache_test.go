package claim

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
)

// TestStripPod: the stripped pod keeps everything the controller reads, so that every decision
// over it is the one over the whole pod, and drops the rest.
func TestStripPod(t *testing.T) {
	claim := bound("c1", t0)
	whole := newPod(claim, func(p *corev1.Pod) {
		markReady(p)
		p.UID, p.ResourceVersion = "uid-pod", "42"
		p.DeletionTimestamp = ptr.To(metav1.NewTime(t0))
		p.Annotations = map[string]string{"big": "annotation"}
		p.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}
		p.Status.Phase, p.Status.Reason, p.Status.Message = corev1.PodFailed, "Evicted", "the kubelet's message"
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: ContainerName, Image: "x", ImageID: "sha", State: corev1.ContainerState{
			Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off"},
		}}}
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
			Reason: corev1.PodReasonUnschedulable, Message: "0/2 nodes", LastTransitionTime: metav1.NewTime(t0)})
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
	if podEnded(pod) != podEnded(whole) || !metav1.IsControlledBy(pod, claim) ||
		pod.Labels[LabelClaimUID] != string(claim.UID) || pod.DeletionTimestamp == nil || pod.UID != "uid-pod" || pod.ResourceVersion != "42" {
		t.Errorf("stripped pod %+v differs where the controller reads it", pod.ObjectMeta)
	}
	if tokenSecretOf(pod) != tokenSecretOf(whole) || !containersMatch(pod.Spec.Containers, whole.Spec.Containers) {
		t.Errorf("stripped pod's token Secret %q or containers %+v differ", tokenSecretOf(pod), pod.Spec.Containers)
	}
	r1, m1 := podFailure([]*corev1.Pod{whole})
	r2, m2 := podFailure([]*corev1.Pod{pod})
	if r1 != r2 || m1 != m2 || podUnschedulable([]*corev1.Pod{whole}) != podUnschedulable([]*corev1.Pod{pod}) {
		t.Errorf("failure %s/%q vs %s/%q; unschedulable %q vs %q", r1, m1, r2, m2, podUnschedulable([]*corev1.Pod{whole}), podUnschedulable([]*corev1.Pod{pod}))
	}
	whole.DeletionTimestamp = nil
	pod.DeletionTimestamp = nil
	if diff := cmp.Diff(readyPod([]*corev1.Pod{whole}).Status.PodIP, readyPod([]*corev1.Pod{pod}).Status.PodIP); diff != "" {
		t.Errorf("ready pod IP (-whole +stripped):\n%s", diff)
	}
	tombstone := cache.DeletedFinalStateUnknown{Key: "ns/p", Obj: whole}
	if got, err := StripPod(tombstone); err != nil || got != any(tombstone) {
		t.Errorf("tombstone: %v, %v; want it unchanged", got, err)
	}
}

// TestSyncOverStrippedPods: a Bound claim whose cached pod is stripped, with drifted labels, is
// repaired with a label patch (a stripped pod is never written back whole), and nothing else.
func TestSyncOverStrippedPods(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t).withDefaults()
	claim := bound("c1", t0.Add(-time.Minute))
	f.claims = append(f.claims, claim)
	f.withChildren(claim)
	whole := newPod(claim, markReady)
	whole.Labels[airlockv1alpha1.LabelRuntime] = "other"
	stripped, _ := StripPod(whole)
	f.pods = append(f.pods, stripped.(*corev1.Pod))
	c := f.newController(ctx)
	if _, err := c.sync(ctx, keyOf(claim)); err != nil {
		t.Fatal(err)
	}
	checkActions(t, f, []string{"patch pods c1"})
	p, err := f.kubeClient.CoreV1().Pods(testNamespace).Get(ctx, "c1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Labels[airlockv1alpha1.LabelRuntime] != claim.Spec.RuntimeName {
		t.Errorf("pod labels %v after the repair, want the runtime label %q", p.Labels, claim.Spec.RuntimeName)
	}
}
