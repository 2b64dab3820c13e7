// Package recordstore is what a stored session record is (docs/record.md §2.5), as pure
// functions: the SessionRecord segments of a claim's record (their names, labels, owner, the
// entries, the anchor and the collector's cursor in each), and the export that reassembles them
// for record.Verify. No clients: the leader writes what it builds, the CLI reads what it parses.
package recordstore

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/record"
)

const (
	// LabelRecordOf is the UID of the claim whose record a segment holds (the label the leader
	// lists a record's segments by).
	LabelRecordOf = "airlock.dev/record-of"
	// LabelRecordClaim is that claim's name (a claim of the same name later is another record):
	// the label `airlock record CLAIM` lists by.
	LabelRecordClaim = "airlock.dev/record-claim"
	// LabelRecordOwner is the UID of the segment's owner (its claim, a kept workspace's Job, the
	// claim that resumed it), written with the owner reference: a move lists only the segments it
	// moves (OwnerSelector), not every record of the namespace with their entries.
	LabelRecordOwner = "airlock.dev/record-owner"

	// MaxSegmentBytes bounds a segment's entries, far below the API server's object limit (the
	// CRD's maxLength of spec.entries is the same).
	MaxSegmentBytes = 512 << 10
	// MaxSegments bounds a claim's record (32 MiB; the CRD's maximum of spec.segment is 63).
	MaxSegments = 64
)

// Cursor is where the collector stood: the boot of the sandbox's log and the last source_seq
// taken (record.Collector's Cursor), so that a new leader reads on from there.
type Cursor struct {
	Boot  string `json:"boot"`
	After uint64 `json:"after"`
}

// Segment is one stored piece of a record.
type Segment struct {
	N      int
	Lines  [][]byte // canonical entry lines (record.Entry.Line)
	Anchor *record.Anchor
	Cursor Cursor
}

// Size is the bytes of the segment's entries as stored.
func (s Segment) Size() int {
	n := 0
	for _, l := range s.Lines {
		n += len(l) + 1
	}
	return n
}

// Fits says whether line may join the segment, or a new segment must take it.
func (s Segment) Fits(line []byte) bool { return s.Size()+len(line)+1 <= MaxSegmentBytes }

// Name is the name of segment n of the record of the claim claimName with uid: the UID is in it,
// because a claim of the same name later (a resume: the same session and handle) keeps a record
// of its own while the earlier one is still kept.
func Name(claimName string, uid types.UID, n int) string {
	sum := sha256.Sum256([]byte(uid))
	return claimName + "-record-" + hex.EncodeToString(sum[:])[:8] + "-" + strconv.Itoa(n)
}

// SessionRecord is segment s of the claim's record, owned by the claim (not as its controller:
// the owner moves to the kept workspace's Job when the claim's workspace is kept).
func SessionRecord(claim *airlockv1alpha1.SandboxClaim, s Segment) (*airlockv1alpha1.SessionRecord, error) {
	if s.N < 0 || s.N >= MaxSegments {
		return nil, fmt.Errorf("segment %d of claim %s/%s: a record has segments 0 to %d", s.N, claim.Namespace, claim.Name, MaxSegments-1)
	}
	if s.Cursor.After > math.MaxInt64 {
		return nil, fmt.Errorf("segment %d of claim %s/%s: cursor %d out of range", s.N, claim.Namespace, claim.Name, s.Cursor.After)
	}
	spec := airlockv1alpha1.SessionRecordSpec{
		ClaimUID:  string(claim.UID),
		ClaimName: claim.Name,
		Segment:   int32(s.N),
		Entries:   string(joinLines(s.Lines)),
	}
	if s.Cursor != (Cursor{}) {
		spec.Cursor = &airlockv1alpha1.SessionRecordCursor{Boot: s.Cursor.Boot, After: int64(s.Cursor.After)}
	}
	if a := s.Anchor; a != nil {
		if a.Count > math.MaxInt64 {
			return nil, fmt.Errorf("segment %d of claim %s/%s: anchor count %d out of range", s.N, claim.Namespace, claim.Name, a.Count)
		}
		spec.Anchor = &airlockv1alpha1.SessionRecordAnchor{V: int32(a.V), Claim: a.Claim, Count: int64(a.Count), Head: a.Head,
			Sealed: a.Sealed, Time: a.Time, Key: a.Key, Sig: a.Sig}
	}
	return &airlockv1alpha1.SessionRecord{
		ObjectMeta: metav1.ObjectMeta{
			Name:      Name(claim.Name, claim.UID, s.N),
			Namespace: claim.Namespace,
			Labels:    map[string]string{LabelRecordOf: string(claim.UID), LabelRecordClaim: claim.Name, LabelRecordOwner: string(claim.UID)},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: airlockv1alpha1.SchemeGroupVersion.String(), Kind: "SandboxClaim", Name: claim.Name, UID: claim.UID,
			}},
		},
		Spec: spec,
	}, nil
}

