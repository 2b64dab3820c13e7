package record

import (
	"bytes"
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/airlock-dev/airlock/pkg/record"
	"github.com/airlock-dev/airlock/pkg/recordstore"
)

// flushIfDue stores the entries not yet stored when a batch is full, a phase changed, the
// record is sealed, or the first of them waited flushDelay; else it says when that will be.
func (c *Controller) flushIfDue(ctx context.Context, s *session) (*time.Duration, error) {
	s.mu.Lock()
	n := len(s.pending)
	due := n >= batchEntries || s.phaseChanged || s.sealed
	wait := s.firstPending.Add(flushDelay).Sub(c.clock.Now())
	s.mu.Unlock()
	if n == 0 {
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
	if len(lines) == 0 && s.segCM != nil {
		s.mu.Unlock()
		return nil
	}
	anchor, err := s.chain.Anchor(c.clock.Now())
	if err != nil {
		s.mu.Unlock()
		return err
	}
	boot, after := s.collector.Cursor()
	last, lastCM := s.seg, s.segCM
	s.mu.Unlock()

	for _, w := range plan(last, lines) {
		w.seg.Anchor, w.seg.Cursor = &anchor, recordstore.Cursor{Boot: boot, After: after}
		written, err := c.writeSegment(ctx, s, w.seg, lastCM)
		if err != nil {
			return err
		}
		s.mu.Lock()
		if w.seg.N > s.seg.N {
			s.storedSegments += s.seg.Size()
		}
		s.seg, s.segCM, s.owners = recordstore.Segment{N: w.seg.N, Lines: w.seg.Lines}, written, written.OwnerReferences
		s.pending = s.pending[w.taken:]
		s.pendingBytes -= w.bytes
		if len(s.pending) > 0 {
			s.firstPending = c.clock.Now()
		}
		s.mu.Unlock()
		lastCM = written
	}
	s.mu.Lock()
	s.storedCount, s.storedHead, s.phaseChanged = anchor.Count, anchor.Head, false
	resume := s.paused && s.pendingBytes <= maxPendingBytes/2
	s.mu.Unlock()
	if resume {
		c.queue.Add(s.key)
	}
	klog.FromContext(ctx).V(4).Info("Stored the claim's record", "entries", anchor.Count, "sealed", anchor.Sealed)
	return nil
}

// writeSegment writes seg: an Update of the last stored segment (lastCM, when it is that one),
// else a Create (owned as the last segment is: the owner may have moved to a kept workspace).
// A segment changed or deleted by someone else is found here: its own lines are written again,
// after a record.gap entry that says so (docs/record.md §2.4, the roll-back), at the next store.
func (c *Controller) writeSegment(ctx context.Context, s *session, seg recordstore.Segment, lastCM *corev1.ConfigMap) (*corev1.ConfigMap, error) {
	want, err := recordstore.ConfigMap(s.claim, seg)
	if err != nil {
		return nil, err
	}
	if lastCM != nil && lastCM.Name == want.Name {
		updated := lastCM.DeepCopy()
		updated.Data, updated.BinaryData = want.Data, nil
		written, err := c.configMaps.Update(ctx, updated)
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return nil, c.changedUnder(ctx, s, lastCM)
		}
		return written, err
	}
	if len(s.owners) > 0 {
		want.OwnerReferences = s.owners
	}
	written, err := c.configMaps.Create(ctx, want)
	if !apierrors.IsAlreadyExists(err) {
		return written, err
	}
	// Ours, from a write whose answer was lost, or someone else's: read it.
	fresh, err := c.configMaps.Get(ctx, want.Namespace, want.Name)
	if err != nil {
		return nil, err
	}
	if bytes.Equal([]byte(fresh.Data[recordstore.KeyAnchor]), []byte(want.Data[recordstore.KeyAnchor])) {
		return fresh, nil
	}
	return nil, c.changedUnder(ctx, s, fresh)
}

// changedUnder handles a segment whose write found it changed or deleted: when only its metadata
// changed (the owner moved), the next store writes on its new resourceVersion; when its content
// changed, or it is gone, a record.gap entry says so and the next store writes it again as this
// leader has it. It returns a conflict, so that the claim is synced again.
func (c *Controller) changedUnder(ctx context.Context, s *session, cm *corev1.ConfigMap) error {
	fresh, err := c.configMaps.Get(ctx, cm.Namespace, cm.Name)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var msg string
	switch {
	case fresh == nil:
		msg = fmt.Sprintf("segment %d of the stored record (ConfigMap %s) was deleted under the leader: written again as the leader had it", s.seg.N, cm.Name)
		s.segCM = nil // created again, with the owners it had
	default:
		got, perr := recordstore.Parse(fresh)
		if perr == nil && got.Anchor != nil && got.Anchor.Count == s.storedCount && got.Anchor.Head == s.storedHead && sameLines(got.Lines, s.seg.Lines) {
			s.segCM, s.owners = fresh, fresh.OwnerReferences // only its metadata changed (an owner moved)
			return apierrors.NewConflict(corev1Resource, cm.Name, fmt.Errorf("the segment's metadata changed; writing again"))
		}
		count := uint64(0)
		if perr == nil && got.Anchor != nil {
			count = got.Anchor.Count
		}
		s.owners = fresh.OwnerReferences
		msg = fmt.Sprintf("segment %d of the stored record (ConfigMap %s) was changed under the leader (its anchor counts %d entries, the leader had stored %d): written again as the leader had it", s.seg.N, cm.Name, count, s.storedCount)
		s.segCM = fresh
	}
	klog.FromContext(ctx).Info("The stored record changed under the leader", "configMap", klog.KObj(cm), "message", msg)
	if !s.sealed {
		if err := c.appendOperatorLocked(s, s.claim, record.Entry{Kind: record.KindRecordGap, Message: msg}); err != nil {
			return err
		}
	}
	return apierrors.NewConflict(corev1Resource, cm.Name, fmt.Errorf("%s", msg))
}

var corev1Resource = corev1.Resource("configmaps")

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
