package claim

// Binding (SPEC section 3): the children are built from the frozen record and the claim waits
// for its pod; Bound when it is ready, Failed when it cannot start or when the record's
// startupTimeout passes, whatever kept it from starting (a child that cannot be written too).

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/controller/objectcontrol"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
	"github.com/airlock-dev/airlock/pkg/workspace"
)

// syncBinding builds the claim's children from its frozen record and waits for its pod: Bound
// when it is ready, Failed when it cannot start or when the record's startupTimeout has passed.
// A child that cannot be written (the API server refuses it, or an object the claim does not
// control holds its name) is retried with backoff and, whatever the backoff, looked at again at
// the startupTimeout, when the claim fails with the write's reason: it never stays Binding, and
// never keeps its maxConcurrent slot, forever.
func (c *Controller) syncBinding(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, rt *airlockv1alpha1.AgentRuntime) (*time.Duration, error) {
	if claim.Status.Frozen == nil {
		written, requeue, err := c.freezeLegacy(ctx, claim, rt)
		if err != nil || written == nil {
			return requeue, err
		}
		claim = written
	}
	record := claim.Status.Frozen
	if done, err := c.finishAdoption(ctx, claim); done || err != nil {
		if err != nil {
			return nil, err
		}
		return c.idleRequeue(claim, rt), nil
	}
	claim, waits, err := c.waitForPredecessor(ctx, claim)
	if err != nil || waits != nil {
		return waits, err
	}
	now := c.clock.Now()
	timeout := sandboxpod.StartupTimeout(record)
	left, inTime := timeLeft(conditionTime(claim, ConditionReady, metav1.ConditionFalse), timeout, now)

	// While children the leader created are not in the cache yet, they are left alone.
	if err := c.ensureChildrenIfSeen(ctx, claim, record); err != nil {
		if message, ok := isWorkspaceWait(err); ok && inTime {
			// Its workspace is being collected (kept.go): the record's deletion enqueues it.
			return c.waitForCollection(ctx, claim, message, left)
		}
		if inTime && onlyPredecessorChildren(err) {
			// Waits for them to go: their deletion enqueues the claim; the deadline holds.
			return ptr.To(left), nil
		}
		if inTime {
			// Retried with backoff (the error), and looked at again at the deadline (the
			// requeue) however long the backoff has grown.
			return ptr.To(left), err
		}
		reason, message := childFailure(err, timeout)
		return c.fail(ctx, claim, rt, reason, message)
	}
	pods, err := c.claimPods(claim)
	if err != nil {
		return nil, err
	}
	if pod := sandboxpod.ReadyPod(pods); pod != nil {
		return c.bindReady(ctx, claim, rt, pod, left, inTime)
	}
	if reason, message := sandboxpod.Failure(pods); reason != "" {
		return c.fail(ctx, claim, rt, reason, message)
	}
	if requeue, done, err := c.bindingLostPod(ctx, claim, rt, pods, left, inTime); done || err != nil {
		return requeue, err
	}
	if inTime {
		return ptr.To(left), nil
	}
	if message := sandboxpod.Unschedulable(pods); message != "" {
		return c.fail(ctx, claim, rt, ReasonUnschedulable, message)
	}
	return c.fail(ctx, claim, rt, ReasonStartupTimeout, fmt.Sprintf(messageStartupTimeout, timeout))
}

// bindReady binds the claim to its Ready pod: once the pod's isolation evidence holds (read,
// judged and signed: isolation.go), Bound at the pod's address with the statement, in one status
// write; it fails the claim when the evidence does not hold, and waits while it is read.
func (c *Controller) bindReady(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, rt *airlockv1alpha1.AgentRuntime, pod *corev1.Pod, left time.Duration, inTime bool) (*time.Duration, error) {
	record, now := claim.Status.Frozen, c.clock.Now()
	v := c.isolationOf(ctx, claim, pod, left, inTime)
	switch {
	case v.failure != "":
		isolationChecks.WithLabelValues("not_met").Inc()
		c.recorder.Event(claim, corev1.EventTypeWarning, ReasonIsolationNotMet, v.failure)
		return c.fail(ctx, claim, rt, ReasonIsolationNotMet, v.failure)
	case v.wait != nil:
		return v.wait, nil
	case v.iso != nil:
		isolationChecks.WithLabelValues("met").Inc()
	}
	updated := claim.DeepCopy()
	updated.Status.Isolation = v.iso
	setPhase(updated, airlockv1alpha1.ClaimBound, "", MessageBound)
	updated.Status.BoundAt = ptr.To(metav1.NewTime(now))
	updated.Status.Addresses = sandboxpod.Addresses(pod.Status.PodIP, record)
	if resumed := workspace.Resumed(pod); resumed != nil && updated.Status.ResumedWorkspace == nil {
		updated.Status.ResumedWorkspace = resumed
	}
	setCondition(&updated.Status, ConditionReady, metav1.ConditionTrue, ReasonPodReady, MessageBound, now)
	written, err := c.updateClaimStatus(ctx, claim, updated)
	if err != nil {
		return nil, err
	}
	return c.idleRequeue(written, rt), nil
}

