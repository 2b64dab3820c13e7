package main

// The warm-day scenario's figures (issue 40 item 3): how many sessions of a replayed day a pool
// that follows demand served warm, overall and per hour of the day; how much of the sandboxes'
// time its idle members took; warm against cold latency in the same run. Goals: idle members
// <= 20% of the members over the day, warm p50 <= 0.5x cold p50.

import (
	"fmt"
	"io"
	"slices"
	"time"
)

const (
	// idleGoal is the largest share of the sandbox-seconds idle members may take.
	idleGoal = 0.20
	// warmColdGoal is the largest warm p50 over cold p50.
	warmColdGoal = 0.5
)

// Verdicts of a goal.
const (
	goalMet       = "MET"
	goalNotMet    = "NOT MET"
	goalNotJudged = "NOT JUDGED"
)

// DayFigures are the warm-day scenario's figures.
type DayFigures struct {
	// Trace is the trace replayed; SpeedUp how many times faster than the day, ReplaySeconds the
	// day's length so replayed.
	Trace         string  `json:"trace"`
	SpeedUp       float64 `json:"speedUp"`
	ReplaySeconds float64 `json:"replaySeconds"`
	// Sessions were sent; Bound and Warm count the acquires answered Bound, and those of them
	// whose claim adopted a warm member; WarmHitRatio is Warm over Bound.
	Sessions     int     `json:"sessions"`
	Bound        int     `json:"bound"`
	Warm         int     `json:"warm"`
	WarmHitRatio float64 `json:"warmHitRatio"`
	// Closed counts the sessions/close answered 202, CloseErrors the others by error;
	// Renewals the renewals sent while sessions were held.
	Closed      int            `json:"closed"`
	CloseErrors map[string]int `json:"closeErrors,omitempty"`
	Renewals    int            `json:"renewals"`
	// Hours are the figures per hour of the day (the trace's hours, each 3600/SpeedUp seconds of
	// the replay): its sessions by arrival, its idle share and means over its replayed time.
	Hours []HourFigures `json:"hours"`
	// WarmLatency and ColdLatency split the Bound acquires' latencies; WarmOverColdP50 is the
	// ratio of their medians (0 when either is empty).
	WarmLatency     Latencies `json:"warmLatency"`
	ColdLatency     Latencies `json:"coldLatency"`
	WarmOverColdP50 float64   `json:"warmOverColdP50"`
	// IdleShare is IdleMemberSeconds over all sandbox-seconds (IdleMemberSeconds plus
	// InUseSeconds), over the replayed day: idle members (Ready and starting) as the last
	// registry status before each moment said, sessions in use from their Bound answer to their
	// close (or the day's end), in seconds of the replay.
	IdleShare         float64 `json:"idleShare"`
	IdleMemberSeconds float64 `json:"idleMemberSeconds"`
	InUseSeconds      float64 `json:"inUseSeconds"`
	// PoolMean and PoolPeak are the idle members over the day, InUseMean and InUsePeak the
	// sessions in use; PeakWanted the pool's largest target; Samples the registry statuses seen.
	PoolMean   float64 `json:"poolMean"`
	PoolPeak   int32   `json:"poolPeak"`
	InUseMean  float64 `json:"inUseMean"`
	InUsePeak  int     `json:"inUsePeak"`
	PeakWanted int32   `json:"peakWanted"`
	Samples    int     `json:"samples"`
	// ReadyMs is the members' ready time the pool's last status reported (0: none did); Model
	// what pkg/warmsize's sizing predicts with it on an ideal plane, at this speed-up and in real
	// time (daymodel.go): not measured.
	ReadyMs int32     `json:"readyMs,omitempty"`
	Model   *DayModel `json:"model,omitempty"`
	// IdleGoal and WarmColdGoal are the goals' verdicts: MET, NOT MET or NOT JUDGED (nothing to
	// divide).
	IdleGoal     string `json:"idleGoal"`
	WarmColdGoal string `json:"warmColdGoal"`
}

// HourFigures are one hour of the day.
type HourFigures struct {
	Hour         int     `json:"hour"`
	Sent         int     `json:"sent"`
	Bound        int     `json:"bound"`
	Warm         int     `json:"warm"`
	WarmHitRatio float64 `json:"warmHitRatio"`
	IdleShare    float64 `json:"idleShare"`
	PoolMean     float64 `json:"poolMean"`
	InUseMean    float64 `json:"inUseMean"`
}

