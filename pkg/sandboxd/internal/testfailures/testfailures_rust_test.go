package testfailures

import (
	"testing"

	gocmp "github.com/google/go-cmp/cmp"
)

// cargoTestOutput is what cargo 1.95.0 printed for cargo test of a library
// with two failing tests, run with RUST_BACKTRACE set (written by running
// it; the path replaced by /w).
const cargoTestOutput = `   Compiling rustfx v0.1.0 (/w)
    Finished ` + "`" + `test` + "`" + ` profile [unoptimized + debuginfo] target(s) in 0.48s
     Running unittests src/lib.rs (target/debug/deps/rustfx-533e42a74b3d067a)

running 3 tests
test tests::bad ... FAILED
test tests::boom ... FAILED
test tests::good ... ok

failures:

---- tests::bad stdout ----

thread 'tests::bad' (29741) panicked at src/lib.rs:16:9:
assertion ` + "`" + `left == right` + "`" + ` failed
  left: 2
 right: 3
stack backtrace:
   0: __rustc::rust_begin_unwind
             at /rustc/59807616e1fa2540724bfbac14d7976d7e4a3860/library/std/src/panicking.rs:689:5
   1: core::panicking::panic_fmt
             at /rustc/59807616e1fa2540724bfbac14d7976d7e4a3860/library/core/src/panicking.rs:80:14
   2: core::panicking::assert_failed_inner
             at /rustc/59807616e1fa2540724bfbac14d7976d7e4a3860/library/core/src/panicking.rs:439:17
   3: core::panicking::assert_failed::<i32, i32>
             at /rustc/59807616e1fa2540724bfbac14d7976d7e4a3860/library/core/src/panicking.rs:394:5
   4: rustfx::tests::bad
             at ./src/lib.rs:16:9
   5: rustfx::tests::bad::{{closure}}
             at ./src/lib.rs:15:13
   6: core::ops::function::FnOnce::call_once
             at /rustc/59807616e1fa2540724bfbac14d7976d7e4a3860/library/core/src/ops/function.rs:250:5
   7: <fn() -> core::result::Result<(), alloc::string::String> as core::ops::function::FnOnce<()>>::call_once
             at /rustc/59807616e1fa2540724bfbac14d7976d7e4a3860/library/core/src/ops/function.rs:250:5
note: Some details are omitted, run with ` + "`" + `RUST_BACKTRACE=full` + "`" + ` for a verbose backtrace.

---- tests::boom stdout ----

thread 'tests::boom' (29742) panicked at src/lib.rs:21:9:
boom 1
stack backtrace:
   0: __rustc::rust_begin_unwind
             at /rustc/59807616e1fa2540724bfbac14d7976d7e4a3860/library/std/src/panicking.rs:689:5
   1: core::panicking::panic_fmt
             at /rustc/59807616e1fa2540724bfbac14d7976d7e4a3860/library/core/src/panicking.rs:80:14
   2: rustfx::tests::boom
             at ./src/lib.rs:21:9
   3: rustfx::tests::boom::{{closure}}
             at ./src/lib.rs:20:14
   4: core::ops::function::FnOnce::call_once
             at /rustc/59807616e1fa2540724bfbac14d7976d7e4a3860/library/core/src/ops/function.rs:250:5
   5: <fn() -> core::result::Result<(), alloc::string::String> as core::ops::function::FnOnce<()>>::call_once
             at /rustc/59807616e1fa2540724bfbac14d7976d7e4a3860/library/core/src/ops/function.rs:250:5
note: Some details are omitted, run with ` + "`" + `RUST_BACKTRACE=full` + "`" + ` for a verbose backtrace.


failures:
    tests::bad
    tests::boom

test result: FAILED. 1 passed; 2 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.08s

error: test failed, to rerun pass ` + "`" + `--lib` + "`" + `
`

// TestRustFailuresFromCargo checks the rust parser against recorded cargo
// output, backtraces included.
func TestRustFailuresFromCargo(t *testing.T) {
	p := NewParser("rust")
	for rest := cargoTestOutput; rest != ""; {
		n := min(len(rest), 29)
		p.Write([]byte(rest[:n]))
		rest = rest[n:]
	}
	want := []Failure{
		{Test: "tests::bad", File: "src/lib.rs", Line: 16, Message: "assertion `left == right` failed\n  left: 2\n right: 3"},
		{Test: "tests::boom", File: "src/lib.rs", Line: 21, Message: "boom 1"},
	}
	if d := gocmp.Diff(want, p.Result()); d != "" {
		t.Errorf("failures (-want +got):\n%s", d)
	}
}
