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
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/airlock-dev/airlock/pkg/admission"
	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
)

// syncUndecided looks after a Pending or Queued claim between admission passes: it makes sure
// its namespace is decided (the admission queue), and deletes a Queued claim that has waited its
// time. Admission itself is admitNamespace, one pass per namespace at a time.
func (c *Controller) syncUndecided(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, rt *airlockv1alpha1.AgentRuntime) (*time.Duration, error) {
	c.enqueueAdmission(claim.Namespace)
	if claim.Status.Phase != airlockv1alpha1.ClaimQueued {
		return nil, nil
	}
	queuedAt := claim.CreationTimestamp.Time
	if claim.Status.QueuedAt != nil {
		queuedAt = claim.Status.QueuedAt.Time
	}
	if left, ok := timeLeft(queuedAt, waitingTTL(rt), c.clock.Now()); ok {
		return ptr.To(left), nil
	}
	return nil, c.removeClaimIfStill(ctx, claim, airlockv1alpha1.ClaimQueued, ReasonQueueTimeout)
}

// admitNamespace is one admission pass (SPEC section 3): it decides every undecided claim of the
// namespace over the claim cache, writes the decisions that change a phase (first every refusal,
// as they free places, then the decisions that take one, each group concurrently, started oldest
// claim first), and builds the children of every claim it admitted, all at once.
//
// The admission queue is keyed by namespace, so one pass of a namespace runs at a time while
// other namespaces are decided in parallel, and claims that arrive during a pass are decided
// together by the next: a lone claim is decided as soon as it is seen, a burst in as few passes
// as it takes. The pass runs only when the cache shows every write the leader made and, in a new
// term, everything the previous leader wrote (expectations.go): the cache then holds every claim
// created before the ones it decides, so the count of live and running claims never goes over a
// limit, even for a moment. Each write carries the cached resourceVersion: a claim changed since
// (a close, by the Sandbox API) fails its write with a conflict and the namespace is decided again.
func (c *Controller) admitNamespace(ctx context.Context, namespace string) error {
	logger := klog.FromContext(ctx)
	if err := c.raiseFence(ctx); err != nil {
		return err
	}
	if ok, timeout := c.expectations.satisfied(namespace, c.cachedClaim(namespace)); !ok {
		logger.V(4).Info("Admission waits for the cache to show earlier writes", "namespace", namespace, "pending", c.expectations.pending(namespace))
		// The claim events that meet them enqueue the namespace; at the latest, the oldest
		// expectation's timeout does.
		c.admitQueue.AddAfter(namespace, timeout+time.Millisecond)
		return nil
	}
	input, err := c.admissionInput(namespace)
	if err != nil {
		return err
	}
	undecided := undecidedClaims(input)
	if len(undecided) == 0 {
		return nil
	}
	start := c.clock.Now()
	decisions := c.decide(input)
	decisionPassDuration.Observe(c.clock.Since(start).Seconds())
	logger.V(4).Info("Deciding the namespace's claims", "namespace", namespace, "claims", len(input.Claims), "undecided", len(undecided))

	if err := c.releaseStillQueued(ctx, undecided, decisions); err != nil {
		return err
	}
	admitted, err := c.writeDecisions(ctx, undecided, decisions, input)
	if err != nil {
		return err
	}
	// Built beside the next passes: a pass needs the cache to show this one's status writes, not
	// its children. Run joins the builds before it returns.
	if len(admitted) > 0 {
		c.builds.Go(func() { c.buildAdmitted(ctx, admitted) })
	}
	return nil
}

// undecidedClaims returns the claims of input that admission has to place, oldest first. A claim
// whose session was closed is not among them: its own sync deletes it.
func undecidedClaims(input admission.Input) []*airlockv1alpha1.SandboxClaim {
	var undecided []*airlockv1alpha1.SandboxClaim
	for _, claim := range input.Claims {
		if _, closing := claim.Annotations[airlockv1alpha1.AnnotationReapRequested]; isUndecided(claim) && !closing {
			undecided = append(undecided, claim)
		}
	}
	slices.SortFunc(undecided, func(a, b *airlockv1alpha1.SandboxClaim) int {
		return cmp.Or(a.CreationTimestamp.Compare(b.CreationTimestamp.Time), strings.Compare(a.Name, b.Name))
	})
	return undecided
}

