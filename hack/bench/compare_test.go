package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// comparedResult is a scenario's result with the figures compare reads.
func comparedResult(name string, sent, ready int, p50, perSec, writes, ownWrites, cpuOperator, cpuAPIServer float64) Result {
	return Result{
		Scenario: scenario{Name: name},
		Acquires: Acquires{Sent: sent, Bound: ready, CompletedPerSec: perSec,
			Latency: Latencies{Count: ready, P50Ms: p50, P90Ms: 2 * p50, P99Ms: 3 * p50}},
		Window: Window{
			Writes:        Writes{PerClaim: writes},
			ByClient:      map[string]ClientWrites{"operator": {PerClaim: ownWrites}, "admin (kwok)": {PerClaim: 1}},
			CPUMsPerClaim: map[string]float64{"operator": cpuOperator, "kube-apiserver": cpuAPIServer, "etcd": 1},
		},
	}
}

// TestCompare: each scenario both products ran gets both figures and airlock's over the peer's;
// the two targets are judged on rate20's p50 (at most 0.5) and rate40's ready per second
// (at least 2); what only one product ran is listed apart.
func TestCompare(t *testing.T) {
	a := &Report{Product: productAirlock, Commit: "abc", Results: []Result{
		comparedResult("rate20", 200, 200, 60, 19.9, 11, 8, 10, 30),
		comparedResult("rate40", 200, 200, 900, 30, 11, 8, 10, 30),
		comparedResult("warm20", 200, 200, 50, 20, 8, 6, 5, 20),
		comparedResult("scale2000", 100, 100, 70, 10, 11, 8, 10, 30),
	}}
	p := &Report{Product: productPeer, Commit: "v0.5.6", Results: []Result{
		comparedResult("rate20", 200, 200, 150, 19.7, 16, 12, 20, 40),
		comparedResult("rate40", 200, 200, 7800, 16, 24, 18, 20, 40),
		comparedResult("warm20", 200, 200, 700, 16.8, 22, 17, 20, 40),
	}}
	c := compare(a, p)
	if len(c.Rows) != 3 || c.Rows[0].Scenario != "rate20" || c.Rows[2].Scenario != "warm20" {
		t.Fatalf("rows = %+v, want rate20, rate40, warm20", c.Rows)
	}
	r := c.Rows[0]
	if r.P50Ratio != 0.4 || r.Airlock.WritesOwn != 8 || r.Peer.WritesAll != 16 || r.Airlock.CPUAll != 41 || r.Peer.CPUController != 20 {
		t.Errorf("rate20 row = %+v; want p50 ratio 0.4, airlock's own writes 8, the peer's writes 16, airlock's CPU 10+30+1, the peer's controller 20", r)
	}
	if got := c.Rows[1].ReadyRatio; got != 30.0/16 {
		t.Errorf("rate40 ready ratio = %v, want %v", got, 30.0/16)
	}
	if len(c.OnlyAirlock) != 1 || c.OnlyAirlock[0] != "scale2000" || len(c.OnlyPeer) != 0 {
		t.Errorf("only airlock %v, only the peer %v; want [scale2000] and none", c.OnlyAirlock, c.OnlyPeer)
	}
	if len(c.Targets) != 2 {
		t.Fatalf("targets = %+v, want 2", c.Targets)
	}
	if cold := c.Targets[0]; cold.Scenario != "rate20" || cold.Met == nil || !*cold.Met || cold.Ratio != 0.4 {
		t.Errorf("cold target = %+v, want rate20 met at 0.4", cold)
	}
	if rate40 := c.Targets[1]; rate40.Scenario != "rate40" || rate40.Met == nil || *rate40.Met {
		t.Errorf("40/s target = %+v, want rate40 not met (1.875 < 2)", rate40)
	}
	var out bytes.Buffer
	c.print(&out)
	for _, want := range []string{"agent-sandbox v0.5.6", "airlock/peer", "   0.40x", "met (0.40x)", "NOT MET (1.88x)", "airlock only (the peer did not run them): [scale2000]"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("printed comparison lacks %q:\n%s", want, out.String())
		}
	}
}

// TestCompareNotJudged: a target whose scenario one product did not run, or in which a product
// had no acquire ready, is not judged and says why; one with some acquires failed is judged on
// the ready ones and says so.
func TestCompareNotJudged(t *testing.T) {
	a := &Report{Results: []Result{comparedResult("rate20", 200, 0, 0, 0, 0, 0, 0, 0), comparedResult("rate40", 200, 150, 900, 30, 11, 8, 10, 30)}}
	p := &Report{Product: productPeer, Results: []Result{comparedResult("rate20", 200, 200, 150, 19.7, 16, 12, 20, 40), comparedResult("rate40", 200, 200, 900, 10, 11, 8, 10, 30)}}
	c := compare(a, p)
	if cold := c.Targets[0]; cold.Met != nil || !strings.Contains(cold.Note, "airlock 0 of 200 ready") {
		t.Errorf("cold target = %+v, want not judged: airlock had none ready", cold)
	}
	if r40 := c.Targets[1]; r40.Met == nil || !*r40.Met || !strings.Contains(r40.Note, "judged on the ready ones: airlock 150 of 200") {
		t.Errorf("40/s target = %+v, want met (3x), said to be judged on the ready ones", r40)
	}
	c = compare(a, &Report{Product: productPeer})
	for _, tg := range c.Targets {
		if tg.Met != nil || !strings.Contains(tg.Note, "was not run by both") {
			t.Errorf("target %+v with no peer scenario: want not judged, not run by both", tg)
		}
	}
	if ratio(5, 0) != 0 {
		t.Errorf("ratio(5, 0) = %v, want 0", ratio(5, 0))
	}
}

