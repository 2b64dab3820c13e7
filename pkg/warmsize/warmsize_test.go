package warmsize

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

// at is t0 plus seconds.
func at(seconds float64) time.Time { return t0.Add(time.Duration(seconds * float64(time.Second))) }

func TestTarget(t *testing.T) {
	p := Policy{Min: 2, Max: 40, HeadroomPercent: 50}
	tests := map[string]struct {
		policy    Policy
		perSecond float64
		ready     time.Duration
		want      int32
	}{
		"no arrivals: min":                {policy: p, want: 2},
		"no arrivals, min 0: none":        {policy: Policy{Max: 10, HeadroomPercent: 50}, want: 0},
		"a trickle: one, and the spare":   {policy: Policy{Max: 10, HeadroomPercent: 50}, perSecond: 0.01, ready: time.Second, want: 2},
		"2/s, 1.2 s: ceil(3.6) + 1":       {policy: p, perSecond: 2, ready: 1200 * time.Millisecond, want: 5},
		"an exact product is not rounded": {policy: p, perSecond: 2, ready: time.Second, want: 4},
		"no headroom":                     {policy: Policy{Max: 40}, perSecond: 20, ready: time.Second, want: 21},
		"20/s, 1.2 s: ceil(36) + 1":       {policy: p, perSecond: 20, ready: 1200 * time.Millisecond, want: 37},
		"above max: max":                  {policy: p, perSecond: 200, ready: time.Second, want: 40},
		"far above max: no overflow":      {policy: p, perSecond: 1e12, ready: time.Hour, want: 40},
		"min above the demand":            {policy: Policy{Min: 8, Max: 40, HeadroomPercent: 50}, perSecond: 1, ready: time.Second, want: 8},
		"min equal to max: static":        {policy: Policy{Min: 5, Max: 5, HeadroomPercent: 50}, perSecond: 20, ready: time.Second, want: 5},
		"zero ready time: the spare only": {policy: p, perSecond: 20, want: 2},
		"NaN rate: min":                   {policy: p, perSecond: math.NaN(), ready: time.Second, want: 2},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := Target(tc.policy, tc.perSecond, tc.ready); got != tc.want {
				t.Errorf("Target(%+v, %v/s, %v) = %d, want %d", tc.policy, tc.perSecond, tc.ready, got, tc.want)
			}
		})
	}
}

// steady adds arrivals at perSecond, evenly, from start for d; it returns the time after the last.
func steady(a *Arrivals, start time.Time, perSecond float64, d time.Duration) time.Time {
	gap := time.Duration(float64(time.Second) / perSecond)
	t := start
	for ; t.Before(start.Add(d)); t = t.Add(gap) {
		a.Add(t)
	}
	return t
}

func TestArrivalsRate(t *testing.T) {
	var a Arrivals
	end := steady(&a, t0, 2, 10*time.Minute)
	r := Measure(end, &a)
	if math.Abs(r.Long-2) > 0.05 || math.Abs(r.Burst-2) > 0.25 {
		t.Errorf("after ten minutes at 2/s: long %.3f, burst %.3f, want 2", r.Long, r.Burst)
	}

	// A burst of 20/s: the burst window follows it within seconds, the long rate slowly.
	now := steady(&a, end, 20, 2*time.Second)
	if r := Measure(now, &a); r.PerSecond() < 9 || r.Long > 3 {
		t.Errorf("2 s into a 20/s burst: rate %.2f (long %.2f, burst %.2f), want the burst's ≥ 9 and the long ≤ 3", r.PerSecond(), r.Long, r.Burst)
	}
	now = steady(&a, now, 20, 3*time.Second)
	if r := Measure(now, &a); math.Abs(r.PerSecond()-20) > 0.5 {
		t.Errorf("5 s into a 20/s burst: rate %.2f, want 20", r.PerSecond())
	}
	burstEnd := steady(&a, now, 20, 25*time.Second)
	// Back to 2/s: the burst window forgets at once, the long rate decays over minutes.
	now = steady(&a, burstEnd, 2, 10*time.Second)
	if r := Measure(now, &a); r.Burst > 2.5 || r.Long < 5 {
		t.Errorf("10 s after the burst: long %.2f, burst %.2f, want the long above 5 and the burst 2", r.Long, r.Burst)
	}
	now = steady(&a, now, 2, 5*time.Minute)
	if r := Measure(now, &a); math.Abs(r.PerSecond()-2) > 0.1 {
		t.Errorf("5 min after the burst: rate %.2f, want 2", r.PerSecond())
	}

	// Nothing more: zero once less than half a claim is left in the window, not decaying for ever.
	later := now.Add(10 * time.Minute)
	if r := Measure(later, &a); r.PerSecond() != 0 || !a.Idle(later) {
		t.Errorf("10 min without claims: rate %v, idle %v, want 0 and idle", r.PerSecond(), a.Idle(later))
	}
}

