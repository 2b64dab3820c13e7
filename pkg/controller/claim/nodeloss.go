package claim

// Lost pods (issue 24; docs/nothing-lost.md): a pod of a claim that cannot run, because its Node is
// NotReady or unreachable, or because it is stuck terminating, is reported on the claim (condition
// PodLost naming the pod, its Node and the reason, and a Warning event), and the Sandbox API
// answers an acquire of the claim with that reason rather than with an address that does not
// answer.
//
// One writer per workspace stays absolute: a pod that may still run (its Node is only NotReady or
// unreachable: a partitioned kubelet keeps its containers running) is never force-deleted, and no
// other pod is started on its workspace while it exists. The pod is released, deleted with a grace
// period of 0 as the pod garbage collector would, only when Kubernetes says it is dead: its Node
// is gone, or its Node is not Ready and carries the node.kubernetes.io/out-of-service taint
// (non-graceful node shutdown; the same rule as kube-controller-manager's pod GC). Then the
// claim goes on by itself: a Bound or Binding claim's pod is created again on the same workspace
// (the scheduler places it on another Node) and its Bound answer carries the new address; a
// Reaping claim syncs back; a Failed claim's replacement may start.
//
// The operator watches no Nodes (a cluster-wide cache for a rare case): a pod's Node is read from
// the API server (one GET) only when one of the claim's pods is not ready or is terminating past
// its grace period, and, while a pod is lost, again after lostPodRecheck (a workqueue AddAfter on
// the injected clock). The events that matter come as pod events anyway: the node lifecycle
// controller marks the pods of an unreachable Node not ready, its taint manager deletes them, and
// the pod garbage collector deletes those of a deleted Node.

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/controller/objectcontrol"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
)

// ConditionPodLost is the claim's condition of a pod that cannot run (airlockv1alpha1).
const ConditionPodLost = airlockv1alpha1.ConditionPodLost

// Reasons of the PodLost condition and of its events.
const (
	ReasonNodeNotReady        = "NodeNotReady"
	ReasonNodeUnreachable     = "NodeUnreachable"
	ReasonNodeGone            = "NodeGone"
	ReasonNodeOutOfService    = "NodeOutOfService"
	ReasonPodStuckTerminating = "PodStuckTerminating"
	// ReasonPodReleased is the event of a lost pod deleted with a grace period of 0.
	ReasonPodReleased = "PodReleased"
	// ReasonPodNotLost is the PodLost condition's reason once no pod of the claim is lost.
	ReasonPodNotLost = "NoPodLost"
	// ReasonWaitingForPredecessor is the Ready condition's reason of a replacement that waits for
	// the pods of the claim it replaces to go before it starts its own on the shared workspace.
	ReasonWaitingForPredecessor = "WaitingForPredecessorPod"
)

// Taints and timers of lost pods.
const (
	// TaintOutOfService is the taint an administrator puts on a Node that is shut down for good
	// (non-graceful node shutdown): its pods no longer run.
	TaintOutOfService = "node.kubernetes.io/out-of-service"
	// lostPodRecheck is how long after a pod was found lost its Node is read again.
	lostPodRecheck = 30 * time.Second
	// podStuckGrace is how long past its deletion deadline (deletionTimestamp, which includes its
	// grace period) a pod on a Ready Node may take to go before it is reported stuck.
	podStuckGrace = time.Minute
)

const (
	messageNodeGone         = "pod %s was on node %s, which is gone: Kubernetes no longer runs it; released"
	messageNodeOutOfService = "pod %s is on node %s, which is not ready and tainted " + TaintOutOfService + ": Kubernetes no longer runs it; released"
	messageNodeLost         = "pod %s is on node %s, which is %s since %s (%s): the pod may still be running, so no other pod is started on its workspace until the node is ready again, deleted, or tainted " + TaintOutOfService
	messagePodStuck         = "pod %s on node %s has been terminating since %s: no other pod is started on its workspace until it is gone"
	messagePodNotLost       = "no pod of the claim is lost"
	messagePodReleased      = "deleted pod %s with a grace period of 0: %s"
	messagePredecessorPods  = "waiting for pod %s of claim %s, which this claim replaces, to go before starting a pod on the shared workspace: %s"
	messagePredecessorPod   = "the pod is being deleted"
)

// podLoss is why one of a claim's pods cannot run.
type podLoss struct {
	pod     *corev1.Pod
	reason  string
	message string
	// dead: Kubernetes says the pod no longer runs (its Node is gone, or out of service); it is
	// released.
	dead bool
}

// lostPodControl is what the controller asks of the API server about lost pods.
type lostPodControl interface {
	// Node reads a Node from the API server (not a cache: the operator watches no Nodes).
	Node(ctx context.Context, name string) (*corev1.Node, error)
	// Release deletes a pod that Kubernetes says is dead with a grace period of 0, on its UID.
	Release(ctx context.Context, pod *corev1.Pod) error
}

