package usage

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"

	"github.com/airlock-dev/airlock/pkg/record"
)

// Metrics are the usage series: labelled by namespace and runtime only, never by session or
// claim, so that their count is runtimes × series however many sessions run. The counters count
// what this process's ledgers observed (a new leader's start from status.usage is not added to
// them: a counter counts what its process saw; status.usage holds the runtime's whole sums).
type Metrics struct {
	cpu       *metrics.CounterVec
	memory    *metrics.CounterVec
	egress    *metrics.CounterVec
	toolCalls *metrics.CounterVec
	sessions  *metrics.CounterVec
	workspace *metrics.GaugeVec
}

var labels = []string{"namespace", "runtime"}

// NewMetrics returns unregistered usage metrics.
func NewMetrics() *Metrics {
	counter := func(name, help string) *metrics.CounterVec {
		return metrics.NewCounterVec(&metrics.CounterOpts{Subsystem: "airlock", Name: name, Help: help, StabilityLevel: metrics.ALPHA}, labels)
	}
	return &Metrics{
		cpu:       counter("usage_cpu_seconds_total", "CPU time of the runtime's sandboxes (their containers' cgroups), in seconds."),
		memory:    counter("usage_memory_gib_seconds_total", "Memory in use by the runtime's sandboxes integrated over time, in GiB-seconds."),
		egress:    counter("usage_egress_bytes_total", "Bytes the runtime's sandboxes moved through the egress gateway, both ways, as recorded in their records."),
		toolCalls: counter("usage_tool_calls_total", "Tool calls of the runtime's sandboxes."),
		sessions:  counter("usage_sessions_total", "Claims (sessions) of the runtime whose usage was counted."),
		workspace: metrics.NewGaugeVec(&metrics.GaugeOpts{Subsystem: "airlock", Name: "usage_workspace_bytes",
			Help: "The runtime's sessions' workspace bytes at their sandboxes' last stop, summed (status.usage.workspaceBytes).", StabilityLevel: metrics.ALPHA}, labels),
	}
}

// Register registers the metrics in r.
func (m *Metrics) Register(r metrics.KubeRegistry) { r.MustRegister(m.all()...) }

func (m *Metrics) all() []metrics.Registerable {
	return []metrics.Registerable{m.cpu, m.memory, m.egress, m.toolCalls, m.sessions, m.workspace}
}

var (
	defaultMetrics *Metrics
	registerOnce   sync.Once
)

// DefaultMetrics are the metrics registered in the process's legacy registry (what the
// operator's /metrics serves), registered at the first call.
func DefaultMetrics() *Metrics {
	registerOnce.Do(func() {
		defaultMetrics = NewMetrics()
		legacyregistry.MustRegister(defaultMetrics.all()...)
	})
	return defaultMetrics
}

func (m *Metrics) add(k Key, d record.Usage, workspace int64) {
	if m == nil {
		return
	}
	if d.CPUMillis > 0 {
		m.cpu.WithLabelValues(k.Namespace, k.Name).Add(float64(d.CPUMillis) / 1000)
	}
	if d.MemoryMiBSeconds > 0 {
		m.memory.WithLabelValues(k.Namespace, k.Name).Add(float64(d.MemoryMiBSeconds) / 1024)
	}
	if d.EgressBytes > 0 {
		m.egress.WithLabelValues(k.Namespace, k.Name).Add(float64(d.EgressBytes))
	}
	if d.ToolCalls > 0 {
		m.toolCalls.WithLabelValues(k.Namespace, k.Name).Add(float64(d.ToolCalls))
	}
	if d.WorkspaceBytes != 0 {
		m.workspace.WithLabelValues(k.Namespace, k.Name).Set(float64(workspace))
	}
}

func (m *Metrics) addSessions(k Key) {
	if m != nil {
		m.sessions.WithLabelValues(k.Namespace, k.Name).Inc()
	}
}

func (m *Metrics) forget(k Key) {
	if m == nil {
		return
	}
	for _, v := range []*metrics.CounterVec{m.cpu, m.memory, m.egress, m.toolCalls, m.sessions} {
		v.DeleteLabelValues(k.Namespace, k.Name)
	}
	m.workspace.DeleteLabelValues(k.Namespace, k.Name)
}