// releaseStillQueued lets go of the warm member an earlier pass adopted for a claim that stays
// Queued (and could not write): a claim that is not admitted holds no pod. It runs before the
// pass's writes; passes of a namespace never overlap, so no adoption of it is in flight.
func (c *Controller) releaseStillQueued(ctx context.Context, undecided []*airlockv1alpha1.SandboxClaim, decisions map[string]admission.Decision) error {
	for _, claim := range undecided {
		if decisions[claim.Name].Action == admission.Queue && claim.Status.Phase == airlockv1alpha1.ClaimQueued {
			if err := c.releaseMember(ctx, claim); err != nil {
				return err
			}
		}
	}
	return nil
}

// reserveForAdmitted reserves warm members for the claims the pass admits, oldest first, before
// the concurrent writes (adopt.go): each for the record it is frozen with.
func (c *Controller) reserveForAdmitted(ctx context.Context, undecided []*airlockv1alpha1.SandboxClaim, decisions map[string]admission.Decision, input admission.Input) map[types.UID]reservation {
	records := map[types.UID]*airlockv1alpha1.FrozenSandbox{}
	var admitting []*airlockv1alpha1.SandboxClaim
	for _, claim := range undecided {
		if decisions[claim.Name].Action != admission.Admit {
			continue
		}
		if record, why, err := c.freezeFor(claim, input); err == nil && why == nil {
			records[claim.UID], admitting = record, append(admitting, claim)
		}
	}
	return c.reserveMembers(ctx, admitting, records)
}

// writeDecisions writes the pass's decisions: refusals first, then the decisions that take a
// place. Within each group the writes are independent: every one was decided over the same
// claims, and any part of a valid assignment is valid, so they go out concurrently. It returns
// the claims written Binding (to be built).
func (c *Controller) writeDecisions(ctx context.Context, undecided []*airlockv1alpha1.SandboxClaim, decisions map[string]admission.Decision, input admission.Input) ([]*airlockv1alpha1.SandboxClaim, error) {
	reserved := c.reserveForAdmitted(ctx, undecided, decisions, input)
	var offered sync.Map // claim UID -> its write was started with its reservation
	defer func() {
		// A reservation no write was given (the pass stopped first) goes back; admitWarm gives
		// back those it could not adopt, and keeps those it did until their pods are deleted.
		for uid, r := range reserved {
			if _, ok := offered.Load(uid); !ok && r.pod != nil {
				c.adopting.CompareAndDelete(r.pod.UID, uid)
			}
		}
	}()
	var (
		admitted []*airlockv1alpha1.SandboxClaim
		mu       sync.Mutex
	)
	for _, refusals := range []bool{true, false} {
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(decisionWriters)
		for _, claim := range undecided {
			d := decisions[claim.Name]
			if (d.Action == admission.Refuse) != refusals {
				continue
			}
			if d.Action == admission.Queue && claim.Status.Phase == airlockv1alpha1.ClaimQueued {
				continue // stays Queued; its own sync keeps its time in the queue
			}
			rt := input.Runtimes[claim.Spec.RuntimeName]
			g.Go(func() error {
				offered.Store(claim.UID, true)
				written, err := c.writeDecision(gctx, claim, rt, d, input, reserved[claim.UID])
				if err == nil && written != nil {
					mu.Lock()
					admitted = append(admitted, written)
					mu.Unlock()
				}
				return err
			})
		}
		if err := g.Wait(); err != nil {
			// Stop here: a decision that takes a place must not be written before a refusal
			// that failed. The namespace is decided again with backoff.
			return nil, err
		}
	}
	return admitted, nil
}

