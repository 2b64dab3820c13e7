package record

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/record"
	"github.com/airlock-dev/airlock/pkg/recordstore"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
	"github.com/airlock-dev/airlock/pkg/usage"
)

// TestASessionIsRecordedStoredAndSealed: a claim's phases and its sandboxd's log end up in the
// stored record, in order, sealed once the claim ended, and the record verifies intact and sealed.
func TestASessionIsRecordedStoredAndSealed(t *testing.T) {
	f := newFixture(t, nil, nil)
	claim := newClaim(airlockv1alpha1.ClaimBound)
	f.follower.boot = "b1"
	f.follower.lines["b1"] = [][]byte{
		sandboxdLine(t, "b1", 1, record.KindSandboxBoot),
		sandboxdLine(t, "b1", 2, record.KindToolCall),
		sandboxdLine(t, "b1", 3, record.KindSandboxStopped),
	}
	_ = f.claims.Add(claim)
	_ = f.pods.Add(runningPod(claim))
	f.sync(claim) // the phase, and what the read took, wait flushDelay
	f.sync(claim)
	if got := f.follower.calls; len(got) != 1 || got[0] != "http://10.0.0.7:8080  after 0" {
		t.Fatalf("reads = %q, want one from the start at the pod's address", got)
	}

	reaping := claim.DeepCopy()
	reaping.Status.Phase, reaping.Status.Reason, reaping.ResourceVersion = airlockv1alpha1.ClaimReaping, "Idle", "2"
	_ = f.claims.Update(reaping)
	_ = f.pods.Delete(runningPod(claim))
	if requeue := f.sync(reaping); requeue != nil {
		t.Fatalf("requeue = %v after the seal, want none", *requeue)
	}
	rep, entries := f.export()
	if !rep.Intact() || !rep.Sealed {
		t.Fatalf("verdict %q, findings %v; want intact and sealed", rep.Verdict(), rep.Findings)
	}
	want := "claim.phase:Bound sandbox.boot tool.call sandbox.stopped claim.phase:Reaping record.sealed"
	if got := kinds(entries); got != want {
		t.Errorf("entries = %q, want %q", got, want)
	}
	if len(f.observed) != len(entries) {
		t.Errorf("the observer saw %d entries, the record holds %d", len(f.observed), len(entries))
	}
	// Sealed and stored: nothing more is written, nothing is read again.
	f.sync(reaping)
	if len(f.follower.calls) != 1 {
		t.Errorf("reads after the seal: %q", f.follower.calls)
	}
}

// TestABatchWaitsOneSecond: the phase and sandboxd's entries are stored one second after the
// first of them, not at once.
func TestABatchWaitsOneSecond(t *testing.T) {
	f := newFixture(t, nil, nil)
	claim := newClaim(airlockv1alpha1.ClaimBound)
	f.follower.boot = "b1"
	f.follower.lines["b1"] = [][]byte{sandboxdLine(t, "b1", 1, record.KindSandboxBoot)}
	f.follower.end = context.Canceled // a read that stays open
	_ = f.claims.Add(claim)
	if requeue := f.sync(claim); requeue == nil || *requeue != flushDelay { // the phase waits
		t.Fatalf("requeue = %v, want %v", requeue, flushDelay)
	}
	_ = f.pods.Add(runningPod(claim))
	f.sync(claim) // the read starts, and takes the boot entry
	requeue := f.sync(claim)
	if requeue == nil || *requeue != flushDelay {
		t.Fatalf("requeue = %v, want %v", requeue, flushDelay)
	}
	if got := f.writes(); len(got) != 0 {
		t.Fatalf("stored before the delay: %q", got)
	}
	f.clock.Step(flushDelay)
	f.sync(claim)
	if _, entries := f.export(); kinds(entries) != "claim.phase:Bound sandbox.boot" {
		t.Fatalf("stored after the delay: %q", kinds(entries))
	}
}

// TestABindWithinASecondIsOneWrite: a claim that goes Pending, Binding, Bound within a second
// costs one write of its record (a create), not one per phase; its phases are all in it.
func TestABindWithinASecondIsOneWrite(t *testing.T) {
	f := newFixture(t, nil, nil)
	claim := newClaim(airlockv1alpha1.ClaimPending)
	claim.Status.Frozen = nil
	_ = f.claims.Add(claim)
	f.sync(claim)
	for i, phase := range []airlockv1alpha1.ClaimPhase{airlockv1alpha1.ClaimBinding, airlockv1alpha1.ClaimBound} {
		f.clock.Step(400 * time.Millisecond)
		next := claim.DeepCopy()
		next.Status.Phase, next.ResourceVersion = phase, strconv.Itoa(i+2)
		_ = f.claims.Update(next)
		claim = next
		if requeue := f.sync(claim); requeue == nil || *requeue != flushDelay-time.Duration(i+1)*400*time.Millisecond {
			t.Fatalf("%s: requeue = %v, want the rest of the first entry's second", phase, requeue)
		}
	}
	f.clock.Step(200 * time.Millisecond)
	f.sync(claim)
	if got := f.writes(); len(got) != 1 || got[0] != "create" {
		t.Fatalf("writes = %q, want one create", got)
	}
	if _, entries := f.export(); kinds(entries) != "claim.phase:Pending claim.phase:Binding claim.phase:Bound" {
		t.Errorf("stored %q", kinds(entries))
	}
}

