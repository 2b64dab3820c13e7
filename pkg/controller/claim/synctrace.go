package claim

import (
	"context"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	batchv1 "k8s.io/api/batch/v1"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
)

// tracerName names the claim controller's spans (docs/record.md §1).
const tracerName = "github.com/airlock-dev/airlock/pkg/controller/claim"

// SetTracerProvider has the controller export a span for each sync-back (docs/record.md §1),
// under the acquire span the claim's airlock.dev/traceparent names. nil: none (the default).
// Call before Run.
func (c *Controller) SetTracerProvider(tp trace.TracerProvider) {
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	c.tracer = tp.Tracer(tracerName)
}

// traceSyncBack exports the span of one sync-back attempt, job, from its creation to end, as a
// child of the claim's acquire span; failure, when not empty, is its error. A claim whose acquire
// was not traced (no annotation, or one that does not parse) gets none: a sync-back is never a
// new root. It is called once per attempt, where its outcome is first written.
func (c *Controller) traceSyncBack(claim *airlockv1alpha1.SandboxClaim, job *batchv1.Job, end time.Time, failure string) {
	if c.tracer == nil {
		return
	}
	parent := propagation.TraceContext{}.Extract(context.Background(),
		propagation.MapCarrier{"traceparent": claim.Annotations[airlockv1alpha1.AnnotationTraceparent]})
	if sc := trace.SpanContextFromContext(parent); !sc.IsValid() || !sc.IsSampled() {
		return
	}
	attempt, _ := strconv.Atoi(job.Annotations[AnnotationSyncAttempt])
	_, span := c.tracer.Start(parent, "syncback", trace.WithTimestamp(job.CreationTimestamp.Time),
		trace.WithAttributes(
			attribute.String("airlock.claim.namespace", claim.Namespace),
			attribute.String("airlock.claim.name", claim.Name),
			attribute.String("airlock.claim.uid", string(claim.UID)),
			attribute.String("airlock.syncback.job", job.Name),
			attribute.Int("airlock.syncback.attempt", max(attempt, 1)),
			attribute.String("airlock.syncback.target", claim.Spec.TargetPath)))
	if failure != "" {
		span.SetStatus(codes.Error, failure)
	}
	span.End(trace.WithTimestamp(end))
}
