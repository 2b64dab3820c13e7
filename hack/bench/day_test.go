package main

import (
	"bytes"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestDayTraceCommitted: the generator makes the same day every time, and the committed trace
// (the one the binary embeds) is what it makes: `go run ./hack/bench day-trace` after changing
// the generator.
func TestDayTraceCommitted(t *testing.T) {
	var a, b bytes.Buffer
	if err := writeDayTrace(&a, generateDay()); err != nil {
		t.Fatal(err)
	}
	if err := writeDayTrace(&b, generateDay()); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Fatal("two runs of the generator made different traces")
	}
	if !bytes.Equal(a.Bytes(), dayTraceCSV) {
		t.Fatalf("%s is not what the generator makes: run `go run ./hack/bench day-trace` from the repository's root", dayTracePath)
	}
	trace, err := committedDay()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(trace, generateDay()) {
		t.Error("the committed trace read back is not the generator's")
	}
}

// expectedArrivals is the diurnal curve's expected arrivals between from and to (the integral of
// the rate, by the trapezoid rule on each whole hour: the curve is linear within an hour).
func expectedArrivals(from, to int) float64 {
	var n float64
	for h := from; h < to; h++ {
		n += dayPeakPerHour * (dayShape[h] + dayShape[h+1]) / 2
	}
	return n
}

// TestDiurnalRate: the curve is the hourly values times the peak, linear within each hour, and
// nothing outside the day.
func TestDiurnalRate(t *testing.T) {
	for _, tc := range []struct {
		at   time.Duration
		want float64
	}{
		{0, 15}, {3 * time.Hour, 7.5}, {7*time.Hour + 30*time.Minute, 60}, {10 * time.Hour, 150},
		{12*time.Hour + 15*time.Minute, 150 * (0.8*0.75 + 0.85*0.25)}, {day - time.Nanosecond, 15}, {day, 0}, {-time.Second, 0},
	} {
		if got := diurnalRate(tc.at); math.Abs(got-tc.want) > 1e-6 {
			t.Errorf("diurnalRate(%s) = %v, want %v", tc.at, got, tc.want)
		}
	}
}

// TestDayTraceShape: the diurnal arrivals follow the curve hour by hour (each hour's count within
// four standard deviations of a Poisson count of its expected number, and the day's total), so
// the night's hours hold a small fraction of the midday's; each burst adds its rate within its
// window only; the sessions' lengths are the lognormal asked for, within the bounds.
func TestDayTraceShape(t *testing.T) {
	trace := generateDay()
	perHour := make([]int, 24)
	byKind := map[string][]daySession{}
	for _, s := range trace {
		byKind[s.Kind] = append(byKind[s.Kind], s)
		if s.Kind == "diurnal" {
			perHour[int(s.At/time.Hour)]++
		}
	}
	within := func(what string, got int, want float64) {
		t.Helper()
		if math.Abs(float64(got)-want) > 4*math.Sqrt(want)+1 {
			t.Errorf("%s: %d arrivals, want about %.0f", what, got, want)
		}
	}
	within("the day's diurnal total", len(byKind["diurnal"]), expectedArrivals(0, 24))
	for h, n := range perHour {
		within(clockTime(time.Duration(h)*time.Hour)+" diurnal", n, expectedArrivals(h, h+1))
	}
	if night, midday := perHour[3]+perHour[4], perHour[10]+perHour[11]; night*8 > midday {
		t.Errorf("03:00-05:00 has %d arrivals, 10:00-12:00 %d: want the night under an eighth of the midday", night, midday)
	}
	for _, b := range dayBursts {
		got := byKind[b.Name]
		within(b.Name, len(got), b.PerHour*b.Length.Hours())
		for _, s := range got {
			if s.At < b.Start || s.At >= b.Start+b.Length {
				t.Errorf("%s: a session at %s, outside %s-%s", b.Name, s.At, clockTime(b.Start), clockTime(b.Start+b.Length))
			}
		}
	}
	if len(byKind) != len(dayBursts)+1 {
		t.Errorf("kinds %v, want diurnal and the bursts", len(byKind))
	}

	var lengths []time.Duration
	over30 := 0
	for i, s := range trace {
		if s.Length < daySessionMin || s.Length > daySessionMax || s.Length%time.Second != 0 {
			t.Errorf("session %s: length %s, want whole seconds within [%s, %s]", s.Session, s.Length, daySessionMin, daySessionMax)
		}
		if i > 0 && s.At < trace[i-1].At {
			t.Errorf("session %s at %s before the one before it", s.Session, s.At)
		}
		if s.Handle != dayHandle || !strings.HasPrefix(s.Session, "day-") {
			t.Errorf("session %q, handle %q", s.Session, s.Handle)
		}
		if s.Kind == "diurnal" {
			lengths = append(lengths, s.Length)
			if s.Length > 30*time.Minute {
				over30++
			}
		}
	}
	slices.Sort(lengths)
	if median := lengths[len(lengths)/2]; median < 7*time.Minute || median > 9*time.Minute {
		t.Errorf("the diurnal sessions' median length %s, want about %s", median, daySessionMedian)
	}
	// P(Z > ln(30/8)) = 9.3% for sigma 1.
	if share := float64(over30) / float64(len(lengths)); share < 0.07 || share > 0.12 {
		t.Errorf("%.1f%% of the diurnal sessions over 30 min, want about 9%%", 100*share)
	}
}

