//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/retry"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/claimname"
	"github.com/airlock-dev/airlock/pkg/client"
	"github.com/airlock-dev/airlock/pkg/controller/claim"
)

// kwokProcess returns the PID of the run's kwok, which plays every fake Node's kubelet (see
// clusterProcess).
func kwokProcess(t *testing.T) (pid int, ok bool) {
	t.Helper()
	return clusterProcess(t, "kwok")
}

// kubelets stops and resumes kwok, the kubelet of every fake Node: stopped (SIGSTOP), the Nodes'
// leases and statuses are no longer renewed and the node lifecycle controller marks them
// Unknown and their pods not ready, as with kubelets that stopped. (Removing one Node's kwok
// annotation does not do it: kwok goes on renewing that Node's lease.)
type kubelets struct {
	t   *testing.T
	pid int
}

func (k kubelets) stop() {
	k.t.Helper()
	if err := syscall.Kill(k.pid, syscall.SIGSTOP); err != nil {
		k.t.Fatalf("stopping kwok: %v", err)
	}
	k.t.Log("kwok stopped: no Node's kubelet posts its status")
}

func (k kubelets) resume() {
	k.t.Helper()
	if err := syscall.Kill(k.pid, syscall.SIGCONT); err != nil {
		k.t.Errorf("resuming kwok: %v", err)
	}
	k.t.Log("kwok resumed")
}

// restoreNode puts a Node the test deleted or tainted back as saved was (re-created from it, kwok
// manages it again), without the out-of-service taint, and waits for it to be Ready and untainted,
// so that the tests after this one have their Nodes.
func restoreNode(t *testing.T, saved *corev1.Node) {
	t.Helper()
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
		// The node lifecycle controller writes the Node too (its taints, as it comes back): read
		// it again on a conflict.
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var taints []corev1.Taint
			for _, taint := range node.Spec.Taints {
				if taint.Key != claim.TaintOutOfService {
					taints = append(taints, taint)
				}
			}
			if len(taints) == len(node.Spec.Taints) {
				return nil
			}
			node.Spec.Taints = taints
			_, err := kubeClient.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
			if apierrors.IsConflict(err) {
				if fresh, getErr := kubeClient.CoreV1().Nodes().Get(ctx, saved.Name, metav1.GetOptions{}); getErr == nil {
					node = fresh
				}
			}
			return err
		})
		if err != nil {
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

// saveNode returns the Node as it is now, and restores it when the test ends, after resuming the
// kubelets (a SIGCONT to a kwok that runs is nothing).
func saveNode(t *testing.T, k kubelets, name string) *corev1.Node {
	t.Helper()
	node, err := kubeClient.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		k.resume()
		restoreNode(t, node)
	})
	return node
}

