package egress

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// The gateway's metrics. Labels are bounded: kind (connect, http), decision (allowed, denied),
// reason (the Reason constants), direction (up, down), and the claim's namespace and runtime
// (runtimeBytes: as many series as runtimes, however many sessions); never a claim, host or
// address.
var (
	requests = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem:      "airlock",
		Name:           "egress_requests_total",
		Help:           "Egress decisions: CONNECT tunnels and plain HTTP requests, by kind, decision and reason.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"kind", "decision", "reason"})
	transferred = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem:      "airlock",
		Name:           "egress_bytes_total",
		Help:           "Bytes through the gateway, by direction: up (sandbox to upstream) and down.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"direction"})
	runtimeBytes = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem:      "airlock",
		Name:           "egress_runtime_bytes_total",
		Help:           "Bytes through the gateway by the claim's namespace and runtime and by direction (up: sandbox to upstream), counted when each exchange ends: a runtime's egress usage (docs/record.md §3).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"namespace", "runtime", "direction"})
	durations = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Subsystem:      "airlock",
		Name:           "egress_duration_seconds",
		Help:           "Duration of tunnels and plain HTTP exchanges, from the request's head to the end, by kind and decision.",
		Buckets:        metrics.ExponentialBuckets(0.001, 4, 12),
		StabilityLevel: metrics.ALPHA,
	}, []string{"kind", "decision"})
	openConnections = metrics.NewGauge(&metrics.GaugeOpts{
		Subsystem:      "airlock",
		Name:           "egress_open_connections",
		Help:           "Client connections open to the gateway.",
		StabilityLevel: metrics.ALPHA,
	})
	credentialEchoes = metrics.NewCounter(&metrics.CounterOpts{
		Subsystem:      "airlock",
		Name:           "egress_credential_echoes_total",
		Help:           "Injected credentials an upstream sent back in a terminated tunnel, which the gateway replaced before they reached the sandbox.",
		StabilityLevel: metrics.ALPHA,
	})

	decisionsDropped = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem:      "airlock",
		Name:           "egress_decisions_dropped_total",
		Help:           "Decisions whose record entry the gateway's log did not keep (its bound per claim or in all): the reader sees their sequence numbers missing, a gap in the claim's record.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"bound"})

	registerOnce sync.Once
)

func registerMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(requests, transferred, runtimeBytes, durations, openConnections, credentialEchoes, decisionsDropped)
	})
}
