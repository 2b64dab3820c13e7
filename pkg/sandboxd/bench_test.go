package sandboxd

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/sandboxdtest"
	"github.com/airlock-dev/airlock/pkg/toolnames"
)

// benchCalls are the calls the transport benchmarks make: a Read of
// small.txt (benchSmallFile), and `Bash true`.
var benchCalls = []struct {
	name string
	tool string
	args map[string]any
}{
	{name: "Read", tool: toolnames.Read, args: map[string]any{"file_path": "small.txt"}},
	{name: "BashTrue", tool: toolnames.Bash, args: map[string]any{"command": "true"}},
}

// BenchmarkToolCall measures the round trip of a tool call through a real
// sandboxd on a loopback port, with the official Go SDK's clients: for a
// Read of a small file and for `Bash true`, over each transport, with 1 and
// 32 sessions calling at once. It reports the p50 and p99 round trip and the
// calls per second of all sessions together.
//
//	go test -run '^$' -bench BenchmarkToolCall -benchtime 2s ./pkg/sandboxd/
func BenchmarkToolCall(b *testing.B) {
	calls := benchCalls
	for _, transport := range []string{"sse", "streamable"} {
		for _, c := range calls {
			for _, sessions := range []int{1, 32} {
				b.Run(fmt.Sprintf("%s/%s/sessions=%d", transport, c.name, sessions), func(b *testing.B) {
					benchmarkCalls(b, transport, sessions, c.tool, c.args)
				})
			}
		}
	}
}

func benchmarkCalls(b *testing.B, transport string, sessions int, tool string, args map[string]any) {
	ts := startServer(b, Config{}, options{})
	if err := os.WriteFile(filepath.Join(ts.ws, "small.txt"), []byte("package main\n\nfunc main() {}\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	clients := make([]*mcp.ClientSession, sessions)
	for i := range clients {
		if transport == "sse" {
			clients[i] = connectSSE(b, ts.url, nil)
		} else {
			clients[i] = connectStreamable(b, ts.url, nil)
		}
		sandboxdtest.CallOK(b, clients[i], tool, args) // warm up
	}

	var next atomic.Int64
	latencies := make([][]time.Duration, sessions)
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for i, cs := range clients {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				t0 := time.Now()
				res, err := cs.CallTool(b.Context(), &mcp.CallToolParams{Name: tool, Arguments: args})
				latencies[i] = append(latencies[i], time.Since(t0))
				if err != nil || res.IsError {
					b.Errorf("%s: %v %v", tool, err, res)
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()

	all := slices.Concat(latencies...)
	slices.Sort(all)
	if len(all) == 0 {
		return
	}
	pct := func(p float64) time.Duration { return all[min(len(all)-1, int(p*float64(len(all))))] }
	b.ReportMetric(float64(pct(0.50).Microseconds()), "p50-µs")
	b.ReportMetric(float64(pct(0.99).Microseconds()), "p99-µs")
	b.ReportMetric(float64(len(all))/elapsed.Seconds(), "calls/s")
	b.ReportMetric(0, "ns/op") // the figures above say it better
}