// TestANewLeaderResumesFromTheStoredCursor: a new controller (a new leader) reads the log on
// from the stored cursor and continues the chain: the record verifies whole, nothing twice.
func TestANewLeaderResumesFromTheStoredCursor(t *testing.T) {
	f := newFixture(t, nil, nil)
	claim := newClaim(airlockv1alpha1.ClaimBound)
	lines := [][]byte{
		sandboxdLine(t, "b1", 1, record.KindSandboxBoot),
		sandboxdLine(t, "b1", 2, record.KindToolCall),
	}
	f.follower.boot = "b1"
	f.follower.lines["b1"] = lines
	f.follower.end = context.Canceled
	_ = f.claims.Add(claim)
	_ = f.pods.Add(runningPod(claim))
	f.sync(claim)
	f.clock.Step(flushDelay)
	f.sync(claim)

	g := newFixture(t, f.records, f.signer)
	g.follower.boot = "b1"
	g.follower.lines["b1"] = append(lines, sandboxdLine(t, "b1", 3, record.KindToolCall), sandboxdLine(t, "b1", 4, record.KindSandboxStopped))
	_ = g.claims.Add(claim)
	_ = g.pods.Add(runningPod(claim))
	g.sync(claim)
	if got := g.follower.calls; len(got) != 1 || !strings.HasSuffix(got[0], "b1 after 2") {
		t.Fatalf("the new leader read %q, want from boot b1 after 2", got)
	}
	g.clock.Step(flushDelay)
	g.sync(claim)
	rep, entries := g.export()
	if !rep.Intact() {
		t.Fatalf("verdict %q: %v", rep.Verdict(), rep.Findings)
	}
	// The new leader says where it took the record up (TestANewLeaderSaysWhereItResumed).
	if want := "claim.phase:Bound sandbox.boot tool.call record.gap tool.call sandbox.stopped"; kinds(entries) != want {
		t.Errorf("entries = %q, want %q", kinds(entries), want)
	}
}

// TestANewLeaderSaysWhereItResumed: a leader appends a phase and is killed before it stores it;
// the new leader's record says where the previous leader's entries may have been lost (a gap
// entry naming the last stored entry, and where sandboxd's log is read again) before the phase
// it records again, and the record verifies intact. Nothing silent: the lost entry is not
// rebuilt, its place is said.
func TestANewLeaderSaysWhereItResumed(t *testing.T) {
	f := newFixture(t, nil, nil)
	claim := newClaim(airlockv1alpha1.ClaimBound)
	lines := [][]byte{sandboxdLine(t, "b1", 1, record.KindSandboxBoot), sandboxdLine(t, "b1", 2, record.KindToolCall)}
	f.follower.boot, f.follower.lines["b1"], f.follower.end = "b1", lines, context.Canceled
	_ = f.claims.Add(claim)
	_ = f.pods.Add(runningPod(claim))
	f.sync(claim)
	f.clock.Step(flushDelay)
	f.sync(claim) // stored: Bound, boot, tool.call (3 entries)
	reaping := claim.DeepCopy()
	reaping.Status.Phase, reaping.Status.Reason, reaping.ResourceVersion = airlockv1alpha1.ClaimReaping, "Idle", "2"
	_ = f.claims.Update(reaping)
	f.sync(reaping) // Reaping appended, not stored: the leader is killed here

	g := newFixture(t, f.records, f.signer)
	g.follower.boot, g.follower.lines["b1"], g.follower.end = "b1", lines, context.Canceled
	_ = g.claims.Add(reaping)
	_ = g.pods.Add(runningPod(claim))
	g.sync(reaping)
	g.clock.Step(flushDelay)
	g.sync(reaping)
	rep, entries := g.export()
	if !rep.Intact() {
		t.Fatalf("verdict %q: %v", rep.Verdict(), rep.Findings)
	}
	if want := "claim.phase:Bound sandbox.boot tool.call record.gap claim.phase:Reaping"; kinds(entries) != want {
		t.Fatalf("entries = %q, want %q", kinds(entries), want)
	}
	gap := entries[3]
	for _, want := range []string{"new leader resumed the record after entry 3", "unknown", "after source entry 2 of boot b1"} {
		if !strings.Contains(gap.Message, want) {
			t.Errorf("the gap %q does not say %q", gap.Message, want)
		}
	}

	// A third leader, the record unchanged since: it says so again (a leader cannot tell), once.
	h := newFixture(t, f.records, f.signer)
	h.follower.boot, h.follower.lines["b1"], h.follower.end = "b1", lines, context.Canceled
	_ = h.claims.Add(reaping)
	_ = h.pods.Add(runningPod(claim))
	h.sync(reaping)
	h.clock.Step(flushDelay)
	h.sync(reaping)
	if _, entries := h.export(); strings.Count(kinds(entries), "record.gap") != 2 || strings.Count(kinds(entries), "claim.phase") != 2 {
		t.Errorf("after a third leader: %q, want one more gap and no phase again", kinds(entries))
	}
}