// TestArrivalsInAnyOrder: an arrival counted late (an informer's list at start) weighs what it
// would have weighed counted in order.
func TestArrivalsInAnyOrder(t *testing.T) {
	var inOrder, reversed Arrivals
	times := []time.Time{at(0), at(1), at(3), at(30), at(31), at(59)}
	for i := range times {
		inOrder.Add(times[i])
		reversed.Add(times[len(times)-1-i])
	}
	now := at(60)
	a, b := Measure(now, &inOrder), Measure(now, &reversed)
	if math.Abs(a.Long-b.Long) > 1e-9 || a.Burst != b.Burst {
		t.Errorf("in order %+v, reversed %+v", a, b)
	}
	if a.Burst != 1.0/BurstWindow.Seconds() {
		t.Errorf("burst %v, want one arrival in the window", a.Burst)
	}
}

// TestMeasureSums: a pool's rate is the sum of its streams'.
func TestMeasureSums(t *testing.T) {
	var a, b Arrivals
	steady(&a, t0, 1, 5*time.Minute)
	end := steady(&b, t0, 3, 5*time.Minute)
	if r := Measure(end, &a, &b, nil); math.Abs(r.PerSecond()-4) > 0.1 {
		t.Errorf("1/s and 3/s: %.2f, want 4", r.PerSecond())
	}
}

func TestReadyTime(t *testing.T) {
	var r ReadyTime
	if d, measured := r.Get(); d != DefaultReadyTime || measured {
		t.Errorf("before any: %v %v, want the default", d, measured)
	}
	r.Observe(time.Second)
	if d, measured := r.Get(); d != time.Second || !measured {
		t.Errorf("after one: %v %v, want it", d, measured)
	}
	for range 50 {
		r.Observe(3 * time.Second)
	}
	if d, _ := r.Get(); d < 2900*time.Millisecond || d > 3*time.Second {
		t.Errorf("after many of 3 s: %v", d)
	}
}

// TestHeldScaleDown: a lower target is kept at the higher one for ScaleDownDelay after it
// fell, and follows any rise at once.
func TestHeldScaleDown(t *testing.T) {
	var h Held
	steps := []struct {
		at     float64
		target int32
		want   int32
	}{
		{0, 5, 5},
		{10, 20, 20}, // up at once
		{20, 8, 20},  // down: held
		{40, 6, 20},
		{49.9, 6, 20},
		{50, 6, 8},   // 20 ended at 20 s: gone at 50 s; 8 lasted until 40 s
		{70, 6, 6},   // and 8 at 70 s
		{71, 12, 12}, // up at once
	}
	for _, s := range steps {
		if got := h.add(at(s.at), s.target); got != s.want {
			t.Errorf("at %v s, target %d: held %d, want %d", s.at, s.target, got, s.want)
		}
	}
}

