package record

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/gatewayrecord"
	"github.com/airlock-dev/airlock/pkg/record"
)

// The egress gateway's decisions (docs/record.md §2.1): for a claim with egress, the leader
// follows GET /decisions?claim=<uid> of each of the gateway's pods (the frozen record's gateway:
// its namespace and pod selector; the pod's container port named DecisionsPortName) with the
// reader's token, and appends each decision as an `egress` entry of source gateway, keeping the
// gateway's boot and sequence number. Those stored entries are the cursor: a new leader takes
// the last sequence number of each boot from the stored record and skips what it already holds.
// A jump in a boot's numbers (the gateway's bound), a restarted gateway (another boot) and a
// gateway pod that ended while its feed was cut are record.gap entries; a cut feed is read
// again from where it stood one followRetry later (an AddAfter), as sandboxd's log is.

// DecisionsPortName is the name of the gateway container's port of GET /decisions.
const DecisionsPortName = "decisions"

// decisionsFollower reads a gateway's decisions (*gatewayrecord.Client is one).
type decisionsFollower interface {
	Follow(ctx context.Context, base, token, uid, boot string, after uint64, onBoot func(string), take func(line []byte) error) error
}

// DecisionsTokens gives the token of the gateway's decisions reader (claimtoken.Source is one).
type DecisionsTokens interface {
	DecisionsReaderToken(ctx context.Context) (string, error)
}

// gatewayFeed is one gateway pod's feed of a claim's decisions.
type gatewayFeed struct {
	pod       string
	boot      string // the boot read (set when it answers); "" before
	following bool
	cancel    context.CancelFunc
	retryAt   time.Time
	cut       bool // the last read was cut (not ended by the leader)
}

// SetGateway has the controller read the egress gateway's decisions of claims with egress from
// the gateway's pods (an informer of pods of the gateway's namespace) with tokens' reader token.
// Call it before Run.
func (c *Controller) SetGateway(pods coreinformers.PodInformer, tokens DecisionsTokens) error {
	c.gwPods, c.gwPodsSynced, c.decisionsTokens = pods.Lister(), pods.Informer().HasSynced, tokens
	if c.decisions == nil {
		c.decisions = gatewayrecord.NewClient()
	}
	return c.handlers.Add(pods.Informer(), cache.ResourceEventHandlerFuncs{
		AddFunc: c.enqueueEgressClaims,
		UpdateFunc: func(old, cur any) {
			if old.(*corev1.Pod).ResourceVersion != cur.(*corev1.Pod).ResourceVersion {
				c.enqueueEgressClaims(cur)
			}
		},
		DeleteFunc: c.enqueueEgressClaims,
	})
}

// enqueueEgressClaims enqueues every claim whose record reads a gateway: a gateway pod came,
// changed or went.
func (c *Controller) enqueueEgressClaims(any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.sessions {
		if s.egress.Load() {
			c.queue.Add(s.key)
		}
	}
}

// gatewayPods are the gateway's running pods that serve the decisions, by UID, with their
// feed's address.
func (c *Controller) gatewayPods(gw *airlockv1alpha1.EgressGateway) (map[types.UID]*corev1.Pod, map[types.UID]string, error) {
	pods, err := c.gwPods.Pods(gw.Namespace).List(labels.SelectorFromSet(gw.PodSelector))
	if err != nil {
		return nil, nil, err
	}
	live, bases := map[types.UID]*corev1.Pod{}, map[types.UID]string{}
	for _, p := range pods {
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
			continue
		}
		for _, ctr := range p.Spec.Containers {
			for _, port := range ctr.Ports {
				if port.Name == DecisionsPortName && port.ContainerPort > 0 {
					live[p.UID] = p
					bases[p.UID] = "http://" + net.JoinHostPort(p.Status.PodIP, strconv.Itoa(int(port.ContainerPort)))
				}
			}
		}
	}
	return live, bases, nil
}

