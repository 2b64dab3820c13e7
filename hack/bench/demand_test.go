package main

import (
	"bytes"
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

// TestWarmDemandScenario: warm-demand is 2/s for 30 s, 20/s for 30 s and 2/s for 30 s (720
// acquires, whatever --claims says) to a pool within [2, 200], started once its min is Ready;
// acquire i is sent in its phase at its phase's rate.
func TestWarmDemandScenario(t *testing.T) {
	list, err := parseScenarios("warm-demand,warm20", sizes{Claims: 50, ScaleAcquires: 1, ScaleOne: 1, ScalePerNamespace: 1})
	if err != nil {
		t.Fatal(err)
	}
	s := list[0]
	if s.Acquires != 720 || s.Rate != 0 || len(s.Phases) != 3 || s.WarmPolicy == nil || *s.WarmPolicy != (warmPolicy{Min: 2, Max: 200}) || s.Warm != 0 {
		t.Fatalf("warm-demand = %+v", s)
	}
	if s.warmBefore() != 2 || list[1].warmBefore() != list[1].Warm {
		t.Errorf("warm before the loop: %d and %d, want the min and warm20's count", s.warmBefore(), list[1].warmBefore())
	}
	if r := s.sendRate(); r != 8 {
		t.Errorf("send rate %v, want 720 in 90 s", r)
	}
	ms := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
	for _, tc := range []struct {
		i     int
		at    time.Duration
		phase int
	}{
		{0, 0, 0}, {59, ms(29500), 0}, {60, 30 * time.Second, 1}, {61, ms(30050), 1},
		{659, ms(59950), 1}, {660, 60 * time.Second, 2}, {719, ms(89500), 2},
	} {
		if got := s.offset(tc.i); got != tc.at {
			t.Errorf("offset(%d) = %v, want %v", tc.i, got, tc.at)
		}
		if got := s.phaseOf(tc.i); got != tc.phase {
			t.Errorf("phaseOf(%d) = %d, want %d", tc.i, got, tc.phase)
		}
	}
	// Without phases, the old schedule.
	if rate20 := (scenario{Rate: 20}); rate20.offset(10) != 500*time.Millisecond || rate20.describeLoad() != "open-loop at 20/s" || (scenario{}).describeLoad() != "in one burst" {
		t.Errorf("a plain rate: offset %v, %q", rate20.offset(10), rate20.describeLoad())
	}
	if got := s.describeLoad(); got != "open-loop at 2/s for 30 s, then 20/s for 30 s, then 2/s for 30 s" {
		t.Errorf("describeLoad = %q", got)
	}
}

// TestSummariseDemand: the warm-hit ratio overall and per phase, warm and cold latencies and the
// ratio of their medians, from the answers and which sessions' claims adopted a member; errors
// count in a phase's sent, not its Bound.
func TestSummariseDemand(t *testing.T) {
	s := scenario{Name: "wd", Phases: []phase{{Rate: 2, Seconds: 2}, {Rate: 20, Seconds: 1}}, WarmPolicy: &warmPolicy{Min: 1, Max: 10}}
	s.Acquires = 24
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	warm := map[string]bool{}
	answers := make([]answer, s.Acquires)
	for i := range answers {
		sent := t0.Add(s.offset(i))
		lat := 200 * time.Millisecond
		if i < 4 || i%2 == 0 { // the first phase warm, then every other one
			warm[session("wd", i)] = true
			lat = 50 * time.Millisecond
		}
		answers[i] = answer{sent: sent, answered: sent.Add(lat)}
	}
	answers[5].err = errors.New("timed out")
	samples := []poolSample{{at: t0.Add(-time.Second), ready: 1, wanted: 1}, {at: t0.Add(2 * time.Second), ready: 3, starting: 4, wanted: 12}}
	f := summariseDemand(s, "wd", answers, warm, samples)

	if f.Bound != 23 || f.Warm != 4+10 || math.Abs(f.WarmHitRatio-14.0/23) > 1e-9 {
		t.Errorf("bound %d, warm %d, ratio %v; want 23, 14, 14/23", f.Bound, f.Warm, f.WarmHitRatio)
	}
	if len(f.Phases) != 2 || f.Phases[0] != (PhaseFigures{Rate: 2, Sent: 4, Bound: 4, Warm: 4, WarmHitRatio: 1}) ||
		f.Phases[1].Sent != 20 || f.Phases[1].Bound != 19 || f.Phases[1].Warm != 10 {
		t.Errorf("phases %+v", f.Phases)
	}
	if f.WarmLatency.P50Ms != 50 || f.ColdLatency.P50Ms != 200 || f.WarmOverColdP50 != 0.25 || f.WarmLatency.Count != 14 || f.ColdLatency.Count != 9 {
		t.Errorf("warm %+v, cold %+v, ratio %v", f.WarmLatency, f.ColdLatency, f.WarmOverColdP50)
	}
	if f.PeakWanted != 12 || f.Samples != 2 {
		t.Errorf("peak wanted %d, samples %d", f.PeakWanted, f.Samples)
	}
	var out bytes.Buffer
	f.print(&out)
	for _, want := range []string{"warm-hit       60.9% (14 of 23 Bound): 2/s 100.0% (4 of 4), 20/s 52.6% (10 of 19)", "p50 50 vs 200 ms (0.25x", "target peaked at 12"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("printed\n%s\nwithout %q", out.String(), want)
		}
	}
}

// TestIdleOver: idle members over all sandboxes, each registry status weighing as long as it
// stood within the loop (first send to last answer), the sandboxes in use counted as their
// answers come.
func TestIdleOver(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	answers := []answer{{sent: at(0), answered: at(1)}, {sent: at(1), answered: at(4)}}
	bound := []time.Time{at(1), at(4)}
	samples := []poolSample{{at: at(-1), ready: 2, starting: 1}, {at: at(2), ready: 1}}
	// [0,1): 3 idle, none in use: 1; [1,2): 3 idle, 1 in use: 0.75; [2,4): 1 idle, 1 in use: 0.5.
	fraction, mean := idleOver(answers, bound, samples)
	if math.Abs(fraction-(1+0.75+2*0.5)/4) > 1e-9 || math.Abs(mean-(3+3+2*1)/4.0) > 1e-9 {
		t.Errorf("idle fraction %v, mean %v; want %v and %v", fraction, mean, (1+0.75+2*0.5)/4, 2.0)
	}
	if f, m := idleOver(answers, bound, nil); f != 0 || m != 0 {
		t.Errorf("without statuses: %v %v, want 0", f, m)
	}
}
