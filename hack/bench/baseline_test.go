package main

import (
	"bytes"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSlower: a scenario is slower when its p50 or p90 is more than 25% over the baseline's, or
// its Bound per second more than 25% under; exactly 25%, p99 and writes per claim are not judged.
func TestSlower(t *testing.T) {
	base := Figures{P50Ms: 100, P90Ms: 200, P99Ms: 300, CompletedPerSec: 20, WritesPerClaim: 11}
	tests := map[string]struct {
		cur  Figures
		want []string // prefixes
	}{
		"the same":                       {cur: base},
		"p50 exactly 25% over":           {cur: Figures{P50Ms: 125, P90Ms: 200, CompletedPerSec: 20}},
		"p50 26% over":                   {cur: Figures{P50Ms: 126, P90Ms: 200, CompletedPerSec: 20}, want: []string{"p50 126 ms is +26% over 100"}},
		"p90 over, p50 under":            {cur: Figures{P50Ms: 50, P90Ms: 300, CompletedPerSec: 20}, want: []string{"p90 300 ms is +50% over 200"}},
		"a third of the rate lost":       {cur: Figures{P50Ms: 100, P90Ms: 200, CompletedPerSec: 15}, want: []string{"15.0 Bound/s is 25% under 20.0"}},
		"rate exactly 1/1.25 of base":    {cur: Figures{P50Ms: 100, P90Ms: 200, CompletedPerSec: 16}},
		"p99 and writes not judged":      {cur: Figures{P50Ms: 100, P90Ms: 200, P99Ms: 3000, CompletedPerSec: 20, WritesPerClaim: 50}},
		"faster":                         {cur: Figures{P50Ms: 50, P90Ms: 100, CompletedPerSec: 30}},
		"every figure worse":             {cur: Figures{P50Ms: 200, P90Ms: 400, CompletedPerSec: 10}, want: []string{"p50", "p90", "10.0 Bound/s"}},
		"no baseline figure, not judged": {cur: Figures{P50Ms: 1e6}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			b := base
			if name == "no baseline figure, not judged" {
				b = Figures{}
			}
			got := slower(b, tc.cur)
			if len(got) != len(tc.want) {
				t.Fatalf("slower = %q, want %d like %q", got, len(tc.want), tc.want)
			}
			for i := range got {
				if !strings.HasPrefix(got[i], tc.want[i]) {
					t.Errorf("slower[%d] = %q, want %q...", i, got[i], tc.want[i])
				}
			}
		})
	}
}

// result is a rate20 result with these figures.
func result(name string, f Figures) Result {
	return Result{
		Scenario: scenario{Name: name, Acquires: 200, Rate: 20},
		Acquires: Acquires{Latency: Latencies{Count: 200, P50Ms: f.P50Ms, P90Ms: f.P90Ms, P99Ms: f.P99Ms}, CompletedPerSec: f.CompletedPerSec},
		Window:   Window{Writes: Writes{PerClaim: f.WritesPerClaim}},
	}
}

