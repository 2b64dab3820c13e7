package operator

import (
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/record"
	"github.com/airlock-dev/airlock/pkg/recordtrace"
	"github.com/airlock-dev/airlock/pkg/usage"
)

// TestUsageObserverFeedsTheLedgerByRuntime: what the record controller appends for a claim is
// counted to the claim's namespace and runtime.
func TestUsageObserverFeedsTheLedgerByRuntime(t *testing.T) {
	l := usage.NewLedger(usage.NewMetrics())
	observe := usageObserver(l)
	c := &airlockv1alpha1.SandboxClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "s1", UID: "uid-1"},
		Spec:       airlockv1alpha1.SandboxClaimSpec{RuntimeName: "agent"},
	}
	observe(c, record.Entry{Claim: "uid-1", Seq: 1, Source: record.SourceSandboxd, Boot: "b1", SourceSeq: 1, Kind: record.KindToolCall, Tool: "Read", Status: record.StatusOK})
	observe(c, record.Entry{Claim: "uid-1", Seq: 2, Source: record.SourceSandboxd, Boot: "b1", SourceSeq: 2, Kind: record.KindUsage,
		Usage: &record.Usage{CPUMillis: 1500, ToolCalls: 1}})
	got, _ := l.Snapshot("team-a", "agent")
	if got.CPUMillis != 1500 || got.ToolCalls != 1 || got.Sessions != 1 {
		t.Fatalf("team-a/agent's usage = %+v, want 1500 CPU ms, 1 tool call, 1 session", got)
	}
	if other, _ := l.Snapshot("team-a", "other"); other != (usage.Totals{}) {
		t.Fatal("another runtime of the namespace was counted")
	}
}

// TestSpanObserverExportsTracedEntries: a traced tool call the record controller appends is
// exported as its span, under the claim's attributes; a nil exporter (tracing off) is nothing.
func TestSpanObserverExportsTracedEntries(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	x := recordtrace.NewWithExporter(exp)
	c := &airlockv1alpha1.SandboxClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "s1", UID: "uid-1"},
		Spec:       airlockv1alpha1.SandboxClaimSpec{RuntimeName: "agent"},
	}
	call := record.Entry{Claim: "uid-1", Seq: 1, Source: record.SourceSandboxd, Kind: record.KindToolCall, Call: 1,
		Trace: "4bf92f3577b34da6a3ce929d0e0e4736", Span: "00f067aa0ba902b7", Parent: "a3ce929d0e0e4736",
		Time: record.FormatTime(time.Date(2026, 12, 6, 5, 0, 0, 0, time.UTC)), Tool: "Write", Status: record.StatusOK, DurationMS: 3}
	spanObserver(t.Context(), x)(c, call)
	spanObserver(t.Context(), nil)(c, call)
	if err := x.ForceFlush(t.Context()); err != nil {
		t.Fatal(err)
	}
	spans := exp.GetSpans()
	if len(spans) != 1 || spans[0].SpanContext.SpanID().String() != call.Span || spans[0].SpanContext.TraceID().String() != call.Trace {
		t.Fatalf("exported %d spans (%v), want the call's span %s of trace %s", len(spans), spans, call.Span, call.Trace)
	}
}
