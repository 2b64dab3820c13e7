package sandboxd

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
	mcpgoserver "github.com/mark3labs/mcp-go/server"

	"github.com/airlock-dev/airlock/pkg/toolnames"
)

// benchSmallFile is the small file both servers Read in the side-by-side
// benchmark.
const benchSmallFile = "package main\n\nfunc main() {}\n"

// sideBySideRounds is how many interleaved rounds BenchmarkSideBySide runs:
// each round calls sandboxd and then the mcp-go server (the order flips from
// one round to the next), so that a change of load on a shared machine
// weighs on both alike; the more rounds, the more alike.
const sideBySideRounds = 20

// BenchmarkSideBySide measures sandboxd against a standalone mark3labs/mcp-go
// HTTP+SSE server that serves the same tool, in the same run, with the same
// client (the official Go SDK's SSE client, one session per server): a Read
// of a small file and `Bash true`. b.N calls go to each server, in
// interleaved rounds. It reports p50, p90 and p99 round trips and calls per
// second for each server, and the ratios sandboxd/mcp-go (calls/s: above 1
// is sandboxd faster; p90: below 1 is sandboxd faster).
//
// "process" runs each server in a process of its own, as they run for real
// (and as issue 15 measured them): sandboxd is the binary of the sandbox
// images (-tags sandboxd_only), the mcp-go server this test binary
// (TestMain). "inprocess" serves both in the benchmark's process, which
// shares one garbage collector with the client, and whose -cpuprofile
// covers sandboxd.
//
//	go test -run '^$' -bench BenchmarkSideBySide -benchtime 4000x ./pkg/sandboxd/
func BenchmarkSideBySide(b *testing.B) {
	calls := benchCalls
	root, err := moduleRoot()
	if err != nil {
		b.Fatal(err)
	}
	b.Run("process", func(b *testing.B) {
		bin := buildAirlock(b, root, "-tags", "sandboxd_only")
		for _, c := range calls {
			b.Run(c.name, func(b *testing.B) {
				ws := benchWorkspace(b)
				sd := startSandboxdProcess(b, bin, ws)
				b.Cleanup(func() { sd.stop(b) })
				mgURL, mgPID := startMCPGoProcess(b, ws)
				sideBySide(b, sd.url, mgURL, sd.pid, mgPID, c.tool, c.args)
			})
		}
	})
	b.Run("inprocess", func(b *testing.B) {
		for _, c := range calls {
			b.Run(c.name, func(b *testing.B) {
				ws := benchWorkspace(b)
				ts := startServer(b, Config{Workspace: ws}, options{})
				sideBySide(b, ts.url, startMCPGoServer(b, ws), 0, 0, c.tool, c.args)
			})
		}
	})
}

// benchWorkspace returns a fresh workspace with benchSmallFile in it, as
// small.txt.
func benchWorkspace(b testing.TB) string {
	b.Helper()
	ws := filepath.Join(b.TempDir(), "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "small.txt"), []byte(benchSmallFile), 0o644); err != nil {
		b.Fatal(err)
	}
	return ws
}

// sideBySide calls tool b.N times on the sandboxd at ourURL and on the
// mcp-go server at theirURL, in interleaved rounds, and reports the figures.
// With their process ids (not 0), it reports the CPU time each server
// process spent per call too, a figure that a busy machine disturbs far
// less than round trips.
func sideBySide(b *testing.B, ourURL, theirURL string, ourPID, theirPID int, tool string, args map[string]any) {
	sd := &contender{label: "sandboxd", c: sdkCaller{connectSSE(b, ourURL, nil)}, stats: callStats{pid: ourPID}}
	mg := &contender{label: "mcpgo", c: sdkCaller{connectSSE(b, theirURL, nil)}, stats: callStats{pid: theirPID}}
	compareServers(b, []*contender{sd, mg}, tool, args)
	if mg.stats.callsPerSecond() > 0 && mg.stats.pct(0.90) > 0 {
		b.ReportMetric(sd.stats.callsPerSecond()/mg.stats.callsPerSecond(), "ratio-calls/s")
		b.ReportMetric(float64(sd.stats.pct(0.90))/float64(mg.stats.pct(0.90)), "ratio-p90")
	}
	if sd.stats.pid != 0 && mg.stats.pid != 0 && mg.stats.cpu > 0 {
		b.ReportMetric(float64(sd.stats.cpu)/float64(mg.stats.cpu), "ratio-cpu/call")
	}
	b.ReportMetric(0, "ns/op") // the figures above say it better
}

