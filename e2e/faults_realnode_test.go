//go:build e2e && realnode

package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/claimname"
	"github.com/airlock-dev/airlock/pkg/syncback"
)

// faultFiles is what one session wrote: path in its workspace -> content.
type faultFiles map[string][]byte

func (f faultFiles) hashes() map[string]string {
	out := make(map[string]string, len(f))
	for p, b := range f {
		sum := sha256.Sum256(b)
		out[p] = hex.EncodeToString(sum[:])
	}
	return out
}

func (f faultFiles) size() int64 {
	var n int64
	for _, b := range f {
		n += int64(len(b))
	}
	return n
}

// faultSession is one session of the real-node suite: what it wrote, through the sandbox's MCP
// tools, and the claim that held it.
type faultSession struct {
	name, runtime, handle string
	files                 faultFiles
	claim                 string
	workspace             string
}

// writeSteps are the MCP tool calls that write files: Write for each (sorted, so that the names
// give the copy's walk order), then Bash for what Write cannot (a file the sync-back cannot read,
// a file larger than a plan may carry).
func writeSteps(files faultFiles, bash ...string) []map[string]any {
	names := make([]string, 0, len(files))
	for p := range files {
		names = append(names, p)
	}
	sort.Strings(names)
	var steps []map[string]any
	for i, p := range names {
		if strings.HasPrefix(p, "zeros/") || strings.HasPrefix(p, "gen/") {
			continue // made by bash
		}
		steps = append(steps, step(fmt.Sprintf("write-%d", i), "Write", map[string]any{"file_path": p, "content": string(files[p])}))
	}
	for i, cmd := range bash {
		steps = append(steps, step(fmt.Sprintf("bash-%d", i), "Bash", map[string]any{"command": cmd}))
	}
	return steps
}

// sessionFiles is n files of known, distinct content for session name.
func sessionFiles(name string, n, size int) faultFiles {
	out := faultFiles{}
	for i := range n {
		var b bytes.Buffer
		for b.Len() < size {
			fmt.Fprintf(&b, "%s file %03d line %06d: the session's own work\n", name, i, b.Len())
		}
		out[fmt.Sprintf("src/f%03d.txt", i)] = b.Bytes()[:size]
	}
	return out
}

// generatedFiles is n small files below dir that a Bash call makes (a plan, one argument of the
// runtime pod, holds at most 128 KiB): their content, and the command.
func generatedFiles(session, dir string, n int) (faultFiles, string) {
	out := faultFiles{}
	// Each file: its line, then 64 KiB of the session's line (yes | head), so that the copy, which
	// flushes every file, takes long enough to be killed halfway.
	line := session + " generated\n"
	fill := bytes.Repeat([]byte(line), 65536/len(line)+1)[:65536]
	for i := range n {
		out[fmt.Sprintf("%s/f%03d.txt", dir, i)] = append(fmt.Appendf(nil, "%s generated file %03d\n", session, i), fill...)
	}
	cmd := fmt.Sprintf(`mkdir -p %s && i=0 && while [ $i -lt %d ]; do f=%s/f$(printf %%03d $i).txt; printf '%s generated file %%03d\n' $i > $f; yes '%s generated' | head -c 65536 >> $f; i=$((i+1)); done`, dir, n, dir, session, session)
	return out, cmd
}

// with returns the files of f and more together.
func (f faultFiles) with(more faultFiles) faultFiles {
	out := faultFiles{}
	for _, m := range []faultFiles{f, more} {
		for p, b := range m {
			out[p] = b
		}
	}
	return out
}

// faultRealnode runs the real-node suite's sessions and faults.
type faultRealnode struct {
	t         *testing.T
	e         *realnodeEnv
	monitor   *faultMonitor
	sessions  []*faultSession
	faults    int
	podSerial atomic.Int64
	// traces gives each session a root span of its own (nil: no trace collector).
	traces *sessionTraces
}

// run runs one session as runtime rt (its ServiceAccount has the runtime's name): acquire the
// handle, the steps through MCP, then sessions/close, which reaps the claim with sync-back.
func (r *faultRealnode) run(rt, session, handle string, files faultFiles, bash ...string) *faultSession {
	r.t.Helper()
	return r.runSteps(rt, session, handle, files, files, true, bash...)
}