// TestSummaryPrintsBaseline: the summary prints each scenario's baseline under its row, in the
// same columns, says which are more than 25% slower, and names a scenario without one.
func TestSummaryPrintsBaseline(t *testing.T) {
	rep := &Report{
		Baseline: &Baseline{Commit: "9561b07", Provisional: true, Scenarios: map[string]Figures{
			"rate20": {P50Ms: 226, P90Ms: 280, P99Ms: 369, CompletedPerSec: 19.7, WritesPerClaim: 11.1},
			"rate40": {P50Ms: 1268, P90Ms: 2006, P99Ms: 2525, CompletedPerSec: 31.9, WritesPerClaim: 11},
		}},
		Results: []Result{
			result("rate20", Figures{P50Ms: 80, P90Ms: 150, P99Ms: 240, CompletedPerSec: 19.8, WritesPerClaim: 11.1}),
			result("rate40", Figures{P50Ms: 2000, P90Ms: 2100, P99Ms: 2600, CompletedPerSec: 30, WritesPerClaim: 11}),
			result("burst60", Figures{P50Ms: 500}),
		},
	}
	var out bytes.Buffer
	rep.printSummary(&out)
	lines := strings.Split(out.String(), "\n")
	find := func(prefix string, from int) int {
		for i := from; i < len(lines); i++ {
			if strings.HasPrefix(lines[i], prefix) {
				return i
			}
		}
		t.Fatalf("no line starting %q after line %d:\n%s", prefix, from, out.String())
		return -1
	}
	r20 := find("rate20 ", 0)
	if got := strings.Fields(lines[r20+1]); len(got) < 7 || got[0] != "baseline" || got[1] != "226" || got[2] != "280" || got[3] != "369" || got[4] != "19.7" || got[5] != "11.1" || got[6] != "(9561b07," {
		t.Errorf("rate20's baseline line %q, want its figures in the summary's columns and the commit", lines[r20+1])
	}
	if strings.Contains(lines[r20+2], "SLOWER") {
		t.Errorf("rate20, faster than its baseline, said slower: %q", lines[r20+2])
	}
	r40 := find("rate40 ", r20)
	if !strings.Contains(lines[r40+2], "SLOWER than the baseline by more than 25%") || !strings.Contains(lines[r40+2], "p50 2000 ms is +58% over 1268") || strings.Contains(lines[r40+2], "p90") {
		t.Errorf("rate40 (p50 58%% over, p90 5%% over): %q, want it SLOWER by its p50 only", lines[r40+2])
	}
	b60 := find("burst60 ", r40)
	if !strings.Contains(lines[b60+1], "no baseline for burst60") {
		t.Errorf("burst60's line %q, want no baseline said", lines[b60+1])
	}

	// No baseline file: the summary is as before.
	rep.Baseline = nil
	out.Reset()
	rep.printSummary(&out)
	if strings.Contains(out.String(), "baseline") {
		t.Errorf("without a baseline the summary mentions one:\n%s", out.String())
	}
}

// TestBaselineFile: the committed baseline parses and says whether it is provisional; a missing
// file is no baseline; writing a run keeps the scenarios it did not run and drops the provisional
// mark.
func TestBaselineFile(t *testing.T) {
	committed, err := readBaseline("baseline.json")
	if err != nil || committed == nil {
		t.Fatalf("hack/bench/baseline.json: %v, %v", committed, err)
	}
	for _, name := range []string{"rate20", "rate40", "warm20"} {
		if f, ok := committed.Scenarios[name]; !ok || f.P50Ms <= 0 || f.CompletedPerSec <= 0 {
			t.Errorf("the committed baseline's %s: %+v", name, f)
		}
	}
	if committed.Provisional && !strings.Contains(committed.Note, "PROVISIONAL") {
		t.Errorf("a provisional baseline's note %q does not say so", committed.Note)
	}
	for name := range committed.Scenarios {
		if _, err := parseScenarios(name, sizes{Claims: 1, ScaleAcquires: 1, ScaleOne: 1, ScalePerNamespace: 1, DaySpeedUp: defaultDaySpeedUp}); err != nil {
			t.Errorf("the baseline names scenario %q: %v", name, err)
		}
	}

	dir := t.TempDir()
	if b, err := readBaseline(filepath.Join(dir, "none.json")); b != nil || err != nil {
		t.Errorf("a missing baseline: %v, %v, want none", b, err)
	}
	rep := &Report{Commit: "abc1234", CPUs: 2, LoadAvg: "0.10 0.10 0.10 1/100 1", Results: []Result{
		result("rate20", Figures{P50Ms: 70, P90Ms: 120, P99Ms: 200, CompletedPerSec: 19.9, WritesPerClaim: 11}),
		{Scenario: scenario{Name: "burst60"}}, // no acquire Bound: not written
	}}
	// The run's burst60 has no Bound acquire: from a baseline without burst60, the written file
	// must not gain one (the committed file may hold one of its own, which would be kept).
	base := *committed
	base.Scenarios = maps.Clone(committed.Scenarios)
	delete(base.Scenarios, "burst60")
	path := filepath.Join(dir, "baseline.json")
	if err := base.withRun(rep, time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)).write(path); err != nil {
		t.Fatal(err)
	}
	written, err := readBaseline(path)
	if err != nil {
		t.Fatal(err)
	}
	if written.Provisional || written.Commit != "abc1234" || written.Scenarios["rate20"].P50Ms != 70 ||
		written.Scenarios["rate40"] != committed.Scenarios["rate40"] {
		t.Errorf("written baseline %+v, want rate20 from the run, rate40 kept, not provisional", written)
	}
	if _, ok := written.Scenarios["burst60"]; ok {
		t.Error("a scenario without a Bound acquire was written")
	}
	if b, _ := os.ReadFile(path); !strings.Contains(string(b), `"rate20"`) {
		t.Errorf("file:\n%s", b)
	}
}
