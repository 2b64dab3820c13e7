package operator

import (
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// leadershipLost counts the terms this replica lost without asking to (a renewal that did not
// reach the API server in time); client-go's leader_election_master_status says whether it
// leads now.
var leadershipLost = metrics.NewCounter(&metrics.CounterOpts{
	Subsystem:      "airlock",
	Name:           "operator_leadership_lost_total",
	Help:           "Leader terms this replica lost without stopping on purpose (the lease could not be renewed); it campaigns again.",
	StabilityLevel: metrics.ALPHA,
})

func init() {
	legacyregistry.MustRegister(leadershipLost)
}
