package sandboxd

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/scrub"
)

// Tool call results, the result label of airlock_sandboxd_tool_calls_total.
const (
	statusOK            = "ok"             // the tool succeeded
	statusError         = "error"          // the tool failed: an isError result the model reads
	statusCanceled      = "canceled"       // the call was cancelled (notifications/cancelled, client gone, shutdown)
	statusProtocolError = "protocol_error" // a JSON-RPC error (e.g. a tool that is not served)
)

// metrics are sandboxd's Prometheus metrics, in a registry of their own (so
// that every server, in tests too, has its own). No label carries a session,
// a path or an argument: tool is a served tool's name or "unknown", result
// one of the four results, kind one of secretKinds.
type metrics struct {
	registry        *prometheus.Registry
	toolCalls       *prometheus.CounterVec
	toolDuration    *prometheus.HistogramVec
	secretsScrubbed *prometheus.CounterVec
	// firstCall is the time from servingSince (sandboxd's start, or a warm member's adoption)
	// to the end of the first tool call after it; firstDone says it was set.
	firstCall    prometheus.Gauge
	servingSince atomic.Int64 // unix nanoseconds
	firstDone    atomic.Bool
	// stateless counts the requests of the stateless revision (2026-07-28),
	// which have no session to count, by method (statelessMethods, else
	// "other").
	stateless map[string]prometheus.Counter
}

// statelessMethods are the methods of the stateless revision that
// airlock_sandboxd_stateless_requests_total names; any other is "other",
// so that a client's method names never become labels.
var statelessMethods = []string{
	"server/discover", "tools/list", "tools/call", "resources/list", "resources/templates/list", "prompts/list",
	"tasks/get", "tasks/cancel", "tasks/update", "subscriptions/listen", "notifications/cancelled",
}

// countStateless counts a request of the stateless revision.
func (m *metrics) countStateless(method string) {
	if m == nil {
		return
	}
	c, ok := m.stateless[method]
	if !ok {
		c = m.stateless["other"]
	}
	c.Inc()
}

// registerTasks adds the gauges and the counter of the task store
// (tasks.go).
func (m *metrics) registerTasks(running, kept func() float64, created prometheus.Collector) {
	m.registry.MustRegister(
		created,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "airlock", Subsystem: "sandboxd", Name: "tasks_running",
			Help: "Tool calls that became tasks (io.modelcontextprotocol/tasks) and still run.",
		}, running),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "airlock", Subsystem: "sandboxd", Name: "tasks_kept",
			Help: "Tasks kept for tasks/get, running or finished (finished ones until their retention passes).",
		}, kept),
	)
}

// newMetrics registers the metrics. sessions and shells are read when
// /metrics is scraped.
func newMetrics(served []string, sseStreams, sessions, shells func() float64) *metrics {
	m := &metrics{
		registry: prometheus.NewRegistry(),
		toolCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "airlock",
			Subsystem: "sandboxd",
			Name:      "tool_calls_total",
			Help:      "Tool calls, by tool (\"unknown\" for a tool that is not served) and result (ok, error, canceled, protocol_error).",
		}, []string{"tool", "result"}),
		toolDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "airlock",
			Subsystem: "sandboxd",
			Name:      "tool_call_duration_seconds",
			Help:      "Duration of tool calls, by tool, from the request to the result (waiting for a snapshot_restore included).",
			Buckets:   []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600},
		}, []string{"tool"}),
		firstCall: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "airlock",
			Subsystem: "sandboxd",
			Name:      "first_tool_call_seconds",
			Help:      "Seconds from the moment sandboxd could serve (its start; for a warm member, its adoption) to the end of the first tool call after it; 0 until that call.",
		}),
		secretsScrubbed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "airlock",
			Subsystem: "sandboxd",
			Name:      "secrets_scrubbed_total",
			Help:      "Secrets redacted from tool results, by kind (each distinct secret counted once per result).",
		}, []string{"kind"}),
	}
	m.servingSince.Store(time.Now().UnixNano())
	stateless := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "airlock",
		Subsystem: "sandboxd",
		Name:      "stateless_requests_total",
		Help:      "Requests and notifications of the stateless revision (2026-07-28) on /mcp, which open no session, by method (\"other\" for a method sandboxd does not name).",
	}, []string{"method"})
	m.stateless = map[string]prometheus.Counter{"other": stateless.WithLabelValues("other")}
	for _, method := range statelessMethods {
		m.stateless[method] = stateless.WithLabelValues(method)
	}
	m.registry.MustRegister(
		stateless,
		m.firstCall,
		m.toolCalls,
		m.toolDuration,
		m.secretsScrubbed,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "airlock", Subsystem: "sandboxd", Name: "sse_streams",
			Help: "Open HTTP+SSE streams (legacy transport sessions).",
		}, sseStreams),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "airlock", Subsystem: "sandboxd", Name: "sessions",
			Help: "Open MCP sessions, both transports.",
		}, sessions),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "airlock", Subsystem: "sandboxd", Name: "background_shells",
			Help: "Background shells that are still running.",
		}, shells),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	m.startTools(served)
	for _, kind := range scrub.SecretKinds() {
		m.secretsScrubbed.WithLabelValues(kind)
	}
	return m
}

// startTools starts the served tools' series at zero, so that a dashboard
// sees them before their first call: at construction, or for a warm member
// at its adoption (served is then the adopted tools, a subset of
// toolnames.All, so the label set stays bounded).
func (m *metrics) startTools(served []string) {
	for _, tool := range served {
		for _, result := range []string{statusOK, statusError} {
			m.toolCalls.WithLabelValues(tool, result)
		}
		m.toolDuration.WithLabelValues(tool)
	}
}

// observe counts one tool call. tool must be a served tool or
// toolNameUnknown, so that the label set stays bounded.
func (m *metrics) observe(tool, result string, d time.Duration) {
	m.toolCalls.WithLabelValues(tool, result).Inc()
	m.toolDuration.WithLabelValues(tool).Observe(d.Seconds())
	if !m.firstDone.Load() && m.firstDone.CompareAndSwap(false, true) {
		m.firstCall.Set(time.Since(time.Unix(0, m.servingSince.Load())).Seconds())
	}
}

// adopted starts the first-call clock again: a warm member serves from its adoption.
func (m *metrics) adopted() {
	m.servingSince.Store(time.Now().UnixNano())
	m.firstDone.Store(false)
	m.firstCall.Set(0)
}

// scrubbed counts the secrets redacted from one result.
func (m *metrics) scrubbed(found scrub.Found) {
	for kind, n := range found.Counts() {
		m.secretsScrubbed.WithLabelValues(kind).Add(float64(n))
	}
}
