package sandboxd

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Tool call statuses, the status label of the tool call metrics.
const (
	statusOK            = "ok"             // the tool succeeded
	statusError         = "error"          // the tool failed: an isError result the model reads
	statusCanceled      = "canceled"       // the call was cancelled (notifications/cancelled, client gone, shutdown)
	statusProtocolError = "protocol_error" // a JSON-RPC error (e.g. a tool that is not served)
)

// metrics are sandboxd's Prometheus metrics, in a registry of their own (so
// that every server, in tests too, has its own).
type metrics struct {
	registry     *prometheus.Registry
	toolCalls    *prometheus.CounterVec
	toolDuration *prometheus.HistogramVec
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
			Help:      "Tool calls, by tool and status (ok, error, canceled, protocol_error).",
		}, []string{"tool", "status"}),
		toolDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "airlock",
			Subsystem: "sandboxd",
			Name:      "tool_call_duration_seconds",
			Help:      "Duration of tool calls, by tool and status.",
			Buckets:   []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600},
		}, []string{"tool", "status"}),
	}
	m.registry.MustRegister(
		m.toolCalls,
		m.toolDuration,
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
	// Start the served tools at zero, so that a dashboard sees them before
	// their first call.
	for _, tool := range served {
		for _, status := range []string{statusOK, statusError} {
			m.toolCalls.WithLabelValues(tool, status)
		}
	}
	return m
}

// observe counts one tool call.
func (m *metrics) observe(tool, status string, d time.Duration) {
	m.toolCalls.WithLabelValues(tool, status).Inc()
	m.toolDuration.WithLabelValues(tool, status).Observe(d.Seconds())
}
