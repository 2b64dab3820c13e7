//go:build e2e && realnode

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/record"
	"github.com/airlock-dev/airlock/pkg/recordstore"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
)

// The record in TestRealNodeFaultSuite (issue 42, docs/record.md §2.6): a sandbox killed
// mid-session, and every session's record checked at the suite's end.

// killedSandbox is the session whose sandbox the suite killed, and how.
type killedSandbox struct {
	session       *faultSession
	before, after faultFiles
	// sigkill: sandboxd was SIGKILLed in its pod (the container restarts in the same pod: a new
	// boot); else the pod was deleted with grace 0 (the claim's pod is created again).
	sigkill bool
}

// prefixed returns f with every path below dir.
func (f faultFiles) prefixed(dir string) faultFiles {
	out := faultFiles{}
	for p, b := range f {
		out[dir+"/"+p] = b
	}
	return out
}

// killedSandboxSession runs a session that writes files and stays open; then kills its sandbox
// (sandboxd SIGKILLed from the node, which is this machine; a pod deleted with grace 0 where no
// sandboxd process of the pod is found here, e.g. under gVisor); waits for the claim to be
// Bound on a ready sandbox again (the operator's rules: a Bound claim's ended pod is created
// again on the same workspace, a container restarted in place); then the same session writes
// more and closes.
func (r *faultRealnode) killedSandboxSession(rt, session, handle string) killedSandbox {
	t := r.t
	t.Helper()
	ctx := context.Background()
	before := sessionFiles(session, 3, 1024).prefixed("before")
	after := sessionFiles(session, 2, 1024).prefixed("after")
	open := r.runSteps(rt, session, handle, before, before, false)
	pod, err := kubeClient.CoreV1().Pods(r.e.ns).Get(ctx, open.claim, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the sandbox pod of %s: %v", open.claim, err)
	}
	restarts := sandboxRestarts(pod)
	k := killedSandbox{before: before, after: after}
	if pid, ok := sandboxdProcess(pod.UID); ok {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatalf("SIGKILL of sandboxd (pid %d) in pod %s: %v", pid, pod.Name, err)
		}
		k.sigkill = true
		t.Logf("fault: sandboxd (pid %d) of claim %s SIGKILLed mid-session", pid, open.claim)
	} else {
		if err := kubeClient.CoreV1().Pods(r.e.ns).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptrInt64(0),
			Preconditions: &metav1.Preconditions{UID: &pod.UID}}); err != nil {
			t.Fatalf("deleting the sandbox pod %s: %v", pod.Name, err)
		}
		t.Logf("fault: the sandbox pod of claim %s deleted with grace 0 mid-session (no sandboxd process of it on this machine)", open.claim)
	}
	r.faults++
	eventually(t, 3*time.Minute, "claim "+open.claim+" Bound on a ready sandbox again", func(ctx context.Context) (bool, error) {
		c, err := airlockClient.AirlockV1alpha1().SandboxClaims(r.e.ns).Get(ctx, open.claim, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		p, err := kubeClient.CoreV1().Pods(r.e.ns).Get(ctx, open.claim, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		replaced := p.UID != pod.UID || sandboxRestarts(p) > restarts
		return c.Status.Phase == airlockv1alpha1.ClaimBound && replaced && p.DeletionTimestamp == nil && podReady(p), nil
	})
	k.session = r.runSteps(rt, session, handle, after, before.with(after), true)
	return k
}

// sandboxRestarts is the restart count of the pod's sandbox container.
func sandboxRestarts(p *corev1.Pod) int32 {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == sandboxpod.ContainerName {
			return cs.RestartCount
		}
	}
	return 0
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// sandboxdProcess finds, on this machine, the sandboxd process of the pod with uid: a process
// in the pod's cgroup (cgroupfs or systemd spelling of the UID) whose command line runs sandboxd.
func sandboxdProcess(uid types.UID) (int, bool) {
	spellings := []string{string(uid), strings.ReplaceAll(string(uid), "-", "_")}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		cg, err := os.ReadFile(d + "/cgroup")
		if err != nil || !slices.ContainsFunc(spellings, func(s string) bool { return strings.Contains(string(cg), s) }) {
			continue
		}
		cmd, err := os.ReadFile(d + "/cmdline")
		if err != nil {
			continue
		}
		if args := strings.Split(string(cmd), "\x00"); slices.Contains(args, "sandboxd") {
			return pid, true
		}
	}
	return 0, false
}

// sessionRecord is a session's claim's verified record: the claim's UIDs (one, unless the name
// was taken by a second claim) and the entries of their records.
type sessionRecord struct {
	uids    []string
	entries []record.Entry
}

