package main

// The warm-day scenario's trace (issue 40 item 3: "idle warm members <= 20% of the members over a
// replayed day of arrivals"): a day of sessions, each an arrival time, a session id, a handle and
// a session length, made once by a generator with a fixed seed and committed
// (testdata/day.csv, embedded in the binary), so that every run replays the same day.
// `go run ./hack/bench day-trace` writes it again; TestDayTraceCommitted fails when the file and
// the generator disagree. Its shape, and what it is based on: docs/decisions.md, "make bench",
// warm-day.

import (
	"bytes"
	"cmp"
	_ "embed"
	"encoding/csv"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// dayTracePath is the committed trace, from the repository's root.
const dayTracePath = "hack/bench/testdata/day.csv"

//go:embed testdata/day.csv
var dayTraceCSV []byte

// day is the length of the trace.
const day = 24 * time.Hour

// defaultDaySpeedUp replays the day in 15 minutes (--day-speedup, BENCH_DAY_SPEEDUP): an hour of
// the day in 37.5 s. docs/decisions.md, "make bench", says what the speed-up does to the figures.
const defaultDaySpeedUp = 96

// daySession is one session of the trace: it acquires Handle at At after midnight, holds it for
// Length, then closes the session.
type daySession struct {
	At      time.Duration
	Session string
	Handle  string
	Length  time.Duration
	// Kind is where the arrival comes from: "diurnal", or a burst's name.
	Kind string
}

// The diurnal curve: the arrival rate at each hour of the day (00:00 to 24:00, linear in
// between), relative to the midday peak of dayPeakPerHour. A working day in one time zone, as
// users of coding agents keep: a night trough at 5% of the peak, a morning ramp from 07:00, the
// peak at 10:00-11:00, a lunch dip, an afternoon near the peak, an evening tail.
var dayShape = [25]float64{
	0.10, 0.08, 0.06, 0.05, 0.05, 0.06, 0.10, 0.25, 0.55, 0.85, 1.00, 1.00, // 00:00-11:00
	0.80, 0.85, 0.95, 0.95, 0.85, 0.65, 0.45, 0.35, 0.30, 0.25, 0.18, 0.13, // 12:00-23:00
	0.10, // 24:00 (the next midnight)
}

const (
	// dayPeakPerHour is the diurnal curve's peak: sessions an hour at 1.0.
	dayPeakPerHour = 150
	// daySessionMedian and daySessionSigma make the diurnal sessions' lengths: lognormal, a median
	// of 8 minutes, a mean of about 13 (e^(σ²/2) times the median), one in eleven over half an hour.
	daySessionMedian = 8 * time.Minute
	daySessionSigma  = 1.0
	// daySessionMin and daySessionMax bound every session's length.
	daySessionMin = 20 * time.Second
	daySessionMax = 4 * time.Hour
	// dayHandle is every session's handle: the bench registry's sandbox, its default instance.
	dayHandle = sandboxName + "/default"
	// daySeed seeds the generator (PCG, one stream per source of arrivals).
	daySeed = 40
)

// dayBurst is a short burst on top of the diurnal curve: PerHour more sessions an hour from
// Start for Length (a homogeneous Poisson process), with lengths of their own.
type dayBurst struct {
	Name          string
	Start, Length time.Duration
	PerHour       float64
	Median        time.Duration
	Sigma         float64
}

// dayBursts: a nightly batch of evaluation runs in the trough (the pool wakes from its min), the
// morning's start after a stand-up, and a CI fan-out after lunch at four times the peak rate.
var dayBursts = []dayBurst{
	{Name: "nightly-evals", Start: 2 * time.Hour, Length: 15 * time.Minute, PerHour: 300, Median: 4 * time.Minute, Sigma: 0.5},
	{Name: "standup", Start: 9*time.Hour + 30*time.Minute, Length: 15 * time.Minute, PerHour: 225, Median: daySessionMedian, Sigma: daySessionSigma},
	{Name: "ci-fanout", Start: 13 * time.Hour, Length: 10 * time.Minute, PerHour: 600, Median: 3 * time.Minute, Sigma: 0.5},
}

// diurnalRate is the diurnal curve's rate at t after midnight, in sessions an hour.
func diurnalRate(t time.Duration) float64 {
	h := t.Hours()
	if h < 0 || h >= 24 {
		return 0
	}
	i := int(h)
	f := h - float64(i)
	return dayPeakPerHour * (dayShape[i]*(1-f) + dayShape[i+1]*f)
}

// dayRandom draws from one PCG stream with the generator's own transforms of its 64-bit output
// (not math/rand's distributions), so that the trace depends on PCG's specified output only.
type dayRandom struct{ pcg *rand.PCG }

func newDayRandom(stream uint64) dayRandom { return dayRandom{rand.NewPCG(daySeed, stream)} }

// uniform is in (0, 1).
func (r dayRandom) uniform() float64 {
	return (float64(r.pcg.Uint64()>>11) + 0.5) / (1 << 53)
}

// exponential has mean 1.
func (r dayRandom) exponential() float64 { return -math.Log(r.uniform()) }

// normal is a standard normal draw (Box-Muller, one of the pair).
func (r dayRandom) normal() float64 {
	return math.Sqrt(-2*math.Log(r.uniform())) * math.Cos(2*math.Pi*r.uniform())
}

// length is a lognormal session length of the given median and sigma, within the bounds, to the
// second.
func (r dayRandom) length(median time.Duration, sigma float64) time.Duration {
	d := time.Duration(float64(median) * math.Exp(sigma*r.normal()))
	return min(max(d, daySessionMin), daySessionMax).Round(time.Second)
}

// generateDay makes the trace: the diurnal curve as an inhomogeneous Poisson process (thinned
// from its peak rate), each burst as a homogeneous one, merged in time order; sessions are
// numbered in that order. Arrival times are to the millisecond.
func generateDay() []daySession {
	var out []daySession
	// The diurnal arrivals, by thinning: candidates at the peak rate, each kept with probability
	// rate(t)/peak.
	r := newDayRandom(0)
	peak := dayPeakPerHour / time.Hour.Seconds()
	for t := 0.0; ; {
		t += r.exponential() / peak
		at := time.Duration(t * float64(time.Second))
		if at >= day {
			break
		}
		if r.uniform()*dayPeakPerHour < diurnalRate(at) {
			out = append(out, daySession{At: at.Round(time.Millisecond), Kind: "diurnal", Length: r.length(daySessionMedian, daySessionSigma)})
		}
	}
	for k, b := range dayBursts {
		r := newDayRandom(uint64(k) + 1)
		rate := b.PerHour / time.Hour.Seconds()
		for t := 0.0; ; {
			t += r.exponential() / rate
			at := time.Duration(t * float64(time.Second))
			if at >= b.Length {
				break
			}
			out = append(out, daySession{At: (b.Start + at).Round(time.Millisecond), Kind: b.Name, Length: r.length(b.Median, b.Sigma)})
		}
	}
	slices.SortStableFunc(out, func(a, b daySession) int { return cmp.Compare(a.At, b.At) })
	for i := range out {
		out[i].Session = fmt.Sprintf("day-%05d", i)
		out[i].Handle = dayHandle
	}
	return out
}

// dayHeader is the trace file's columns.
var dayHeader = []string{"at_ms", "session", "handle", "length_ms", "kind"}

// writeDayTrace writes the trace as CSV: comment lines that say what it is, the header, one row
// per session.
func writeDayTrace(w io.Writer, trace []daySession) error {
	var burst []string
	for _, b := range dayBursts {
		burst = append(burst, fmt.Sprintf("%s %s-%s +%g/h (lengths median %s, sigma %g)", b.Name,
			clockTime(b.Start), clockTime(b.Start+b.Length), b.PerHour, b.Median, b.Sigma))
	}
	var shape []string
	for _, v := range dayShape[:24] {
		shape = append(shape, strconv.FormatFloat(v, 'g', -1, 64))
	}
	fmt.Fprintf(w, "# The warm-day scenario's replayed day (hack/bench/day.go; docs/decisions.md, \"make bench\").\n")
	fmt.Fprintf(w, "# Generated by `go run ./hack/bench day-trace` (seed %d): do not edit.\n", daySeed)
	fmt.Fprintf(w, "# %d sessions. Diurnal: inhomogeneous Poisson, peak %d/h times, hour by hour from 00:00: %s.\n",
		len(trace), dayPeakPerHour, strings.Join(shape, " "))
	fmt.Fprintf(w, "# Lengths lognormal, median %s, sigma %g, within [%s, %s]. Bursts: %s.\n",
		daySessionMedian, daySessionSigma, daySessionMin, daySessionMax, strings.Join(burst, "; "))
	cw := csv.NewWriter(w)
	if err := cw.Write(dayHeader); err != nil {
		return err
	}
	for _, s := range trace {
		if err := cw.Write([]string{strconv.FormatInt(s.At.Milliseconds(), 10), s.Session, s.Handle,
			strconv.FormatInt(s.Length.Milliseconds(), 10), s.Kind}); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// clockTime is t after midnight as hh:mm.
func clockTime(t time.Duration) string {
	return fmt.Sprintf("%02d:%02d", int(t.Hours()), int(t.Minutes())%60)
}

// readDayTrace reads a trace written by writeDayTrace: sessions in time order within the day,
// with distinct session ids.
func readDayTrace(r io.Reader) ([]daySession, error) {
	cr := csv.NewReader(r)
	cr.Comment = '#'
	cr.FieldsPerRecord = len(dayHeader)
	rows, err := cr.ReadAll()
	if err != nil {
		return nil, err
	}
	if len(rows) == 0 || !slices.Equal(rows[0], dayHeader) {
		return nil, fmt.Errorf("the trace's header is not %s", strings.Join(dayHeader, ","))
	}
	seen := map[string]bool{}
	out := make([]daySession, 0, len(rows)-1)
	for n, row := range rows[1:] {
		at, err1 := strconv.ParseInt(row[0], 10, 64)
		length, err2 := strconv.ParseInt(row[3], 10, 64)
		s := daySession{At: time.Duration(at) * time.Millisecond, Session: row[1], Handle: row[2], Length: time.Duration(length) * time.Millisecond, Kind: row[4]}
		switch {
		case err1 != nil || err2 != nil:
			return nil, fmt.Errorf("row %d: at_ms and length_ms must be whole numbers: %q", n+1, row)
		case s.At < 0 || s.At >= day || n > 0 && s.At < out[n-1].At:
			return nil, fmt.Errorf("row %d: at_ms %d is not within the day and after the row before", n+1, at)
		case s.Length <= 0 || s.Session == "" || s.Handle == "" || seen[s.Session]:
			return nil, fmt.Errorf("row %d: a session needs a length, a handle and an id of its own: %q", n+1, row)
		}
		seen[s.Session] = true
		out = append(out, s)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("the trace holds no session")
	}
	return out, nil
}

// committedDay is the trace the binary embeds.
func committedDay() ([]daySession, error) {
	trace, err := readDayTrace(bytes.NewReader(dayTraceCSV))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dayTracePath, err)
	}
	return trace, nil
}

// dayTraceMain is `bench day-trace`: it writes the generator's trace to --output.
func dayTraceMain(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("day-trace", flag.ContinueOnError)
	fs.SetOutput(stderr)
	output := fs.String("output", dayTracePath, "The trace file to write (run from the repository's root).")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var b bytes.Buffer
	if err := writeDayTrace(&b, generateDay()); err != nil {
		fmt.Fprintln(stderr, "bench day-trace:", err)
		return 1
	}
	if err := os.WriteFile(*output, b.Bytes(), 0o644); err != nil {
		fmt.Fprintln(stderr, "bench day-trace:", err)
		return 1
	}
	return 0
}
