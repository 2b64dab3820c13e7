package claim

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/airlock-dev/airlock/pkg/admission"
	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/claimtoken"
)

// Timers of the lifecycle (SPEC section 3; docs/decisions.md "Claim controller").
const (
	// refusedTTL is how long a Refused claim is kept, so that the Sandbox API and kubectl can see
	// why, before it is deleted.
	refusedTTL = 5 * time.Second
	// minWaitingTTL is the least time a Queued claim waits, and a Failed claim that was not
	// replaced is kept: max(idleTimeout, minWaitingTTL).
	minWaitingTTL = 10 * time.Minute
	// defaultIdleTimeout is AgentRuntime.spec.sandbox.idleTimeout's default.
	defaultIdleTimeout = 30 * time.Minute
	// defaultStartupTimeout is SandboxClass.spec.startupTimeout's default.
	defaultStartupTimeout = 5 * time.Minute
	// syncBackoffBase and syncBackoffMax bound the wait before a failed sync-back is retried:
	// 10 s, doubling per failed attempt, at most 5 min.
	syncBackoffBase = 10 * time.Second
	syncBackoffMax  = 5 * time.Minute
	// recreateDelay is the wait before creating a child whose name is still taken by an object
	// being deleted (a sync-back Job of an earlier attempt).
	recreateDelay = time.Second
	// decisionWriters bounds the status writes of one namespace's decisions in flight at once.
	decisionWriters = 8
)

// failingWaitingReasons are the container waiting reasons that fail a Binding claim at once.
var failingWaitingReasons = map[string]bool{
	"ImagePullBackOff":           true,
	"ErrImagePull":               true,
	"CrashLoopBackOff":           true,
	"CreateContainerConfigError": true,
	"InvalidImageName":           true,
}