// checkRecords reads every session's record with `airlock record` (the runtime whose deletion
// takes its claims' records with it excepted): each verifies intact and sealed, holds its phases
// in order and its tool calls, and has no gap but where the suite cut it: a leader that resumed
// it (docs/record.md §2.5 Failover), and the killed sandbox's boot. It returns the records read.
func (r *faultRealnode) checkRecords(killed killedSandbox, recordGoesWithRuntime string) map[*faultSession]sessionRecord {
	t := r.t
	t.Helper()
	ctx := context.Background()
	checked := 0
	records := map[*faultSession]sessionRecord{}
	for _, s := range r.sessions {
		if s.runtime == recordGoesWithRuntime {
			continue
		}
		list, err := airlockClient.AirlockV1alpha1().SessionRecords(r.e.ns).List(ctx, metav1.ListOptions{LabelSelector: recordstore.LabelRecordClaim + "=" + s.claim})
		if err != nil {
			t.Fatal(err)
		}
		var uids []string
		for _, sr := range list.Items {
			if !slices.Contains(uids, sr.Spec.ClaimUID) {
				uids = append(uids, sr.Spec.ClaimUID)
			}
		}
		if len(uids) == 0 {
			t.Errorf("session %s: no record of claim %s", s.name, s.claim)
			continue
		}
		for _, uid := range uids {
			entries, text := sealedRecordOf(t, r.e.ns, s.claim, uid)
			checked++
			rec := records[s]
			rec.uids, rec.entries = append(rec.uids, uid), append(rec.entries, entries...)
			records[s] = rec
			recordedPhases(t, s.claim, entries)
			if !slices.ContainsFunc(entries, func(e record.Entry) bool { return e.Kind == record.KindToolCall }) {
				t.Errorf("session %s (claim %s): no tool.call in its record:\n%s", s.name, s.claim, text)
			}
			if s == killed.session {
				checkKilledRecord(t, killed, entries, text)
				continue
			}
			for _, e := range entries {
				if e.Kind == record.KindRecordGap && !strings.Contains(e.Message, "new leader resumed the record") && !strings.Contains(e.Message, "no stored record of the claim was found") {
					t.Errorf("session %s (claim %s): a gap where no fault cut the record: entry %d %q\n%s", s.name, s.claim, e.Seq, e.Message, text)
				}
			}
		}
	}
	t.Logf("records: %d read with airlock record, each intact and sealed", checked)
	return records
}

// checkKilledRecord checks the record of the session whose sandbox was killed: the first boot
// holds the files written before, and ends either in a record.gap that says the boot ended
// without its stopped entry and names its last source entry read (SIGKILL: always; a deleted
// pod: unless its sandboxd wrote and handed over its stopped entry in its grace), then a new boot
// holds the files written after; and the record verified (sealedRecordOf).
func checkKilledRecord(t testingT, k killedSandbox, entries []record.Entry, text string) {
	t.Helper()
	bootOf := map[string]string{} // a path written -> the boot that wrote it
	var boots []string
	last := map[string]uint64{}
	stoppedAt := map[string]int{} // boot -> index of its stopped entry
	gapAt, gapBoot := -1, ""
	for i, e := range entries {
		if e.Boot != "" {
			if !slices.Contains(boots, e.Boot) {
				boots = append(boots, e.Boot)
			}
			last[e.Boot] = max(last[e.Boot], e.SourceSeq)
		}
		switch e.Kind {
		case record.KindFileWrite:
			bootOf[e.Path] = e.Boot
		case record.KindSandboxStopped:
			stoppedAt[e.Boot] = i
		case record.KindRecordGap:
			if strings.Contains(e.Message, "stopped entry") && gapAt < 0 {
				gapAt = i
				for _, b := range boots {
					if strings.Contains(e.Message, "boot "+b) {
						gapBoot = b
					}
				}
			}
		}
	}
	if len(boots) < 2 {
		t.Fatalf("the killed sandbox's record holds %d boots of sandboxd, want the killed one and the one after:\n%s", len(boots), text)
	}
	first, second := boots[0], boots[1]
	for p := range k.before {
		if bootOf[p] != first {
			t.Errorf("%s written before the kill: in boot %q of the record, want the first boot %s", p, bootOf[p], first)
		}
	}
	for p := range k.after {
		if bootOf[p] != second {
			t.Errorf("%s written after the kill: in boot %q of the record, want the second boot %s", p, bootOf[p], second)
		}
	}
	_, cleanStop := stoppedAt[first]
	switch {
	case gapAt >= 0:
		want := fmt.Sprintf("after source entry %d are unknown", last[first])
		if gapBoot != first || !strings.Contains(entries[gapAt].Message, want) {
			t.Errorf("the gap %q: want it to name boot %s and say %q (the last source entry of that boot read)", entries[gapAt].Message, first, want)
		}
		if k.sigkill && !strings.Contains(entries[gapAt].Message, "sandboxd boot "+first+" ended without its stopped entry") {
			t.Errorf("sandboxd SIGKILLed: the gap %q does not say the boot ended without its stopped entry", entries[gapAt].Message)
		}
		if cleanStop {
			t.Errorf("boot %s has both a stopped entry and a gap that says it is missing:\n%s", first, text)
		}
		t.Logf("the killed sandbox's record: %s", entries[gapAt].Message)
	case k.sigkill:
		t.Errorf("sandboxd SIGKILLed: no record.gap says where boot %s was cut:\n%s", first, text)
	case cleanStop:
		t.Logf("the deleted pod's sandboxd wrote its stopped entry in its grace, and the record read it: no gap (what happened)")
	default:
		t.Errorf("boot %s ends with neither its stopped entry nor a gap:\n%s", first, text)
	}
	// The new boot follows the cut: its first entry after the gap (or the stopped entry).
	cut := gapAt
	if cut < 0 {
		cut = stoppedAt[first]
	}
	for _, e := range entries[:cut] {
		if e.Boot == second {
			t.Errorf("entry %d of boot %s stands before the first boot's end (entry %d)", e.Seq, second, entries[cut].Seq)
		}
	}
	t.Logf("the killed sandbox's session: boots %s (to source entry %d) and %s (to %d)", first, last[first], second, last[second])
}

// testingT is what checkKilledRecord needs of a *testing.T.
type testingT interface {
	Helper()
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Logf(format string, args ...any)
}
