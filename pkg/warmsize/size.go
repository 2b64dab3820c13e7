package warmsize

import (
	"fmt"
	"math"
	"strconv"
	"time"
)

const (
	// spare is added to the target while claims arrive: the next claim's member, when the pool
	// is small and the rate × ready time is a fraction of one.
	spare = 1
	// ScaleDownDelay is how long a target must have been lower before idle members beyond it are
	// removed (the HorizontalPodAutoscaler's scale-down stabilization window, shorter: a member
	// costs a pod's requests, a claim without one a cold start).
	ScaleDownDelay = 30 * time.Second
	// minRecheck is the least time before a pool is looked at again for its estimates' sake
	// (against rounding at a boundary).
	minRecheck = 100 * time.Millisecond
	// recheckMargin is added to a computed change, so that the next look is past it.
	recheckMargin = time.Millisecond
)

// Policy is a pool's bounds and headroom: a warmPolicy (min ≤ max, by the schema).
type Policy struct {
	Min, Max        int32
	HeadroomPercent int32
}

// clamp keeps n within [Min, Max].
func (p Policy) clamp(n int32) int32 {
	return min(max(n, p.Min), max(p.Max, p.Min))
}

// perArrival is the members one claim a second keeps: the ready time with headroom, in seconds.
func (p Policy) perArrival(ready time.Duration) float64 {
	return ready.Seconds() * (1 + float64(p.HeadroomPercent)/100)
}

// Target is a pool's size for an arrival rate (claims per second) and a member's ready time:
// clamp(ceil(rate × ready × (1 + headroom)) + 1, min, max), and min when no claim arrives.
// By Little's law rate × ready members are starting at any time when every adoption is
// replaced; the headroom and the one spare are Ready for arrivals faster than the average.
func Target(p Policy, perSecond float64, ready time.Duration) int32 {
	if !(perSecond > 0) {
		return p.clamp(0)
	}
	x := perSecond * p.perArrival(ready)
	if x >= float64(p.Max) {
		return p.clamp(p.Max)
	}
	return p.clamp(int32(math.Ceil(x-1e-9)) + spare)
}

// Held remembers a pool's recent targets, so that idle members beyond the target are removed
// only once it has been lower for ScaleDownDelay (as the HorizontalPodAutoscaler stabilizes a
// scale-down): the end of a burst, or a short lull, does not delete members the next claims
// would need. The zero value holds nothing.
type Held struct {
	// segments are the targets that can still be the largest of the window, oldest (largest)
	// first; each but the last has ended, when the next target was computed.
	segments []segment
}

type segment struct {
	target int32
	ended  time.Time
}

// add records the target computed at now and returns the largest target of the last
// ScaleDownDelay.
func (h *Held) add(now time.Time, target int32) int32 {
	n := len(h.segments)
	if n == 0 || h.segments[n-1].target != target {
		if n > 0 {
			h.segments[n-1].ended = now
		}
		for n > 0 && h.segments[n-1].target <= target {
			n-- // never the largest again: this one lasts longer
		}
		h.segments = append(h.segments[:n], segment{target: target})
	}
	for len(h.segments) > 1 && !h.segments[0].ended.Add(ScaleDownDelay).After(now) {
		h.segments = h.segments[1:]
	}
	return h.segments[0].target
}

// falls returns when the held target next falls, with no new target (zero: it will not).
func (h *Held) falls() time.Time {
	if len(h.segments) < 2 {
		return time.Time{}
	}
	return h.segments[0].ended.Add(ScaleDownDelay)
}

// Sizing is a pool's size at a moment, and what it was computed from.
type Sizing struct {
	Policy Policy
	Rate   Rate
	// Ready is the ready time used; ReadyMeasured false says it is DefaultReadyTime.
	Ready         time.Duration
	ReadyMeasured bool
	// Target is the pool's size: members are created up to it.
	Target int32
	// Keep is the largest target of the last ScaleDownDelay, at least Target: idle members are
	// removed only beyond it.
	Keep int32
	// Recheck is how long until the size may change with no claim arriving and no member
	// measured; zero when it will not.
	Recheck time.Duration
}

// Size sizes a pool at now, and records its target in held.
func Size(now time.Time, p Policy, rate Rate, ready ReadyTime, held *Held) Sizing {
	s := Sizing{Policy: p, Rate: rate}
	s.Ready, s.ReadyMeasured = ready.Get()
	s.Target = Target(p, rate.PerSecond(), s.Ready)
	s.Keep = min(max(held.add(now, s.Target), s.Target), p.clamp(p.Max))

	var next time.Time
	if s.Target > p.Min {
		// The target falls once both rates are at or below the rate of one member fewer.
		fewer := 0.0
		if per := p.perArrival(s.Ready); s.Target-1-spare > 0 && per > 0 {
			fewer = float64(s.Target-1-spare) / per
		}
		next = rate.burstFallsTo(fewer)
		if at := rate.recentFallsTo(fewer); at.After(next) {
			next = at
		}
		if d := rate.longFallsTo(fewer); d > 0 && now.Add(d).After(next) {
			next = now.Add(d)
		}
	}
	if s.Keep > s.Target {
		if falls := held.falls(); !falls.IsZero() && (next.IsZero() || falls.Before(next)) {
			next = falls
		}
	}
	if !next.IsZero() {
		s.Recheck = max(next.Sub(now)+recheckMargin, minRecheck)
	}
	return s
}

// PerMinute rounds a rate per second to claims per minute with two significant digits, in
// thousandths (a resource.Quantity's milli-units): the status changes when the rate does, not
// with every claim.
func PerMinute(perSecond float64) int64 {
	return int64(math.Round(twoDigits(perSecond*60) * 1000))
}

// twoDigits rounds x > 0 to two significant digits.
func twoDigits(x float64) float64 {
	if !(x > 0) || math.IsInf(x, 1) {
		return 0
	}
	unit := math.Pow(10, math.Floor(math.Log10(x))-1)
	return math.Round(x/unit) * unit
}

// String says how the target was computed, for the pool's status.
func (s Sizing) String() string {
	ready := roundDuration(s.Ready).String()
	if !s.ReadyMeasured {
		ready += " (the default: no member measured yet)"
	}
	var out string
	if rate := s.Rate.PerSecond(); rate > 0 {
		out = fmt.Sprintf("%d = ceil(%s claims/s × ready %s × %s) + 1, within [%d, %d]", s.Target,
			strconv.FormatFloat(twoDigits(rate), 'g', -1, 64), ready,
			strconv.FormatFloat(1+float64(s.Policy.HeadroomPercent)/100, 'g', -1, 64), s.Policy.Min, s.Policy.Max)
	} else {
		out = fmt.Sprintf("%d = min: no claims for a while (ready %s)", s.Target, ready)
	}
	if s.Keep > s.Target {
		out += fmt.Sprintf("; up to %d kept until the target has been lower for %s", s.Keep, ScaleDownDelay)
	}
	return out
}

// roundDuration rounds a ready time to 10 ms, as the status reports it.
func roundDuration(d time.Duration) time.Duration {
	return d.Round(10 * time.Millisecond)
}

// ReadyMilliseconds is the ready time the status reports, in milliseconds, rounded to 10.
func (s Sizing) ReadyMilliseconds() int32 {
	return int32(min(roundDuration(s.Ready).Milliseconds(), math.MaxInt32))
}
