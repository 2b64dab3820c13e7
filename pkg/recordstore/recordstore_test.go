package recordstore

import (
	"bytes"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/record"
)

var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

func claim(name, uid string) *airlockv1alpha1.SandboxClaim {
	return &airlockv1alpha1.SandboxClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name, UID: types.UID(uid)}}
}

// segments stores a sealed record of n tool calls in segments of per entries, as the leader
// would, and returns them and the signer's keys.
func segments(t *testing.T, c *airlockv1alpha1.SandboxClaim, n, per int) ([]*airlockv1alpha1.SessionRecord, record.Keys) {
	t.Helper()
	priv, _ := record.SigningKey(bytes.Repeat([]byte{5}, 32))
	s, _ := record.NewSigner(priv)
	chain, _ := record.NewChain(string(c.UID), s)
	var cms []*airlockv1alpha1.SessionRecord
	seg := Segment{}
	flush := func(a record.Anchor) {
		seg.Anchor = &a
		cm, err := SessionRecord(c, seg)
		if err != nil {
			t.Fatal(err)
		}
		cms = append(cms, cm)
	}
	for i := range n {
		e, err := chain.Append(record.Entry{Time: record.FormatTime(t0), Source: record.SourceSandboxd, Boot: "b1", SourceSeq: uint64(i + 1), Kind: record.KindToolCall, Tool: "Read", Status: record.StatusOK})
		if err != nil {
			t.Fatal(err)
		}
		line, _ := e.Line()
		seg.Lines = append(seg.Lines, line)
		seg.Cursor = Cursor{Boot: "b1", After: uint64(i + 1)}
		if len(seg.Lines) == per {
			a, _ := chain.Anchor(t0)
			flush(a)
			seg = Segment{N: seg.N + 1, Cursor: seg.Cursor}
		}
	}
	e, a, _ := chain.Seal(t0, nil)
	line, _ := e.Line()
	seg.Lines = append(seg.Lines, line)
	flush(a)
	return cms, record.NewKeys(s.Public())
}

func verify(t *testing.T, cms []*airlockv1alpha1.SessionRecord, keys record.Keys, uid string) (record.Report, Cursor) {
	t.Helper()
	var b bytes.Buffer
	cur, err := Export(cms, &b)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := record.Verify(&b, keys, record.Options{Claim: uid})
	if err != nil {
		t.Fatal(err)
	}
	return rep, cur
}

func TestStoredSegmentsExportAnIntactRecord(t *testing.T) {
	c := claim("rt-0123456789", "uid-1")
	cms, keys := segments(t, c, 7, 3)
	if len(cms) != 3 || cms[0].Name != Name("rt-0123456789", "uid-1", 0) || !strings.HasPrefix(cms[0].Name, "rt-0123456789-record-") ||
		Name("rt-0123456789", "uid-2", 0) == cms[0].Name || cms[2].Labels[LabelRecordOf] != "uid-1" || cms[2].Spec.ClaimUID != "uid-1" || cms[2].Spec.Segment != 2 ||
		cms[1].OwnerReferences[0].UID != "uid-1" || cms[1].OwnerReferences[0].Kind != "SandboxClaim" {
		t.Fatalf("segments %+v", cms)
	}
	// Read back in any order.
	rep, cur := verify(t, []*airlockv1alpha1.SessionRecord{cms[2], cms[0], cms[1]}, keys, "uid-1")
	if !rep.Intact() || !rep.Sealed || rep.Entries != 8 {
		t.Fatalf("%s: %v", rep.Verdict(), rep.Findings)
	}
	if cur != (Cursor{Boot: "b1", After: 7}) {
		t.Errorf("cursor %+v", cur)
	}
}

func TestDeletedSegmentIsReportedMissing(t *testing.T) {
	c := claim("rt-0123456789", "uid-1")
	cms, keys := segments(t, c, 7, 3)
	rep, _ := verify(t, []*airlockv1alpha1.SessionRecord{cms[0], cms[2]}, keys, "uid-1")
	if !rep.Has(record.ProblemDropped, 4) {
		t.Fatalf("a deleted middle segment: %v", rep.Findings)
	}
	// The last segment deleted: what remains is intact under the earlier segment's anchor, but
	// not sealed: the verdict says the record is live or was cut (docs/record.md §2.4).
	rep, _ = verify(t, cms[:2], keys, "uid-1")
	if rep.Sealed || !rep.Intact() || !strings.Contains(rep.Verdict(), "cut after entry 6") {
		t.Fatalf("the last segment deleted: %s %v", rep.Verdict(), rep.Findings)
	}
}

func TestEditedSegmentIsReported(t *testing.T) {
	c := claim("rt-0123456789", "uid-1")
	cms, keys := segments(t, c, 7, 3)
	// A segment deleted and created again with an altered entry (the API server refuses the
	// edit of a stored entry, not a deletion and a creation: docs/record.md §2.5).
	cms[1].Spec.Entries = strings.Replace(cms[1].Spec.Entries, `"tool":"Read"`, `"tool":"Grep"`, 1)
	rep, _ := verify(t, cms, keys, "uid-1")
	if !rep.Has(record.ProblemEdited, 4) {
		t.Fatalf("an edited entry in a stored segment: %v", rep.Findings)
	}
}

func TestExportRefusesMixedOrDuplicateSegments(t *testing.T) {
	a, _ := segments(t, claim("rt-a", "uid-a"), 2, 5)
	b, _ := segments(t, claim("rt-b", "uid-b"), 2, 5)
	if _, err := Export([]*airlockv1alpha1.SessionRecord{a[0], b[0]}, &bytes.Buffer{}); err == nil {
		t.Error("segments of two claims were exported as one record")
	}
	if _, err := Export([]*airlockv1alpha1.SessionRecord{a[0], a[0]}, &bytes.Buffer{}); err == nil {
		t.Error("two segments of one number were exported")
	}
}

func TestSegmentBoundsAndOwnerMove(t *testing.T) {
	s := Segment{Lines: [][]byte{bytes.Repeat([]byte("x"), MaxSegmentBytes-10)}}
	if s.Fits(make([]byte, 9)) || !s.Fits(make([]byte, 8)) {
		t.Errorf("Fits at the bound: size %d", s.Size())
	}
	if _, err := SessionRecord(claim("c", "u"), Segment{N: MaxSegments}); err == nil {
		t.Error("a segment past the bound was built")
	}
	cms, _ := segments(t, claim("c", "u"), 1, 5)
	yes := true
	moved := OwnedBy(cms[0], metav1.OwnerReference{APIVersion: "batch/v1", Kind: "Job", Name: "airlock-kept-1", UID: "job-uid", Controller: &yes})
	if len(moved.OwnerReferences) != 1 || moved.OwnerReferences[0].UID != "job-uid" || moved.OwnerReferences[0].Controller != nil ||
		cms[0].OwnerReferences[0].UID != "u" {
		t.Errorf("moved %+v, original %+v", moved.OwnerReferences, cms[0].OwnerReferences)
	}
}
