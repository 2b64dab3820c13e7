package record

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/record"
	"github.com/airlock-dev/airlock/pkg/recordstore"
)

// flushIfDue stores the entries not yet stored when a batch is full, the record is sealed, or
// the first of them waited flushDelay; else it says when that will be. A phase waits as any
// entry does: a claim that binds within a second costs one write, not one per phase.
func (c *Controller) flushIfDue(ctx context.Context, s *session) (*time.Duration, error) {
	waited := c.waitedFor(s.claim.UID) // the claim controller waits for it (WaitStored)
	s.mu.Lock()
	n := len(s.pending)
	due := n >= batchEntries || s.sealed || waited
	wait := s.firstPending.Add(flushDelay).Sub(c.clock.Now())
	s.mu.Unlock()
	if n == 0 {
		if waited {
			c.releaseStoreWaiters(s.claim.UID)
		}
		return nil, nil
	}
	if !due && wait > 0 {
		return ptr.To(wait), nil
	}
	return nil, c.store(ctx, s)
}

// write is one segment to write and how many of the pending lines it takes.
type write struct {
	seg   recordstore.Segment
	taken int
	bytes int
}

// plan splits the pending lines onto the last stored segment and as many new ones as they need.
func plan(last recordstore.Segment, lines [][]byte) []write {
	cur := write{seg: recordstore.Segment{N: last.N, Lines: append([][]byte(nil), last.Lines...)}}
	var out []write
	for _, l := range lines {
		if !cur.seg.Fits(l) && len(cur.seg.Lines) > 0 {
			out = append(out, cur)
			cur = write{seg: recordstore.Segment{N: cur.seg.N + 1}}
		}
		cur.seg.Lines = append(cur.seg.Lines, l)
		cur.taken++
		cur.bytes += len(l) + 1
	}
	return append(out, cur)
}

// store writes the entries not yet stored: the last segment's Update, conditional on the
// resourceVersion last written or read, then a new segment for each that is full. Each segment
// written carries the anchor and the collector's cursor as of the entries it stores with it.
func (c *Controller) store(ctx context.Context, s *session) error {
	s.mu.Lock()
	lines := s.pending[:len(s.pending):len(s.pending)]
	if len(lines) == 0 { // nothing to store (a segment is never written empty: the CRD refuses it)
		s.mu.Unlock()
		return nil
	}
	anchor, err := s.chain.Anchor(c.clock.Now())
	if err != nil {
		s.mu.Unlock()
		return err
	}
	boot, after := s.collector.Cursor()
	last, lastSR := s.seg, s.segSR
	s.mu.Unlock()

	for _, w := range plan(last, lines) {
		w.seg.Anchor, w.seg.Cursor = &anchor, recordstore.Cursor{Boot: boot, After: after}
		written, err := c.writeSegment(ctx, s, w.seg, lastSR)
		if err != nil {
			return err
		}
		s.mu.Lock()
		if w.seg.N > s.seg.N {
			s.storedSegments += s.seg.Size()
		}
		s.seg, s.segSR, s.owners = recordstore.Segment{N: w.seg.N, Lines: w.seg.Lines}, written, written.OwnerReferences
		s.pending = s.pending[w.taken:]
		s.pendingBytes -= w.bytes
		if len(s.pending) > 0 {
			s.firstPending = c.clock.Now()
		}
		s.mu.Unlock()
		lastSR = written
	}
	s.mu.Lock()
	s.storedCount, s.storedHead = anchor.Count, anchor.Head
	resume := s.paused && s.pendingBytes <= maxPendingBytes/2
	stored := len(s.pending) == 0
	s.mu.Unlock()
	if resume {
		c.queue.Add(s.key)
	}
	if stored {
		c.releaseStoreWaiters(s.claim.UID)
	}
	klog.FromContext(ctx).V(4).Info("Stored the claim's record", "entries", anchor.Count, "sealed", anchor.Sealed)
	return nil
}

