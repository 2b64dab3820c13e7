package record

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/record"
	"github.com/airlock-dev/airlock/pkg/recordstore"
	"github.com/airlock-dev/airlock/pkg/usage"
)

// goneHold is how long a read of a pod that is gone may still deliver what it had in flight
// before it is cut and the record sealed: nothing waits forever on a dead connection.
const goneHold = 5 * time.Second

// sync keeps the record of the claim key names: its phase, the read of its sandboxd's log, its
// seal, its storage. It returns when to look again. A record whose namespace is gone or being
// deleted cannot be stored (the namespace's SessionRecords go with it): it is dropped, said once
// in the log, never retried (docs/record.md §2.5).
func (c *Controller) sync(ctx context.Context, key cache.ObjectName) (*time.Duration, error) {
	requeue, err := c.syncRecord(ctx, key)
	if err != nil && namespaceGone(err) {
		c.dropNamespaceGone(ctx, key, err)
		return nil, nil
	}
	return requeue, err
}

// namespaceGone says whether err is the API server's answer to a write in a namespace that is
// gone (NotFound of the namespace) or being deleted (Forbidden, NamespaceTerminating).
func namespaceGone(err error) bool {
	if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
		return true
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) || !apierrors.IsNotFound(err) {
		return false
	}
	d := status.Status().Details
	return d != nil && d.Kind == "namespaces"
}

// dropNamespaceGone forgets the records of key's claims (the live one and a deleted one) whose
// namespace is gone: their reads are stopped and whoever waits for them released.
func (c *Controller) dropNamespaceGone(ctx context.Context, key cache.ObjectName, why error) {
	c.mu.Lock()
	var drop []*session
	if uid, ok := c.byName[key]; ok && c.sessions[uid] != nil {
		drop = append(drop, c.sessions[uid])
	}
	if d := c.deleted[key]; d != nil {
		if s := c.sessions[d.UID]; s != nil && (len(drop) == 0 || drop[0] != s) {
			drop = append(drop, s)
		}
		delete(c.deleted, key)
	}
	c.mu.Unlock()
	for _, s := range drop {
		s.mu.Lock()
		if s.cancel != nil {
			s.cancel()
		}
		s.stopFeedsLocked()
		s.mu.Unlock()
		c.forget(s)
		c.releaseStoreWaiters(s.claim.UID)
	}
	klog.FromContext(ctx).Info("The claim's namespace is gone or being deleted: its record is not stored", "claim", klog.KRef(key.Namespace, key.Name), "records", len(drop), "err", why)
}

func (c *Controller) syncRecord(ctx context.Context, key cache.ObjectName) (*time.Duration, error) {
	start := c.clock.Now()
	logger := klog.FromContext(ctx).WithValues("claim", klog.KRef(key.Namespace, key.Name))
	defer func() { logger.V(4).Info("Finished syncing the claim's record", "elapsed", c.clock.Since(start)) }()
	ctx = klog.NewContext(ctx, logger)

	claim, err := c.claimLister.SandboxClaims(key.Namespace).Get(key.Name)
	if apierrors.IsNotFound(err) {
		claim = nil
	} else if err != nil {
		return nil, err
	}
	c.mu.Lock()
	uid, had := c.byName[key]
	old := c.sessions[uid]
	c.mu.Unlock()
	if had && (claim == nil || claim.UID != uid) {
		// The claim of the record ended (deleted, perhaps replaced by another of its name).
		if requeue, err := c.end(ctx, old, nil, "the claim was deleted"); err != nil || requeue != nil {
			return requeue, err
		}
	}
	if gone := c.deletedClaim(key); gone != nil {
		if (!had || gone.UID != uid) && (claim == nil || claim.UID != gone.UID) {
			if requeue, err := c.endDeleted(ctx, gone); err != nil || requeue != nil {
				return requeue, err
			}
		}
		c.clearDeleted(key, gone.UID)
	}
	if claim == nil {
		return nil, nil
	}
	s, err := c.sessionFor(ctx, claim)
	if err != nil {
		return nil, err
	}
	if s == nil { // stored sealed: nothing waits
		c.releaseStoreWaiters(claim.UID)
		return nil, nil
	}
	pods, err := c.claimPods(claim)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	err = c.recordPhaseLocked(s, claim)
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if claimEnded(claim) && runningSandbox(pods) == nil && len(pods) == 0 {
		return c.end(ctx, s, claim, "the sandbox pod ended")
	}
	follow, err := c.follow(ctx, s, claim, pods)
	if err != nil {
		return nil, err
	}
	gateways, err := c.followGateways(ctx, s, claim)
	if err != nil {
		return nil, err
	}
	flush, err := c.flushIfDue(ctx, s)
	return sooner(sooner(follow, gateways), flush), err
}