// TestCompareMain: `bench compare` reads both reports, refuses a peer report that is not the
// peer's (the two files swapped), and writes the comparison it prints.
func TestCompareMain(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, rep *Report) string {
		b, err := json.Marshal(rep)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	a := write("a.json", &Report{Product: productAirlock, Results: []Result{comparedResult("rate20", 20, 20, 60, 19, 11, 8, 10, 30)}})
	p := write("p.json", &Report{Product: productPeer, Results: []Result{comparedResult("rate20", 20, 20, 150, 19, 16, 12, 20, 40)}})
	var out, errs bytes.Buffer
	if code := compareMain([]string{"--airlock=" + p, "--peer=" + a}, &out, &errs); code != 1 || !strings.Contains(errs.String(), "not of airlock") {
		t.Errorf("swapped reports: code %d, stderr %q; want 1 naming the wrong product", code, errs.String())
	}
	errs.Reset()
	if code := compareMain([]string{"--airlock=" + a, "--peer=" + a}, &out, &errs); code != 1 || !strings.Contains(errs.String(), "not of agent-sandbox") {
		t.Errorf("airlock's report as the peer's: code %d, stderr %q; want 1 naming the wrong product", code, errs.String())
	}
	if code := compareMain([]string{"--airlock=" + a}, &out, &errs); code != 2 {
		t.Errorf("without --peer: code %d, want 2", code)
	}
	outFile := filepath.Join(dir, "c.json")
	out.Reset()
	if code := compareMain([]string{"--airlock=" + a, "--peer=" + p, "--output=" + outFile}, &out, &errs); code != 0 {
		t.Fatalf("code %d, stderr %s", code, errs.String())
	}
	var c Comparison
	b, err := os.ReadFile(outFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &c); err != nil || len(c.Rows) != 1 || c.Rows[0].P50Ratio != 0.4 {
		t.Errorf("written comparison %s (%v): want one row, p50 ratio 0.4", b, err)
	}
	if !strings.Contains(out.String(), "rate20") {
		t.Errorf("printed %q, want the rate20 rows", out.String())
	}
}

// TestCompareWithWarmDay: a report with warm-day (airlock's only) reads back with its day's
// figures, is compared with the peer's without it (listed as airlock's only, the targets judged
// on the rest), and its figures go into a baseline like any scenario's.
func TestCompareWithWarmDay(t *testing.T) {
	day := comparedResult("warm-day", 1884, 1884, 40, 2.1, 9, 7, 8, 25)
	day.Scenario = scenario{Name: "warm-day", Acquires: 1884, WarmPolicy: &warmPolicy{Min: 2, Max: 200}, Day: &daySpec{Trace: dayTracePath, SpeedUp: 96}}
	day.Day = &DayFigures{Trace: dayTracePath, SpeedUp: 96, Sessions: 1884, Bound: 1884, Warm: 1800, IdleShare: 0.15, IdleGoal: goalMet, WarmColdGoal: goalMet, Hours: make([]HourFigures, 24)}
	a := &Report{Product: productAirlock, Commit: "abc", Results: []Result{comparedResult("rate20", 200, 200, 60, 19.9, 11, 8, 10, 30), day}}
	b, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil || back.Results[1].Day == nil || back.Results[1].Day.IdleShare != 0.15 || back.Results[1].Scenario.Day == nil {
		t.Fatalf("read back: %+v, %v", back.Results[1], err)
	}
	p := &Report{Product: productPeer, Results: []Result{comparedResult("rate20", 200, 200, 150, 19.7, 16, 12, 20, 40)}}
	c := compare(&back, p)
	if len(c.Rows) != 1 || c.Rows[0].Scenario != "rate20" || len(c.OnlyAirlock) != 1 || c.OnlyAirlock[0] != "warm-day" || c.Targets[0].Met == nil {
		t.Errorf("comparison %+v: want rate20 side by side, warm-day airlock's only", c)
	}
	var out bytes.Buffer
	c.print(&out)
	base := back.Baseline.withRun(&back, back.StartedAt)
	if f, ok := base.Scenarios["warm-day"]; !ok || f.P50Ms != 40 {
		t.Errorf("baseline %+v: want warm-day's figures", base.Scenarios)
	}
	back.Baseline = base
	out.Reset()
	back.printSummary(&out)
	if !strings.Contains(out.String(), "warm-day") || strings.Contains(out.String(), "SLOWER") {
		t.Errorf("summary\n%s\nwant warm-day's row and its baseline, not slower", out.String())
	}
}
