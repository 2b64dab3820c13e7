package sandboxd

import (
	"cmp"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	gocmp "github.com/google/go-cmp/cmp"
)

func sortFailures(fs []TestFailure) []TestFailure {
	fs = slices.Clone(fs)
	slices.SortFunc(fs, func(a, b TestFailure) int {
		return cmp.Or(strings.Compare(a.Package, b.Package), strings.Compare(a.Test, b.Test), strings.Compare(a.File, b.File))
	})
	return fs
}

// TestGoTestFailures runs real go test: a build error, a failing test with
// a failing subtest, and a panic are parsed into failures with workspace
// files, and run_failing_tests runs only what failed until it passes.
func TestGoTestFailures(t *testing.T) {
	tb, ws := newTestToolbox(t)
	ctx := t.Context()
	_, _, err := tb.runFailingTests(ctx, RunFailingTestsInput{})
	wantErrContaining(t, err, "no test run yet")

	writeFile(t, filepath.Join(ws, "go.mod"), "module example.com/m\n\ngo 1.22\n")
	writeFile(t, filepath.Join(ws, "a", "a_test.go"), `package a

import "testing"

func TestOK(t *testing.T) { t.Log("fine") }
func TestBad(t *testing.T) {
	t.Errorf("got %d, want %d", 1, 2)
	t.Run("sub", func(t *testing.T) { t.Fatal("sub broke\nsecond line") })
}
func TestPanic(t *testing.T) { panic("boom") }
`)
	writeFile(t, filepath.Join(ws, "b", "b.go"), "package b\n\nfunc F() int { return undefinedThing }\n")
	writeFile(t, filepath.Join(ws, "c", "c_test.go"), "package c\n\nimport \"testing\"\n\nfunc TestC(t *testing.T) {}\n")

	res, out, err := tb.runTests(ctx, RunTestsInput{})
	if err != nil {
		t.Fatal(err)
	}
	want := []TestFailure{
		{Package: "example.com/m/a", Test: "TestBad", File: "a/a_test.go", Line: 7, Message: "got 1, want 2"},
		{Package: "example.com/m/a", Test: "TestBad/sub", File: "a/a_test.go", Line: 8, Message: "sub broke\nsecond line"},
		{Package: "example.com/m/a", Test: "TestPanic", File: "a/a_test.go", Line: 10, Message: "panic: boom [recovered, repanicked]"},
		{Package: "example.com/m/b", File: "b/b.go", Line: 3, Message: "undefined: undefinedThing"},
	}
	if d := gocmp.Diff(want, sortFailures(out.Failures)); d != "" {
		t.Fatalf("failures (-want +got):\n%s\noutput:\n%s", d, out.Output)
	}
	if text := resultText(t, res); !strings.Contains(text, "4 failure(s):") || !strings.Contains(text, "example.com/m/a TestBad (a/a_test.go:7) got 1, want 2") {
		t.Errorf("text lacks the failures:\n%s", text)
	}
	_, last, err := tb.lastTestFailures(ctx, LastTestFailuresInput{})
	if err != nil || last.Passed || len(last.Failures) != 4 || last.Command != "go test ./..." {
		t.Errorf("last_test_failures = %+v, %v", last, err)
	}

	// b builds now: its package is run whole, with a's, since it had a
	// build error.
	writeFile(t, filepath.Join(ws, "b", "b.go"), "package b\n\nfunc F() int { return 1 }\n")
	_, out, err = tb.runFailingTests(ctx, RunFailingTestsInput{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.Command, "go test ") || strings.Contains(out.Command, "-run") || len(out.Failures) != 3 {
		t.Errorf("run_failing_tests = %q with %d failures", out.Command, len(out.Failures))
	}
	// Only the failing tests of a now.
	_, out, err = tb.runFailingTests(ctx, RunFailingTestsInput{})
	if err != nil {
		t.Fatal(err)
	}
	if out.Command != `go test -run '^(TestBad|TestPanic)$' 'example.com/m/a'` || len(out.Failures) != 3 || strings.Contains(out.Output, "TestOK") {
		t.Errorf("run_failing_tests = %q with %d failures:\n%s", out.Command, len(out.Failures), out.Output)
	}
	writeFile(t, filepath.Join(ws, "a", "a_test.go"), "package a\n\nimport \"testing\"\n\nfunc TestBad(t *testing.T) {}\nfunc TestPanic(t *testing.T) {}\n")
	_, out, err = tb.runFailingTests(ctx, RunFailingTestsInput{})
	if err != nil || !out.Passed || len(out.Failures) != 0 {
		t.Errorf("run_failing_tests after the fix = %+v, %v", out, err)
	}
	_, _, err = tb.runFailingTests(ctx, RunFailingTestsInput{})
	wantErrContaining(t, err, "passed")
}

// rustOutput is cargo test's output for a failing assert_eq and a panic
// (as cargo 1.9x prints it).
const rustOutput = `running 3 tests
test tests::ok ... ok
test tests::bad ... FAILED
test tests::boom ... FAILED

failures:

---- tests::bad stdout ----

thread 'tests::bad' (18645) panicked at src/lib.rs:8:16:
assertion ` + "`left == right`" + ` failed
  left: 2
 right: 3
stack backtrace:
   0: __rustc::rust_begin_unwind
             at ./src/lib.rs:8:16

---- tests::boom stdout ----

thread 'tests::boom' panicked at src/lib.rs:10:17:
boom 1
note: run with ` + "`RUST_BACKTRACE=1`" + ` environment variable to display a backtrace


failures:
    tests::bad
    tests::boom

test result: FAILED. 1 passed; 2 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.27s
`

// pytestOutput is pytest -q's output for a failing test function, a
// failing method and a collection error.
const pytestOutput = `F.F                                                                      [100%]
=================================== FAILURES ===================================
___________________________________ test_bad ___________________________________

    def test_bad():
>       assert add(1, 1) == 3
E       assert 2 == 3

tests/test_math.py:5: AssertionError
_____________________________ TestThing.test_meth ______________________________

self = <test_math.TestThing object at 0x7f>

    def test_meth(self):
>       raise ValueError("nope")
E       ValueError: nope

tests/test_math.py:10: ValueError
=========================== short test summary info ============================
FAILED tests/test_math.py::test_bad - assert 2 == 3
FAILED tests/test_math.py::TestThing::test_meth - ValueError: nope
ERROR tests/test_broken.py - ModuleNotFoundError: No module named 'nothere'
2 failed, 1 passed, 1 error in 0.05s
`

func TestParsedFailures(t *testing.T) {
	tests := map[string]struct {
		lang   string
		output string
		want   []TestFailure
	}{
		"go: a build error in the root package, a test binary that exits": {lang: "go",
			output: "# example.com/m\n./m.go:3:2: undefined: x\nFAIL\texample.com/m [build failed]\nFAIL\texample.com/m/x\t0.010s\nok  \texample.com/m/y\t0.003s\nFAIL\n",
			want: []TestFailure{
				{Package: "example.com/m", File: "m.go", Line: 3, Message: "undefined: x"},
				{Package: "example.com/m/x", Message: "FAIL\texample.com/m/x\t0.010s"},
			}},
		"rust": {lang: "rust", output: rustOutput, want: []TestFailure{
			{Test: "tests::bad", File: "src/lib.rs", Line: 8, Message: "assertion `left == right` failed\n  left: 2\n right: 3"},
			{Test: "tests::boom", File: "src/lib.rs", Line: 10, Message: "boom 1"},
		}},
		"python": {lang: "python", output: pytestOutput, want: []TestFailure{
			{Package: "tests", Test: "tests/test_math.py::test_bad", File: "tests/test_math.py", Line: 5, Message: "assert 2 == 3"},
			{Package: "tests", Test: "tests/test_math.py::TestThing::test_meth", File: "tests/test_math.py", Line: 10, Message: "ValueError: nope"},
			{Package: "tests", File: "tests/test_broken.py", Message: "ModuleNotFoundError: No module named 'nothere'"},
		}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			p := newFailureParser(tt.lang)
			// Written in odd pieces, as a pipe delivers them.
			for rest := tt.output; rest != ""; {
				n := min(len(rest), 37)
				p.Write([]byte(rest[:n]))
				rest = rest[n:]
			}
			if d := gocmp.Diff(tt.want, p.result()); d != "" {
				t.Errorf("failures (-want +got):\n%s", d)
			}
		})
	}
	if newFailureParser("elixir") != nil {
		t.Error("an unknown language has a parser")
	}
}

