package main

// The committed baseline (issue 40): hack/bench/baseline.json holds the figures of the last run
// someone chose to keep, per scenario. Every run prints them beside its own and says when a
// scenario is more than slowerBy slower (a regression of a fixed 150 ms at 20/s went unseen
// for a turn because nothing compared). The file changes only on purpose:
// `make bench-baseline` (BENCH_WRITE_BASELINE=1 hack/bench.sh) writes the run's figures into it,
// keeping the scenarios the run did not measure; commit it with the run's JSON quoted in the
// message.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"
)

// slowerBy is how much slower than its baseline a scenario may be before the run says so.
const slowerBy = 1.25

// Baseline is the content of hack/bench/baseline.json.
type Baseline struct {
	// Note says where the figures come from (a provisional set says so).
	Note string `json:"note"`
	// Commit is the commit the figures were measured at; WrittenAt when they were written.
	Commit    string    `json:"commit"`
	WrittenAt time.Time `json:"writtenAt,omitzero"`
	// Provisional marks figures not measured by make bench (copied from an issue's text).
	Provisional bool `json:"provisional,omitempty"`
	// Scenarios are the figures by scenario name.
	Scenarios map[string]Figures `json:"scenarios"`
}

// Figures are a scenario's headline figures: request -> Bound latency, Bound per second, API
// writes per claim.
type Figures struct {
	P50Ms           float64 `json:"p50Ms"`
	P90Ms           float64 `json:"p90Ms"`
	P99Ms           float64 `json:"p99Ms"`
	CompletedPerSec float64 `json:"completedPerSec"`
	WritesPerClaim  float64 `json:"writesPerClaim"`
}

// figuresOf returns the headline figures of a result.
func figuresOf(res Result) Figures {
	l := res.Acquires.Latency
	return Figures{P50Ms: l.P50Ms, P90Ms: l.P90Ms, P99Ms: l.P99Ms, CompletedPerSec: res.Acquires.CompletedPerSec, WritesPerClaim: res.Window.Writes.PerClaim}
}

// slower lists what of cur is more than slowerBy worse than base: the p50 and p90 latency
// (higher) and the Bound per second (lower). p99 (two acquires of 200) and writes per claim (a
// cost, not a speed) are printed, not judged. A figure missing from base (0) is not judged.
func slower(base, cur Figures) []string {
	var out []string
	for _, f := range []struct {
		name      string
		base, cur float64
	}{{"p50", base.P50Ms, cur.P50Ms}, {"p90", base.P90Ms, cur.P90Ms}} {
		if f.base > 0 && f.cur > f.base*slowerBy {
			out = append(out, fmt.Sprintf("%s %.0f ms is %+.0f%% over %.0f", f.name, f.cur, 100*(f.cur/f.base-1), f.base))
		}
	}
	if base.CompletedPerSec > 0 && cur.CompletedPerSec*slowerBy < base.CompletedPerSec {
		out = append(out, fmt.Sprintf("%.1f Bound/s is %.0f%% under %.1f", cur.CompletedPerSec, 100*(1-cur.CompletedPerSec/base.CompletedPerSec), base.CompletedPerSec))
	}
	return out
}

// readBaseline reads the baseline at path; a file that is not there is no baseline (nil).
func readBaseline(path string) (*Baseline, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var base Baseline
	if err := json.Unmarshal(b, &base); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &base, nil
}

// withRun returns the baseline with the report's figures in place of the scenarios it ran (the
// others kept), measured at the report's commit: what `make bench-baseline` writes.
func (b *Baseline) withRun(rep *Report, now time.Time) *Baseline {
	out := &Baseline{
		Note:      "written by make bench-baseline (BENCH_WRITE_BASELINE=1 hack/bench.sh) on " + rep.LoadAvgNote(),
		Commit:    rep.Commit,
		WrittenAt: now.UTC(),
		Scenarios: map[string]Figures{},
	}
	if b != nil {
		for name, f := range b.Scenarios {
			out.Scenarios[name] = f
		}
		if b.Provisional {
			out.Note += "; scenarios not run keep the earlier figures (" + b.Commit + ", provisional)"
		}
	}
	for _, res := range rep.Results {
		if res.Acquires.Latency.Count > 0 {
			out.Scenarios[res.Scenario.Name] = figuresOf(res)
		}
	}
	return out
}

// LoadAvgNote says on what machine the report ran, for the baseline's note.
func (rep *Report) LoadAvgNote() string {
	return fmt.Sprintf("%d CPUs, load average %s at the start", rep.CPUs, rep.LoadAvg)
}

// write writes the baseline to path.
func (b *Baseline) write(path string) error {
	out, err := json.MarshalIndent(b, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(out, '\n'), 0o644)
}

// printBaseline prints, under a scenario's summary row, its baseline in the same columns and
// whether the scenario is more than slowerBy slower than it.
func (rep *Report) printBaseline(w io.Writer, res Result) {
	if rep.Baseline == nil {
		return
	}
	base, ok := rep.Baseline.Scenarios[res.Scenario.Name]
	if !ok {
		fmt.Fprintf(w, "%-12s no baseline for %s\n", "  baseline", res.Scenario.Name)
		return
	}
	what := rep.Baseline.Commit
	if rep.Baseline.Provisional {
		what += ", provisional"
	}
	fmt.Fprintf(w, "%-12s %8.0f %8.0f %8.0f %11.1f %10.1f  (%s)\n", "  baseline", base.P50Ms, base.P90Ms, base.P99Ms, base.CompletedPerSec, base.WritesPerClaim, what)
	if res.Acquires.Latency.Count == 0 {
		return
	}
	if s := slower(base, figuresOf(res)); len(s) > 0 {
		fmt.Fprintf(w, "%-12s SLOWER than the baseline by more than %.0f%%: %v\n", "  !!", 100*(slowerBy-1), s)
	}
}
