package main

import (
	"math"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

const apiserverBefore = `# TYPE apiserver_request_total counter
apiserver_request_total{code="201",component="apiserver",dry_run="",group="apps",resource="deployments",scope="resource",subresource="",verb="CONNECT",version="v1"} 1
apiserver_request_total{code="201",component="apiserver",dry_run="",group="apps",resource="deployments",scope="resource",subresource="",verb="POST",version="v1"} 10
apiserver_request_total{code="200",component="apiserver",dry_run="",group="apps",resource="deployments",scope="resource",subresource="status",verb="PUT",version="v1"} 20
apiserver_request_total{code="409",component="apiserver",dry_run="",group="apps",resource="deployments",scope="resource",subresource="status",verb="PUT",version="v1"} 2
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="namespace",subresource="",verb="LIST",version="v1"} 500
apiserver_request_total{code="200",component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="resource",subresource="",verb="PUT",version="v1"} 40
`

const apiserverAfter = `# TYPE apiserver_request_total counter
apiserver_request_total{code="201",component="apiserver",dry_run="",group="apps",resource="deployments",scope="resource",subresource="",verb="CONNECT",version="v1"} 1
apiserver_request_total{code="201",component="apiserver",dry_run="",group="apps",resource="deployments",scope="resource",subresource="",verb="POST",version="v1"} 14
apiserver_request_total{code="201",component="",dry_run="All",group="apps",resource="deployments",scope="resource",subresource="",verb="POST",version="v1"} 3
apiserver_request_total{code="200",component="apiserver",dry_run="",group="apps",resource="deployments",scope="resource",subresource="status",verb="PUT",version="v1"} 26
apiserver_request_total{code="409",component="apiserver",dry_run="",group="apps",resource="deployments",scope="resource",subresource="status",verb="PUT",version="v1"} 3
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="namespace",subresource="",verb="LIST",version="v1"} 900
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="binding",verb="POST",version="v1"} 4
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="events",scope="resource",subresource="",verb="POST",version="v1"} 8
apiserver_request_total{code="201",component="apiserver",dry_run="",group="authentication.k8s.io",resource="tokenreviews",scope="cluster",subresource="",verb="POST",version="v1"} 1
apiserver_request_total{code="200",component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="resource",subresource="",verb="PUT",version="v1"} 52
`

func mustParse(t *testing.T, text string) families {
	t.Helper()
	f, err := parseMetrics(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestAPIServerWritesDelta(t *testing.T) {
	got := apiserverWrites(mustParse(t, apiserverAfter)).sub(apiserverWrites(mustParse(t, apiserverBefore)))
	// Reads (LIST), CONNECT, dry runs and unchanged series are left out; POST is CREATE and PUT
	// UPDATE, as the audit log says.
	want := writeCounts{
		{Group: "apps", Resource: "deployments", Verb: "CREATE", Code: "201"}:                        4,
		{Group: "apps", Resource: "deployments", Subresource: "status", Verb: "UPDATE", Code: "200"}: 6,
		{Group: "apps", Resource: "deployments", Subresource: "status", Verb: "UPDATE", Code: "409"}: 1,
		{Resource: "pods", Subresource: "binding", Verb: "CREATE", Code: "201"}:                      4,
		{Resource: "events", Verb: "CREATE", Code: "201"}:                                            8,
		{Group: "authentication.k8s.io", Resource: "tokenreviews", Verb: "CREATE", Code: "201"}:      1,
		{Group: "coordination.k8s.io", Resource: "leases", Verb: "UPDATE", Code: "200"}:              12,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("writes (-want +got):\n%s", diff)
	}

	// 4 claims: leases are background; events and reviews are counted apart from objects; the
	// operator's share comes from the audit log.
	audit := clientWrites{
		{Client: "operator", Group: "apps", Resource: "deployments", Verb: "create", Outcome: "ok"}:                                       3,
		{Client: "operator", Group: "apps", Resource: "deployments", Verb: "create", Outcome: "AlreadyExists"}:                            1,
		{Client: "operator", Group: "coordination.k8s.io", Resource: "leases", Verb: "update", Outcome: "ok"}:                             5,
		{Client: "kube-controller-manager", Group: "apps", Resource: "deployments", Subresource: "status", Verb: "update", Outcome: "ok"}: 6,
	}
	times := serverTimes{{"apps/deployments", "CREATE"}: {30 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond, 400 * time.Millisecond}}
	table := writesTable(got, auditRead{writes: audit, times: times}, 4)
	wantTable := Writes{
		PerClaim: 24.0 / 4, ObjectsPerClaim: 15.0 / 4, EventsPerClaim: 8.0 / 4, ReviewsPerClaim: 1.0 / 4,
		Code409: 1, Background: 12,
		Rows: []WriteRow{
			{Resource: "events", Verb: "CREATE", Count: 8, PerClaim: 2},
			{Resource: "apps/deployments/status", Verb: "UPDATE", Count: 7, PerClaim: 1.75, Code409: 1},
			{Resource: "apps/deployments", Verb: "CREATE", Count: 4, PerClaim: 1, OperatorCount: 4, OperatorPerClaim: 1, OperatorFailed: map[string]int{"AlreadyExists": 1}, OperatorServerP50Ms: 20, OperatorServerMaxMs: 400},
			{Resource: "pods/binding", Verb: "CREATE", Count: 4, PerClaim: 1},
			{Resource: "authentication.k8s.io/tokenreviews", Verb: "CREATE", Count: 1, PerClaim: 0.25},
		},
	}
	if diff := cmp.Diff(wantTable, table); diff != "" {
		t.Errorf("writesTable (-want +got):\n%s", diff)
	}
}

const histogramBefore = `# TYPE airlock_claim_admission_pass_duration_seconds histogram
airlock_claim_admission_pass_duration_seconds_bucket{le="0.001"} 10
airlock_claim_admission_pass_duration_seconds_bucket{le="0.01"} 10
airlock_claim_admission_pass_duration_seconds_bucket{le="0.1"} 10
airlock_claim_admission_pass_duration_seconds_bucket{le="+Inf"} 10
airlock_claim_admission_pass_duration_seconds_sum 0.005
airlock_claim_admission_pass_duration_seconds_count 10
`

// After: 100 more passes, 50 in (0.001, 0.01], 48 in (0.01, 0.1], 2 above 0.1; in two series.
const histogramAfter = `# TYPE airlock_claim_admission_pass_duration_seconds histogram
airlock_claim_admission_pass_duration_seconds_bucket{namespace="a",le="0.001"} 10
airlock_claim_admission_pass_duration_seconds_bucket{namespace="a",le="0.01"} 40
airlock_claim_admission_pass_duration_seconds_bucket{namespace="a",le="0.1"} 70
airlock_claim_admission_pass_duration_seconds_bucket{namespace="a",le="+Inf"} 72
airlock_claim_admission_pass_duration_seconds_sum{namespace="a"} 2.005
airlock_claim_admission_pass_duration_seconds_count{namespace="a"} 72
airlock_claim_admission_pass_duration_seconds_bucket{namespace="b",le="0.001"} 0
airlock_claim_admission_pass_duration_seconds_bucket{namespace="b",le="0.01"} 20
airlock_claim_admission_pass_duration_seconds_bucket{namespace="b",le="0.1"} 38
airlock_claim_admission_pass_duration_seconds_bucket{namespace="b",le="+Inf"} 38
airlock_claim_admission_pass_duration_seconds_sum{namespace="b"} 1
airlock_claim_admission_pass_duration_seconds_count{namespace="b"} 38
# TYPE airlock_other_seconds histogram
airlock_other_seconds_bucket{le="1"} 0
airlock_other_seconds_bucket{le="+Inf"} 0
airlock_other_seconds_sum 0
airlock_other_seconds_count 0
# TYPE workqueue_adds_total counter
workqueue_adds_total{name="claim"} 5
`

func TestHistogramsMatchingDelta(t *testing.T) {
	got := histogramsMatching(regexp.MustCompile(`^airlock_`), mustParse(t, histogramBefore), mustParse(t, histogramAfter))
	// p50: rank 50 of 100 is the last of the 50 in (0.001, 0.01]: 10 ms. p99: rank 99 falls in
	// +Inf: the highest finite bound, 100 ms. The unchanged histogram is left out.
	want := map[string]Histogram{
		"airlock_claim_admission_pass_duration_seconds": {Count: 100, MeanMs: 30, P50Ms: 10, P99Ms: 100},
	}
	if diff := cmp.Diff(want, got, cmpopts.EquateApprox(0, 1e-9)); diff != "" {
		t.Errorf("histograms (-want +got):\n%s", diff)
	}
}

func TestBucketQuantileInterpolates(t *testing.T) {
	buckets := []bucket{{0.01, 0}, {0.02, 100}, {math.Inf(1), 100}}
	if got := bucketQuantile(0.5, 100, buckets); math.Abs(got-0.015) > 1e-12 {
		t.Errorf("median of 100 spread over (0.01, 0.02] = %g, want 0.015", got)
	}
	if got := bucketQuantile(0.99, 100, []bucket{{0.5, 0}, {math.Inf(1), 100}}); got != 0.5 {
		t.Errorf("a quantile in +Inf = %g, want the highest finite bound 0.5", got)
	}
}

func TestCounterSum(t *testing.T) {
	f := mustParse(t, `# TYPE apiserver_flowcontrol_rejected_requests_total counter
apiserver_flowcontrol_rejected_requests_total{flow_schema="service-accounts",priority_level="workload-low",reason="queue-full"} 3
apiserver_flowcontrol_rejected_requests_total{flow_schema="global-default",priority_level="global-default",reason="time-out"} 2
`)
	if got := counterSum(f, "apiserver_flowcontrol_rejected_requests_total", nil); got != 5 {
		t.Errorf("sum = %g, want 5", got)
	}
	if got := counterSum(f, "apiserver_flowcontrol_rejected_requests_total", map[string]string{"reason": "time-out"}); got != 2 {
		t.Errorf("sum of time-outs = %g, want 2", got)
	}
	if got := counterSum(f, "missing_total", nil); got != 0 {
		t.Errorf("a missing family sums to %g", got)
	}
}

func TestCounterDeltaBy(t *testing.T) {
	before := mustParse(t, `# TYPE airlock_sandboxapi_requests_total counter
airlock_sandboxapi_requests_total{code="200",endpoint="acquire"} 10
airlock_sandboxapi_requests_total{code="503",endpoint="acquire"} 1
airlock_sandboxapi_requests_total{code="200",endpoint="renew"} 4
`)
	after := mustParse(t, `# TYPE airlock_sandboxapi_requests_total counter
airlock_sandboxapi_requests_total{code="200",endpoint="acquire"} 210
airlock_sandboxapi_requests_total{code="503",endpoint="acquire"} 13
airlock_sandboxapi_requests_total{code="202",endpoint="acquire"} 2
airlock_sandboxapi_requests_total{code="200",endpoint="renew"} 4
`)
	got := counterDeltaBy(before, after, "airlock_sandboxapi_requests_total", "endpoint", "code")
	want := map[string]float64{"acquire 200": 200, "acquire 503": 12, "acquire 202": 2}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("delta (-want +got):\n%s", diff)
	}
}
