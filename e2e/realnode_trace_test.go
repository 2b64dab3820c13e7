//go:build e2e && realnode

package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/airlock-dev/airlock/e2e/internal/jaeger"
	"github.com/airlock-dev/airlock/pkg/recordtrace"
	"github.com/airlock-dev/airlock/pkg/tracing"
)

// The trace collector hack/e2e-node.sh runs on the host for the suite (the real Jaeger, in
// memory) and installs the chart's tracing.endpoint with.
const (
	// envJaegerQuery is the base URL of its query API (on 127.0.0.1, for the test).
	envJaegerQuery = "AIRLOCK_E2E_JAEGER_QUERY"
	// envTracingEndpoint and envTracingProtocol are the chart's tracing.endpoint and
	// tracing.protocol: OTLP on the node's address, where pods reach the host.
	envTracingEndpoint = "AIRLOCK_E2E_TRACING_ENDPOINT"
	envTracingProtocol = "AIRLOCK_E2E_TRACING_PROTOCOL"
)

// traceFile is the file the traced Write writes (file.path of its file.write span: the path as
// the call named it).
const traceFile = "traced.txt"

// TestRealNodeTrace (issue 42 item 1, docs/record.md §1 "One trace"): the trace end to end as a
// platform team runs it, the chart's tracing.endpoint naming a real collector (Jaeger, started on
// the host by hack/e2e-node.sh). A runtime pod acquires a sandbox of a class with egress (the
// egress suite's stand-in internet and gateway) with a traceparent it was given, sampled, and
// sends it in params._meta.traceparent of a Write and of a Bash that reaches an allowed host
// through the gateway (`git ls-remote` of the stand-in git server over HTTPS). Then ONE query of
// Jaeger by that trace id finds: the runtime's span (the test exports it, as a runtime does); the
// Sandbox API's acquire span under it (service airlock-operator; one per request, the client asks
// again while answered 202); the `tools/call Bash` span
// under it (airlock-sandboxd, exported by the leader from the collected record) parenting the
// gateway's allowed `egress git.internet.test` span (airlock-egress); and the `tools/call Write`
// span under it parenting its `file.write` span with the file's path.
func TestRealNodeTrace(t *testing.T) {
	requireRealNode(t)
	query, otlp := jaegerOfTheSuite(t)
	ctx := context.Background()

	// The runtime's own span, exported to the same collector (the root of the trace); its
	// context is what the runtime pod sends.
	runtimeTP, err := tracing.New(ctx, otlp, "airlock-e2e-runtime")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := runtimeTP.Shutdown(sctx); err != nil {
			t.Errorf("the runtime span's exporter: %v", err)
		}
	}()

	f := setUpEgress(t)
	e := newEgressEnv(t, f, "")
	const handle = "online/default"

	turnCtx, turn := runtimeTP.Tracer("e2e-runtime").Start(ctx, "agent turn")
	carrier := propagation.MapCarrier{}
	tracing.Propagator.Inject(turnCtx, carrier)
	tp := carrier.Get("traceparent")
	traceID, runtimeSpan := turn.SpanContext().TraceID().String(), turn.SpanContext().SpanID().String()
	if !turn.SpanContext().IsSampled() || !strings.HasSuffix(tp, "-01") {
		t.Fatalf("the runtime's traceparent %q is not sampled", tp)
	}
	t.Logf("the runtime's traceparent: %s", tp)

	lsRemote := `export GIT_TERMINAL_PROMPT=0 HOME=/cache/home; git ls-remote https://git.internet.test/repo.git 2>&1; echo "exit=$?"`
	steps := []map[string]any{
		step("write", "Write", map[string]any{"file_path": traceFile, "content": "traced\n"}),
		step("egress", "Bash", map[string]any{"command": lsRemote, "timeout": 120000}),
	}
	var res rnSession
	e.runClient(t, "runtime-traced", "session", map[string]any{"api": apiURL(), "namespace": e.ns, "runtime": "agent",
		"session": "traced", "handle": handle, "traceparent": tp, "steps": steps}, 5*time.Minute, &res)
	turn.End()
	if res.Error != "" || res.Phase != "Bound" {
		t.Fatalf("the traced session: %s %s %s", res.Claim, res.Phase, res.Error)
	}
	if c := res.call(t, "write"); c.Err != "" || c.IsError {
		t.Fatalf("Write: err %q isError %v: %q", c.Err, c.IsError, c.Text)
	}
	if c := res.call(t, "egress"); c.Err != "" || c.IsError || !strings.Contains(c.Text, "refs/heads/main") || !strings.Contains(c.Text, "exit=0") {
		t.Fatalf("git ls-remote through the gateway: err %q isError %v: %q", c.Err, c.IsError, c.Text)
	}
	if err := runtimeTP.SDK().ForceFlush(ctx); err != nil {
		t.Fatalf("exporting the runtime's span: %v", err)
	}

	// One query by the trace id, asked again until the operator's and the gateway's batches (and
	// the leader's read of the record) have reached the collector.
	var last string
	err = wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		tr, err := jaeger.Query(ctx, query, traceID)
		if err != nil {
			if ctx.Err() == nil { // not the poll's own deadline: keep what the last answer said
				last = err.Error()
			}
			return false, nil
		}
		ok, why := checkRealNodeTrace(tr, runtimeSpan, e.ns+"/"+res.Claim)
		last = why + "; spans found: " + tr.Summary()
		return ok, nil
	})
	if err != nil {
		// Which programs exported anything at all (none of the operator's or the gateway's: their
		// pods did not reach the collector, or the chart has no tracing.endpoint).
		t.Fatalf("the trace %s in Jaeger (%s/api/traces/%s): %s\nservices Jaeger has spans of: %s", traceID, query, traceID, last, jaeger.Services(query))
	}
	t.Logf("one query of Jaeger by trace id %s found the runtime's span, the acquire, and the Bash and Write calls with the egress and file.write spans under them", traceID)
}

