package usage

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/component-base/metrics"

	"github.com/airlock-dev/airlock/pkg/record"
)

var t0 = time.Date(2026, 12, 6, 5, 0, 0, 0, time.UTC)

// recordOf builds a claim's record from seq 1: each entry gets the next seq.
type recordOf struct {
	entries []record.Entry
	srcSeq  map[string]uint64
}

func (r *recordOf) add(e record.Entry) record.Entry {
	e.Seq = uint64(len(r.entries) + 1)
	r.entries = append(r.entries, e)
	return e
}

func (r *recordOf) sandboxd(boot, kind string, u *record.Usage) record.Entry {
	if r.srcSeq == nil {
		r.srcSeq = map[string]uint64{}
	}
	r.srcSeq[boot]++
	return r.add(record.Entry{Source: record.SourceSandboxd, Boot: boot, SourceSeq: r.srcSeq[boot], Kind: kind, Usage: u})
}

func (r *recordOf) egress(bytes int64) record.Entry {
	return r.add(record.Entry{Source: record.SourceGateway, Kind: record.KindEgress, Host: "example.com", Verdict: record.VerdictAllowed, Usage: &record.Usage{EgressBytes: bytes}})
}

// twoBoots is a session whose sandbox restarted: boot a ran to its stop, boot b was cut.
func twoBoots() *recordOf {
	var r recordOf
	r.add(record.Entry{Source: record.SourceOperator, Kind: record.KindClaimPhase, Phase: "Bound"})
	r.sandboxd("a", record.KindSandboxBoot, nil)
	r.sandboxd("a", record.KindToolCall, nil)
	r.sandboxd("a", record.KindUsage, &record.Usage{CPUMillis: 100, MemoryMiBSeconds: 10, ToolCalls: 1})
	r.egress(10)
	r.sandboxd("a", record.KindUsage, &record.Usage{CPUMillis: 250, MemoryMiBSeconds: 30, ToolCalls: 3})
	r.sandboxd("a", record.KindSandboxStopped, &record.Usage{CPUMillis: 300, MemoryMiBSeconds: 40, ToolCalls: 4, WorkspaceBytes: 1000})
	r.sandboxd("b", record.KindSandboxBoot, nil)
	r.sandboxd("b", record.KindUsage, &record.Usage{CPUMillis: 50, MemoryMiBSeconds: 5, ToolCalls: 1})
	r.egress(20)
	r.add(record.Entry{Source: record.SourceOperator, Kind: record.KindRecordGap, Message: "cut"})
	return &r
}

// TestSessionAddsBootsAndTakesEachBootsLastFigure: usage entries are cumulative per boot, so a
// boot counts its last figure, and a restart's boots add up; the workspace is the last figure
// measured, egress the sum of the gateway's entries; an entry seen twice counts once.
func TestSessionAddsBootsAndTakesEachBootsLastFigure(t *testing.T) {
	r := twoBoots()
	want := record.Usage{CPUMillis: 350, MemoryMiBSeconds: 45, ToolCalls: 5, WorkspaceBytes: 1000, EgressBytes: 30}
	if got := Session(r.entries); got != want {
		t.Errorf("Session = %+v, want %+v", got, want)
	}
	again := append(append([]record.Entry{}, r.entries[:6]...), r.entries[3], r.entries[4])
	again = append(again, r.entries[6:]...)
	if got := Session(again); got != want {
		t.Errorf("Session with entries seen twice = %+v, want %+v", got, want)
	}
}

// TestCollectorTakesSandboxdsUsage: the Collector takes sandboxd's usage entries and the usage of
// its stopped entry into the signed record, which verifies, and Session reads them back.
func TestCollectorTakesSandboxdsUsage(t *testing.T) {
	priv := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, ed25519.SeedSize))
	signer, err := record.NewSigner(priv)
	if err != nil {
		t.Fatal(err)
	}
	chain, err := record.NewChain("uid-1", signer)
	if err != nil {
		t.Fatal(err)
	}
	c := record.NewCollector(chain, func() time.Time { return t0 }, "", 0)
	var all []record.Entry
	for i, e := range []record.Entry{
		{Kind: record.KindSandboxBoot},
		{Kind: record.KindUsage, Usage: &record.Usage{CPUMillis: 1200, MemoryMiBSeconds: 600, ToolCalls: 2}},
		{Kind: record.KindSandboxStopped, Count: 3, Usage: &record.Usage{CPUMillis: 1500, MemoryMiBSeconds: 700, ToolCalls: 2, WorkspaceBytes: 42}},
	} {
		e.V, e.Source, e.Boot, e.SourceSeq, e.Time = record.Version, record.SourceSandboxd, "b1", uint64(i+1), record.FormatTime(t0)
		line, _ := json.Marshal(e)
		got, err := c.Take(line)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, got...)
	}
	for _, e := range all {
		if e.Kind == record.KindRecordGap {
			t.Fatalf("the collector did not take a usage entry: %s", e.Message)
		}
	}
	var buf bytes.Buffer
	if err := record.WriteJSONL(&buf, all, nil); err != nil {
		t.Fatal(err)
	}
	rep, err := record.Verify(&buf, record.NewKeys(signer.Public()), record.Options{Claim: "uid-1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range rep.Findings {
		if f.Problem != record.ProblemUnanchored {
			t.Errorf("finding %+v", f)
		}
	}
	if got, want := Session(all), (record.Usage{CPUMillis: 1500, MemoryMiBSeconds: 700, ToolCalls: 2, WorkspaceBytes: 42}); got != want {
		t.Errorf("Session = %+v, want %+v", got, want)
	}
}