// runSteps runs one session's steps that write files (and bash) as runtime rt, and closes the
// session when close is set: then the session, whose work is all (files and what it wrote
// before), is the suite's to check. Without close the claim stays Bound, and the session is
// returned, not kept (the work checked is the one of its closing run).
func (r *faultRealnode) runSteps(rt, session, handle string, files, all faultFiles, close bool, bash ...string) *faultSession {
	t := r.t
	t.Helper()
	plan := map[string]any{"api": apiURL(), "namespace": r.e.ns, "runtime": rt, "session": session, "handle": handle, "close": close,
		"steps": writeSteps(files, bash...)}
	if r.traces != nil {
		// Its own trace: every Sandbox API request and tool call of the session (all its runs)
		// under the session's root span, which ends with the session's close.
		plan["traceparent"] = r.traces.traceparent(t, session)
		if close {
			defer r.traces.end(session)
		}
	}
	var res rnSession
	err := r.e.runClientWith(fmt.Sprintf("rt-%s-%d", session, r.podSerial.Add(1)), "session", plan, 4*time.Minute, &res, func(p *corev1.Pod) {
		p.Spec.ServiceAccountName = rt
	})
	if err != nil {
		t.Fatalf("session %s: %v", session, err)
	}
	if res.Error != "" || res.Phase != "Bound" {
		t.Fatalf("session %s: %s %s", session, res.Phase, res.Error)
	}
	for _, c := range res.Calls {
		if c.Err != "" || c.IsError {
			t.Fatalf("session %s: %s: %q %s", session, c.Name, c.Err, c.Text)
		}
	}
	// The claim may be gone already (closed, its pod stopped at once, synced back): its workspace
	// is the one the watch saw.
	workspace := r.monitor.workspaceOf(res.Claim)
	if workspace == "" {
		t.Fatalf("session %s: the watch never saw its claim %s", session, res.Claim)
	}
	s := &faultSession{name: session, runtime: rt, handle: handle, files: all, claim: res.Claim, workspace: workspace}
	if close {
		r.sessions = append(r.sessions, s)
	}
	t.Logf("session %s (%s): %d files, %d bytes written in claim %s", session, rt, len(files), files.size(), res.Claim)
	return s
}

// waitGone waits for the session's claim to be synced back and deleted.
func (r *faultRealnode) waitGone(s *faultSession) {
	r.t.Helper()
	eventually(r.t, 4*time.Minute, "claim "+s.claim+" synced back and deleted", func(ctx context.Context) (bool, error) {
		_, err := airlockClient.AirlockV1alpha1().SandboxClaims(r.e.ns).Get(ctx, s.claim, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
}

// waitFailedAttempt waits for a failed sync-back attempt of the session's claim (its
// sync-failures annotation), and returns the count.
func (r *faultRealnode) waitFailedAttempt(s *faultSession) int {
	r.t.Helper()
	n := 0
	eventually(r.t, 3*time.Minute, "a failed sync-back attempt of "+s.claim, func(ctx context.Context) (bool, error) {
		c, err := airlockClient.AirlockV1alpha1().SandboxClaims(r.e.ns).Get(ctx, s.claim, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		n, _ = strconv.Atoi(c.Annotations[airlockv1alpha1.AnnotationSyncFailures])
		return n >= 1, nil
	})
	return n
}

// contentHashes lists every regular file below the content volume's root with its SHA-256, as
// a pod of the namespace that mounts the PVC read-only sees them: path -> hash.
func (r *faultRealnode) contentHashes() map[string]string {
	t := r.t
	t.Helper()
	name := fmt.Sprintf("hashes-%d", r.podSerial.Add(1))
	pod := restrictedPod(name, map[string]string{"app": "reader"}, realnodeSandboxImage(), nil)
	// A file a fault made unreadable is left out (its sha256sum error goes to /dev/null).
	pod.Spec.Containers[0].Command = []string{"sh", "-c", "cd /content && find . -type f -exec sha256sum {} + 2>/dev/null; true"}
	pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "content", MountPath: "/content", ReadOnly: true}}
	pod.Spec.Volumes = []corev1.Volume{{Name: "content", VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "workspace-content", ReadOnly: true},
	}}}
	phase, logs, err := runPodToEnd(context.Background(), r.e.ns, pod, 2*time.Minute)
	if err != nil || phase != corev1.PodSucceeded {
		t.Fatalf("hashing the content volume: %s %v\n%s", phase, err, logs)
	}
	out := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(logs)), "\n") {
		hash, p, ok := strings.Cut(line, "  ")
		if !ok {
			t.Fatalf("sha256sum printed %q", line)
		}
		out[path.Clean(p)] = hash
	}
	return out
}