func TestFailureParserBounds(t *testing.T) {
	p := newFailureParser("go")
	var b strings.Builder
	for i := range maxTestFailures + 50 {
		b.WriteString("--- FAIL: TestX" + strings.Repeat("x", i%7) + " (0.00s)\n    x_test.go:1: " + strings.Repeat("m", maxFailureMessage) + "\n")
	}
	b.WriteString("FAIL\texample.com/m\t0.1s\n")
	p.Write([]byte(b.String()))
	got := p.result()
	if len(got) != maxTestFailures {
		t.Errorf("%d failures kept, want %d", len(got), maxTestFailures)
	}
	for _, f := range got {
		if len(f.Message) > maxFailureMessage || f.Package != "example.com/m" {
			t.Fatalf("failure %+v", f)
		}
	}
}

func TestFailingTestsCommand(t *testing.T) {
	tests := map[string]struct {
		lang     string
		failures []TestFailure
		want     string
		wantErr  string
	}{
		"go tests of two packages, subtests by their test": {lang: "go", failures: []TestFailure{
			{Package: "example.com/m/a", Test: "TestA/sub"}, {Package: "example.com/m/a", Test: "TestA"}, {Package: "example.com/m/b", Test: "TestB"},
		}, want: `go test -run '^(TestA|TestB)$' 'example.com/m/a' 'example.com/m/b'`},
		"go test name that is not one": {lang: "go", failures: []TestFailure{{Package: "p", Test: "Test'; rm -rf /"}}, wantErr: "not a Go test name"},
		"go package that is a flag":    {lang: "go", failures: []TestFailure{{Package: "-exec=evil", Test: "TestA"}}, wantErr: "cannot tell"},
		"rust": {lang: "rust", failures: []TestFailure{{Test: "tests::bad"}, {Test: "tests::boom"}},
			want: `cargo test -- --exact 'tests::bad' 'tests::boom'`},
		"rust name with a quote": {lang: "rust", failures: []TestFailure{{Test: "a'b"}}, wantErr: "not a Rust test name"},
		"python ids are quoted": {lang: "python", failures: []TestFailure{{Test: "t.py::test_x[it's]"}, {File: "tests/test_broken.py"}},
			want: `python3 -m pytest -q 't.py::test_x[it'\''s]' 'tests/test_broken.py'`},
		"python id that is a flag": {lang: "python", failures: []TestFailure{{Test: "--co"}}, wantErr: "cannot run"},
		"node":                     {lang: "node", failures: []TestFailure{{Test: "x"}}, wantErr: "cannot run single tests of node"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := failingTestsCommand(tt.lang, tt.failures)
			if tt.wantErr != "" {
				wantErrContaining(t, err, tt.wantErr)
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("command = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

// TestFailuresBeyondTheCap checks that failures are parsed from the whole
// output, not from what the cap keeps of it.
func TestFailuresBeyondTheCap(t *testing.T) {
	tb, _ := newTestToolbox(t)
	cmd := `head -c 300000 /dev/zero | tr '\0' 'x'; echo
printf -- '--- FAIL: TestLate (0.00s)\n    late_test.go:3: late\nFAIL\texample.com/m\t0.1s\n'
head -c 300000 /dev/zero | tr '\0' 'y'; echo`
	_, out, err := tb.runCommandCheck(t.Context(), checkTests, "go", cmd, testTimeout)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.Output, "TestLate") || !strings.Contains(out.Output, "bytes of output elided") {
		t.Fatalf("the failure was not in the elided part of the output")
	}
	want := []TestFailure{{Package: "example.com/m", Test: "TestLate", File: "late_test.go", Line: 3, Message: "late"}}
	if d := gocmp.Diff(want, out.Failures); d != "" {
		t.Errorf("failures (-want +got):\n%s", d)
	}
}