// waitPodGone waits for the pod with uid to be gone (released, or deleted by the pod GC).
func waitPodGone(t *testing.T, ns, name string, uid types.UID) {
	t.Helper()
	eventually(t, 3*time.Minute, "pod "+name+" ("+string(uid)+") gone", func(ctx context.Context) (bool, error) {
		p, err := kubeClient.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return err == nil && p.UID != uid, nil
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
		if err != nil || p.Spec.NodeName == "" || p.Spec.NodeName == node || p.DeletionTimestamp != nil || p.Status.PodIP == "" {
			t.Errorf("acquire answered 200 (%+v) while the claim's pod is not running on another node: %v", got, podState(p, err))
			return false, nil
		}
		// The new pod's address; it may be the old pod's (kwok hands a released IP out again):
		// the pod checked above is another, on another Node.
		if len(got.Addresses) != 1 || !strings.Contains(got.Addresses[0].URL, p.Status.PodIP) {
			t.Errorf("acquire after recovery: %+v, want the new pod's address %s (the old one's was %s)", got, p.Status.PodIP, oldURL)
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

// TestClaimSurvivesLostNode (issue 24, item 1): a Bound claim whose Node's kubelet stops (kwok
// stopped: the Node goes Unknown and its pods are marked not ready) says why, on the claim
// (PodLost naming the pod, its Node and the reason, and an event) and in the acquire's answer,
// within its waitSeconds; no second pod is started on its workspace while the first may still run;
// and once Kubernetes says the pod is dead, first by the Node's deletion, then by the
// out-of-service taint on another Node, the pod is released and the claim recovers on another
// Node by itself, its Bound answer carrying the new address. Before, an acquire answered 200 with
// the dead address, then 202 "Reaping" without a word of the Node, for as long as the pod stayed.
func TestClaimSurvivesLostNode(t *testing.T) {
	pid, ok := kwokProcess(t)
	if !ok {
		t.Skip("the suite runs against a cluster it did not start: it cannot stop that cluster's kubelets")
	}
	if nodes, err := kubeClient.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{}); err != nil || len(nodes.Items) < 2 {
		t.Skipf("needs two nodes (%v)", err)
	}
	k := kubelets{t: t, pid: pid}
	t.Cleanup(k.resume) // whatever fails, the cluster's kubelets are not left stopped

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

	// The Node's kubelet stops; then the Node is deleted.
	nodeA := pod.Spec.NodeName
	savedA := saveNode(t, k, nodeA)
	k.stop()
	lost := waitPodLost(t, e.ns, name, "NodeUnreachable", pod.Name, nodeA)
	t.Logf("PodLost: %s", lost.Message)
	acquireAnswersLost(t, c, req, "NodeUnreachable", nodeA)
	eventually(t, time.Minute, "a NodeUnreachable event on the claim", func(ctx context.Context) (bool, error) {
		events, err := kubeClient.CoreV1().Events(e.ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name + ",reason=NodeUnreachable"})
		return err == nil && len(events.Items) > 0, err
	})
	if pods, err := kubeClient.CoreV1().Pods(e.ns).List(context.Background(), metav1.ListOptions{LabelSelector: airlockv1alpha1.LabelClaim + "=" + name}); err != nil || len(pods.Items) != 1 || pods.Items[0].UID != pod.UID {
		t.Errorf("pods of the claim while its node is lost: %d %v, want only the first", len(pods.Items), err)
	}
	if err := kubeClient.CoreV1().Nodes().Delete(context.Background(), nodeA, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting node %s: %v", nodeA, err)
	}
	waitPodGone(t, e.ns, name, pod.UID)
	k.resume()
	moved, movedURL := acquireRecovered(t, c, req, e.ns, name, nodeA, oldURL)
	t.Logf("recovered on node %s after node %s was deleted", moved.Spec.NodeName, nodeA)
	restoreNode(t, savedA) // for the second half: a Node to move to

	// Another Node's kubelet stops; then the Node is tainted out-of-service (non-graceful node
	// shutdown).
	nodeB := moved.Spec.NodeName
	saveNode(t, k, nodeB)
	k.stop()
	waitPodLost(t, e.ns, name, "NodeUnreachable", moved.Name, nodeB)
	acquireAnswersLost(t, c, req, "NodeUnreachable", nodeB)
	node, err := kubeClient.CoreV1().Nodes().Get(context.Background(), nodeB, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: claim.TaintOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute})
	if _, err := kubeClient.CoreV1().Nodes().Update(context.Background(), node, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("tainting node %s out-of-service: %v", nodeB, err)
	}
	waitPodGone(t, e.ns, name, moved.UID)
	k.resume()
	again, _ := acquireRecovered(t, c, req, e.ns, name, nodeB, movedURL)
	t.Logf("recovered on node %s after node %s was tainted out-of-service", again.Spec.NodeName, nodeB)

	for _, v := range violations() {
		t.Errorf("one writer: %s", v)
	}
}

func podState(p *corev1.Pod, err error) string {
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("pod %s on node %q, IP %q, deleting %v", p.Name, p.Spec.NodeName, p.Status.PodIP, p.DeletionTimestamp != nil)
}