// followGateways reads the claim's decisions from every gateway pod nothing reads yet, and says
// when to look again (a cut feed is read again after followRetry).
func (c *Controller) followGateways(ctx context.Context, s *session, claim *airlockv1alpha1.SandboxClaim) (*time.Duration, error) {
	if c.gwPods == nil || claim.Status.Frozen == nil || claim.Status.Frozen.Egress == nil || len(claim.Status.Frozen.Egress.Gateway.PodSelector) == 0 {
		return nil, nil
	}
	live, bases, err := c.gatewayPods(&claim.Status.Frozen.Egress.Gateway)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.egress.Store(true)
	if s.sealed {
		return nil, nil
	}
	if s.feeds == nil {
		s.feeds = map[types.UID]*gatewayFeed{}
	}
	for uid, f := range s.feeds {
		if _, ok := live[uid]; ok || f.following {
			continue
		}
		if f.cut && f.boot != "" {
			if err := c.appendOperatorLocked(s, claim, record.Entry{Kind: record.KindRecordGap,
				Message: fmt.Sprintf("the egress gateway pod %s ended while its feed was cut: its decisions of boot %s after %d that were not read are unknown", f.pod, f.boot, s.gwAfter[f.boot])}); err != nil {
				return nil, err
			}
		}
		delete(s.feeds, uid)
	}
	var requeue *time.Duration
	now := c.clock.Now()
	for uid, pod := range live {
		f := s.feeds[uid]
		if f == nil {
			f = &gatewayFeed{pod: pod.Name}
			s.feeds[uid] = f
		}
		if f.following {
			continue
		}
		if now.Before(f.retryAt) {
			requeue = sooner(requeue, ptr.To(f.retryAt.Sub(now)))
			continue
		}
		if err := c.startDecisionsLocked(ctx, s, claim, f, bases[uid]); err != nil {
			return nil, err
		}
	}
	return requeue, nil
}

// startDecisionsLocked follows one gateway pod's decisions of the claim in a goroutine of its
// own; its end enqueues the claim.
func (c *Controller) startDecisionsLocked(ctx context.Context, s *session, claim *airlockv1alpha1.SandboxClaim, f *gatewayFeed, base string) error {
	token, err := c.decisionsTokens.DecisionsReaderToken(ctx)
	if err != nil {
		return fmt.Errorf("the gateway's decisions reader token: %w", err)
	}
	logger := klog.FromContext(ctx).WithValues("claim", klog.KObj(claim), "gatewayPod", f.pod)
	boot, after := f.boot, uint64(0)
	if boot != "" {
		after = s.gwAfter[boot]
	}
	fctx, cancel := context.WithCancel(c.runContext())
	f.following, f.cancel, f.cut = true, cancel, false
	claimCopy := claim.DeepCopy()
	uid := string(claim.UID)
	c.wg.Go(func() {
		defer cancel()
		err := c.decisions.Follow(fctx, base, token, uid, boot, after, func(b string) {
			s.mu.Lock()
			f.boot = b
			s.mu.Unlock()
		}, func(line []byte) error { return c.takeDecision(s, claimCopy, f, line) })
		c.decisionsEnded(logger, s, claimCopy, f, err)
	})
	logger.V(2).Info("Reading the gateway's decisions", "address", base, "boot", boot, "after", after)
	return nil
}

