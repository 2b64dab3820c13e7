package tools

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/sandboxdtest"
)

const calcSource = `package calc

// Add adds.
func Add(a, b int) int {
	return a + b
}

// Sub subtracts.
func Sub(a, b int) int {
	if a < b {
		return -(b - a)
	}
	return a - b
}

type Acc struct{ n int }

func (a *Acc) Inc() { a.n++ }
`

// newCalcModule writes a Go module whose package calc has tests that run
// different parts of calc.go.
func newCalcModule(t *testing.T) (*Toolbox, string) {
	t.Helper()
	tb, ws := newTestToolbox(t)
	sandboxdtest.WriteFile(t, filepath.Join(ws, "go.mod"), "module example.com/calc\n\ngo 1.22\n")
	sandboxdtest.WriteFile(t, filepath.Join(ws, "calc", "calc.go"), calcSource)
	sandboxdtest.WriteFile(t, filepath.Join(ws, "calc", "calc_test.go"), `package calc

import "testing"

func TestAdd(t *testing.T) {
	if Add(1, 2) != 3 {
		t.Fatal("add")
	}
}

func TestSubPositive(t *testing.T) {
	if Sub(3, 1) != 2 {
		t.Fatal("sub")
	}
}

func TestNothing(t *testing.T) {}

func TestFailsButRuns(t *testing.T) {
	Sub(1, 3)
	t.Fatal("fails on purpose")
}

func helper(t *testing.T) {} // not a test
func TestingHelper(x int) {} // not a test: not a *testing.T
`)
	sandboxdtest.WriteFile(t, filepath.Join(ws, "calc", "ext_test.go"), `package calc_test

import (
	"testing"

	"example.com/calc/calc"
)

func TestExternalInc(t *testing.T) {
	var a calc.Acc
	a.Inc()
}
`)
	return tb, ws
}

func TestTestsCovering(t *testing.T) {
	tb, _ := newCalcModule(t)
	tests := map[string]struct {
		in   TestsCoveringInput
		want []string
	}{
		"a function":                                  {in: TestsCoveringInput{FilePath: "calc/calc.go", Function: "Add"}, want: []string{"TestAdd"}},
		"a branch only one test takes":                {in: TestsCoveringInput{FilePath: "calc/calc.go", Line: 11}, want: []string{"TestFailsButRuns"}},
		"a function two tests run":                    {in: TestsCoveringInput{FilePath: "calc/calc.go", Function: "Sub"}, want: []string{"TestFailsButRuns", "TestSubPositive"}},
		"a method, through the external test package": {in: TestsCoveringInput{FilePath: "calc/calc.go", Function: "(*Acc).Inc"}, want: []string{"TestExternalInc"}},
		"the whole file":                              {in: TestsCoveringInput{FilePath: "calc/calc.go"}, want: []string{"TestAdd", "TestExternalInc", "TestFailsButRuns", "TestSubPositive"}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			res, out, err := tb.testsCovering(t.Context(), tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if d := gocmp.Diff(tt.want, out.Covering); d != "" {
				t.Errorf("covering (-want +got):\n%s\n%s", d, resultText(t, res))
			}
			if len(out.Tests) != 5 || out.Package != "calc" || out.TimedOut || len(out.NotRun) != 0 {
				t.Errorf("output %+v", out)
			}
			for _, ct := range out.Tests {
				if !ct.Profile || ct.Passed != (ct.Name != "TestFailsButRuns") {
					t.Errorf("test %+v", ct)
				}
			}
		})
	}
	res, _, err := tb.testsCovering(t.Context(), TestsCoveringInput{FilePath: "calc/calc.go", Function: "Sub"})
	if err != nil {
		t.Fatal(err)
	}
	want := "2 of the 5 tests run in calc execute Sub in calc/calc.go (lines 9-14):\n  TestFailsButRuns (FAILED)\n  TestSubPositive\n(Only the tests of the file's own package are run; tests in other packages that use it are not.)"
	if text := resultText(t, res); text != want {
		t.Errorf("text %q, want %q", text, want)
	}
	if n := tb.procs.Count(); n != 0 {
		t.Errorf("%d process groups still run", n)
	}
}