// TestACutReadIsAGap: a pod gone before its stopped entry was read leaves a gap that says where
// the record was cut, and the record is still sealed and intact.
func TestACutReadIsAGap(t *testing.T) {
	f := newFixture(t, nil, nil)
	claim := newClaim(airlockv1alpha1.ClaimBound)
	f.follower.boot = "b1"
	f.follower.lines["b1"] = [][]byte{sandboxdLine(t, "b1", 1, record.KindSandboxBoot)}
	f.follower.end = errCutForTest
	_ = f.claims.Add(claim)
	_ = f.pods.Add(runningPod(claim))
	f.sync(claim)
	failed := claim.DeepCopy()
	failed.Status.Phase, failed.ResourceVersion = airlockv1alpha1.ClaimFailed, "2"
	_ = f.claims.Update(failed)
	_ = f.pods.Delete(runningPod(claim))
	f.sync(failed)
	rep, entries := f.export()
	if !rep.Intact() || !rep.Sealed {
		t.Fatalf("verdict %q: %v", rep.Verdict(), rep.Findings)
	}
	if want := "claim.phase:Bound sandbox.boot claim.phase:Failed record.gap record.sealed"; kinds(entries) != want {
		t.Fatalf("entries = %q, want %q", kinds(entries), want)
	}
	if msg := entries[3].Message; !strings.Contains(msg, "after source entry 1 are unknown") {
		t.Errorf("gap = %q", msg)
	}
}

// TestAnAdoptedWarmMembersLogIsRead: the warm member a claim adopted answers to the claim's
// adoption token (its frozen tools), with which its log is read like a cold sandbox's; a pod on
// no token of the claim is not read, and a gap says so.
func TestAnAdoptedWarmMembersLogIsRead(t *testing.T) {
	warm := func(member string) (*fixture, *airlockv1alpha1.SandboxClaim) {
		f := newFixture(t, nil, nil)
		claim := newClaim(airlockv1alpha1.ClaimBound)
		claim.Status.Frozen.AllowedTools = []airlockv1alpha1.ToolName{"Read", "Bash"}
		claim.Status.Warm = &airlockv1alpha1.WarmAdoption{Member: member, WorkspaceDir: "ns/sandboxes/warm/" + member}
		pod := runningPod(claim)
		sandboxpod.UseTokenSecret(pod, "airlock-warm-member")
		f.follower.boot = "b1"
		f.follower.lines["b1"] = [][]byte{sandboxdLine(t, "b1", 1, record.KindSandboxBoot), sandboxdLine(t, "b1", 2, record.KindToolCall)}
		_ = f.claims.Add(claim)
		_ = f.pods.Add(pod)
		f.sync(claim)
		f.clock.Step(flushDelay)
		f.sync(claim)
		return f, claim
	}
	f, claim := warm(runningPod(newClaim(airlockv1alpha1.ClaimBound)).Name)
	want := "adopt:ns/" + runningPod(claim).Name + ":uid-1:Read,Bash"
	if len(f.follower.tokens) != 1 || f.follower.tokens[0] != want {
		t.Fatalf("read with %q, want once with the adoption token %q", f.follower.tokens, want)
	}
	if _, entries := f.export(); kinds(entries) != "claim.phase:Bound sandbox.boot tool.call" {
		t.Fatalf("entries = %q, want the member's log read", kinds(entries))
	}

	f, _ = warm("another-member")
	if len(f.follower.calls) != 0 {
		t.Fatalf("a pod on no token of the claim was read: %q", f.follower.calls)
	}
	_, entries := f.export()
	if kinds(entries) != "claim.phase:Bound record.gap" || !strings.Contains(entries[1].Message, "is not read") {
		t.Fatalf("entries = %q (%+v), want the phase and a gap that says the log is not read", kinds(entries), entries)
	}
}

var errCutForTest = errorString("the stream ended")

type errorString string

func (e errorString) Error() string { return string(e) }

