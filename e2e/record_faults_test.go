//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/airlock-dev/airlock/e2e/internal/jaeger"
	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/record"
	"github.com/airlock-dev/airlock/pkg/recordstore"
)

// The record under the fault suite's faults (docs/record.md §2.6): a leader kill and a stalled
// API server here, on the API-only plane (kwok's pods run no sandboxd: a record holds the
// operator's entries); a killed sandbox pod in TestRealNodeFaultSuite.

// sealedRecordOf runs `airlock record` on the record of the claim with uid: it fails the test
// unless the command says the record verifies intact and sealed, and returns its entries (the
// command's `-o jsonl`) and its text.
func sealedRecordOf(t *testing.T, ns, name, uid string) ([]record.Entry, string) {
	t.Helper()
	text, ok := airlockRecord(t, name, "-n", ns, "--uid", uid)
	if !ok || !strings.Contains(text, "Verified: intact and sealed") {
		t.Errorf("airlock record %s (UID %s): exit 0 %v, want a record intact and sealed:\n%s", name, uid, ok, text)
	}
	cmd := exec.Command(airlockBinary(t), "record", "--kubeconfig="+os.Getenv("KUBECONFIG"), name, "-n", ns, "--uid", uid, "-o", "jsonl")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("airlock record %s -o jsonl: %v\n%s", name, err, stderr.String())
	}
	entries, _, err := record.ReadJSONL(bytes.NewReader(out))
	if err != nil {
		t.Fatalf("airlock record %s -o jsonl: %v\n%s", name, err, out)
	}
	return entries, text
}

// phaseRank orders a claim's phases as a session passes them (SPEC section 5); Failed and
// Refused end it from any phase.
var phaseRank = map[string]int{
	string(airlockv1alpha1.ClaimPending): 0,
	string(airlockv1alpha1.ClaimQueued):  1,
	string(airlockv1alpha1.ClaimBinding): 2,
	string(airlockv1alpha1.ClaimBound):   3,
	string(airlockv1alpha1.ClaimReaping): 4,
	string(airlockv1alpha1.ClaimFailed):  5,
	string(airlockv1alpha1.ClaimRefused): 5,
}

// recordedPhases checks that a record's claim.phase entries go forward (none back, none twice
// in a row with the same reason), that its last entry is the seal, and returns the phases.
func recordedPhases(t *testing.T, name string, entries []record.Entry) []string {
	t.Helper()
	var phases []string
	last, lastReason := -1, ""
	for _, e := range entries {
		if e.Kind != record.KindClaimPhase {
			continue
		}
		r, ok := phaseRank[e.Phase]
		switch {
		case !ok:
			t.Errorf("claim %s: entry %d records phase %q, not a claim's phase", name, e.Seq, e.Phase)
		case r < last:
			t.Errorf("claim %s: entry %d records %s after %s: the phases are out of order", name, e.Seq, e.Phase, phases[len(phases)-1])
		case r == last && e.Reason == lastReason:
			t.Errorf("claim %s: entry %d records %s (%s) twice", name, e.Seq, e.Phase, e.Reason)
		}
		last, lastReason = r, e.Reason
		phases = append(phases, e.Phase)
	}
	if len(entries) == 0 || entries[len(entries)-1].Kind != record.KindRecordSealed {
		t.Errorf("claim %s: the record does not end with its seal", name)
	}
	return phases
}

