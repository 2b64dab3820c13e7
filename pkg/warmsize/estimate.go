// Package warmsize is what size a warm pool that follows demand should be (a ToolRegistry
// sandbox's warmPolicy; docs/decisions.md, "Warm pools that follow demand"), as pure functions
// and small estimators that are given the time rather than read it: the arrival rate of the
// sandbox's claims (Arrivals), the time its members take from creation to Ready
// (ReadyTime), and the target, Little's law with headroom within the policy's bounds, with the
// wait before members beyond it are removed (size.go). Standard library only: no clock, no
// clients; the pool controller owns the state and the time.
package warmsize

import (
	"math"
	"slices"
	"time"
)

const (
	// RateWindow is the time constant of the long arrival rate, an exponentially weighted moving
	// average: an arrival a minute ago weighs 1/e of one now, five minutes ago less than 1%.
	RateWindow = time.Minute
	// BurstWindow is the short arrival rate's window: the arrivals of the last five seconds, so
	// that a burst is followed within seconds while the long rate still remembers the calm.
	BurstWindow = 5 * time.Second
	// RecentArrivals is how many of the latest arrivals make the recent rate: RecentArrivals-1
	// intervals over the time from the oldest of them to now. At a 10x step (2/s to 20/s) it
	// reads the new rate after 0.7 s, where the burst window's count is still a quarter of it;
	// at a steady 2/s (Poisson) it reads three times the rate or more at about 1 in 6,500
	// arrivals (TestRecentRateRarelyMisreadsPoisson; with 10 it was 1 in 300).
	RecentArrivals = 15
	// RateHorizon is the age beyond which an arrival is not counted at all (it would weigh
	// e^-5): a claim the informer lists at the controller's start is history, not demand.
	RateHorizon = 5 * RateWindow
	// idleWeight is the decayed count of arrivals below which the long rate is zero: less than
	// half a claim in the window. Without it the average would decay forever, never reach zero,
	// and keep a pool above its min long after the last claim.
	idleWeight = 0.5
	// maxRecent bounds the arrivals kept for the burst window (2,000 claims a second).
	maxRecent = 10000

	// DefaultReadyTime is the ready time used before any member of the pool was measured.
	DefaultReadyTime = 2 * time.Second
	// readyWeight is the weight of a new measurement in the ready time's moving average: the
	// last five members or so make it.
	readyWeight = 0.2
)

// Arrivals estimates the arrival rate of one stream of claims. The zero value has seen none.
type Arrivals struct {
	// weight is the arrivals counted so far, each weighted by exp(-(at - its time)/RateWindow).
	weight float64
	at     time.Time
	// recent are the arrivals no older than BurstWindow before the latest one, oldest first.
	recent []time.Time
}

// Add counts an arrival at t. Arrivals may come in any order: an earlier one weighs as it would
// have had it come first.
func (a *Arrivals) Add(t time.Time) {
	switch {
	case a.at.IsZero():
		a.weight, a.at = 1, t
	case t.After(a.at):
		a.weight = a.weight*decay(t.Sub(a.at)) + 1
		a.at = t
	default:
		a.weight += decay(a.at.Sub(t))
	}
	i, _ := slices.BinarySearchFunc(a.recent, t, func(e, t time.Time) int { return e.Compare(t) })
	a.recent = slices.Insert(a.recent, i, t)
	a.prune(a.at)
}

// prune drops the recent arrivals that are out of the burst window at now, and the oldest
// beyond maxRecent.
func (a *Arrivals) prune(now time.Time) {
	cut := now.Add(-BurstWindow)
	i := 0
	for i < len(a.recent) && !a.recent[i].After(cut) {
		i++
	}
	if n := len(a.recent) - i; n > maxRecent {
		i += n - maxRecent
	}
	if i > 0 {
		a.recent = slices.Delete(a.recent, 0, i)
	}
}

// weightAt is the decayed count of arrivals at now.
func (a *Arrivals) weightAt(now time.Time) float64 {
	if a.at.IsZero() {
		return 0
	}
	if now.After(a.at) {
		return a.weight * decay(now.Sub(a.at))
	}
	return a.weight
}

// Idle says whether the arrivals weigh nothing any more at now (the long rate is zero and none
// is in the burst window): the estimator may be dropped.
func (a *Arrivals) Idle(now time.Time) bool {
	a.prune(now)
	return len(a.recent) == 0 && a.weightAt(now) < idleWeight
}

