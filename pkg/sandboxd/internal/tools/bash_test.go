package tools

import (
	"context"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/procgroup"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/sandboxdtest"
)

func TestBash(t *testing.T) {
	tb, ws := newTestToolbox(t)
	tests := []struct {
		name       string
		in         BashInput
		wantOutput string
		wantExit   int
		wantText   string
	}{
		{name: "stdout", in: BashInput{Command: "echo hello"}, wantOutput: "hello\n", wantText: "hello\n"},
		{name: "stderr interleaved", in: BashInput{Command: "echo a; echo b >&2; echo c"}, wantOutput: "a\nb\nc\n"},
		{name: "exit code", in: BashInput{Command: "echo oops; exit 3"}, wantOutput: "oops\n", wantExit: 3, wantText: "[exit code 3]"},
		{name: "runs in the workspace", in: BashInput{Command: "pwd"}, wantOutput: ws + "\n"},
		{name: "stdin is empty", in: BashInput{Command: "cat; echo done"}, wantOutput: "done\n"},
		{name: "no output", in: BashInput{Command: "true"}, wantText: "[no output; exit code 0]"},
		{name: "killed by a signal", in: BashInput{Command: "kill -9 $$"}, wantExit: 137},
		{name: "no pager", in: BashInput{Command: "echo $PAGER $GIT_TERMINAL_PROMPT"}, wantOutput: "cat 0\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, out, err := tb.bash(t.Context(), tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if out.Output != tt.wantOutput || out.ExitCode != tt.wantExit || out.TimedOut {
				t.Errorf("output = %q exit %d timedOut %v; want %q exit %d", out.Output, out.ExitCode, out.TimedOut, tt.wantOutput, tt.wantExit)
			}
			if text := resultText(t, res); !strings.Contains(text, tt.wantText) {
				t.Errorf("text %q does not contain %q", text, tt.wantText)
			}
		})
	}
}