// storedAnchors are the anchors of the namespace's stored records, by claim UID: the last
// segment's (what a leader stored last).
func storedAnchors(ctx context.Context, ns string) (map[string]*record.Anchor, error) {
	list, err := airlockClient.AirlockV1alpha1().SessionRecords(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out, lastN := map[string]*record.Anchor{}, map[string]int{}
	for i := range list.Items {
		seg, err := recordstore.Parse(&list.Items[i])
		if err != nil || seg.Anchor == nil {
			continue
		}
		uid := list.Items[i].Spec.ClaimUID
		if n, ok := lastN[uid]; !ok || seg.N > n {
			out[uid], lastN[uid] = seg.Anchor, seg.N
		}
	}
	return out, nil
}

// TestRecordLeaderFailover (API-only, issue 42's fault suite): claims that queue, bind, idle and
// are reaped under maxConcurrent, while the leader is killed (SIGKILL: its entries not yet stored
// are lost with it) and the standby takes over. Afterwards every claim's record, read with
// `airlock record`, verifies intact and sealed and holds its phases in order; each record that
// was stored and live at the kill says where the previous leader's unstored entries may have
// been lost: a record.gap right after the last entry that leader stored ("a new leader resumed
// the record after entry N"), never a silent jump.
//
// And the trace (docs/record.md §1, "Faults"): both operators export to a real Jaeger; each claim
// carries a sampled traceparent (airlock.dev/traceparent, as the Sandbox API writes it: the test
// exports that span, the stand-in of the acquire's) and a targetPath of its own, so that it is
// synced back when reaped; afterwards one query of each claim's trace finds its syncback span(s)
// parented on that span, one per attempt, none twice (checkFailoverTraces).
func TestRecordLeaderFailover(t *testing.T) {
	const claims, lease = 8, "airlock-operator-e2e"
	collector := jaeger.Start(t)
	traces := newRuntimeTraces(t, otlpOf(collector))
	e := newClaimEnv(t, "airlock-record-failover", claimEnvOptions{maxConcurrent: 3, maxPerSession: 1, maxInstances: 100, idleTimeout: 5 * time.Second})
	a := startClaimOperatorWithArgs(t, e.ns, operatorTracingArgs(collector)...)
	var first string
	eventually(t, 30*time.Second, "a lease holder", func(ctx context.Context) (bool, error) {
		h, err := leaseHolder(ctx, e.ns, lease)
		first = h
		return h != "", err
	})
	startClaimOperatorWithArgs(t, e.ns, operatorTracingArgs(collector)...) // the standby

	var created []*airlockv1alpha1.SandboxClaim
	roots := map[string]trace.SpanContext{} // claim UID -> its acquire span's stand-in
	for i := range claims {
		session := fmt.Sprintf("session-%d", i)
		span, tp := traces.start(t, "acquire "+session)
		c := e.createTracedClaim(t, session, "codegen/default", "out/"+session, tp)
		span.End()
		created = append(created, c)
		roots[string(c.UID)] = span.SpanContext()
	}
	// The kill, while the claims change phase: some Bound (their records stored), some waiting.
	eventually(t, 90*time.Second, "claims Bound while others wait", func(ctx context.Context) (bool, error) {
		phases, _, err := e.phases(ctx)
		if err != nil {
			return false, err
		}
		anchors, err := storedAnchors(ctx, e.ns)
		return err == nil && phases[airlockv1alpha1.ClaimBound] >= 1 && phases[airlockv1alpha1.ClaimPending]+phases[airlockv1alpha1.ClaimQueued]+phases[airlockv1alpha1.ClaimBinding] >= 1 && len(anchors) >= 1, nil
	})
	if h, _ := leaseHolder(context.Background(), e.ns, lease); h != first {
		t.Fatalf("the lease moved to %q before the kill; want the first operator %q to lead", h, first)
	}
	killedAt := time.Now()
	_ = a.stop(t, syscall.SIGKILL)
	// What the killed leader stored: nothing more is written until the standby leads (a lease).
	atKill, err := storedAnchors(context.Background(), e.ns)
	if err != nil {
		t.Fatal(err)
	}
	syncedAtKill := syncedBack(t, e.ns, created)
	t.Logf("leader killed with %d records stored", len(atKill))
	eventually(t, 60*time.Second, "the standby to take the lease", func(ctx context.Context) (bool, error) {
		h, err := leaseHolder(ctx, e.ns, lease)
		return h != "" && h != first, err
	})
	for _, c := range created {
		e.waitGone(t, c.Name, 3*time.Minute)
	}

	resumed := 0
	for _, c := range created {
		uid := string(c.UID)
		waitRecordSealed(t, e.ns, uid, time.Minute)
		entries, text := sealedRecordOf(t, e.ns, c.Name, uid)
		phases := recordedPhases(t, c.Name, entries)
		if len(phases) == 0 || phases[len(phases)-1] != string(airlockv1alpha1.ClaimReaping) {
			t.Errorf("claim %s: phases %v, want them to end Reaping (the claim was reaped)", c.Name, phases)
		}
		var gaps []record.Entry
		for _, en := range entries {
			if en.Kind == record.KindRecordGap && strings.Contains(en.Message, "new leader resumed the record") {
				gaps = append(gaps, en)
			}
		}
		anchor := atKill[uid]
		switch {
		case anchor == nil || anchor.Sealed:
			if len(gaps) != 0 {
				t.Errorf("claim %s: no live record was stored at the kill, yet the record says a leader resumed it: %q", c.Name, gaps[0].Message)
			}
			// Begun by the new leader (created before its term): if it begins past Pending, a
			// gap before says that what came before is unknown.
			if anchor == nil && len(phases) > 0 && phases[0] != string(airlockv1alpha1.ClaimPending) && !strings.Contains(text, "no stored record of the claim was found") {
				t.Errorf("claim %s: begun by the new leader at %s, and nothing says its earlier phases are unknown:\n%s", c.Name, phases[0], text)
			}
			t.Logf("claim %s: no live record stored at the kill; phases %v", c.Name, phases)
		case len(gaps) != 1:
			t.Errorf("claim %s: stored with %d entries at the kill; the record has %d gaps saying where the new leader resumed it, want 1:\n%s", c.Name, anchor.Count, len(gaps), text)
		case gaps[0].Seq != anchor.Count+1 || !strings.Contains(gaps[0].Message, fmt.Sprintf("after entry %d,", anchor.Count)):
			t.Errorf("claim %s: stored with %d entries at the kill; the gap stands at entry %d and says %q", c.Name, anchor.Count, gaps[0].Seq, gaps[0].Message)
		default:
			resumed++
			if resumed == 1 {
				t.Logf("claim %s (stored with %d entries at the kill):\n%s", c.Name, anchor.Count, text)
			}
			t.Logf("claim %s: phases %v; %s", c.Name, phases, gaps[0].Message)
		}
	}
	if resumed == 0 {
		t.Errorf("no record was live and stored at the kill: the failover was not under test")
	}
	checkFailoverTraces(t, collector, traces, created, roots, syncedAtKill, killedAt)
}

// claimPhaseWatch records every phase (and reason) of a claim as the API server reports it,
// watching again from the last resourceVersion when a watch ends (an API server stalled).
type claimPhaseWatch struct {
	mu      sync.Mutex
	phases  []string
	reaping chan struct{}
	once    sync.Once
}

func watchClaimPhases(ctx context.Context, c *airlockv1alpha1.SandboxClaim) *claimPhaseWatch {
	w := &claimPhaseWatch{phases: []string{string(airlockv1alpha1.ClaimPending)}, reaping: make(chan struct{})}
	go func() {
		rv := c.ResourceVersion
		for ctx.Err() == nil {
			wi, err := airlockClient.AirlockV1alpha1().SandboxClaims(c.Namespace).Watch(ctx, metav1.ListOptions{
				ResourceVersion: rv, FieldSelector: fields.OneTermEqualSelector("metadata.name", c.Name).String()})
			if err != nil {
				retryPause(ctx)
				continue
			}
			for ev := range wi.ResultChan() {
				got, ok := ev.Object.(*airlockv1alpha1.SandboxClaim)
				if !ok || got.UID != c.UID {
					continue
				}
				rv = got.ResourceVersion
				if ev.Type == watch.Deleted {
					continue
				}
				w.observe(got)
			}
		}
	}()
	return w
}

func (w *claimPhaseWatch) observe(c *airlockv1alpha1.SandboxClaim) {
	p := string(c.Status.Phase)
	if p == "" {
		return
	}
	w.mu.Lock()
	if w.phases[len(w.phases)-1] != p {
		w.phases = append(w.phases, p)
	}
	w.mu.Unlock()
	if c.Status.Phase == airlockv1alpha1.ClaimReaping {
		w.once.Do(func() { close(w.reaping) })
	}
}

func (w *claimPhaseWatch) seen() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.phases...)
}

