package main

import (
	"bytes"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/airlock-dev/airlock/pkg/client"
)

// TestIntegrate: over consecutive stretches, the idle members as the last status at or before
// each moment said (the first status before it, none after the end), and the sessions in use
// from their start (inclusive) to their end (exclusive), each weighing as long as it stood, with
// the peaks of each stretch.
func TestIntegrate(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	samples := []poolSample{
		{at: at(-5), ready: 2, starting: 1, wanted: 3},
		{at: at(5), ready: 1, wanted: 4},
		{at: at(25), ready: 4, wanted: 6},
		{at: at(40), ready: 9, wanted: 9}, // after the end
	}
	inUse := []interval{{at(2), at(12)}, {at(12), at(40)}, {at(8), at(14)}, {at(15), at(15)}}
	got := integrate(t0, 10*time.Second, 3, samples, inUse)
	want := []stretch{
		// [0,5) 3 idle, [5,10) 1; [2,8) one in use, [8,10) two.
		{idle: 3*5 + 1*5, inUse: 6 + 2*2, seconds: 10, poolPeak: 3, inUsePeak: 2, wanted: 4},
		// 1 idle; [10,14) two in use (one ends at 12 as another starts), [14,20) one.
		{idle: 10, inUse: 2*4 + 6, seconds: 10, poolPeak: 1, inUsePeak: 2, wanted: 4},
		// [20,25) 1 idle, [25,30) 4; one in use, up to the end.
		{idle: 5 + 4*5, inUse: 10, seconds: 10, poolPeak: 4, inUsePeak: 1, wanted: 6},
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(stretch{}), cmpopts.EquateApprox(0, 1e-9)); diff != "" {
		t.Errorf("integrate (-want +got):\n%s", diff)
	}
	// The first status stands for the time before it.
	if late := integrate(t0, 10*time.Second, 1, samples[1:], nil); late[0].idle != 10 || late[0].poolPeak != 1 {
		t.Errorf("with the first status after the start: %+v, want 1 idle all along", late[0])
	}
	none := integrate(t0, 10*time.Second, 1, nil, inUse)
	if none[0].idle != 0 || none[0].inUse != 10 {
		t.Errorf("without statuses: %+v, want no idle members", none[0])
	}
}