// TestASegmentChangedUnderTheLeaderIsWrittenAgainAndSaidSo: an edit of a stored entry is refused
// (the API server's rules); a segment deleted and created again with an altered entry (which the
// API server admits) is found at the leader's next write, left as it is, the leader's own lines
// written again in the next segment after a gap entry that says so; verify reports the record.
func TestASegmentChangedUnderTheLeaderIsWrittenAgainAndSaidSo(t *testing.T) {
	f := newFixture(t, nil, nil)
	claim := newClaim(airlockv1alpha1.ClaimBound)
	_ = f.claims.Add(claim)
	f.sync(claim)
	f.clock.Step(flushDelay)
	f.sync(claim)
	ctx := context.Background()
	srs := f.records.AirlockV1alpha1().SessionRecords("ns")
	name := recordstore.Name("c1", "uid-1", 0)
	sr, err := srs.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	forged := sr.DeepCopy()
	forged.Spec.Entries = strings.Replace(sr.Spec.Entries, `"phase":"Bound"`, `"phase":"Bond"`, 1)
	if _, err := srs.Update(ctx, forged, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) {
		t.Fatalf("an edited entry: %v, want refused", err)
	}
	if err := f.records.Tracker().Delete(sessionRecordsResource, "ns", name); err != nil {
		t.Fatal(err)
	}
	forged.ResourceVersion = ""
	if _, err := srs.Create(ctx, forged, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	reaping := claim.DeepCopy()
	reaping.Status.Phase, reaping.ResourceVersion = airlockv1alpha1.ClaimReaping, "2"
	_ = f.claims.Update(reaping)
	_, lctx := ktesting.NewTestContext(t)
	for range 3 {
		if _, err := f.c.sync(lctx, keyOf(reaping)); err == nil {
			break
		}
	}
	if got, _ := srs.Get(ctx, name, metav1.GetOptions{}); got.Spec.Entries != forged.Spec.Entries {
		t.Errorf("the forged segment was written over:\n%s", got.Spec.Entries)
	}
	next, err := srs.Get(ctx, recordstore.Name("c1", "uid-1", 1), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	stored, _ := recordstore.Parse(next)
	var first record.Entry
	_ = json.Unmarshal(stored.Lines[0], &first)
	if first.Seq != 1 || first.Phase != "Bound" || !stored.Anchor.Sealed {
		t.Errorf("segment 1 starts with %+v (sealed %v), want the leader's own entry 1", first, stored.Anchor.Sealed)
	}
	rep, entries := f.export()
	if rep.Intact() {
		t.Errorf("the record with a forged segment verifies: %s", rep.Verdict())
	}
	gap := false
	for _, e := range entries {
		gap = gap || (e.Kind == record.KindRecordGap && strings.Contains(e.Message, "was changed under the leader"))
	}
	if !gap {
		t.Errorf("no gap says the segment changed: %q", kinds(entries))
	}
}

// TestWaitStopped: the claim controller's wait returns once the stopped entry was read, at once
// when nothing reads the claim's log, and when its context ends.
func TestWaitStopped(t *testing.T) {
	f := newFixture(t, nil, nil)
	claim := newClaim(airlockv1alpha1.ClaimBound)
	if f.c.WaitStopped(context.Background(), claim.UID) {
		t.Fatal("WaitStopped = true for a claim without a record")
	}
	f.follower.boot = "b1"
	f.follower.lines["b1"] = [][]byte{sandboxdLine(t, "b1", 1, record.KindSandboxStopped)}
	_ = f.claims.Add(claim)
	_ = f.pods.Add(runningPod(claim))
	f.sync(claim)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if !f.c.WaitStopped(ctx, claim.UID) {
		t.Fatal("WaitStopped = false after the stopped entry was read")
	}
}

// TestMoveRecords: a claim's segments move to a kept workspace's Job, and only they.
func TestMoveRecords(t *testing.T) {
	f := newFixture(t, nil, nil)
	claim := newClaim(airlockv1alpha1.ClaimBound)
	_ = f.claims.Add(claim)
	f.sync(claim)
	f.clock.Step(flushDelay)
	f.sync(claim)
	other, _ := recordstore.SessionRecord(&airlockv1alpha1.SandboxClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c2", UID: "uid-2"}}, recordstore.Segment{Lines: [][]byte{[]byte("{}")}})
	if _, err := f.records.AirlockV1alpha1().SessionRecords("ns").Create(context.Background(), other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A segment written before the owner label existed, of an earlier claim the claim resumed
	// (its records moved to the claim): found and labelled.
	legacy, _ := recordstore.SessionRecord(&airlockv1alpha1.SandboxClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c0", UID: "uid-0"}}, recordstore.Segment{Lines: [][]byte{[]byte("{}")}})
	legacy = recordstore.OwnedBy(legacy, metav1.OwnerReference{APIVersion: "airlock.dev/v1alpha1", Kind: "SandboxClaim", Name: "c1", UID: claim.UID})
	delete(legacy.Labels, recordstore.LabelRecordOwner)
	if _, err := f.records.AirlockV1alpha1().SessionRecords("ns").Create(context.Background(), legacy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	job := metav1.OwnerReference{APIVersion: "batch/v1", Kind: "Job", Name: "kept", UID: "job-1"}
	_, ctx := ktesting.NewTestContext(t)
	counting := &listCounter{recordControl: f.c.records}
	f.c.records = counting
	if err := f.c.MoveRecords(ctx, "ns", claim.UID, job); err != nil {
		t.Fatal(err)
	}
	if counting.listed != 2 {
		t.Errorf("the move read %d segments, want the 2 it moves (not the other claim's)", counting.listed)
	}
	list, _ := f.records.AirlockV1alpha1().SessionRecords("ns").List(ctx, metav1.ListOptions{})
	for _, cm := range list.Items {
		owner := cm.OwnerReferences[0].UID
		if want := map[string]string{"uid-0": "job-1", "uid-1": "job-1", "uid-2": "uid-2"}[cm.Spec.ClaimUID]; string(owner) != want || len(cm.OwnerReferences) != 1 ||
			cm.Labels[recordstore.LabelRecordOwner] != want {
			t.Errorf("%s owned by %v, labelled %q, want %s", cm.Name, cm.OwnerReferences, cm.Labels[recordstore.LabelRecordOwner], want)
		}
	}
	// The job's segments move on, by the label alone.
	counting.listed = 0
	back := metav1.OwnerReference{APIVersion: "airlock.dev/v1alpha1", Kind: "SandboxClaim", Name: "c1", UID: "uid-3"}
	if err := f.c.MoveRecords(ctx, "ns", "job-1", back); err != nil {
		t.Fatal(err)
	}
	if counting.listed != 2 {
		t.Errorf("the move back read %d segments, want 2", counting.listed)
	}
	if err := f.c.MoveRecords(ctx, "ns", "uid-3", job); err != nil {
		t.Fatal(err)
	}
	f.c.records = counting.recordControl
	// The leader's next write keeps the moved owner.
	reaping := claim.DeepCopy()
	reaping.Status.Phase, reaping.ResourceVersion = airlockv1alpha1.ClaimReaping, "2"
	_ = f.claims.Update(reaping)
	for range 3 {
		if _, err := f.c.sync(ctx, keyOf(reaping)); err == nil {
			break
		}
	}
	cm, _ := f.records.AirlockV1alpha1().SessionRecords("ns").Get(ctx, recordstore.Name("c1", "uid-1", 0), metav1.GetOptions{})
	if cm.OwnerReferences[0].UID != "job-1" {
		t.Errorf("after the seal, owned by %v", cm.OwnerReferences)
	}
	if rep, entries := f.export(); !rep.Intact() || !rep.Sealed || strings.Contains(kinds(entries), "record.gap") {
		t.Errorf("verdict %q, entries %q: a moved owner is no change of the record", rep.Verdict(), kinds(entries))
	}
}

// TestPlanSplitsFullSegments: lines past a segment's bound start the next segment.
func TestPlanSplitsFullSegments(t *testing.T) {
	line := []byte(strings.Repeat("x", 200<<10))
	writes := plan(recordstore.Segment{N: 3, Lines: [][]byte{line}}, [][]byte{line, line, line})
	var got []int
	for _, w := range writes {
		got = append(got, w.seg.N, len(w.seg.Lines), w.taken)
	}
	if want := []int{3, 2, 1, 4, 2, 2}; !equalInts(got, want) {
		t.Errorf("plan = %v, want %v (segment, lines, taken)", got, want)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestANewLeaderRecordsThePhaseOnlyWhenItDiffers: a phase the old leader appended but had not
// stored (it waits for the batch) is recorded again by the new leader; a phase stored in an
// earlier segment than the last is not recorded twice.
func TestANewLeaderRecordsThePhaseOnlyWhenItDiffers(t *testing.T) {
	f := newFixture(t, nil, nil)
	claim := newClaim(airlockv1alpha1.ClaimBound)
	// Enough of sandboxd's entries to fill segment 0: the phase stands in segment 0 only.
	var lines [][]byte
	for i := range 2500 {
		lines = append(lines, sandboxdLine(t, "b1", uint64(i+1), record.KindToolCall))
	}
	f.follower.boot, f.follower.lines["b1"], f.follower.end = "b1", lines, context.Canceled
	_ = f.claims.Add(claim)
	_ = f.pods.Add(runningPod(claim))
	f.sync(claim)
	f.clock.Step(flushDelay)
	f.sync(claim)
	if got := f.writes(); len(got) < 2 {
		t.Fatalf("writes %q: the record fills less than two segments", got)
	}

	// A new leader, the claim still Bound: no phase entry.
	g := newFixture(t, f.records, f.signer)
	g.follower.boot, g.follower.lines["b1"], g.follower.end = "b1", lines, context.Canceled
	_ = g.claims.Add(claim)
	_ = g.pods.Add(runningPod(claim))
	g.sync(claim)
	g.clock.Step(flushDelay)
	g.sync(claim)
	if _, entries := g.export(); strings.Count(kinds(entries), "claim.phase") != 1 {
		t.Fatalf("the phase recorded %d times, want once", strings.Count(kinds(entries), "claim.phase"))
	}

	// The claim is Reaping; the leader appends the phase and is gone before it stores it.
	reaping := claim.DeepCopy()
	reaping.Status.Phase, reaping.Status.Reason, reaping.ResourceVersion = airlockv1alpha1.ClaimReaping, "Idle", "2"
	_ = g.claims.Update(reaping)
	g.sync(reaping)
	h := newFixture(t, f.records, f.signer)
	h.follower.boot, h.follower.lines["b1"], h.follower.end = "b1", lines, context.Canceled
	_ = h.claims.Add(reaping)
	_ = h.pods.Add(runningPod(claim))
	h.sync(reaping)
	h.clock.Step(flushDelay)
	h.sync(reaping)
	rep, entries := h.export()
	if !rep.Intact() {
		t.Fatalf("verdict %q: %v", rep.Verdict(), rep.Findings)
	}
	var phases []string
	for _, e := range entries {
		if e.Kind == record.KindClaimPhase {
			phases = append(phases, e.Phase)
		}
	}
	if strings.Join(phases, " ") != "Bound Reaping" {
		t.Errorf("phases %q, want Bound Reaping", phases)
	}
}

// usageLine is one of sandboxd's usage entries (cumulative for its boot).
func usageLine(t *testing.T, boot string, seq uint64, cpu, calls int64) []byte {
	t.Helper()
	e := record.Entry{Time: record.FormatTime(t0), Source: record.SourceSandboxd, Boot: boot, SourceSeq: seq, Kind: record.KindUsage,
		Usage: &record.Usage{CPUMillis: cpu, MemoryMiBSeconds: 2 * cpu, ToolCalls: calls}}
	b, err := e.Line()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestTheSealCarriesTheSessionsUsage: the seal's usage is the session's totals (usage.Session of
// the record's entries), also when a new leader resumed the record after the first figures were
// stored: it rebuilds them from the stored entries.
func TestTheSealCarriesTheSessionsUsage(t *testing.T) {
	for name, failover := range map[string]bool{"one leader": false, "after a failover": true} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, nil, nil)
			claim := newClaim(airlockv1alpha1.ClaimBound)
			first := [][]byte{
				sandboxdLine(t, "b1", 1, record.KindSandboxBoot),
				sandboxdLine(t, "b1", 2, record.KindToolCall),
				usageLine(t, "b1", 3, 1500, 1),
			}
			f.follower.boot, f.follower.lines["b1"], f.follower.end = "b1", first, context.Canceled
			_ = f.claims.Add(claim)
			_ = f.pods.Add(runningPod(claim))
			f.sync(claim)
			f.clock.Step(flushDelay)
			f.sync(claim)
			leader := f
			if failover {
				leader = newFixture(t, f.records, f.signer)
				_ = leader.claims.Add(claim)
				_ = leader.pods.Add(runningPod(claim))
			}
			// The boot's later figures (cumulative), read by the leader of the moment.
			leader.follower.boot, leader.follower.end = "b1", context.Canceled
			leader.follower.lines["b1"] = append(first, sandboxdLine(t, "b1", 4, record.KindToolCall), usageLine(t, "b1", 5, 2200, 2))
			leader.sync(claim)
			pod := runningPod(claim)
			failed := claim.DeepCopy()
			failed.Status.Phase, failed.ResourceVersion = airlockv1alpha1.ClaimFailed, "2"
			_ = leader.claims.Update(failed)
			_ = leader.pods.Delete(pod)
			leader.clock.Step(goneHold)
			leader.sync(failed)
			leader.clock.Step(goneHold)
			leader.sync(failed)
			rep, entries := leader.export()
			if !rep.Sealed {
				t.Fatalf("not sealed: %q %v", rep.Verdict(), kinds(entries))
			}
			seal := entries[len(entries)-1]
			want := record.Usage{CPUMillis: 2200, MemoryMiBSeconds: 4400, ToolCalls: 2}
			if seal.Usage == nil || *seal.Usage != want {
				t.Errorf("the seal's usage = %+v, want %+v", seal.Usage, want)
			}
			if got := usage.Session(entries[:len(entries)-1]); got != want {
				t.Errorf("usage.Session of the record = %+v, want %+v", got, want)
			}
		})
	}
}

// TestASegmentDeletedUnderTheLeaderIsCreatedAgain: a live record's last segment deleted (which the
// API server admits) is found at the leader's next write and created again as the leader had it,
// after a gap entry that says so: the record verifies intact.
func TestASegmentDeletedUnderTheLeaderIsCreatedAgain(t *testing.T) {
	f := newFixture(t, nil, nil)
	claim := newClaim(airlockv1alpha1.ClaimBound)
	_ = f.claims.Add(claim)
	f.sync(claim)
	f.clock.Step(flushDelay)
	f.sync(claim)
	if err := f.records.Tracker().Delete(sessionRecordsResource, "ns", recordstore.Name("c1", "uid-1", 0)); err != nil {
		t.Fatal(err)
	}
	reaping := claim.DeepCopy()
	reaping.Status.Phase, reaping.ResourceVersion = airlockv1alpha1.ClaimReaping, "2"
	_ = f.claims.Update(reaping)
	_, ctx := ktesting.NewTestContext(t)
	for range 3 {
		if _, err := f.c.sync(ctx, keyOf(reaping)); err == nil {
			break
		}
	}
	rep, entries := f.export()
	if !rep.Intact() || !rep.Sealed {
		t.Fatalf("verdict %q: %v", rep.Verdict(), rep.Findings)
	}
	if got := kinds(entries); got != "claim.phase:Bound claim.phase:Reaping record.gap record.sealed" || !strings.Contains(entries[2].Message, "was deleted under the leader") {
		t.Errorf("entries = %q (%q), want the record created again with a gap", got, entries[2].Message)
	}
}

// TestARecordStartedLateSaysWhatItMissed: a claim created before this leader's term, already
// Bound, with no stored record (the previous leader was killed within its first second) begins
// its record with a gap that says its earlier phases are unknown; a claim created during the
// term, or still Pending, begins without one.
func TestARecordStartedLateSaysWhatItMissed(t *testing.T) {
	for name, tc := range map[string]struct {
		created time.Time
		phase   airlockv1alpha1.ClaimPhase
		want    string
	}{
		"created before the term, Bound":   {created: t0.Add(-time.Minute), phase: airlockv1alpha1.ClaimBound, want: "record.gap claim.phase:Bound"},
		"created before the term, Pending": {created: t0.Add(-time.Minute), phase: airlockv1alpha1.ClaimPending, want: "claim.phase:Pending"},
		"created in the term, Bound":       {created: t0.Add(time.Second), phase: airlockv1alpha1.ClaimBound, want: "claim.phase:Bound"},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, nil, nil)
			f.c.started = t0
			claim := newClaim(tc.phase)
			claim.Status.Frozen = nil // nothing to read: the operator's entries only
			claim.CreationTimestamp = metav1.NewTime(tc.created)
			_ = f.claims.Add(claim)
			f.sync(claim)
			f.clock.Step(flushDelay)
			f.sync(claim)
			rep, entries := f.export()
			if !rep.Intact() {
				t.Fatalf("verdict %q: %v", rep.Verdict(), rep.Findings)
			}
			if kinds(entries) != tc.want {
				t.Fatalf("entries %q, want %q", kinds(entries), tc.want)
			}
			if strings.HasPrefix(tc.want, "record.gap") && !strings.Contains(entries[0].Message, "is Bound already: the phases it passed through before") {
				t.Errorf("the gap says %q", entries[0].Message)
			}
		})
	}
}

// TestAClaimDeletedBeforeItsFirstSyncIsSealed: a claim reaped and deleted before this leader
// synced it (the previous leader's last moments, or as this term began) still has its record
// sealed: the one stored so far resumed (a gap where the previous leader may have lost entries),
// or one begun that says what is unknown; its last phase recorded, the seal, intact. Before,
// the record was left unsealed, or none was written.
func TestAClaimDeletedBeforeItsFirstSyncIsSealed(t *testing.T) {
	reaping := func() *airlockv1alpha1.SandboxClaim {
		c := newClaim(airlockv1alpha1.ClaimReaping)
		c.Status.Reason, c.Status.Frozen = "Idle", nil
		c.CreationTimestamp = metav1.NewTime(t0.Add(-time.Minute))
		return c
	}
	t.Run("stored by the previous leader", func(t *testing.T) {
		f := newFixture(t, nil, nil)
		claim := newClaim(airlockv1alpha1.ClaimBound)
		claim.Status.Frozen = nil
		_ = f.claims.Add(claim)
		f.sync(claim)
		f.clock.Step(flushDelay)
		f.sync(claim) // stored, live: then the leader is killed

		g := newFixture(t, f.records, f.signer)
		g.c.started = t0
		g.c.claimDeleted(reaping()) // deleted before g's first sync: not in g's cache
		g.sync(claim)
		rep, entries := g.export()
		if !rep.Intact() || !rep.Sealed {
			t.Fatalf("verdict %q (sealed %v): %v", rep.Verdict(), rep.Sealed, rep.Findings)
		}
		if want := "claim.phase:Bound record.gap claim.phase:Reaping record.sealed"; kinds(entries) != want {
			t.Errorf("entries %q, want %q", kinds(entries), want)
		}
		if len(g.c.sessions) != 0 || len(g.c.deleted) != 0 {
			t.Errorf("sessions %d, deleted %d kept after the seal: want none", len(g.c.sessions), len(g.c.deleted))
		}
	})
	t.Run("nothing stored", func(t *testing.T) {
		g := newFixture(t, nil, nil)
		g.c.started = t0
		g.c.claimDeleted(reaping())
		g.sync(reaping())
		rep, entries := g.export()
		if !rep.Intact() || !rep.Sealed {
			t.Fatalf("verdict %q (sealed %v): %v", rep.Verdict(), rep.Sealed, rep.Findings)
		}
		if want := "record.gap claim.phase:Reaping record.sealed"; kinds(entries) != want {
			t.Errorf("entries %q, want %q", kinds(entries), want)
		}
	})
}

// TestWaitStoredStoresNow: the claim controller's WaitStored (before it moves a claim's records
// to its kept workspace and deletes the claim) has the record stored at once, not at its batch's
// second, whether the record has entries waiting or has not been synced at all yet (a claim
// reaped as a new leader's term began); it returns once they are stored. Without it, a record
// stored after its claim is gone is owned by the gone claim and collected with it.
func TestWaitStoredStoresNow(t *testing.T) {
	for name, syncedBefore := range map[string]bool{"entries waiting": true, "not synced yet": false} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, nil, nil)
			claim := newClaim(airlockv1alpha1.ClaimBound)
			claim.Status.Frozen = nil
			_ = f.claims.Add(claim)
			if syncedBefore {
				f.sync(claim)
				if got := f.writes(); len(got) != 0 {
					t.Fatalf("writes %q before the batch's second", got)
				}
			}
			done := make(chan bool)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				done <- f.c.WaitStored(ctx, claim)
			}()
			key, _ := f.c.queue.Get() // the wait asks for the claim's sync
			f.sync(claim)
			f.c.queue.Done(key)
			if !<-done {
				t.Fatal("WaitStored: not stored")
			}
			if got := f.writes(); len(got) != 1 {
				t.Errorf("writes %q, want the record created at once", got)
			}
			if _, entries := f.export(); kinds(entries) != "claim.phase:Bound" {
				t.Errorf("stored %q, want the phase", kinds(entries))
			}
			if len(f.c.storeWaiters) != 0 {
				t.Errorf("waits left: %v", f.c.storeWaiters)
			}
			// Stored: a second wait returns at once.
			if !f.c.WaitStored(context.Background(), claim) {
				t.Error("a second WaitStored did not return at once")
			}
		})
	}
}