// TestLedgerSumsPerRuntimeOnceAnEntry: the ledger sums its claims' sessions per runtime, an
// entry seen again counts once, and a sealed claim's late entry is not counted.
func TestLedgerSumsPerRuntimeOnceAnEntry(t *testing.T) {
	l := NewLedger(nil)
	r := twoBoots()
	for _, e := range r.entries {
		l.Observe("ns", "rt", "c1", e)
		l.Observe("ns", "rt", "c1", e) // again
	}
	for _, e := range r.entries {
		l.Observe("ns", "rt", "c2", e)
	}
	for _, e := range r.entries {
		l.Observe("ns", "other", "c3", e)
	}
	sealed := r.add(record.Entry{Source: record.SourceOperator, Kind: record.KindRecordSealed})
	l.Observe("ns", "rt", "c2", sealed)
	late := r.sandboxd("b", record.KindUsage, &record.Usage{CPUMillis: 5000})
	l.Observe("ns", "rt", "c2", late)
	one := Session(twoBoots().entries)
	got, seeded := l.Snapshot("ns", "rt")
	want := Totals{Usage: Add(one, one), Sessions: 2}
	if diff := cmp.Diff(want, got); diff != "" || seeded {
		t.Errorf("runtime rt (seeded %v), -want +got:\n%s", seeded, diff)
	}
	if got, _ := l.Snapshot("ns", "other"); got != (Totals{Usage: one, Sessions: 1}) {
		t.Errorf("runtime other = %+v", got)
	}
	// A claim's entries after it is gone come without its runtime: still its runtime's; a claim
	// first seen gone is nobody's.
	l.Observe("ns", "", "c3", r.sandboxd("b", record.KindUsage, &record.Usage{CPUMillis: 150, MemoryMiBSeconds: 5, ToolCalls: 1}))
	l.Observe("ns", "", "c4", r.entries[0])
	if got, _ := l.Snapshot("ns", "other"); got.CPUMillis != one.CPUMillis+100 {
		t.Errorf("runtime other's CPU after its gone claim's entry: %d, want %d", got.CPUMillis, one.CPUMillis+100)
	}
	if got, _ := l.Snapshot("ns", ""); got != (Totals{}) {
		t.Error("a claim first seen without its runtime was counted to a runtime \"\"")
	}
}

