package tools

import (
	"cmp"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	gocmp "github.com/google/go-cmp/cmp"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/sandboxdtest"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/testfailures"
)

// The test tools' failures as run_tests, run_failing_tests and
// last_test_failures give them, from real runners (the parsers' own tests
// run on recorded output).

func sortFailures(fs []testfailures.Failure) []testfailures.Failure {
	fs = slices.Clone(fs)
	slices.SortFunc(fs, func(a, b testfailures.Failure) int {
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
	sandboxdtest.WantErrContaining(t, err, "no test run yet")

	sandboxdtest.WriteFile(t, filepath.Join(ws, "go.mod"), "module example.com/m\n\ngo 1.22\n")
	sandboxdtest.WriteFile(t, filepath.Join(ws, "a", "a_test.go"), `package a

import "testing"

func TestOK(t *testing.T) { t.Log("fine") }
func TestBad(t *testing.T) {
	t.Errorf("got %d, want %d", 1, 2)
	t.Run("sub", func(t *testing.T) { t.Fatal("sub broke\nsecond line") })
}
func TestPanic(t *testing.T) { panic("boom") }
`)
	sandboxdtest.WriteFile(t, filepath.Join(ws, "b", "b.go"), "package b\n\nfunc F() int { return undefinedThing }\n")
	sandboxdtest.WriteFile(t, filepath.Join(ws, "c", "c_test.go"), "package c\n\nimport \"testing\"\n\nfunc TestC(t *testing.T) {}\n")

	res, out, err := tb.runTests(ctx, RunTestsInput{})
	if err != nil {
		t.Fatal(err)
	}
	want := []testfailures.Failure{
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
	sandboxdtest.WriteFile(t, filepath.Join(ws, "b", "b.go"), "package b\n\nfunc F() int { return 1 }\n")
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
	sandboxdtest.WriteFile(t, filepath.Join(ws, "a", "a_test.go"), "package a\n\nimport \"testing\"\n\nfunc TestBad(t *testing.T) {}\nfunc TestPanic(t *testing.T) {}\n")
	_, out, err = tb.runFailingTests(ctx, RunFailingTestsInput{})
	if err != nil || !out.Passed || len(out.Failures) != 0 {
		t.Errorf("run_failing_tests after the fix = %+v, %v", out, err)
	}
	_, _, err = tb.runFailingTests(ctx, RunFailingTestsInput{})
	sandboxdtest.WantErrContaining(t, err, "passed")
}

func TestFailingTestsCommand(t *testing.T) {
	tests := map[string]struct {
		lang     string
		failures []testfailures.Failure
		want     string
		wantErr  string
	}{
		"go tests of two packages, subtests by their test": {lang: "go", failures: []testfailures.Failure{
			{Package: "example.com/m/a", Test: "TestA/sub"}, {Package: "example.com/m/a", Test: "TestA"}, {Package: "example.com/m/b", Test: "TestB"},
		}, want: `go test -run '^(TestA|TestB)$' 'example.com/m/a' 'example.com/m/b'`},
		"go test name that is not one": {lang: "go", failures: []testfailures.Failure{{Package: "p", Test: "Test'; rm -rf /"}}, wantErr: "not a Go test name"},
		"go package that is a flag":    {lang: "go", failures: []testfailures.Failure{{Package: "-exec=evil", Test: "TestA"}}, wantErr: "cannot tell"},
		"rust": {lang: "rust", failures: []testfailures.Failure{{Test: "tests::bad"}, {Test: "tests::boom"}},
			want: `cargo test -- --exact 'tests::bad' 'tests::boom'`},
		"rust name with a quote": {lang: "rust", failures: []testfailures.Failure{{Test: "a'b"}}, wantErr: "not a Rust test name"},
		"python ids are quoted": {lang: "python", failures: []testfailures.Failure{{Test: "t.py::test_x[it's]"}, {File: "tests/test_broken.py"}},
			want: `python3 -m pytest -q 't.py::test_x[it'\''s]' 'tests/test_broken.py'`},
		"python id that is a flag": {lang: "python", failures: []testfailures.Failure{{Test: "--co"}}, wantErr: "cannot run"},
		"node":                     {lang: "node", failures: []testfailures.Failure{{Test: "x"}}, wantErr: "cannot run single tests of node"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := failingTestsCommand(tt.lang, tt.failures)
			if tt.wantErr != "" {
				sandboxdtest.WantErrContaining(t, err, tt.wantErr)
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
	want := []testfailures.Failure{{Package: "example.com/m", Test: "TestLate", File: "late_test.go", Line: 3, Message: "late"}}
	if d := gocmp.Diff(want, out.Failures); d != "" {
		t.Errorf("failures (-want +got):\n%s", d)
	}
}

// nodeFixtureTests are the tests of those runs.
const nodeFixtureTests = `const test = require('node:test');
const assert = require('node:assert');

test('adds', () => {
  assert.strictEqual(1 + 1, 2);
});

test('subtracts wrong', () => {
  assert.strictEqual(3 - 1, 1);
});

test('suite of things', async (t) => {
  await t.test('inner ok', () => {});
  await t.test('inner bad', () => {
    throw new Error('inner boom');
  });
});

test.describe('a describe', () => {
  test.it('it fails', () => {
    assert.deepStrictEqual({a: 1}, {a: 2});
  });
});
`

// TestNodeTestRun runs the real node --test through npm test, as run_tests
// does: the failures come back with workspace-relative files.
func TestNodeTestRun(t *testing.T) {
	if _, err := exec.LookPath("npm"); err != nil {
		t.Skipf("npm is not installed (%v): the parser is checked against recorded output by TestNodeFailures", err)
	}
	tb, ws := newTestToolbox(t)
	sandboxdtest.WriteFile(t, filepath.Join(ws, "package.json"), `{"name":"fx","version":"1.0.0","scripts":{"test":"node --test"}}`+"\n")
	sandboxdtest.WriteFile(t, filepath.Join(ws, "test", "math.test.js"), nodeFixtureTests)
	_, out, err := tb.runTests(t.Context(), RunTestsInput{})
	if err != nil {
		t.Fatal(err)
	}
	if out.Language != "node" || out.Passed {
		t.Fatalf("run_tests: %+v", out)
	}
	var got []string
	for _, f := range out.Failures {
		got = append(got, f.Test+" @ "+f.File+":"+itoa(f.Line))
	}
	want := []string{"subtracts wrong @ test/math.test.js:9", "suite of things > inner bad @ test/math.test.js:15", "a describe > it fails @ test/math.test.js:21"}
	if d := gocmp.Diff(want, got); d != "" {
		t.Errorf("failures (-want +got):\n%s\noutput:\n%s", d, out.Output)
	}
	last := tb.tests.get()
	if last == nil || len(last.Failures) != 3 || last.Failures[0].Package != "test" {
		t.Errorf("last_test_failures keeps %+v", last)
	}
}
