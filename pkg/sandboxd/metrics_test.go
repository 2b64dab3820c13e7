package sandboxd

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/airlock-dev/airlock/pkg/toolnames"
)

// gaugeValue reads a gauge.
func gaugeValue(t *testing.T, g prometheus.Gauge) float64 {
	t.Helper()
	var m dto.Metric
	if err := g.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetGauge().GetValue()
}

// TestFirstToolCallMetric: the first tool call after sandboxd could serve sets
// airlock_sandboxd_first_tool_call_seconds once; a warm member's adoption starts the clock again.
func TestFirstToolCallMetric(t *testing.T) {
	zero := func() float64 { return 0 }
	m := newMetrics([]string{toolnames.Read}, zero, zero, zero)
	if v := gaugeValue(t, m.firstCall); v != 0 {
		t.Fatalf("before any call: %v, want 0", v)
	}
	m.servingSince.Store(time.Now().Add(-2 * time.Second).UnixNano())
	m.observe(toolnames.Read, statusOK, time.Millisecond)
	first := gaugeValue(t, m.firstCall)
	if first < 2 || first > 60 {
		t.Fatalf("after the first call: %v s, want the 2 s since serving began", first)
	}
	m.observe(toolnames.Read, statusOK, time.Millisecond)
	if v := gaugeValue(t, m.firstCall); v != first {
		t.Errorf("a second call changed it: %v → %v", first, v)
	}
	m.adopted()
	if v := gaugeValue(t, m.firstCall); v != 0 {
		t.Errorf("after an adoption: %v, want 0 until the next call", v)
	}
	m.observe(toolnames.Read, statusOK, time.Millisecond)
	if v := gaugeValue(t, m.firstCall); v <= 0 || v >= first {
		t.Errorf("first call after the adoption: %v s, want counted from the adoption (less than %v)", v, first)
	}
}
