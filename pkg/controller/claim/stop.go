package claim

// The operator's stop (docs/nothing-lost.md, "The operator's stop"; pkg/sandboxstop): a Reaping
// claim's pod left to the kubelet takes about 3 s to stop, while one writer per workspace keeps
// the claim (and the next claim of the handle, which resumes the workspace) waiting for the pod
// to go. With --operator-pod-labels, the controller asks the pod's sandboxd to stop, with the
// claim's token, before it deletes the pod: once it answers that every other process of its
// container has exited and no tool call runs or will, nothing in the pod writes the workspace any
// more, and the pod is deleted at once (grace period 0, on its UID). Any other answer, or none
// within stopHold, and the pod is deleted as without the stop, left to the kubelet (fail closed).
//
// Asked before the deletion, the stop does not race the kubelet's SIGTERM of a deleted pod (which
// ends sandboxd's listener: under load, and under gVisor, one stop in ten was lost to it).
//
// A pod is asked at most once, in a goroutine of its own (the worker does not wait on the
// network), at most maxStopsInFlight at a time; the end of a stop enqueues the claim.

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/claimtoken"
	"github.com/airlock-dev/airlock/pkg/controller/objectcontrol"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
	"github.com/airlock-dev/airlock/pkg/sandboxstop"
)

// ReasonSandboxStopped is the event of a pod deleted at once after its sandboxd stopped.
const ReasonSandboxStopped = "SandboxStopped"

const messageSandboxStopped = "sandboxd of pod %s stopped every other process of its container (%d killed) and runs no tool call: deleted the pod with a grace period of 0"

// maxStopsInFlight bounds the stops that wait on sandboxes at once.
const maxStopsInFlight = 32

// stopHold is how long a running pod's deletion waits for its sandboxd's answer; then the pod is
// deleted as without the stop (the stop may still win, and release it at once).
const stopHold = 5 * time.Second

// stopAttempt is one pod's stop: when it was asked and, once it ended, whether the pod was
// stopped and released.
type stopAttempt struct {
	asked    time.Time
	mu       sync.Mutex
	ended    bool
	released bool
}

func (a *stopAttempt) end(released bool) {
	a.mu.Lock()
	a.ended, a.released = true, released
	a.mu.Unlock()
}

// holds says whether the pod's deletion still waits for this stop at now, and for how long.
func (a *stopAttempt) holds(now time.Time) (time.Duration, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ended {
		return 0, a.released // released: deleted already, with a grace period of 0
	}
	left := a.asked.Add(stopHold).Sub(now)
	return left, left > 0
}

// sandboxStopper asks a sandbox pod's sandboxd to stop (*sandboxstop.Client is one).
type sandboxStopper interface {
	Stop(ctx context.Context, base, token string) (sandboxstop.Response, error)
}

// stops is the controller's state of the operator's stop; nil without --operator-pod-labels.
type stops struct {
	peer   *sandboxpod.OperatorPeer
	client sandboxStopper
	slots  chan struct{}
	wg     sync.WaitGroup
	// asked are the pods (by UID) asked once, each a *stopAttempt; forgotten when the pod is
	// deleted.
	asked sync.Map
}

// SetOperatorPeer turns the operator's stop on: peer is the operator's own pods, which each
// sandbox's NetworkPolicy lets reach sandboxd's port. Call before Run.
func (c *Controller) SetOperatorPeer(peer *sandboxpod.OperatorPeer) {
	if peer == nil {
		c.stops, c.evidence = nil, nil
		return
	}
	c.stops = &stops{peer: peer, client: sandboxstop.NewClient(), slots: make(chan struct{}, maxStopsInFlight)}
	// The same ingress lets the controller read each sandbox's isolation evidence before Bound.
	c.evidence = newEvidence()
}

// claimNetworkPolicy is the claim's NetworkPolicy, with the operator's ingress when the stop is on.
func (c *Controller) claimNetworkPolicy(claim *airlockv1alpha1.SandboxClaim, record *airlockv1alpha1.FrozenSandbox, allowed []*corev1.Service) *networkingv1.NetworkPolicy {
	np := sandboxpod.ClaimNetworkPolicy(claim, record, allowed)
	if c.stops != nil {
		np = sandboxpod.WithOperatorIngress(np, record, c.stops.peer)
	}
	return np
}

// stopSandboxes asks, once per pod, the sandboxd of each of the Reaping claim's pods that still
// runs to stop, and deletes the pod at once when it did. It returns the pods whose deletion waits
// for their stop (not yet answered, or answered and released), and when to look again.
func (c *Controller) stopSandboxes(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, pods []*corev1.Pod) (map[types.UID]bool, *time.Duration) {
	s := c.stops
	if s == nil || claim.Status.Frozen == nil {
		return nil, nil
	}
	now := c.clock.Now()
	held := map[types.UID]bool{}
	var recheck *time.Duration
	for _, pod := range pods {
		if !stoppable(claim, pod) {
			continue
		}
		v, asked := s.asked.LoadOrStore(pod.UID, &stopAttempt{asked: now})
		attempt := v.(*stopAttempt)
		if !asked {
			c.askToStop(ctx, claim, pod, attempt)
		}
		if pod.DeletionTimestamp != nil {
			continue // deleted already (by someone else, or after stopHold): nothing to hold
		}
		if left, hold := attempt.holds(now); hold {
			held[pod.UID] = true
			if left > 0 && (recheck == nil || left < *recheck) {
				recheck = ptr.To(left)
			}
		}
	}
	return held, recheck
}

