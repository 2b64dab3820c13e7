package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestReportPrintsScenarioAndSummary(t *testing.T) {
	rep := &Report{Commit: "abc1234", CPUs: 2, LoadAvg: "1.00 1.00 1.00 1/100 1"}
	res := Result{
		Scenario:   scenario{Name: "rate20", Acquires: 200, Rate: 20},
		LoadAvgEnd: "3.50 2.00 1.00 1/100 1",
		Acquires:   Acquires{Sent: 200, Bound: 199, Errors: map[string]int{"timed out": 1}, Latency: Latencies{Count: 199, P50Ms: 123, P90Ms: 234, P99Ms: 345, MaxMs: 456}, SendRatePerSec: 20, CompletedPerSec: 19.5},
		Window: Window{
			Claims:             200,
			Writes:             Writes{PerClaim: 28.1, Code409: 7, Rows: []WriteRow{{Resource: "apps/deployments", Verb: "CREATE", Count: 200, PerClaim: 1, OperatorCount: 201, OperatorPerClaim: 1.005, OperatorFailed: map[string]int{"AlreadyExists": 1}}}},
			ByClient:           map[string]ClientWrites{"operator": {Count: 1880, PerClaim: 9.4, AlreadyExists: 1}},
			CPUMsPerClaim:      map[string]float64{"operator": 21.5, "kube-apiserver": 87},
			OperatorPeakRSSMiB: 52,
		},
	}
	// An empty scale result must print too.
	rep.Results = []Result{res, {Scenario: scenario{Name: "scale2000"}, Fill: &Fill{}}}
	var out bytes.Buffer
	for i := range rep.Results {
		rep.Results[i].print(&out)
	}
	rep.printSummary(&out)
	text := out.String()
	for _, want := range []string{
		"199 Bound, 1 timed out",
		"p50 123  p90 234  p99 345  max 456",
		"sent 20.0/s, completed 19.5 Bound/s",
		"operator 9.4 (0 Conflict, 1 AlreadyExists, 0 other failed)",
		"1 AlreadyExists",
		"decision pass  not exposed by the operator",
		"-- scale2000 fill:",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	var summary string
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "rate20 ") {
			summary = line
		}
	}
	if got := strings.Fields(summary); len(got) < 12 || got[1] != "123" || got[3] != "345" || got[4] != "19.5" || got[5] != "28.1" || got[6] != "9.4" || got[7] != "7" || got[11] != "3.50" {
		t.Errorf("summary line %q, want p50 123, p99 345, 19.5/s, 28.1 and 9.4 writes, 7 409s, load 3.50", summary)
	}
}

// TestPeerResultPrintsReady: a peer scenario's acquires are counted and timed as claims seen
// Ready, not as airlock's 200 Bound.
func TestPeerResultPrintsReady(t *testing.T) {
	res := &Result{Scenario: scenario{Name: "rate20", Rate: 20}, ReadyAs: newPeer(kube{}).readyAs(),
		Acquires: Acquires{Sent: 20, Bound: 20, CompletedPerSec: 19.5}}
	var out bytes.Buffer
	res.print(&out)
	for _, want := range []string{"answers        20 Ready", "claim create sent -> its Ready condition seen by a watch", "completed 19.5 Ready/s"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "Bound") {
		t.Errorf("a peer scenario's output speaks of Bound:\n%s", out.String())
	}
}
