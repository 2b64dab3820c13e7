package main

import (
	"math"
	"slices"
	"time"
)

// Latencies summarises request-to-answer times.
type Latencies struct {
	Count int     `json:"count"`
	P50Ms float64 `json:"p50Ms"`
	P90Ms float64 `json:"p90Ms"`
	P99Ms float64 `json:"p99Ms"`
	MaxMs float64 `json:"maxMs"`
}

// summarise returns the percentiles of ds (nearest rank: the smallest value with at least p% of
// the values at or below it, so p99 of 200 values is the 198th).
func summarise(ds []time.Duration) Latencies {
	if len(ds) == 0 {
		return Latencies{}
	}
	sorted := slices.Clone(ds)
	slices.Sort(sorted)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	return Latencies{
		Count: len(sorted),
		P50Ms: ms(percentile(sorted, 50)),
		P90Ms: ms(percentile(sorted, 90)),
		P99Ms: ms(percentile(sorted, 99)),
		MaxMs: ms(sorted[len(sorted)-1]),
	}
}

// percentile is the nearest-rank percentile p (0 < p <= 100) of sorted, which is not empty.
func percentile(sorted []time.Duration, p float64) time.Duration {
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = max(rank, 1)
	rank = min(rank, len(sorted))
	return sorted[rank-1]
}

// schedule is when open-loop request i of n is sent, after the first: i/rate seconds, whatever the
// answers; rate 0 is a burst (all at once).
func schedule(i int, rate float64) time.Duration {
	if rate <= 0 {
		return 0
	}
	return time.Duration(float64(i) / rate * float64(time.Second))
}

// perSecond is n events over d (0 when d is not positive).
func perSecond(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}