// TestReadDayTrace: a trace read back is the trace written; rows out of order, outside the day,
// without a length, or repeating a session are refused, as is another header.
func TestReadDayTrace(t *testing.T) {
	trace := []daySession{
		{At: 0, Session: "a", Handle: "codegen/default", Length: time.Minute, Kind: "diurnal"},
		{At: 90 * time.Second, Session: "b", Handle: "codegen/default", Length: 1500 * time.Millisecond, Kind: "ci-fanout"},
	}
	var b bytes.Buffer
	if err := writeDayTrace(&b, trace); err != nil {
		t.Fatal(err)
	}
	got, err := readDayTrace(&b)
	if err != nil || !slices.Equal(got, trace) {
		t.Errorf("read back %+v, %v; want %+v", got, err, trace)
	}
	header := "at_ms,session,handle,length_ms,kind\n"
	for name, text := range map[string]string{
		"out of order":    header + "2000,a,h,1000,diurnal\n1000,b,h,1000,diurnal\n",
		"after the day":   header + "86400000,a,h,1000,diurnal\n",
		"no length":       header + "1000,a,h,0,diurnal\n",
		"a session twice": header + "1000,a,h,1000,diurnal\n2000,a,h,1000,diurnal\n",
		"not a number":    header + "1s,a,h,1000,diurnal\n",
		"another header":  "at,session,handle,length,kind\n1000,a,h,1000,diurnal\n",
		"no session":      "# nothing\n" + header,
	} {
		if _, err := readDayTrace(strings.NewReader(text)); err == nil {
			t.Errorf("%s: read without an error", name)
		}
	}
}

// TestWarmDayScenario: warm-day replays the committed trace's sessions (whatever --claims says)
// at the speed-up given, to warm-demand's pool; a speed-up under 1 is refused, and the peer
// refuses the scenario.
func TestWarmDayScenario(t *testing.T) {
	trace, err := committedDay()
	if err != nil {
		t.Fatal(err)
	}
	list, err := parseScenarios("warm-day", sizes{Claims: 50, ScaleAcquires: 1, ScaleOne: 1, ScalePerNamespace: 1, DaySpeedUp: 96})
	if err != nil {
		t.Fatal(err)
	}
	s := list[0]
	if s.Acquires != len(trace) || s.WarmPolicy == nil || *s.WarmPolicy != (warmPolicy{Min: 2, Max: 200}) || s.Day == nil ||
		*s.Day != (daySpec{Trace: dayTracePath, SpeedUp: 96}) || s.warmBefore() != 2 {
		t.Fatalf("warm-day = %+v", s)
	}
	if r := s.sendRate(); math.Abs(r-float64(len(trace))/900) > 1e-9 {
		t.Errorf("send rate %v, want the sessions over 900 s", r)
	}
	if got := s.describeLoad(); !strings.Contains(got, "at 96x: 24 h in 15.0 min") {
		t.Errorf("describeLoad = %q", got)
	}
	for _, speedUp := range []float64{0, 0.5, math.NaN()} {
		if _, err := parseScenarios("warm-day", sizes{Claims: 1, ScaleAcquires: 1, ScaleOne: 1, ScalePerNamespace: 1, DaySpeedUp: speedUp}); err == nil {
			t.Errorf("speed-up %v accepted", speedUp)
		}
	}
	o := options{product: productPeer, kubeconfig: "k", stateDir: "s", operatorMetricsURL: "m", operatorUser: "u", output: "o",
		sizes: sizes{Claims: 1, ScaleAcquires: 1, ScaleOne: 1, ScalePerNamespace: 1, DaySpeedUp: 96}, acquireTimeout: time.Minute, fillStall: time.Minute,
		operatorHistograms: ".", passMetric: ".", scenarios: "warm-day"}
	if err := o.validate(); err == nil || !strings.Contains(err.Error(), "scenario warm-day: airlock's only") {
		t.Errorf("the peer with warm-day: %v", err)
	}
}
