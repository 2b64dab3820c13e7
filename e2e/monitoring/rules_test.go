// Package monitoring checks the alert rules and the dashboard that the airlock chart ships
// (manifests/chart/airlock/files): the expressions parse with Prometheus's PromQL parser, every
// metric they use is one airlock exports, every alert has its runbook in docs/monitoring.md, and
// each alert fires on the synthetic series that describe its problem and stays quiet on the
// healthy ones, evaluated with Prometheus's own rule evaluator.
package monitoring

import (
	"context"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/prometheus/prometheus/rules"
)

const (
	rulesFile     = "manifests/chart/airlock/files/prometheus-rules.yaml"
	dashboardFile = "manifests/chart/airlock/files/grafana-dashboard.json"
	runbookFile   = "docs/monitoring.md"
	runbookURL    = "https://github.com/airlock-dev/airlock/blob/main/" + runbookFile + "#"
)

var promqlParser = parser.NewParser(parser.Options{})

// loadRules parses the rule file as Prometheus does (unknown fields refused), expressions
// included.
func loadRules(t *testing.T) []rulefmt.Rule {
	t.Helper()
	groups, errs := rulefmt.ParseFile(filepath.Join(repoRoot, rulesFile), false, model.UTF8Validation, promqlParser, slog.New(slog.DiscardHandler))
	for _, err := range errs {
		t.Error(err)
	}
	if groups == nil || t.Failed() {
		t.FailNow()
	}
	var out []rulefmt.Rule
	for _, g := range groups.Groups {
		out = append(out, g.Rules...)
	}
	if len(out) == 0 {
		t.Fatal("no rules")
	}
	return out
}

// metricNames are the metric names an expression selects.
func metricNames(t *testing.T, expr string) []string {
	t.Helper()
	e, err := promqlParser.ParseExpr(expr)
	if err != nil {
		t.Errorf("%q: %v", expr, err)
		return nil
	}
	var names []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			name := vs.Name
			for _, m := range vs.LabelMatchers {
				if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
					name = m.Value
				}
			}
			if name == "" {
				t.Errorf("%q selects series without a metric name", expr)
			}
			names = append(names, name)
		}
		return nil
	})
	return names
}

// TestEveryMetricIsExported: each metric the alerts and the dashboard use is one airlock's
// operator or sandboxd exports (a renamed metric would leave an alert that never fires).
func TestEveryMetricIsExported(t *testing.T) {
	series := exportedSeries(t)
	used := map[string][]string{}
	for _, r := range loadRules(t) {
		used["alert "+r.Alert] = metricNames(t, r.Expr)
	}
	for title, exprs := range dashboardExprs(t) {
		for _, e := range exprs {
			used["panel "+title] = append(used["panel "+title], metricNames(t, e)...)
		}
	}
	for where, names := range used {
		if len(names) == 0 {
			t.Errorf("%s uses no metric", where)
		}
		for _, n := range names {
			if !series[n] {
				t.Errorf("%s uses %s, which neither the operator nor sandboxd exports", where, n)
			}
		}
	}
}

// anchor is the GitHub anchor of a Markdown heading.
func anchor(heading string) string {
	h := strings.ToLower(strings.TrimSpace(heading))
	h = regexp.MustCompile(`[^a-z0-9 _-]`).ReplaceAllString(h, "")
	return strings.ReplaceAll(h, " ", "-")
}

// TestEveryAlertHasARunbook: each alert has a severity, a summary, a description and a
// runbook_url whose section exists in docs/monitoring.md.
func TestEveryAlertHasARunbook(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, runbookFile))
	if err != nil {
		t.Fatal(err)
	}
	sections := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "### ") {
			sections[anchor(strings.TrimPrefix(line, "### "))] = true
		}
	}
	for _, r := range loadRules(t) {
		if r.Alert == "" {
			t.Errorf("recording rule %s: the file holds alerts only", r.Record)
			continue
		}
		if !slices.Contains([]string{"critical", "warning"}, r.Labels["severity"]) {
			t.Errorf("%s: severity %q, want critical or warning", r.Alert, r.Labels["severity"])
		}
		for _, a := range []string{"summary", "description"} {
			if r.Annotations[a] == "" {
				t.Errorf("%s has no %s", r.Alert, a)
			}
		}
		want := runbookURL + strings.ToLower(r.Alert)
		if got := r.Annotations["runbook_url"]; got != want {
			t.Errorf("%s: runbook_url %q, want %q", r.Alert, got, want)
		}
		if !sections[strings.ToLower(r.Alert)] {
			t.Errorf("%s: %s has no section ### %s", r.Alert, runbookFile, r.Alert)
		}
	}
}

