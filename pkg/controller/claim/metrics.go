package claim

import (
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	airlocklisters "github.com/airlock-dev/airlock/pkg/generated/listers/airlock/v1alpha1"
)

const metricsSubsystem = "airlock"

var (
	bindDuration = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Subsystem:      metricsSubsystem,
		Name:           "claim_bind_duration_seconds",
		Help:           "Time from a claim's creation to Bound, by whether it adopted a warm member (the creation time has a precision of one second: a warm claim's sub-second binding shows in the Sandbox API's answer times).",
		Buckets:        metrics.ExponentialBuckets(0.05, 2, 14),
		StabilityLevel: metrics.ALPHA,
	}, []string{"warm"})
	admissionDecisions = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem:      metricsSubsystem,
		Name:           "claim_admission_decisions_total",
		Help:           "Admission decisions applied to claims by the leader, by action and reason.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"action", "reason"})
	decisionPassDuration = metrics.NewHistogram(&metrics.HistogramOpts{
		Subsystem:      metricsSubsystem,
		Name:           "admission_pass_duration_seconds",
		Help:           "Time the admission function takes to decide one namespace's claims (one pass, without its writes).",
		Buckets:        metrics.ExponentialBuckets(0.0001, 2, 16),
		StabilityLevel: metrics.ALPHA,
	})
	reapedClaims = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem:      metricsSubsystem,
		Name:           "claims_reaped_total",
		Help:           "Claims that entered Reaping, by reason.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"reason"})
	syncBackResults = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem:      metricsSubsystem,
		Name:           "claim_syncback_total",
		Help:           "Finished sync-back Jobs, by result (succeeded, failed; gaveup: the claim's last attempt failed and it is Failed with its workspace kept).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})
	isolationChecks = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem:      metricsSubsystem,
		Name:           "claim_isolation_checks_total",
		Help:           "Sandboxes' isolation evidence judged before Bound, by result: met (signed and Bound), not_met (the claim Failed, reason IsolationNotMet).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})
	isolationReadDuration = metrics.NewHistogram(&metrics.HistogramOpts{
		Subsystem:      metricsSubsystem,
		Name:           "claim_isolation_read_seconds",
		Help:           "Time from a claim's Ready pod to its isolation evidence read, judged and signed: what reading the evidence adds to binding.",
		Buckets:        metrics.ExponentialBuckets(0.002, 2, 14),
		StabilityLevel: metrics.ALPHA,
	})
	sandboxStops = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem:      metricsSubsystem,
		Name:           "claim_sandbox_stops_total",
		Help:           "The operator's stops of Reaping claims' pods through sandboxd, by result: stopped (the pod deleted at once), failed (sandboxd refused or did not answer: the pod left to the kubelet).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})

	warmAdoptions = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem:      metricsSubsystem,
		Name:           "warm_adoptions_total",
		Help:           "Admitted claims of a sandbox with warm members, by result: hit (a warm member adopted) or miss (none Ready: built cold).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})

	warmResumes = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem:      metricsSubsystem,
		Name:           "warm_resumes_total",
		Help:           "Admitted claims that resume a kept workspace of a sandbox with resume members, by result: hit (its resume member adopted), miss (none Ready: resumed cold) or lost (the record changed between the adoption and the take: resumed cold).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})

	claimsByPhaseDesc = metrics.NewDesc(metricsSubsystem+"_claims",
		"Claims by namespace and phase, from the operator's cache.",
		[]string{"namespace", "phase"}, nil, metrics.ALPHA, "")

	phaseCollectorInstance = &phaseCollector{}
	registerOnce           sync.Once
)

// phaseCollector counts claims by phase from the cache at scrape time.
type phaseCollector struct {
	metrics.BaseStableCollector
	lister atomic.Pointer[airlocklisters.SandboxClaimLister]
}

func (p *phaseCollector) DescribeWithStability(ch chan<- *metrics.Desc) { ch <- claimsByPhaseDesc }

func (p *phaseCollector) CollectWithStability(ch chan<- metrics.Metric) {
	lister := p.lister.Load()
	if lister == nil {
		return
	}
	claims, err := (*lister).List(labels.Everything())
	if err != nil {
		return
	}
	type key struct{ namespace, phase string }
	counts := map[key]int{}
	for _, c := range claims {
		phase := string(c.Status.Phase)
		if phase == "" {
			phase = string(airlockv1alpha1.ClaimPending)
		}
		counts[key{c.Namespace, phase}]++
	}
	for k, n := range counts {
		ch <- metrics.NewLazyConstMetric(claimsByPhaseDesc, metrics.GaugeValue, float64(n), k.namespace, k.phase)
	}
}

// registerMetrics registers the controller's metrics with the legacy registry (once per process)
// and points the phase gauge at lister.
func registerMetrics(lister airlocklisters.SandboxClaimLister) {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(bindDuration, warmAdoptions, warmResumes, admissionDecisions, decisionPassDuration, reapedClaims, syncBackResults, sandboxStops, isolationChecks, isolationReadDuration)
		legacyregistry.CustomMustRegister(phaseCollectorInstance)
	})
	phaseCollectorInstance.lister.Store(&lister)
}

// observePhaseChange records the metrics of a phase change.
func observePhaseChange(old, cur *airlockv1alpha1.SandboxClaim, now time.Time) {
	switch cur.Status.Phase {
	case airlockv1alpha1.ClaimBound:
		warm := "false"
		if cur.Status.Warm != nil {
			warm = "true"
		}
		bindDuration.WithLabelValues(warm).Observe(now.Sub(cur.CreationTimestamp.Time).Seconds())
		if isUndecided(old) {
			admissionDecisions.WithLabelValues("Admit", "").Inc() // admitted straight to a warm member
		}
	case airlockv1alpha1.ClaimBinding:
		admissionDecisions.WithLabelValues("Admit", "").Inc()
	case airlockv1alpha1.ClaimQueued:
		admissionDecisions.WithLabelValues("Queue", cur.Status.Reason).Inc()
	case airlockv1alpha1.ClaimRefused:
		admissionDecisions.WithLabelValues("Refuse", cur.Status.Reason).Inc()
	case airlockv1alpha1.ClaimReaping:
		reapedClaims.WithLabelValues(cur.Status.Reason).Inc()
	}
}
