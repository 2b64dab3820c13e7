package sandboxapi

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// The Sandbox API's metrics: the requests of every endpoint, acquire latency by result, the
// renewals' outcomes as the API answered them, and renewals by whether they wrote lastUsedAt
// (airlock_claim_renewals_total{written}, the renewals vs lastUsedAt writes of SPEC section 7).
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

	lastUsedWrites = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem:      "airlock",
		Name:           "claim_renewals_total",
		Help:           "Claim renewals, by whether they wrote lastUsedAt (written=true) or cost no write.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"written"})

	registerOnce sync.Once
)

func registerMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(requests, acquireDuration, renewals, lastUsedWrites)
	})
}