func joinLines(lines [][]byte) []byte {
	var b bytes.Buffer
	for _, l := range lines {
		b.Write(l)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// Parse reads a segment back.
func Parse(sr *airlockv1alpha1.SessionRecord) (Segment, error) {
	if sr.Spec.Segment < 0 {
		return Segment{}, fmt.Errorf("SessionRecord %s/%s: segment %d", sr.Namespace, sr.Name, sr.Spec.Segment)
	}
	s := Segment{N: int(sr.Spec.Segment)}
	if c := sr.Spec.Cursor; c != nil {
		s.Cursor = Cursor{Boot: c.Boot, After: uint64(max(c.After, 0))}
	}
	if a := sr.Spec.Anchor; a != nil {
		s.Anchor = &record.Anchor{V: int(a.V), Claim: a.Claim, Count: uint64(max(a.Count, 0)), Head: a.Head, Sealed: a.Sealed,
			Time: a.Time, Key: a.Key, Sig: a.Sig}
	}
	for l := range bytes.SplitSeq([]byte(sr.Spec.Entries), []byte("\n")) {
		if len(l) > 0 {
			s.Lines = append(s.Lines, l)
		}
	}
	return s, nil
}

// Export writes the record held by srs (one claim's segments, in any order) as JSON lines for
// record.Verify: every segment's entries in segment order, then the anchor of the last segment.
// Segments of several claims, or two of one number, are an error; a missing segment is not
// (Verify says which entries are missing). It returns the last segment's cursor.
func Export(srs []*airlockv1alpha1.SessionRecord, w io.Writer) (Cursor, error) {
	segs := make([]Segment, 0, len(srs))
	uid := ""
	for _, sr := range srs {
		if u := sr.Spec.ClaimUID; uid == "" {
			uid = u
		} else if u != uid {
			return Cursor{}, fmt.Errorf("segments of two claims' records (%s and %s)", uid, u)
		}
		s, err := Parse(sr)
		if err != nil {
			return Cursor{}, err
		}
		segs = append(segs, s)
	}
	slices.SortFunc(segs, func(a, b Segment) int { return a.N - b.N })
	for i := 1; i < len(segs); i++ {
		if segs[i].N == segs[i-1].N {
			return Cursor{}, fmt.Errorf("two segments numbered %d", segs[i].N)
		}
	}
	var entries []byte
	for _, s := range segs {
		entries = append(entries, joinLines(s.Lines)...)
	}
	if _, err := w.Write(entries); err != nil {
		return Cursor{}, err
	}
	if len(segs) == 0 {
		return Cursor{}, nil
	}
	last := segs[len(segs)-1]
	if last.Anchor != nil {
		if err := record.WriteJSONL(w, nil, last.Anchor); err != nil {
			return Cursor{}, err
		}
	}
	return last.Cursor, nil
}

// OwnedBy returns a copy of sr owned by owner alone: the record moves to the kept workspace's
// Job when the claim's workspace is kept, and to the resuming claim before a resume deletes that
// Job (docs/record.md §2.5).
func OwnedBy(sr *airlockv1alpha1.SessionRecord, owner metav1.OwnerReference) *airlockv1alpha1.SessionRecord {
	out := sr.DeepCopy()
	owner.Controller, owner.BlockOwnerDeletion = nil, nil
	out.OwnerReferences = []metav1.OwnerReference{owner}
	if out.Labels == nil {
		out.Labels = map[string]string{}
	}
	out.Labels[LabelRecordOwner] = string(owner.UID)
	return out
}

// WithOwners sets sr's owner references to owners (those of the segment before it: the owner
// may have moved to a kept workspace) and its LabelRecordOwner to the first one's UID.
func WithOwners(sr *airlockv1alpha1.SessionRecord, owners []metav1.OwnerReference) {
	if len(owners) == 0 {
		return
	}
	sr.OwnerReferences = owners
	if sr.Labels == nil {
		sr.Labels = map[string]string{}
	}
	sr.Labels[LabelRecordOwner] = string(owners[0].UID)
}

// OwnerSelectors are the label selectors of the segments owned by uid: those labelled with it,
// and those written before LabelRecordOwner existed (unlabelled: the caller checks their owner
// references), which are labelled when they are moved.
func OwnerSelectors(uid types.UID) []string {
	return []string{LabelRecordOwner + "=" + string(uid), LabelRecordOf + ",!" + LabelRecordOwner}
}
