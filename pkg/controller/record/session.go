package record

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/claimtoken"
	"github.com/airlock-dev/airlock/pkg/record"
	"github.com/airlock-dev/airlock/pkg/recordstore"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
	"github.com/airlock-dev/airlock/pkg/sandboxrecord"
	"github.com/airlock-dev/airlock/pkg/usage"
)

// session is one claim's record in the leader's memory: the chain and its collector, the entries
// not yet stored, the last stored segment, and the follower of the claim's sandboxd log.
type session struct {
	key   cache.ObjectName
	claim *airlockv1alpha1.SandboxClaim // the claim's metadata (name, namespace, UID)

	mu        sync.Mutex
	chain     *record.Chain
	collector *record.Collector
	// pending are the lines appended and not yet stored; firstPending when the first was.
	pending      [][]byte
	pendingBytes int
	firstPending time.Time
	// phase and reason are the last ones recorded (a claim.phase entry), stored or not: a phase
	// waits for the batch as any entry does (a new leader records the current phase again when
	// it differs from the last one stored).
	phase, reason string
	// usage is what the record says the session used so far, fed with every entry appended (and,
	// on a new leader, with every stored entry first): the seal's usage.
	usage usage.Tracker
	// seg is the last stored segment as stored; segSR its SessionRecord as last written or read
	// (nil: none yet). storedSegments counts the bytes of the segments before it.
	seg            recordstore.Segment
	segSR          *airlockv1alpha1.SessionRecord
	storedCount    uint64
	storedHead     string
	storedSegments int
	// owners are the stored segments' owners (the claim, or a kept workspace's Job after a
	// move): a new segment gets them. Only the worker of the claim reads and writes them.
	owners []metav1.OwnerReference
	// full says the record reached recordstore.MaxSegments: sandboxd's entries are counted by
	// kind, not kept (docs/record.md §2.5).
	full    bool
	dropped map[string]int
	// sealed: the chain is sealed (stored once pending is empty).
	sealed bool

	// The follower: followedPod is the pod whose log is (or was last) read, following whether a
	// read runs now, stopped whether that pod's stopped entry was taken (stoppedCh is closed
	// then), fromStart that sandboxd restarted (read its new boot from the start), paused that
	// too much waits to be stored, retryAt when a cut stream is read again.
	followedPod types.UID
	following   bool
	cancel      context.CancelFunc
	stopped     bool
	stoppedCh   chan struct{}
	fromStart   bool
	paused      bool
	retryAt     time.Time
	lastErr     error
	// goneAt is when the claim was first seen ended while a read still ran.
	goneAt time.Time

	// The egress gateway's feeds (gateway.go): egress says the claim has a gateway, feeds are
	// its pods' feeds by pod UID, gwAfter the last sequence number in the record per gateway
	// boot (from the stored entries on a new leader: the cursor).
	egress  atomic.Bool // read without s.mu (the gateway pods' handler)
	feeds   map[types.UID]*gatewayFeed
	gwAfter map[string]uint64
}

// nothingPending says that the record has been stored whole (it was written, and nothing of it
// waits).
func (s *session) nothingPending() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pending) == 0 && s.segSR != nil
}

// errPaused stops a read while too much waits to be stored.
var errPaused = errors.New("too many entries wait to be stored: reading stops until they are")

// appendLocked appends entries (already in the chain) to pending and tells the observers.
func (c *Controller) appendLocked(s *session, claim *airlockv1alpha1.SandboxClaim, entries []record.Entry) error {
	for _, e := range entries {
		line, err := e.Line()
		if err != nil {
			return err
		}
		if len(s.pending) == 0 {
			s.firstPending = c.clock.Now()
		}
		s.pending = append(s.pending, line)
		s.pendingBytes += len(line) + 1
		s.usage.Observe(e)
		for _, o := range c.observers {
			o(claim, e)
		}
	}
	return nil
}

// appendOperator appends one operator entry (a phase, a gap) and returns it.
func (c *Controller) appendOperatorLocked(s *session, claim *airlockv1alpha1.SandboxClaim, e record.Entry) error {
	e.Time, e.Source = record.FormatTime(c.clock.Now()), record.SourceOperator
	appended, err := s.chain.Append(e)
	if err != nil {
		return err
	}
	return c.appendLocked(s, claim, []record.Entry{appended})
}

// runningSandbox is the pod of the claim whose sandboxd can be read: the claim's own, Running at
// an IP, its sandbox container not waiting, not being deleted; nil when none.
func runningSandbox(pods []*corev1.Pod) *corev1.Pod {
	for _, pod := range pods {
		if pod.Status.PodIP == "" || pod.Status.Phase != corev1.PodRunning {
			continue
		}
		for _, cs := range pod.Status.ContainerStatuses {
			if cs.Name == sandboxpod.ContainerName && cs.State.Waiting == nil {
				return pod
			}
		}
	}
	return nil
}