// alertCase is one alert evaluated over synthetic series: whether it is firing after `at`.
type alertCase struct {
	load       string // promqltest load commands; series start at time 0
	at         time.Duration
	wantFiring bool
}

// evalAlert evaluates one alerting rule every 30s from time 0 to at, as Prometheus's rule
// manager would, and says whether it is firing then.
func evalAlert(t *testing.T, r rulefmt.Rule, tc alertCase) bool {
	t.Helper()
	storage := promqltest.LoadedStorage(t, tc.load)
	engine := promqltest.NewTestEngine(t, false, 0, 1e6)
	expr, err := promqlParser.ParseExpr(r.Expr)
	if err != nil {
		t.Fatal(err)
	}
	rule := rules.NewAlertingRule(r.Alert, expr, time.Duration(r.For), time.Duration(r.KeepFiringFor),
		labels.FromMap(r.Labels), labels.FromMap(r.Annotations), labels.EmptyLabels(), "", true, slog.New(slog.DiscardHandler))
	query := rules.EngineQueryFunc(engine, storage)
	start := time.Unix(0, 0).UTC()
	for ts := start; !ts.After(start.Add(tc.at)); ts = ts.Add(30 * time.Second) {
		if _, err := rule.Eval(context.Background(), 0, ts, query, &url.URL{}, 0); err != nil {
			t.Fatalf("evaluating %s at %v: %v", r.Alert, ts.Sub(start), err)
		}
	}
	for _, a := range rule.ActiveAlerts() {
		if a.State == rules.StateFiring {
			return true
		}
	}
	return false
}

// The operator's series as the ServiceMonitor scrapes them.
const job = `job="airlock-operator-metrics"`

