// Package recordstore is what a stored session record is (docs/record.md §2.5), as pure
// functions: the ConfigMap segments of a claim's record (their names, labels, owner, the entries,
// the anchor and the collector's cursor in each), and the export that reassembles them for
// record.Verify. No clients: the leader writes what it builds, the CLI reads what it parses.
package recordstore

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/record"
)

const (
	// LabelRecordOf is the UID of the claim whose record a segment holds.
	LabelRecordOf = "airlock.dev/record-of"
	// LabelRecordClaim is that claim's name (a claim of the same name later is another record).
	LabelRecordClaim = "airlock.dev/record-claim"
	// AnnotationSegment is the segment's number, from 0.
	AnnotationSegment = "airlock.dev/record-segment"

	// KeyEntries holds the segment's entries, one canonical line each; KeyAnchor the record's
	// anchor as of the segment's last write; KeyCursor where the collector stood then.
	KeyEntries = "entries.jsonl"
	KeyAnchor  = "anchor.json"
	KeyCursor  = "cursor.json"

	// MaxSegmentBytes bounds a segment's entries, far below the API server's object limit.
	MaxSegmentBytes = 512 << 10
	// MaxSegments bounds a claim's record (32 MiB).
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

// ConfigMap is segment s of the claim's record, owned by the claim (not as its controller: the
// owner moves to the kept workspace's Job when the claim's workspace is kept).
func ConfigMap(claim *airlockv1alpha1.SandboxClaim, s Segment) (*corev1.ConfigMap, error) {
	if s.N < 0 || s.N >= MaxSegments {
		return nil, fmt.Errorf("segment %d of claim %s/%s: a record has segments 0 to %d", s.N, claim.Namespace, claim.Name, MaxSegments-1)
	}
	var entries bytes.Buffer
	for _, l := range s.Lines {
		entries.Write(l)
		entries.WriteByte('\n')
	}
	data := map[string]string{KeyEntries: entries.String()}
	cursor, err := json.Marshal(s.Cursor)
	if err != nil {
		return nil, err
	}
	data[KeyCursor] = string(cursor)
	if s.Anchor != nil {
		a, err := json.Marshal(s.Anchor)
		if err != nil {
			return nil, err
		}
		data[KeyAnchor] = string(a)
	}
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name:        Name(claim.Name, claim.UID, s.N),
			Namespace:   claim.Namespace,
			Labels:      map[string]string{LabelRecordOf: string(claim.UID), LabelRecordClaim: claim.Name},
			Annotations: map[string]string{AnnotationSegment: strconv.Itoa(s.N)},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: airlockv1alpha1.SchemeGroupVersion.String(), Kind: "SandboxClaim", Name: claim.Name, UID: claim.UID,
			}},
		},
		Data: data,
	}, nil
}

// Parse reads a segment back.
func Parse(cm *corev1.ConfigMap) (Segment, error) {
	n, err := strconv.Atoi(cm.Annotations[AnnotationSegment])
	if err != nil || n < 0 {
		return Segment{}, fmt.Errorf("ConfigMap %s/%s: no segment number (annotation %s)", cm.Namespace, cm.Name, AnnotationSegment)
	}
	s := Segment{N: n}
	if c := cm.Data[KeyCursor]; c != "" {
		if err := json.Unmarshal([]byte(c), &s.Cursor); err != nil {
			return Segment{}, fmt.Errorf("ConfigMap %s/%s: cursor: %w", cm.Namespace, cm.Name, err)
		}
	}
	if a := cm.Data[KeyAnchor]; a != "" {
		s.Anchor = &record.Anchor{}
		if err := json.Unmarshal([]byte(a), s.Anchor); err != nil {
			return Segment{}, fmt.Errorf("ConfigMap %s/%s: anchor: %w", cm.Namespace, cm.Name, err)
		}
	}
	for l := range bytes.SplitSeq([]byte(cm.Data[KeyEntries]), []byte("\n")) {
		if len(l) > 0 {
			s.Lines = append(s.Lines, l)
		}
	}
	return s, nil
}

// Export writes the record held by cms (one claim's segments, in any order) as JSON lines for
// record.Verify: every segment's entries in segment order, then the anchor of the last segment.
// Segments of several claims, or two of one number, are an error; a missing segment is not
// (Verify says which entries are missing). It returns the last segment's cursor.
func Export(cms []*corev1.ConfigMap, w io.Writer) (Cursor, error) {
	segs := make([]Segment, 0, len(cms))
	uid := ""
	for _, cm := range cms {
		if u := cm.Labels[LabelRecordOf]; uid == "" {
			uid = u
		} else if u != uid {
			return Cursor{}, fmt.Errorf("segments of two claims' records (%s and %s)", uid, u)
		}
		s, err := Parse(cm)
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
		for _, l := range s.Lines {
			entries = append(append(entries, l...), '\n')
		}
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

// OwnedBy returns a copy of cm owned by owner alone: the record moves to the kept workspace's
// Job when the claim's workspace is kept, and to the resuming claim before a resume deletes that
// Job (docs/record.md §2.5).
func OwnedBy(cm *corev1.ConfigMap, owner metav1.OwnerReference) *corev1.ConfigMap {
	out := cm.DeepCopy()
	owner.Controller, owner.BlockOwnerDeletion = nil, nil
	out.OwnerReferences = []metav1.OwnerReference{owner}
	return out
}
