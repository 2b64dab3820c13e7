package claim

// Pending and Queued claims: admission (SPEC section 3), and Refused claims.

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/airlock-dev/airlock/pkg/admission"
	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
)

// syncUndecided decides a Pending or Queued claim: admission runs over the namespace's claims.
//
// The cache's decision is acted on alone only when it takes no place: a refusal (it frees one) or
// a Queued claim that stays Queued. Any other (Pending to Queued, Pending or Queued to Binding)
// goes through decideNamespace, which decides the whole namespace again over a fresh list from the
// API server under the namespace's decision lock, so that the count of live and running claims
// never goes over a limit, even for a moment: not after a failover (the new leader's cache may
// miss what the old one wrote), nor between two workers deciding claims of one namespace at once.
func (c *Controller) syncUndecided(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, rt *airlockv1alpha1.AgentRuntime) (*time.Duration, error) {
	input, err := c.admissionInput(claim.Namespace)
	if err != nil {
		return nil, err
	}
	decision, ok := c.decide(input)[claim.Name]
	switch {
	case !ok:
		klog.FromContext(ctx).V(2).Info("Admission made no decision for the claim", "claim", klog.KObj(claim))
		return nil, nil
	case decision.Action == admission.Refuse:
		return c.writeRefused(ctx, claim, rt, decision.Reason)
	case decision.Action == admission.Queue && claim.Status.Phase == airlockv1alpha1.ClaimQueued:
		return c.writeQueued(ctx, claim, rt)
	case decision.Action != admission.Queue && decision.Action != admission.Admit:
		return nil, fmt.Errorf("admission returned unknown action %q for claim %s", decision.Action, klog.KObj(claim))
	}
	admitted, requeue, err := c.decideNamespace(ctx, claim, input)
	if err != nil || admitted == nil {
		return requeue, err
	}
	// Admitted: the children are built outside the decision lock.
	return c.syncBinding(ctx, admitted, rt)
}

// decideNamespace decides every undecided claim of claim's namespace over a fresh list of its
// claims from the API server (a quorum read), under the namespace's decision lock, and writes the
// decisions that change a phase: first every refusal (they free places), then the decisions that
// take a place, each group concurrently (started oldest claim first). No other decision of the
// namespace is written between the list and these writes, and each write carries the listed
// resourceVersion, so every decision is made over the claims as they are. One list serves a whole
// burst: a claim decided here is not listed again by its own sync once the cache has its new
// status (its update event brings it back).
//
// It returns claim as written if it was admitted (the caller builds its children), else when to
// look at claim again.
func (c *Controller) decideNamespace(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, cached admission.Input) (*airlockv1alpha1.SandboxClaim, *time.Duration, error) {
	unlock := c.decisionLocks.lock(claim.Namespace)
	defer unlock()

	// Decided by another worker's pass while this one waited? Its update event brings it back.
	if current, err := c.claimLister.SandboxClaims(claim.Namespace).Get(claim.Name); err != nil || current.ResourceVersion != claim.ResourceVersion {
		return nil, nil, nil
	}
	list, err := c.claims.List(ctx, claim.Namespace)
	if err != nil {
		return nil, nil, err
	}
	input := cached
	input.Claims = make([]*airlockv1alpha1.SandboxClaim, len(list))
	var undecided []*airlockv1alpha1.SandboxClaim
	for i := range list {
		fresh := &list[i]
		input.Claims[i] = fresh
		if _, closing := fresh.Annotations[airlockv1alpha1.AnnotationReapRequested]; isUndecided(fresh) && !closing {
			// (A claim whose session was closed is deleted by its own sync: nothing to decide.)
			undecided = append(undecided, fresh)
		}
	}
	if input.PodGone, err = c.podGone(input.Claims); err != nil {
		return nil, nil, err
	}
	decisions := c.decide(input)
	slices.SortFunc(undecided, func(a, b *airlockv1alpha1.SandboxClaim) int {
		return cmp.Or(a.CreationTimestamp.Compare(b.CreationTimestamp.Time), strings.Compare(a.Name, b.Name))
	})
	klog.FromContext(ctx).V(4).Info("Deciding the namespace's claims over a fresh list", "claim", klog.KObj(claim),
		"claims", len(input.Claims), "undecided", len(undecided))

	// Refusals first, then the decisions that take a place. Within each group the writes are
	// independent: every one was decided over the same list, and any part of a valid assignment
	// is valid, so they go out concurrently.
	var (
		admitted *airlockv1alpha1.SandboxClaim
		requeue  *time.Duration
		mu       sync.Mutex
	)
	for _, refusals := range []bool{true, false} {
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(decisionWriters)
		for _, fresh := range undecided {
			d := decisions[fresh.Name]
			if (d.Action == admission.Refuse) != refusals {
				continue
			}
			if d.Action == admission.Queue && fresh.Status.Phase == airlockv1alpha1.ClaimQueued && fresh.Name != claim.Name {
				continue // stays Queued; its own sync keeps its time in the queue
			}
			rt := input.Runtimes[fresh.Spec.RuntimeName]
			g.Go(func() error {
				var (
					after   *time.Duration
					written *airlockv1alpha1.SandboxClaim
					err     error
				)
				switch d.Action {
				case admission.Refuse:
					after, err = c.writeRefused(gctx, fresh, rt, d.Reason)
				case admission.Queue:
					after, err = c.writeQueued(gctx, fresh, rt)
				case admission.Admit:
					// What the claim runs is frozen now, in the same write (freeze.go).
					record, why, ferr := c.freezeFor(fresh, input)
					if ferr != nil {
						return ferr
					}
					written, err = c.writeAdmitted(gctx, fresh, record, why)
					if err == nil && written.Status.Phase != airlockv1alpha1.ClaimBinding {
						written, after = nil, ptr.To(waitingTTL(rt)) // Failed: kept as fail keeps it
					}
				}
				if err == nil && fresh.Name == claim.Name {
					mu.Lock()
					admitted, requeue = written, after
					mu.Unlock()
				}
				return err
			})
		}
		if err := g.Wait(); err != nil {
			// Stop here: a decision that takes a place must not be written before a refusal
			// that failed. The claim is decided again with backoff.
			return nil, nil, err
		}
	}
	return admitted, requeue, nil
}