// summariseDay computes the figures of a replay of trace at speedUp that started at start, from
// its sessions' answers (answers[i] is trace[i]'s) and the pool's statuses seen during it.
func summariseDay(trace []daySession, speedUp float64, start time.Time, answers []dayAnswer, samples []poolSample) DayFigures {
	f := DayFigures{Trace: dayTracePath, SpeedUp: speedUp, ReplaySeconds: scaled(day, speedUp).Seconds(), Sessions: len(answers), Hours: make([]HourFigures, 24)}
	for h := range f.Hours {
		f.Hours[h].Hour = h
	}
	end := start.Add(scaled(day, speedUp))
	var warmLat, coldLat []time.Duration
	var inUse []interval
	for i, a := range answers {
		hr := &f.Hours[min(int(trace[i].At/time.Hour), 23)]
		hr.Sent++
		f.Renewals += a.renewals
		if !a.closed.IsZero() {
			if a.closeErr == nil {
				f.Closed++
			} else {
				if f.CloseErrors == nil {
					f.CloseErrors = map[string]int{}
				}
				f.CloseErrors[classify(a.closeErr)]++
			}
		}
		if a.err != nil {
			continue
		}
		f.Bound++
		hr.Bound++
		until := end
		if !a.closed.IsZero() {
			until = a.closed
		}
		inUse = append(inUse, interval{from: a.answered, to: until})
		if a.warm {
			f.Warm++
			hr.Warm++
			warmLat = append(warmLat, a.answered.Sub(a.sent))
		} else {
			coldLat = append(coldLat, a.answered.Sub(a.sent))
		}
	}
	f.WarmHitRatio = share(f.Warm, f.Bound)
	for h := range f.Hours {
		f.Hours[h].WarmHitRatio = share(f.Hours[h].Warm, f.Hours[h].Bound)
	}
	f.WarmLatency, f.ColdLatency = summarise(warmLat), summarise(coldLat)
	if f.WarmLatency.Count > 0 && f.ColdLatency.Count > 0 && f.ColdLatency.P50Ms > 0 {
		f.WarmOverColdP50 = f.WarmLatency.P50Ms / f.ColdLatency.P50Ms
	}

	f.Samples = len(samples)
	for _, s := range samples {
		if s.readyMs > 0 {
			f.ReadyMs = s.readyMs
		}
	}
	hours := integrate(start, scaled(time.Hour, speedUp), 24, samples, inUse)
	var total stretch
	for h, b := range hours {
		total.idle += b.idle
		total.inUse += b.inUse
		total.seconds += b.seconds
		total.poolPeak = max(total.poolPeak, b.poolPeak)
		total.inUsePeak = max(total.inUsePeak, b.inUsePeak)
		total.wanted = max(total.wanted, b.wanted)
		f.Hours[h].IdleShare = b.idleShare()
		f.Hours[h].PoolMean, f.Hours[h].InUseMean = b.means()
	}
	f.IdleMemberSeconds, f.InUseSeconds = total.idle, total.inUse
	f.IdleShare = total.idleShare()
	f.PoolMean, f.InUseMean = total.means()
	f.PoolPeak, f.InUsePeak, f.PeakWanted = total.poolPeak, total.inUsePeak, total.wanted

	f.IdleGoal = verdict(total.idle+total.inUse > 0, f.IdleShare <= idleGoal)
	f.WarmColdGoal = verdict(f.WarmOverColdP50 > 0, f.WarmOverColdP50 <= warmColdGoal)
	return f
}

func verdict(judged, met bool) string {
	switch {
	case !judged:
		return goalNotJudged
	case met:
		return goalMet
	}
	return goalNotMet
}

// interval is a sandbox in use, from its Bound answer to its close.
type interval struct{ from, to time.Time }

// stretch is what integrate sums over one stretch of the replay.
type stretch struct {
	// idle and inUse are member-seconds and session-seconds; seconds the stretch's length.
	idle, inUse, seconds float64
	poolPeak             int32
	inUsePeak            int
	wanted               int32
}

// idleShare is the idle member-seconds over all sandbox-seconds (0 for none).
func (b stretch) idleShare() float64 {
	if b.idle+b.inUse <= 0 {
		return 0
	}
	return b.idle / (b.idle + b.inUse)
}

// means are the idle members and the sessions in use on average over the stretch.
func (b stretch) means() (pool, inUse float64) {
	if b.seconds <= 0 {
		return 0, 0
	}
	return b.idle / b.seconds, b.inUse / b.seconds
}