// contender is one server (and transport) of a side-by-side run: the
// client that calls it and its figures.
type contender struct {
	label string
	c     benchCaller
	stats callStats
}

// compareServers calls tool b.N times on each contender, in interleaved
// rounds (the order turns by one from a round to the next, so that a
// change of load on a shared machine weighs on all alike), after checking
// that they all answer alike and warming them up, and reports each one's
// figures under its label.
func compareServers(b *testing.B, all []*contender, tool string, args map[string]any) {
	want := callerOK(b, all[0], tool, args)
	for _, c := range all[1:] {
		if got := callerOK(b, c, tool, args); got != want {
			b.Fatalf("%s answers %q, %s %q: the comparison would mean nothing", all[0].label, want, c.label, got)
		}
	}
	warm := max(b.N/10, 50)
	for range warm {
		for _, c := range all {
			callerOK(b, c, tool, args)
		}
	}
	rounds := min(sideBySideRounds, b.N)
	b.ResetTimer()
	for r := range rounds {
		n := b.N / rounds
		if r < b.N%rounds {
			n++
		}
		for i := range all {
			c := all[(i+r)%len(all)]
			c.stats.run(b, c.c, n, tool, args)
		}
	}
	b.StopTimer()
	for _, c := range all {
		c.stats.report(b, c.label+"-")
	}
}

// callerOK makes one call of c and returns its text; a failure ends the
// benchmark.
func callerOK(b *testing.B, c *contender, tool string, args map[string]any) string {
	b.Helper()
	text, isError, err := c.c.callTool(b.Context(), tool, args)
	if err != nil || isError {
		b.Fatalf("%s: %s(%v): %v %s", c.label, tool, args, err, text)
	}
	return text
}

// startMCPGoProcess runs the standalone mcp-go server for ws in a process
// of its own (this test binary, see TestMain) and returns its URL and
// process id. The process ends with the benchmark.
func startMCPGoProcess(b *testing.B, ws string) (string, int) {
	b.Helper()
	return startServerProcess(b, "the mcp-go server", mcpgoServerEnv+"="+ws)
}

