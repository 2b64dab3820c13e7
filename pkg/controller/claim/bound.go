package claim

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/airlock-dev/airlock/pkg/admission"
	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
)

// A Bound claim (SPEC section 3): its children are repaired from its frozen record, and it is
// reaped, with sync-back, when it has been idle for the runtime's idleTimeout, or when its pod
// has not been ready for the record's startupTimeout (a crash loop, an evicted pod that cannot be
// scheduled again, ...): reason PodFailed, so that its work is saved and its slot freed rather
// than held by a sandbox nobody can use until the idle timer runs out.
//
// The Ready condition says which: it turns False (with the pod's waiting reason, else
// PodNotReady) when the Bound claim's pod is first seen not ready, and its lastTransitionTime
// starts the startupTimeout; it turns True again if the pod recovers first.

// syncBound repairs the Bound claim's children, watches its pod, and reaps it when it has been
// idle too long or its pod has not been ready for the startupTimeout.
func (c *Controller) syncBound(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, rt *airlockv1alpha1.AgentRuntime) (*time.Duration, error) {
	if leftToGarbageCollection(claim, rt) {
		return nil, nil
	}
	now := c.clock.Now()
	idle := admission.IdleTimeout(rt)
	idleLeft, notIdle := timeLeft(lastUsed(claim), idle, now)
	if !notIdle {
		return c.beginReaping(ctx, claim, rt, ReasonIdleTimeout, fmt.Sprintf(messageIdleDetail, idle),
			func(fresh *airlockv1alpha1.SandboxClaim) (time.Duration, bool) {
				return timeLeft(lastUsed(fresh), idle, c.clock.Now())
			})
	}

	if claim.Status.Warm != nil {
		if requeue, done, err := c.syncWarmMember(ctx, claim, rt); done || err != nil {
			if requeue == nil && err == nil {
				requeue = ptr.To(idleLeft)
			}
			return requeue, err
		}
	}
	pods, err := c.claimPods(claim)
	if err != nil {
		return nil, err
	}
	claim, err = c.repairBound(ctx, claim, pods)
	if err != nil {
		return nil, err
	}
	return c.watchBoundPod(ctx, claim, rt, pods, idleLeft)
}

// repairBound reports an eviction of the Bound claim's pod and repairs its children from the
// frozen record only: an ended pod is deleted and created again on the same workspace. A claim
// bound before records existed has none: its children are left exactly as they are until it is
// reaped (rebuilding them from the live class or registry could restart or widen the running
// sandbox). It returns the claim as last written.
func (c *Controller) repairBound(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, pods []*corev1.Pod) (*airlockv1alpha1.SandboxClaim, error) {
	claim, err := c.reportEviction(ctx, claim, pods)
	if err != nil {
		return nil, err
	}
	record := claim.Status.Frozen
	if record == nil {
		return claim, nil
	}
	if claim.Status.Warm == nil { // a warm member that ended was reaped before
		if err := c.replaceEndedPod(ctx, claim, pods); err != nil {
			return nil, err
		}
	}
	return claim, c.ensureChildrenIfSeen(ctx, claim, record)
}

// watchBoundPod keeps the Bound claim's Ready condition and addresses as its pod is, and reaps the
// claim (PodFailed) when the pod has not been ready for the record's startupTimeout. It returns
// when to look again: by the idle timer, or by the startupTimeout left.
func (c *Controller) watchBoundPod(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, rt *airlockv1alpha1.AgentRuntime, pods []*corev1.Pod, idleLeft time.Duration) (*time.Duration, error) {
	now := c.clock.Now()
	record := claim.Status.Frozen
	timeout := defaultStartupTimeout
	if record != nil {
		timeout = sandboxpod.StartupTimeout(record)
	}
	ready := findCondition(claim, ConditionReady)
	pod := sandboxpod.ReadyPod(pods)
	readyNow := pod != nil
	var moved []airlockv1alpha1.ClaimAddress // the addresses of a pod created again, at another IP
	if readyNow && record != nil {
		if want := sandboxpod.Addresses(pod.Status.PodIP, record); !apiequality.Semantic.DeepEqual(want, claim.Status.Addresses) {
			moved = want
		}
	}
	lost := findCondition(claim, ConditionPodLost)
	wasLost := lost != nil && lost.Status == metav1.ConditionTrue
	switch {
	case readyNow && (ready == nil || ready.Status != metav1.ConditionTrue || moved != nil || wasLost):
		// Recovered (a pod created again after an eviction or on another Node is at another IP:
		// the next acquire answers with it).
		updated := claim.DeepCopy()
		setCondition(&updated.Status, ConditionReady, metav1.ConditionTrue, ReasonPodReady, MessageBound, now)
		if moved != nil {
			updated.Status.Addresses = moved
		}
		if _, err := c.reportPodLoss(ctx, claim, updated, nil); err != nil {
			return nil, err
		}
		_, err := c.updateClaimStatus(ctx, claim, updated)
		return ptr.To(idleLeft), err
	case readyNow:
		return ptr.To(idleLeft), nil
	}
	if requeue, handled, err := c.watchLostPod(ctx, claim, pods, idleLeft); handled || err != nil {
		return requeue, err
	}
	switch {
	case ready == nil || ready.Status == metav1.ConditionTrue:
		// First seen not ready: the startupTimeout starts now.
		reason, message := sandboxpod.Failure(pods)
		if reason == "" {
			reason, message = ReasonPodNotReady, messagePodNotReady
		}
		updated := claim.DeepCopy()
		setCondition(&updated.Status, ConditionReady, metav1.ConditionFalse, reason, message, now)
		if _, err := c.updateClaimStatus(ctx, claim, updated); err != nil {
			return nil, err
		}
		c.recorder.Eventf(claim, corev1.EventTypeWarning, reason, MessagePodNotReady, timeout, message)
		return ptr.To(min(idleLeft, timeout)), nil
	}
	notReadyFor := func(fresh *airlockv1alpha1.SandboxClaim) (time.Duration, bool) {
		if cond := findCondition(fresh, ConditionReady); cond == nil || cond.Status != metav1.ConditionFalse {
			// Ready again (the cache had not seen it yet): not reaped; looked at again later.
			return timeout, true
		}
		return timeLeft(conditionTime(fresh, ConditionReady, metav1.ConditionFalse), timeout, c.clock.Now())
	}
	if left, ok := notReadyFor(claim); ok {
		return ptr.To(min(idleLeft, left)), nil
	}
	return c.beginReaping(ctx, claim, rt, ReasonPodFailed,
		fmt.Sprintf(messagePodFailed, timeout, ready.Reason, ready.Message), notReadyFor)
}