// TestARecordOfAGoneNamespaceIsDropped: a claim deleted with its namespace (its SessionRecords
// cannot be created any more: the API server answers NotFound of the namespace, or Forbidden
// while it terminates) is not retried for ever: the sync ends without an error, the record is
// forgotten, and the next sync writes nothing. `make bench` saw a thousand failed creates a
// scenario, retried by the queue, from the claims of the namespaces of earlier scenarios.
func TestARecordOfAGoneNamespaceIsDropped(t *testing.T) {
	for name, refusal := range map[string]error{
		"gone": apierrors.NewNotFound(corev1.Resource("namespaces"), "ns"),
		"terminating": &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: 403, Reason: metav1.StatusReasonForbidden,
			Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{Type: corev1.NamespaceTerminatingCause}}}}},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, nil, nil)
			claim := newClaim(airlockv1alpha1.ClaimBound)
			claim.Status.Frozen = nil
			_ = f.claims.Add(claim)
			f.sync(claim) // a live record, not stored yet
			creates := 0
			f.records.PrependReactor("create", "sessionrecords", func(k8stesting.Action) (bool, runtime.Object, error) {
				creates++
				return true, nil, refusal
			})
			_ = f.claims.Delete(claim)
			f.c.claimDeleted(claim)
			_, ctx := ktesting.NewTestContext(t)
			if _, err := f.c.sync(ctx, keyOf(claim)); err != nil {
				t.Fatalf("sync of a claim whose namespace is %s: %v, want the record dropped", name, err)
			}
			if creates == 0 {
				t.Fatal("no create was tried")
			}
			if len(f.c.sessions) != 0 || len(f.c.byName) != 0 || len(f.c.deleted) != 0 {
				t.Errorf("sessions %d, byName %d, deleted %d after the drop: want none", len(f.c.sessions), len(f.c.byName), len(f.c.deleted))
			}
			tried := creates
			if _, err := f.c.sync(ctx, keyOf(claim)); err != nil || creates != tried {
				t.Errorf("the next sync: %v, %d more creates, want nothing", err, creates-tried)
			}
		})
	}
	t.Run("another NotFound is still an error", func(t *testing.T) {
		if namespaceGone(apierrors.NewNotFound(airlockv1alpha1.Resource("sessionrecords"), "x")) {
			t.Error("a SessionRecord's NotFound is taken for its namespace's")
		}
	})
}