type realLostPodControl struct {
	client kubernetes.Interface
}

func (r realLostPodControl) Node(ctx context.Context, name string) (*corev1.Node, error) {
	return r.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
}

func (r realLostPodControl) Release(ctx context.Context, pod *corev1.Pod) error {
	return r.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To[int64](0),
		Preconditions:      &metav1.Preconditions{UID: &pod.UID},
	})
}

// lostPod returns the first of the claim's pods that cannot run, and when to look again (nil:
// when an event says so). Only pods the claim controls and that are on a Node are looked at, and
// of those only the ones that are not ready or are terminating; a pod terminating within its
// grace period on a Ready Node is not lost yet (looked at again when it would be stuck).
func (c *Controller) lostPod(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, pods []*corev1.Pod) (*podLoss, *time.Duration, error) {
	now := c.clock.Now()
	var recheck *time.Duration
	for _, pod := range pods {
		if pod.Spec.NodeName == "" || !metav1.IsControlledBy(pod, claim) || (pod.DeletionTimestamp == nil && (podReady(pod) || sandboxpod.Ended(pod))) {
			continue
		}
		loss, err := c.diagnose(ctx, pod, now)
		if err != nil {
			return nil, nil, err
		}
		if loss != nil {
			return loss, ptr.To(lostPodRecheck), nil
		}
		klog.FromContext(ctx).V(4).Info("A pod of the claim is not ready or terminating; its Node is Ready", "claim", klog.KObj(claim), "pod", klog.KObj(pod), "node", pod.Spec.NodeName)
		if pod.DeletionTimestamp != nil {
			left, _ := timeLeft(pod.DeletionTimestamp.Time, podStuckGrace, now)
			if recheck == nil || left < *recheck {
				recheck = ptr.To(max(left, 0))
			}
		}
	}
	return nil, recheck, nil
}

// diagnose says why the pod cannot run, from its Node: nil when its Node is Ready and the pod is
// not stuck terminating.
func (c *Controller) diagnose(ctx context.Context, pod *corev1.Pod, now time.Time) (*podLoss, error) {
	nodeName := pod.Spec.NodeName
	node, err := c.lostPods.Node(ctx, nodeName)
	if apierrors.IsNotFound(err) {
		return &podLoss{pod: pod, reason: ReasonNodeGone, message: fmt.Sprintf(messageNodeGone, pod.Name, nodeName), dead: true}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading node %s of pod %s: %w", nodeName, pod.Name, err)
	}
	ready := nodeReadyCondition(node)
	if ready == nil || ready.Status != corev1.ConditionTrue {
		if hasTaint(node, TaintOutOfService) {
			return &podLoss{pod: pod, reason: ReasonNodeOutOfService, message: fmt.Sprintf(messageNodeOutOfService, pod.Name, nodeName), dead: true}, nil
		}
		reason, state, since, why := ReasonNodeUnreachable, "unreachable", node.CreationTimestamp.Time, "no Ready condition"
		if ready != nil {
			since, why = ready.LastTransitionTime.Time, ready.Reason
			if ready.Message != "" {
				why = ready.Reason + ": " + ready.Message
			}
			if ready.Status == corev1.ConditionFalse {
				reason, state = ReasonNodeNotReady, "not ready"
			}
		}
		return &podLoss{pod: pod, reason: reason, message: fmt.Sprintf(messageNodeLost, pod.Name, nodeName, state, since.UTC().Format(time.RFC3339), why)}, nil
	}
	if pod.DeletionTimestamp != nil {
		if _, inTime := timeLeft(pod.DeletionTimestamp.Time, podStuckGrace, now); !inTime {
			return &podLoss{pod: pod, reason: ReasonPodStuckTerminating,
				message: fmt.Sprintf(messagePodStuck, pod.Name, nodeName, pod.DeletionTimestamp.UTC().Format(time.RFC3339))}, nil
		}
	}
	return nil, nil
}