// TestSummariseDay: sessions are split by the hour of the day they arrive in; the warm-hit ratio
// overall and per hour; warm and cold latencies; the idle share is the idle member-seconds over
// all sandbox-seconds (not the average of the moment's shares), overall and per hour of the
// replay, a session in use from its Bound answer to its close or the day's end; closes and their
// errors are counted; the goals are judged.
func TestSummariseDay(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	hour := func(h, m int) time.Duration { return time.Duration(h)*time.Hour + time.Duration(m)*time.Minute }
	// 3600x: an hour of the day is a second of the replay.
	trace := []daySession{{At: hour(0, 6)}, {At: hour(0, 18)}, {At: hour(1, 6)}, {At: hour(1, 30)}, {At: hour(23, 6)}}
	refused := &client.APIError{Status: 429, Code: client.CodeRefused, Reason: client.ReasonMaxInstances}
	answers := []dayAnswer{
		{answer: answer{sent: at(0.15), answered: at(0.2)}, warm: true, closed: at(0.7)},
		{answer: answer{sent: at(0.3), answered: at(0.5)}, closed: at(2.5), renewals: 2},
		{answer: answer{sent: at(1.1), answered: at(1.3), err: refused}, closed: at(1.3)},
		{answer: answer{sent: at(1.44), answered: at(1.5)}, warm: true}, // never closed: in use to the end
		{answer: answer{sent: at(23.16), answered: at(23.2)}, warm: true, closed: at(23.5), closeErr: errors.New("connection refused")},
	}
	samples := []poolSample{{at: at(-1), ready: 2, wanted: 2}, {at: at(1), starting: 1, wanted: 5, readyMs: 1500}, {at: at(2), ready: 3, wanted: 3, readyMs: 1200}}
	f := summariseDay(trace, 3600, t0, answers, samples)

	// Idle: 2 in the first hour, 1 in the second, 3 after. In use: 1.0, 1.5, 1.5, then the
	// never-closed session alone, and 1.3 in the last hour.
	idle, inUse := 2+1+3*22.0, 1.0+1.5+1.5+20+1.3
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-6 }
	if !near(f.IdleMemberSeconds, idle) || !near(f.InUseSeconds, inUse) || !near(f.IdleShare, idle/(idle+inUse)) {
		t.Errorf("idle %v s, in use %v s, share %v; want %v, %v, %v", f.IdleMemberSeconds, f.InUseSeconds, f.IdleShare, idle, inUse, idle/(idle+inUse))
	}
	if !near(f.PoolMean, idle/24) || !near(f.InUseMean, inUse/24) || f.PoolPeak != 3 || f.InUsePeak != 2 || f.PeakWanted != 5 || f.Samples != 3 {
		t.Errorf("pool mean %v peak %d, in use mean %v peak %d, wanted %d, samples %d", f.PoolMean, f.PoolPeak, f.InUseMean, f.InUsePeak, f.PeakWanted, f.Samples)
	}
	hours := map[int]struct {
		sent, bound, warm int
		idleShare         float64
	}{0: {2, 2, 1, 2.0 / 3}, 1: {2, 1, 1, 1 / 2.5}, 2: {0, 0, 0, 3 / 4.5}, 12: {0, 0, 0, 0.75}, 23: {1, 1, 1, 3 / 4.3}}
	for h, want := range hours {
		got := f.Hours[h]
		if got.Hour != h || got.Sent != want.sent || got.Bound != want.bound || got.Warm != want.warm || !near(got.IdleShare, want.idleShare) {
			t.Errorf("hour %d: %+v, want %+v", h, got, want)
		}
	}
	if len(f.Hours) != 24 || !near(f.Hours[0].WarmHitRatio, 0.5) || !near(f.Hours[0].PoolMean, 2) || !near(f.Hours[1].InUseMean, 1.5) {
		t.Errorf("hours %+v", f.Hours[:2])
	}
	if f.Sessions != 5 || f.Bound != 4 || f.Warm != 3 || f.WarmHitRatio != 0.75 {
		t.Errorf("sessions %d, Bound %d, warm %d, ratio %v; want 5, 4, 3, 0.75", f.Sessions, f.Bound, f.Warm, f.WarmHitRatio)
	}
	if f.Closed != 3 || f.CloseErrors["connection refused"] != 1 || f.Renewals != 2 {
		t.Errorf("closed %d, close errors %v, renewals %d", f.Closed, f.CloseErrors, f.Renewals)
	}
	if f.WarmLatency.P50Ms != 50 || f.ColdLatency.P50Ms != 200 || f.WarmOverColdP50 != 0.25 {
		t.Errorf("warm %+v, cold %+v, ratio %v", f.WarmLatency, f.ColdLatency, f.WarmOverColdP50)
	}
	if f.IdleGoal != goalNotMet || f.WarmColdGoal != goalMet || f.SpeedUp != 3600 || f.ReplaySeconds != 24 || f.ReadyMs != 1200 {
		t.Errorf("goals %s, %s; speed-up %v, %v s; ready %d ms", f.IdleGoal, f.WarmColdGoal, f.SpeedUp, f.ReplaySeconds, f.ReadyMs)
	}
	var out bytes.Buffer
	f.print(&out)
	if !strings.Contains(out.String(), "no ready time in the pool's statuses: no prediction") {
		t.Errorf("printed without a model\n%s", out.String())
	}
	out.Reset()
	f.Model = &DayModel{ReadyMs: 1200, IdleShare: 0.26, WarmHitRatio: 0.94, RealTimeIdleShare: 0.11, RealTimeWarmHitRatio: 0.998}
	f.print(&out)
	for _, want := range []string{
		"members Ready in 1200 ms (not measured): idle 26.0%, warm-hit 94.0% at 3600x; idle 11.0%, warm-hit 99.8% in real time (1x)",
		"warm-hit       75.0% (3 of 4 Bound)", "goal <= 20%: NOT MET", "(0.25x; goal <= 0.5x: MET)",
		"3 closed, 1 connection refused, 2 renewals", "00:00        2         50.0% (1 of 2)   66.7%", "02:00        0                      -   66.7%",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("printed\n%s\nwithout %q", out.String(), want)
		}
	}

	// No idle member at all: met; nothing warm, or nothing at all: not judged.
	if f := summariseDay(trace[:2], 3600, t0, answers[1:3], nil); f.IdleGoal != goalMet || f.WarmColdGoal != goalNotJudged {
		t.Errorf("no statuses, no warm acquire: goals %s, %s; want met, not judged", f.IdleGoal, f.WarmColdGoal)
	}
	if f := summariseDay(nil, 3600, t0, nil, samples); f.IdleGoal != goalNotMet || f.WarmColdGoal != goalNotJudged {
		t.Errorf("no session: goals %s, %s; want not met (all idle), not judged", f.IdleGoal, f.WarmColdGoal)
	}
	if f := summariseDay(nil, 3600, t0, nil, nil); f.IdleGoal != goalNotJudged {
		t.Errorf("nothing: idle goal %s, want not judged", f.IdleGoal)
	}
}
