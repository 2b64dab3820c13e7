package recordtrace

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/airlock-dev/airlock/pkg/record"
	"github.com/airlock-dev/airlock/pkg/tracing"
)

var tracingOff = tracing.Config{}

const (
	traceID    = "4bf92f3577b34da6a3ce929d0e0e4736"
	callerSpan = "00f067aa0ba902b7"
	callSpan   = "b7ad6b7169203331"
	fileSpan   = "1111111111111111"
	procSpan   = "2222222222222222"
)

var claim = Claim{Namespace: "team-a", Name: "c1", UID: "uid-1", Runtime: "agent"}

func size(n int64) *int64 { return &n }
func exit(n int) *int     { return &n }

// TestEntriesBecomeSpansWithTheirIDs: a tool.call, its file.write and its process become spans
// with exactly the entries' trace, span and parent ids, the call's from its start for its
// duration, the process's ending at its entry's time; entries of other kinds, or without ids,
// are not spans.
func TestEntriesBecomeSpansWithTheirIDs(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	x := NewWithExporter(exp)
	start := time.Date(2026, 12, 6, 4, 0, 0, 0, time.UTC)
	entries := []record.Entry{
		{Seq: 1, Kind: record.KindSandboxBoot, Time: record.FormatTime(start)},
		{Seq: 2, Kind: record.KindFileWrite, Call: 1, Trace: traceID, Span: fileSpan, Parent: callSpan, Time: record.FormatTime(start.Add(time.Millisecond)), Path: "a.txt", Size: size(3), SHA256: "ab"},
		{Seq: 3, Kind: record.KindProcess, Call: 1, Trace: traceID, Span: procSpan, Parent: callSpan, Time: record.FormatTime(start.Add(9 * time.Millisecond)), Argv: []string{"/bin/bash", "-c", "exit 2"}, Exit: exit(2), DurationMS: 5},
		{Seq: 4, Kind: record.KindToolCall, Call: 1, Trace: traceID, Span: callSpan, Parent: callerSpan, Time: record.FormatTime(start), Tool: "Bash", Status: record.StatusOK, DurationMS: 10},
		{Seq: 5, Kind: record.KindToolCall, Call: 2, Time: record.FormatTime(start), Tool: "Read", Status: record.StatusOK},     // not traced
		{Seq: 6, Kind: record.KindToolCall, Call: 3, Trace: "zz", Span: callSpan, Time: record.FormatTime(start), Tool: "Read"}, // ids that do not parse
	}
	for _, e := range entries {
		x.Observe(context.Background(), claim, e)
	}
	if err := x.ForceFlush(t.Context()); err != nil {
		t.Fatal(err)
	}
	spans := exp.GetSpans()
	if len(spans) != 3 {
		t.Fatalf("%d spans, want 3 (the traced call, its file, its process)", len(spans))
	}
	byName := map[string]tracetest.SpanStub{}
	for _, s := range spans {
		byName[s.Name] = s
		if s.SpanContext.TraceID().String() != traceID || !s.SpanContext.IsSampled() {
			t.Errorf("span %q trace %s sampled %v", s.Name, s.SpanContext.TraceID(), s.SpanContext.IsSampled())
		}
		if s.Resource == nil || s.Resource.String() != "service.name="+Service {
			t.Errorf("span %q resource %v", s.Name, s.Resource)
		}
	}
	call, file, proc := byName["tools/call Bash"], byName["file.write"], byName["process"]
	if call.SpanContext.SpanID().String() != callSpan || call.Parent.SpanID().String() != callerSpan ||
		!call.StartTime.Equal(start) || call.EndTime.Sub(call.StartTime) != 10*time.Millisecond {
		t.Errorf("call span %s parent %s %v..%v", call.SpanContext.SpanID(), call.Parent.SpanID(), call.StartTime, call.EndTime)
	}
	if file.SpanContext.SpanID().String() != fileSpan || file.Parent.SpanID().String() != callSpan || !hasAttr(file, "file.path", "a.txt") {
		t.Errorf("file span %s parent %s attrs %v", file.SpanContext.SpanID(), file.Parent.SpanID(), file.Attributes)
	}
	if proc.SpanContext.SpanID().String() != procSpan || proc.Parent.SpanID().String() != callSpan ||
		!proc.EndTime.Equal(start.Add(9*time.Millisecond)) || !proc.StartTime.Equal(start.Add(4*time.Millisecond)) || proc.Status.Code != codes.Error {
		t.Errorf("process span %s parent %s %v..%v status %v", proc.SpanContext.SpanID(), proc.Parent.SpanID(), proc.StartTime, proc.EndTime, proc.Status)
	}
	if !hasAttr(call, "airlock.claim", "team-a/c1") || !hasAttr(call, "airlock.claim.uid", "uid-1") {
		t.Errorf("call attributes %v", call.Attributes)
	}
}

func TestOffExportsNothing(t *testing.T) {
	x, err := New(t.Context(), tracingOff)
	if err != nil {
		t.Fatal(err)
	}
	x.Observe(t.Context(), claim, record.Entry{Kind: record.KindToolCall, Trace: traceID, Span: callSpan, Time: record.FormatTime(time.Now())})
	if err := x.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	var zero *Exporter
	zero.Observe(t.Context(), claim, record.Entry{})
}

func hasAttr(s tracetest.SpanStub, key, value string) bool {
	for _, a := range s.Attributes {
		if string(a.Key) == key && a.Value.Emit() == value {
			return true
		}
	}
	return false
}