func TestTestsCoveringErrors(t *testing.T) {
	tb, ws := newCalcModule(t)
	sandboxdtest.WriteFile(t, filepath.Join(ws, "notes.txt"), "x\n")
	sandboxdtest.WriteFile(t, filepath.Join(ws, "bad", "bad.go"), "package bad\n\nfunc F() int { return 1 }\n")
	sandboxdtest.WriteFile(t, filepath.Join(ws, "bad", "bad_test.go"), "package bad\n\nimport \"testing\"\n\nfunc TestF(t *testing.T) { F(undefined) }\n")
	sandboxdtest.WriteFile(t, filepath.Join(ws, "none", "none.go"), "package none\n\nfunc F() {}\n")
	for in, want := range map[TestsCoveringInput]string{
		{FilePath: "notes.txt"}:                              "notes.txt is not a Go file",
		{FilePath: "calc/calc_test.go"}:                      "is a test file",
		{FilePath: "calc/missing.go"}:                        "no such file",
		{FilePath: "calc/calc.go", Function: "Mul"}:          "function Mul not found in calc/calc.go",
		{FilePath: "calc/calc.go", Line: 99}:                 "line 99 is not in the file calc/calc.go (lines 1-18)",
		{FilePath: "calc/calc.go", Function: "Add", Line: 9}: "line 9 is not in Add in calc/calc.go (lines 4-6)",
		{FilePath: "calc/calc.go", Line: -1}:                 "line must be 1 or more",
		{FilePath: "calc/calc.go", Timeout: 700_000}:         "above the maximum",
		{FilePath: "bad/bad.go"}:                             "the tests of bad do not build",
	} {
		_, _, err := tb.testsCovering(t.Context(), in)
		sandboxdtest.WantErrContaining(t, err, want)
	}
	// Without the Go toolchain.
	t.Run("no go", func(t *testing.T) {
		t.Setenv("PATH", t.TempDir())
		_, _, err := tb.testsCovering(t.Context(), TestsCoveringInput{FilePath: "calc/calc.go"})
		sandboxdtest.WantErrContaining(t, err, "go is not installed in this sandbox (not on PATH)")
	})
	// A package without tests is an answer, not an error.
	res, out, err := tb.testsCovering(t.Context(), TestsCoveringInput{FilePath: "none/none.go"})
	if err != nil || len(out.Covering) != 0 || !strings.Contains(resultText(t, res), "No tests in none") {
		t.Errorf("no tests: %+v, %v", out, err)
	}
}

// TestTestsCoveringCancel: a call cancelled while a test runs kills the
// test's process group and says so. The test under it opens a FIFO that
// this test reads: the open says it runs, the end of file that it is gone.
func TestTestsCoveringCancel(t *testing.T) {
	tb, ws := newCalcModule(t)
	fifo := filepath.Join(t.TempDir(), "running")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	sandboxdtest.WriteFile(t, filepath.Join(ws, "calc", "hang_test.go"), fmt.Sprintf(`package calc

import (
	"os"
	"testing"
	"time"
)

func TestAHangs(t *testing.T) {
	f, err := os.OpenFile(%q, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	time.Sleep(time.Hour)
}
`, fifo))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	type result struct {
		out TestsCoveringOutput
		err error
	}
	done := make(chan result, 1)
	go func() {
		_, out, err := tb.testsCovering(ctx, TestsCoveringInput{FilePath: "calc/calc.go"})
		done <- result{out, err}
	}()
	opened := make(chan *os.File, 1)
	go func() {
		r, err := os.Open(fifo) // returns once TestAHangs has it open
		if err != nil {
			t.Error(err)
		}
		opened <- r
	}()
	var r *os.File
	select {
	case r = <-opened:
	case res := <-done: // it never ran TestAHangs: release the open above
		if w, err := os.OpenFile(fifo, os.O_RDWR, 0); err == nil {
			w.Close()
		}
		if r := <-opened; r != nil {
			r.Close()
		}
		t.Fatalf("tests_covering returned before TestAHangs ran: %+v, %v", res.out, res.err)
	}
	if r == nil {
		t.FailNow()
	}
	defer r.Close()
	cancel()
	if _, err := io.Copy(io.Discard, r); err != nil { // end of file: every writer has exited
		t.Fatal(err)
	}
	select {
	case res := <-done:
		sandboxdtest.WantErrContaining(t, res.err, "cancelled after")
		sandboxdtest.WantErrContaining(t, res.err, "in TestAHangs: its process group was killed")
	case <-time.After(testTimeout):
		t.Fatal("tests_covering did not return after its cancellation")
	}
	if n := tb.procs.Count(); n != 0 {
		t.Errorf("%d process groups still run", n)
	}
}