// startFollowing reads the pod's sandboxd log from the collector's cursor in a goroutine of its
// own; its end enqueues the claim. Called with s.mu held.
func (c *Controller) startFollowingLocked(ctx context.Context, s *session, claim *airlockv1alpha1.SandboxClaim, pod *corev1.Pod) error {
	logger := klog.FromContext(ctx).WithValues("claim", klog.KObj(claim), "pod", klog.KObj(pod))
	token, tokenErr := claimtoken.SandboxToken(ctx, c.tokens, claim, pod)
	if tokenErr != nil && !errors.Is(tokenErr, claimtoken.ErrNotTheClaimsSandbox) {
		return fmt.Errorf("the sandbox's token: %w", tokenErr)
	}
	if pod.UID != s.followedPod {
		if s.followedPod != "" {
			// Another pod of the claim: the last one's log ended where it was read, and the new
			// one's sandboxd is read from its start.
			gaps, err := s.collector.Ended("the sandbox pod was replaced")
			if err != nil {
				return err
			}
			if err := c.appendLocked(s, claim, gaps); err != nil {
				return err
			}
			s.fromStart = true
		}
		s.followedPod, s.stopped, s.stoppedCh = pod.UID, false, make(chan struct{})
	}
	if tokenErr != nil {
		// A pod on no token of the claim (neither its own nor, for the warm member it adopted,
		// its adoption token): its log is not read.
		logger.V(4).Info("Not reading the log of a sandbox that answers to no token of the claim", "err", tokenErr)
		s.stopped = true
		close(s.stoppedCh)
		return c.appendOperatorLocked(s, claim, record.Entry{Kind: record.KindRecordGap,
			Message: fmt.Sprintf("the log of sandbox pod %s is not read (%v): sandboxd's entries of this session are unknown", pod.Name, tokenErr)})
	}
	port := sandboxpod.Ports(claim.Status.Frozen)[0].Port
	base := "http://" + net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(int(port)))
	boot, after := s.collector.Cursor()
	if s.fromStart {
		boot, after = "", 0 // whatever boot answers, from its start: the collector marks the change
	}
	fctx, cancel := context.WithCancel(c.runContext())
	s.following, s.cancel, s.paused = true, cancel, false
	claimCopy := claim.DeepCopy()
	c.wg.Go(func() {
		defer cancel()
		err := c.follower.Follow(fctx, base, token, boot, after, func(line []byte) error {
			return c.take(s, claimCopy, line)
		})
		c.followEnded(logger, s, err)
	})
	logger.V(4).Info("Reading the sandbox's log", "address", base, "boot", boot, "after", after)
	return nil
}

// take takes one line of the log into the record.
func (c *Controller) take(s *session, claim *airlockv1alpha1.SandboxClaim, line []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sealed {
		return record.ErrSealed
	}
	if s.full {
		var k struct {
			Kind string `json:"kind"`
		}
		_ = json.Unmarshal(line, &k)
		s.dropped[k.Kind]++
		return nil
	}
	entries, err := s.collector.Take(line)
	if err != nil {
		return err
	}
	s.fromStart = false
	wasEmpty := len(s.pending) == 0
	if err := c.appendLocked(s, claim, entries); err != nil {
		return err
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
	if s.pendingBytes > maxPendingBytes {
		s.paused = true
		return errPaused
	}
	return nil
}

// checkFullLocked turns the record full when its stored and pending bytes come near the bound
// of recordstore.MaxSegments segments: one gap entry says from where entries are only counted.
func (c *Controller) checkFullLocked(s *session, claim *airlockv1alpha1.SandboxClaim) error {
	const reserve = 64 << 10 // room for the gap, the counts and the seal
	if s.full || s.storedSegments+s.seg.Size()+s.pendingBytes < recordstore.MaxSegments*recordstore.MaxSegmentBytes-reserve {
		return nil
	}
	s.full, s.dropped = true, map[string]int{}
	boot, after := s.collector.Cursor()
	return c.appendOperatorLocked(s, claim, record.Entry{Kind: record.KindRecordGap,
		Message: fmt.Sprintf("the record is full (%d segments): sandboxd's entries after source entry %d of boot %s are counted, not kept", recordstore.MaxSegments, after, boot)})
}

// followEnded notes how a read ended and enqueues the claim.
func (c *Controller) followEnded(logger klog.Logger, s *session, err error) {
	s.mu.Lock()
	s.following, s.cancel, s.lastErr = false, nil, err
	var changed *sandboxrecord.BootChangedError
	switch {
	case err == nil:
		if !s.stopped {
			s.stopped = true
			close(s.stoppedCh)
		}
	case errors.As(err, &changed):
		logger.V(2).Info("sandboxd restarted: reading its new boot", "boot", changed.Boot)
		s.fromStart = true
	case errors.Is(err, errPaused), errors.Is(err, record.ErrSealed), errors.Is(err, context.Canceled):
	default:
		logger.V(2).Info("The sandbox's log stream ended; reading it again from the cursor", "err", err)
		s.retryAt = c.clock.Now().Add(followRetry)
	}
	s.mu.Unlock()
	c.queue.Add(s.key)
}

// termStarted is when Run began (zero before).
func (c *Controller) termStarted() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.started
}

// runContext is Run's context (the followers end with it).
func (c *Controller) runContext() context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ctx
}

// metaOf is a claim's metadata alone (what a session keeps of it).
func metaOf(claim *airlockv1alpha1.SandboxClaim) *airlockv1alpha1.SandboxClaim {
	return &airlockv1alpha1.SandboxClaim{ObjectMeta: metav1.ObjectMeta{Namespace: claim.Namespace, Name: claim.Name, UID: claim.UID}}
}
