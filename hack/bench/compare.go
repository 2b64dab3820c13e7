package main

// Side by side (issue 40 item 2): `bench compare` reads airlock's report and the peer's, both
// from the same `make bench` run, and prints each shared scenario's figures for both products,
// their ratios, and the targets met or not: cold 20/s p50 at most half the peer's, 40/s
// at least twice the peer's ready per second. The warm scenario (pools of 250) is printed with its
// ratios and no target.

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
)

// ProductFigures are one product's figures of one scenario.
type ProductFigures struct {
	P50Ms         float64 `json:"p50Ms"`
	P90Ms         float64 `json:"p90Ms"`
	P99Ms         float64 `json:"p99Ms"`
	ReadyPerSec   float64 `json:"readyPerSec"`
	Ready         int     `json:"ready"`
	Sent          int     `json:"sent"`
	WritesAll     float64 `json:"writesPerClaim"`
	WritesOwn     float64 `json:"controllerWritesPerClaim"`
	CPUController float64 `json:"controllerCPUMsPerClaim"`
	CPUAll        float64 `json:"allCPUMsPerClaim"`
}

// productFigures returns the figures compared of res.
func productFigures(res Result) ProductFigures {
	a, w := res.Acquires, res.Window
	f := ProductFigures{
		P50Ms: a.Latency.P50Ms, P90Ms: a.Latency.P90Ms, P99Ms: a.Latency.P99Ms,
		ReadyPerSec: a.CompletedPerSec, Ready: a.Bound, Sent: a.Sent,
		WritesAll: w.Writes.PerClaim, WritesOwn: w.ByClient["operator"].PerClaim,
		CPUController: w.CPUMsPerClaim["operator"],
	}
	for _, c := range shown {
		f.CPUAll += w.CPUMsPerClaim[c]
	}
	return f
}

// CompareRow is one scenario both products ran; the ratios are airlock's figure over the peer's
// (0 when the peer's is 0).
type CompareRow struct {
	Scenario    string         `json:"scenario"`
	Airlock     ProductFigures `json:"airlock"`
	Peer        ProductFigures `json:"peer"`
	P50Ratio    float64        `json:"p50Ratio"`
	ReadyRatio  float64        `json:"readyPerSecRatio"`
	WritesRatio float64        `json:"writesRatio"`
	CPURatio    float64        `json:"allCPURatio"`
}

// Target is one of the goals against the peer.
type Target struct {
	Name     string  `json:"name"`
	Scenario string  `json:"scenario"`
	Want     string  `json:"want"`
	Ratio    float64 `json:"ratio"`
	// Met is nil when the target could not be judged; Note says why, or that it was judged on the
	// ready acquires only.
	Met  *bool  `json:"met,omitempty"`
	Note string `json:"note,omitempty"`
}

// Comparison is what `bench compare` prints and writes.
type Comparison struct {
	Airlock     string       `json:"airlock"`
	Peer        string       `json:"peer"`
	Rows        []CompareRow `json:"rows"`
	Targets     []Target     `json:"targets"`
	OnlyAirlock []string     `json:"onlyAirlock,omitempty"`
	OnlyPeer    []string     `json:"onlyPeer,omitempty"`
}

func ratio(a, b float64) float64 {
	if b == 0 || math.IsNaN(a) || math.IsNaN(b) {
		return 0
	}
	return a / b
}

// compare builds the comparison of airlock's report a and the peer's p.
func compare(a, p *Report) Comparison {
	c := Comparison{Airlock: a.Commit, Peer: p.Commit}
	peer := map[string]Result{}
	for _, r := range p.Results {
		peer[r.Scenario.Name] = r
	}
	inAirlock := map[string]bool{}
	for _, r := range a.Results {
		inAirlock[r.Scenario.Name] = true
		pr, ok := peer[r.Scenario.Name]
		if !ok {
			c.OnlyAirlock = append(c.OnlyAirlock, r.Scenario.Name)
			continue
		}
		af, pf := productFigures(r), productFigures(pr)
		c.Rows = append(c.Rows, CompareRow{
			Scenario: r.Scenario.Name, Airlock: af, Peer: pf,
			P50Ratio: ratio(af.P50Ms, pf.P50Ms), ReadyRatio: ratio(af.ReadyPerSec, pf.ReadyPerSec),
			WritesRatio: ratio(af.WritesAll, pf.WritesAll), CPURatio: ratio(af.CPUAll, pf.CPUAll),
		})
	}
	for _, r := range p.Results {
		if !inAirlock[r.Scenario.Name] {
			c.OnlyPeer = append(c.OnlyPeer, r.Scenario.Name)
		}
	}
	c.Targets = []Target{
		c.target("cold 20/s p50 at most half the peer's", "rate20", "p50 ratio <= 0.5",
			func(r CompareRow) (float64, bool) { return r.P50Ratio, r.P50Ratio <= 0.5 }),
		c.target("40/s at least twice the peer's ready per second", "rate40", "ready/s ratio >= 2",
			func(r CompareRow) (float64, bool) { return r.ReadyRatio, r.ReadyRatio >= 2 }),
	}
	return c
}

