package monitoring

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// monitoredFile lists the metric families the alerts and the dashboard use, for the real-node
// e2e (e2e/realnode_metrics_test.go), which scrapes a running operator and a sandbox and finds
// each of them in the output. It is generated here, where the PromQL parser is, so that
// airlock's own module needs no Prometheus library to read it.
const monitoredFile = "e2e/monitoring/monitored-metrics.txt"

var update = flag.Bool("update", false, "rewrite "+monitoredFile+" from the rules and the dashboard")

const monitoredHeader = `# The metric families that the alert rules (manifests/chart/airlock/files/prometheus-rules.yaml)
# and the dashboard (manifests/chart/airlock/files/grafana-dashboard.json) use: name, type (as
# the exposition format's TYPE line says; "custom" for a collector's own) and the process that
# exports it ("prometheus": a series Prometheus makes itself, not scraped).
#
# Generated: cd e2e/monitoring && go test -run TestMonitoredMetricsFile -update
# Checked by that test (make test-monitoring); read by TestRealNodeMetricsScraped (e2e), which
# scrapes the running operator's replicas and a sandbox's sandboxd and finds every family here
# in what they serve, and by TestRealNodeEgress (e2e), which scrapes the egress gateway's
# replicas for the families of exporter egress.
`

// monitoredFamilies returns the families the rules and the dashboard use, sorted by name.
func monitoredFamilies(t *testing.T) []namedFamily {
	t.Helper()
	series := seriesFamilies(t)
	used := map[string]namedFamily{}
	var names []string
	for _, r := range loadRules(t) {
		names = append(names, metricNames(t, r.Expr)...)
	}
	for _, exprs := range dashboardExprs(t) {
		for _, e := range exprs {
			names = append(names, metricNames(t, e)...)
		}
	}
	for _, n := range names {
		f, ok := series[n]
		if !ok {
			t.Errorf("%s is used but not exported (TestEveryMetricIsExported says where)", n)
			continue
		}
		used[f.name] = f
	}
	out := make([]namedFamily, 0, len(used))
	for _, f := range used {
		out = append(out, f)
	}
	slices.SortFunc(out, func(a, b namedFamily) int { return strings.Compare(a.name, b.name) })
	return out
}

// renderMonitored is the content of monitoredFile.
func renderMonitored(families []namedFamily) string {
	var b strings.Builder
	b.WriteString(monitoredHeader)
	for _, f := range families {
		fmt.Fprintf(&b, "%s %s %s\n", f.name, f.kind, f.exporter)
	}
	return b.String()
}

// TestMonitoredMetricsFile: the committed list of monitored families is the one the rules and
// the dashboard use today (a new panel or alert must reach the e2e scrape check).
func TestMonitoredMetricsFile(t *testing.T) {
	want := renderMonitored(monitoredFamilies(t))
	path := filepath.Join(repoRoot, monitoredFile)
	if *update {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (generate it: cd e2e/monitoring && go test -run TestMonitoredMetricsFile -update)", err)
	}
	if string(got) != want {
		t.Errorf("%s is stale: regenerate it (cd e2e/monitoring && go test -run TestMonitoredMetricsFile -update); want:\n%s", monitoredFile, want)
	}
	for _, exporter := range []string{"operator", "sandboxd", "egress", "prometheus"} {
		if !strings.Contains(want, " "+exporter+"\n") {
			t.Errorf("no family of %s in the list: the exporter is not told apart", exporter)
		}
	}
}

// TestMonitoredFamiliesKnown: the list names histograms by their family (not _bucket) and
// tells the exporters and types apart.
func TestMonitoredFamiliesKnown(t *testing.T) {
	got := map[string]namedFamily{}
	for _, f := range monitoredFamilies(t) {
		got[f.name] = f
	}
	for name, want := range map[string]family{
		"airlock_sandboxapi_acquire_duration_seconds": {kind: histogram, exporter: "operator"},
		"airlock_claims":                         {kind: custom, exporter: "operator"},
		"airlock_operator_leadership_lost_total": {kind: counter, exporter: "operator"},
		"airlock_sandboxd_tool_calls_total":      {kind: counter, exporter: "sandboxd"},
		"airlock_egress_requests_total":          {kind: counter, exporter: "egress"},
		"workqueue_depth":                        {kind: gauge, exporter: "operator"},
		"up":                                     {kind: gauge, exporter: "prometheus"},
	} {
		if f, ok := got[name]; !ok || f.family != want {
			t.Errorf("%s: %+v (listed %v), want %+v", name, f.family, ok, want)
		}
	}
	if _, ok := got["airlock_sandboxapi_acquire_duration_seconds_bucket"]; ok {
		t.Error("a histogram is listed by its _bucket series")
	}
}
