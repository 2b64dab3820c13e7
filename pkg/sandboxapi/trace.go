package sandboxapi

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
)

// tracerName is the instrumentation scope of the Sandbox API's spans.
const tracerName = "airlock.dev/sandboxapi"

// propagator reads a request's W3C traceparent and tracestate: a malformed one is ignored (the
// acquire is a new root), never an error.
var propagator = propagation.TraceContext{}

// newTracer is the tracer of tp, or the no-op one.
func newTracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	return tp.Tracer(tracerName)
}

// withRemoteParent returns ctx with the span context of req's traceparent, if it has a valid one.
func withRemoteParent(ctx context.Context, req *http.Request) context.Context {
	return propagator.Extract(ctx, propagation.HeaderCarrier(req.Header))
}

// traceparentOf is the traceparent of ctx's span when it is sampled (what the claim keeps in
// its annotation), else "".
func traceparentOf(ctx context.Context) string {
	if sc := trace.SpanContextFromContext(ctx); !sc.IsValid() || !sc.IsSampled() {
		return ""
	}
	carrier := propagation.MapCarrier{}
	propagator.Inject(ctx, carrier)
	return carrier.Get("traceparent")
}

// acquireTrace is one acquire's spans (docs/record.md §1): "acquire", and its children as this
// replica's cache shows the claim's phases while the acquire waits for Bound (the waiters wake
// it on each of the claim's events): "admission.wait" from the claim's creation (or the
// acquire's start, if later) to the leader's decision, "binding" from then to Bound, and
// "isolation.evidence" (what the leader verified before Bound) when the claim is Bound. A span
// ends when the cache shows the next phase, or with the acquire (an answer 202 leaves the rest
// to the next acquire of the handle).
type acquireTrace struct {
	tracer    trace.Tracer
	now       func() time.Time
	ctx       context.Context // the acquire span's
	span      trace.Span
	admission trace.Span
	binding   trace.Span
	admitted  bool // the decision was seen: no admission.wait from now on
	evidence  bool
}

// startAcquire starts the acquire span under ctx's (remote) parent.
func (s *Server) startAcquire(ctx context.Context) (context.Context, *acquireTrace) {
	ctx, span := s.tracer.Start(ctx, "acquire", trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(s.clock.Now()))
	return ctx, &acquireTrace{tracer: s.tracer, now: s.clock.Now, ctx: ctx, span: span}
}

// observe follows the claim c (owned by the acquire's runtime) to its phase now.
func (t *acquireTrace) observe(c *airlockv1alpha1.SandboxClaim) {
	if t == nil || !t.span.IsRecording() {
		return
	}
	now := t.now()
	t.span.SetAttributes(attribute.String("airlock.claim", c.Namespace+"/"+c.Name), attribute.String("airlock.claim.uid", string(c.UID)))
	switch c.Status.Phase {
	case "", airlockv1alpha1.ClaimPending, airlockv1alpha1.ClaimQueued:
		if t.admission == nil && !t.admitted {
			start := c.CreationTimestamp.Time
			if start.IsZero() || start.Before(t.startTime()) {
				start = t.startTime()
			}
			_, t.admission = t.tracer.Start(t.ctx, "admission.wait", trace.WithTimestamp(start))
		}
		if c.Status.Phase == airlockv1alpha1.ClaimQueued && t.admission != nil {
			t.admission.SetAttributes(attribute.String("airlock.reason", c.Status.Reason))
		}
	case airlockv1alpha1.ClaimBinding:
		t.decided(now, "admitted")
		if t.binding == nil {
			_, t.binding = t.tracer.Start(t.ctx, "binding", trace.WithTimestamp(now))
		}
	case airlockv1alpha1.ClaimBound:
		t.decided(now, "admitted")
		if t.binding != nil {
			t.binding.End(trace.WithTimestamp(now))
			t.binding = nil
		}
		if iso := c.Status.Isolation; iso != nil && !t.evidence {
			t.evidence = true
			_, ev := t.tracer.Start(t.ctx, "isolation.evidence", trace.WithTimestamp(now), trace.WithAttributes(
				attribute.String("airlock.isolation.kernel", iso.Kernel),
				attribute.String("airlock.isolation.runtime", iso.Runtime),
				attribute.String("airlock.isolation.evidence_sha256", iso.EvidenceDigest),
				attribute.Bool("airlock.isolation.attested", iso.Attestation != nil)))
			ev.End(trace.WithTimestamp(now))
		}
	case airlockv1alpha1.ClaimRefused, airlockv1alpha1.ClaimFailed:
		t.decided(now, string(c.Status.Phase))
		if t.binding != nil {
			t.binding.SetStatus(codes.Error, c.Status.Reason)
			t.binding.End(trace.WithTimestamp(now))
			t.binding = nil
		}
	}
}

// decided ends admission.wait, the decision seen at now.
func (t *acquireTrace) decided(now time.Time, decision string) {
	t.admitted = true
	if t.admission == nil {
		return
	}
	t.admission.SetAttributes(attribute.String("airlock.admission.decision", decision))
	if decision != "admitted" {
		t.admission.SetStatus(codes.Error, decision)
	}
	t.admission.End(trace.WithTimestamp(now))
	t.admission = nil
}

// end ends the acquire's spans with its answer.
func (t *acquireTrace) end(status int, err error) {
	now := t.now()
	for _, open := range []trace.Span{t.admission, t.binding} {
		if open != nil {
			open.SetAttributes(attribute.Bool("airlock.unfinished", true))
			open.End(trace.WithTimestamp(now))
		}
	}
	t.span.SetAttributes(attribute.Int("http.response.status_code", status))
	if err != nil {
		t.span.SetStatus(codes.Error, err.Error())
	} else if status >= 400 {
		t.span.SetStatus(codes.Error, fmt.Sprint(status))
	}
	t.span.End(trace.WithTimestamp(now))
}

// startTime is when the acquire started (the span's start, which the SDK does not expose).
func (t *acquireTrace) startTime() time.Time {
	if ro, ok := t.span.(interface{ StartTime() time.Time }); ok {
		return ro.StartTime()
	}
	return t.now()
}