// target judges the row of scenario with judge; a scenario not run by both, or one whose
// acquires did not all become ready in either product, is not judged.
func (c Comparison) target(name, scenario, want string, judge func(CompareRow) (float64, bool)) Target {
	t := Target{Name: name, Scenario: scenario, Want: want}
	for _, r := range c.Rows {
		if r.Scenario != scenario {
			continue
		}
		if r.Airlock.Ready == 0 || r.Peer.Ready == 0 {
			t.Note = fmt.Sprintf("airlock %d of %d ready, the peer %d of %d", r.Airlock.Ready, r.Airlock.Sent, r.Peer.Ready, r.Peer.Sent)
			return t
		}
		v, met := judge(r)
		t.Ratio, t.Met = v, &met
		if r.Airlock.Ready < r.Airlock.Sent || r.Peer.Ready < r.Peer.Sent {
			t.Note = fmt.Sprintf("judged on the ready ones: airlock %d of %d, the peer %d of %d", r.Airlock.Ready, r.Airlock.Sent, r.Peer.Ready, r.Peer.Sent)
		}
		return t
	}
	t.Note = scenario + " was not run by both"
	return t
}

// print writes the comparison as a table.
func (c Comparison) print(w io.Writer) {
	fmt.Fprintf(w, "\n== side by side: airlock %s and agent-sandbox %s, each on a fresh plane made the same way (request -> ready)\n", c.Airlock, c.Peer)
	fmt.Fprintf(w, "%-10s %-15s %8s %8s %8s %9s %10s %11s %11s %11s\n", "scenario", "product", "p50 ms", "p90 ms", "p99 ms",
		"ready/s", "writes/cl", "ctrl writes", "ctrl CPU ms", "all CPU ms")
	row := func(scenario, product string, f ProductFigures) {
		fmt.Fprintf(w, "%-10s %-15s %8.0f %8.0f %8.0f %9.1f %10.1f %11.1f %11.1f %11.1f\n", scenario, product,
			f.P50Ms, f.P90Ms, f.P99Ms, f.ReadyPerSec, f.WritesAll, f.WritesOwn, f.CPUController, f.CPUAll)
	}
	for _, r := range c.Rows {
		row(r.Scenario, "airlock", r.Airlock)
		row("", "agent-sandbox", r.Peer)
		fmt.Fprintf(w, "%-10s %-15s %7.2fx %8s %8s %8.2fx %9.2fx %11s %11s %10.2fx\n", "", "airlock/peer",
			r.P50Ratio, "", "", r.ReadyRatio, r.WritesRatio, "", "", r.CPURatio)
	}
	if len(c.OnlyAirlock) > 0 {
		fmt.Fprintf(w, "airlock only (the peer did not run them): %v\n", c.OnlyAirlock)
	}
	if len(c.OnlyPeer) > 0 {
		fmt.Fprintf(w, "the peer only: %v\n", c.OnlyPeer)
	}
	fmt.Fprintln(w, "targets against the peer (issue 40 item 2):")
	for _, t := range c.Targets {
		verdict := "NOT JUDGED"
		if t.Met != nil {
			verdict = "NOT MET"
			if *t.Met {
				verdict = "met"
			}
		}
		line := fmt.Sprintf("  %-50s %-7s %-22s %s", t.Name, t.Scenario, t.Want, verdict)
		if t.Met != nil {
			line += fmt.Sprintf(" (%.2fx)", t.Ratio)
		}
		if t.Note != "" {
			line += "; " + t.Note
		}
		fmt.Fprintln(w, line)
	}
}

// readReport reads a report file written by a run.
func readReport(path string) (*Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var rep Report
	if err := json.Unmarshal(b, &rep); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &rep, nil
}

// compareMain is `bench compare --airlock=A.json --peer=P.json [--output=C.json]`.
func compareMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench compare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	airlockFile := fs.String("airlock", "", "airlock's report (JSON) of the run.")
	peerFile := fs.String("peer", "", "agent-sandbox's report (JSON) of the same run.")
	output := fs.String("output", "", "Where to write the comparison (JSON); none: not written.")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *airlockFile == "" || *peerFile == "" {
		fmt.Fprintln(stderr, "bench compare: --airlock and --peer are both needed")
		return 2
	}
	a, err := readReport(*airlockFile)
	if err == nil && a.Product != "" && a.Product != productAirlock {
		err = fmt.Errorf("%s is a report of %s, not of airlock", *airlockFile, a.Product)
	}
	if err != nil {
		fmt.Fprintln(stderr, "bench compare:", err)
		return 1
	}
	p, err := readReport(*peerFile)
	if err == nil && p.Product != productPeer {
		err = fmt.Errorf("%s is a report of %q, not of %s", *peerFile, p.Product, productPeer)
	}
	if err != nil {
		fmt.Fprintln(stderr, "bench compare:", err)
		return 1
	}
	c := compare(a, p)
	c.print(stdout)
	if *output != "" {
		b, err := json.MarshalIndent(c, "", "  ")
		if err == nil {
			err = os.WriteFile(*output, append(b, '\n'), 0o644)
		}
		if err != nil {
			fmt.Fprintln(stderr, "bench compare:", err)
			return 1
		}
		fmt.Fprintf(stdout, "written: %s\n", *output)
	}
	return 0
}