// reportPodLoss writes the claim's PodLost condition (True with the loss, or False once no pod is
// lost, when it was True), with a Warning event when the loss is new or changed. updated, when
// set, is the copy of the claim the caller is writing anyway (the condition goes into it, and the
// caller writes, then releases a dead pod with releaseDeadPod); else the claim's status is
// written here, and then a dead pod released. It returns the claim as written.
func (c *Controller) reportPodLoss(ctx context.Context, claim, updated *airlockv1alpha1.SandboxClaim, loss *podLoss) (*airlockv1alpha1.SandboxClaim, error) {
	write := updated == nil
	if write {
		updated = claim.DeepCopy()
	}
	old := findCondition(claim, ConditionPodLost)
	now := c.clock.Now()
	switch {
	case loss != nil:
		setCondition(&updated.Status, ConditionPodLost, metav1.ConditionTrue, loss.reason, loss.message, now)
	case old != nil && old.Status == metav1.ConditionTrue:
		setCondition(&updated.Status, ConditionPodLost, metav1.ConditionFalse, ReasonPodNotLost, messagePodNotLost, now)
	}
	written := updated
	if write {
		var err error
		if written, err = c.updateClaimStatus(ctx, claim, updated); err != nil {
			return nil, err
		}
	}
	if loss == nil {
		return written, nil
	}
	if old == nil || old.Status != metav1.ConditionTrue || old.Reason != loss.reason || old.Message != loss.message {
		eventType := corev1.EventTypeWarning
		if loss.reason == ReasonWaitingForPredecessor {
			eventType = corev1.EventTypeNormal // mostly a pod that is going, a few seconds
		}
		c.recorder.Event(claim, eventType, loss.reason, loss.message)
	}
	if write {
		// The claim says why (PodLost with the loss) before its pod is released; a caller that
		// writes the status itself releases after its write (releaseDeadPod).
		return written, c.releaseDeadPod(ctx, claim, loss)
	}
	return written, nil
}

// releaseDeadPod releases the pod of a dead loss (grace 0), once the claim's PodLost condition
// that says why is written: were the write refused (a conflict) after the release, the next look
// would find no pod and a PodLost of an earlier reason (the Node unreachable), clear it as a Node
// come back, and the acquire would answer 200 with the released pod's address until a new pod is
// Ready (found by TestClaimSurvivesLostNode).
func (c *Controller) releaseDeadPod(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, loss *podLoss) error {
	if loss == nil || !loss.dead {
		return nil
	}
	klog.FromContext(ctx).Info("Releasing a lost pod", "claim", klog.KObj(claim), "pod", klog.KObj(loss.pod), "node", loss.pod.Spec.NodeName, "reason", loss.reason)
	if err := objectcontrol.IgnoreGone(c.lostPods.Release(ctx, loss.pod)); err != nil {
		return err
	}
	c.recorder.Eventf(claim, corev1.EventTypeNormal, ReasonPodReleased, messagePodReleased, loss.pod.Name, loss.message)
	return nil
}

// waitForPods is the wait of a Reaping or Failed claim for its deleted pods to go: a lost one is
// reported (and released when dead), and the claim looked at again when it may be stuck.
func (c *Controller) waitForPods(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, pods []*corev1.Pod) (*time.Duration, error) {
	loss, recheck, err := c.lostPod(ctx, claim, pods)
	if err != nil {
		return nil, err
	}
	if _, err := c.reportPodLoss(ctx, claim, nil, loss); err != nil {
		return nil, err
	}
	return recheck, nil
}

// predecessorPod returns a pod of the claim this claim replaces that still exists, when the two
// share a workspace (a mount role's, a session's): the replacement must not start a second writer
// on it. It returns nil for a claim that replaces none, or whose predecessor's pods are gone.
func (c *Controller) predecessorPod(claim *airlockv1alpha1.SandboxClaim) (*corev1.Pod, *airlockv1alpha1.SandboxClaim, error) {
	if claim.Spec.Replaces == "" {
		return nil, nil, nil
	}
	pred, err := c.claimLister.SandboxClaims(claim.Namespace).Get(claim.Spec.Replaces)
	if apierrors.IsNotFound(err) {
		pred = nil
	} else if err != nil {
		return nil, nil, err
	}
	if pred != nil && pred.Spec.WorkspaceDir != claim.Spec.WorkspaceDir {
		return nil, nil, nil
	}
	pod, err := c.podLister.Pods(claim.Namespace).Get(claim.Spec.Replaces) // a claim's pod is named after it
	if apierrors.IsNotFound(err) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	return pod, pred, nil
}

// predecessorWait is the Ready condition's message of a replacement waiting for pod of pred.
func predecessorWait(pod *corev1.Pod, pred *airlockv1alpha1.SandboxClaim) string {
	why := messagePredecessorPod
	if pred != nil {
		if cond := findCondition(pred, ConditionPodLost); cond != nil && cond.Status == metav1.ConditionTrue {
			why = cond.Message
		}
	}
	return fmt.Sprintf(messagePredecessorPods, pod.Name, pod.Labels[LabelClaim], why)
}

// nodeReadyCondition returns the Node's Ready condition, or nil.
func nodeReadyCondition(node *corev1.Node) *corev1.NodeCondition {
	for i := range node.Status.Conditions {
		if node.Status.Conditions[i].Type == corev1.NodeReady {
			return &node.Status.Conditions[i]
		}
	}
	return nil
}

func hasTaint(node *corev1.Node, key string) bool {
	for _, t := range node.Spec.Taints {
		if t.Key == key {
			return true
		}
	}
	return false
}

// podReady says whether the pod's Ready condition is True.
func podReady(pod *corev1.Pod) bool {
	for _, cond := range pod.Status.Conditions {
		if cond.Type == corev1.PodReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}