// TestTestsCoveringDeadline: a test still running at the deadline is killed
// with its process group, has no profile, and the tests after it are
// listed as not run. (The binary is built first, so that the deadline
// falls in the runs whatever the machine's load.)
func TestTestsCoveringDeadline(t *testing.T) {
	tb, ws := newCalcModule(t)
	sandboxdtest.WriteFile(t, filepath.Join(ws, "calc", "hang_test.go"), "package calc\n\nimport (\n\t\"testing\"\n\t\"time\"\n)\n\nfunc TestAHangs(t *testing.T) { Add(1, 2); time.Sleep(time.Hour) }\n")
	bin := filepath.Join(t.TempDir(), "pkg.test")
	if err := tb.buildCoverageTests(t.Context(), "calc", bin, checkMaxTimeout); err != nil {
		t.Fatal(err)
	}
	out := TestsCoveringOutput{}
	tests := []string{"TestAHangs", "TestAdd", "TestSubPositive"}
	start := time.Now()
	if err := tb.runEachTest(t.Context(), "calc", bin, tests, coverTarget{base: "calc.go", from: 1, to: 18}, start.Add(2*time.Second), &out); err != nil {
		t.Fatal(err)
	}
	if elapsed := time.Since(start); elapsed > testTimeout {
		t.Errorf("the runs took %v", elapsed)
	}
	want := []CoveringTest{{Name: "TestAHangs"}}
	if d := gocmp.Diff(want, out.Tests); d != "" || !out.TimedOut || !slices.Equal(out.NotRun, tests[1:]) || len(out.Covering) != 0 {
		t.Errorf("after the deadline: %+v\n%s", out, d)
	}
	if text := coveringText(out); !strings.Contains(text, "1 test(s) wrote no coverage profile (crashed or timed out), so whether they cover it is unknown: TestAHangs") ||
		!strings.Contains(text, "The timeout stopped the runs.") || !strings.Contains(text, "2 test(s) not run (at most 200 run, within the timeout): TestAdd, TestSubPositive") {
		t.Errorf("text %q", text)
	}
	if n := tb.procs.Count(); n != 0 {
		t.Errorf("%d process groups still run", n)
	}
}

// TestConfinementOfTestsCovering: file_path is confined like Read's.
func TestConfinementOfTestsCovering(t *testing.T) {
	f := newEscapeFixture(t)
	sandboxdtest.WriteFile(t, filepath.Join(f.outside, "evil.go"), "package evil\n\n// "+secret+"\nfunc X() {}\n")
	sandboxdtest.WriteFile(t, filepath.Join(f.outside, "evil_test.go"), "package evil\n\nimport \"testing\"\n\nfunc TestX(t *testing.T) { X() }\n")
	sandboxdtest.MustSymlink(t, "../outside/evil.go", filepath.Join(f.ws, "linked.go"))
	for _, p := range append(f.escapePaths(), "../outside/evil.go", filepath.Join(f.outside, "evil.go"), "linked.go", "dir-link/evil.go", "a/b/up/evil.go") {
		_, out, err := f.tb.testsCovering(t.Context(), TestsCoveringInput{FilePath: p})
		if err == nil {
			t.Errorf("tests_covering(%.80q) succeeded: %+v", p, out)
		} else if strings.Contains(err.Error(), secret) {
			t.Errorf("tests_covering(%.80q) error leaks the secret: %v", p, err)
		}
	}
	entries, _ := os.ReadDir(f.outside)
	if len(entries) != 3 {
		t.Errorf("outside holds %d entries, want 3", len(entries))
	}
}
