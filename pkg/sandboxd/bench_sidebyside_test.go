package sandboxd

import (
	"bufio"
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
	mcpgoserver "github.com/mark3labs/mcp-go/server"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// benchSmallFile is the small file both servers Read in the side-by-side
// benchmark.
const benchSmallFile = "package main\n\nfunc main() {}\n"

// sideBySideRounds is how many interleaved rounds BenchmarkSideBySide runs:
// each round calls sandboxd and then the mcp-go server (the order flips from
// one round to the next), so that a change of load on a shared machine
// weighs on both alike.
const sideBySideRounds = 4

// BenchmarkSideBySide measures sandboxd against a standalone mark3labs/mcp-go
// HTTP+SSE server that serves the same tool, in the same run, with the same
// client (the official Go SDK's SSE client, one session per server): a Read
// of a small file and `Bash true`. b.N calls go to each server, in
// interleaved rounds. It reports p50, p90 and p99 round trips and calls per
// second for each server, and the ratios sandboxd/mcp-go (calls/s: above 1
// is sandboxd faster; p90: below 1 is sandboxd faster).
//
//	go test -run '^$' -bench BenchmarkSideBySide -benchtime 4000x ./pkg/sandboxd/
func BenchmarkSideBySide(b *testing.B) {
	calls := []struct {
		name string
		tool string
		args map[string]any
	}{
		{name: "Read", tool: ToolRead, args: map[string]any{"file_path": "small.txt"}},
		{name: "BashTrue", tool: ToolBash, args: map[string]any{"command": "true"}},
	}
	for _, c := range calls {
		b.Run(c.name, func(b *testing.B) {
			ts := startServer(b, Config{}, options{})
			if err := os.WriteFile(filepath.Join(ts.ws, "small.txt"), []byte(benchSmallFile), 0o644); err != nil {
				b.Fatal(err)
			}
			ours := connectSSE(b, ts.url, nil)
			theirs := connectSSE(b, startMCPGoServer(b, ts.ws), nil)
			// The two answer alike, or the comparison means nothing.
			if a, o := callOK(b, ours, c.tool, c.args), callOK(b, theirs, c.tool, c.args); a != o {
				b.Fatalf("sandboxd answers %q, the mcp-go server %q", a, o)
			}
			warm := max(b.N/10, 50)
			for range warm {
				callOK(b, ours, c.tool, c.args)
				callOK(b, theirs, c.tool, c.args)
			}

			var sd, mg callStats
			rounds := min(sideBySideRounds, b.N)
			b.ResetTimer()
			for r := range rounds {
				n := b.N / rounds
				if r < b.N%rounds {
					n++
				}
				first, second := &sd, &mg
				cs1, cs2 := ours, theirs
				if r%2 == 1 {
					first, second, cs1, cs2 = &mg, &sd, theirs, ours
				}
				first.run(b, cs1, n, c.tool, c.args)
				second.run(b, cs2, n, c.tool, c.args)
			}
			b.StopTimer()
			sd.report(b, "sandboxd-")
			mg.report(b, "mcpgo-")
			if mg.callsPerSecond() > 0 && mg.pct(0.90) > 0 {
				b.ReportMetric(sd.callsPerSecond()/mg.callsPerSecond(), "ratio-calls/s")
				b.ReportMetric(float64(sd.pct(0.90))/float64(mg.pct(0.90)), "ratio-p90")
			}
			b.ReportMetric(0, "ns/op") // the figures above say it better
		})
	}
}

// callStats collects the round trips of one server's calls.
type callStats struct {
	latencies []time.Duration
	elapsed   time.Duration
}

// run makes n calls one after the other on cs.
func (s *callStats) run(b *testing.B, cs *mcp.ClientSession, n int, tool string, args map[string]any) {
	start := time.Now()
	for range n {
		t0 := time.Now()
		res, err := cs.CallTool(b.Context(), &mcp.CallToolParams{Name: tool, Arguments: args})
		s.latencies = append(s.latencies, time.Since(t0))
		if err != nil || res.IsError {
			b.Fatalf("%s: %v %v", tool, err, res)
		}
	}
	s.elapsed += time.Since(start)
}

func (s *callStats) pct(p float64) time.Duration {
	if len(s.latencies) == 0 {
		return 0
	}
	all := slices.Sorted(slices.Values(s.latencies))
	return all[min(len(all)-1, int(p*float64(len(all))))]
}

func (s *callStats) callsPerSecond() float64 {
	if s.elapsed <= 0 {
		return 0
	}
	return float64(len(s.latencies)) / s.elapsed.Seconds()
}

func (s *callStats) report(b *testing.B, prefix string) {
	b.ReportMetric(float64(s.pct(0.50).Microseconds()), prefix+"p50-µs")
	b.ReportMetric(float64(s.pct(0.90).Microseconds()), prefix+"p90-µs")
	b.ReportMetric(float64(s.pct(0.99).Microseconds()), prefix+"p99-µs")
	b.ReportMetric(s.callsPerSecond(), prefix+"calls/s")
}

// startMCPGoServer serves a standalone mark3labs/mcp-go HTTP+SSE server on a
// loopback port, with a Read and a Bash that answer as sandboxd's do (for
// the benchmark's inputs): Read numbers the lines of a file of ws, opened
// through an os.Root so that it stays inside; Bash runs /bin/bash -c in ws,
// in its own process group. It returns the server's URL.
func startMCPGoServer(b *testing.B, ws string) string {
	b.Helper()
	root, err := os.OpenRoot(ws)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { root.Close() })
	s := mcpgoserver.NewMCPServer("mcp-go-bench", "v0", mcpgoserver.WithToolCapabilities(false))
	s.AddTool(mcpgo.NewTool(ToolRead, mcpgo.WithString("file_path", mcpgo.Required())),
		func(_ context.Context, req mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
			path, err := req.RequireString("file_path")
			if err != nil {
				return mcpgo.NewToolResultError(err.Error()), nil
			}
			f, err := root.Open(path)
			if err != nil {
				return mcpgo.NewToolResultError(err.Error()), nil
			}
			defer f.Close()
			var out strings.Builder
			sc := bufio.NewScanner(f)
			for n := 1; sc.Scan(); n++ {
				fmt.Fprintf(&out, "%6d\t%s\n", n, sc.Text())
			}
			if err := sc.Err(); err != nil {
				return mcpgo.NewToolResultError(err.Error()), nil
			}
			return mcpgo.NewToolResultText(out.String()), nil
		})
	s.AddTool(mcpgo.NewTool(ToolBash, mcpgo.WithString("command", mcpgo.Required())),
		func(ctx context.Context, req mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
			command, err := req.RequireString("command")
			if err != nil {
				return mcpgo.NewToolResultError(err.Error()), nil
			}
			cmd := exec.CommandContext(ctx, "/bin/bash", "-c", command)
			cmd.Dir = ws
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			out, err := cmd.CombinedOutput()
			if err != nil {
				return mcpgo.NewToolResultError(fmt.Sprintf("%s%v", out, err)), nil
			}
			if len(out) == 0 {
				return mcpgo.NewToolResultText("[no output; exit code 0]"), nil // as sandboxd says it
			}
			return mcpgo.NewToolResultText(string(out)), nil
		})
	hs := httptest.NewServer(mcpgoserver.NewSSEServer(s))
	b.Cleanup(hs.Close)
	return hs.URL
}