// TestSizeRechecksWhenTheTargetFalls: with no claim arriving, Recheck is when the target (or the
// kept size) falls: just before, nothing has changed; at it, it has.
func TestSizeRechecksWhenTheTargetFalls(t *testing.T) {
	p := Policy{Min: 1, Max: 100, HeadroomPercent: 50}
	var ready ReadyTime
	ready.Observe(1200 * time.Millisecond)
	var a Arrivals
	end := steady(&a, t0, 2, 2*time.Minute)
	end = steady(&a, end, 20, 30*time.Second)
	var held Held
	now := end
	s := Size(now, p, Measure(now, &a), ready, &held)
	looks := 0
	for ; s.Recheck > 0; looks++ {
		if looks > 200 {
			t.Fatalf("still rechecking after %d looks: %+v", looks, s)
		}
		before := Size(now.Add(s.Recheck-2*recheckMargin), p, Measure(now.Add(s.Recheck-2*recheckMargin), &a), ready, &Held{segments: append([]segment(nil), held.segments...)})
		if s.Recheck > minRecheck+recheckMargin && (before.Target != s.Target || before.Keep != s.Keep) {
			t.Errorf("at %v, %v before the recheck: target %d keep %d, was %d %d", now.Sub(t0), s.Recheck, before.Target, before.Keep, s.Target, s.Keep)
		}
		now = now.Add(s.Recheck)
		next := Size(now, p, Measure(now, &a), ready, &held)
		if next.Target == s.Target && next.Keep == s.Keep && s.Recheck > minRecheck {
			t.Errorf("at %v: recheck found target %d keep %d unchanged", now.Sub(t0), next.Target, next.Keep)
		}
		s = next
	}
	t.Logf("%d looks until the pool is back at its min, at %v", looks, now.Sub(end))
	if s.Target != p.Min || s.Keep != p.Min {
		t.Errorf("when nothing more changes: target %d keep %d, want min %d", s.Target, s.Keep, p.Min)
	}
}

// TestSizeFollowsABurst: steady 2/s, then 20/s for 30 s, then 2/s again, a member Ready in
// 1.2 s: the target grows within seconds of the burst, and decays back to the steady size.
func TestSizeFollowsABurst(t *testing.T) {
	p := Policy{Max: 100, HeadroomPercent: 50}
	var ready ReadyTime
	ready.Observe(1200 * time.Millisecond)
	var (
		a    Arrivals
		held Held
	)
	size := func(now time.Time) Sizing { return Size(now, p, Measure(now, &a), ready, &held) }
	burst := steady(&a, t0, 2, 5*time.Minute)
	calm := size(burst)
	if calm.Target != 5 {
		t.Fatalf("steady at 2/s: target %d (%s), want 5 = ceil(2 × 1.2 × 1.5) + 1", calm.Target, calm)
	}
	after := steady(&a, burst, 20, 2*time.Second)
	if s := size(after); s.Target < 2*calm.Target {
		t.Errorf("2 s into a 10× burst: target %d (%s), want at least %d", s.Target, s, 2*calm.Target)
	}
	after = steady(&a, after, 20, 28*time.Second)
	if s := size(after); s.Target != 37 {
		t.Errorf("at the burst's end: target %d (%s), want 37 = ceil(20 × 1.2 × 1.5) + 1", s.Target, s)
	}
	var settled time.Duration
	for now := after; now.Sub(after) < 10*time.Minute; {
		next := steady(&a, now, 2, time.Second)
		s := size(next)
		if s.Target > calm.Target+1 || s.Keep > calm.Target+1 {
			settled = 0
		} else if settled == 0 {
			settled = next.Sub(after)
		}
		if s.Keep < s.Target {
			t.Fatalf("kept %d below the target %d", s.Keep, s.Target)
		}
		now = next
	}
	t.Logf("back to the steady size (±1) %v after the burst", settled)
	if settled == 0 || settled > 5*time.Minute {
		t.Errorf("back to the steady size (±1) after %v, want within 5 minutes", settled)
	}
}

func TestPerMinute(t *testing.T) {
	tests := map[float64]int64{0: 0, 2: 120000, 20: 1200000, 1.0 / 60 * 2.5: 2500, 0.0205: 1200, 1234.0 / 60: 1200000, -1: 0}
	for perSecond, want := range tests {
		if got := PerMinute(perSecond); got != want {
			t.Errorf("PerMinute(%v) = %d, want %d", perSecond, got, want)
		}
	}
}