func TestBashInputErrors(t *testing.T) {
	tb, _ := newTestToolbox(t)
	for name, in := range map[string]BashInput{
		"empty command":    {Command: "  "},
		"timeout too long": {Command: "true", Timeout: 600001},
		"negative timeout": {Command: "true", Timeout: -1},
	} {
		t.Run(name, func(t *testing.T) {
			if _, _, err := tb.bash(t.Context(), in); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}

// TestBashTimeoutKillsTheWholeGroup runs a command that forks (a background
// child, a subshell's child) and sleeps: on timeout all of them die, and the
// exit code is 124.
func TestBashTimeoutKillsTheWholeGroup(t *testing.T) {
	tb, ws := newTestToolbox(t)
	cmd := `sleep 300 & echo $! > bg.pid; (sleep 301 & echo $! > sub.pid; wait) & echo $$ > leader.pid; sleep 302`
	done := make(chan struct{})
	var out BashOutput
	var err error
	go func() {
		defer close(done)
		_, out, err = tb.bash(t.Context(), BashInput{Command: cmd, Timeout: 1000})
	}()
	pids := []int{sandboxdtest.ReadPID(t, filepath.Join(ws, "bg.pid")), sandboxdtest.ReadPID(t, filepath.Join(ws, "sub.pid")), sandboxdtest.ReadPID(t, filepath.Join(ws, "leader.pid"))}
	for _, pid := range pids {
		if !sandboxdtest.Alive(pid) {
			t.Fatalf("process %d died before the timeout", pid)
		}
	}
	select {
	case <-done:
	case <-time.After(testTimeout):
		t.Fatal("Bash did not return after its timeout")
	}
	if err != nil {
		t.Fatal(err)
	}
	if !out.TimedOut || out.ExitCode != 124 {
		t.Errorf("timedOut=%v exit=%d, want true and 124", out.TimedOut, out.ExitCode)
	}
	sandboxdtest.WaitDead(t, pids...)
	if n := tb.procs.Count(); n != 0 {
		t.Errorf("%d process groups still registered", n)
	}
}

// TestBashLeavesNothingBehind: a command that exits while a child it put in
// the background still runs returns at once, and the child is killed.
func TestBashLeavesNothingBehind(t *testing.T) {
	tb, ws := newTestToolbox(t)
	_, out, err := tb.bash(t.Context(), BashInput{Command: `sleep 300 & echo $! > bg.pid; echo started`})
	if err != nil {
		t.Fatal(err)
	}
	if out.Output != "started\n" || out.ExitCode != 0 {
		t.Errorf("output %q exit %d", out.Output, out.ExitCode)
	}
	sandboxdtest.WaitDead(t, sandboxdtest.ReadPID(t, filepath.Join(ws, "bg.pid")))
}

// TestBashReturnsWhenAnEscapedProcessHoldsTheOutput: a process that left
// the group (setsid) cannot be killed with it, but holding the output pipe
// does not keep the call from returning.
func TestBashReturnsWhenAnEscapedProcessHoldsTheOutput(t *testing.T) {
	tb, ws := newTestToolbox(t)
	done := make(chan error, 1)
	go func() {
		_, _, err := tb.bash(t.Context(), BashInput{Command: `setsid sh -c 'echo $$ > esc.pid; exec sleep 300' & until [ -s esc.pid ]; do sleep 0.01; done; echo ok`})
		done <- err
	}()
	pid := sandboxdtest.ReadPID(t, filepath.Join(ws, "esc.pid"))
	t.Cleanup(func() {
		syscall.Kill(pid, syscall.SIGKILL)
		sandboxdtest.WaitDead(t, pid)
	})
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(testTimeout):
		t.Fatal("Bash did not return")
	}
}

func TestBashCancelKillsTheGroup(t *testing.T) {
	tb, ws := newTestToolbox(t)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, _, err := tb.bash(ctx, BashInput{Command: `sleep 300 & echo $! > bg.pid; echo $$ > leader.pid; wait`})
		done <- err
	}()
	pids := []int{sandboxdtest.ReadPID(t, filepath.Join(ws, "bg.pid")), sandboxdtest.ReadPID(t, filepath.Join(ws, "leader.pid"))}
	cancel()
	select {
	case err := <-done:
		sandboxdtest.WantErrContaining(t, err, "cancelled")
	case <-time.After(testTimeout):
		t.Fatal("Bash did not return after cancel")
	}
	sandboxdtest.WaitDead(t, pids...)
}

func TestBashOutputCap(t *testing.T) {
	tb, _ := newTestToolbox(t)
	_, out, err := tb.bash(t.Context(), BashInput{Command: `printf 'FIRST'; head -c 300000 /dev/zero | tr '\0' x; printf 'LAST'`})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.Output, "FIRST") || !strings.HasSuffix(out.Output, "LAST") {
		t.Errorf("output does not keep its first and last bytes")
	}
	if !strings.Contains(out.Output, "bytes of output elided") {
		t.Errorf("output does not say it was cut")
	}
	if len(out.Output) > procgroup.ForegroundOutputBytes+300 {
		t.Errorf("output is %d bytes", len(out.Output))
	}
}

func TestStreamBuffer(t *testing.T) {
	b := &streamBuffer{limit: 10}
	b.Write([]byte("01 3456"))
	b.Write([]byte("78 abc"))
	got, dropped := b.take()
	if got != "345678 abc" || dropped != 3 {
		t.Errorf("take = %q, %d; want \"345678 abc\", 3", got, dropped)
	}
	// The oldest output dropped cut a token: the rest of it goes too.
	b.Write([]byte(strings.Repeat("z", 20) + " tail"))
	got, dropped = b.take()
	if got != " tail" || dropped != 20 {
		t.Errorf("take = %q, %d; want \" tail\", 20", got, dropped)
	}
	if got, dropped = b.take(); got != "" || dropped != 0 {
		t.Errorf("second take = %q, %d; want nothing", got, dropped)
	}
}