// isSubsequence says whether every element of sub stands in seq, in the same order.
func isSubsequence(sub, seq []string) bool {
	i := 0
	for _, s := range seq {
		if i < len(sub) && sub[i] == s {
			i++
		}
	}
	return i == len(sub)
}

// TestRecordAPIServerStall (API-only, issue 42's fault suite): kube-apiserver is stopped
// (SIGSTOP) as a claim goes Reaping (idle), while its record holds entries the leader read and has
// not stored (the Reaping phase, waiting for the one-second batch or for the seal's write), for
// longer than that batch and within the operator's renew deadline (the same leader keeps them). Afterwards the record is stored with those entries,
// verifies intact and sealed once the claim is reaped, and invents nothing: its phases are the
// claim's phases as the API server reported them, in order, none twice, and no gap but the one
// that says sandboxd's log is not read (no operator ingress on this plane).
//
// And the trace (docs/record.md §1, "Faults"): the operator exports to a real Jaeger; acquires
// sent through the Sandbox API, each under a span of its own, two while kube-apiserver is stopped
// and one after, are each answered, and each has its one acquire span under the caller's span,
// exported once the stall is over (checkStallTraces).
func TestRecordAPIServerStall(t *testing.T) {
	apiserver, ok := apiServerProcess(t)
	if !ok {
		t.Skip("runs against a cluster it did not start: it cannot stall its API server")
	}
	// Past the record's batch (flushDelay, 1 s), within the operator's renew deadline (4 s).
	const stall = 2500 * time.Millisecond
	e := newClaimEnv(t, "airlock-record-stall", claimEnvOptions{maxConcurrent: 5, maxPerSession: 3, idleTimeout: 5 * time.Second})
	// The trace (docs/record.md §1, "Faults"): the operator exports to a real Jaeger, and acquires
	// are sent with a traceparent of their own while the API server is stopped and after it.
	collector := jaeger.Start(t)
	traces := newRuntimeTraces(t, otlpOf(collector))
	op := startAPIOperator(t, e.ns, operatorTracingArgs(collector)...)
	acquires := &tracedAcquires{op: op, token: serviceAccountToken(t, e.ns, "agent"), traces: traces, ns: e.ns}
	var resumedAt time.Time
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// A few tries: the stall must find entries not yet stored (the batch leaves them unstored
	// for a second after the first; a try that comes after the store is not the fault).
	var (
		c           *airlockv1alpha1.SandboxClaim
		w           *claimPhaseWatch
		storedAt    uint64
		stallBegan  time.Time
		unstored    []record.Entry
		stalledOnce bool
	)
	for try := range 3 {
		c = e.createClaim(t, fmt.Sprintf("session-%d", try), "codegen/default", "")
		w = watchClaimPhases(ctx, c)
		select {
		case <-w.reaping:
		case <-ctx.Done():
			t.Fatalf("claim %s not Reaping: %v", c.Name, ctx.Err())
		}
		anchors, err := storedAnchors(ctx, e.ns)
		if err != nil {
			t.Fatal(err)
		}
		storedAt = 0
		if a := anchors[string(c.UID)]; a != nil {
			storedAt = a.Count
		}
		stallBegan = time.Now()
		if err := syscall.Kill(apiserver, syscall.SIGSTOP); err != nil {
			t.Fatalf("stopping kube-apiserver: %v", err)
		}
		resume := sync.OnceFunc(func() {
			if err := syscall.Kill(apiserver, syscall.SIGCONT); err != nil {
				t.Errorf("resuming kube-apiserver: %v", err)
			}
		})
		t.Cleanup(resume) // whatever fails, the cluster is not left stopped
		if !stalledOnce {
			// Acquires while the API server is stopped (their claims' creation waits for it).
			acquires.start(t, "traced-during-0")
			acquires.start(t, "traced-during-1")
		}
		time.Sleep(stall) // the outage itself, as in the fault suite (stallAPIServer)
		resume()
		if !stalledOnce {
			resumedAt = time.Now()
			acquires.start(t, "traced-after-0")
		}
		stalledOnce = true
		t.Logf("fault: kube-apiserver stopped for %s with claim %s Reaping, its record stored to entry %d", stall, c.Name, storedAt)

		// The record holds, stored, what it had read before the stall.
		eventually(t, time.Minute, "the record stored past what it held before the stall", func(ctx context.Context) (bool, error) {
			anchors, err := storedAnchors(ctx, e.ns)
			a := anchors[string(c.UID)]
			return err == nil && a != nil && a.Count > storedAt, err
		})
		e.waitGone(t, c.Name, 90*time.Second)
		waitRecordSealed(t, e.ns, string(c.UID), time.Minute)
		entries, text := sealedRecordOf(t, e.ns, c.Name, string(c.UID))
		unstored = unstored[:0]
		for _, en := range entries {
			tm, err := time.Parse(time.RFC3339Nano, en.Time)
			if err == nil && en.Seq > storedAt && tm.Before(stallBegan) {
				unstored = append(unstored, en)
			}
		}
		if len(unstored) == 0 {
			t.Logf("try %d: the record had stored everything before the stall; again with another claim", try)
			continue
		}
		phases := recordedPhases(t, c.Name, entries)
		if seen := w.seen(); !isSubsequence(phases, seen) {
			t.Errorf("the record's phases %v are not the claim's phases %v in order: something invented or reordered", phases, seen)
		}
		for _, en := range entries {
			if en.Kind == record.KindRecordGap && !strings.Contains(en.Message, "sandboxd's log is not read") {
				t.Errorf("entry %d: a gap in a record that lost nothing: %q", en.Seq, en.Message)
			}
			if en.Source != record.SourceOperator {
				t.Errorf("entry %d: source %q on a plane without sandboxd", en.Seq, en.Source)
			}
		}
		var kinds []string
		for _, en := range unstored {
			kinds = append(kinds, fmt.Sprintf("%d %s %s", en.Seq, en.Kind, en.Phase))
		}
		t.Logf("entries read before the stall and stored after it: %s\n%s", strings.Join(kinds, "; "), text)
		checkStallTraces(t, collector, traces, acquires.wait(), resumedAt)
		return
	}
	if stalledOnce {
		t.Fatalf("in 3 tries the stall never found entries not yet stored")
	}
}