// tree is the files below dir in hashes, by their path inside dir.
func tree(hashes map[string]string, dir string) map[string]string {
	out := map[string]string{}
	for p, h := range hashes {
		if rel, ok := strings.CutPrefix(p, dir+"/"); ok {
			out[rel] = h
		}
	}
	return out
}

// locations are the directories where a session's work may be kept: a target, its versions,
// and the workspaces left in the content volume.
func locations(hashes map[string]string, targets []string, sandboxesDir string) []string {
	seen := map[string]bool{}
	var out []string
	add := func(d string) {
		if !seen[d] {
			seen[d] = true
			out = append(out, d)
		}
	}
	for _, target := range targets {
		add(target)
		versions := path.Join(path.Dir(target), syncback.VersionsDir(path.Base(target)))
		for p := range hashes {
			if rel, ok := strings.CutPrefix(p, versions+"/"); ok {
				add(versions + "/" + strings.SplitN(rel, "/", 2)[0])
			}
		}
	}
	for p := range hashes {
		if rel, ok := strings.CutPrefix(p, sandboxesDir+"/"); ok {
			add(sandboxesDir + "/" + strings.SplitN(rel, "/", 2)[0])
		}
	}
	sort.Strings(out)
	return out
}

// equalTrees says whether a location holds exactly a session's files, byte for byte.
func equalTrees(got, want map[string]string) bool {
	if len(got) != len(want) {
		return false
	}
	for p, h := range want {
		if got[p] != h {
			return false
		}
	}
	return true
}

// mountTmpfs mounts a tmpfs of size at dir on the node, when the node is this machine (the
// real node of hack/e2e-node.sh: the suite runs as root beside its kubelet), and unmounts it when
// the test ends. The sync-back Job's pod, created later, sees it through its volume's bind mount.
func mountTmpfs(t *testing.T, dir, size string) (remount func(size string), ok bool) {
	t.Helper()
	if st, err := os.Stat(path.Dir(dir)); err != nil || !st.IsDir() {
		return nil, false
	}
	if err := os.MkdirAll(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("mount", args...).CombinedOutput(); err != nil {
			t.Fatalf("mount %v: %v\n%s", args, err, out)
		}
	}
	run("-t", "tmpfs", "-o", "size="+size+",mode=0777", "tmpfs", dir)
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v\n%s", dir, err, out)
		}
	})
	return func(size string) { run("-o", "remount,size="+size, dir) }, true
}

// faultExtraSessions are the sessions into target A beyond the suite's faults, and
// faultTargetVersions the versions its targets keep: every sync-back into target A (a1, a2, a3,
// the extra ones, k1 and d1) leaves the one before as a version.
const (
	faultExtraSessions  = 4
	faultTargetVersions = 5 + faultExtraSessions
)