// reportEviction records, once per evicted pod, that a pod of the Bound claim was evicted: the
// Evicted condition (its message names the pod) and a Warning event. The ended pod is then
// deleted and created again on the same workspace (replaceEndedPod); the agent's writable layer
// and its sessions are what was lost. The
// eviction is read from the pod's status when it says so, else from the kubelet's Evicted event
// (one LIST per ended pod; a pod whose events say nothing is not looked up again).
func (c *Controller) reportEviction(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, pods []*corev1.Pod) (*airlockv1alpha1.SandboxClaim, error) {
	pod := sandboxpod.TerminatedPod(pods)
	if pod == nil {
		return claim, nil
	}
	if cond := findCondition(claim, ConditionEvicted); cond != nil && strings.HasPrefix(cond.Message, fmt.Sprintf(messageEvicted, pod.Name, "")) {
		return claim, nil // reported
	}
	if _, checked := c.podsChecked.Load(pod.UID); checked {
		return claim, nil
	}
	why := ""
	if pod.Status.Phase == corev1.PodFailed && pod.Status.Reason == ReasonEvicted {
		why = pod.Status.Message
	} else {
		var err error
		if why, err = c.podEvents.EvictionMessage(ctx, pod); err != nil {
			return nil, err
		}
		if why == "" {
			c.podsChecked.Store(pod.UID, struct{}{})
			return claim, nil
		}
	}
	message := fmt.Sprintf(messageEvicted, pod.Name, why)
	updated := claim.DeepCopy()
	now := c.clock.Now()
	setCondition(&updated.Status, ConditionEvicted, metav1.ConditionTrue, ReasonEvicted, message, now)
	findCondition(updated, ConditionEvicted).LastTransitionTime = metav1.NewTime(now) // this eviction's time
	written, err := c.updateClaimStatus(ctx, claim, updated)
	if err != nil {
		return nil, err
	}
	c.recorder.Event(claim, corev1.EventTypeWarning, ReasonEvicted, message)
	return written, nil
}

// watchLostPod reports a Bound claim's pod that cannot run (nodeloss.go): the Ready condition and
// the PodLost condition say why, with an event, and a dead pod is released, to be created again
// on the same workspace (repairBound), on another Node. While its pod is lost the claim is not
// reaped for it (PodFailed): reaping could not go on while the pod may still run, and staying
// Bound lets the claim recover in place when the Node comes back or is declared dead; its idle
// timeout still reaps it. It says whether the claim's pod was lost (handled), and when to look
// again.
func (c *Controller) watchLostPod(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, pods []*corev1.Pod, idleLeft time.Duration) (*time.Duration, bool, error) {
	loss, recheck, err := c.lostPod(ctx, claim, pods)
	if err != nil {
		return nil, true, err
	}
	if loss == nil {
		if cond := findCondition(claim, ConditionPodLost); cond != nil && cond.Status == metav1.ConditionTrue {
			if cond.Reason == ReasonNodeGone || cond.Reason == ReasonNodeOutOfService {
				// Released: the claim stays lost (the acquire answers 202 with why) until the pod
				// built again on another Node is Ready (watchBoundPod), and that pod has the
				// whole startupTimeout, from now.
				if ready := findCondition(claim, ConditionReady); ready != nil && ready.Reason == cond.Reason {
					updated := claim.DeepCopy()
					setCondition(&updated.Status, ConditionReady, metav1.ConditionFalse, ReasonPodNotReady, messagePodNotReady, c.clock.Now())
					_, err := c.updateClaimStatus(ctx, claim, updated)
					return ptr.To(idleLeft), true, err
				}
				return nil, false, nil
			}
			// Its Node is back: the conditions say so, and the startupTimeout starts now for
			// the pod as it is.
			updated := claim.DeepCopy()
			setCondition(&updated.Status, ConditionReady, metav1.ConditionFalse, ReasonPodNotReady, messagePodNotReady, c.clock.Now())
			if _, err := c.reportPodLoss(ctx, claim, updated, nil); err != nil {
				return nil, true, err
			}
			_, err := c.updateClaimStatus(ctx, claim, updated)
			return ptr.To(idleLeft), true, err
		}
		return nil, false, nil
	}
	updated := claim.DeepCopy()
	setCondition(&updated.Status, ConditionReady, metav1.ConditionFalse, loss.reason, loss.message, c.clock.Now())
	if _, err := c.reportPodLoss(ctx, claim, updated, loss); err != nil {
		return nil, true, err
	}
	if _, err := c.updateClaimStatus(ctx, claim, updated); err != nil {
		return nil, true, err
	}
	if err := c.releaseDeadPod(ctx, claim, loss); err != nil {
		return nil, true, err
	}
	return ptr.To(min(idleLeft, *recheck)), true, nil
}
