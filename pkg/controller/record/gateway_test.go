package record

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubeinformers "k8s.io/client-go/informers"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/gatewayrecord"
	"github.com/airlock-dev/airlock/pkg/record"
	"github.com/airlock-dev/airlock/pkg/usage"
)

const gatewayNS = "airlock-system"

type fixedDecisionsToken struct{}

func (fixedDecisionsToken) DecisionsReaderToken(context.Context) (string, error) {
	return "reader", nil
}

// fakeDecisions answers each Follow as a gateway would: a boot asked for that is not its current
// one is a restart (BootChangedError); else the lines of the boot after the cursor, then end.
type fakeDecisions struct {
	mu    sync.Mutex
	boot  string
	lines map[string][][]byte
	end   error
	calls []string
}

func (f *fakeDecisions) Follow(ctx context.Context, base, token, uid, boot string, after uint64, onBoot func(string), take func([]byte) error) error {
	f.mu.Lock()
	f.calls = append(f.calls, fmt.Sprintf("%s %s %s after %d", base, uid, boot, after))
	cur, end := f.boot, f.end
	lines := f.lines[cur]
	f.mu.Unlock()
	if token != "reader" {
		return fmt.Errorf("token %q", token)
	}
	if boot != "" && boot != cur {
		return &gatewayrecord.BootChangedError{Boot: cur}
	}
	onBoot(cur)
	for _, l := range lines {
		var seq uint64
		if _, err := fmt.Sscanf(string(l[strings.Index(string(l), `"source_seq":`)+len(`"source_seq":`):]), "%d", &seq); err != nil {
			return err
		}
		if seq <= after {
			continue
		}
		if err := take(l); err != nil {
			return err
		}
	}
	return end
}