// writeRefused writes a refusal.
func (c *Controller) writeRefused(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, rt *airlockv1alpha1.AgentRuntime, reason string) (*time.Duration, error) {
	message, err := c.refusalMessage(claim, rt, reason)
	if err != nil {
		return nil, err
	}
	updated := claim.DeepCopy()
	setPhase(updated, airlockv1alpha1.ClaimRefused, reason, message)
	setCondition(&updated.Status, ConditionAdmitted, metav1.ConditionFalse, reason, message, c.clock.Now())
	if _, err := c.updateClaimStatus(ctx, claim, updated); err != nil {
		return nil, err
	}
	return ptr.To(refusedTTL), nil
}

// writeQueued keeps a Queued claim Queued, or deletes it once it has waited its time.
func (c *Controller) writeQueued(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, rt *airlockv1alpha1.AgentRuntime) (*time.Duration, error) {
	updated := claim.DeepCopy()
	left, ok := c.queuedStatus(claim, updated, rt, c.clock.Now())
	if !ok {
		return nil, c.removeClaimIfStill(ctx, claim, undecidedPhase(claim), ReasonQueueTimeout)
	}
	if _, err := c.updateClaimStatus(ctx, claim, updated); err != nil {
		return nil, err
	}
	return ptr.To(left), nil
}

// queuedStatus sets updated's status to Queued, keeping the time the claim was first queued, and
// returns how long it may still wait; false when its time in the queue is up.
func (c *Controller) queuedStatus(claim, updated *airlockv1alpha1.SandboxClaim, rt *airlockv1alpha1.AgentRuntime, now time.Time) (time.Duration, bool) {
	queuedAt := now
	if claim.Status.QueuedAt != nil {
		queuedAt = claim.Status.QueuedAt.Time
	}
	left, ok := timeLeft(queuedAt, waitingTTL(rt), now)
	if !ok {
		return 0, false
	}
	setPhase(updated, airlockv1alpha1.ClaimQueued, ReasonMaxConcurrent, MessageQueued)
	updated.Status.QueuedAt = ptr.To(metav1.NewTime(queuedAt))
	setCondition(&updated.Status, ConditionAdmitted, metav1.ConditionFalse, ReasonQueued, MessageQueued, now)
	return left, true
}

