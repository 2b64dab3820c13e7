//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/airlock-dev/airlock/e2e/internal/jaeger"
	"github.com/airlock-dev/airlock/e2e/internal/tracecheck"
	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/client"
	"github.com/airlock-dev/airlock/pkg/tracing"
)

// The trace under the fault suite's faults on the API-only plane (docs/record.md §1, "Faults"):
// the sync-back spans of claims reaped across a leader kill (TestRecordLeaderFailover), and the
// acquire spans of requests answered across a stalled API server (TestRecordAPIServerStall),
// each found in the real Jaeger (e2e/internal/jaeger) by one query of its trace id.

// testRuntimeService is the service.name of the spans the tests export as a runtime would.
const testRuntimeService = "airlock-e2e-runtime"

// operatorTracingArgs are the flags of an operator that exports its spans to collector (OTLP over
// gRPC), as the chart's tracing.endpoint sets them.
func operatorTracingArgs(collector jaeger.Collector) []string {
	return []string{"--tracing-endpoint=" + collector.OTLPGRPC, "--tracing-protocol=" + tracing.ProtocolGRPC}
}

// runtimeTraces is a runtime's own spans, sampled and exported to the collector: the parents the
// operator's spans must join.
type runtimeTraces struct {
	tp *tracing.Provider
}

// otlpOf is the OTLP endpoint of collector (over gRPC), every new root sampled.
func otlpOf(collector jaeger.Collector) tracing.Config {
	return tracing.Config{Endpoint: collector.OTLPGRPC, Protocol: tracing.ProtocolGRPC, SampleRatio: 1}
}

func newRuntimeTraces(t *testing.T, otlp tracing.Config) *runtimeTraces {
	t.Helper()
	tp, err := tracing.New(context.Background(), otlp, testRuntimeService)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := tp.Shutdown(ctx); err != nil {
			t.Errorf("the runtime spans' exporter: %v", err)
		}
	})
	return &runtimeTraces{tp: tp}
}

// start starts a root span, sampled, and returns it with its W3C traceparent.
func (r *runtimeTraces) start(t *testing.T, name string) (trace.Span, string) {
	t.Helper()
	ctx, span := r.tp.Tracer("e2e-runtime").Start(context.Background(), name)
	carrier := propagation.MapCarrier{}
	tracing.Propagator.Inject(ctx, carrier)
	tp := carrier.Get("traceparent")
	if !span.SpanContext().IsSampled() || !strings.HasSuffix(tp, "-01") {
		t.Fatalf("the runtime's traceparent %q is not sampled", tp)
	}
	return span, tp
}

// flush exports the runtime's ended spans now.
func (r *runtimeTraces) flush(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.tp.SDK().ForceFlush(ctx); err != nil {
		t.Fatalf("exporting the runtime's spans: %v", err)
	}
}

// traceCheck judges one query's answer for a trace: ok, or why not (yet).
type traceCheck func(tr jaeger.Trace) (ok bool, why string)

// waitTraces queries each trace by its id until its check passes or timeout has passed for all
// (spans reach Jaeger in the exporters' batches, seconds after they end); it returns why each
// trace that never passed did not, with the spans of the last answer.
func waitTraces(query string, checks map[string]traceCheck, timeout time.Duration) map[string]string {
	pending := map[string]string{}
	for id := range checks {
		pending[id] = "not queried"
	}
	_ = wait.PollUntilContextTimeout(context.Background(), time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		for id := range pending {
			tr, err := jaeger.Query(ctx, query, id)
			if err != nil {
				if ctx.Err() == nil {
					pending[id] = err.Error()
				}
				continue
			}
			ok, why := checks[id](tr)
			if ok {
				delete(pending, id)
				continue
			}
			pending[id] = why + "; spans: " + tr.Summary()
		}
		return len(pending) == 0, nil
	})
	return pending
}

// syncBackSpans checks a claim's trace: the root span (the stand-in of the acquire span whose
// traceparent the claim carries) and under it, parented on it, the claim's "syncback" spans of
// the operator as tracecheck.SyncBacks requires them (one per attempt: a span exported by both
// leaders would show here as an attempt twice); and no other span. It returns the indexes of the
// syncback spans by attempt.
func syncBackSpans(tr jaeger.Trace, root, claimUID string) ([]int, string) {
	if i := tr.Find(root); i < 0 || tr.Parent(i) != "" || tr.Service(i) != testRuntimeService {
		return nil, fmt.Sprintf("the root span %s is not in the trace", root)
	}
	for i, s := range tr.Spans {
		if s.SpanID != root && (s.OperationName != "syncback" || tr.Service(i) != tracing.ServiceOperator) {
			return nil, fmt.Sprintf("span %s %q of %s: only the operator's syncback spans belong in this trace", s.SpanID, s.OperationName, tr.Service(i))
		}
	}
	spans, _, why := tracecheck.SyncBacks(tr, claimUID, func(p string) bool { return p == root }, false)
	return spans, why
}

