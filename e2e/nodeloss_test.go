//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/claimname"
	"github.com/airlock-dev/airlock/pkg/client"
)

// kwokNodeAnnotation is what kwok manages fake Nodes by (hack/local-cluster.sh runs it with
// --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake): without it, kwok stops
// posting the Node's status, as a kubelet that stopped would.
const kwokNodeAnnotation = "kwok.x-k8s.io/node"

// stopKwokNode makes kwok stop managing the Node (its "kubelet" stops), and puts it back when the
// test ends: managed again, without the out-of-service taint, re-created if the test deleted it
// (from the object as it was), and Ready again, so that the tests after this one have their Nodes.
func stopKwokNode(t *testing.T, name string) *corev1.Node {
	t.Helper()
	ctx := context.Background()
	node, err := kubeClient.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if node.Annotations[kwokNodeAnnotation] == "" {
		t.Skipf("node %s is not a kwok node: this test stops a kwok node (the API-only plane)", name)
	}
	saved := node.DeepCopy()
	t.Cleanup(func() { restoreKwokNode(t, saved) })
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{kwokNodeAnnotation: nil}}})
	if _, err := kubeClient.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("stopping node %s: %v", name, err)
	}
	t.Logf("node %s: kwok no longer manages it", name)
	return saved
}

func restoreKwokNode(t *testing.T, saved *corev1.Node) {
	ctx := context.Background()
	node, err := kubeClient.CoreV1().Nodes().Get(ctx, saved.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		fresh := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: saved.Name, Labels: saved.Labels, Annotations: saved.Annotations},
			Status:     corev1.NodeStatus{Allocatable: saved.Status.Allocatable, Capacity: saved.Status.Capacity, NodeInfo: saved.Status.NodeInfo},
		}
		if _, err := kubeClient.CoreV1().Nodes().Create(ctx, fresh, metav1.CreateOptions{}); err != nil {
			t.Errorf("re-creating node %s: %v", saved.Name, err)
			return
		}
	case err != nil:
		t.Errorf("restoring node %s: %v", saved.Name, err)
		return
	default:
		if node.Annotations == nil {
			node.Annotations = map[string]string{}
		}
		node.Annotations[kwokNodeAnnotation] = saved.Annotations[kwokNodeAnnotation]
		var taints []corev1.Taint
		for _, taint := range node.Spec.Taints {
			if taint.Key != "node.kubernetes.io/out-of-service" {
				taints = append(taints, taint)
			}
		}
		node.Spec.Taints = taints
		if _, err := kubeClient.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
			t.Errorf("restoring node %s: %v", saved.Name, err)
			return
		}
	}
	eventually(t, 3*time.Minute, "node "+saved.Name+" Ready and untainted again", func(ctx context.Context) (bool, error) {
		n, err := kubeClient.CoreV1().Nodes().Get(ctx, saved.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return len(n.Spec.Taints) == 0, nil
			}
		}
		return false, nil
	})
}

// watchOneWriter watches the claim's pods and records a violation whenever a pod of it is added
// while another pod of it still exists (one writer per workspace: SPEC section 5).
func watchOneWriter(t *testing.T, ns, claimName string) (violations func() []string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w, err := kubeClient.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{LabelSelector: airlockv1alpha1.LabelClaim + "=" + claimName})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	var mu sync.Mutex
	var found []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		live := map[types.UID]string{}
		for ev := range w.ResultChan() {
			pod, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			switch ev.Type {
			case watch.Added:
				if len(live) > 0 {
					mu.Lock()
					found = append(found, "pod "+pod.Name+" ("+string(pod.UID)+") added while another pod of the claim exists")
					mu.Unlock()
				}
				live[pod.UID] = pod.Name
			case watch.Deleted:
				delete(live, pod.UID)
			}
		}
	}()
	t.Cleanup(func() { cancel(); w.Stop(); <-done })
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), found...)
	}
}