// writeSegment writes seg: an Update of the last stored segment (lastSR, when it is that one),
// else a Create (owned as the last segment is: the owner may have moved to a kept workspace).
// A segment deleted or created again by someone else is found here: the leader's own lines are
// written again, after a record.gap entry that says so (docs/record.md §2.4, the roll-back), at
// the next store.
func (c *Controller) writeSegment(ctx context.Context, s *session, seg recordstore.Segment, lastSR *airlockv1alpha1.SessionRecord) (*airlockv1alpha1.SessionRecord, error) {
	want, err := recordstore.SessionRecord(s.claim, seg)
	if err != nil {
		return nil, err
	}
	if lastSR != nil && lastSR.Name == want.Name {
		updated := lastSR.DeepCopy()
		updated.Spec = want.Spec
		written, err := c.records.Update(ctx, updated)
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return nil, c.changedUnder(ctx, s, lastSR, seg.N)
		}
		return written, err
	}
	recordstore.WithOwners(want, s.owners)
	written, err := c.records.Create(ctx, want)
	if !apierrors.IsAlreadyExists(err) {
		return written, err
	}
	// Ours, from a write whose answer was lost, or someone else's: read it.
	fresh, err := c.records.Get(ctx, want.Namespace, want.Name)
	if err != nil {
		return nil, err
	}
	if fresh.Spec.ClaimUID != want.Spec.ClaimUID || !strings.HasPrefix(want.Spec.Entries, fresh.Spec.Entries) {
		return nil, c.changedUnder(ctx, s, fresh, seg.N)
	}
	// Ours: what it holds is where this leader's lines start.
	if equality.Semantic.DeepEqual(fresh.Spec, want.Spec) {
		return fresh, nil
	}
	updated := fresh.DeepCopy()
	updated.Spec = want.Spec
	written, err = c.records.Update(ctx, updated)
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) || apierrors.IsInvalid(err) {
		// Invalid: the API server's rules refuse the leader's lines on it (a forged seal).
		return nil, c.changedUnder(ctx, s, fresh, seg.N)
	}
	return written, err
}

// changedUnder handles segment n, whose write found it changed or deleted. When only its
// metadata changed (the owner moved), the next store writes on its new resourceVersion. When it
// is gone, it is created again as this leader has it. When its content is not what this leader
// stored (deleted and created again by someone else, or appended to: the API server admits no
// other change of a segment), it is left as it is, and the leader's lines of it are written again
// in the next segment, where the entries not yet stored follow them. Either way a record.gap
// entry says so, and verify reports the segment. It returns a conflict, so that the claim is
// synced again.
func (c *Controller) changedUnder(ctx context.Context, s *session, sr *airlockv1alpha1.SessionRecord, n int) error {
	fresh, err := c.records.Get(ctx, sr.Namespace, sr.Name)
	if apierrors.IsNotFound(err) {
		fresh, err = nil, nil
	}
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	stored := n == s.seg.N && len(s.seg.Lines) > 0 // the leader had stored lines in segment n
	var msg string
	switch {
	case fresh == nil && !stored:
		return apierrors.NewConflict(airlockv1alpha1.Resource("sessionrecords"), sr.Name, fmt.Errorf("the segment went while it was read; writing again"))
	case fresh == nil:
		msg = fmt.Sprintf("segment %d of the stored record (SessionRecord %s) was deleted under the leader: written again as the leader had it", n, sr.Name)
		s.segSR = nil // created again, with the owners it had
	default:
		got, perr := recordstore.Parse(fresh)
		if stored && perr == nil && got.Anchor != nil && got.Anchor.Count == s.storedCount && got.Anchor.Head == s.storedHead && sameLines(got.Lines, s.seg.Lines) {
			s.segSR, s.owners = fresh, fresh.OwnerReferences // only its metadata changed (an owner moved)
			return apierrors.NewConflict(airlockv1alpha1.Resource("sessionrecords"), sr.Name, fmt.Errorf("the segment's metadata changed; writing again"))
		}
		count := uint64(0)
		if perr == nil && got.Anchor != nil {
			count = got.Anchor.Count
		}
		again := 0
		if stored {
			again = len(s.seg.Lines)
			if len(s.pending) == 0 {
				s.firstPending = c.clock.Now()
			}
			s.pending = append(slices.Clone(s.seg.Lines), s.pending...)
			s.pendingBytes += s.seg.Size()
		}
		msg = fmt.Sprintf("segment %d of the stored record (SessionRecord %s) was changed under the leader (its anchor counts %d entries, the leader had stored %d): left as it is; the leader's %d entries of it are written again in segment %d", n, sr.Name, count, s.storedCount, again, n+1)
		s.storedSegments += s.seg.Size()
		s.seg, s.segSR = recordstore.Segment{N: n + 1}, nil
	}
	klog.FromContext(ctx).Info("The stored record changed under the leader", "sessionRecord", klog.KObj(sr), "message", msg)
	if !s.sealed {
		if err := c.appendOperatorLocked(s, s.claim, record.Entry{Kind: record.KindRecordGap, Message: msg}); err != nil {
			return err
		}
	}
	return apierrors.NewConflict(airlockv1alpha1.Resource("sessionrecords"), sr.Name, fmt.Errorf("%s", msg))
}

func sameLines(a, b [][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}
