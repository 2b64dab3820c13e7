package main

// The warm-demand scenario's own figures (issue 40 item 3): how many acquires a pool that follows
// demand served warm, in each phase; warm against cold latency in the same run; how much of the
// pool sat idle. Its goals: warm-hit >= 95% across the 10x burst, warm p50 <= 0.5x cold p50, idle
// members <= 20% of the sandboxes (that last one is the replayed day's; here the claims are never
// released, so the sandboxes in use only grow and the figure flatters the pool: it is printed as
// what it is).

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
)

// DemandFigures are the warm-demand scenario's figures.
type DemandFigures struct {
	// Bound and Warm count the acquires answered Bound, and those of them whose claim adopted a
	// warm member; WarmHitRatio is Warm over Bound.
	Bound        int     `json:"bound"`
	Warm         int     `json:"warm"`
	WarmHitRatio float64 `json:"warmHitRatio"`
	// Phases are the same per phase of the open loop.
	Phases []PhaseFigures `json:"phases"`
	// WarmLatency and ColdLatency split the Bound acquires' latencies; WarmOverColdP50 is the
	// ratio of their medians (0 when either is empty).
	WarmLatency     Latencies `json:"warmLatency"`
	ColdLatency     Latencies `json:"coldLatency"`
	WarmOverColdP50 float64   `json:"warmOverColdP50"`
	// IdleFraction is idle members over all sandboxes (idle members and Bound claims), averaged
	// over the open loop (first send to last answer) with each registry status as it was written;
	// MeanIdle the idle members so averaged; PeakWanted the pool's largest target.
	IdleFraction float64 `json:"idleFraction"`
	MeanIdle     float64 `json:"meanIdle"`
	PeakWanted   int32   `json:"peakWanted"`
	// Samples is how many registry statuses were seen.
	Samples int `json:"samples"`
}

// PhaseFigures are one phase's acquires.
type PhaseFigures struct {
	Rate         float64 `json:"rate"`
	Sent         int     `json:"sent"`
	Bound        int     `json:"bound"`
	Warm         int     `json:"warm"`
	WarmHitRatio float64 `json:"warmHitRatio"`
}

// poolSample is the pool's status as the registry said it at a moment.
type poolSample struct {
	at                      time.Time
	ready, starting, wanted int32
	// readyMs is the members' ready time the pool is sized with (a warmPolicy's status only).
	readyMs int32
}

// summariseDemand computes the figures of an open loop of s (sessions "<prefix>-<i>"), given which
// sessions' claims adopted a warm member and the pool's statuses seen during the loop.
func summariseDemand(s scenario, prefix string, answers []answer, warm map[string]bool, samples []poolSample) DemandFigures {
	f := DemandFigures{Samples: len(samples), Phases: make([]PhaseFigures, max(len(s.Phases), 1))}
	for k := range f.Phases {
		if k < len(s.Phases) {
			f.Phases[k].Rate = s.Phases[k].Rate
		} else {
			f.Phases[k].Rate = s.Rate
		}
	}
	var warmLat, coldLat []time.Duration
	var bound []time.Time // when each Bound answer came, for the sandboxes in use
	for i, a := range answers {
		ph := &f.Phases[min(s.phaseOf(i), len(f.Phases)-1)]
		ph.Sent++
		if a.err != nil {
			continue
		}
		f.Bound++
		ph.Bound++
		bound = append(bound, a.answered)
		if warm[session(prefix, i)] {
			f.Warm++
			ph.Warm++
			warmLat = append(warmLat, a.answered.Sub(a.sent))
		} else {
			coldLat = append(coldLat, a.answered.Sub(a.sent))
		}
	}
	f.WarmHitRatio = share(f.Warm, f.Bound)
	for k := range f.Phases {
		f.Phases[k].WarmHitRatio = share(f.Phases[k].Warm, f.Phases[k].Bound)
	}
	f.WarmLatency, f.ColdLatency = summarise(warmLat), summarise(coldLat)
	if f.WarmLatency.Count > 0 && f.ColdLatency.Count > 0 && f.ColdLatency.P50Ms > 0 {
		f.WarmOverColdP50 = f.WarmLatency.P50Ms / f.ColdLatency.P50Ms
	}
	for _, smp := range samples {
		f.PeakWanted = max(f.PeakWanted, smp.wanted)
	}
	f.IdleFraction, f.MeanIdle = idleOver(answers, bound, samples)
	return f
}