// waitPodLost waits for the claim's PodLost condition to be True with reason, naming pod and node.
func waitPodLost(t *testing.T, ns, name, reason, pod, node string) *metav1.Condition {
	t.Helper()
	var got *metav1.Condition
	eventually(t, 4*time.Minute, "claim "+name+" PodLost "+reason, func(ctx context.Context) (bool, error) {
		c, err := airlockClient.AirlockV1alpha1().SandboxClaims(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		got = meta.FindStatusCondition(c.Status.Conditions, airlockv1alpha1.ConditionPodLost)
		return got != nil && got.Status == metav1.ConditionTrue && got.Reason == reason, nil
	})
	if !strings.Contains(got.Message, pod) || !strings.Contains(got.Message, node) {
		t.Errorf("PodLost message %q names neither pod %s nor node %s", got.Message, pod, node)
	}
	return got
}

// acquireAnswersLost checks that an acquire answers 202 within its waitSeconds, with the lost pod's
// reason and a message naming its node, and no address.
func acquireAnswersLost(t *testing.T, c *client.Client, req client.AcquireRequest, reason, node string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req.WaitSeconds = waitSeconds(3)
	got, status, err := c.AcquireOnce(ctx, req)
	if err != nil || status != http.StatusAccepted {
		t.Fatalf("acquire while the pod is lost: %d %+v %v, want 202", status, got, err)
	}
	if got.Reason != reason || !strings.Contains(got.Message, node) || len(got.Addresses) != 0 {
		t.Errorf("acquire while the pod is lost: %+v, want 202 %s naming node %s, no address", got, reason, node)
	}
}

// acquireRecovered waits for an acquire to answer 200 from a pod that is not on node, and returns
// that pod and the answer's URL.
func acquireRecovered(t *testing.T, c *client.Client, req client.AcquireRequest, ns, name, node, oldURL string) (*corev1.Pod, string) {
	t.Helper()
	var pod *corev1.Pod
	var url string
	eventually(t, 4*time.Minute, "the claim Bound again on another node", func(ctx context.Context) (bool, error) {
		req.WaitSeconds = waitSeconds(5)
		got, status, err := c.AcquireOnce(ctx, req)
		if err != nil || status != http.StatusOK {
			return false, nil
		}
		p, err := kubeClient.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil || p.Spec.NodeName == node || p.DeletionTimestamp != nil {
			return false, nil
		}
		if len(got.Addresses) != 1 || got.Addresses[0].URL == oldURL || !strings.Contains(got.Addresses[0].URL, p.Status.PodIP) {
			t.Errorf("acquire after recovery: %+v, want the new pod's address %s (not %s)", got, p.Status.PodIP, oldURL)
		}
		pod, url = p, got.Addresses[0].URL
		return true, nil
	})
	cl, err := airlockClient.AirlockV1alpha1().SandboxClaims(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if lost := meta.FindStatusCondition(cl.Status.Conditions, airlockv1alpha1.ConditionPodLost); lost == nil || lost.Status != metav1.ConditionFalse {
		t.Errorf("PodLost %+v after recovery, want False", lost)
	}
	return pod, url
}

// TestClaimSurvivesLostNode (issue 24, item 1): a Bound claim whose Node stops (kwok no longer
// manages it: the Node goes Unknown, is tainted unreachable and its pods are marked not ready)
// says why, on the claim (PodLost naming the pod, its Node and the reason, and an event) and in
// the acquire's answer, within its waitSeconds; no second pod is started on its workspace while
// the first may still run; and once Kubernetes says the pod is dead, first by the Node's deletion,
// then by the out-of-service taint on another stopped Node, the claim recovers on another Node by
// itself, and its Bound answer carries the new address. Before, an acquire answered 200 with the
// dead address, then 202 "Reaping" without a word of the Node, for as long as the pod stayed.
func TestClaimSurvivesLostNode(t *testing.T) {
	if nodes, err := kubeClient.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{}); err != nil || len(nodes.Items) < 2 {
		t.Skipf("needs two nodes (%v)", err)
	}
	e := newClaimEnv(t, "airlock-nodeloss", claimEnvOptions{maxConcurrent: 5, maxPerSession: 3})
	op := startAPIOperator(t, e.ns)
	c := op.client(serviceAccountToken(t, e.ns, "agent"))
	req := client.AcquireRequest{Namespace: e.ns, Runtime: "agent", Session: "session-1", Handle: "codegen/default"}
	name := claimname.For("agent", "session-1", "codegen/default")

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	first := req
	first.WaitSeconds = waitSeconds(90)
	got, err := c.Acquire(ctx, first)
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	oldURL := got.Addresses[0].URL
	violations := watchOneWriter(t, e.ns, name)
	pod, err := kubeClient.CoreV1().Pods(e.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// A Node that stops, then is deleted.
	nodeA := pod.Spec.NodeName
	savedA := stopKwokNode(t, nodeA)
	lost := waitPodLost(t, e.ns, name, "NodeUnreachable", pod.Name, nodeA)
	acquireAnswersLost(t, c, req, "NodeUnreachable", nodeA)
	events, err := kubeClient.CoreV1().Events(e.ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name + ",reason=NodeUnreachable"})
	if err != nil || len(events.Items) == 0 {
		t.Errorf("no NodeUnreachable event on the claim (%v)", err)
	}
	if pods, err := kubeClient.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: airlockv1alpha1.LabelClaim + "=" + name}); err != nil || len(pods.Items) != 1 || pods.Items[0].UID != pod.UID {
		t.Errorf("pods of the claim while its node is lost: %v %v, want only the first", len(pods.Items), err)
	}
	t.Logf("PodLost: %s", lost.Message)
	if err := kubeClient.CoreV1().Nodes().Delete(ctx, nodeA, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting node %s: %v", nodeA, err)
	}
	moved, movedURL := acquireRecovered(t, c, req, e.ns, name, nodeA, oldURL)
	restoreKwokNode(t, savedA) // for the second half: a Node to move to
	t.Logf("recovered on node %s after node %s was deleted", moved.Spec.NodeName, nodeA)

	// A Node that stops, then is tainted out-of-service (non-graceful node shutdown).
	nodeB := moved.Spec.NodeName
	stopKwokNode(t, nodeB)
	waitPodLost(t, e.ns, name, "NodeUnreachable", moved.Name, nodeB)
	acquireAnswersLost(t, c, req, "NodeUnreachable", nodeB)
	ctx2, cancel2 := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel2()
	node, err := kubeClient.CoreV1().Nodes().Get(ctx2, nodeB, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: "node.kubernetes.io/out-of-service", Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute})
	if _, err := kubeClient.CoreV1().Nodes().Update(ctx2, node, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("tainting node %s out-of-service: %v", nodeB, err)
	}
	again, _ := acquireRecovered(t, c, req, e.ns, name, nodeB, movedURL)
	t.Logf("recovered on node %s after node %s was tainted out-of-service", again.Spec.NodeName, nodeB)

	for _, v := range violations() {
		t.Errorf("one writer: %s", v)
	}
}