// TestLedgerAfterAFailoverCountsNothingTwice: a new leader's ledger starts from the runtime's
// status (Seed; the freshest one seen until the ledger's first write), and a claim it first sees past its record's start (the old leader counted it
// up to its last status write) counts from its first figure seen on; a boot it sees from its
// start counts whole.
func TestLedgerAfterAFailoverCountsNothingTwice(t *testing.T) {
	var r recordOf
	r.add(record.Entry{Source: record.SourceOperator, Kind: record.KindClaimPhase, Phase: "Bound"})
	r.sandboxd("a", record.KindSandboxBoot, nil)
	r.sandboxd("a", record.KindUsage, &record.Usage{CPUMillis: 100, MemoryMiBSeconds: 10, ToolCalls: 1})
	// The old leader wrote status.usage here: this claim's 100 ms are in it.
	status := Totals{Usage: record.Usage{CPUMillis: 100 + 7000, MemoryMiBSeconds: 10 + 700, ToolCalls: 1 + 70}, Sessions: 3}
	r.sandboxd("a", record.KindUsage, &record.Usage{CPUMillis: 160, MemoryMiBSeconds: 16, ToolCalls: 2})
	// The new leader resumes the record from here on.
	resumed := len(r.entries)
	r.sandboxd("a", record.KindUsage, &record.Usage{CPUMillis: 220, MemoryMiBSeconds: 22, ToolCalls: 3})
	r.sandboxd("a", record.KindSandboxStopped, &record.Usage{CPUMillis: 250, MemoryMiBSeconds: 25, ToolCalls: 3, WorkspaceBytes: 9})
	r.sandboxd("b", record.KindSandboxBoot, nil)
	r.sandboxd("b", record.KindUsage, &record.Usage{CPUMillis: 40, MemoryMiBSeconds: 4, ToolCalls: 1})

	l := NewLedger(nil)
	for _, e := range r.entries[resumed:] {
		l.Observe("ns", "rt", "c1", e)
	}
	stale := Totals{Usage: record.Usage{CPUMillis: 100}, Sessions: 1} // a cache without the last write
	l.Seed("ns", "rt", "rt-uid", stale)
	l.Seed("ns", "rt", "rt-uid", status) // until written, a later seed replaces it
	l.Written("ns", "rt")
	l.Seed("ns", "rt", "rt-uid", stale) // after, it does nothing: the status is this ledger's
	got, seeded := l.Snapshot("ns", "rt")
	// Boot a from its first figure seen (220) on: 30 ms more; boot b whole: 40 ms. The 60 ms
	// between the old leader's write and the resume are not counted (docs/record.md §3).
	want := Totals{Usage: record.Usage{CPUMillis: 7100 + 30 + 40, MemoryMiBSeconds: 710 + 3 + 4, ToolCalls: 71 + 0 + 1, WorkspaceBytes: 9}, Sessions: 3}
	if diff := cmp.Diff(want, got); diff != "" || !seeded {
		t.Errorf("after the failover (seeded %v), -want +got:\n%s", seeded, diff)
	}
	l.Seed("ns", "rt", "another-uid", Totals{Sessions: 1})
	if got, _ := l.Snapshot("ns", "rt"); got != (Totals{Sessions: 1}) {
		t.Errorf("a runtime of the same name and another UID starts again: %+v", got)
	}
}

// TestUsageSeriesDoNotGrowWithSessions: the usage metrics carry no session or claim label: the
// series count is the same at 10 sessions and at 1,000.
func TestUsageSeriesDoNotGrowWithSessions(t *testing.T) {
	count := func(sessions int) int {
		reg := metrics.NewKubeRegistry()
		m := NewMetrics()
		m.Register(reg)
		l := NewLedger(m)
		for i := range sessions {
			rt := fmt.Sprintf("rt-%d", i%3)
			for _, e := range twoBoots().entries {
				l.Observe("ns", rt, fmt.Sprintf("claim-%d", i), e)
			}
		}
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, f := range families {
			for _, s := range f.GetMetric() {
				for _, lp := range s.GetLabel() {
					if lp.GetName() != "namespace" && lp.GetName() != "runtime" {
						t.Errorf("%s has label %s", f.GetName(), lp.GetName())
					}
				}
				n++
			}
		}
		return n
	}
	at10, at1000 := count(10), count(1000)
	if at10 != at1000 || at10 != 3*6 {
		t.Errorf("series: %d at 10 sessions, %d at 1,000; want %d both", at10, at1000, 3*6)
	}
}

// TestMetricsCountWhatTheLedgerObserved: the counters' values are the observed sums, in seconds,
// GiB-seconds and bytes.
func TestMetricsCountWhatTheLedgerObserved(t *testing.T) {
	reg := metrics.NewKubeRegistry()
	m := NewMetrics()
	m.Register(reg)
	l := NewLedger(m)
	for _, e := range twoBoots().entries {
		l.Observe("ns", "rt", "c1", e)
	}
	l.Seed("ns", "rt", "uid", Totals{Usage: record.Usage{CPUMillis: 1e6}}) // not a counter's
	got := values(t, reg)
	want := map[string]float64{
		"airlock_usage_cpu_seconds_total":        0.35,
		"airlock_usage_memory_gib_seconds_total": 45.0 / 1024,
		"airlock_usage_tool_calls_total":         5,
		"airlock_usage_egress_bytes_total":       30,
		"airlock_usage_sessions_total":           1,
		"airlock_usage_workspace_bytes":          1000,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("series of ns/rt, -want +got:\n%s", diff)
	}
	l.ForgetRuntime("ns", "rt")
	if got := values(t, reg); len(got) != 0 {
		t.Errorf("series after the runtime was forgotten: %v", got)
	}
}

// values are reg's series of ns/rt by name.
func values(t *testing.T, reg metrics.KubeRegistry) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			switch {
			case m.GetCounter() != nil:
				out[f.GetName()] = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				out[f.GetName()] = m.GetGauge().GetValue()
			}
		}
	}
	return out
}