// alertCases are, per alert, the series of its problem (firing) and of a healthy operator
// (quiet). Every alert of the rule file must have both.
var alertCases = map[string]map[string]alertCase{
	"AirlockOperatorDown": {
		"no replica answers": {load: "load 1m\n up{" + job + `, pod="a"} 0x20` + "\n up{" + job + `, pod="b"} 0x20`, at: 10 * time.Minute, wantFiring: true},
		"nothing scraped":    {load: "load 1m\n other_metric 1x20", at: 10 * time.Minute, wantFiring: true},
		"one replica up":     {load: "load 1m\n up{" + job + `, pod="a"} 1x20` + "\n up{" + job + `, pod="b"} 0x20`, at: 10 * time.Minute},
	},
	"AirlockOperatorNoLeader": {
		"nobody leads": {load: "load 1m\n leader_election_master_status{" + job + `, name="airlock-operator", pod="a"} 0x20` + "\n leader_election_master_status{" + job + `, name="airlock-operator", pod="b"} 0x20`, at: 10 * time.Minute, wantFiring: true},
		"one leads":    {load: "load 1m\n leader_election_master_status{" + job + `, name="airlock-operator", pod="a"} 1x20` + "\n leader_election_master_status{" + job + `, name="airlock-operator", pod="b"} 0x20`, at: 10 * time.Minute},
		"a short gap":  {load: "load 1m\n leader_election_master_status{" + job + `, name="airlock-operator", pod="a"} 1 1 1 1 1 0 0 1 1 1 1 1 1 1 1 1 1 1 1 1`, at: 15 * time.Minute},
	},
	"AirlockLeadershipFlapping": {
		"three losses in 30m": {load: "load 1m\n airlock_operator_leadership_lost_total{pod=\"a\"} 0 0 1 1 2 2 3 3 3 3", at: 9 * time.Minute, wantFiring: true},
		"one loss":            {load: "load 1m\n airlock_operator_leadership_lost_total{pod=\"a\"} 0 0 1 1 1 1 1 1 1 1", at: 9 * time.Minute},
	},
	"AirlockAdmissionBacklogGrowing": {
		"queue grows for 30m": {load: "load 1m\n airlock_claims{namespace=\"agents\", phase=\"Queued\"} 1+1x40", at: 35 * time.Minute, wantFiring: true},
		"queue steady":        {load: "load 1m\n airlock_claims{namespace=\"agents\", phase=\"Queued\"} 5x40", at: 35 * time.Minute},
		"queue drains":        {load: "load 1m\n airlock_claims{namespace=\"agents\", phase=\"Queued\"} 40-1x40", at: 35 * time.Minute},
	},
	"AirlockClaimsStuckBinding": {
		"binding, none bound":      {load: "load 1m\n airlock_claims{namespace=\"agents\", phase=\"Binding\"} 2x30\n airlock_claim_bind_duration_seconds_count{warm=\"false\"} 5x30", at: 25 * time.Minute, wantFiring: true},
		"binding, never any bound": {load: "load 1m\n airlock_claims{namespace=\"agents\", phase=\"Binding\"} 2x30", at: 25 * time.Minute, wantFiring: true},
		"binding and binding":      {load: "load 1m\n airlock_claims{namespace=\"agents\", phase=\"Binding\"} 2x30\n airlock_claim_bind_duration_seconds_count{warm=\"false\"} 0+1x30", at: 25 * time.Minute},
	},
	"AirlockClaimsStuckReaping": {
		"reaping, nothing saved": {load: "load 1m\n airlock_claims{namespace=\"agents\", phase=\"Reaping\"} 1x50\n airlock_claim_syncback_total{result=\"succeeded\"} 3x50", at: 45 * time.Minute, wantFiring: true},
		"reaping and saving":     {load: "load 1m\n airlock_claims{namespace=\"agents\", phase=\"Reaping\"} 1x50\n airlock_claim_syncback_total{result=\"succeeded\"} 0+1x50", at: 45 * time.Minute},
		"reaping comes and goes": {load: "load 1m\n airlock_claims{namespace=\"agents\", phase=\"Reaping\"} 1 1 1 1 0 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 0 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1", at: 45 * time.Minute},
	},
	"AirlockSyncBackFailing": {
		"a failure": {load: "load 1m\n airlock_claim_syncback_total{result=\"failed\"} 0 0 0 1 1 1 1", at: 5 * time.Minute, wantFiring: true},
		"successes": {load: "load 1m\n airlock_claim_syncback_total{result=\"failed\"} 0x7\n airlock_claim_syncback_total{result=\"succeeded\"} 0+5x7", at: 5 * time.Minute},
	},
	"AirlockWarmPoolEmpty": {
		"misses for 20m":  {load: "load 1m\n airlock_warm_adoptions_total{result=\"miss\"} 0+2x30\n airlock_warm_adoptions_total{result=\"hit\"} 0+1x30", at: 25 * time.Minute, wantFiring: true},
		"hits only":       {load: "load 1m\n airlock_warm_adoptions_total{result=\"miss\"} 0x30\n airlock_warm_adoptions_total{result=\"hit\"} 0+3x30", at: 25 * time.Minute},
		"one short burst": {load: "load 1m\n airlock_warm_adoptions_total{result=\"miss\"} 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 4 4 4 4 4 4 4 4 4 4", at: 25 * time.Minute},
	},
	"AirlockAcquireLatencyHigh": {
		"slow acquires": {load: "load 1m\n" +
			` airlock_sandboxapi_acquire_duration_seconds_bucket{result="bound", le="10"} 0+1x30` + "\n" +
			` airlock_sandboxapi_acquire_duration_seconds_bucket{result="bound", le="60"} 0+10x30` + "\n" +
			` airlock_sandboxapi_acquire_duration_seconds_bucket{result="bound", le="+Inf"} 0+10x30`, at: 25 * time.Minute, wantFiring: true},
		"fast acquires": {load: "load 1m\n" +
			` airlock_sandboxapi_acquire_duration_seconds_bucket{result="bound", le="10"} 0+10x30` + "\n" +
			` airlock_sandboxapi_acquire_duration_seconds_bucket{result="bound", le="60"} 0+10x30` + "\n" +
			` airlock_sandboxapi_acquire_duration_seconds_bucket{result="bound", le="+Inf"} 0+10x30`, at: 25 * time.Minute},
	},
	"AirlockSandboxAPIErrors": {
		"10% 5xx":  {load: "load 1m\n airlock_sandboxapi_requests_total{endpoint=\"acquire\", code=\"200\"} 0+90x30\n airlock_sandboxapi_requests_total{endpoint=\"acquire\", code=\"502\"} 0+10x30", at: 25 * time.Minute, wantFiring: true},
		"1% 5xx":   {load: "load 1m\n airlock_sandboxapi_requests_total{endpoint=\"acquire\", code=\"200\"} 0+99x30\n airlock_sandboxapi_requests_total{endpoint=\"acquire\", code=\"500\"} 0+1x30", at: 25 * time.Minute},
		"4xx only": {load: "load 1m\n airlock_sandboxapi_requests_total{endpoint=\"acquire\", code=\"200\"} 0+50x30\n airlock_sandboxapi_requests_total{endpoint=\"acquire\", code=\"429\"} 0+50x30", at: 25 * time.Minute},
	},
	"AirlockCertificateExpiringSoon": {
		// The series start at time 0: an expiry at 10 days is 10 days from then.
		"10 days left":       {load: "load 1m\n airlock_sandbox_api_certificate_expiration_timestamp_seconds{pod=\"a\"} 864000x120", at: 90 * time.Minute, wantFiring: true},
		"60 days left":       {load: "load 1m\n airlock_sandbox_api_certificate_expiration_timestamp_seconds{pod=\"a\"} 5184000x120", at: 90 * time.Minute},
		"one replica behind": {load: "load 1m\n airlock_sandbox_api_certificate_expiration_timestamp_seconds{pod=\"a\"} 5184000x120\n airlock_sandbox_api_certificate_expiration_timestamp_seconds{pod=\"b\"} 864000x120", at: 90 * time.Minute, wantFiring: true},
	},
	"AirlockEgressDenialsHigh": {
		"a sandbox probing, 1 denial a second": {load: "load 1m\n airlock_egress_requests_total{kind=\"connect\", decision=\"denied\", reason=\"host_not_allowed\", pod=\"a\"} 0+60x30", at: 25 * time.Minute, wantFiring: true},
		"a gateway not synced":                 {load: "load 1m\n airlock_egress_requests_total{kind=\"connect\", decision=\"denied\", reason=\"not_synced\", pod=\"a\"} 0+30x30\n airlock_egress_requests_total{kind=\"connect\", decision=\"denied\", reason=\"not_synced\", pod=\"b\"} 0+30x30", at: 25 * time.Minute, wantFiring: true},
		"a denial a minute":                    {load: "load 1m\n airlock_egress_requests_total{kind=\"connect\", decision=\"denied\", reason=\"host_not_allowed\", pod=\"a\"} 0+1x30\n airlock_egress_requests_total{kind=\"connect\", decision=\"allowed\", reason=\"allowed\", pod=\"a\"} 0+600x30", at: 25 * time.Minute},
		"denials spread over reasons":          {load: "load 1m\n airlock_egress_requests_total{kind=\"connect\", decision=\"denied\", reason=\"host_not_allowed\", pod=\"a\"} 0+2x30\n airlock_egress_requests_total{kind=\"http\", decision=\"denied\", reason=\"port_not_allowed\", pod=\"a\"} 0+2x30", at: 25 * time.Minute},
		"a short burst":                        {load: "load 1m\n airlock_egress_requests_total{kind=\"connect\", decision=\"denied\", reason=\"host_not_allowed\", pod=\"a\"} 0 0 0 0 0 0 0 0 0 0 300 300 300 300 300 300 300 300 300 300 300 300 300 300 300 300 300 300 300 300", at: 25 * time.Minute},
	},
}

// TestAlerts: every alert fires on its problem and stays quiet on a healthy operator.
func TestAlerts(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range loadRules(t) {
		seen[r.Alert] = true
		cases, ok := alertCases[r.Alert]
		if !ok {
			t.Errorf("%s has no test cases", r.Alert)
			continue
		}
		var fires, quiet bool
		for name, tc := range cases {
			fires, quiet = fires || tc.wantFiring, quiet || !tc.wantFiring
			t.Run(r.Alert+"/"+name, func(t *testing.T) {
				if got := evalAlert(t, r, tc); got != tc.wantFiring {
					t.Errorf("firing = %v, want %v", got, tc.wantFiring)
				}
			})
		}
		if !fires || !quiet {
			t.Errorf("%s: its cases must include one where it fires and one where it does not", r.Alert)
		}
	}
	for name := range alertCases {
		if !seen[name] {
			t.Errorf("cases for %s, which the rule file does not have", name)
		}
	}
}
