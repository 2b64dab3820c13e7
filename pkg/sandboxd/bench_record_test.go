package sandboxd

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-dev/airlock/pkg/record"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/recordlog"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/sandboxdtest"
	"github.com/airlock-dev/airlock/pkg/toolnames"
)

// recordBenchCalls are the calls of BenchmarkRecordOverhead: a Read of a small file (one
// tool.call entry) and a Write of one (a file.write entry and a tool.call entry).
var recordBenchCalls = []struct {
	name    string
	tool    string
	args    map[string]any
	entries int // the entries one call adds to the record
}{
	{name: "Read", tool: toolnames.Read, args: map[string]any{"file_path": "small.txt"}, entries: 1},
	{name: "Write", tool: toolnames.Write, args: map[string]any{"file_path": "written.txt", "content": "package main\n\nfunc main() {}\n"}, entries: 2},
}

// benchClaimUID is the claim the benchmark's record is chained for: a UID's length, as every
// stored entry carries it.
const benchClaimUID = "6f1c2a4e-0d3b-4c1e-9a57-3b1f0c2d4e5f"

// BenchmarkRecordOverhead measures what the session record (docs/record.md) costs a tool call
// (issue 42 item 4, docs/record.md §4): a Read of a small file and a Write of one, through a
// real sandboxd on a loopback port with the official Go SDK's clients, over each transport,
// one call after another, with the record (record=on: every sandboxd runs so) and without it
// (record=off: options.withoutRecord, a baseline only the package's tests can build). It
// reports the p50 and p99 round trip and, with the record, the bytes one call adds to it:
// record-bytes/call as the operator stores them (sandboxd's entries taken by pkg/record's
// Collector, chained and signed, as JSON lines) and log-bytes/call as sandboxd keeps them in
// its memory (the JSON lines of GET /record). With tracing=on each call carries a sampled
// traceparent in its _meta (docs/record.md §1): sandboxd reads it, draws the call's span (and
// its file's), and writes the ids into the entries (tracing rides in the record: there is no
// tracing without it, and sandboxd exports nothing, so this is all tracing costs a call).
//
//	go test -run '^$' -bench BenchmarkRecordOverhead -benchtime 10000x ./pkg/sandboxd/
func BenchmarkRecordOverhead(b *testing.B) {
	for _, transport := range []string{"sse", "streamable"} {
		for _, c := range recordBenchCalls {
			for _, mode := range []struct{ record, tracing bool }{{false, false}, {true, false}, {true, true}} {
				name := fmt.Sprintf("%s/%s/record=%s/tracing=%s", transport, c.name, onOff(mode.record), onOff(mode.tracing))
				b.Run(name, func(b *testing.B) {
					benchmarkRecord(b, transport, mode.record, mode.tracing, c.tool, c.args, c.entries)
				})
			}
		}
	}
}

func onOff(on bool) string {
	if on {
		return "on"
	}
	return "off"
}

// benchTraceparent is the caller's context of the tracing=on calls: sampled.
const benchTraceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