// askToStop runs the pod's stop in a goroutine of its own, at most maxStopsInFlight at a time,
// and enqueues the claim when it ends.
func (c *Controller) askToStop(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, pod *corev1.Pod, attempt *stopAttempt) {
	s := c.stops
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		released := false
		defer func() {
			attempt.end(released)
			c.enqueueClaim(claim)
		}()
		select {
		case s.slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		defer func() { <-s.slots }()
		released = c.stopSandbox(ctx, claim, pod)
	}()
}

// stoppable says whether the pod is the claim's own sandbox pod, Running at an IP, its sandbox
// container not waiting (the cache keeps of a container's state only Waiting:
// sandboxpod.StripPod), whether or not it is being deleted.
func stoppable(claim *airlockv1alpha1.SandboxClaim, pod *corev1.Pod) bool {
	if pod.Status.PodIP == "" || pod.Status.Phase != corev1.PodRunning || !metav1.IsControlledBy(pod, claim) {
		return false
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == sandboxpod.ContainerName {
			return cs.State.Waiting == nil
		}
	}
	return false
}

// stopSandbox asks the pod's sandboxd to stop and deletes the pod at once when it did; it says
// whether it did.
func (c *Controller) stopSandbox(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, pod *corev1.Pod) bool {
	logger := klog.FromContext(ctx).WithValues("claim", klog.KObj(claim), "pod", klog.KObj(pod))
	ctx, cancel := context.WithTimeout(ctx, sandboxstop.Timeout)
	defer cancel()
	token, err := c.sandboxToken(ctx, claim, pod)
	if errors.Is(err, claimtoken.ErrNotTheClaimsSandbox) {
		return false // a pod on no token of the claim: left to the kubelet
	}
	if err != nil {
		logger.Error(err, "No token for the operator's stop; the pod is left to the kubelet")
		return false
	}
	port := sandboxpod.Ports(claim.Status.Frozen)[0].Port
	base := "http://" + net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(int(port)))
	logger.V(2).Info("Asking the pod's sandboxd to stop", "address", base)
	resp, err := c.stops.client.Stop(ctx, base, token)
	if err != nil {
		sandboxStops.WithLabelValues("failed").Inc()
		logger.Info("The pod's sandboxd did not stop; the pod is left to the kubelet", "address", base, "err", err)
		return false
	}
	sandboxStops.WithLabelValues("stopped").Inc()
	// sandboxd appended its stopped entry before it answered: the record reads it before the
	// pod goes (records.go).
	c.waitForRecord(ctx, claim)
	if err := objectcontrol.IgnoreGone(c.lostPods.Release(ctx, pod)); err != nil {
		logger.Error(err, "Deleting the stopped pod at once; the kubelet will")
		return false
	}
	logger.V(2).Info("Stopped the pod's sandboxd and deleted the pod at once", "killed", resp.Killed)
	c.recorder.Eventf(claim, corev1.EventTypeNormal, ReasonSandboxStopped, messageSandboxStopped, pod.Name, resp.Killed)
	return true
}

// forgetStop forgets that a pod was asked, once it is deleted.
func (c *Controller) forgetStop(uid types.UID) {
	if c.stops != nil {
		c.stops.asked.Delete(uid)
	}
}

// waitForStops waits for the stops in flight (Run, once its context is done).
func (c *Controller) waitForStops() {
	if c.stops != nil {
		c.stops.wg.Wait()
	}
}

// sooner is the earlier of two times to look again (nil: none).
func sooner(a, b *time.Duration) *time.Duration {
	if a == nil || (b != nil && *b < *a) {
		return b
	}
	return a
}

// sandboxToken is the token the claim's sandbox pod answers to (claimtoken.SandboxToken): the
// claim's own, or the adoption token of the warm member it adopted, through the controller's
// seams.
func (c *Controller) sandboxToken(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, pod *corev1.Pod) (string, error) {
	return claimtoken.SandboxToken(ctx, claimSeams{c: c, claim: claim}, claim, pod)
}

// claimSeams derives one claim's tokens through the controller's seams (a claimtoken.Deriver).
type claimSeams struct {
	c     *Controller
	claim *airlockv1alpha1.SandboxClaim
}

func (s claimSeams) Token(ctx context.Context, _ types.UID, _, _ string) (string, error) {
	return s.c.newToken(ctx, s.claim)
}

func (s claimSeams) AdoptionToken(ctx context.Context, _, member string, _ types.UID, _ []string) (string, error) {
	return s.c.newAdoptionToken(ctx, s.claim, member, s.claim.Status.Frozen)
}