// decisionLine is one line of the gateway's feed, as egress.DecisionLog serves it.
func decisionLine(t *testing.T, claimUID, boot string, seq uint64, host, verdict, credential string, bytes int64) []byte {
	t.Helper()
	reason := "allowed"
	if verdict == record.VerdictDenied {
		reason = "host_not_allowed"
	}
	e := record.Entry{Time: record.FormatTime(t0), Source: record.SourceGateway, Claim: claimUID, Boot: boot, SourceSeq: seq,
		Kind: record.KindEgress, Host: host, Port: 443, Verdict: verdict, Reason: reason, Credential: credential, DurationMS: 12,
		Usage: &record.Usage{EgressBytes: bytes}}
	b, err := e.Line()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func egressClaim(phase airlockv1alpha1.ClaimPhase) *airlockv1alpha1.SandboxClaim {
	c := newClaim(phase)
	c.Spec.RuntimeName = "agent"
	c.Status.Frozen.Egress = &airlockv1alpha1.FrozenEgress{Gateway: airlockv1alpha1.EgressGateway{
		Namespace: gatewayNS, Service: "airlock-egress", Address: "10.96.0.50", Port: 3128,
		PodSelector: map[string]string{"app.kubernetes.io/component": "egress"}}}
	return c
}

func gatewayPod(name, uid, ip string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: gatewayNS, Name: name, UID: types.UID("gw-" + uid), ResourceVersion: "1",
			Labels: map[string]string{"app.kubernetes.io/component": "egress"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "egress", Ports: []corev1.ContainerPort{
			{Name: "proxy", ContainerPort: 3128}, {Name: DecisionsPortName, ContainerPort: 8082}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip},
	}
}

// withGateway gives the fixture's controller a gateway pod informer and the fake feed; the
// ledger, if set, observes every entry as the operator's usage observer does.
func (f *fixture) withGateway(ledger *usage.Ledger) (*fakeDecisions, cache.Indexer) {
	f.t.Helper()
	kinf := kubeinformers.NewSharedInformerFactory(k8sfake.NewClientset(), 0)
	fd := &fakeDecisions{lines: map[string][][]byte{}}
	f.c.decisions = fd
	if err := f.c.SetGateway(kinf.Core().V1().Pods(), fixedDecisionsToken{}); err != nil {
		f.t.Fatal(err)
	}
	f.c.gwPodsSynced = alwaysReady
	if ledger != nil {
		f.c.AddObserver(func(c *airlockv1alpha1.SandboxClaim, e record.Entry) {
			ledger.Observe(c.Namespace, c.Spec.RuntimeName, string(c.UID), e)
		})
	}
	return fd, kinf.Core().V1().Pods().Informer().GetIndexer()
}

// endClaim ends the claim (Failed, its pod gone) and syncs until the record is sealed.
func (f *fixture) endClaim(claim *airlockv1alpha1.SandboxClaim) {
	f.t.Helper()
	failed := claim.DeepCopy()
	failed.Status.Phase, failed.ResourceVersion = airlockv1alpha1.ClaimFailed, "9"
	_ = f.claims.Update(failed)
	_ = f.pods.Delete(runningPod(claim))
	f.sync(failed)
	f.clock.Step(goneHold)
	f.sync(failed)
}

// TestGatewayDecisionsAreEgressEntries: a claim with egress has its gateway's decisions, an
// allowed exchange with the credential's name and its bytes and a refused host, in its record as
// egress entries of source gateway, read from the gateway pod's decisions port with the reader's
// token; the record verifies, the seal carries the egress bytes, and the usage ledger (the
// operator's observer) counts them for the runtime.
func TestGatewayDecisionsAreEgressEntries(t *testing.T) {
	f := newFixture(t, nil, nil)
	f.follower.end = context.Canceled
	ledger := usage.NewLedger(nil)
	fd, gwPods := f.withGateway(ledger)
	claim := egressClaim(airlockv1alpha1.ClaimBound)
	fd.boot, fd.end = "g1", context.Canceled
	fd.lines["g1"] = [][]byte{
		decisionLine(t, "uid-1", "g1", 1, "git.example", record.VerdictAllowed, "github-token", 4096),
		decisionLine(t, "uid-1", "g1", 2, "evil.example", record.VerdictDenied, "", 191),
	}
	_ = f.claims.Add(claim)
	_ = f.pods.Add(runningPod(claim))
	_ = gwPods.Add(gatewayPod("airlock-egress-0", "a", "10.0.0.9"))
	f.sync(claim)
	if got := fd.calls; len(got) != 1 || got[0] != "http://10.0.0.9:8082 uid-1  after 0" {
		t.Fatalf("gateway reads = %q, want one of the claim from the start at the pod's decisions port", got)
	}
	f.clock.Step(flushDelay)
	f.sync(claim)
	f.endClaim(claim)
	rep, entries := f.export()
	if !rep.Intact() || !rep.Sealed {
		t.Fatalf("verdict %q, findings %v", rep.Verdict(), rep.Findings)
	}
	var egress []record.Entry
	for _, e := range entries {
		if e.Kind == record.KindEgress {
			egress = append(egress, e)
		}
	}
	if len(egress) != 2 {
		t.Fatalf("egress entries %d in %q, want 2", len(egress), kinds(entries))
	}
	if a := egress[0]; a.Source != record.SourceGateway || a.Host != "git.example" || a.Verdict != record.VerdictAllowed || a.Credential != "github-token" ||
		a.Usage == nil || a.Usage.EgressBytes != 4096 || a.Boot != "g1" || a.SourceSeq != 1 {
		t.Errorf("allowed entry %+v", a)
	}
	if d := egress[1]; d.Host != "evil.example" || d.Verdict != record.VerdictDenied || d.Reason != "host_not_allowed" {
		t.Errorf("denied entry %+v", d)
	}
	seal := entries[len(entries)-1]
	if seal.Kind != record.KindRecordSealed || seal.Usage == nil || seal.Usage.EgressBytes != 4096+191 {
		t.Errorf("the seal %+v: want the session's egress bytes %d", seal, 4096+191)
	}
	if got, _ := ledger.Snapshot("ns", "agent"); got.EgressBytes != 4096+191 {
		t.Errorf("the ledger's egress bytes for runtime ns/agent = %d, want %d", got.EgressBytes, 4096+191)
	}
}

// TestAGatewayRestartIsAGap: a cut feed is read again from its cursor after followRetry (an
// AddAfter: the sync says when); a gateway that restarted meanwhile (another boot) is a gap in
// the record, and its new boot is read from its start.
func TestAGatewayRestartIsAGap(t *testing.T) {
	f := newFixture(t, nil, nil)
	f.follower.end = context.Canceled
	fd, gwPods := f.withGateway(nil)
	claim := egressClaim(airlockv1alpha1.ClaimBound)
	fd.boot, fd.end = "g1", errCutForTest
	fd.lines["g1"] = [][]byte{decisionLine(t, "uid-1", "g1", 1, "git.example", record.VerdictAllowed, "", 10)}
	_ = f.claims.Add(claim)
	_ = f.pods.Add(runningPod(claim))
	_ = gwPods.Add(gatewayPod("airlock-egress-0", "a", "10.0.0.9"))
	f.sync(claim)
	// The feed was cut: the next sync says to look again in followRetry, and reads nothing now.
	if requeue := f.sync(claim); requeue == nil || *requeue > followRetry {
		t.Fatalf("requeue after a cut feed = %v, want within %v", requeue, followRetry)
	}
	if len(fd.calls) != 1 {
		t.Fatalf("reads before the retry: %q", fd.calls)
	}
	fd.mu.Lock()
	fd.boot = "g2"
	fd.lines["g2"] = [][]byte{decisionLine(t, "uid-1", "g2", 1, "git.example", record.VerdictAllowed, "", 20)}
	fd.end = context.Canceled
	fd.mu.Unlock()
	f.clock.Step(followRetry)
	f.sync(claim) // boot g1 after 1: the gateway answers that it restarted
	f.sync(claim) // its new boot from the start
	if want := []string{"http://10.0.0.9:8082 uid-1  after 0", "http://10.0.0.9:8082 uid-1 g1 after 1", "http://10.0.0.9:8082 uid-1  after 0"}; strings.Join(fd.calls, "|") != strings.Join(want, "|") {
		t.Fatalf("reads = %q, want %q", fd.calls, want)
	}
	f.endClaim(claim)
	rep, entries := f.export()
	if !rep.Intact() || !rep.Sealed {
		t.Fatalf("verdict %q, findings %v", rep.Verdict(), rep.Findings)
	}
	if want := "claim.phase:Bound egress record.gap egress claim.phase:Failed record.sealed"; kinds(entries) != want {
		t.Fatalf("entries = %q, want %q", kinds(entries), want)
	}
	if msg := entries[2].Message; !strings.Contains(msg, "restarted (boot g1, now g2)") || !strings.Contains(msg, "after 1") {
		t.Errorf("gap = %q", msg)
	}
}

// TestGatewayFeedGapsAndForgeries: numbers the gateway did not keep (its bound) are a gap that
// says which; a line that is not this claim's decision (another claim's, not the gateway's, not
// an egress entry) is a gap and not taken.
func TestGatewayFeedGapsAndForgeries(t *testing.T) {
	f := newFixture(t, nil, nil)
	f.follower.end = context.Canceled
	fd, gwPods := f.withGateway(nil)
	claim := egressClaim(airlockv1alpha1.ClaimBound)
	notEgress := decisionLine(t, "uid-1", "g1", 5, "x.example", record.VerdictAllowed, "", 1)
	notEgress = []byte(strings.Replace(string(notEgress), `"kind":"egress"`, `"kind":"claim.phase"`, 1))
	fromSandboxd := []byte(strings.Replace(string(decisionLine(t, "uid-1", "g1", 6, "x.example", record.VerdictAllowed, "", 1)), `"source":"gateway"`, `"source":"sandboxd"`, 1))
	fd.boot, fd.end = "g1", context.Canceled
	fd.lines["g1"] = [][]byte{
		decisionLine(t, "uid-1", "g1", 1, "a.example", record.VerdictAllowed, "", 1),
		decisionLine(t, "uid-1", "g1", 4, "b.example", record.VerdictAllowed, "", 1),
		decisionLine(t, "uid-2", "g1", 5, "other.example", record.VerdictAllowed, "", 1),
		notEgress, fromSandboxd,
	}
	_ = f.claims.Add(claim)
	_ = f.pods.Add(runningPod(claim))
	_ = gwPods.Add(gatewayPod("airlock-egress-0", "a", "10.0.0.9"))
	f.sync(claim)
	f.endClaim(claim)
	rep, entries := f.export()
	if !rep.Intact() {
		t.Fatalf("verdict %q, findings %v", rep.Verdict(), rep.Findings)
	}
	if want := "claim.phase:Bound egress record.gap egress record.gap record.gap record.gap claim.phase:Failed record.sealed"; kinds(entries) != want {
		t.Fatalf("entries = %q, want %q", kinds(entries), want)
	}
	if msg := entries[2].Message; !strings.Contains(msg, "decisions 2 to 3") {
		t.Errorf("gap = %q, want the numbers 2 to 3", msg)
	}
	for _, e := range entries {
		if e.Host == "other.example" || e.Host == "x.example" {
			t.Errorf("a line not this claim's decision was taken: %+v", e)
		}
	}
}

// TestANewLeaderTakesTheGatewayCursorFromTheRecord: a new leader reads the gateway's feed from
// its start and takes only the decisions after the last one the stored record holds of that boot.
func TestANewLeaderTakesTheGatewayCursorFromTheRecord(t *testing.T) {
	f := newFixture(t, nil, nil)
	f.follower.end = context.Canceled
	fd, gwPods := f.withGateway(nil)
	claim := egressClaim(airlockv1alpha1.ClaimBound)
	first := [][]byte{
		decisionLine(t, "uid-1", "g1", 1, "a.example", record.VerdictAllowed, "", 1),
		decisionLine(t, "uid-1", "g1", 2, "b.example", record.VerdictAllowed, "", 1),
	}
	fd.boot, fd.end, fd.lines["g1"] = "g1", context.Canceled, first
	_ = f.claims.Add(claim)
	_ = f.pods.Add(runningPod(claim))
	_ = gwPods.Add(gatewayPod("airlock-egress-0", "a", "10.0.0.9"))
	f.sync(claim)
	f.clock.Step(flushDelay)
	f.sync(claim)

	g := newFixture(t, f.records, f.signer)
	g.follower.end = context.Canceled
	gd, gPods := g.withGateway(nil)
	gd.boot, gd.end = "g1", context.Canceled
	gd.lines["g1"] = append(first, decisionLine(t, "uid-1", "g1", 3, "c.example", record.VerdictAllowed, "", 1))
	_ = g.claims.Add(claim)
	_ = g.pods.Add(runningPod(claim))
	_ = gPods.Add(gatewayPod("airlock-egress-0", "a", "10.0.0.9"))
	g.sync(claim)
	g.endClaim(claim)
	rep, entries := g.export()
	if !rep.Intact() {
		t.Fatalf("verdict %q, findings %v", rep.Verdict(), rep.Findings)
	}
	var hosts []string
	for _, e := range entries {
		if e.Kind == record.KindEgress {
			hosts = append(hosts, e.Host)
		}
	}
	if got := strings.Join(hosts, " "); got != "a.example b.example c.example" {
		t.Errorf("egress entries %q, want each decision once: a.example b.example c.example", got)
	}
}

// TestAClaimWithoutEgressReadsNoGateway: only claims of classes with egress read the gateway.
func TestAClaimWithoutEgressReadsNoGateway(t *testing.T) {
	f := newFixture(t, nil, nil)
	f.follower.end = context.Canceled
	fd, gwPods := f.withGateway(nil)
	claim := newClaim(airlockv1alpha1.ClaimBound)
	_ = f.claims.Add(claim)
	_ = f.pods.Add(runningPod(claim))
	_ = gwPods.Add(gatewayPod("airlock-egress-0", "a", "10.0.0.9"))
	f.sync(claim)
	if len(fd.calls) != 0 {
		t.Errorf("a claim without egress read the gateway: %q", fd.calls)
	}
}

// TestAGatewayPodChangeEnqueuesTheClaimsWithEgress: a gateway pod that comes, changes or goes
// has the claims that read a gateway looked at again (a new pod's feed opened), and only those.
func TestAGatewayPodChangeEnqueuesTheClaimsWithEgress(t *testing.T) {
	f := newFixture(t, nil, nil)
	f.follower.end = context.Canceled
	fd, gwPods := f.withGateway(nil)
	fd.boot, fd.end = "g1", context.Canceled
	withEgress := egressClaim(airlockv1alpha1.ClaimBound)
	without := newClaim(airlockv1alpha1.ClaimBound)
	without.Name, without.UID = "c2", "uid-2"
	for _, c := range []*airlockv1alpha1.SandboxClaim{withEgress, without} {
		_ = f.claims.Add(c)
		f.sync(c)
	}
	for f.c.queue.Len() > 0 {
		k, _ := f.c.queue.Get()
		f.c.queue.Done(k)
		f.c.queue.Forget(k)
	}
	_ = gwPods.Add(gatewayPod("airlock-egress-1", "b", "10.0.0.10"))
	f.c.enqueueEgressClaims(gatewayPod("airlock-egress-1", "b", "10.0.0.10"))
	if n := f.c.queue.Len(); n != 1 {
		t.Fatalf("queued %d claims, want the one with egress", n)
	}
	if k, _ := f.c.queue.Get(); k != keyOf(withEgress) {
		t.Errorf("queued %v, want %v", k, keyOf(withEgress))
	}
}

// TestTheGatewaysGapLineIsAGap: the gateway's gap line (its last decisions counted, not kept, at
// its bound in all) is a gap in the record at once, with the numbers it did not keep; the next
// decision follows it without another gap.
func TestTheGatewaysGapLineIsAGap(t *testing.T) {
	f := newFixture(t, nil, nil)
	f.follower.end = context.Canceled
	fd, gwPods := f.withGateway(nil)
	claim := egressClaim(airlockv1alpha1.ClaimBound)
	gap, err := record.Entry{Time: record.FormatTime(t0), Source: record.SourceGateway, Claim: "uid-1", Boot: "g1", SourceSeq: 3,
		Kind: record.KindRecordGap, Message: "the gateway did not keep this claim's last decisions (its bound in all)"}.Line()
	if err != nil {
		t.Fatal(err)
	}
	fd.boot, fd.end = "g1", context.Canceled
	fd.lines["g1"] = [][]byte{
		decisionLine(t, "uid-1", "g1", 1, "a.example", record.VerdictAllowed, "", 1),
		gap,
		decisionLine(t, "uid-1", "g1", 4, "b.example", record.VerdictAllowed, "", 1),
	}
	_ = f.claims.Add(claim)
	_ = f.pods.Add(runningPod(claim))
	_ = gwPods.Add(gatewayPod("airlock-egress-0", "a", "10.0.0.9"))
	f.sync(claim)
	f.endClaim(claim)
	rep, entries := f.export()
	if !rep.Intact() {
		t.Fatalf("verdict %q, findings %v", rep.Verdict(), rep.Findings)
	}
	if want := "claim.phase:Bound egress record.gap egress claim.phase:Failed record.sealed"; kinds(entries) != want {
		t.Fatalf("entries = %q, want %q", kinds(entries), want)
	}
	if msg := entries[2].Message; !strings.Contains(msg, "decisions 2 to 3") || entries[2].Source != record.SourceOperator {
		t.Errorf("gap %+v, want the operator's, of the numbers 2 to 3", entries[2])
	}
}
