package main

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/airlock-dev/airlock/pkg/client"
)

func TestSummariseNearestRank(t *testing.T) {
	// 1..200 ms, shuffled: p50 is the 100th value, p90 the 180th, p99 the 198th.
	var ds []time.Duration
	for i := 200; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	got := summarise(ds)
	want := Latencies{Count: 200, P50Ms: 100, P90Ms: 180, P99Ms: 198, MaxMs: 200}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("summarise (-want +got):\n%s", diff)
	}
	if ds[0] != 200*time.Millisecond {
		t.Errorf("summarise sorted its argument in place")
	}
	if got := summarise([]time.Duration{7 * time.Millisecond}); got.P50Ms != 7 || got.P99Ms != 7 || got.MaxMs != 7 {
		t.Errorf("one value: %+v, want every percentile 7", got)
	}
	if got := summarise(nil); got != (Latencies{}) {
		t.Errorf("no values: %+v, want zeros", got)
	}
}

func TestScheduleOpenLoop(t *testing.T) {
	tests := map[string]struct {
		i    int
		rate float64
		want time.Duration
	}{
		"first":               {i: 0, rate: 20, want: 0},
		"the 20th at 20/s":    {i: 20, rate: 20, want: time.Second},
		"the 3rd at 40/s":     {i: 3, rate: 40, want: 75 * time.Millisecond},
		"a burst sends now":   {i: 59, rate: 0, want: 0},
		"199th at 10/s":       {i: 199, rate: 10, want: 19900 * time.Millisecond},
		"negative rate burst": {i: 5, rate: -1, want: 0},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := schedule(tc.i, tc.rate); got != tc.want {
				t.Errorf("schedule(%d, %g) = %v, want %v", tc.i, tc.rate, got, tc.want)
			}
		})
	}
}

func TestSummariseAnswers(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	answers := []answer{
		{sent: at(0), answered: at(100)},
		{sent: at(100), answered: at(300)},
		{sent: at(200), answered: at(1000), err: &client.APIError{Status: 429, Code: client.CodeRefused, Reason: "MaxPerSession"}},
		{sent: at(300), answered: at(2000), err: errors.New("dial tcp: connection refused")},
		{sent: at(400), answered: at(900)},
	}
	got := summariseAnswers(answers, 10)
	want := Acquires{
		Sent: 5, Bound: 3,
		Errors:  map[string]int{"429 refused (MaxPerSession)": 1, "dial tcp: connection refused": 1},
		Latency: Latencies{Count: 3, P50Ms: 200, P90Ms: 500, P99Ms: 500, MaxMs: 500},
		// 4 intervals in 400 ms; 3 Bound between the first send and the last answer (2 s).
		SendRatePerSec: 10, SendSpreadMs: 400, CompletedPerSec: 1.5, WindowSeconds: 2,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("summariseAnswers (-want +got):\n%s", diff)
	}
	if burst := summariseAnswers(answers, 0); burst.SendRatePerSec != 0 || burst.SendSpreadMs != 400 {
		t.Errorf("a burst has no send rate, only a spread: %+v", burst)
	}
}

func TestParseScenarios(t *testing.T) {
	got, err := parseScenarios("rate20, burst60,scale10x500,scale2000", sizes{Claims: 150, ScaleAcquires: 50, ScaleOne: 300, ScalePerNamespace: 30})
	if err != nil {
		t.Fatal(err)
	}
	want := []scenario{
		{Name: "rate20", Acquires: 150, Rate: 20},
		{Name: "burst60", Acquires: 60},
		{Name: "scale10x500", Acquires: 50, Rate: 10, FillNamespaces: 10, FillPerNamespace: 30},
		{Name: "scale2000", Acquires: 50, Rate: 10, FillNamespaces: 1, FillPerNamespace: 300},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("parseScenarios (-want +got):\n%s", diff)
	}
	if ns := got[2].namespaces(); len(ns) != 10 || ns[0] != "bench-scale10x500-0" || ns[9] != "bench-scale10x500-9" {
		t.Errorf("scale10x500 namespaces %v", ns)
	}
	if ns := got[0].namespaces(); len(ns) != 1 || ns[0] != "bench-rate20" {
		t.Errorf("rate20 namespaces %v", ns)
	}
	for _, bad := range []string{"", " , ", "rate15", "rate10,rate10"} {
		if _, err := parseScenarios(bad, sizes{Claims: 200, ScaleAcquires: 100, ScaleOne: 2000, ScalePerNamespace: 500}); err == nil {
			t.Errorf("parseScenarios(%q) accepted it", bad)
		}
	}
	if _, err := parseScenarios("rate10", sizes{Claims: 200, ScaleAcquires: 100, ScaleOne: 0, ScalePerNamespace: 500}); err == nil {
		t.Error("a scale run of 0 claims was accepted")
	}
}
