package agentruntime

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	airlockfake "github.com/airlock-dev/airlock/pkg/generated/clientset/versioned/fake"
	airlockinformers "github.com/airlock-dev/airlock/pkg/generated/informers/externalversions"
	"github.com/airlock-dev/airlock/pkg/record"
	"github.com/airlock-dev/airlock/pkg/usage"
)

// usageFixture is a controller over one runtime whose status the fake clientset keeps, with a
// ledger, a fake clock and a recording queue; refresh puts the last write into the cache.
type usageFixture struct {
	t      *testing.T
	ctx    context.Context
	client *airlockfake.Clientset
	c      *Controller
	clk    *clocktesting.FakeClock
	queue  *recordingQueue
	ledger *usage.Ledger
	cache  cache.Indexer
	rv     int
}

func newUsageFixture(t *testing.T, rt *airlockv1alpha1.AgentRuntime, clk *clocktesting.FakeClock) *usageFixture {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	client := airlockfake.NewClientset(rt)
	factory := airlockinformers.NewSharedInformerFactory(client, 0)
	a := factory.Airlock().V1alpha1()
	c, err := newControllerWithClock(ctx, client, a.AgentRuntimes(), a.ToolRegistries(), a.SandboxClasses(), a.SandboxClaims(), newJobInformer(), clk)
	if err != nil {
		t.Fatal(err)
	}
	c.queue.ShutDown()
	f := &usageFixture{t: t, ctx: ctx, client: client, c: c, clk: clk, queue: &recordingQueue{TypedRateLimitingInterface: c.queue}, ledger: usage.NewLedger(nil),
		cache: a.AgentRuntimes().Informer().GetIndexer(), rv: 10}
	c.queue = f.queue
	c.SetUsageSource(f.ledger)
	for inf, o := range map[cache.SharedIndexInformer]any{
		a.AgentRuntimes().Informer():  rt,
		a.ToolRegistries().Informer(): registryObj(airlockv1alpha1.RegistrySandbox{Name: "codegen", Class: "codegen"}),
		a.SandboxClasses().Informer(): &airlockv1alpha1.SandboxClass{ObjectMeta: metav1.ObjectMeta{Name: "codegen"}},
	} {
		if err := inf.GetIndexer().Add(o); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// sync syncs the runtime with the API's object in the cache (as its update event would have
// put it) and returns the status.usage the API holds after, and whether the sync wrote it.
func (f *usageFixture) sync() (*airlockv1alpha1.RuntimeUsage, bool) {
	f.t.Helper()
	get := func() *airlockv1alpha1.AgentRuntime {
		rt, err := f.client.AirlockV1alpha1().AgentRuntimes("ns").Get(f.ctx, "agent", metav1.GetOptions{})
		if err != nil {
			f.t.Fatal(err)
		}
		return rt
	}
	rt := get()
	f.rv++
	rt.ResourceVersion = fmt.Sprint(f.rv)
	if err := f.cache.Update(rt); err != nil {
		f.t.Fatal(err)
	}
	before := len(f.client.Actions())
	if err := f.c.sync(f.ctx, cache.MetaObjectToName(rt)); err != nil {
		f.t.Fatal(err)
	}
	wrote := false
	for _, act := range f.client.Actions()[before:] {
		if act.GetVerb() == "update" && act.GetSubresource() == "status" {
			wrote = true
		}
	}
	return get().Status.Usage, wrote
}

// observe feeds the ledger the claim's entries as the record controller's hook would.
func (f *usageFixture) observe(claimUID string, entries ...record.Entry) {
	for _, e := range entries {
		f.ledger.Observe("ns", "agent", claimUID, e)
	}
}

func usageEntry(seq, sourceSeq uint64, cpuMillis int64) record.Entry {
	return record.Entry{Seq: seq, Source: record.SourceSandboxd, Boot: "b1", SourceSeq: sourceSeq, Kind: record.KindUsage,
		Usage: &record.Usage{CPUMillis: cpuMillis, ToolCalls: int64(sourceSeq)}}
}

func ptrTime(t time.Time) *metav1.Time { m := metav1.NewTime(t); return &m }

// TestUsageWrittenAtMostOnceAMinuteAndCarriedAcrossALeaderChange: status.usage starts from what
// the status carries (a former leader's sums), adds what the ledger observes, is written at
// most once a minute (a sync within the minute puts it off to the minute's end), and a new
// leader's controller with a fresh ledger carries it on without counting a live claim twice.
func TestUsageWrittenAtMostOnceAMinuteAndCarriedAcrossALeaderChange(t *testing.T) {
	rt := runtimeObj()
	rt.ResourceVersion = "10"
	rt.Status.Usage = &airlockv1alpha1.RuntimeUsage{CPUMillis: 5000, ToolCalls: 10, Sessions: 2, UpdateTime: ptrTime(t0.Add(-2 * time.Minute))}
	clk := clocktesting.NewFakeClock(t0)
	f := newUsageFixture(t, rt, clk)
	f.observe("c1", record.Entry{Seq: 1, Source: record.SourceOperator, Kind: record.KindClaimPhase, Phase: "Bound"},
		record.Entry{Seq: 2, Source: record.SourceSandboxd, Boot: "b1", SourceSeq: 1, Kind: record.KindSandboxBoot},
		usageEntry(3, 2, 1000))
	got, wrote := f.sync()
	want := &airlockv1alpha1.RuntimeUsage{CPUMillis: 6000, ToolCalls: 12, Sessions: 3, UpdateTime: ptrTime(t0)}
	if diff := cmp.Diff(want, got); diff != "" || !wrote {
		t.Fatalf("first write (wrote %v), -want +got:\n%s", wrote, diff)
	}
	if n := len(f.queue.afters); n == 0 || f.queue.afters[n-1] != usagePeriod {
		t.Errorf("looked at again after %v, want %v", f.queue.afters, usagePeriod)
	}

	f.observe("c1", usageEntry(4, 3, 1500))
	clk.Step(20 * time.Second)
	got, wrote = f.sync()
	if wrote || got.CPUMillis != 6000 {
		t.Errorf("within the minute: wrote %v, cpu %d; want no write", wrote, got.CPUMillis)
	}
	if n := len(f.queue.afters); f.queue.afters[n-1] != 40*time.Second {
		t.Errorf("put off by %v, want the rest of the minute (40s)", f.queue.afters[n-1])
	}
	clk.Step(40 * time.Second)
	if got, wrote = f.sync(); !wrote || got.CPUMillis != 6500 || got.ToolCalls != 13 {
		t.Errorf("at the minute: wrote %v, usage %+v; want cpu 6500, 13 tool calls", wrote, got)
	}
	clk.Step(time.Minute)
	if _, wrote = f.sync(); wrote {
		t.Error("written again with nothing new")
	}

	// The leader changes: a fresh controller and ledger. The record controller resumes c1's
	// record past its start; its boot counts from the first figure seen on (1600), so its
	// 6500 already in the status are not counted again.
	f2 := newUsageFixture(t, func() *airlockv1alpha1.AgentRuntime {
		cur, err := f.client.AirlockV1alpha1().AgentRuntimes("ns").Get(f.ctx, "agent", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return cur
	}(), clk)
	f2.observe("c1", usageEntry(6, 5, 1600), usageEntry(7, 6, 1900))
	clk.Step(time.Minute)
	got, wrote = f2.sync()
	want = &airlockv1alpha1.RuntimeUsage{CPUMillis: 6500 + 300, ToolCalls: 14, Sessions: 3, UpdateTime: ptrTime(clk.Now())}
	if diff := cmp.Diff(want, got); diff != "" || !wrote {
		t.Errorf("after the leader's change (wrote %v), -want +got:\n%s", wrote, diff)
	}
}

// TestNoUsageSourceLeavesUsageAlone: without a ledger the controller neither writes nor clears
// status.usage, nor looks at the runtime again on its account.
func TestNoUsageSourceLeavesUsageAlone(t *testing.T) {
	rt := runtimeObj()
	rt.ResourceVersion = "10"
	kept := &airlockv1alpha1.RuntimeUsage{CPUMillis: 5000, UpdateTime: ptrTime(t0)}
	rt.Status.Usage = kept
	f := newUsageFixture(t, rt, clocktesting.NewFakeClock(t0))
	f.c.usage = nil
	got, _ := f.sync()
	if diff := cmp.Diff(kept, got); diff != "" || len(f.queue.afters) != 0 {
		t.Errorf("status.usage -kept +got:\n%s; AddAfter %v", diff, f.queue.afters)
	}
}