// tracedAcquire is one acquire request of the Sandbox API made under its own span (the caller's):
// what it was answered, and when.
type tracedAcquire struct {
	session    string
	traceID    string
	caller     string // the caller's span id
	sent       time.Time
	answered   time.Time
	status     int // the HTTP status; 0: no answer
	err        error
	answerText string
}

// tracedAcquires makes acquire requests, each under a root span of its own sent in its
// traceparent header, and keeps what each was answered.
type tracedAcquires struct {
	op     *apiOperator
	token  string
	traces *runtimeTraces
	ns     string
	wg     sync.WaitGroup
	mu     sync.Mutex
	done   []*tracedAcquire
}

// start sends one acquire (once: no call again on 202) of session's codegen/default, waiting at
// most 20 s for Bound, in a goroutine.
func (a *tracedAcquires) start(t *testing.T, session string) {
	t.Helper()
	span, tp := a.traces.start(t, "acquire "+session)
	r := &tracedAcquire{session: session, traceID: span.SpanContext().TraceID().String(), caller: span.SpanContext().SpanID().String()}
	hc := &http.Client{Transport: &headerRoundTripper{header: "traceparent", value: tp, base: a.op.httpClient.Transport}}
	c := client.New(a.op.apiURL, staticToken(a.token), hc)
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		defer span.End()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		r.sent = time.Now()
		resp, status, err := c.AcquireOnce(ctx, client.AcquireRequest{Namespace: a.ns, Runtime: "agent", Session: session, Handle: "codegen/default", WaitSeconds: waitSeconds(20)})
		r.answered, r.status, r.err = time.Now(), status, err
		var apiErr *client.APIError
		if errors.As(err, &apiErr) {
			r.status = apiErr.Status
		}
		if resp != nil {
			r.answerText = resp.Claim + " " + resp.Phase
		}
		a.mu.Lock()
		a.done = append(a.done, r)
		a.mu.Unlock()
	}()
}

// wait waits for every request's answer (or error), and returns them by session.
func (a *tracedAcquires) wait() []*tracedAcquire {
	a.wg.Wait()
	a.mu.Lock()
	defer a.mu.Unlock()
	out := slices.Clone(a.done)
	sort.Slice(out, func(i, j int) bool { return out[i].session < out[j].session })
	return out
}

// headerRoundTripper sets one header on every request.
type headerRoundTripper struct {
	header, value string
	base          http.RoundTripper
}

func (h *headerRoundTripper) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(h.header, h.value)
	base := h.base
	if base == nil {
		base = http.DefaultTransport
	}
	return base.RoundTrip(r)
}