func TestSizingString(t *testing.T) {
	var ready ReadyTime
	ready.Observe(1200 * time.Millisecond)
	var a Arrivals
	end := steady(&a, t0, 2, 5*time.Minute)
	var held Held
	held.add(end.Add(-time.Second), 9)
	s := Size(end, Policy{Max: 40, HeadroomPercent: 50}, Measure(end, &a), ready, &held)
	if got, want := s.String(), "5 = ceil(2 claims/s × ready 1.2s × 1.5) + 1, within [0, 40]; up to 9 kept until the target has been lower for 30s"; got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	s = Size(end, Policy{Min: 1, Max: 40, HeadroomPercent: 50}, Rate{}, ReadyTime{}, &Held{})
	if got, want := s.String(), "1 = min: no claims for a while (ready 2s (the default: no member measured yet))"; got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
}

// TestRecentRateFollowsAStepAtOnce (issue 40 item 3, the warm-hit across a 10× burst): 0.75 s
// into a 20/s step from a steady 2/s, the latest arrivals read the new rate, where the burst
// window's count is still about a quarter of it; with no arrival after, the recent rate recedes
// and is zero once its oldest arrival leaves the burst window.
func TestRecentRateFollowsAStepAtOnce(t *testing.T) {
	var a Arrivals
	calm := steady(&a, t0, 2, 5*time.Minute)
	if r := Measure(calm, &a); math.Abs(r.PerSecond()-2) > 0.25 {
		t.Errorf("steady at 2/s: sized for %.2f (recent %.2f), want 2", r.PerSecond(), r.Recent)
	}
	step := steady(&a, calm, 20, 750*time.Millisecond)
	r := Measure(step, &a)
	if r.Recent < 15 || r.PerSecond() != r.Recent {
		t.Errorf("0.75 s into a 20/s step: recent %.2f (burst %.2f, long %.2f, sized for %.2f), want ≥ 15 and the rate sized for", r.Recent, r.Burst, r.Long, r.PerSecond())
	}
	if r.Burst > r.Recent/3 {
		t.Errorf("the burst window reads %.2f already: the test does not show what the recent rate adds", r.Burst)
	}
	if r := Measure(step.Add(2*time.Second), &a); r.Recent > 6 {
		t.Errorf("2 s with no arrival after the step: recent %.2f, want it receding (≤ 6)", r.Recent)
	}
	if r := Measure(step.Add(BurstWindow), &a); r.Recent != 0 {
		t.Errorf("a burst window with no arrival: recent %.2f, want 0", r.Recent)
	}
}

// TestRecentRateRarelyMisreadsPoisson: arrivals of a Poisson stream at 2/s for ten hours, the
// rate measured at each arrival: the recent rate reads three times the true rate or more at
// fewer than 1 in 2,000 of them (each such misreading keeps a few members for ScaleDownDelay).
func TestRecentRateRarelyMisreadsPoisson(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var a Arrivals
	now, high, n := t0, 0, 0
	for now.Before(t0.Add(10 * time.Hour)) {
		now = now.Add(time.Duration(rng.ExpFloat64() / 2 * float64(time.Second)))
		a.Add(now)
		if Measure(now, &a).Recent >= 6 {
			high++
		}
		n++
	}
	t.Logf("%d arrivals, the recent rate ≥ 3× the true rate at %d of them", n, high)
	if high*2000 > n {
		t.Errorf("the recent rate read ≥ 6/s at %d of %d arrivals of a 2/s stream, want fewer than 1 in 2,000", high, n)
	}
}

// TestSizeRechecksWhenTheRecentRateFalls: a target raised by the recent rate alone (fifteen
// claims in 0.75 s, then none) says when to look again, and by then the target is lower.
func TestSizeRechecksWhenTheRecentRateFalls(t *testing.T) {
	p := Policy{Max: 100, HeadroomPercent: 50}
	var ready ReadyTime
	ready.Observe(time.Second)
	var a Arrivals
	now := steady(&a, t0, 20, 750*time.Millisecond)
	s := Size(now, p, Measure(now, &a), ready, &Held{})
	if s.Target < 20 || s.Recheck <= 0 {
		t.Fatalf("fifteen claims in 0.75 s: target %d, recheck %v (%s), want ≥ 20 and a recheck", s.Target, s.Recheck, s)
	}
	later := now.Add(s.Recheck)
	if s2 := Size(later, p, Measure(later, &a), ready, &Held{}); s2.Target >= s.Target {
		t.Errorf("at the recheck (%v later): target %d, want below %d", s.Recheck, s2.Target, s.Target)
	}
}