// integrate sums, over n consecutive stretches of length each from start, the idle members (as
// the last status at or before each moment said, the first status before it) and the sessions in
// use (an interval counts from its start, inclusive, to its end, exclusive), each weighing as
// long as it stood. Without statuses there are no idle members.
func integrate(start time.Time, each time.Duration, n int, samples []poolSample, inUse []interval) []stretch {
	out := make([]stretch, n)
	end := start.Add(time.Duration(n) * each)
	// The moments anything changes: a status, a session's start or end, a stretch's boundary.
	moments := []time.Time{start}
	for k := 1; k < n; k++ {
		moments = append(moments, start.Add(time.Duration(k)*each))
	}
	for _, s := range samples {
		moments = append(moments, s.at)
	}
	type change struct {
		at    time.Time
		delta int
	}
	changes := make([]change, 0, 2*len(inUse))
	for _, iv := range inUse {
		if !iv.to.After(iv.from) {
			continue
		}
		changes = append(changes, change{iv.from, 1}, change{iv.to, -1})
		moments = append(moments, iv.from, iv.to)
	}
	slices.SortFunc(changes, func(a, b change) int { return a.at.Compare(b.at) })
	slices.SortFunc(moments, func(a, b time.Time) int { return a.Compare(b) })
	moments = slices.CompactFunc(moments, time.Time.Equal)

	var status poolSample // the status in effect
	if len(samples) > 0 {
		status = samples[0]
	}
	next, c, using := 0, 0, 0
	for k, t := range moments {
		for next < len(samples) && !samples[next].at.After(t) {
			status = samples[next]
			next++
		}
		for c < len(changes) && !changes[c].at.After(t) {
			using += changes[c].delta
			c++
		}
		if t.Before(start) || !t.Before(end) {
			continue
		}
		until := end
		if k+1 < len(moments) {
			until = minTime(moments[k+1], end)
		}
		b := &out[min(int(t.Sub(start)/each), n-1)]
		d := until.Sub(t).Seconds()
		idle := status.ready + status.starting
		b.idle += float64(idle) * d
		b.inUse += float64(using) * d
		b.seconds += d
		b.poolPeak = max(b.poolPeak, idle)
		b.inUsePeak = max(b.inUsePeak, using)
		b.wanted = max(b.wanted, status.wanted)
	}
	return out
}

func (f *DayFigures) print(w io.Writer) {
	closes := fmt.Sprintf("%d closed", f.Closed)
	for _, k := range sortedKeys(f.CloseErrors) {
		closes += fmt.Sprintf(", %d %s", f.CloseErrors[k], k)
	}
	fmt.Fprintf(w, "   replay         %d sessions of %s: 24 h at %gx (%.1f min), each closed (sessions/close) after its length/%g; %s, %d renewals\n",
		f.Sessions, f.Trace, f.SpeedUp, f.ReplaySeconds/60, f.SpeedUp, closes, f.Renewals)
	fmt.Fprintf(w, "   warm-hit       %.1f%% (%d of %d Bound) over the day\n", 100*f.WarmHitRatio, f.Warm, f.Bound)
	fmt.Fprintf(w, "   idle members   %.1f%% of the sandbox-seconds (goal <= %.0f%%: %s): pool mean %.1f, peak %d (target peaked at %d); in use mean %.1f, peak %d; %d registry statuses seen\n",
		100*f.IdleShare, 100*idleGoal, f.IdleGoal, f.PoolMean, f.PoolPeak, f.PeakWanted, f.InUseMean, f.InUsePeak, f.Samples)
	warmCold := "n/a"
	if f.WarmOverColdP50 > 0 {
		warmCold = fmt.Sprintf("%.2fx", f.WarmOverColdP50)
	}
	fmt.Fprintf(w, "   warm vs cold   p50 %.0f vs %.0f ms (%s; goal <= %gx: %s), p90 %.0f vs %.0f ms, %d warm, %d cold\n",
		f.WarmLatency.P50Ms, f.ColdLatency.P50Ms, warmCold, warmColdGoal, f.WarmColdGoal, f.WarmLatency.P90Ms, f.ColdLatency.P90Ms, f.WarmLatency.Count, f.ColdLatency.Count)
	if m := f.Model; m != nil {
		fmt.Fprintf(w, "   model          pkg/warmsize's sizing on an ideal plane, members Ready in %d ms (not measured): idle %.1f%%, warm-hit %.1f%% at %gx; idle %.1f%%, warm-hit %.1f%% in real time (1x)\n",
			m.ReadyMs, 100*m.IdleShare, 100*m.WarmHitRatio, f.SpeedUp, 100*m.RealTimeIdleShare, 100*m.RealTimeWarmHitRatio)
	} else {
		fmt.Fprintf(w, "   model          no ready time in the pool's statuses: no prediction\n")
	}
	fmt.Fprintf(w, "   by hour        %-5s %8s %22s %7s %6s %7s\n", "hour", "sessions", "warm-hit", "idle", "pool", "in use")
	for _, h := range f.Hours {
		hit := "-"
		if h.Bound > 0 {
			hit = fmt.Sprintf("%.1f%% (%d of %d)", 100*h.WarmHitRatio, h.Warm, h.Bound)
		}
		fmt.Fprintf(w, "                  %02d:00 %8d %22s %6.1f%% %6.1f %7.1f\n", h.Hour, h.Sent, hit, 100*h.IdleShare, h.PoolMean, h.InUseMean)
	}
}