// sync reconciles one claim. It returns when to look at the claim again (nil: when an event
// says so), or an error to retry with backoff.
func (c *Controller) sync(ctx context.Context, key cache.ObjectName) (*time.Duration, error) {
	logger := klog.FromContext(ctx)
	start := c.clock.Now()
	logger.V(4).Info("Started syncing claim", "claim", klog.KRef(key.Namespace, key.Name))
	defer func() {
		logger.V(4).Info("Finished syncing claim", "claim", klog.KRef(key.Namespace, key.Name), "elapsed", c.clock.Since(start))
	}()

	claim, err := c.claimLister.SandboxClaims(key.Namespace).Get(key.Name)
	if apierrors.IsNotFound(err) {
		logger.V(4).Info("Claim not found", "claim", klog.KRef(key.Namespace, key.Name))
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if claim.DeletionTimestamp != nil {
		return nil, nil // garbage collection removes the children
	}
	rt, err := c.runtime(claim)
	if err != nil {
		return nil, err
	}

	if _, ok := claim.Annotations[airlockv1alpha1.AnnotationReapRequested]; ok && !runtimeGone(rt) {
		switch claim.Status.Phase {
		case "", airlockv1alpha1.ClaimPending, airlockv1alpha1.ClaimQueued:
			// Nothing ran, so there is nothing to save.
			return nil, c.removeClaimIfStill(ctx, claim, undecidedPhase(claim), ReasonSessionClosed)
		case airlockv1alpha1.ClaimBinding, airlockv1alpha1.ClaimBound:
			return c.beginReaping(ctx, claim, rt, ReasonSessionClosed, messageSessionClosed, nil)
		}
	}

	switch claim.Status.Phase {
	case "", airlockv1alpha1.ClaimPending, airlockv1alpha1.ClaimQueued:
		return c.syncUndecided(ctx, claim, rt)
	case airlockv1alpha1.ClaimBinding:
		return c.syncBinding(ctx, claim, rt)
	case airlockv1alpha1.ClaimBound:
		return c.syncBound(ctx, claim, rt)
	case airlockv1alpha1.ClaimReaping:
		return c.syncReaping(ctx, claim, rt)
	case airlockv1alpha1.ClaimRefused:
		return c.syncRefused(ctx, claim)
	case airlockv1alpha1.ClaimFailed:
		return c.syncFailed(ctx, claim, rt)
	}
	logger.Info("Claim has an unknown phase; ignoring it", "claim", klog.KObj(claim), "phase", claim.Status.Phase)
	return nil, nil
}

// runtime returns the claim's AgentRuntime, or nil when it is gone.
func (c *Controller) runtime(claim *airlockv1alpha1.SandboxClaim) (*airlockv1alpha1.AgentRuntime, error) {
	rt, err := c.runtimeLister.AgentRuntimes(claim.Namespace).Get(claim.Spec.RuntimeName)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return rt, err
}

// runtimeGone says whether the claim's runtime is gone or being deleted: garbage collection
// deletes the claim without sync-back (SPEC section 3), so nothing is started for it.
func runtimeGone(rt *airlockv1alpha1.AgentRuntime) bool {
	return rt == nil || rt.DeletionTimestamp != nil
}

func idleTimeout(rt *airlockv1alpha1.AgentRuntime) time.Duration {
	if rt == nil || rt.Spec.Sandbox.IdleTimeout == nil || rt.Spec.Sandbox.IdleTimeout.Duration <= 0 {
		return defaultIdleTimeout
	}
	return rt.Spec.Sandbox.IdleTimeout.Duration
}

// waitingTTL is how long a claim may stay Queued, and a Failed claim that was not replaced is kept.
func waitingTTL(rt *airlockv1alpha1.AgentRuntime) time.Duration {
	return max(idleTimeout(rt), minWaitingTTL)
}

func startupTimeout(class *airlockv1alpha1.SandboxClass) time.Duration {
	if class == nil || class.Spec.StartupTimeout == nil || class.Spec.StartupTimeout.Duration <= 0 {
		return defaultStartupTimeout
	}
	return class.Spec.StartupTimeout.Duration
}

// timeLeft returns how long from now until since+ttl, and whether that is still ahead.
func timeLeft(since time.Time, ttl time.Duration, now time.Time) (time.Duration, bool) {
	left := since.Add(ttl).Sub(now)
	return left, left > 0
}

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
	list, err := c.airlockClient.AirlockV1alpha1().SandboxClaims(claim.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, err
	}
	input := cached
	input.Claims = make([]*airlockv1alpha1.SandboxClaim, len(list.Items))
	var undecided []*airlockv1alpha1.SandboxClaim
	for i := range list.Items {
		fresh := &list.Items[i]
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
					written, err = c.writeAdmitted(gctx, fresh)
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

// writeAdmitted writes Binding: the claim is admitted.
func (c *Controller) writeAdmitted(ctx context.Context, claim *airlockv1alpha1.SandboxClaim) (*airlockv1alpha1.SandboxClaim, error) {
	now := c.clock.Now()
	updated := claim.DeepCopy()
	setPhase(updated, airlockv1alpha1.ClaimBinding, ReasonBinding, messageBinding)
	setCondition(&updated.Status, ConditionAdmitted, metav1.ConditionTrue, ReasonAdmitted, MessageAdmitted, now)
	setCondition(&updated.Status, ConditionReady, metav1.ConditionFalse, ReasonBinding, messageBinding, now)
	return c.updateClaimStatus(ctx, claim, updated)
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

// syncBinding builds the claim's children and waits for its pod: Bound when it is ready, Failed
// when it cannot start or the class's startupTimeout passes.
func (c *Controller) syncBinding(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, rt *airlockv1alpha1.AgentRuntime) (*time.Duration, error) {
	now := c.clock.Now()
	class, err := c.classLister.Get(claim.Spec.ClassName)
	if apierrors.IsNotFound(err) {
		return c.fail(ctx, claim, rt, ReasonClassNotFound, fmt.Sprintf(messageClassNotFound, claim.Spec.ClassName))
	}
	if err != nil {
		return nil, err
	}
	entry, err := c.registryEntry(claim, rt)
	if err != nil {
		return nil, err
	}
	if err := c.ensureChildren(ctx, claim, class, entry, 1); err != nil {
		return nil, err
	}
	pods, err := c.claimPods(claim)
	if err != nil {
		return nil, err
	}
	if podReady(pods) {
		updated := claim.DeepCopy()
		setPhase(updated, airlockv1alpha1.ClaimBound, "", MessageBound)
		updated.Status.BoundAt = ptr.To(metav1.NewTime(now))
		updated.Status.Addresses = addresses(claim, class)
		setCondition(&updated.Status, ConditionReady, metav1.ConditionTrue, ReasonPodReady, MessageBound, now)
		written, err := c.updateClaimStatus(ctx, claim, updated)
		if err != nil {
			return nil, err
		}
		return c.idleRequeue(written, rt), nil
	}
	if reason, message := podFailure(pods); reason != "" {
		return c.fail(ctx, claim, rt, reason, message)
	}
	timeout := startupTimeout(class)
	left, ok := timeLeft(conditionTime(claim, ConditionReady, metav1.ConditionFalse), timeout, now)
	if ok {
		return ptr.To(left), nil
	}
	if message := podUnschedulable(pods); message != "" {
		return c.fail(ctx, claim, rt, ReasonUnschedulable, message)
	}
	message := fmt.Sprintf(messageStartupTimeout, timeout)
	if d, err := c.deploymentLister.Deployments(claim.Namespace).Get(claim.Name); err == nil {
		for _, cond := range d.Status.Conditions {
			if cond.Type == appsv1.DeploymentReplicaFailure && cond.Status == corev1.ConditionTrue {
				message += ": " + cond.Message
			}
		}
	}
	return c.fail(ctx, claim, rt, ReasonStartupTimeout, message)
}

// fail moves the claim to Failed and scales its Deployment to zero.
func (c *Controller) fail(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, rt *airlockv1alpha1.AgentRuntime, reason, message string) (*time.Duration, error) {
	if err := c.scaleDown(ctx, claim); err != nil {
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

// lastUsed is when the claim was last used: lastUsedAt, else boundAt, else its creation.
func lastUsed(claim *airlockv1alpha1.SandboxClaim) time.Time {
	switch {
	case claim.Status.LastUsedAt != nil:
		return claim.Status.LastUsedAt.Time
	case claim.Status.BoundAt != nil:
		return claim.Status.BoundAt.Time
	}
	return claim.CreationTimestamp.Time
}

// idleRequeue returns when the Bound claim's idle timeout passes.
func (c *Controller) idleRequeue(claim *airlockv1alpha1.SandboxClaim, rt *airlockv1alpha1.AgentRuntime) *time.Duration {
	left, _ := timeLeft(lastUsed(claim), idleTimeout(rt), c.clock.Now())
	return ptr.To(max(left, 0))
}

// syncBound repairs the Bound claim's children and reaps it when it has been idle too long.
func (c *Controller) syncBound(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, rt *airlockv1alpha1.AgentRuntime) (*time.Duration, error) {
	if runtimeGone(rt) {
		return nil, nil
	}
	class, err := c.classLister.Get(claim.Spec.ClassName)
	switch {
	case apierrors.IsNotFound(err):
		// Nothing to repair from; the running sandbox keeps running until it is reaped.
	case err != nil:
		return nil, err
	default:
		entry, err := c.registryEntry(claim, rt)
		if err != nil {
			return nil, err
		}
		if err := c.ensureChildren(ctx, claim, class, entry, 1); err != nil {
			return nil, err
		}
	}
	idle := idleTimeout(rt)
	if left, ok := timeLeft(lastUsed(claim), idle, c.clock.Now()); ok {
		return ptr.To(left), nil
	}
	return c.beginReaping(ctx, claim, rt, ReasonIdleTimeout, fmt.Sprintf(messageIdleDetail, idle),
		func(fresh *airlockv1alpha1.SandboxClaim) (time.Duration, bool) {
			return timeLeft(lastUsed(fresh), idle, c.clock.Now())
		})
}

// beginReaping moves a Binding or Bound claim to Reaping and starts reaping it. It re-reads the
// claim from the API server first, since the cache may miss a renewal or a phase change; notYet,
// when set, is asked of that fresh object and may put the transition off by the time it returns.
func (c *Controller) beginReaping(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, rt *airlockv1alpha1.AgentRuntime,
	reason, message string, notYet func(fresh *airlockv1alpha1.SandboxClaim) (time.Duration, bool)) (*time.Duration, error) {
	fresh, err := c.airlockClient.AirlockV1alpha1().SandboxClaims(claim.Namespace).Get(ctx, claim.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if fresh.UID != claim.UID || fresh.Status.Phase != claim.Status.Phase || fresh.DeletionTimestamp != nil {
		return nil, nil // the cache will catch up and enqueue it
	}
	if notYet != nil {
		if left, ok := notYet(fresh); ok {
			return ptr.To(left), nil
		}
	}
	updated := fresh.DeepCopy()
	setPhase(updated, airlockv1alpha1.ClaimReaping, reason, message)
	updated.Status.Addresses = nil
	written, err := c.updateClaimStatus(ctx, fresh, updated)
	if err != nil {
		return nil, err
	}
	return c.syncReaping(ctx, written, rt)
}

// undecidedPhase is the phase of a claim not yet decided, with "" read as Pending.
func undecidedPhase(claim *airlockv1alpha1.SandboxClaim) airlockv1alpha1.ClaimPhase {
	if claim.Status.Phase == "" {
		return airlockv1alpha1.ClaimPending
	}
	return claim.Status.Phase
}

// syncReaping scales the claim's Deployment to zero, waits for its pods to go, runs the
// sync-back Job when the claim has a targetPath, and deletes the claim when its work is saved.
func (c *Controller) syncReaping(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, rt *airlockv1alpha1.AgentRuntime) (*time.Duration, error) {
	if runtimeGone(rt) {
		return nil, nil // garbage collection deletes the claim, without sync-back
	}
	if err := c.scaleDown(ctx, claim); err != nil {
		return nil, err
	}
	pods, err := c.claimPods(claim)
	if err != nil {
		return nil, err
	}
	if len(pods) > 0 {
		return nil, nil // their deletion enqueues the claim
	}
	// The pod is gone: the claim no longer holds a slot.
	c.enqueueWaiting(claim.Namespace)
	if claim.Spec.TargetPath == "" {
		return nil, c.removeClaim(ctx, claim, ReasonReaped)
	}
	return c.syncBack(ctx, claim)
}

// syncBack runs the claim's sync-back Job, retrying a failed one with backoff.
func (c *Controller) syncBack(ctx context.Context, claim *airlockv1alpha1.SandboxClaim) (*time.Duration, error) {
	logger := klog.FromContext(ctx)
	now := c.clock.Now()
	failures := syncFailures(claim)
	job, err := c.jobLister.Jobs(claim.Namespace).Get(syncJobName(claim))
	if apierrors.IsNotFound(err) {
		class, err := c.classLister.Get(claim.Spec.ClassName)
		if apierrors.IsNotFound(err) {
			// Without the class the content PVC is unknown; its creation enqueues nothing, so
			// look again later.
			logger.Info("Cannot sync back: the class is gone", "claim", klog.KObj(claim), "class", claim.Spec.ClassName)
			return ptr.To(syncBackoffMax), nil
		}
		if err != nil {
			return nil, err
		}
		attempt := failures + 1
		job := buildSyncJob(claim, class, c.syncImage, attempt)
		_, err = c.kubeClient.BatchV1().Jobs(claim.Namespace).Create(ctx, job, metav1.CreateOptions{FieldManager: FieldManager})
		if apierrors.IsAlreadyExists(err) {
			return ptr.To(recreateDelay), nil // an earlier attempt's Job is still being deleted
		}
		if err != nil {
			return nil, err
		}
		c.recorder.Eventf(claim, corev1.EventTypeNormal, ReasonSyncBackStarted, MessageSyncStarted, job.Name, attempt)
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if !metav1.IsControlledBy(job, claim) {
		c.recorder.Eventf(claim, corev1.EventTypeWarning, ReasonErrResourceExists, MessageResourceExists, "Job", job.Name)
		return nil, fmt.Errorf(MessageResourceExists, "Job", job.Name)
	}
	if job.DeletionTimestamp != nil {
		return nil, nil // its deletion enqueues the claim
	}
	if cond := jobCondition(job, batchv1.JobComplete); cond != nil {
		syncBackResults.WithLabelValues("succeeded").Inc()
		c.recorder.Eventf(claim, corev1.EventTypeNormal, ReasonSyncedBack, MessageSynced, job.Name, claim.Spec.TargetPath)
		updated := claim.DeepCopy()
		setCondition(&updated.Status, ConditionSyncBack, metav1.ConditionTrue, ReasonSyncedBack, fmt.Sprintf(messageSyncBackOK, claim.Spec.TargetPath), now)
		if _, err := c.updateClaimStatus(ctx, claim, updated); err != nil {
			return nil, err
		}
		return nil, c.removeClaim(ctx, claim, ReasonSyncedBack)
	}
	cond := jobCondition(job, batchv1.JobFailed)
	if cond == nil {
		return nil, nil // running; its completion enqueues the claim
	}
	attempt, _ := strconv.Atoi(job.Annotations[AnnotationSyncAttempt])
	attempt = max(attempt, 1)
	backoff := syncBackoff(attempt)
	failedAt := cond.LastTransitionTime.Time
	if failures < attempt {
		// First look at this failure: count it on the claim (so the count survives the Job's
		// deletion), report it, then wait out the backoff.
		syncBackResults.WithLabelValues("failed").Inc()
		counted := claim.DeepCopy()
		if counted.Annotations == nil {
			counted.Annotations = map[string]string{}
		}
		counted.Annotations[AnnotationSyncFailures] = strconv.Itoa(attempt)
		written, err := c.airlockClient.AirlockV1alpha1().SandboxClaims(claim.Namespace).Update(ctx, counted, metav1.UpdateOptions{FieldManager: FieldManager})
		if err != nil {
			return nil, err
		}
		message := fmt.Sprintf(MessageSyncFailed, job.Name, attempt, backoff, cond.Message)
		updated := written.DeepCopy()
		setCondition(&updated.Status, ConditionSyncBack, metav1.ConditionFalse, ReasonSyncBackFailed, message, now)
		if _, err := c.updateClaimStatus(ctx, written, updated); err != nil {
			return nil, err
		}
		c.recorder.Event(claim, corev1.EventTypeWarning, ReasonSyncBackFailed, message)
	}
	if left, ok := timeLeft(failedAt, backoff, now); ok {
		return ptr.To(left), nil
	}
	logger.V(2).Info("Retrying sync-back", "claim", klog.KObj(claim), "job", klog.KObj(job), "attempt", attempt+1)
	err = c.kubeClient.BatchV1().Jobs(job.Namespace).Delete(ctx, job.Name, metav1.DeleteOptions{
		Preconditions:     &metav1.Preconditions{UID: &job.UID},
		PropagationPolicy: ptr.To(metav1.DeletePropagationBackground),
	})
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, err
	}
	return nil, nil // the Job's deletion enqueues the claim, which then creates the next attempt
}

// syncFailures is the number of failed sync-back attempts recorded on the claim.
func syncFailures(claim *airlockv1alpha1.SandboxClaim) int {
	n, err := strconv.Atoi(claim.Annotations[AnnotationSyncFailures])
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// syncBackoff is the wait after the given failed attempt: 10 s doubling, at most 5 min.
func syncBackoff(attempt int) time.Duration {
	d := syncBackoffBase
	for i := 1; i < attempt && d < syncBackoffMax; i++ {
		d *= 2
	}
	return min(d, syncBackoffMax)
}

func jobCondition(job *batchv1.Job, condType batchv1.JobConditionType) *batchv1.JobCondition {
	for i := range job.Status.Conditions {
		if c := &job.Status.Conditions[i]; c.Type == condType && c.Status == corev1.ConditionTrue {
			return c
		}
	}
	return nil
}

// syncRefused deletes a Refused claim refusedTTL after the refusal.
func (c *Controller) syncRefused(ctx context.Context, claim *airlockv1alpha1.SandboxClaim) (*time.Duration, error) {
	if left, ok := timeLeft(conditionTime(claim, ConditionAdmitted, metav1.ConditionFalse), refusedTTL, c.clock.Now()); ok {
		return ptr.To(left), nil
	}
	return nil, c.removeClaimIfStill(ctx, claim, airlockv1alpha1.ClaimRefused, ReasonRefusedExpired)
}

// syncFailed keeps a Failed claim's Deployment at zero. A claim that was replaced is kept while
// its replacement lives (the replacement's deletion enqueues it); one that was not is deleted
// max(idleTimeout, 10m) after it failed.
func (c *Controller) syncFailed(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, rt *airlockv1alpha1.AgentRuntime) (*time.Duration, error) {
	if err := c.scaleDown(ctx, claim); err != nil {
		return nil, err
	}
	if claim.Status.ReplacedBy != "" {
		_, err := c.claimLister.SandboxClaims(claim.Namespace).Get(claim.Status.ReplacedBy)
		if err == nil {
			return nil, nil
		}
		if !apierrors.IsNotFound(err) {
			return nil, err
		}
		return nil, c.removeClaimIfStill(ctx, claim, airlockv1alpha1.ClaimFailed, ReasonReplacementGone)
	}
	if left, ok := timeLeft(conditionTime(claim, ConditionReady, metav1.ConditionFalse), waitingTTL(rt), c.clock.Now()); ok {
		return ptr.To(left), nil
	}
	return nil, c.removeClaimIfStill(ctx, claim, airlockv1alpha1.ClaimFailed, ReasonFailedExpired)
}

// removeClaimIfStill deletes the claim after an uncached GET confirms that it is still in phase,
// with the fresh object's UID and resourceVersion as preconditions.
func (c *Controller) removeClaimIfStill(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, phase airlockv1alpha1.ClaimPhase, reason string) error {
	fresh, err := c.airlockClient.AirlockV1alpha1().SandboxClaims(claim.Namespace).Get(ctx, claim.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if fresh.UID != claim.UID || fresh.DeletionTimestamp != nil {
		return nil
	}
	freshPhase := fresh.Status.Phase
	if freshPhase == "" {
		freshPhase = airlockv1alpha1.ClaimPending
	}
	if want := phase; freshPhase != want && !(want == airlockv1alpha1.ClaimQueued && freshPhase == airlockv1alpha1.ClaimPending) {
		return nil // moved on; the cache will catch up and enqueue it
	}
	return c.delete(ctx, fresh, &metav1.Preconditions{UID: &fresh.UID, ResourceVersion: &fresh.ResourceVersion}, reason)
}

// removeClaim deletes the claim, if it is still the object with the claim's UID.
func (c *Controller) removeClaim(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, reason string) error {
	return c.delete(ctx, claim, &metav1.Preconditions{UID: &claim.UID}, reason)
}

func (c *Controller) delete(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, preconditions *metav1.Preconditions, reason string) error {
	klog.FromContext(ctx).V(2).Info("Deleting claim", "claim", klog.KObj(claim), "reason", reason)
	err := c.airlockClient.AirlockV1alpha1().SandboxClaims(claim.Namespace).Delete(ctx, claim.Name, metav1.DeleteOptions{
		Preconditions:     preconditions,
		PropagationPolicy: ptr.To(metav1.DeletePropagationBackground),
	})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil // gone, or changed: a changed claim is enqueued again by its update
	}
	if err != nil {
		return err
	}
	c.recorder.Eventf(claim, corev1.EventTypeNormal, reason, MessageDeleted, reason)
	return nil
}

// claimPods returns the claim's sandbox pods from the cache.
func (c *Controller) claimPods(claim *airlockv1alpha1.SandboxClaim) ([]*corev1.Pod, error) {
	return c.podLister.Pods(claim.Namespace).List(labels.SelectorFromSet(selectorLabels(claim)))
}

// podReady says whether a pod of the claim, not being deleted, is Ready.
func podReady(pods []*corev1.Pod) bool {
	for _, pod := range pods {
		if pod.DeletionTimestamp != nil {
			continue
		}
		for _, cond := range pod.Status.Conditions {
			if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
				return true
			}
		}
	}
	return false
}

// podFailure returns the reason and message of a container that cannot start.
func podFailure(pods []*corev1.Pod) (string, string) {
	for _, pod := range pods {
		if pod.DeletionTimestamp != nil {
			continue
		}
		statuses := append(append([]corev1.ContainerStatus(nil), pod.Status.InitContainerStatuses...), pod.Status.ContainerStatuses...)
		for _, s := range statuses {
			if w := s.State.Waiting; w != nil && failingWaitingReasons[w.Reason] {
				message := w.Message
				if message == "" {
					message = fmt.Sprintf("container %s of pod %s: %s", s.Name, pod.Name, w.Reason)
				}
				return w.Reason, message
			}
		}
	}
	return "", ""
}

// podUnschedulable returns the scheduler's message when a pod of the claim is unschedulable.
func podUnschedulable(pods []*corev1.Pod) string {
	for _, pod := range pods {
		for _, cond := range pod.Status.Conditions {
			if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable {
				if cond.Message != "" {
					return cond.Message
				}
				return "the sandbox pod cannot be scheduled"
			}
		}
	}
	return ""
}

// ensureChildren creates the claim's Secret, Deployment, Service and NetworkPolicy, and repairs
// the drift of what it set on the last three. The Secret is created first, since the sandbox pod
// mounts it; the other three are independent, so they are written concurrently.
func (c *Controller) ensureChildren(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, class *airlockv1alpha1.SandboxClass, entry *airlockv1alpha1.RegistrySandbox, replicas int32) error {
	allowed, err := c.allowedServices(ctx, class)
	if err != nil {
		return err
	}
	token, err := c.newToken(ctx, claim)
	if err != nil {
		return fmt.Errorf("deriving the claim's token: %w", err)
	}
	if token == "" {
		return errors.New("deriving the claim's token: empty token")
	}
	secretName := claimtoken.ClaimSecretName(claim.Name, token)
	if err := c.ensureSecret(ctx, claim, secretName, token); err != nil {
		return err
	}
	deployment := buildDeployment(claim, class, entry, replicas)
	useTokenSecret(deployment, secretName)
	ensures := []func() error{
		func() error { return c.ensureDeployment(ctx, claim, deployment) },
		func() error { return c.ensureService(ctx, claim, buildService(claim, class)) },
		func() error { return c.ensureNetworkPolicy(ctx, claim, buildNetworkPolicy(claim, class, allowed)) },
	}
	errs := make([]error, len(ensures))
	var wg sync.WaitGroup
	for i, ensure := range ensures {
		wg.Go(func() { errs[i] = ensure() })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// allowedServices GETs the class's allowed Services that exist. They are read on every sync of a
// Binding or Bound claim (not cached: the operator caches only its own children).
func (c *Controller) allowedServices(ctx context.Context, class *airlockv1alpha1.SandboxClass) ([]*corev1.Service, error) {
	var out []*corev1.Service
	for _, ref := range class.Spec.AllowedServices {
		svc, err := c.kubeClient.CoreV1().Services(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading allowed Service %s/%s: %w", ref.Namespace, ref.Name, err)
		}
		out = append(out, svc)
	}
	return out, nil
}

// controlled checks that a child is controlled by the claim, and reports it when not.
func (c *Controller) controlled(claim *airlockv1alpha1.SandboxClaim, child metav1.Object, kind string) error {
	if metav1.IsControlledBy(child, claim) {
		return nil
	}
	c.recorder.Eventf(claim, corev1.EventTypeWarning, ReasonErrResourceExists, MessageResourceExists, kind, child.GetName())
	return fmt.Errorf(MessageResourceExists, kind, child.GetName())
}

// mergeLabels returns live with want's labels set, and whether that changed anything.
func mergeLabels(live, want map[string]string) (map[string]string, bool) {
	changed := false
	out := make(map[string]string, len(live)+len(want))
	for k, v := range live {
		out[k] = v
	}
	for k, v := range want {
		if out[k] != v {
			out[k] = v
			changed = true
		}
	}
	return out, changed
}

// ensureSecret creates the claim's token Secret, name (claimtoken.ClaimSecretName), holding the
// token derived from the operator's key. The operator may create Secrets outside its own
// namespace but not read them, so the Secret is created, never read or repaired: only while the
// claim's Deployment (in the cache) does not mount it yet (the Deployment is written after the
// Secret, so once it mounts it the Secret was created), and AlreadyExists counts as done: the
// name is a hash of the token, which nobody can compute without the key, so a Secret of that name
// is one an earlier sync created (docs/decisions.md, "Least privilege").
func (c *Controller) ensureSecret(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, name, token string) error {
	d, err := c.deploymentLister.Deployments(claim.Namespace).Get(claim.Name)
	switch {
	case err == nil && metav1.IsControlledBy(d, claim) && tokenSecretOf(d) == name:
		return nil
	case err != nil && !apierrors.IsNotFound(err):
		return err
	}
	_, err = c.kubeClient.CoreV1().Secrets(claim.Namespace).Create(ctx, buildSecret(claim, name, token), metav1.CreateOptions{FieldManager: FieldManager})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

func (c *Controller) ensureDeployment(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, want *appsv1.Deployment) error {
	live, err := c.deploymentLister.Deployments(claim.Namespace).Get(want.Name)
	if apierrors.IsNotFound(err) {
		_, err = c.kubeClient.AppsV1().Deployments(claim.Namespace).Create(ctx, want, metav1.CreateOptions{FieldManager: FieldManager})
		if apierrors.IsAlreadyExists(err) {
			return nil // the cache will show it and enqueue the claim
		}
		return err
	}
	if err != nil {
		return err
	}
	if err := c.controlled(claim, live, "Deployment"); err != nil {
		return err
	}
	l, labelsChanged := mergeLabels(live.Labels, want.Labels)
	// A running sandbox keeps the pod its class described when it was built: after the class has
	// changed, the template is left as it is (a replacement claim gets the current class), and
	// only what does not restart the pod is repaired.
	sameClass := live.Annotations[AnnotationClassGeneration] == want.Annotations[AnnotationClassGeneration]
	if !labelsChanged &&
		ptr.Deref(live.Spec.Replicas, 1) == *want.Spec.Replicas &&
		live.Spec.Strategy.Type == want.Spec.Strategy.Type && live.Spec.Strategy.RollingUpdate == nil &&
		(!sameClass || apiequality.Semantic.DeepEqual(live.Spec.Template, want.Spec.Template)) {
		return nil
	}
	updated := live.DeepCopy()
	updated.Labels = l
	updated.Spec.Replicas = want.Spec.Replicas
	updated.Spec.Strategy = want.Spec.Strategy
	if sameClass {
		updated.Spec.Template = want.Spec.Template
	}
	klog.FromContext(ctx).V(2).Info("Repairing the claim's Deployment", "claim", klog.KObj(claim))
	_, err = c.kubeClient.AppsV1().Deployments(claim.Namespace).Update(ctx, updated, metav1.UpdateOptions{FieldManager: FieldManager})
	return err
}

// scaleDown sets the claim's Deployment, if it has one, to zero replicas.
func (c *Controller) scaleDown(ctx context.Context, claim *airlockv1alpha1.SandboxClaim) error {
	live, err := c.deploymentLister.Deployments(claim.Namespace).Get(claim.Name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if !metav1.IsControlledBy(live, claim) || ptr.Deref(live.Spec.Replicas, 1) == 0 {
		return nil
	}
	updated := live.DeepCopy()
	updated.Spec.Replicas = ptr.To[int32](0)
	_, err = c.kubeClient.AppsV1().Deployments(claim.Namespace).Update(ctx, updated, metav1.UpdateOptions{FieldManager: FieldManager})
	return err
}

func (c *Controller) ensureService(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, want *corev1.Service) error {
	live, err := c.serviceLister.Services(claim.Namespace).Get(want.Name)
	if apierrors.IsNotFound(err) {
		_, err = c.kubeClient.CoreV1().Services(claim.Namespace).Create(ctx, want, metav1.CreateOptions{FieldManager: FieldManager})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	}
	if err != nil {
		return err
	}
	if err := c.controlled(claim, live, "Service"); err != nil {
		return err
	}
	l, labelsChanged := mergeLabels(live.Labels, want.Labels)
	if !labelsChanged && live.Spec.Type == want.Spec.Type &&
		apiequality.Semantic.DeepEqual(live.Spec.Selector, want.Spec.Selector) &&
		servicePortsEqual(live.Spec.Ports, want.Spec.Ports) {
		return nil
	}
	updated := live.DeepCopy()
	updated.Labels = l
	updated.Spec.Type = want.Spec.Type
	updated.Spec.Selector = want.Spec.Selector
	updated.Spec.Ports = want.Spec.Ports
	_, err = c.kubeClient.CoreV1().Services(claim.Namespace).Update(ctx, updated, metav1.UpdateOptions{FieldManager: FieldManager})
	return err
}

// servicePortsEqual compares the fields of Service ports that the controller sets.
func servicePortsEqual(live, want []corev1.ServicePort) bool {
	if len(live) != len(want) {
		return false
	}
	for i := range want {
		l, w := live[i], want[i]
		if l.Name != w.Name || l.Port != w.Port || l.TargetPort != w.TargetPort || l.Protocol != w.Protocol {
			return false
		}
	}
	return true
}

func (c *Controller) ensureNetworkPolicy(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, want *networkingv1.NetworkPolicy) error {
	live, err := c.networkPolicyLister.NetworkPolicies(claim.Namespace).Get(want.Name)
	if apierrors.IsNotFound(err) {
		_, err = c.kubeClient.NetworkingV1().NetworkPolicies(claim.Namespace).Create(ctx, want, metav1.CreateOptions{FieldManager: FieldManager})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	}
	if err != nil {
		return err
	}
	if err := c.controlled(claim, live, "NetworkPolicy"); err != nil {
		return err
	}
	l, labelsChanged := mergeLabels(live.Labels, want.Labels)
	if !labelsChanged && apiequality.Semantic.DeepEqual(live.Spec, want.Spec) {
		return nil
	}
	updated := live.DeepCopy()
	updated.Labels = l
	updated.Spec = want.Spec
	_, err = c.kubeClient.NetworkingV1().NetworkPolicies(claim.Namespace).Update(ctx, updated, metav1.UpdateOptions{FieldManager: FieldManager})
	return err
}