// Rate is the arrival rate of a pool's claims at a moment, per second.
type Rate struct {
	// Long is the exponentially weighted moving average (RateWindow); zero below half a claim
	// in the window.
	Long float64
	// Burst is the count of the last BurstWindow's arrivals over its length.
	Burst float64
	// Recent is the rate of the last RecentArrivals arrivals when all of them are in the burst
	// window: RecentArrivals-1 over the time from the oldest of them to now (it falls while none
	// arrives); zero with fewer in the window.
	Recent float64
	// weight is the long rate's decayed count.
	weight float64
	// inWindow are the arrivals that make Burst, oldest first.
	inWindow []time.Time
}

// PerSecond is the rate the pool is sized for: the largest of the three, so that a burst is
// followed at once and a lull forgotten slowly.
func (r Rate) PerSecond() float64 { return max(r.Long, r.Burst, r.Recent) }

// Measure sums the rates of several streams of claims (a pool's claims come from every runtime
// that uses its registry) at now.
func Measure(now time.Time, streams ...*Arrivals) Rate {
	var r Rate
	for _, a := range streams {
		if a == nil {
			continue
		}
		r.weight += a.weightAt(now)
		a.prune(now)
		for _, t := range a.recent {
			if t.After(now) {
				break
			}
			r.inWindow = append(r.inWindow, t)
		}
	}
	slices.SortFunc(r.inWindow, func(a, b time.Time) int { return a.Compare(b) })
	if r.weight >= idleWeight {
		r.Long = r.weight / RateWindow.Seconds()
	}
	r.Burst = float64(len(r.inWindow)) / BurstWindow.Seconds()
	if n := len(r.inWindow); n >= RecentArrivals {
		if span := now.Sub(r.inWindow[n-RecentArrivals]).Seconds(); span > 0 {
			r.Recent = (RecentArrivals - 1) / span
		}
	}
	return r
}

// recentFallsTo returns when the recent rate falls to perSecond or below with no new arrival
// (zero when it is there already): the oldest of the last RecentArrivals arrivals recedes, and
// the rate is zero once it leaves the burst window.
func (r Rate) recentFallsTo(perSecond float64) time.Time {
	n := len(r.inWindow)
	if n < RecentArrivals || r.Recent <= perSecond {
		return time.Time{}
	}
	oldest := r.inWindow[n-RecentArrivals]
	out := oldest.Add(BurstWindow)
	if perSecond > 0 {
		if at := oldest.Add(time.Duration((RecentArrivals - 1) / perSecond * float64(time.Second))); at.Before(out) {
			out = at
		}
	}
	return out
}

// burstFallsTo returns when the burst rate falls to perSecond or below, as the arrivals in the
// window leave it (zero when it is there already).
func (r Rate) burstFallsTo(perSecond float64) time.Time {
	keep := int(math.Floor(perSecond*BurstWindow.Seconds() + 1e-9))
	if len(r.inWindow) <= keep {
		return time.Time{}
	}
	return r.inWindow[len(r.inWindow)-keep-1].Add(BurstWindow)
}

// longFallsTo returns how long until the long rate falls to perSecond, or to zero when
// perSecond is zero (it decays as exp(-t/RateWindow) while no claim arrives).
func (r Rate) longFallsTo(perSecond float64) time.Duration {
	if r.Long <= 0 {
		return 0
	}
	target := perSecond * RateWindow.Seconds()
	if target < idleWeight {
		target = idleWeight * (1 - 1e-9) // just below: the rate is zero there
	}
	if target >= r.weight {
		return 0
	}
	return time.Duration(RateWindow.Seconds() * math.Log(r.weight/target) * float64(time.Second))
}

// decay is the weight left after d.
func decay(d time.Duration) float64 {
	return math.Exp(-d.Seconds() / RateWindow.Seconds())
}

// ReadyTime is a moving average of the time a pool's members take from creation to Ready. The
// zero value has measured none.
type ReadyTime struct {
	avg      time.Duration
	measured int
}

// Observe adds a member that became Ready d after it was created.
func (r *ReadyTime) Observe(d time.Duration) {
	if d < 0 {
		d = 0
	}
	if r.measured == 0 {
		r.avg = d
	} else {
		r.avg = time.Duration(readyWeight*float64(d) + (1-readyWeight)*float64(r.avg))
	}
	r.measured++
}

// Get returns the average, or DefaultReadyTime and false before any member was measured.
func (r ReadyTime) Get() (time.Duration, bool) {
	if r.measured == 0 {
		return DefaultReadyTime, false
	}
	return r.avg, true
}
