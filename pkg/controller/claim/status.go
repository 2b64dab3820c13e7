package claim

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
)

// Condition types of a claim.
const (
	// ConditionAdmitted is True once admission admitted the claim, False while it is Queued or
	// after it was Refused (the reason says which). Its lastTransitionTime is the time of the
	// last decision that changed its status or reason: a refusal's time.
	ConditionAdmitted = "Admitted"
	// ConditionReady is True while the claim is Bound. It turns False with reason Binding when
	// binding begins (its lastTransitionTime starts the class's startupTimeout) and False with the
	// failure's reason when the claim fails (its lastTransitionTime is then the failure's time).
	ConditionReady = "Ready"
	// ConditionSyncBack reports the sync-back of a Reaping claim (and the removal of its
	// workspace): Unknown while it waits its turn (workspace.go), False with the Job's failure
	// while it is retried, True once the workspace is saved.
	ConditionSyncBack = airlockv1alpha1.ConditionSyncBack
	// ConditionEvicted reports the last eviction of one of the claim's pods (its ephemeral-storage
	// limit passed, or node pressure): True, reason Evicted, with the kubelet's message and the
	// pod's name. The controller creates the claim's pod again on the same workspace
	// (replaceEndedPod); the condition stays as the claim's record of why its sandbox restarted.
	ConditionEvicted = "Evicted"
)

// Event reasons (and the condition reasons that are not pod or admission reasons).
const (
	ReasonQueued          = "Queued"
	ReasonAdmitted        = "Admitted"
	ReasonBinding         = "Binding"
	ReasonBound           = "Bound"
	ReasonRefused         = "Refused"
	ReasonFailed          = "Failed"
	ReasonReaping         = "Reaping"
	ReasonIdleTimeout     = "IdleTimeout"
	ReasonSessionClosed   = "SessionClosed"
	ReasonQueueTimeout    = "QueueTimeout"
	ReasonFailedExpired   = "FailedExpired"
	ReasonReplacementGone = "ReplacementGone"
	ReasonRefusedExpired  = "RefusedExpired"
	ReasonReaped          = "Reaped"
	ReasonSyncBackStarted = "SyncBackStarted"
	ReasonSyncBackFailed  = airlockv1alpha1.ReasonSyncBackFailed
	ReasonSyncedBack      = "SyncedBack"
	ReasonPodReady        = "PodReady"
	ReasonPodNotReady     = "PodNotReady"
	ReasonPodFailed       = "PodFailed"
	ReasonStartupTimeout  = "StartupTimeout"
	ReasonUnschedulable   = "Unschedulable"
	ReasonClassNotFound   = "ClassNotFound"
	ReasonInvalidClass    = "InvalidClass"
	// ReasonEgressUnavailable: the class has egress and the operator has no usable gateway.
	ReasonEgressUnavailable = "EgressUnavailable"
	ReasonMaxConcurrent     = "MaxConcurrent"
	ReasonErrResourceExists = "ErrResourceExists"
	ReasonEvicted           = "Evicted"
)

// Event messages.
const (
	MessageQueued         = "Queued: the runtime's maxConcurrent claims are Binding or Bound"
	MessageAdmitted       = "Admitted: building the sandbox"
	MessageBound          = "Bound: the sandbox pod is ready"
	MessageRefused        = "Refused (%s): %s"
	MessageFailed         = "Failed (%s): %s"
	MessageReaping        = "Reaping (%s): %s"
	MessageDeleted        = "Deleting the claim (%s)"
	MessageSyncStarted    = "Started sync-back Job %s (attempt %d)"
	MessageSyncFailed     = "Sync-back Job %s failed (attempt %d), retrying in %s: %s"
	MessageSynced         = "Sync-back Job %s saved the workspace to %s"
	MessageResourceExists = "%s %q already exists and is not controlled by the claim"
	MessagePodNotReady    = "The Bound sandbox's pod is not ready; reaped with sync-back if it is not ready again within %s: %s"
	messageRefusedDetail  = "admission refused the claim"
	messageIdleDetail     = "unused for longer than the runtime's idleTimeout %s"
	messageSessionClosed  = "the runtime closed the session"
	messageBinding        = "waiting for the sandbox pod to become ready"
	messageStartupTimeout = "the sandbox pod was not ready within the class's startupTimeout %s"
	messagePodNotReady    = "the sandbox pod is not ready"
	messagePodFailed      = "the sandbox pod has not been ready for the class's startupTimeout %s (%s: %s)"
	messageChildrenFailed = "the sandbox's objects could not be written within the class's startupTimeout %s: %v"
	messageClassNotFound  = "SandboxClass %q not found"
	messageSyncBackOK     = "the workspace is saved in %s"
	messageSyncNotStarted = "its pod did not become ready within %s (image, scheduling or volume)"
	messageEvicted        = "pod %s was evicted: %s"
)