// endDeleted keeps the record of a claim deleted before this leader had synced it (reaped by
// the previous leader in its last moments, or as this term began, before the claim's first
// sync): the record stored so far is resumed, or one begun, the claim's last phase recorded, and
// it is sealed. No record is left unsealed, or missing, because no leader saw its claim go.
func (c *Controller) endDeleted(ctx context.Context, gone *airlockv1alpha1.SandboxClaim) (*time.Duration, error) {
	s, err := c.sessionFor(ctx, gone)
	if err != nil {
		return nil, err
	}
	if s == nil { // stored sealed: nothing more to write
		c.mu.Lock()
		s = c.sessions[gone.UID]
		c.mu.Unlock()
		if s != nil {
			c.forget(s)
		}
		return nil, nil
	}
	s.mu.Lock()
	err = c.recordPhaseLocked(s, gone)
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return c.end(ctx, s, nil, "the claim was deleted")
}

// claimEnded says whether the claim's session is over (its pods are deleted or never come).
func claimEnded(claim *airlockv1alpha1.SandboxClaim) bool {
	switch claim.Status.Phase {
	case airlockv1alpha1.ClaimReaping, airlockv1alpha1.ClaimRefused, airlockv1alpha1.ClaimFailed:
		return true
	}
	return claim.DeletionTimestamp != nil
}

// recordPhaseLocked appends a claim.phase entry when the claim's phase or reason changed.
func (c *Controller) recordPhaseLocked(s *session, claim *airlockv1alpha1.SandboxClaim) error {
	if s.sealed {
		return nil
	}
	phase := string(claim.Status.Phase)
	if phase == "" {
		phase = string(airlockv1alpha1.ClaimPending)
	}
	if phase == s.phase && claim.Status.Reason == s.reason {
		return nil
	}
	msg := claim.Status.Message
	if len(msg) > maxMessage {
		msg = msg[:maxMessage] + "…"
	}
	if err := c.appendOperatorLocked(s, claim, record.Entry{Kind: record.KindClaimPhase, Phase: phase, Reason: claim.Status.Reason, Message: msg}); err != nil {
		return err
	}
	s.phase, s.reason = phase, claim.Status.Reason
	return nil
}