// idleOver averages, over the loop (first send to last answer), the pool's idle members (Ready
// and starting, as the last status before each moment said) and their fraction of all sandboxes
// (idle members and the claims Bound by then), each status weighing as long as it stood.
func idleOver(answers []answer, bound []time.Time, samples []poolSample) (fraction, mean float64) {
	if len(answers) == 0 || len(samples) == 0 {
		return 0, 0
	}
	start, end := answers[0].sent, answers[0].answered
	for _, a := range answers {
		start = minTime(start, a.sent)
		end = maxTime(end, a.answered)
	}
	if !end.After(start) {
		return 0, 0
	}
	// The moments anything changes: a status, a Bound answer.
	moments := []time.Time{start}
	for _, smp := range samples {
		if smp.at.After(start) && smp.at.Before(end) {
			moments = append(moments, smp.at)
		}
	}
	for _, b := range bound {
		if b.After(start) && b.Before(end) {
			moments = append(moments, b)
		}
	}
	slices.SortFunc(moments, func(a, b time.Time) int { return a.Compare(b) })
	var idleTime, fracTime float64
	for k, t := range moments {
		next := end
		if k+1 < len(moments) {
			next = moments[k+1]
		}
		d := next.Sub(t).Seconds()
		if d <= 0 {
			continue
		}
		idle := float64(idleAt(samples, t))
		inUse := float64(countUpTo(bound, t))
		idleTime += idle * d
		if idle+inUse > 0 {
			fracTime += idle / (idle + inUse) * d
		}
	}
	total := end.Sub(start).Seconds()
	return fracTime / total, idleTime / total
}

// idleAt is the idle members the last status at or before t said (the first one's before it).
func idleAt(samples []poolSample, t time.Time) int32 {
	idle := samples[0].ready + samples[0].starting
	for _, smp := range samples {
		if smp.at.After(t) {
			break
		}
		idle = smp.ready + smp.starting
	}
	return idle
}

// countUpTo counts the times at or before t.
func countUpTo(times []time.Time, t time.Time) int {
	n := 0
	for _, x := range times {
		if !x.After(t) {
			n++
		}
	}
	return n
}

func share(n, of int) float64 {
	if of == 0 {
		return 0
	}
	return float64(n) / float64(of)
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func (f *DemandFigures) print(w io.Writer) {
	var phases []string
	for _, p := range f.Phases {
		phases = append(phases, fmt.Sprintf("%g/s %.1f%% (%d of %d)", p.Rate, 100*p.WarmHitRatio, p.Warm, p.Bound))
	}
	fmt.Fprintf(w, "   warm-hit       %.1f%% (%d of %d Bound): %s   (goal: >= 95%% across the burst)\n",
		100*f.WarmHitRatio, f.Warm, f.Bound, strings.Join(phases, ", "))
	warmCold := "n/a"
	if f.WarmOverColdP50 > 0 {
		warmCold = fmt.Sprintf("%.2fx", f.WarmOverColdP50)
	}
	fmt.Fprintf(w, "   warm vs cold   p50 %.0f vs %.0f ms (%s; goal <= 0.5x), p90 %.0f vs %.0f ms, %d warm, %d cold\n",
		f.WarmLatency.P50Ms, f.ColdLatency.P50Ms, warmCold, f.WarmLatency.P90Ms, f.ColdLatency.P90Ms, f.WarmLatency.Count, f.ColdLatency.Count)
	fmt.Fprintf(w, "   idle members   %.1f%% of the sandboxes, %.1f on average, over the loop; target peaked at %d (%d statuses seen; claims are never released here, so the sandboxes in use only grow)\n",
		100*f.IdleFraction, f.MeanIdle, f.PeakWanted, f.Samples)
}

// watchPool records the registry's pool status (its sandbox's status.warm entry) each time it is
// written, until ctx is done; it returns what it saw.
func (k kube) watchPool(ctx context.Context, ns string, now func() time.Time) ([]poolSample, error) {
	var samples []poolSample
	lw := cache.NewFilteredListWatchFromClient(k.airlock.AirlockV1alpha1().RESTClient(), "toolregistries", ns, nameSelector(registryName))
	err := until(ctx, lw, &airlockv1alpha1.ToolRegistry{}, func(ev watch.Event) (bool, error) {
		r, ok := ev.Object.(*airlockv1alpha1.ToolRegistry)
		if !ok {
			return false, nil
		}
		for _, st := range r.Status.Warm {
			if st.Name == sandboxName {
				samples = append(samples, poolSample{at: now(), ready: st.Ready, starting: st.Starting, wanted: st.Wanted, readyMs: st.ReadyMilliseconds})
			}
		}
		return false, nil
	})
	if ctx.Err() != nil {
		err = nil // the loop is over
	}
	return samples, err
}

// warmSessions says, per session of the namespace's claims, whether its claim adopted a warm
// member.
func (k kube) warmSessions(ctx context.Context, ns string) (map[string]bool, error) {
	list, err := k.airlock.AirlockV1alpha1().SandboxClaims(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing the claims of %s: %w", ns, err)
	}
	out := make(map[string]bool, len(list.Items))
	for _, c := range list.Items {
		out[c.Spec.Session] = c.Status.Warm != nil
	}
	return out, nil
}