// takeDecision takes one line of a gateway's feed into the record.
func (c *Controller) takeDecision(s *session, claim *airlockv1alpha1.SandboxClaim, f *gatewayFeed, line []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sealed {
		return record.ErrSealed
	}
	if s.full {
		s.dropped[record.KindEgress]++
		return nil
	}
	wasEmpty := len(s.pending) == 0
	var e record.Entry
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	switch err := dec.Decode(&e); {
	case err == nil && e.Source == record.SourceGateway && e.Kind == record.KindRecordGap && e.Claim == string(claim.UID) && e.Boot == f.boot && e.SourceSeq > s.gwAfter[e.Boot]:
		// The gateway's last decisions were not kept (its bound in all): their numbers are a gap
		// now, not at the next decision (which may never come).
		if err := c.appendOperatorLocked(s, claim, record.Entry{Kind: record.KindRecordGap,
			Message: fmt.Sprintf("the egress gateway (pod %s, boot %s) did not keep this claim's decisions %d to %d (its bound): they are unknown", f.pod, e.Boot, s.gwAfter[e.Boot]+1, e.SourceSeq)}); err != nil {
			return err
		}
		s.gwAfter[e.Boot] = e.SourceSeq
	case err == nil && e.Source == record.SourceGateway && e.Kind == record.KindRecordGap && e.SourceSeq <= s.gwAfter[e.Boot]:
		return nil // said already
	case err != nil || e.Source != record.SourceGateway || e.Kind != record.KindEgress || e.Claim != string(claim.UID) || e.Boot != f.boot || e.SourceSeq == 0:
		if err := c.appendOperatorLocked(s, claim, record.Entry{Kind: record.KindRecordGap,
			Message: fmt.Sprintf("a line read from the egress gateway pod %s (boot %s, after %d) is not one of this claim's decisions; not taken", f.pod, f.boot, s.gwAfter[f.boot])}); err != nil {
			return err
		}
	case e.SourceSeq <= s.gwAfter[e.Boot]:
		return nil // in the record already (a new leader reads again what the old one stored)
	default:
		if last := s.gwAfter[e.Boot]; e.SourceSeq > last+1 {
			if err := c.appendOperatorLocked(s, claim, record.Entry{Kind: record.KindRecordGap,
				Message: fmt.Sprintf("the egress gateway (pod %s, boot %s) did not keep this claim's decisions %d to %d (its bound): they are unknown", f.pod, e.Boot, last+1, e.SourceSeq-1)}); err != nil {
				return err
			}
		}
		appended, err := s.chain.Append(record.Entry{Time: e.Time, Source: record.SourceGateway, Boot: e.Boot, SourceSeq: e.SourceSeq,
			Kind: record.KindEgress, Trace: e.Trace, Span: e.Span, Parent: e.Parent, Reason: e.Reason, DurationMS: e.DurationMS,
			Host: e.Host, Port: e.Port, Verdict: e.Verdict, Credential: e.Credential, Usage: e.Usage})
		if err != nil {
			return err
		}
		if err := c.appendLocked(s, claim, []record.Entry{appended}); err != nil {
			return err
		}
		s.gwAfter[e.Boot] = e.SourceSeq
	}
	if err := c.checkFullLocked(s, claim); err != nil {
		return err
	}
	switch {
	case len(s.pending) >= batchEntries:
		c.queue.Add(s.key)
	case wasEmpty:
		c.queue.AddAfter(s.key, flushDelay)
	}
	return nil
}

// decisionsEnded notes how a feed's read ended (a restarted gateway is a gap) and enqueues the
// claim.
func (c *Controller) decisionsEnded(logger klog.Logger, s *session, claim *airlockv1alpha1.SandboxClaim, f *gatewayFeed, err error) {
	s.mu.Lock()
	f.following, f.cancel = false, nil
	var changed *gatewayrecord.BootChangedError
	switch {
	case errors.As(err, &changed):
		logger.V(2).Info("The egress gateway restarted: reading its new boot", "boot", changed.Boot)
		if !s.sealed {
			if gerr := c.appendOperatorLocked(s, claim, record.Entry{Kind: record.KindRecordGap,
				Message: fmt.Sprintf("the egress gateway pod %s restarted (boot %s, now %s): its decisions of boot %s after %d that were not read are unknown", f.pod, f.boot, changed.Boot, f.boot, s.gwAfter[f.boot])}); gerr != nil {
				logger.Error(gerr, "Cannot record the gateway's restart")
			}
		}
		f.boot = ""
	case errors.Is(err, record.ErrSealed), errors.Is(err, context.Canceled):
	default:
		logger.V(2).Info("The gateway's decisions feed ended; reading it again from the cursor", "err", err)
		f.cut, f.retryAt = true, c.clock.Now().Add(followRetry)
	}
	s.mu.Unlock()
	c.queue.Add(s.key)
}

// stopFeedsLocked ends every read of the claim's decisions.
func (s *session) stopFeedsLocked() {
	for _, f := range s.feeds {
		if f.cancel != nil {
			f.cancel()
		}
	}
}

// feedsFollowingLocked says whether a gateway's feed is read now.
func (s *session) feedsFollowingLocked() bool {
	for _, f := range s.feeds {
		if f.following {
			return true
		}
	}
	return false
}