// pollShell reads a background shell's output until cond holds (bounded),
// and returns everything read.
func pollShell(t *testing.T, tb *Toolbox, id string, cond func(all BashOutputOutput) bool) BashOutputOutput {
	t.Helper()
	var all BashOutputOutput
	deadline := time.Now().Add(testTimeout)
	for {
		_, out, err := tb.bashOutput(t.Context(), BashOutputInput{ShellID: id})
		if err != nil {
			t.Fatal(err)
		}
		all.ShellID, all.Status, all.ExitCode = out.ShellID, out.Status, out.ExitCode
		all.Stdout += out.Stdout
		all.Stderr += out.Stderr
		if cond(all) {
			return all
		}
		if time.Now().After(deadline) {
			t.Fatalf("shell %s: condition not met; read %+v", id, all)
		}
		time.Sleep(10 * time.Millisecond) // the shell writes at its own pace
	}
}

func TestBackgroundShell(t *testing.T) {
	tb, ws := newTestToolbox(t)
	t.Cleanup(func() { tb.Stop(context.Background()) })

	res, out, err := tb.bash(t.Context(), BashInput{Command: `echo $$ > shell.pid; sleep 300 & echo $! > child.pid; for i in 1 2 3; do echo out$i; echo err$i >&2; done; wait`, RunInBackground: true})
	if err != nil {
		t.Fatal(err)
	}
	if out.ShellID == "" || !strings.Contains(resultText(t, res), out.ShellID) {
		t.Fatalf("no shell id: %+v", out)
	}
	pids := []int{sandboxdtest.ReadPID(t, filepath.Join(ws, "shell.pid")), sandboxdtest.ReadPID(t, filepath.Join(ws, "child.pid"))}
	got := pollShell(t, tb, out.ShellID, func(o BashOutputOutput) bool {
		return strings.Count(o.Stdout, "\n") == 3 && strings.Count(o.Stderr, "\n") == 3
	})
	if got.Stdout != "out1\nout2\nout3\n" || got.Stderr != "err1\nerr2\nerr3\n" || got.Status != shellRunning || got.ExitCode != nil {
		t.Fatalf("read %+v", got)
	}
	if n := tb.shells.running(); n != 1 {
		t.Errorf("running shells = %d", n)
	}

	_, kout, err := tb.killShell(t.Context(), KillShellInput{ShellID: out.ShellID})
	if err != nil || kout.Status != shellKilled {
		t.Fatalf("KillShell = %+v, %v", kout, err)
	}
	sandboxdtest.WaitDead(t, pids...)
	_, final, err := tb.bashOutput(t.Context(), BashOutputInput{ShellID: out.ShellID})
	if err != nil {
		t.Fatal(err)
	}
	if final.Status != shellKilled || final.ExitCode == nil || *final.ExitCode != 137 {
		t.Errorf("after KillShell: %+v", final)
	}
	// Killing again is harmless.
	if _, kout, err := tb.killShell(t.Context(), KillShellInput{ShellID: out.ShellID}); err != nil || kout.Status != shellKilled {
		t.Errorf("second KillShell = %+v, %v", kout, err)
	}
}

func TestBackgroundShellExits(t *testing.T) {
	tb, _ := newTestToolbox(t)
	_, out, err := tb.bash(t.Context(), BashInput{Command: `echo done; exit 3`, RunInBackground: true})
	if err != nil {
		t.Fatal(err)
	}
	got := pollShell(t, tb, out.ShellID, func(o BashOutputOutput) bool { return o.Status == shellExited })
	if got.Stdout != "done\n" || got.ExitCode == nil || *got.ExitCode != 3 {
		t.Errorf("read %+v", got)
	}
	_, _, err = tb.bashOutput(t.Context(), BashOutputInput{ShellID: "shell-nope"})
	sandboxdtest.WantErrContaining(t, err, "no background shell")
}