// TestRealNodeFaultSuite (issue 24, item 5, on real pods and Jobs): sessions of two runtimes write
// known content through the sandbox's MCP tools and close, while the suite makes their sync-backs
// fail mid-copy (a file the Job cannot read, found halfway through the walk; the Job's pod killed
// while it copies), fills a target's volume (a tmpfs too small), kills the leader operator while a
// sync-back runs, kills a sandbox mid-session (sandboxd SIGKILLed, or its pod deleted with grace
// 0), and deletes a runtime while its session's sync-back runs. A watch holds the
// limits and one writer per workspace throughout. Then, by content hash, every byte each session
// wrote is in its target, in a kept version (.<target>.airlock-versions), or still in its
// workspace, and every target and version holds one session's files exactly (never a mixture,
// never half); the one exception is the work of the deleted runtime's session, which SPEC section
// 3 says is lost unless its sync-back finished ("Deletion of the runtime"). And every session's
// record (issue 42, docs/record.md §2.6) verifies intact and sealed with `airlock record`, says
// nothing was cut but where a fault cut it: the killed sandbox's boot ends in a record.gap that
// names the last source entry read, and the sandbox that took its place goes on in the record.
// And each session ran under a sampled root span of its own (the Sandbox API's header, every tool
// call's params._meta), whose trace one query of Jaeger finds whole (checkTraces: docs/record.md
// §1, "Faults").
func TestRealNodeFaultSuite(t *testing.T) {
	requireRealNode(t)
	const targetA, targetB = "out/a", "full/b"
	e := newRealnodeEnv(t, "airlock-rn-faults", realnodeOptions{maxConcurrent: 3, maxPerSession: 2, maxInstances: 6, targetPath: targetA})
	ctx := context.Background()
	// A second registry entry, the same class, whose target lives on a volume that fills up.
	// (The operator writes the registry's status meanwhile: read it again on a conflict.)
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		reg, err := airlockClient.AirlockV1alpha1().ToolRegistries(e.ns).Get(ctx, "tools", metav1.GetOptions{})
		if err != nil {
			return err
		}
		// Every earlier session into a target is kept as one of its versions: as many as the
		// suite's sync-backs into it (issue 39: no cap of four sync-backs a target any more).
		reg.Spec.Sandboxes[0].TargetVersions = ptr.To[int32](faultTargetVersions)
		spill := reg.Spec.Sandboxes[0]
		spill.Name, spill.TargetPath = "spill", targetB
		reg.Spec.Sandboxes = append(reg.Spec.Sandboxes, spill)
		_, err = airlockClient.AirlockV1alpha1().ToolRegistries(e.ns).Update(ctx, reg, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	rt, err := airlockClient.AirlockV1alpha1().AgentRuntimes(e.ns).Get(ctx, "agent", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	doomed := &airlockv1alpha1.AgentRuntime{ObjectMeta: metav1.ObjectMeta{Name: "doomed", Namespace: e.ns}, Spec: *rt.Spec.DeepCopy()}
	doomed.Spec.ServiceAccountName = "doomed"
	if _, err := kubeClient.CoreV1().ServiceAccounts(e.ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "doomed"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := airlockClient.AirlockV1alpha1().AgentRuntimes(e.ns).Create(ctx, doomed, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	remount, local := mountTmpfs(t, path.Join(e.hostDir, path.Dir(targetB)), "2m")
	if !local {
		t.Fatalf("the full-target fault mounts a tmpfs on the node's content directory %s from the test process: the node must be this machine (hack/e2e-node.sh)", e.hostDir)
	}

	limits := faultLimits{
		maxPerSession: map[string]int{"agent": 2, "doomed": 2}, maxConcurrent: map[string]int{"agent": 3, "doomed": 3},
		maxInstances: map[string]int{"codegen": 6, "spill": 6},
	}
	watchCtx, stopWatch := context.WithCancel(ctx)
	monitor := newFaultMonitor(e.ns, limits, faultWhyBound)
	waitWatch := monitor.start(watchCtx)
	defer func() { stopWatch(); waitWatch() }()
	r := &faultRealnode{t: t, e: e, monitor: monitor, traces: newSessionTraces(t)}

	// Target A: a first session; then one whose sync-back fails halfway through its walk (a file it
	// cannot read, sorted last), repaired on the node; then one whose Job's pod is killed while it
	// copies, with the leader killed at once; then the doomed runtime's, deleted while it syncs.
	a1 := r.run("agent", "a1", "codegen/default", sessionFiles("a1", 3, 4096))
	r.waitGone(a1)
	a2files := sessionFiles("a2", 20, 1024)
	a2files["zz-locked.txt"] = []byte("a2: the file the sync-back cannot read until it is repaired\n")
	a2 := r.run("agent", "a2", "codegen/default", a2files, "chmod 000 zz-locked.txt")
	r.faults++
	t.Logf("fault: sync-back of %s fails mid-copy (attempt %d failed)", a2.claim, r.waitFailedAttempt(a2))
	if got := tree(r.contentHashes(), targetA); !equalTrees(got, a1.files.hashes()) {
		t.Errorf("after a failed sync-back the target holds %d files, not the first session's %d, byte for byte", len(got), len(a1.files))
	}
	shell := nodeShell(t)
	if err := shell(ctx, "repair-locked", "chmod 644 /node/"+path.Base(e.hostDir)+"/"+a2.workspace+"/zz-locked.txt"); err != nil {
		t.Fatal(err)
	}
	r.waitGone(a2)

	a3gen, a3cmd := generatedFiles("a3", "gen", 300)
	a3wait := onSyncRunning(e.ns, claimname.For("agent", "a3", "codegen/default"), func(ctx context.Context, pod *corev1.Pod) error {
		if err := kubeClient.CoreV1().Pods(e.ns).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptrInt64(0)}); err != nil {
			return err
		}
		return deleteLeaderPod(ctx)
	})
	a3 := r.run("agent", "a3", "codegen/default", sessionFiles("a3", 5, 1024).with(a3gen), a3cmd)
	var leaderKill leaderKilled
	if ran, err := a3wait(); err != nil {
		t.Fatal(err)
	} else if ran {
		r.faults += 2
		leaderKill = leaderKilled{at: lastKilledAt, during: a3}
		t.Log("fault: the sync-back pod of a3 killed while it copies, and the leader operator pod killed at once")
		waitNewLeader(t)
	} else {
		t.Log("the sync-back of a3 was never seen running: nothing killed mid-copy")
	}
	r.waitGone(a3)
	// More sessions into target A than the three versions a target kept before (issue 39): each
	// earlier one is kept as a version, as the entry's targetVersions says.
	for i := 4; i < 4+faultExtraSessions; i++ {
		name := fmt.Sprintf("a%d", i)
		r.waitGone(r.run("agent", name, "codegen/default", sessionFiles(name, 3, 2048)))
	}

	// A sandbox killed mid-session (issue 42): its record says where it was cut, the session
	// goes on in the sandbox that takes its place, and its work is synced back whole.
	killed := r.killedSandboxSession("agent", "k1", "codegen/default")
	r.waitGone(killed.session)

	// Target B, on a 2 MiB tmpfs: a small session, then one of 3 MiB that cannot fit; the volume
	// is then made larger and the retry saves it.
	b1 := r.run("agent", "b1", "spill/default", sessionFiles("b1", 2, 1024))
	r.waitGone(b1)
	b2files := sessionFiles("b2", 2, 1024)
	b2files["zeros/big.bin"] = make([]byte, 3<<20)
	b2 := r.run("agent", "b2", "spill/default", b2files, "mkdir -p zeros && head -c 3145728 /dev/zero > zeros/big.bin")
	r.faults++
	t.Logf("fault: target %s full (attempt %d of %s failed)", targetB, r.waitFailedAttempt(b2), b2.claim)
	remount("64m")
	r.waitGone(b2)

	d1gen, d1cmd := generatedFiles("d1", "gen", 300)
	d1wait := onSyncRunning(e.ns, claimname.For("doomed", "d1", "codegen/default"), func(ctx context.Context, _ *corev1.Pod) error {
		return airlockClient.AirlockV1alpha1().AgentRuntimes(e.ns).Delete(ctx, "doomed", metav1.DeleteOptions{})
	})
	d1 := r.run("doomed", "d1", "codegen/default", sessionFiles("d1", 5, 1024).with(d1gen), d1cmd)
	if ran, err := d1wait(); err != nil {
		t.Fatal(err)
	} else if ran {
		r.faults++
		t.Log("fault: runtime doomed deleted while its session's sync-back runs")
	} else if err := airlockClient.AirlockV1alpha1().AgentRuntimes(e.ns).Delete(ctx, "doomed", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	} else {
		t.Log("the sync-back of d1 was never seen running: runtime doomed deleted after it")
	}
	r.waitGone(d1)

	r.checkNothingLost(monitor, []string{targetA, targetB}, "doomed")
	records := r.checkRecords(killed, "doomed")
	r.checkTraces(records, killed, leaderKill, "doomed")
}

// checkNothingLost hashes the content volume and checks every session's work against it, then
// reports the suite's counts.
func (r *faultRealnode) checkNothingLost(monitor *faultMonitor, targets []string, lossAllowedRuntime string) {
	t := r.t
	t.Helper()
	hashes := r.contentHashes()
	locs := locations(hashes, targets, r.e.ns+"/sandboxes")
	var bytesChecked int64
	for _, s := range r.sessions {
		want := s.files.hashes()
		var found []string
		for _, l := range locs {
			if equalTrees(tree(hashes, l), want) {
				found = append(found, l)
			}
		}
		switch {
		case len(found) > 0:
			bytesChecked += s.files.size()
			t.Logf("session %s: its %d files (%d bytes) are whole in %v", s.name, len(s.files), s.files.size(), found)
		case s.runtime == lossAllowedRuntime:
			t.Logf("session %s of the deleted runtime: its work is not kept (SPEC section 3: a runtime's deletion loses what no sync-back saved)", s.name)
		default:
			monitor.addViolation("lost "+s.name, fmt.Sprintf("session %s: its %d files are in no target, version or workspace whole", s.name, len(s.files)))
		}
	}
	// Every target and version holds exactly one session's files: never half, never a mixture.
	for _, l := range locs {
		if strings.HasPrefix(l, r.e.ns+"/sandboxes/") {
			continue
		}
		got, whole := tree(hashes, l), false
		for _, s := range r.sessions {
			whole = whole || equalTrees(got, s.files.hashes())
		}
		if !whole {
			monitor.addViolation("mixed "+l, fmt.Sprintf("%s holds %d files that are no one session's work exactly", l, len(got)))
		}
	}
	monitor.checkSilent()
	violations := monitor.allViolations()
	t.Logf("fault suite (real node): %d sessions, %d faults injected, %d bytes checked by SHA-256 in %d locations, %d violations",
		len(r.sessions), r.faults, bytesChecked, len(locs), len(violations))
	t.Logf("watch: %s", monitor.summary())
	for _, v := range violations {
		t.Errorf("violation: %s", v)
	}
}

// onSyncRunning watches, from now, the pods of the claim's sync-back Jobs; as soon as one is
// Running, act runs (in the watch's goroutine, so that it lands while the pod copies). The
// returned function waits for that, or for the watch to end (4 min: the sync-back was never seen
// running), and says whether act ran, and act's error.
func onSyncRunning(ns, claimName string, act func(context.Context, *corev1.Pod) error) (wait func() (bool, error)) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	type result struct {
		ran bool
		err error
	}
	done := make(chan result, 1)
	w, err := kubeClient.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{LabelSelector: airlockv1alpha1.LabelSyncOf + "=" + claimName})
	if err != nil {
		cancel()
		return func() (bool, error) { return false, err }
	}
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			if p, ok := ev.Object.(*corev1.Pod); ok && ev.Type != watch.Deleted && p.Status.Phase == corev1.PodRunning {
				done <- result{true, act(ctx, p)}
				return
			}
		}
		done <- result{}
	}()
	return func() (bool, error) {
		defer cancel()
		r := <-done
		return r.ran, r.err
	}
}