// jaegerOfTheSuite is the query API's base URL and the OTLP endpoint of the collector
// hack/e2e-node.sh started. On a cluster of AIRLOCK_E2E_USE_KUBECONFIG without
// AIRLOCK_E2E_JAEGER_HOST the script starts none (it cannot know the host's address the pods
// reach): the test is skipped, saying so.
func jaegerOfTheSuite(t *testing.T) (string, tracing.Config) {
	t.Helper()
	query, otlp, ok := suiteCollector()
	if !ok {
		if os.Getenv("AIRLOCK_E2E_USE_KUBECONFIG") == "1" {
			t.Skipf("no trace collector: hack/e2e-node.sh starts Jaeger on a cluster of AIRLOCK_E2E_USE_KUBECONFIG only with AIRLOCK_E2E_JAEGER_HOST (an address of this host the pods reach)")
		}
		t.Fatalf("%s and %s unset: run this test with hack/e2e-node.sh, which starts Jaeger on the host and installs the chart with tracing.endpoint", envJaegerQuery, envTracingEndpoint)
	}
	return query, otlp
}

// suiteCollector is the query API's base URL and the OTLP endpoint (every new root sampled) of
// the collector hack/e2e-node.sh started, or ok false when it started none.
func suiteCollector() (query string, otlp tracing.Config, ok bool) {
	query, endpoint := os.Getenv(envJaegerQuery), os.Getenv(envTracingEndpoint)
	if query == "" || endpoint == "" {
		return "", tracing.Config{}, false
	}
	protocol := os.Getenv(envTracingProtocol)
	if protocol == "" {
		protocol = tracing.ProtocolGRPC
	}
	return query, tracing.Config{Endpoint: endpoint, Protocol: protocol, SampleRatio: 1}, true
}

// checkRealNode finds the runtime's span, the trace's root, and under it: an acquire span of the operator, and the Bash
// and Write calls' spans of sandboxd (the claim's); an allowed egress span of the gateway for
// git.internet.test under the Bash call's; a file.write span of traceFile under the Write call's.
func checkRealNodeTrace(tr jaeger.Trace, runtimeSpan, claim string) (bool, string) {
	byName := tr.ByName()
	under := func(name, service string) []int {
		var found []int
		for _, i := range byName[name] {
			if tr.Service(i) == service && tr.Parent(i) == runtimeSpan {
				found = append(found, i)
			}
		}
		return found
	}
	one := func(name, service string) (int, string) {
		found := under(name, service)
		if len(found) != 1 {
			return -1, fmt.Sprintf("%d spans %q of %s under the runtime's span %s, want 1", len(found), name, service, runtimeSpan)
		}
		return found[0], ""
	}
	if r := byName["agent turn"]; len(r) != 1 || tr.Spans[r[0]].SpanID != runtimeSpan || tr.Parent(r[0]) != "" {
		return false, fmt.Sprintf("the runtime's span %s is not the trace's root", runtimeSpan)
	}
	// The client calls acquire again while it is answered 202: one span per request.
	if len(under("acquire", tracing.ServiceOperator)) == 0 {
		return false, fmt.Sprintf("no acquire span of %s under the runtime's span %s", tracing.ServiceOperator, runtimeSpan)
	}
	bash, why := one("tools/call Bash", recordtrace.Service)
	if why != "" {
		return false, why
	}
	write, why := one("tools/call Write", recordtrace.Service)
	if why != "" {
		return false, why
	}
	for _, i := range []int{bash, write} {
		if got := tr.Tag(i, "airlock.claim"); got != claim {
			return false, fmt.Sprintf("the %s span is of claim %q, want %q", tr.Spans[i].OperationName, got, claim)
		}
	}
	egressOK := false
	for _, i := range byName["egress git.internet.test"] {
		if tr.Parent(i) == tr.Spans[bash].SpanID && tr.Service(i) == tracing.ServiceEgress &&
			tr.Tag(i, "airlock.egress.verdict") == "allowed" && tr.Tag(i, "airlock.claim") == claim {
			egressOK = true
		}
	}
	if !egressOK {
		return false, fmt.Sprintf("no allowed %q span of %s for claim %s under the Bash call's span %s", "egress git.internet.test", tracing.ServiceEgress, claim, tr.Spans[bash].SpanID)
	}
	fileOK := false
	for _, i := range byName["file.write"] {
		if tr.Parent(i) == tr.Spans[write].SpanID && tr.Service(i) == recordtrace.Service && tr.Tag(i, "file.path") == traceFile {
			fileOK = true
		}
	}
	if !fileOK {
		return false, fmt.Sprintf("no file.write span of %s under the Write call's span %s", traceFile, tr.Spans[write].SpanID)
	}
	return true, "found"
}