func TestBackgroundShellLimit(t *testing.T) {
	tb, _ := newTestToolbox(t)
	t.Cleanup(func() { tb.Stop(context.Background()) })
	for i := range maxRunningShells {
		if _, _, err := tb.bash(t.Context(), BashInput{Command: "sleep 300", RunInBackground: true}); err != nil {
			t.Fatalf("shell %d: %v", i, err)
		}
	}
	_, _, err := tb.bash(t.Context(), BashInput{Command: "sleep 300", RunInBackground: true})
	sandboxdtest.WantErrContaining(t, err, "KillShell")
}

func TestStopKillsBackgroundShells(t *testing.T) {
	tb, ws := newTestToolbox(t)
	_, out, err := tb.bash(t.Context(), BashInput{Command: `echo $$ > s.pid; sleep 300`, RunInBackground: true})
	if err != nil {
		t.Fatal(err)
	}
	pid := sandboxdtest.ReadPID(t, filepath.Join(ws, "s.pid"))
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	if err := tb.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	sandboxdtest.WaitDead(t, pid)
	sh, _ := tb.shells.get(out.ShellID)
	if sh.status() != shellKilled {
		t.Errorf("status after stop = %s", sh.status())
	}
	// After stop, nothing new runs.
	_, bout, err := tb.bash(t.Context(), BashInput{Command: "echo should-not-run"})
	if err == nil && bout.Output == "should-not-run\n" {
		t.Error("a command ran after stop")
	}
}

func TestRunChecks(t *testing.T) {
	tb, ws := newTestToolbox(t)
	_, _, err := tb.runTests(t.Context(), RunTestsInput{})
	sandboxdtest.WantErrContaining(t, err, "no known project")
	_, _, err = tb.runTests(t.Context(), RunTestsInput{Language: "cobol"})
	sandboxdtest.WantErrContaining(t, err, "language must be one of")

	sandboxdtest.WriteFile(t, filepath.Join(ws, "go.mod"), "module example.com/m\n\ngo 1.22\n")
	sandboxdtest.WriteFile(t, filepath.Join(ws, "m.go"), "package m\n\nfunc Add(a, b int) int { return a + b }\n")
	sandboxdtest.WriteFile(t, filepath.Join(ws, "m_test.go"), "package m\n\nimport \"testing\"\n\nfunc TestAdd(t *testing.T) {\n\tif Add(1, 2) != 3 {\n\t\tt.Fatal(\"bad\")\n\t}\n}\n")
	res, out, err := tb.runTests(t.Context(), RunTestsInput{})
	if err != nil {
		t.Fatal(err)
	}
	if out.Language != "go" || out.Command != "go test ./..." || !out.Passed {
		t.Fatalf("run_tests = %+v\n%s", out, resultText(t, res))
	}
	if text := resultText(t, res); !strings.Contains(text, "ok") || !strings.Contains(text, "go tests (passed)") {
		t.Errorf("text = %q", text)
	}
	_, tc, err := tb.runTypecheck(t.Context(), RunTypecheckInput{})
	if err != nil || !tc.Passed || tc.Command != "go build ./..." {
		t.Errorf("run_typecheck = %+v, %v", tc, err)
	}

	// A failing test and a type error fail their checks.
	sandboxdtest.WriteFile(t, filepath.Join(ws, "m_test.go"), "package m\n\nimport \"testing\"\n\nfunc TestAdd(t *testing.T) { t.Fatal(\"broken\") }\n")
	_, out, err = tb.runTests(t.Context(), RunTestsInput{Language: "go"})
	if err != nil || out.Passed || out.ExitCode == 0 || !strings.Contains(out.Output, "broken") {
		t.Errorf("failing run_tests = %+v, %v", out, err)
	}
	sandboxdtest.WriteFile(t, filepath.Join(ws, "m.go"), "package m\n\nfunc Add(a, b int) int { return a + \"b\" }\n")
	res, lint, err := tb.runLint(t.Context(), RunLintInput{})
	if err != nil || lint.Passed {
		t.Errorf("run_lint on broken code = %+v, %v", lint, err)
	}
	if text := resultText(t, res); !strings.Contains(text, "FAILED") {
		t.Errorf("text = %q", text)
	}
}
