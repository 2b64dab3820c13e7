//go:build e2e && realnode

package e2e

// What a kernel of its own costs (issue 38 item 6; docs/isolation.md, "Measured"; `make
// bench-node` prints it): the codegen class in the -go image under runc and under gVisor, side
// by side on the real node: a cold acquire to the first tool result, a warm one, a go build and
// a go test of a small module, and what reading and signing the evidence adds to bind (the
// operator's histogram of it). Figures only: nothing here asserts a time.

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
)

// isolationCostSessions is how many sessions each cold and warm figure is taken over.
const isolationCostSessions = 10

// benchResult is runtimeclient's BenchResult, as far as these figures read it.
type benchResult struct {
	AcquireMillis     []float64 `json:"acquireMillis"`
	FirstResultMillis []float64 `json:"firstResultMillis"`
	Error             string    `json:"error"`
}

// TestRealNodeIsolationCost: cold and warm acquire → first tool result, go build and go test,
// under runc and under gVisor; every session is Bound and answers (under gVisor its class needs a
// kernel of its own, so each is proven one before Bound).
func TestRealNodeIsolationCost(t *testing.T) {
	requireRealNode(t)
	type figures struct {
		cold, warm             benchResult
		build, rebuild, gotest float64
		reads                  histogramTotals
	}
	runtimes := []struct {
		name, runtimeClass string
		isolation          *airlockv1alpha1.SandboxIsolation
	}{
		{"runc", "", nil},
		{"gVisor", "gvisor", dedicatedKernel},
	}
	got := map[string]*figures{}
	for _, rt := range runtimes {
		f := &figures{}
		got[rt.name] = f
		before := isolationReads(t)
		cold := newRealnodeEnv(t, "airlock-rn-cost-"+strings.ToLower(rt.name), realnodeOptions{
			maxConcurrent: 4, maxPerSession: 1, maxInstances: 8, codegenImage: realnodeSandboxGoImage(),
			codegenRuntimeClass: rt.runtimeClass, codegenIsolation: rt.isolation, startupTimeout: 4 * time.Minute,
		})
		f.cold = runCostBench(t, cold, "cold", 0)
		after := isolationReads(t)
		f.reads = after.minus(before)
		if f.reads.count < isolationCostSessions {
			t.Errorf("%s: the operator counted %.0f evidence reads for %d cold sessions", rt.name, f.reads.count, isolationCostSessions)
		}
		f.build, f.rebuild, f.gotest = buildTimes(t, cold)

		warm := newRealnodeEnv(t, "airlock-rn-costw-"+strings.ToLower(rt.name), realnodeOptions{
			maxConcurrent: 4, maxPerSession: 1, maxInstances: 8, warm: 2, codegenImage: realnodeSandboxGoImage(),
			codegenRuntimeClass: rt.runtimeClass, codegenIsolation: rt.isolation, startupTimeout: 4 * time.Minute,
		})
		ce := &claimEnv{ns: warm.ns, runtime: &airlockv1alpha1.AgentRuntime{Spec: airlockv1alpha1.AgentRuntimeSpec{ToolRegistryRef: airlockv1alpha1.LocalObjectReference{Name: "tools"}}}}
		ce.waitWarm(t, 2, 5*time.Minute)
		// A gap between sessions lets the pool refill: each session adopts a member.
		hitsBefore := isolationReads(t).warmHits
		f.warm = runCostBench(t, warm, "warm", 4000)
		if hits := isolationReads(t).warmHits - hitsBefore; hits != isolationCostSessions {
			t.Errorf("%s: %.0f of the %d warm sessions adopted a member", rt.name, hits, isolationCostSessions)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "what a kernel of its own costs on this node (%d sessions each, the -go image; ms):\n", isolationCostSessions)
	fmt.Fprintf(&b, "%-28s %22s %22s %8s\n", "", "runc", "gVisor", "ratio")
	row := func(name string, r, g float64) {
		fmt.Fprintf(&b, "%-28s %22.0f %22.0f %7.2fx\n", name, r, g, g/r)
	}
	r, g := got["runc"], got["gVisor"]
	for _, p := range []struct {
		name string
		q    float64
	}{{"p50", 0.5}, {"p90", 0.9}} {
		row("cold acquire→result "+p.name, percentile(r.cold.FirstResultMillis, p.q), percentile(g.cold.FirstResultMillis, p.q))
	}
	for _, p := range []struct {
		name string
		q    float64
	}{{"p50", 0.5}, {"p90", 0.9}} {
		row("warm acquire→result "+p.name, percentile(r.warm.FirstResultMillis, p.q), percentile(g.warm.FirstResultMillis, p.q))
	}
	row("go build (cold cache)", r.build, g.build)
	row("go build (again)", r.rebuild, g.rebuild)
	row("go test", r.gotest, g.gotest)
	row("evidence read+sign p50 ≤", r.reads.quantileMillis(0.5), g.reads.quantileMillis(0.5))
	row("evidence read+sign p90 ≤", r.reads.quantileMillis(0.9), g.reads.quantileMillis(0.9))
	row("evidence read+sign mean", 1000*r.reads.sum/r.reads.count, 1000*g.reads.sum/g.reads.count)
	fmt.Fprintf(&b, "(read+sign: airlock_claim_isolation_read_seconds over %.0f runc and %.0f gVisor reads, its quantiles as their buckets' upper bounds; goals: ≤ 50 ms p50 added to bind, gVisor cold p50 ≤ 1.5× runc's)\n", r.reads.count, g.reads.count)
	t.Log(b.String())
}

// runCostBench runs isolationCostSessions sessions one after another in e (acquire, connect, a
// Bash echo, close), gapMillis apart, and fails the test on any error.
func runCostBench(t *testing.T, e *realnodeEnv, session string, gapMillis int) benchResult {
	t.Helper()
	var res benchResult
	plan := map[string]any{"api": apiURL(), "namespace": e.ns, "runtime": "agent", "session": session, "handle": "codegen/default",
		"sessions": isolationCostSessions, "gapMillis": gapMillis}
	e.runClient(t, "bench-"+session, "bench", plan, 15*time.Minute, &res)
	if res.Error != "" || len(res.FirstResultMillis) != isolationCostSessions {
		t.Fatalf("%s in %s: %d sessions measured, %s", session, e.ns, len(res.FirstResultMillis), res.Error)
	}
	return res
}

// buildTimes writes a small module in a sandbox of e and times a go build with the cache in the
// scratch volume (cold), the build again, and go test.
func buildTimes(t *testing.T, e *realnodeEnv) (build, rebuild, gotest float64) {
	t.Helper()
	const mainGo = "package main\n\nimport \"fmt\"\n\nfunc greet(name string) string { return \"hello \" + name }\n\nfunc main() { fmt.Println(greet(\"agent\")) }\n"
	const testGo = "package main\n\nimport \"testing\"\n\nfunc TestGreet(t *testing.T) {\n\tif greet(\"x\") != \"hello x\" {\n\t\tt.Fatal(greet(\"x\"))\n\t}\n}\n"
	plan := map[string]any{"api": apiURL(), "namespace": e.ns, "runtime": "agent", "session": "build", "handle": "codegen/default", "close": true,
		"steps": []map[string]any{
			step("gomod", "Write", map[string]any{"file_path": "go.mod", "content": "module example.com/hello\n\ngo 1.24\n"}),
			step("main", "Write", map[string]any{"file_path": "main.go", "content": mainGo}),
			step("test", "Write", map[string]any{"file_path": "main_test.go", "content": testGo}),
			step("build", "Bash", map[string]any{"command": "go build -o /cache/hello . && /cache/hello", "timeout": 240000}),
			step("rebuild", "Bash", map[string]any{"command": "touch main.go && go build -o /cache/hello . && /cache/hello", "timeout": 240000}),
			step("gotest", "Bash", map[string]any{"command": "go test ./... 2>&1 | tail -1", "timeout": 240000}),
		}}
	var res rnSession
	e.runClient(t, "runtime-build", "session", plan, 10*time.Minute, &res)
	if res.Error != "" || res.Phase != "Bound" {
		t.Fatalf("build session in %s: %s %s", e.ns, res.Phase, res.Error)
	}
	for _, s := range []struct{ name, want string }{{"build", "hello agent"}, {"rebuild", "hello agent"}, {"gotest", "ok"}} {
		if c := res.call(t, s.name); c.Err != "" || c.IsError || !strings.Contains(c.Text, s.want) {
			t.Fatalf("%s in %s: err %q isError %v: %q, want %q", s.name, e.ns, c.Err, c.IsError, c.Text, s.want)
		}
	}
	return res.call(t, "build").Millis, res.call(t, "rebuild").Millis, res.call(t, "gotest").Millis
}

// scrapesTaken names scraper pods apart (runPodToEnd leaves them): isolationReads', and
// checkEgressMetrics' in the egress suite's two runs.
var scrapesTaken atomic.Int32

// histogramTotals is a histogram's observations added up over the operator's replicas, and the
// warm adoptions that hit.
type histogramTotals struct {
	sum, count, warmHits float64
	buckets              map[float64]float64 // upper bound (s) → cumulative count
}

// minus is h's observations since before.
func (h histogramTotals) minus(before histogramTotals) histogramTotals {
	d := histogramTotals{sum: h.sum - before.sum, count: h.count - before.count, warmHits: h.warmHits - before.warmHits, buckets: map[float64]float64{}}
	for le, n := range h.buckets {
		d.buckets[le] = n - before.buckets[le]
	}
	return d
}

// quantileMillis is the upper bound (ms) of the bucket that holds the q quantile: the quantile
// is at most that.
func (h histogramTotals) quantileMillis(q float64) float64 {
	les := slices.Sorted(maps.Keys(h.buckets))
	for _, le := range les {
		if h.buckets[le] >= q*h.count {
			return 1000 * le
		}
	}
	return math.Inf(1)
}

// isolationReads scrapes every operator replica (from the namespace `monitoring`, which the
// operator's NetworkPolicy admits) for airlock_claim_isolation_read_seconds.
func isolationReads(t *testing.T) histogramTotals {
	t.Helper()
	ctx := context.Background()
	mon := monitoringNamespace(t)
	var urls []string
	for _, p := range operatorPods(t, ctx) {
		urls = append(urls, fmt.Sprintf("http://%s:8080/metrics", p.Status.PodIP))
	}
	scrapes, err := runScraper(ctx, mon, fmt.Sprintf("scrape-isolation-%d", scrapesTaken.Add(1)), urls, nil, 60)
	if err != nil {
		t.Fatal(err)
	}
	h := histogramTotals{buckets: map[float64]float64{}}
	for _, u := range urls {
		f := scrapes[u].Families["airlock_claim_isolation_read_seconds"]
		h.sum += f.HistogramSum
		h.count += f.HistogramCount
		for le, n := range f.Buckets {
			v, err := strconv.ParseFloat(le, 64)
			if err != nil {
				t.Fatalf("bucket %q: %v", le, err)
			}
			if h.buckets == nil {
				h.buckets = map[float64]float64{}
			}
			h.buckets[v] += n
		}
		h.warmHits += scrapes[u].Families["airlock_warm_adoptions_total"].Counters["result=hit"]
	}
	return h
}