// follow starts reading the claim's running sandbox when nothing reads it, and says when to look
// again (a cut stream is read again after followRetry).
func (c *Controller) follow(ctx context.Context, s *session, claim *airlockv1alpha1.SandboxClaim, pods []*corev1.Pod) (*time.Duration, error) {
	if !c.readSandboxes || claim.Status.Frozen == nil {
		return nil, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	pod := runningSandbox(pods)
	if s.sealed || s.following || pod == nil || (pod.UID == s.followedPod && s.stopped) {
		return nil, nil
	}
	if s.paused && s.pendingBytes > maxPendingBytes/2 {
		return nil, nil // read on once stored (the store enqueues the claim)
	}
	if now := c.clock.Now(); now.Before(s.retryAt) {
		return ptr.To(s.retryAt.Sub(now)), nil
	}
	return nil, c.startFollowingLocked(ctx, s, claim, pod)
}

// end seals the record of a claim that ended (claim nil: it is gone) and stores it; once stored,
// the session is forgotten. A read still running is given goneHold to deliver what it had.
func (c *Controller) end(ctx context.Context, s *session, claim *airlockv1alpha1.SandboxClaim, why string) (*time.Duration, error) {
	gone := claim == nil
	if gone {
		claim = s.claim
	}
	s.mu.Lock()
	if (s.following || s.feedsFollowingLocked()) && !s.sealed {
		now := c.clock.Now()
		if s.goneAt.IsZero() {
			s.goneAt = now
		}
		if left := s.goneAt.Add(goneHold).Sub(now); left > 0 {
			s.mu.Unlock()
			return ptr.To(left), nil
		}
		if s.cancel != nil {
			s.cancel()
		}
		s.stopFeedsLocked()
	}
	s.mu.Unlock()
	// What waits is stored before the seal, so that a segment changed under the leader is
	// still said in the record (store.go).
	if err := c.store(ctx, s); err != nil {
		return nil, err
	}
	s.mu.Lock()
	err := c.sealLocked(s, claim, why)
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if err := c.store(ctx, s); err != nil {
		return nil, err
	}
	s.mu.Lock()
	done := len(s.pending) == 0
	s.mu.Unlock()
	if !done {
		return nil, fmt.Errorf("the sealed record of claim %s is not stored yet", s.key)
	}
	if gone {
		c.forget(s)
	}
	return nil, nil
}

// sealLocked appends what the record lacks at its end (the log's end when its stopped entry was
// not read, the counts of a full record) and seals it.
func (c *Controller) sealLocked(s *session, claim *airlockv1alpha1.SandboxClaim, why string) error {
	if s.sealed {
		return nil
	}
	gaps, err := s.collector.Ended(why)
	if err != nil {
		return err
	}
	if err := c.appendLocked(s, claim, gaps); err != nil {
		return err
	}
	if s.full && len(s.dropped) > 0 {
		var counts []string
		for _, k := range slices.Sorted(maps.Keys(s.dropped)) {
			counts = append(counts, fmt.Sprintf("%s %d", k, s.dropped[k]))
		}
		if err := c.appendOperatorLocked(s, claim, record.Entry{Kind: record.KindRecordGap,
			Message: "entries counted, not kept, after the record was full: " + strings.Join(counts, ", ")}); err != nil {
			return err
		}
	}
	// The session's totals, from every entry of the record (pkg/usage).
	total := s.usage.Total()
	e, _, err := s.chain.Seal(c.clock.Now(), &total)
	if err != nil {
		return err
	}
	if err := c.appendLocked(s, claim, []record.Entry{e}); err != nil {
		return err
	}
	s.sealed = true
	if !s.stopped && s.stoppedCh != nil {
		s.stopped = true
		close(s.stoppedCh)
	}
	return nil
}

// forget drops a stored, sealed record's session.
func (c *Controller) forget(s *session) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.sessions, s.claim.UID)
	if c.byName[s.key] == s.claim.UID {
		delete(c.byName, s.key)
	}
}

// sessionFor returns the claim's session, resuming its record from what is stored when this
// leader has none yet (a list of the claim's segments, once per claim and term: an informer
// would hold every record's entries in the operator's memory). It returns nil for a record
// stored sealed: nothing more is written to it.
func (c *Controller) sessionFor(ctx context.Context, claim *airlockv1alpha1.SandboxClaim) (*session, error) {
	key := cache.MetaObjectToName(claim)
	c.mu.Lock()
	s := c.sessions[claim.UID]
	c.mu.Unlock()
	if s != nil {
		if s.storedSealedDone() {
			return nil, nil
		}
		return s, nil
	}
	signer, err := c.signer.Signer(ctx)
	if err != nil {
		return nil, fmt.Errorf("the record's signing key: %w", err)
	}
	s, err = c.resume(ctx, claim, signer)
	if err != nil {
		return nil, err
	}
	s.key = key
	c.mu.Lock()
	c.sessions[claim.UID] = s
	c.byName[key] = claim.UID
	c.mu.Unlock()
	if s.storedSealedDone() {
		return nil, nil
	}
	return s, nil
}