func benchmarkRecord(b *testing.B, transport string, on, tracing bool, tool string, args map[string]any, entries int) {
	opts := defaultOptions()
	opts.withoutRecord = !on
	// Room for every call's entries: past its bound the log counts entries instead of keeping
	// them, which is not what is measured (a gap below fails the benchmark).
	opts.recordBytes = max(recordlog.DefaultMaxBytes, (b.N+2)*entries*2048)
	ts := startServer(b, Config{}, opts)
	if err := os.WriteFile(filepath.Join(ts.ws, "small.txt"), []byte("package main\n\nfunc main() {}\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	var cs *mcp.ClientSession
	if transport == "sse" {
		cs = connectSSE(b, ts.url, nil)
	} else {
		cs = connectStreamable(b, ts.url, nil)
	}
	sandboxdtest.CallOK(b, cs, tool, args) // warm up
	var before [][]byte
	if on {
		before = recordLines(b, ts.url, 0)
	}

	var meta mcp.Meta
	if tracing {
		meta = mcp.Meta{"traceparent": benchTraceparent}
	}
	latencies := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		res, err := cs.CallTool(b.Context(), &mcp.CallToolParams{Meta: meta, Name: tool, Arguments: args})
		latencies = append(latencies, time.Since(t0))
		if err != nil || res.IsError {
			b.Fatalf("%s: %v %v", tool, err, res)
		}
	}
	b.StopTimer()

	slices.Sort(latencies)
	pct := func(p float64) time.Duration { return latencies[min(len(latencies)-1, int(p*float64(len(latencies))))] }
	b.ReportMetric(float64(pct(0.50))/1e3, "p50-µs")
	b.ReportMetric(float64(pct(0.99))/1e3, "p99-µs")
	if on {
		logBytes, stored := recordBytes(b, ts.url, before, b.N, entries, tracing)
		b.ReportMetric(float64(logBytes)/float64(b.N), "log-bytes/call")
		b.ReportMetric(float64(stored)/float64(b.N), "record-bytes/call")
	}
}

// recordBytes reads the entries the n timed calls added to the log after the lines before, and
// returns their bytes as GET /record serves them and as the operator stores them: taken after
// before by a Collector into a chain signed with a test key. It fails unless the calls added
// exactly n×perCall entries, n of them tool.call entries, and no gap, each with trace ids when
// traced and none otherwise.
func recordBytes(b *testing.B, url string, before [][]byte, n, perCall int, traced bool) (logBytes, stored int) {
	b.Helper()
	var e record.Entry
	if err := json.Unmarshal(before[len(before)-1], &e); err != nil {
		b.Fatal(err)
	}
	added := recordLines(b, url, e.SourceSeq)
	if len(added) != n*perCall {
		b.Fatalf("%d calls added %d entries to the log, want %d", n, len(added), n*perCall)
	}
	priv, err := record.SigningKey([]byte(strings.Repeat("k", 32)))
	if err != nil {
		b.Fatal(err)
	}
	signer, err := record.NewSigner(priv)
	if err != nil {
		b.Fatal(err)
	}
	chain, err := record.NewChain(benchClaimUID, signer)
	if err != nil {
		b.Fatal(err)
	}
	col := record.NewCollector(chain, time.Now, "", 0)
	for _, line := range before {
		if _, err := col.Take(line); err != nil {
			b.Fatal(err)
		}
	}
	calls := 0
	for _, line := range added {
		logBytes += len(line) + 1
		taken, err := col.Take(line)
		if err != nil {
			b.Fatal(err)
		}
		for _, e := range taken {
			if e.Kind == record.KindRecordGap {
				b.Fatalf("a gap in the record: %s", e.Message)
			}
			if e.Kind == record.KindToolCall {
				calls++
			}
			if (e.Trace != "") != traced {
				b.Fatalf("entry %s carries trace %q with tracing=%s", e.Kind, e.Trace, onOff(traced))
			}
			l, err := e.Line()
			if err != nil {
				b.Fatal(err)
			}
			stored += len(l) + 1
		}
	}
	if calls != n {
		b.Fatalf("%d calls added %d tool.call entries", n, calls)
	}
	return logBytes, stored
}

// recordLines reads GET /record?after=<after> (the benchmark's server has no token) and returns
// its JSON lines.
func recordLines(b *testing.B, url string, after uint64) [][]byte {
	b.Helper()
	resp, err := http.Get(fmt.Sprintf("%s%s?after=%d", url, recordlog.Path, after))
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b.Fatalf("GET %s = %d", recordlog.Path, resp.StatusCode)
	}
	var lines [][]byte
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		lines = append(lines, slices.Clone(sc.Bytes()))
	}
	if err := sc.Err(); err != nil {
		b.Fatal(err)
	}
	return lines
}
