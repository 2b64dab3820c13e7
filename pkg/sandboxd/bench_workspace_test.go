package sandboxd

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/sandboxdtest"
	"github.com/airlock-dev/airlock/pkg/toolnames"
)

// The workspace of BenchmarkSnapshotCreate: 10,000 files of 10 KiB in 100
// directories, about 100 MB.
const (
	benchSnapDirs     = 100
	benchSnapPerDir   = 100
	benchSnapFileSize = 10 << 10
	// benchSnapEdits is how many files change between two snapshots.
	benchSnapEdits = 10
)

// BenchmarkSnapshotCreate measures snapshot_create through a real sandboxd
// and the Go SDK's SSE client on a workspace of 10,000 files and about
// 100 MB (text-like content that does not compress to nothing): the first
// snapshot, which stores every file, and then b.N more, each after
// benchSnapEdits files changed, as between an agent's steps. It reports the
// first's seconds and the later ones' p50 and maximum in milliseconds (the
// time of the edits is left out).
//
//	go test -run '^$' -bench BenchmarkSnapshotCreate -benchtime 5x ./pkg/sandboxd/
func BenchmarkSnapshotCreate(b *testing.B) {
	if _, err := exec.LookPath("git"); err != nil {
		b.Skip("snapshots need git, which is not on PATH")
	}
	ts := startServer(b, Config{}, options{})
	rng := rand.New(rand.NewPCG(15, 15))
	files := make([]string, 0, benchSnapDirs*benchSnapPerDir)
	for d := range benchSnapDirs {
		dir := filepath.Join(ts.ws, fmt.Sprintf("pkg%03d", d))
		if err := os.Mkdir(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		for f := range benchSnapPerDir {
			name := filepath.Join(dir, fmt.Sprintf("file%03d.go", f))
			if err := os.WriteFile(name, benchText(rng, benchSnapFileSize), 0o644); err != nil {
				b.Fatal(err)
			}
			files = append(files, name)
		}
	}
	cs := connectSSE(b, ts.url, nil)
	snapshot := func() time.Duration {
		b.Helper()
		t0 := time.Now()
		res, err := cs.CallTool(b.Context(), &mcp.CallToolParams{Name: toolnames.SnapshotCreate, Arguments: map[string]any{"label": "bench"}})
		elapsed := time.Since(t0)
		if err != nil || res.IsError {
			b.Fatalf("snapshot_create: %v %s", err, sandboxdtest.ContentText(res))
		}
		return elapsed
	}

	first := snapshot()
	var later []time.Duration
	for b.Loop() { // the workspace is made once, whatever b.N
		for range benchSnapEdits {
			name := files[rng.IntN(len(files))]
			if err := os.WriteFile(name, benchText(rng, benchSnapFileSize), 0o644); err != nil {
				b.Fatal(err)
			}
		}
		later = append(later, snapshot())
	}
	slices.Sort(later)
	b.ReportMetric(first.Seconds(), "first-s")
	b.ReportMetric(float64(later[len(later)/2].Milliseconds()), "next-p50-ms")
	b.ReportMetric(float64(later[len(later)-1].Milliseconds()), "next-max-ms")
	b.ReportMetric(0, "ns/op")
}

// benchText returns n bytes of source-like text: lines of words drawn from a
// small vocabulary and numbers, so that it compresses as code does, not to
// nothing.
func benchText(rng *rand.Rand, n int) []byte {
	words := []string{"func", "return", "if", "err", "nil", "ctx", "for", "range", "var", "type", "struct", "string", "int", ":=", "{", "}", "(", ")", "value", "index", "buffer", "result"}
	var b bytes.Buffer
	b.Grow(n + 64)
	for b.Len() < n {
		for w := rng.IntN(10) + 2; w > 0; w-- {
			b.WriteString(words[rng.IntN(len(words))])
			if rng.IntN(4) == 0 {
				fmt.Fprintf(&b, "%d", rng.IntN(100000))
			}
			b.WriteByte(' ')
		}
		b.WriteByte('\n')
	}
	return b.Bytes()[:n]
}

// BenchmarkFindReferences measures find_references through a real sandboxd,
// the Go SDK's SSE client and the real gopls, on a small Go module: the
// first call (which starts gopls and loads the module) and then b.N calls,
// whose p50 and p90 it reports. gopls is taken from PATH or else built from
// the pin in hack/tools/gopls, as the sandbox-go image has it; the
// benchmark is skipped only when neither gives one.
//
//	go test -run '^$' -bench BenchmarkFindReferences -benchtime 50x ./pkg/sandboxd/
func BenchmarkFindReferences(b *testing.B) {
	goplsDir := benchGopls(b)
	b.Setenv("PATH", goplsDir+string(os.PathListSeparator)+os.Getenv("PATH"))
	ts := startServer(b, Config{}, options{})
	files := map[string]string{
		"go.mod":          "module example.com/bench\n\ngo 1.22\n",
		"lib/lib.go":      "package lib\n\n// Helper is used all over.\nfunc Helper(n int) int { return n + 1 }\n",
		"cmd/app/main.go": "package main\n\nimport \"example.com/bench/lib\"\n\nfunc main() { _ = lib.Helper(lib.Helper(1)) }\n",
	}
	for i := range 20 {
		files[fmt.Sprintf("pkg%02d/p.go", i)] = fmt.Sprintf("package pkg%02d\n\nimport \"example.com/bench/lib\"\n\nfunc F() int { return lib.Helper(%d) }\n", i, i)
	}
	for name, content := range files {
		p := filepath.Join(ts.ws, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	cs := connectSSE(b, ts.url, nil)
	args := map[string]any{"file_path": "lib/lib.go", "line": 4, "symbol": "Helper"}
	find := func() time.Duration {
		b.Helper()
		t0 := time.Now()
		res, err := cs.CallTool(b.Context(), &mcp.CallToolParams{Name: toolnames.FindReferences, Arguments: args})
		elapsed := time.Since(t0)
		if err != nil || res.IsError {
			b.Fatalf("find_references: %v %s", err, sandboxdtest.ContentText(res))
		}
		// 1 declaration + 2 in main + 20 in the packages.
		if out, ok := res.StructuredContent.(map[string]any); !ok || len(out["references"].([]any)) != 23 {
			b.Fatalf("find_references answered %s", sandboxdtest.ContentText(res))
		}
		return elapsed
	}
	first := find()
	var later []time.Duration
	for b.Loop() { // gopls is started once, whatever b.N
		later = append(later, find())
	}
	slices.Sort(later)
	b.ReportMetric(first.Seconds(), "first-s")
	b.ReportMetric(float64(later[len(later)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(later[min(len(later)-1, len(later)*9/10)].Microseconds())/1000, "p90-ms")
	b.ReportMetric(0, "ns/op")
}

// benchGopls returns a directory that holds gopls: the one on PATH, or one
// built from hack/tools/gopls (once per test binary: the build cache makes
// later builds quick). It skips the benchmark when there is neither.
func benchGopls(b *testing.B) string {
	if p, err := exec.LookPath("gopls"); err == nil {
		return filepath.Dir(p)
	}
	root, err := moduleRoot()
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", filepath.Join(dir, "gopls"), "golang.org/x/tools/gopls")
	cmd.Dir = filepath.Join(root, "hack", "tools", "gopls")
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Skipf("gopls is not installed (not on PATH) and building it from hack/tools/gopls failed: %v\n%s", err, out)
	}
	return dir
}

// moduleRoot returns the directory of this module's go.mod.
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %v", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", fmt.Errorf("not in a module")
	}
	return filepath.Dir(gomod), nil
}