// listCounter counts the segments the lists of a recordControl return.
type listCounter struct {
	recordControl
	listed int
}

func (l *listCounter) List(ctx context.Context, namespace, selector string) ([]airlockv1alpha1.SessionRecord, error) {
	out, err := l.recordControl.List(ctx, namespace, selector)
	l.listed += len(out)
	return out, err
}

// TestMoveRecordsInParallel: a workspace resumed many times holds the segments of every earlier
// session, and they all move at a keep and at a take: the move updates moveParallel of them at
// once (one round trip after another cost TestRealNodeReacquire's resume 200 ms after 50
// rounds), never more.
func TestMoveRecordsInParallel(t *testing.T) {
	const segments = 40
	rec := &barrierRecords{release: make(chan struct{})}
	for i := range segments {
		c := &airlockv1alpha1.SandboxClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("c%d", i), UID: types.UID(fmt.Sprintf("uid-%d", i))}}
		sr, _ := recordstore.SessionRecord(c, recordstore.Segment{Lines: [][]byte{[]byte("{}")}})
		rec.list = append(rec.list, *recordstore.OwnedBy(sr, metav1.OwnerReference{Kind: "Job", Name: "kept", UID: "job-1"}))
	}
	done := make(chan error, 1)
	go func() {
		done <- moveRecords(context.Background(), rec, "ns", "job-1", metav1.OwnerReference{Kind: "SandboxClaim", Name: "c", UID: "uid-new"})
	}()
	var err error
	select {
	case err = <-done: // every update held until moveParallel were in flight: it ended after
	case <-time.After(time.Minute):
		t.Fatalf("no %d updates in flight together after a minute: the move is sequential (at most %d seen)", moveParallel, rec.maxInFlight())
	}
	if err != nil {
		t.Fatal(err)
	}
	if rec.updated != segments || rec.maxInFlight() != moveParallel {
		t.Errorf("%d segments moved, at most %d at once; want %d, %d", rec.updated, rec.maxInFlight(), segments, moveParallel)
	}
}

// barrierRecords holds each Update until moveParallel are in flight together (then lets every
// one through), and counts them.
type barrierRecords struct {
	recordControl
	list    []airlockv1alpha1.SessionRecord
	mu      sync.Mutex
	in, max int
	updated int
	release chan struct{}
	opened  bool
}

func (b *barrierRecords) List(_ context.Context, _, selector string) ([]airlockv1alpha1.SessionRecord, error) {
	if strings.HasPrefix(selector, recordstore.LabelRecordOwner+"=") {
		return b.list, nil
	}
	return nil, nil
}

func (b *barrierRecords) Update(_ context.Context, sr *airlockv1alpha1.SessionRecord) (*airlockv1alpha1.SessionRecord, error) {
	b.mu.Lock()
	b.in++
	b.max = max(b.max, b.in)
	if b.in == moveParallel && !b.opened {
		b.opened = true
		close(b.release)
	}
	b.mu.Unlock()
	<-b.release
	b.mu.Lock()
	b.in--
	b.updated++
	b.mu.Unlock()
	return sr, nil
}

func (b *barrierRecords) maxInFlight() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.max
}