// setCondition sets a condition of the claim. lastTransitionTime moves to now when the status or
// the reason changes; a change of message alone keeps it.
func setCondition(status *airlockv1alpha1.SandboxClaimStatus, condType string, condStatus metav1.ConditionStatus, reason, message string, now time.Time) {
	for i := range status.Conditions {
		c := &status.Conditions[i]
		if c.Type != condType {
			continue
		}
		if c.Status != condStatus || c.Reason != reason {
			c.LastTransitionTime = metav1.NewTime(now)
		}
		c.Status, c.Reason, c.Message = condStatus, reason, message
		c.ObservedGeneration = 0
		return
	}
	status.Conditions = append(status.Conditions, metav1.Condition{
		Type: condType, Status: condStatus, Reason: reason, Message: message,
		LastTransitionTime: metav1.NewTime(now),
	})
}

// findCondition returns the claim's condition of condType, or nil.
func findCondition(claim *airlockv1alpha1.SandboxClaim, condType string) *metav1.Condition {
	for i := range claim.Status.Conditions {
		if claim.Status.Conditions[i].Type == condType {
			return &claim.Status.Conditions[i]
		}
	}
	return nil
}

// conditionTime returns the lastTransitionTime of the claim's condition of condType when it has
// the given status, else the claim's creation time.
func conditionTime(claim *airlockv1alpha1.SandboxClaim, condType string, condStatus metav1.ConditionStatus) time.Time {
	if c := findCondition(claim, condType); c != nil && c.Status == condStatus && !c.LastTransitionTime.IsZero() {
		return c.LastTransitionTime.Time
	}
	return claim.CreationTimestamp.Time
}

// setPhase sets the phase, reason and message of a claim's status (a copy).
func setPhase(claim *airlockv1alpha1.SandboxClaim, phase airlockv1alpha1.ClaimPhase, reason, message string) {
	claim.Status.Phase = phase
	claim.Status.Reason = reason
	claim.Status.Message = message
	claim.Status.ObservedGeneration = claim.Generation
}

// reasonOfTheWait gives a Binding claim's status.reason and message those of its Ready condition
// while it is False: why it waits (Binding, WaitingForPredecessorPod,
// WaitingForWorkspaceCollection, a lost pod's Node reason), which `kubectl get sbx` prints as
// REASON (issue 39). Every status write goes through updateClaimStatus, so the two never differ.
func reasonOfTheWait(claim *airlockv1alpha1.SandboxClaim) {
	if claim.Status.Phase != airlockv1alpha1.ClaimBinding {
		return
	}
	if ready := findCondition(claim, ConditionReady); ready != nil && ready.Status == metav1.ConditionFalse {
		claim.Status.Reason, claim.Status.Message = ready.Reason, ready.Message
	}
}

// updateClaimStatus writes updated's status when it differs from old's, with one UpdateStatus,
// and records an event and the metrics when the phase changed. It returns the claim as written
// (or updated unchanged when nothing was written).
func (c *Controller) updateClaimStatus(ctx context.Context, old, updated *airlockv1alpha1.SandboxClaim) (*airlockv1alpha1.SandboxClaim, error) {
	reasonOfTheWait(updated)
	if apiequality.Semantic.DeepEqual(old.Status, updated.Status) {
		return updated, nil
	}
	written, err := c.claims.UpdateStatus(ctx, updated)
	if err != nil {
		return nil, err
	}
	c.statusWrites.wrote(old)
	if old.Status.Phase != written.Status.Phase {
		klog.FromContext(ctx).V(2).Info("Claim phase changed", "claim", klog.KObj(written),
			"from", old.Status.Phase, "to", written.Status.Phase, "reason", written.Status.Reason)
		c.recordPhaseEvent(written)
		observePhaseChange(old, written, c.clock.Now())
	}
	return written, nil
}

// recordPhaseEvent records the event of the claim's (new) phase.
func (c *Controller) recordPhaseEvent(claim *airlockv1alpha1.SandboxClaim) {
	s := claim.Status
	switch s.Phase {
	case airlockv1alpha1.ClaimQueued:
		c.recorder.Event(claim, corev1.EventTypeNormal, ReasonQueued, MessageQueued)
	case airlockv1alpha1.ClaimBinding:
		c.recorder.Event(claim, corev1.EventTypeNormal, ReasonAdmitted, MessageAdmitted)
	case airlockv1alpha1.ClaimBound:
		c.recorder.Event(claim, corev1.EventTypeNormal, ReasonBound, MessageBound)
	case airlockv1alpha1.ClaimRefused:
		c.recorder.Eventf(claim, corev1.EventTypeWarning, ReasonRefused, MessageRefused, s.Reason, s.Message)
	case airlockv1alpha1.ClaimFailed:
		c.recorder.Eventf(claim, corev1.EventTypeWarning, ReasonFailed, MessageFailed, s.Reason, s.Message)
	case airlockv1alpha1.ClaimReaping:
		c.recorder.Eventf(claim, corev1.EventTypeNormal, ReasonReaping, MessageReaping, s.Reason, s.Message)
	}
}
