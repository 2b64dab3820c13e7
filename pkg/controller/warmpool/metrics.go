package warmpool

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

var (
	isolationChecks = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem:      "airlock",
		Name:           "warm_isolation_checks_total",
		Help:           "Warm members' isolation evidence judged at their readiness, before any adoption, by result: met (held, sealed onto the member: adoptable), not_met (the member deleted and replaced, never adopted: a probe connected, a privilege held, no evidence, a record that is not the operator's, or none readable within the startupTimeout).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})

	registerOnce sync.Once
)

// registerMetrics registers the controller's metrics with the legacy registry, once per process.
func registerMetrics() {
	registerOnce.Do(func() { legacyregistry.MustRegister(isolationChecks) })
}
