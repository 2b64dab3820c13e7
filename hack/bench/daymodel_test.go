package main

import (
	"testing"
	"time"

	"github.com/airlock-dev/airlock/pkg/warmsize"
)

// TestDayModel: on the model, the idle share grows with the speed-up (the pool is sized by
// arrivals per second of the replay, the sessions in use are not: Little's law), which is why
// the replay's idle figure is pessimistic; it prints the predictions.
func TestDayModel(t *testing.T) {
	trace, err := committedDay()
	if err != nil {
		t.Fatal(err)
	}
	policy := warmsize.Policy{Min: 2, Max: 200, HeadroomPercent: 50}
	for _, ready := range []time.Duration{time.Second, 2 * time.Second} {
		prev := -1.0
		for _, speedUp := range []float64{1, 24, 48, 96, 192} {
			f := modelDay(trace, speedUp, ready, policy)
			t.Logf("ready %s, %4gx (%5.1f min): warm-hit %5.1f%%, idle %4.1f%% of the sandbox-seconds, pool mean %4.1f, peak %d",
				ready, speedUp, scaled(day, speedUp).Minutes(), 100*f.warmHit, 100*f.idleShare, f.poolMean, f.poolPeak)
			if f.idleShare <= prev {
				t.Errorf("ready %s: the idle share at %gx (%v) is not above the slower replay's (%v)", ready, speedUp, f.idleShare, prev)
			}
			prev = f.idleShare
		}
	}
}

// TestModelDay: on the model, a steady 1/s with members Ready in 1 s keeps the target of
// warmsize (ceil(1 × 1 s × 1.5) + 1 = 3) and serves nearly every arrival warm; with no arrival
// the pool sits at its min all day; predictDay needs a ready time.
func TestModelDay(t *testing.T) {
	var trace []daySession
	for i := range 600 {
		trace = append(trace, daySession{At: time.Duration(i) * time.Second, Session: "s", Length: 10 * time.Second})
	}
	policy := warmsize.Policy{Min: 0, Max: 100, HeadroomPercent: 50}
	f := modelDay(trace, 1, time.Second, policy)
	// 3 idle members for the 600 s of arrivals, then the scale-down's hold and the average's
	// decay: some minutes more at fewer.
	idle := f.poolMean * day.Seconds()
	if f.warmHit < 0.95 || f.poolPeak != 3 || idle < 0.9*3*600 || idle > 3*600+3*600 {
		t.Errorf("steady 1/s: warm-hit %v, pool peak %d, %v idle member-seconds; want >= 95%%, 3, about 1800 and the tail", f.warmHit, f.poolPeak, idle)
	}
	// Capped at 3 members that take 10 s to be Ready, 1/s gets about 3 warm in 10.
	if f := modelDay(trace, 1, 10*time.Second, warmsize.Policy{Max: 3, HeadroomPercent: 50}); f.warmHit < 0.25 || f.warmHit > 0.35 {
		t.Errorf("3 members Ready in 10 s at 1/s: warm-hit %v, want about 30%%", f.warmHit)
	}
	if f := modelDay(nil, 96, time.Second, warmsize.Policy{Min: 2, Max: 10}); f.poolMean != 2 || f.poolPeak != 0 && f.poolPeak != 2 || f.idleShare != 1 {
		t.Errorf("no arrival: %+v, want the min all day", f)
	}
	if m := predictDay(trace, 96, 0, warmPolicy{Min: 2, Max: 200}); m != nil {
		t.Errorf("a prediction without a ready time: %+v", m)
	}
	m := predictDay(trace, 96, 1000, warmPolicy{Min: 2, Max: 200})
	if m == nil || m.ReadyMs != 1000 || m.IdleShare <= m.RealTimeIdleShare || m.RealTimeWarmHitRatio < 0.95 {
		t.Errorf("prediction %+v: want the 96x replay idler than the real time, the real time warm", m)
	}
}
