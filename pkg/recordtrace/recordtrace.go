// Package recordtrace turns the record entries the leader collects from a sandbox into spans of
// the runtime's trace (docs/record.md §1). sandboxd exports nothing (a sandbox reaches nothing):
// it draws each tool call's span id, and the spans of the files and processes of the call, and
// writes them with the trace id and the parent span id into the call's entries (tool.call,
// file.write, process). The leader calls Observe with each entry it appends to a claim's record;
// entries with ids become spans with exactly those ids, their start and end times the entry's,
// exported through the SDK's exporter (batched: Observe never waits for the collector).
package recordtrace

import (
	"context"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.39.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/airlock-dev/airlock/pkg/record"
	"github.com/airlock-dev/airlock/pkg/traceparent"
	"github.com/airlock-dev/airlock/pkg/tracing"
)

// Service is the service.name of the spans of sandboxd's entries: they are sandboxd's spans,
// exported on its behalf.
const Service = "airlock-sandboxd"

// scope is the instrumentation scope of the spans.
var scope = instrumentation.Scope{Name: "airlock.dev/recordtrace"}

// Claim is what the leader knows of the claim whose record an entry is in.
type Claim struct {
	Namespace string
	Name      string
	UID       string
	Runtime   string
}

// Exporter exports record entries as spans. The zero value, and New's when tracing is off,
// exports nothing.
type Exporter struct {
	proc sdktrace.SpanProcessor
	res  *resource.Resource
}

// New returns the exporter of c: nothing when tracing is off, else a batch over c's OTLP
// exporter.
func New(ctx context.Context, c tracing.Config) (*Exporter, error) {
	if !c.Enabled() {
		return &Exporter{}, nil
	}
	exp, err := tracing.NewExporter(ctx, c)
	if err != nil {
		return nil, err
	}
	return NewWithExporter(exp), nil
}

// NewWithExporter returns an exporter over exp, batched (tests give an in-memory exporter and
// call ForceFlush).
func NewWithExporter(exp sdktrace.SpanExporter, opts ...sdktrace.BatchSpanProcessorOption) *Exporter {
	return &Exporter{proc: sdktrace.NewBatchSpanProcessor(exp, opts...), res: resource.NewSchemaless(semconv.ServiceName(Service))}
}

// Observe exports e as a span when it is a tool.call, file.write or process entry that carries
// a trace and a span id; every other entry is left alone. It is the leader's per-entry hook
// (func(ctx, claim, entry)): it does not block on the collector (a full queue drops spans, as the
// SDK's batch does), and it never changes the record.
func (x *Exporter) Observe(ctx context.Context, claim Claim, e record.Entry) {
	if x == nil || x.proc == nil {
		return
	}
	if stub, ok := Span(claim, e); ok {
		stub.Resource = x.res
		x.proc.OnEnd(stub.Snapshot())
	}
}

// ForceFlush exports what is queued.
func (x *Exporter) ForceFlush(ctx context.Context) error {
	if x == nil || x.proc == nil {
		return nil
	}
	return x.proc.ForceFlush(ctx)
}

// Shutdown exports what is queued and stops.
func (x *Exporter) Shutdown(ctx context.Context) error {
	if x == nil || x.proc == nil {
		return nil
	}
	return x.proc.Shutdown(ctx)
}

// Span is the span of an entry, with the entry's ids and times, or ok false for an entry that
// is not a span (another kind, no ids, ids or a time that do not parse).
func Span(claim Claim, e record.Entry) (tracetest.SpanStub, bool) {
	if e.Kind != record.KindToolCall && e.Kind != record.KindFileWrite && e.Kind != record.KindProcess {
		return tracetest.SpanStub{}, false
	}
	traceID, ok1 := traceparent.ParseTraceID(e.Trace)
	spanID, ok2 := traceparent.ParseSpanID(e.Span)
	at, err := time.Parse(time.RFC3339Nano, e.Time)
	if !ok1 || !ok2 || err != nil {
		return tracetest.SpanStub{}, false
	}
	stub := tracetest.SpanStub{
		SpanContext: trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: trace.TraceID(traceID), SpanID: trace.SpanID(spanID), TraceFlags: trace.FlagsSampled,
		}),
		SpanKind:             trace.SpanKindInternal,
		InstrumentationScope: scope,
		Attributes: []attribute.KeyValue{
			attribute.String("airlock.claim", claim.Namespace+"/"+claim.Name),
			attribute.String("airlock.claim.uid", claim.UID),
			attribute.Int64("airlock.record.seq", int64(e.Seq)),
			attribute.Int64("airlock.call", int64(e.Call)),
		},
	}
	if claim.Runtime != "" {
		stub.Attributes = append(stub.Attributes, attribute.String("airlock.runtime", claim.Runtime))
	}
	if parent, ok := traceparent.ParseSpanID(e.Parent); ok {
		stub.Parent = trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: trace.TraceID(traceID), SpanID: trace.SpanID(parent), TraceFlags: trace.FlagsSampled, Remote: true,
		})
	}
	duration := time.Duration(e.DurationMS) * time.Millisecond
	switch e.Kind {
	case record.KindToolCall: // written when the call ends, with the time it started
		stub.Name, stub.SpanKind = "tools/call "+e.Tool, trace.SpanKindServer
		stub.StartTime, stub.EndTime = at, at.Add(duration)
		stub.Attributes = append(stub.Attributes, attribute.String("gen_ai.tool.name", e.Tool),
			attribute.String("airlock.tool.status", e.Status), attribute.String("airlock.tool.args_sha256", e.ArgsSHA256))
		if e.Status != record.StatusOK {
			stub.Status = sdktrace.Status{Code: codes.Error, Description: e.Status}
		}
	case record.KindProcess: // written when the process ends
		stub.Name = "process"
		stub.StartTime, stub.EndTime = at.Add(-duration), at
		stub.Attributes = append(stub.Attributes, attribute.String("process.command_line", strings.Join(e.Argv, " ")))
		if e.Exit != nil {
			stub.Attributes = append(stub.Attributes, attribute.Int("process.exit.code", *e.Exit))
			if *e.Exit != 0 {
				stub.Status = sdktrace.Status{Code: codes.Error, Description: "exit status"}
			}
		}
	case record.KindFileWrite:
		stub.Name = "file.write"
		stub.StartTime, stub.EndTime = at, at
		stub.Attributes = append(stub.Attributes, attribute.String("file.path", e.Path), attribute.String("airlock.file.sha256", e.SHA256))
		if e.Size != nil {
			stub.Attributes = append(stub.Attributes, attribute.Int64("file.size", *e.Size))
		}
	}
	return stub, true
}