// deleteLeaderPod kills the leader operator pod of the in-cluster install (grace period 0).
func deleteLeaderPod(ctx context.Context) error {
	leader, err := leaseHolder(ctx, operatorNamespace, "airlock-operator")
	if err != nil || leader == "" {
		return fmt.Errorf("no leader: %q %v", leader, err)
	}
	lastKilledLeader, lastKilledAt = strings.SplitN(leader, "_", 2)[0], time.Now()
	return kubeClient.CoreV1().Pods(operatorNamespace).Delete(ctx, lastKilledLeader, metav1.DeleteOptions{GracePeriodSeconds: ptrInt64(0)})
}

// lastKilledLeader is the operator pod deleteLeaderPod killed last, and lastKilledAt when.
var (
	lastKilledLeader string
	lastKilledAt     time.Time
)

// waitNewLeader waits for a replica other than the one killed to lead, and, when the test ends,
// for the operator Deployment to be back at 2 available replicas.
func waitNewLeader(t *testing.T) {
	t.Helper()
	killed := lastKilledLeader
	eventually(t, 2*time.Minute, "a new leader", func(ctx context.Context) (bool, error) {
		h, err := leaseHolder(ctx, operatorNamespace, "airlock-operator")
		return err == nil && h != "" && !strings.HasPrefix(h, killed+"_"), nil
	})
	t.Cleanup(func() {
		eventually(t, 2*time.Minute, "the operator Deployment back at 2 available replicas", func(ctx context.Context) (bool, error) {
			d, err := kubeClient.AppsV1().Deployments(operatorNamespace).Get(ctx, "airlock-operator", metav1.GetOptions{})
			return err == nil && d.Status.AvailableReplicas == 2, nil
		})
	})
}
