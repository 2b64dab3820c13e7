package agentruntime

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
)

// The Ready condition of a runtime.
const (
	ConditionReady = "Ready"

	ReasonResolved          = "Resolved"
	ReasonRegistryNotFound  = "RegistryNotFound"
	ReasonClassNotFound     = "ClassNotFound"
	ReasonMountRoleNotFound = "MountRoleNotFound"
)

// sync writes the runtime's status: Ready, claim counts, observedGeneration. It writes at most
// once per claimBatchPeriod per runtime (a sync within the period is put off to its end), and
// never over a cached runtime that does not show its last write yet (the write would be refused
// with a conflict): that sync waits for the runtime's update event (updateRuntime).
func (c *Controller) sync(ctx context.Context, key cache.ObjectName) error {
	rt, err := c.runtimeLister.AgentRuntimes(key.Namespace).Get(key.Name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	c.writesMu.Lock()
	last, wrote := c.writes[key]
	var wait time.Duration
	if wrote {
		wait = claimBatchPeriod - c.clock.Since(last.at)
	}
	stale := wrote && rt.ResourceVersion == last.basedOn
	if stale && wait <= 0 {
		last.deferred = true
		c.writes[key] = last
	}
	c.writesMu.Unlock()
	if wait > 0 {
		c.queue.AddAfter(key, wait)
		return nil
	}
	if stale {
		return nil // the cache has not shown the last write: its update event brings it back
	}
	rt, deleting, err := c.syncFinalizer(ctx, rt)
	if err != nil || deleting {
		return err
	}
	status, reason, message, err := c.resolve(rt)
	if err != nil {
		return err
	}
	counts, err := c.countClaims(rt)
	if err != nil {
		return err
	}
	held, heldCount, err := c.heldWorkspaces(rt)
	if err != nil {
		return err
	}
	runtimeUsage, again := c.runtimeUsage(rt)
	if again > 0 {
		defer c.queue.AddAfter(key, again) // the usage goes on growing without an event
	}
	updated := rt.DeepCopy()
	updated.Status.Usage = runtimeUsage
	updated.Status.ObservedGeneration = rt.Generation
	updated.Status.Claims = counts
	updated.Status.HeldWorkspaces, updated.Status.HeldWorkspaceCount = held, heldCount
	meta.SetStatusCondition(&updated.Status.Conditions, metav1.Condition{
		Type: ConditionReady, Status: status, Reason: reason, Message: message,
		ObservedGeneration: rt.Generation, LastTransitionTime: metav1.NewTime(c.clock.Now()),
	})
	if apiequality.Semantic.DeepEqual(rt.Status, updated.Status) {
		return nil
	}
	klog.FromContext(ctx).V(4).Info("Updating runtime status", "runtime", klog.KObj(rt), "ready", status, "reason", reason)
	if _, err := c.airlockClient.AirlockV1alpha1().AgentRuntimes(rt.Namespace).UpdateStatus(ctx, updated, metav1.UpdateOptions{FieldManager: FieldManager}); err != nil {
		return err
	}
	c.writesMu.Lock()
	c.writes[key] = statusWrite{basedOn: rt.ResourceVersion, at: c.clock.Now()}
	c.writesMu.Unlock()
	if c.usage != nil && runtimeUsage != rt.Status.Usage {
		c.usage.Written(rt.Namespace, rt.Name) // the status holds the source's sums from now on
	}
	return nil
}

// resolve says whether the runtime's registry, the registry's classes and its mount roles resolve.
func (c *Controller) resolve(rt *airlockv1alpha1.AgentRuntime) (metav1.ConditionStatus, string, string, error) {
	registry, err := c.registryLister.ToolRegistries(rt.Namespace).Get(rt.Spec.ToolRegistryRef.Name)
	if apierrors.IsNotFound(err) {
		return metav1.ConditionFalse, ReasonRegistryNotFound, fmt.Sprintf("ToolRegistry %q not found", rt.Spec.ToolRegistryRef.Name), nil
	}
	if err != nil {
		return "", "", "", err
	}
	var missingClasses, missingRoles []string
	roles := map[string]bool{}
	for _, conn := range rt.Spec.Sandbox.Connections {
		roles[conn.Role] = true
	}
	for _, sb := range registry.Spec.Sandboxes {
		if _, err := c.classLister.Get(sb.Class); apierrors.IsNotFound(err) {
			missingClasses = append(missingClasses, sb.Class)
		} else if err != nil {
			return "", "", "", err
		}
		if sb.MountRole != "" && !roles[sb.MountRole] {
			missingRoles = append(missingRoles, sb.MountRole)
		}
	}
	switch {
	case len(missingClasses) > 0:
		slices.Sort(missingClasses)
		return metav1.ConditionFalse, ReasonClassNotFound, "SandboxClasses not found: " + strings.Join(slices.Compact(missingClasses), ", "), nil
	case len(missingRoles) > 0:
		slices.Sort(missingRoles)
		return metav1.ConditionFalse, ReasonMountRoleNotFound, "no connection for the mount roles: " + strings.Join(slices.Compact(missingRoles), ", "), nil
	}
	return metav1.ConditionTrue, ReasonResolved, fmt.Sprintf("ToolRegistry %q and its classes resolve", registry.Name), nil
}

// countClaims counts the runtime's claims by phase (an unset phase counts as Pending; claims being
// deleted are not counted).
func (c *Controller) countClaims(rt *airlockv1alpha1.AgentRuntime) (airlockv1alpha1.ClaimCounts, error) {
	var counts airlockv1alpha1.ClaimCounts
	claims, err := c.claimLister.SandboxClaims(rt.Namespace).List(labels.Everything())
	if err != nil {
		return counts, err
	}
	for _, claim := range claims {
		if claim.Spec.RuntimeName != rt.Name || claim.DeletionTimestamp != nil {
			continue
		}
		switch claim.Status.Phase {
		case "", airlockv1alpha1.ClaimPending:
			counts.Pending++
		case airlockv1alpha1.ClaimQueued:
			counts.Queued++
		case airlockv1alpha1.ClaimBinding:
			counts.Binding++
		case airlockv1alpha1.ClaimBound:
			counts.Bound++
		case airlockv1alpha1.ClaimReaping:
			counts.Reaping++
		case airlockv1alpha1.ClaimRefused:
			counts.Refused++
		case airlockv1alpha1.ClaimFailed:
			counts.Failed++
		}
		countStuck(&counts.Stuck, claim)
	}
	return counts, nil
}

// countStuck counts the claim's waits that may not end by themselves (docs/nothing-lost.md,
// "Stuck waits are counted"): a pod that cannot run (PodLost True), a sync-back (or cleanup) whose
// last attempt failed or that gave up, and one whose Job pod never started.
func countStuck(stuck *airlockv1alpha1.StuckCounts, claim *airlockv1alpha1.SandboxClaim) {
	if meta.IsStatusConditionTrue(claim.Status.Conditions, airlockv1alpha1.ConditionPodLost) {
		stuck.PodLost++
	}
	cond := meta.FindStatusCondition(claim.Status.Conditions, airlockv1alpha1.ConditionSyncBack)
	if cond == nil || cond.Status != metav1.ConditionFalse {
		return
	}
	switch {
	case cond.Reason == airlockv1alpha1.ReasonSyncJobNotStarted && claim.Status.Phase == airlockv1alpha1.ClaimReaping:
		stuck.JobNotStarted++
	case cond.Reason == airlockv1alpha1.ReasonSyncBackGaveUp && claim.Status.Phase == airlockv1alpha1.ClaimFailed,
		(cond.Reason == airlockv1alpha1.ReasonSyncBackFailed || cond.Reason == airlockv1alpha1.ReasonWorkspaceCleanupFailed) &&
			claim.Status.Phase == airlockv1alpha1.ClaimReaping:
		stuck.SyncBackFailing++
	}
}