// syncedBack lists, by claim UID, the claims whose sync-back outcome the leader had written when
// it was killed: gone already, synced back (condition SyncBack True), or a failed attempt
// counted. The killed leader exported those attempts' spans in its batch, which a SIGKILL may have
// cut short (docs/record.md §1, "Faults").
func syncedBack(t *testing.T, ns string, created []*airlockv1alpha1.SandboxClaim) map[string]bool {
	t.Helper()
	list, err := airlockClient.AirlockV1alpha1().SandboxClaims(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	live := map[string]*airlockv1alpha1.SandboxClaim{}
	for i := range list.Items {
		live[string(list.Items[i].UID)] = &list.Items[i]
	}
	out := map[string]bool{}
	for _, c := range created {
		cur, ok := live[string(c.UID)]
		if !ok || meta.IsStatusConditionTrue(cur.Status.Conditions, airlockv1alpha1.ConditionSyncBack) || cur.Annotations[airlockv1alpha1.AnnotationSyncFailures] != "" {
			out[string(c.UID)] = true
		}
	}
	return out
}

// checkFailoverTraces: after TestRecordLeaderFailover's claims were reaped, each claim's trace
// holds its syncback spans as syncBackSpans says, found by one query of the trace id. A claim
// whose sync-back outcome only the killed leader wrote (syncedAtKill) may lack that attempt's
// span (lost with the leader's unexported batch): said, not failed. At least one claim must have
// been synced back under the new leader (its span exported by it), or the failover was not
// under test for the trace.
func checkFailoverTraces(t *testing.T, collector jaeger.Collector, traces *runtimeTraces, created []*airlockv1alpha1.SandboxClaim,
	roots map[string]trace.SpanContext, syncedAtKill map[string]bool, killedAt time.Time) {
	t.Helper()
	traces.flush(t)
	checks := map[string]traceCheck{}
	found := map[string][]string{} // trace id -> what its syncback spans were, for the log
	claimOf := map[string]*airlockv1alpha1.SandboxClaim{}
	var mu sync.Mutex
	for _, c := range created {
		root := roots[string(c.UID)]
		id := root.TraceID().String()
		claimOf[id] = c
		checks[id] = func(tr jaeger.Trace) (bool, string) {
			spans, why := syncBackSpans(tr, root.SpanID().String(), string(c.UID))
			if why != "" {
				return false, why
			}
			var seen []string
			for _, i := range spans {
				when := "after the kill"
				switch {
				case tr.End(i).Before(killedAt):
					when = "before the kill"
				case tr.Start(i).Before(killedAt):
					when = "across the kill"
				}
				seen = append(seen, fmt.Sprintf("attempt %s failed=%v %s..%s (%s)", tr.Tag(i, "airlock.syncback.attempt"), tr.Failed(i),
					tr.Start(i).Format("15:04:05.000"), tr.End(i).Format("15:04:05.000"), when))
			}
			mu.Lock()
			found[id] = seen
			mu.Unlock()
			return true, ""
		}
	}
	failed := waitTraces(collector.Query, checks, 2*time.Minute)
	underNew := 0
	for _, c := range created {
		id := roots[string(c.UID)].TraceID().String()
		why, bad := failed[id]
		switch {
		case bad && syncedAtKill[string(c.UID)]:
			t.Logf("claim %s: synced back by the killed leader; its span is not in trace %s (lost with its batch): %s", c.Name, id, why)
		case bad:
			t.Errorf("claim %s (synced back by the new leader): trace %s in Jaeger (%s/api/traces/%s): %s", c.Name, id, collector.Query, id, why)
		case syncedAtKill[string(c.UID)]:
			t.Logf("claim %s: synced back by the killed leader; trace %s: %v", c.Name, id, found[id])
		default:
			underNew++
			t.Logf("claim %s: synced back by the new leader; trace %s: %v", c.Name, id, found[id])
		}
	}
	if underNew == 0 {
		t.Errorf("no claim's sync-back ran under the new leader with its span found: the failover was not under test for the trace")
	}
}

// checkStallTraces: the acquires of TestRecordAPIServerStall were each answered (the stall is
// shorter than their wait), at least one of them was in flight while the API server was stopped
// (sent before it was resumed, answered after), and each has, in one query of its trace id, its
// acquire span under the caller's span saying the status the caller got (acquireSpanOf): exported
// late, once the API server answered, and none lost.
func checkStallTraces(t *testing.T, collector jaeger.Collector, traces *runtimeTraces, acquires []*tracedAcquire, resumedAt time.Time) {
	t.Helper()
	traces.flush(t)
	checks := map[string]traceCheck{}
	across := 0
	for _, r := range acquires {
		if r.status == 0 {
			t.Errorf("acquire of session %s: no answer: %v", r.session, r.err)
			continue
		}
		if r.sent.Before(resumedAt) && r.answered.After(resumedAt) {
			across++
		}
		t.Logf("acquire of session %s: sent %s, answered %d at %s (%s %v); the API server resumed at %s; trace %s",
			r.session, r.sent.Format("15:04:05.000"), r.status, r.answered.Format("15:04:05.000"), r.answerText, r.err, resumedAt.Format("15:04:05.000"), r.traceID)
		checks[r.traceID] = func(tr jaeger.Trace) (bool, string) { return tracecheck.Acquire(tr, r.caller, r.status) }
	}
	if across == 0 {
		t.Errorf("no acquire was in flight across the stall (sent before the API server resumed, answered after)")
	}
	for id, why := range waitTraces(collector.Query, checks, 2*time.Minute) {
		t.Errorf("trace %s in Jaeger (%s/api/traces/%s): %s", id, collector.Query, id, why)
	}
}
