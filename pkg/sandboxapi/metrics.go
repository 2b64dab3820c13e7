package sandboxapi

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// The Sandbox API's metrics. Renewals and lastUsedAt writes are counted by
// airlock_claim_renewals_total{written}, which claim.RenewLastUsed (the renewal that the API
// calls) increments; this file adds the requests of every endpoint, the renewals' outcomes as the
// API answered them, and acquire latency by result.
var (
	requests = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem:      "airlock",
		Name:           "sandboxapi_requests_total",
		Help:           "Sandbox API requests, by endpoint and HTTP status code.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"endpoint", "code"})
	acquireDuration = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Subsystem:      "airlock",
		Name:           "sandboxapi_acquire_duration_seconds",
		Help:           "Latency of acquire requests, by result (bound, pending, refused, failed, denied, error).",
		Buckets:        metrics.ExponentialBuckets(0.005, 2, 17),
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})
	renewals = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem:      "airlock",
		Name:           "sandboxapi_renewals_total",
		Help:           "Renew requests that reached a claim, by result: written (lastUsedAt written), skipped (no write needed), not_bound.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})

	registerOnce sync.Once
)

func registerMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(requests, acquireDuration, renewals)
	})
}
