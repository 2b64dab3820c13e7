package testfailures

import (
	"strings"
	"testing"

	gocmp "github.com/google/go-cmp/cmp"
)

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
		want   []Failure
	}{
		"go: a build error in the root package, a test binary that exits": {lang: "go",
			output: "# example.com/m\n./m.go:3:2: undefined: x\nFAIL\texample.com/m [build failed]\nFAIL\texample.com/m/x\t0.010s\nok  \texample.com/m/y\t0.003s\nFAIL\n",
			want: []Failure{
				{Package: "example.com/m", File: "m.go", Line: 3, Message: "undefined: x"},
				{Package: "example.com/m/x", Message: "FAIL\texample.com/m/x\t0.010s"},
			}},
		"rust": {lang: "rust", output: rustOutput, want: []Failure{
			{Test: "tests::bad", File: "src/lib.rs", Line: 8, Message: "assertion `left == right` failed\n  left: 2\n right: 3"},
			{Test: "tests::boom", File: "src/lib.rs", Line: 10, Message: "boom 1"},
		}},
		"python": {lang: "python", output: pytestOutput, want: []Failure{
			{Package: "tests", Test: "tests/test_math.py::test_bad", File: "tests/test_math.py", Line: 5, Message: "assert 2 == 3"},
			{Package: "tests", Test: "tests/test_math.py::TestThing::test_meth", File: "tests/test_math.py", Line: 10, Message: "ValueError: nope"},
			{Package: "tests", File: "tests/test_broken.py", Message: "ModuleNotFoundError: No module named 'nothere'"},
		}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			p := NewParser(tt.lang)
			// Written in odd pieces, as a pipe delivers them.
			for rest := tt.output; rest != ""; {
				n := min(len(rest), 37)
				p.Write([]byte(rest[:n]))
				rest = rest[n:]
			}
			if d := gocmp.Diff(tt.want, p.Result()); d != "" {
				t.Errorf("failures (-want +got):\n%s", d)
			}
		})
	}
	if NewParser("elixir") != nil {
		t.Error("an unknown language has a parser")
	}
}

func TestFailureParserBounds(t *testing.T) {
	p := NewParser("go")
	var b strings.Builder
	for i := range maxTestFailures + 50 {
		b.WriteString("--- FAIL: TestX" + strings.Repeat("x", i%7) + " (0.00s)\n    x_test.go:1: " + strings.Repeat("m", maxFailureMessage) + "\n")
	}
	b.WriteString("FAIL\texample.com/m\t0.1s\n")
	p.Write([]byte(b.String()))
	got := p.Result()
	if len(got) != maxTestFailures {
		t.Errorf("%d failures kept, want %d", len(got), maxTestFailures)
	}
	for _, f := range got {
		if len(f.Message) > maxFailureMessage || f.Package != "example.com/m" {
			t.Fatalf("failure %+v", f)
		}
	}
}