// storedSealedDone says that the record is sealed and stored whole.
func (s *session) storedSealedDone() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sealed && len(s.pending) == 0 && s.segSR != nil
}

// resume builds the claim's session from its stored segments, or a new record when there are
// none: the chain from the last segment's anchor, the collector from its cursor, and from every
// stored entry the last phase recorded (so that it is not recorded twice, and the current phase is
// recorded again when it differs: an old leader's phase not yet stored) and the usage so far
// (the seal's totals).
func (c *Controller) resume(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, signer *record.Signer) (*session, error) {
	s := &session{claim: metaOf(claim), stoppedCh: make(chan struct{}), gwAfter: map[string]uint64{}}
	segs, byN, err := c.storedSegments(ctx, claim)
	if err != nil {
		return nil, err
	}
	for _, seg := range segs {
		s.replay(seg)
	}
	var last *recordstore.Segment
	if len(segs) > 0 {
		last = &segs[len(segs)-1]
		for _, seg := range segs[:len(segs)-1] {
			s.storedSegments += seg.Size()
		}
		s.segSR, s.owners = byN[last.N].DeepCopy(), byN[last.N].OwnerReferences
	}
	if last == nil || last.Anchor == nil {
		if err := c.beginRecord(s, claim, signer, last); err != nil {
			return nil, err
		}
		return s, nil
	}
	s.seg = recordstore.Segment{N: last.N, Lines: last.Lines}
	s.storedCount, s.storedHead = last.Anchor.Count, last.Anchor.Head
	s.chain, err = record.Resume(string(claim.UID), signer, last.Anchor.Count, last.Anchor.Head)
	if err != nil {
		return nil, err
	}
	s.collector = record.NewCollector(s.chain, c.clock.Now, last.Cursor.Boot, last.Cursor.After)
	if last.Anchor.Sealed {
		s.sealed = true
		return s, nil
	}
	klog.FromContext(ctx).V(2).Info("Resumed the claim's record", "entries", last.Anchor.Count, "segment", last.N, "boot", last.Cursor.Boot, "after", last.Cursor.After, "phase", s.phase)
	if err := c.appendGap(s, claim, c.resumedMessage(last)); err != nil {
		return nil, err
	}
	return s, nil
}

// storedSegments are the claim's stored segments that parse, in order, and the objects by
// segment number; one that does not parse is left out (Verify reports it).
func (c *Controller) storedSegments(ctx context.Context, claim *airlockv1alpha1.SandboxClaim) ([]recordstore.Segment, map[int]*airlockv1alpha1.SessionRecord, error) {
	srs, err := c.records.List(ctx, claim.Namespace, recordstore.LabelRecordOf+"="+string(claim.UID))
	if err != nil {
		return nil, nil, fmt.Errorf("listing the record's segments: %w", err)
	}
	segs := make([]recordstore.Segment, 0, len(srs))
	byN := map[int]*airlockv1alpha1.SessionRecord{}
	for i := range srs {
		if srs[i].Spec.ClaimUID != string(claim.UID) {
			continue
		}
		seg, err := recordstore.Parse(&srs[i])
		if err != nil {
			klog.FromContext(ctx).Info("Ignoring a segment of the record that does not parse", "sessionRecord", klog.KObj(&srs[i]), "err", err)
			continue
		}
		segs = append(segs, seg)
		byN[seg.N] = &srs[i]
	}
	slices.SortFunc(segs, func(a, b recordstore.Segment) int { return a.N - b.N })
	return segs, byN, nil
}

// replay takes what a stored segment says of the session: the usage so far (the seal's totals),
// the last phase recorded (so that it is not recorded twice, and the current phase is recorded
// again when it differs), and each gateway boot's last decision.
func (s *session) replay(seg recordstore.Segment) {
	for _, l := range seg.Lines {
		var e record.Entry
		if json.Unmarshal(l, &e) != nil {
			continue
		}
		s.usage.Observe(e)
		if e.Kind == record.KindClaimPhase {
			s.phase, s.reason = e.Phase, e.Reason
		}
		if e.Source == record.SourceGateway && e.Boot != "" {
			s.gwAfter[e.Boot] = max(s.gwAfter[e.Boot], e.SourceSeq)
		}
	}
}

