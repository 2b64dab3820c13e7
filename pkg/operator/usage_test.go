package operator

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/record"
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
