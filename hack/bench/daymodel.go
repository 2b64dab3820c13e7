package main

// The warm-day replay on paper: pkg/warmsize's sizing (the operator's own functions and
// constants) driven by the trace at a speed-up, with members Ready a fixed time after they are
// created, created the moment the target asks (no refill limit, no API latency), each arrival
// adopting the oldest Ready member at once. What the bench measures on a plane, the model
// predicts on an ideal one, with the ready time the plane measured: at the replay's speed-up and
// in real time, so that a run says how much of its idle share is the compression's
// (docs/decisions.md, "make bench", warm-day). `go test ./hack/bench -run TestDayModel -v` prints
// it for a few speed-ups and ready times.

import (
	"container/heap"
	"time"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/warmsize"
)

// modelFigures are the model's predictions.
type modelFigures struct {
	warmHit, idleShare, poolMean float64
	poolPeak                     int
}

// modelEvent is a moment the model's pool controller looks at the pool: an arrival (session >=
// 0), a member's readiness (memberReady) or a recheck (recheck).
type modelEvent struct {
	at      time.Time
	session int
}

const (
	memberReady = -1
	recheck     = -2
)

type modelQueue []modelEvent

func (q modelQueue) Len() int           { return len(q) }
func (q modelQueue) Less(i, j int) bool { return q[i].at.Before(q[j].at) }
func (q modelQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *modelQueue) Push(x any)        { *q = append(*q, x.(modelEvent)) }
func (q *modelQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// modelDay runs the model over trace at speedUp with members Ready ready after their creation.
func modelDay(trace []daySession, speedUp float64, ready time.Duration, policy warmsize.Policy) modelFigures {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	end := t0.Add(scaled(day, speedUp))
	var (
		arrivals warmsize.Arrivals
		held     warmsize.Held
		readyAvg warmsize.ReadyTime
		members  []time.Time // when each idle member is (or will be) Ready, oldest first
		q        modelQueue
		warm     int
		idle     float64 // member-seconds
		inUse    float64 // session-seconds
		peak     int
		last     = t0
		// recheckAt is the pending recheck: as a workqueue's AddAfter, a later one does not
		// replace it.
		recheckAt time.Time
	)
	readyAvg.Observe(ready)
	for i, s := range trace {
		heap.Push(&q, modelEvent{at: t0.Add(scaled(s.At, speedUp)), session: i})
		inUse += minTime(t0.Add(scaled(s.At+s.Length, speedUp)), end).Sub(t0.Add(scaled(s.At, speedUp))).Seconds()
	}
	// Every pool event runs a sync; a recheck is queued as the controller's AddAfter.
	syncPool := func(now time.Time) {
		sz := warmsize.Size(now, policy, warmsize.Measure(now, &arrivals), readyAvg, &held)
		for len(members) < int(sz.Target) {
			members = append(members, now.Add(ready))
			heap.Push(&q, modelEvent{at: now.Add(ready), session: memberReady})
		}
		// Idle members beyond the kept size go: starting ones first, then the newest Ready.
		for len(members) > int(sz.Keep) {
			members = members[:len(members)-1]
		}
		if at := now.Add(sz.Recheck); sz.Recheck > 0 && (!recheckAt.After(now) || at.Before(recheckAt)) {
			recheckAt = at
			heap.Push(&q, modelEvent{at: at, session: recheck})
		}
	}
	syncPool(t0)
	for q.Len() > 0 {
		e := heap.Pop(&q).(modelEvent)
		if !e.at.Before(end) {
			break
		}
		if e.session == recheck && !e.at.Equal(recheckAt) {
			continue // replaced by an earlier one
		}
		idle += float64(len(members)) * e.at.Sub(last).Seconds()
		last = e.at
		if e.session >= 0 {
			arrivals.Add(e.at)
			if len(members) > 0 && !members[0].After(e.at) {
				members = members[1:]
				warm++
			}
		}
		syncPool(e.at)
		peak = max(peak, len(members))
	}
	idle += float64(len(members)) * end.Sub(last).Seconds()
	f := modelFigures{
		warmHit:  share(warm, len(trace)),
		poolMean: idle / end.Sub(t0).Seconds(),
		poolPeak: peak,
	}
	if idle+inUse > 0 {
		f.idleShare = idle / (idle + inUse)
	}
	return f
}

// DayModel is the model's prediction for a run, with the ready time the pool's status reported.
type DayModel struct {
	// ReadyMs is the model's members' ready time.
	ReadyMs int32 `json:"readyMs"`
	// WarmHitRatio and IdleShare are predicted at the replay's speed-up, RealTimeWarmHitRatio
	// and RealTimeIdleShare for the same day in real time (1x).
	WarmHitRatio         float64 `json:"warmHitRatio"`
	IdleShare            float64 `json:"idleShare"`
	RealTimeWarmHitRatio float64 `json:"realTimeWarmHitRatio"`
	RealTimeIdleShare    float64 `json:"realTimeIdleShare"`
}

// predictDay runs the model for a replay of trace at speedUp to a pool of p (the default
// headroom) whose members are Ready readyMs after their creation; nil without a ready time.
func predictDay(trace []daySession, speedUp float64, readyMs int32, p warmPolicy) *DayModel {
	if readyMs <= 0 {
		return nil
	}
	policy := warmsize.Policy{Min: p.Min, Max: p.Max, HeadroomPercent: airlockv1alpha1.DefaultWarmHeadroomPercent}
	ready := time.Duration(readyMs) * time.Millisecond
	at, rt := modelDay(trace, speedUp, ready, policy), modelDay(trace, 1, ready, policy)
	return &DayModel{ReadyMs: readyMs, WarmHitRatio: at.warmHit, IdleShare: at.idleShare,
		RealTimeWarmHitRatio: rt.warmHit, RealTimeIdleShare: rt.idleShare}
}
