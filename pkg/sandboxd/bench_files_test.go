package sandboxd

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/confine"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/sandboxdtest"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/wsscan"
	"github.com/airlock-dev/airlock/pkg/toolnames"
)

// benchScanFiles is the workspace of BenchmarkBashCallScan: 200 directories of 100 files.
const benchScanDirs, benchScanFilesPerDir = 200, 100

// BenchmarkBashCallScan measures what the scan of the workspace after a call's processes
// (docs/record.md §2.3) adds to a Bash call on a large workspace: 20,000 files, a Bash `true`
// (which writes nothing), through two real sandboxds on the same workspace over Streamable HTTP,
// one with the record (every sandboxd runs so: the call's end walks the workspace) and one
// without (options.withoutRecord, no scan), called one after the other in each iteration so
// that both see the same machine. It reports each one's p50, the difference (added-µs/call),
// and the walk alone (wsscan.Changed on the workspace, scan-µs).
//
//	go test -run '^$' -bench BenchmarkBashCallScan -benchtime 200x ./pkg/sandboxd/
func BenchmarkBashCallScan(b *testing.B) {
	dir := filepath.Join(b.TempDir(), "ws")
	for d := range benchScanDirs {
		sub := filepath.Join(dir, fmt.Sprintf("pkg%03d", d))
		if err := os.MkdirAll(sub, 0o755); err != nil {
			b.Fatal(err)
		}
		for f := range benchScanFilesPerDir {
			if err := os.WriteFile(filepath.Join(sub, fmt.Sprintf("file%03d.go", f)), []byte("package p\n"), 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
	sessions := map[bool]*mcp.ClientSession{}
	for _, on := range []bool{true, false} {
		opts := defaultOptions()
		opts.withoutRecord = !on
		ts := startServer(b, Config{Workspace: dir}, opts)
		sessions[on] = connectStreamable(b, ts.url, nil)
		sandboxdtest.CallOK(b, sessions[on], toolnames.Bash, map[string]any{"command": "true"}) // warm up
	}
	ws, err := confine.NewResolver(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer ws.Close()

	args := map[string]any{"command": "true"}
	var on, off, walk []time.Duration
	b.ResetTimer()
	for range b.N {
		for _, record := range []bool{true, false} {
			t0 := time.Now()
			sandboxdtest.CallOK(b, sessions[record], toolnames.Bash, args)
			if record {
				on = append(on, time.Since(t0))
			} else {
				off = append(off, time.Since(t0))
			}
		}
		t0 := time.Now()
		if r := wsscan.Changed(ws, wsscan.Now(), wsscan.DefaultLimits, nil); r.Cut || r.Visited != benchScanDirs*(benchScanFilesPerDir+1) {
			b.Fatalf("the walk visited %d entries (cut %v), want %d", r.Visited, r.Cut, benchScanDirs*(benchScanFilesPerDir+1))
		}
		walk = append(walk, time.Since(t0))
	}
	b.StopTimer()
	p50 := func(d []time.Duration) time.Duration { slices.Sort(d); return d[len(d)/2] }
	pOn, pOff, pWalk := p50(on), p50(off), p50(walk)
	b.ReportMetric(float64(pOn)/1e3, "p50-record-µs")
	b.ReportMetric(float64(pOff)/1e3, "p50-norecord-µs")
	b.ReportMetric(float64(pOn-pOff)/1e3, "added-µs/call")
	b.ReportMetric(float64(pWalk)/1e3, "scan-µs")
	b.Logf("%d files: a Bash `true` p50 %v with the record, %v without: %v added per call; the walk alone %v",
		benchScanDirs*benchScanFilesPerDir, pOn, pOff, pOn-pOff, pWalk)
}