// beginRecord starts a new chain for the claim: nothing stored, or a last segment without an
// anchor (not one this controller wrote: left as it is, the record starts after it, and Verify
// reports what it is). It begins with the gaps that say what it cannot hold: sandboxd's log
// when the operator cannot read it, and what came before a late start.
func (c *Controller) beginRecord(s *session, claim *airlockv1alpha1.SandboxClaim, signer *record.Signer, last *recordstore.Segment) error {
	var err error
	s.chain, err = record.NewChain(string(claim.UID), signer)
	if err != nil {
		return err
	}
	s.collector = record.NewCollector(s.chain, c.clock.Now, "", 0)
	s.phase, s.reason, s.usage = "", "", usage.Tracker{}
	if last != nil {
		s.storedSegments += last.Size()
		s.seg = recordstore.Segment{N: last.N + 1}
		s.segSR = nil
	}
	if !c.readSandboxes {
		if err := c.appendGap(s, claim, "sandboxd's log is not read: the operator has no ingress to sandboxes (--operator-pod-labels is unset); only the operator's entries are recorded"); err != nil {
			return err
		}
	}
	if msg := c.unrecordedStart(claim); msg != "" {
		return c.appendGap(s, claim, msg)
	}
	return nil
}

// appendGap appends an operator's record.gap entry with message.
func (c *Controller) appendGap(s *session, claim *airlockv1alpha1.SandboxClaim, message string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return c.appendOperatorLocked(s, claim, record.Entry{Kind: record.KindRecordGap, Message: message})
}

// unrecordedStart is the gap that begins a record this leader starts for a claim that was
// created before its term and has moved past Pending: a previous leader's entries of it, not yet
// stored when it was killed (within its first second), are unknown, and so are the phases the
// claim passed through before this leader saw it. "" when the record misses nothing it can tell.
func (c *Controller) unrecordedStart(claim *airlockv1alpha1.SandboxClaim) string {
	started := c.termStarted()
	phase := claim.Status.Phase
	if started.IsZero() || phase == "" || phase == airlockv1alpha1.ClaimPending || !claim.CreationTimestamp.Time.Before(started) {
		return ""
	}
	return fmt.Sprintf("no stored record of the claim was found, though it was created (%s) before this leader's term began (%s) and is %s already: "+
		"the phases it passed through before, and the entries a previous leader appended and had not stored, if any, are unknown",
		record.FormatTime(claim.CreationTimestamp.Time), record.FormatTime(started), phase)
}

// resumedMessage is the gap a new leader writes where it takes up a live record: the previous
// leader may have appended entries after the last one it stored and lost them with its memory.
// Nothing tells whether it had any, so the record says where it may have been cut, and what is
// read again (docs/record.md §2.5 Failover).
func (c *Controller) resumedMessage(last *recordstore.Segment) string {
	msg := fmt.Sprintf("a new leader resumed the record after entry %d, the last one the previous leader stored (its anchor of %s): "+
		"the operator's entries the previous leader appended after it and had not stored, if any, are unknown (the claim's phase is recorded again when it differs)",
		last.Anchor.Count, last.Anchor.Time)
	switch {
	case !c.readSandboxes:
	case last.Cursor.Boot == "":
		msg += "; sandboxd's entries are read again from the start of its log"
	default:
		msg += fmt.Sprintf("; sandboxd's entries are read again from its log, after source entry %d of boot %s", last.Cursor.After, last.Cursor.Boot)
	}
	return msg
}

// sooner is the earlier of two times to look again (nil: none).
func sooner(a, b *time.Duration) *time.Duration {
	if a == nil || (b != nil && *b < *a) {
		return b
	}
	return a
}