// onlyPredecessorChildren says whether every error of err (ensureChildren joins them) is a child of
// an earlier claim of the same name still being deleted, or a resume member of its workspace.
func onlyPredecessorChildren(err error) bool {
	joined, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return errors.Is(err, errPredecessorChild) || errors.Is(err, errResumeMemberGoing)
	}
	for _, e := range joined.Unwrap() {
		if !onlyPredecessorChildren(e) {
			return false
		}
	}
	return true
}

// childFailure is the reason and message of a claim whose children could not be written by its
// startupTimeout: ErrResourceExists for an object of another owner holding a child's name, else
// the API server's reason (Invalid, Forbidden, ...), else StartupTimeout.
func childFailure(err error, timeout time.Duration) (string, string) {
	message := fmt.Sprintf(messageChildrenFailed, timeout, err)
	var notControlled *notControlledError
	switch {
	case errors.As(err, &notControlled):
		return ReasonErrResourceExists, message
	case apierrors.ReasonForError(err) != metav1.StatusReasonUnknown:
		return string(apierrors.ReasonForError(err)), message
	}
	return ReasonStartupTimeout, message
}

// fail moves the claim to Failed and deletes its pod.
func (c *Controller) fail(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, rt *airlockv1alpha1.AgentRuntime, reason, message string) (*time.Duration, error) {
	if err := c.stopPods(ctx, claim); err != nil {
		return nil, err
	}
	updated := claim.DeepCopy()
	setPhase(updated, airlockv1alpha1.ClaimFailed, reason, message)
	updated.Status.Addresses = nil
	setCondition(&updated.Status, ConditionReady, metav1.ConditionFalse, reason, message, c.clock.Now())
	if _, err := c.updateClaimStatus(ctx, claim, updated); err != nil {
		return nil, err
	}
	// A claim fails before it can be replaced: it is kept waitingTTL from now (syncFailed).
	return ptr.To(waitingTTL(rt)), nil
}

// claimPods returns the claim's sandbox pods from the cache.
//
// A claim built from a frozen record labels its pods with its UID, and only those are its own: a
// pod of an earlier claim of the same name (closed and acquired again) never makes it Bound nor
// counts for it. A claim built before records existed is matched by name, as it was built.
func (c *Controller) claimPods(claim *airlockv1alpha1.SandboxClaim) ([]*corev1.Pod, error) {
	selector := sandboxpod.SelectorLabels(claim)
	if claim.Status.Frozen == nil {
		selector = sandboxpod.PolicySelector(claim) // by name
	}
	return c.podLister.Pods(claim.Namespace).List(labels.SelectorFromSet(selector))
}

// finishAdoption writes Bound for a Binding claim that controls a Ready warm member (its adoption
// was written, its Bound was not: a conflict, a failover). A member it controls that is not
// Ready any more is deleted, and the claim built cold. While the admission pass that adopted it
// is still at work (the child expectations' hold), it leaves the claim to that pass: two Bound
// writes from one resourceVersion would conflict, and the cold path must never take the member
// for a pod of its own (its Bound would lack status.warm). It says whether the claim is done here.
func (c *Controller) finishAdoption(ctx context.Context, claim *airlockv1alpha1.SandboxClaim) (bool, error) {
	pods, err := c.claimPods(claim)
	if err != nil {
		return false, err
	}
	member := adoptedMember(claim, pods)
	if member == nil {
		return false, nil
	}
	if !c.childExpect.satisfied(claim.UID) {
		klog.FromContext(ctx).V(4).Info("The claim's adoption is in flight; leaving it to its admission pass", "claim", klog.KObj(claim))
		return true, nil
	}
	if member.DeletionTimestamp == nil && sandboxpod.ReadyPod([]*corev1.Pod{member}) != nil {
		// A resume member's record is taken first (resume.go); one the claim cannot hold is let
		// go, and the claim resumes cold once it is gone (its deletion brings the claim back).
		held, err := c.holdsMemberWorkspace(ctx, claim, member)
		if err != nil {
			return true, err
		}
		if !held {
			klog.FromContext(ctx).V(2).Info("The claim's resume member's workspace is not the claim's to take any more; deleting it and resuming cold", "claim", klog.KObj(claim), "member", klog.KObj(member))
			_, err := c.releaseUnserved(ctx, member.Namespace, member.Name, member.UID)
			return true, err
		}
		updated := claim
		if resumed := workspace.Resumed(member); resumed != nil {
			updated = claim.DeepCopy()
			updated.Status.ResumedWorkspace = resumed
		}
		_, err = c.writeWarmBound(ctx, claim, updated, member)
		if !errors.Is(err, errMemberUnfit) {
			return true, err
		}
		// Ready, but its evidence does not meet the claim's need: deleted, and the claim built
		// cold once the cache shows the deletion (the event brings it back), so that the cold
		// path never takes the Ready member for the claim's own pod.
		klog.FromContext(ctx).V(2).Info("The claim's warm member does not meet its isolation need; deleting it and building the claim cold", "claim", klog.KObj(claim), "member", klog.KObj(member), "err", err)
		return true, objectcontrol.IgnoreGone(c.children.pods.Delete(ctx, member.Namespace, member.Name, member.UID))
	}
	if member.DeletionTimestamp == nil {
		klog.FromContext(ctx).V(2).Info("The claim's warm member is not Ready; deleting it and building the claim cold", "claim", klog.KObj(claim), "member", klog.KObj(member))
		if sandboxpod.IsResumeMember(member) {
			_, err := c.releaseUnserved(ctx, member.Namespace, member.Name, member.UID)
			return false, err
		}
		if err := objectcontrol.IgnoreGone(c.children.pods.Delete(ctx, member.Namespace, member.Name, member.UID)); err != nil {
			return false, err
		}
	}
	return false, nil
}

