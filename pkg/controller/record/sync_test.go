package record

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2/ktesting"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/record"
	"github.com/airlock-dev/airlock/pkg/recordstore"
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
	f.sync(claim) // the phase, stored at once; the read starts
	f.sync(claim) // what the read took waits flushDelay
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

// TestABatchWaitsOneSecond: sandboxd's entries without a phase change are stored one second after
// the first of them, not at once.
func TestABatchWaitsOneSecond(t *testing.T) {
	f := newFixture(t, nil, nil)
	claim := newClaim(airlockv1alpha1.ClaimBound)
	f.follower.boot = "b1"
	f.follower.lines["b1"] = [][]byte{sandboxdLine(t, "b1", 1, record.KindSandboxBoot)}
	f.follower.end = context.Canceled // a read that stays open
	_ = f.claims.Add(claim)
	f.sync(claim) // the phase, stored at once
	_ = f.pods.Add(runningPod(claim))
	f.sync(claim) // the read starts, and takes the boot entry
	requeue := f.sync(claim)
	if requeue == nil || *requeue != flushDelay {
		t.Fatalf("requeue = %v, want %v", requeue, flushDelay)
	}
	if _, entries := f.export(); kinds(entries) != "claim.phase:Bound" {
		t.Fatalf("stored before the delay: %q", kinds(entries))
	}
	f.clock.Step(flushDelay)
	f.sync(claim)
	if _, entries := f.export(); kinds(entries) != "claim.phase:Bound sandbox.boot" {
		t.Fatalf("stored after the delay: %q", kinds(entries))
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

	g := newFixture(t, f.kube, f.signer)
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
	if want := "claim.phase:Bound sandbox.boot tool.call tool.call sandbox.stopped"; kinds(entries) != want {
		t.Errorf("entries = %q, want %q", kinds(entries), want)
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

var errCutForTest = errorString("the stream ended")

type errorString string

func (e errorString) Error() string { return string(e) }

// TestASegmentChangedUnderTheLeaderIsWrittenAgainAndSaidSo: a stored segment edited by someone
// else (a roll-back) is found at the next write, written again as the leader has it, and a gap
// entry says so.
func TestASegmentChangedUnderTheLeaderIsWrittenAgainAndSaidSo(t *testing.T) {
	f := newFixture(t, nil, nil)
	claim := newClaim(airlockv1alpha1.ClaimBound)
	_ = f.claims.Add(claim)
	f.sync(claim)
	name := recordstore.Name("c1", "uid-1", 0)
	cm, err := f.kube.CoreV1().ConfigMaps("ns").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data[recordstore.KeyEntries] = ""
	if _, err := f.kube.CoreV1().ConfigMaps("ns").Update(context.Background(), cm, metav1.UpdateOptions{}); err != nil {
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
	if got := kinds(entries); !strings.Contains(got, "record.gap") || !strings.HasPrefix(got, "claim.phase:Bound") {
		t.Fatalf("entries = %q, want the rewritten record with a gap", got)
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
	other, _ := recordstore.ConfigMap(&airlockv1alpha1.SandboxClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c2", UID: "uid-2"}}, recordstore.Segment{})
	if _, err := f.kube.CoreV1().ConfigMaps("ns").Create(context.Background(), other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	job := metav1.OwnerReference{APIVersion: "batch/v1", Kind: "Job", Name: "kept", UID: "job-1"}
	_, ctx := ktesting.NewTestContext(t)
	if err := f.c.MoveRecords(ctx, "ns", claim.UID, job); err != nil {
		t.Fatal(err)
	}
	list, _ := f.kube.CoreV1().ConfigMaps("ns").List(ctx, metav1.ListOptions{})
	for _, cm := range list.Items {
		owner := cm.OwnerReferences[0].UID
		if want := map[string]string{"uid-1": "job-1", "uid-2": "uid-2"}[cm.Labels[recordstore.LabelRecordOf]]; string(owner) != want || len(cm.OwnerReferences) != 1 {
			t.Errorf("%s owned by %v, want %s", cm.Name, cm.OwnerReferences, want)
		}
	}
	// The leader's next write keeps the moved owner.
	reaping := claim.DeepCopy()
	reaping.Status.Phase, reaping.ResourceVersion = airlockv1alpha1.ClaimReaping, "2"
	_ = f.claims.Update(reaping)
	for range 3 {
		if _, err := f.c.sync(ctx, keyOf(reaping)); err == nil {
			break
		}
	}
	cm, _ := f.kube.CoreV1().ConfigMaps("ns").Get(ctx, recordstore.Name("c1", "uid-1", 0), metav1.GetOptions{})
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