// startServerProcess runs this test binary as a server (TestMain picks which by env), waits for
// the URL it prints, and returns it and the process id. The process ends with the benchmark: its
// stdin is closed, and it is killed if it does not stop.
func startServerProcess(b *testing.B, what string, env ...string) (string, int) {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	exited := make(chan error, 1)
	url := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		url <- strings.TrimSpace(line)
		_, _ = io.Copy(io.Discard, stdout)
		exited <- cmd.Wait()
	}()
	b.Cleanup(func() {
		stdin.Close() // the server's signal to stop
		timeout := time.NewTimer(testTimeout)
		defer timeout.Stop()
		select {
		case err := <-exited:
			if err != nil {
				b.Errorf("%s: %v", what, err)
			}
		case <-timeout.C:
			b.Errorf("%s did not stop: killed", what)
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	u := <-url
	if !strings.HasPrefix(u, "http://") {
		b.Fatalf("%s did not say where it listens (%q)", what, u)
	}
	return u, cmd.Process.Pid
}

// callStats collects the round trips of one server's calls and, when the
// server is a process of its own (pid), the CPU time it spent on them.
type callStats struct {
	latencies []time.Duration
	elapsed   time.Duration
	pid       int
	cpu       time.Duration
}

// run makes n calls one after the other on cs.
func (s *callStats) run(b *testing.B, c benchCaller, n int, tool string, args map[string]any) {
	var cpu0 time.Duration
	if s.pid != 0 {
		cpu0 = processCPU(b, s.pid)
		defer func() { s.cpu += processCPU(b, s.pid) - cpu0 }()
	}
	start := time.Now()
	for range n {
		t0 := time.Now()
		text, isError, err := c.callTool(b.Context(), tool, args)
		s.latencies = append(s.latencies, time.Since(t0))
		if err != nil || isError {
			b.Fatalf("%s: %v %s", tool, err, text)
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

// processCPU returns the CPU time (user and system) that process pid has
// used, to the clock tick (10 ms).
func processCPU(b *testing.B, pid int) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// The fields after the command name, which is in parentheses and may
	// hold spaces: state is the 3rd field of the line, utime the 14th.
	f := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))
	if len(f) < 13 {
		b.Fatalf("/proc/%d/stat: %q", pid, data)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		b.Fatalf("/proc/%d/stat: %q", pid, data)
	}
	const clockTick = 10 * time.Millisecond // USER_HZ is 100 on Linux
	return time.Duration(utime+stime) * clockTick
}

func (s *callStats) report(b *testing.B, prefix string) {
	b.ReportMetric(float64(s.pct(0.50).Microseconds()), prefix+"p50-µs")
	b.ReportMetric(float64(s.pct(0.90).Microseconds()), prefix+"p90-µs")
	b.ReportMetric(float64(s.pct(0.99).Microseconds()), prefix+"p99-µs")
	b.ReportMetric(s.callsPerSecond(), prefix+"calls/s")
	if s.pid != 0 && len(s.latencies) > 0 {
		b.ReportMetric(float64(s.cpu.Microseconds())/float64(len(s.latencies)), prefix+"cpu-µs/call")
	}
}

// startMCPGoServer serves the standalone mcp-go server in this process, on
// a loopback port, and returns its URL.
func startMCPGoServer(b testing.TB, ws string) string {
	b.Helper()
	h, closeRoot, err := newMCPGoServer(ws)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(closeRoot)
	hs := httptest.NewServer(h)
	b.Cleanup(hs.Close)
	return hs.URL
}

// mcpgoServerEnv names the workspace when the test binary runs as the
// standalone mcp-go server (TestMain): out of the benchmark's process, as
// sandboxd's own binary is.
const mcpgoServerEnv = "AIRLOCK_BENCH_MCPGO_SERVER"

// runMCPGoServer serves the standalone mcp-go server for the workspace ws
// on a loopback port, prints its URL on stdout, and serves until stdin is
// closed (the benchmark ends) or SIGTERM.
func runMCPGoServer(ws string) int {
	h, closeRoot, err := newMCPGoServer(ws)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mcp-go server:", err)
		return 1
	}
	defer closeRoot()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "mcp-go server:", err)
		return 1
	}
	hs := &http.Server{Handler: h}
	go func() { _ = hs.Serve(ln) }()
	fmt.Printf("http://%s\n", ln.Addr())
	waitForBenchEnd()
	_ = hs.Close()
	return 0
}

// waitForBenchEnd returns when this process, a server of the benchmark's, is told to stop: its
// stdin is closed (the benchmark ends) or SIGTERM.
func waitForBenchEnd() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		stop()
	}()
	<-ctx.Done()
}

// newMCPGoServer is a standalone mark3labs/mcp-go server (HTTP+SSE, and
// Streamable HTTP on mcpgoStreamablePath and mcpgoStatelessPath) with a
// Read and a Bash that answer as sandboxd's do (for the benchmark's inputs):
// Read numbers the lines of a file of ws, opened through an os.Root so that
// it stays inside; Bash runs /bin/bash -c in ws, in its own process group.
func newMCPGoServer(ws string) (http.Handler, func(), error) {
	root, err := os.OpenRoot(ws)
	if err != nil {
		return nil, nil, err
	}
	s := mcpgoserver.NewMCPServer("mcp-go-bench", "v0", mcpgoserver.WithToolCapabilities(false))
	s.AddTool(mcpgo.NewTool(toolnames.Read, mcpgo.WithString("file_path", mcpgo.Required())),
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
	s.AddTool(mcpgo.NewTool(toolnames.Bash, mcpgo.WithString("command", mcpgo.Required())),
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
	mux := http.NewServeMux()
	mux.Handle("/", mcpgoserver.NewSSEServer(s)) // /sse and /message
	mux.Handle(mcpgoStreamablePath, mcpgoserver.NewStreamableHTTPServer(s))
	mux.Handle(mcpgoStatelessPath, mcpgoserver.NewStreamableHTTPServer(s, mcpgoserver.WithStateLess(true)))
	return mux, func() { root.Close() }, nil
}

// Where the standalone mcp-go server serves Streamable HTTP: with sessions
// (2025-11-25 and before, its default), and stateless (2026-07-28).
const (
	mcpgoStreamablePath = "/mcp"
	mcpgoStatelessPath  = "/mcp-stateless"
)