// bindingLostPod looks at a Binding claim's pods on their Nodes (nodeloss.go) when one is being
// deleted (the taint manager evicts the pods of an unreachable Node) or the startupTimeout has
// passed; a pod not yet ready is otherwise only starting, and its Node is not read. A lost pod is
// reported, and released when dead (ensureChildren creates it again, on another Node); at the
// startupTimeout the claim fails with the loss's reason. It says whether it decided (done).
func (c *Controller) bindingLostPod(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, rt *airlockv1alpha1.AgentRuntime,
	pods []*corev1.Pod, left time.Duration, inTime bool) (*time.Duration, bool, error) {
	deleting := false
	for _, pod := range pods {
		deleting = deleting || pod.DeletionTimestamp != nil
	}
	if inTime && !deleting {
		return nil, false, nil
	}
	loss, recheck, err := c.lostPod(ctx, claim, pods)
	if err != nil {
		return nil, true, err
	}
	if loss == nil {
		if cond := findCondition(claim, ConditionPodLost); cond == nil || cond.Status != metav1.ConditionTrue {
			return nil, false, nil
		}
	}
	written, err := c.reportPodLoss(ctx, claim, nil, loss)
	if err != nil {
		return nil, true, err
	}
	switch {
	case loss == nil:
		return ptr.To(left), true, nil // the condition cleared; looked at again by its update
	case !inTime:
		requeue, err := c.fail(ctx, written, rt, loss.reason, loss.message)
		return requeue, true, err
	}
	return ptr.To(min(left, *recheck)), true, nil
}

// waitForPredecessor holds a replacement that shares its workspace with the claim it replaces
// while a pod of that claim still exists (one writer per workspace, even when that pod is lost
// on its Node: nodeloss.go). While it waits, its Ready condition says so (reason
// WaitingForPredecessorPod, which stops its startupTimeout) and so does PodLost, which the Sandbox
// API answers an acquire with; once the pod is gone, Ready is Binding again and the
// startupTimeout starts then. It returns the claim as written, and when to look again when it
// waits (the predecessor's sync enqueues it when its pods are gone; failed.go).
func (c *Controller) waitForPredecessor(ctx context.Context, claim *airlockv1alpha1.SandboxClaim) (*airlockv1alpha1.SandboxClaim, *time.Duration, error) {
	pod, pred, err := c.predecessorPod(claim)
	if err != nil {
		return nil, nil, err
	}
	ready := findCondition(claim, ConditionReady)
	waited := ready != nil && ready.Reason == ReasonWaitingForPredecessor
	if pod == nil && !waited {
		return claim, nil, nil
	}
	now := c.clock.Now()
	updated := claim.DeepCopy()
	var loss *podLoss
	if pod != nil {
		message := predecessorWait(pod, pred)
		loss = &podLoss{pod: pod, reason: ReasonWaitingForPredecessor, message: message}
		setCondition(&updated.Status, ConditionReady, metav1.ConditionFalse, ReasonWaitingForPredecessor, message, now)
	} else {
		setCondition(&updated.Status, ConditionReady, metav1.ConditionFalse, ReasonBinding, messageBinding, now)
	}
	if _, err := c.reportPodLoss(ctx, claim, updated, loss); err != nil {
		return nil, nil, err
	}
	written, err := c.updateClaimStatus(ctx, claim, updated)
	if err != nil {
		return nil, nil, err
	}
	if pod != nil {
		return nil, ptr.To(lostPodRecheck), nil
	}
	return written, nil, nil
}

// waitForCollection says on the claim (Ready False, WaitingForWorkspaceCollection) that its pod
// waits for its workspace's collection; it is looked at again at its startupTimeout, and when the
// record goes.
func (c *Controller) waitForCollection(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, message string, left time.Duration) (*time.Duration, error) {
	if cond := findCondition(claim, ConditionReady); cond == nil || cond.Reason != ReasonWaitingForCollection || cond.Message != message {
		updated := claim.DeepCopy()
		setCondition(&updated.Status, ConditionReady, metav1.ConditionFalse, ReasonWaitingForCollection, message, c.clock.Now())
		if _, err := c.updateClaimStatus(ctx, claim, updated); err != nil {
			return nil, err
		}
		c.recorder.Event(claim, corev1.EventTypeNormal, ReasonWaitingForCollection, message)
	}
	return ptr.To(left), nil
}