// refusalMessage explains a refusal reason in words.
func (c *Controller) refusalMessage(claim *airlockv1alpha1.SandboxClaim, rt *airlockv1alpha1.AgentRuntime, reason string) (string, error) {
	switch reason {
	case admission.ReasonMaxPerSession:
		return fmt.Sprintf("session %q of runtime %q already holds maxPerSession (%d) live claims", claim.Spec.Session, claim.Spec.RuntimeName, admission.MaxPerSession(rt)), nil
	case admission.ReasonMaxInstances:
		entry, err := c.registryEntry(claim, rt)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("sandbox %q already has maxInstances (%d) live claims", claim.Spec.Sandbox, admission.MaxInstances(entry)), nil
	case admission.ReasonDisabled:
		return fmt.Sprintf("AgentRuntime %q may hold no sandbox (spec.sandbox.enabled is false)", claim.Spec.RuntimeName), nil
	case admission.ReasonRuntimeNotFound:
		return fmt.Sprintf("AgentRuntime %q not found", claim.Spec.RuntimeName), nil
	case admission.ReasonUnknownSandbox:
		registry := ""
		if rt != nil {
			registry = rt.Spec.ToolRegistryRef.Name
		}
		return fmt.Sprintf("ToolRegistry %q has no sandbox %q", registry, claim.Spec.Sandbox), nil
	}
	return messageRefusedDetail, nil
}

// admissionInput gathers the namespace's claims, runtimes and registries from the caches.
func (c *Controller) admissionInput(namespace string) (admission.Input, error) {
	claims, err := c.claimLister.SandboxClaims(namespace).List(labels.Everything())
	if err != nil {
		return admission.Input{}, err
	}
	runtimes, err := c.runtimeLister.AgentRuntimes(namespace).List(labels.Everything())
	if err != nil {
		return admission.Input{}, err
	}
	registries, err := c.registryLister.ToolRegistries(namespace).List(labels.Everything())
	if err != nil {
		return admission.Input{}, err
	}
	input := admission.Input{
		Claims:     claims,
		Runtimes:   make(map[string]*airlockv1alpha1.AgentRuntime, len(runtimes)),
		Registries: make(map[string]*airlockv1alpha1.ToolRegistry, len(registries)),
	}
	for _, rt := range runtimes {
		input.Runtimes[rt.Name] = rt
	}
	for _, r := range registries {
		input.Registries[r.Name] = r
	}
	if input.PodGone, err = c.podGone(claims); err != nil {
		return admission.Input{}, err
	}
	return input, nil
}

// podGone says, for each Reaping claim, whether its pods are gone.
func (c *Controller) podGone(claims []*airlockv1alpha1.SandboxClaim) (map[string]bool, error) {
	gone := map[string]bool{}
	for _, claim := range claims {
		if claim.Status.Phase != airlockv1alpha1.ClaimReaping {
			continue
		}
		pods, err := c.claimPods(claim)
		if err != nil {
			return nil, err
		}
		gone[claim.Name] = len(pods) == 0
	}
	return gone, nil
}

// registryEntry returns the registry sandbox the claim names, or nil.
func (c *Controller) registryEntry(claim *airlockv1alpha1.SandboxClaim, rt *airlockv1alpha1.AgentRuntime) (*airlockv1alpha1.RegistrySandbox, error) {
	if rt == nil {
		return nil, nil
	}
	registry, err := c.registryLister.ToolRegistries(claim.Namespace).Get(rt.Spec.ToolRegistryRef.Name)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	for i := range registry.Spec.Sandboxes {
		if registry.Spec.Sandboxes[i].Name == claim.Spec.Sandbox {
			return &registry.Spec.Sandboxes[i], nil
		}
	}
	return nil, nil
}

// undecidedPhase is the phase of a claim not yet decided, with "" read as Pending.
func undecidedPhase(claim *airlockv1alpha1.SandboxClaim) airlockv1alpha1.ClaimPhase {
	if claim.Status.Phase == "" {
		return airlockv1alpha1.ClaimPending
	}
	return claim.Status.Phase
}

// syncRefused deletes a Refused claim refusedTTL after the refusal.
func (c *Controller) syncRefused(ctx context.Context, claim *airlockv1alpha1.SandboxClaim) (*time.Duration, error) {
	if left, ok := timeLeft(conditionTime(claim, ConditionAdmitted, metav1.ConditionFalse), refusedTTL, c.clock.Now()); ok {
		return ptr.To(left), nil
	}
	return nil, c.removeClaimIfStill(ctx, claim, airlockv1alpha1.ClaimRefused, ReasonRefusedExpired)
}