// writeDecision writes one claim's decision, expecting the write in the cache before the next
// pass. It returns the claim as written when it was admitted and is Binding.
func (c *Controller) writeDecision(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, rt *airlockv1alpha1.AgentRuntime, d admission.Decision, input admission.Input, r reservation) (*airlockv1alpha1.SandboxClaim, error) {
	c.expectations.expectWrite(claim.Namespace, claim.Name, claim.ResourceVersion)
	var (
		written *airlockv1alpha1.SandboxClaim
		err     error
	)
	if d.Action != admission.Admit || r.record == nil {
		// A member an earlier pass adopted for the claim (whose write did not go through) is
		// not held by a claim that is not admitted now, nor by one admitted without a record
		// (its class or entry is gone: it is written Failed).
		if err := c.releaseMember(ctx, claim); err != nil {
			c.expectations.forgetWrite(claim.Namespace, claim.Name, claim.ResourceVersion)
			return nil, err
		}
	}
	switch d.Action {
	case admission.Refuse:
		_, err = c.writeRefused(ctx, claim, rt, d)
	case admission.Queue:
		_, err = c.writeQueued(ctx, claim, rt)
	case admission.Admit:
		// What the claim runs is frozen now, in the same write (freeze.go): once per pass, when
		// the pass reserved a member for it (the member is of that record's pool).
		record, why, ferr := r.record, (*cannotFreeze)(nil), error(nil)
		if record == nil {
			record, why, ferr = c.freezeFor(claim, input)
		}
		if ferr != nil {
			err = ferr
			break
		}
		if why == nil {
			// Bound to a warm member in this one write, when one can be had: nothing to build.
			var warm bool
			if _, warm, err = c.admitWarm(ctx, claim, record, r); warm || err != nil {
				break
			}
		}
		// Held until buildAdmitted has built it: the claim's own sync, which its Binding brings
		// on, leaves the children to this pass.
		c.childExpect.raise(claim.UID, 1)
		written, err = c.writeAdmitted(ctx, claim, record, why)
		if err != nil || written.Status.Phase != airlockv1alpha1.ClaimBinding {
			c.childExpect.lower(claim.UID)
			if err == nil {
				written = nil // Failed (its class cannot be built): kept as fail keeps it
			}
		}
	default:
		err = fmt.Errorf("admission returned unknown action %q for claim %s", d.Action, klog.KObj(claim))
	}
	if err != nil {
		c.expectations.forgetWrite(claim.Namespace, claim.Name, claim.ResourceVersion)
		return nil, err
	}
	return written, nil
}

// buildAdmitted builds the children of the claims a pass admitted, all at once (the client's rate
// limiter paces them). A claim whose
// children could not all be written is enqueued: its own sync retries them and fails it at its
// startupTimeout.
func (c *Controller) buildAdmitted(ctx context.Context, admitted []*airlockv1alpha1.SandboxClaim) {
	var wg sync.WaitGroup
	for _, claim := range admitted {
		wg.Go(func() {
			err := c.ensureChildren(ctx, claim, claim.Status.Frozen)
			if c.childExpect.lower(claim.UID) || err != nil { // the hold
				// Nothing left to wait for (or a write failed): the claim's sync goes on.
				if err != nil {
					klog.FromContext(ctx).V(2).Info("Building an admitted claim's children failed; its sync retries", "claim", klog.KObj(claim), "err", err)
				}
				c.enqueueClaim(claim)
			}
		})
	}
	wg.Wait()
}

// cachedClaim returns a lookup of the namespace's claims in the cache (nil when absent).
func (c *Controller) cachedClaim(namespace string) func(name string) *airlockv1alpha1.SandboxClaim {
	return func(name string) *airlockv1alpha1.SandboxClaim {
		claim, err := c.claimLister.SandboxClaims(namespace).Get(name)
		if err != nil {
			return nil
		}
		return claim
	}
}

// writeRefused writes a refusal.
func (c *Controller) writeRefused(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, rt *airlockv1alpha1.AgentRuntime, d admission.Decision) (*time.Duration, error) {
	reason := d.Reason
	message, err := c.refusalMessage(claim, rt, d)
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

// refusalMessage explains a refusal in words.
func (c *Controller) refusalMessage(claim *airlockv1alpha1.SandboxClaim, rt *airlockv1alpha1.AgentRuntime, d admission.Decision) (string, error) {
	switch reason := d.Reason; reason {
	case admission.ReasonWorkspaceInUse:
		return fmt.Sprintf("workspace directory %q is, holds or lies in the workspace of live claim %q of another runtime, session or handle (one writer per workspace)", claim.Spec.WorkspaceDir, d.Holder), nil
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
	input := admission.NewInput(claims, runtimes, registries)
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
