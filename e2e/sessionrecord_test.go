//go:build e2e

package e2e

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/recordstore"
)

// TestSessionRecordIsAppendOnly (API-only): the SessionRecord CRD's validation rules, enforced by
// the API server for every writer (here the suite's administrator, whom no admission policy
// holds): a segment's claim and number never change, its entries only grow by appending (an
// update that rewrites or drops an earlier entry is refused, an append of up to the segment's
// 512 KiB is admitted: the rules' cost fits), its anchor is never removed nor counts fewer
// entries, and a sealed segment never changes but for its metadata (its owner moves to a kept
// workspace after the seal). What the rules cannot stop, and `airlock record verify` must find:
// a deletion, and a segment created again with altered entries (TestRecordOfAClaim).
func TestSessionRecordIsAppendOnly(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns := newNamespace(t, "airlock-srec")
	srs := airlockClient.AirlockV1alpha1().SessionRecords(ns)
	claim := &airlockv1alpha1.SandboxClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "c1", UID: "0f0e0d0c-0000-4000-8000-000000000001"}}
	line := func(seq int) string { return `{"v":1,"seq":` + strconv.Itoa(seq) + `,"kind":"tool.call"}` + "\n" }
	anchor := func(count int64, sealed bool) *airlockv1alpha1.SessionRecordAnchor {
		return &airlockv1alpha1.SessionRecordAnchor{V: 1, Claim: string(claim.UID), Count: count, Head: strings.Repeat("a", 64), Sealed: sealed,
			Time: "2026-12-06T05:00:00Z", Key: "k1", Sig: "c2ln"}
	}
	seg, err := recordstore.SessionRecord(claim, recordstore.Segment{N: 0, Lines: [][]byte{[]byte(strings.TrimSuffix(line(1), "\n"))}})
	if err != nil {
		t.Fatal(err)
	}
	seg.OwnerReferences = nil // no owner the garbage collector would look for
	seg.Spec.Anchor = anchor(1, false)
	stored, err := srs.Create(ctx, seg, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating a segment: %v", err)
	}
	update := func(mutate func(*airlockv1alpha1.SessionRecord)) error {
		sr := stored.DeepCopy()
		mutate(sr)
		got, err := srs.Update(ctx, sr, metav1.UpdateOptions{})
		if err == nil {
			stored = got
		}
		return err
	}
	refused := map[string]struct {
		mutate func(*airlockv1alpha1.SessionRecord)
		want   string
	}{
		"an earlier entry rewritten": {func(sr *airlockv1alpha1.SessionRecord) {
			sr.Spec.Entries = strings.Replace(sr.Spec.Entries, "tool.call", "tool.cal!", 1) + line(2)
		}, "entries are append-only"},
		"an entry dropped":       {func(sr *airlockv1alpha1.SessionRecord) { sr.Spec.Entries = line(2) }, "entries are append-only"},
		"the claim's UID":        {func(sr *airlockv1alpha1.SessionRecord) { sr.Spec.ClaimUID = "another" }, "claimUID is immutable"},
		"the claim's name":       {func(sr *airlockv1alpha1.SessionRecord) { sr.Spec.ClaimName = "another" }, "claimName is immutable"},
		"the segment's number":   {func(sr *airlockv1alpha1.SessionRecord) { sr.Spec.Segment = 1 }, "segment is immutable"},
		"the anchor removed":     {func(sr *airlockv1alpha1.SessionRecord) { sr.Spec.Anchor = nil }, "anchor is never removed"},
		"the anchor rolled back": {func(sr *airlockv1alpha1.SessionRecord) { sr.Spec.Anchor.Count = 0 }, "never counts fewer entries"},
	}
	for name, tc := range refused {
		if err := update(tc.mutate); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want refused: %s", name, err, tc.want)
		}
	}

	// Appended, up to the segment's bound: admitted.
	if err := update(func(sr *airlockv1alpha1.SessionRecord) {
		sr.Spec.Entries += line(2)
		sr.Spec.Anchor = anchor(2, false)
	}); err != nil {
		t.Fatalf("an append: %v, want admitted", err)
	}
	// Another segment, appended to its bound.
	full := seg.DeepCopy()
	full.Name, full.Spec.Segment = recordstore.Name(claim.Name, claim.UID, 1), 1
	fullStored, err := srs.Create(ctx, full, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fullStored.Spec.Entries += strings.Repeat("x", recordstore.MaxSegmentBytes-len(fullStored.Spec.Entries)-1) + "\n"
	if fullStored, err = srs.Update(ctx, fullStored, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("an append to 512 KiB: %v, want admitted", err)
	}
	fullStored.Spec.Entries += "x\n"
	if _, err := srs.Update(ctx, fullStored, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) {
		t.Errorf("an append past 512 KiB: %v, want refused", err)
	}

	// Sealed: nothing appended, the anchor unchanged; the metadata (the owner's move) still can.
	if err := update(func(sr *airlockv1alpha1.SessionRecord) { sr.Spec.Anchor = anchor(3, true) }); err != nil {
		t.Fatalf("the seal: %v, want admitted", err)
	}
	for name, mutate := range map[string]func(*airlockv1alpha1.SessionRecord){
		"an append after the seal":         func(sr *airlockv1alpha1.SessionRecord) { sr.Spec.Entries += line(4) },
		"the sealed anchor changed":        func(sr *airlockv1alpha1.SessionRecord) { sr.Spec.Anchor.Time = "2026-12-06T06:00:00Z" },
		"the seal taken off":               func(sr *airlockv1alpha1.SessionRecord) { sr.Spec.Anchor.Sealed = false },
		"a sealed anchor that counts more": func(sr *airlockv1alpha1.SessionRecord) { sr.Spec.Anchor.Count = 9 },
	} {
		if err := update(mutate); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "a sealed segment never changes") {
			t.Errorf("%s: %v, want refused: a sealed segment never changes", name, err)
		}
	}
	if err := update(func(sr *airlockv1alpha1.SessionRecord) { sr.Labels["moved"] = "true" }); err != nil {
		t.Errorf("a sealed segment's metadata: %v, want admitted", err)
	}

	// What the rules do not stop (defence in depth): deleted and created again, altered.
	if err := srs.Delete(ctx, stored.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	again := stored.DeepCopy()
	again.ResourceVersion, again.UID = "", ""
	again.Spec.Entries = strings.Replace(again.Spec.Entries, "tool.call", "tool.cal!", 1)
	if _, err := srs.Create(ctx, again, metav1.CreateOptions{}); err != nil {
		t.Errorf("a segment created again, altered: %v (the rules hold updates only; verify finds this)", err)
	}
}
