package tools

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/sandboxdtest"
)

// navWorkspace writes files into a fresh workspace.
func navWorkspace(t *testing.T, files map[string]string) (*Toolbox, string) {
	t.Helper()
	tb, ws := newTestToolbox(t)
	for name, content := range files {
		p := filepath.Join(ws, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return tb, ws
}

const navMain = "package main\n\nfunc helper() int { return 1 }\n\nfunc main() { _ = helper() }\n"

func at(line, col int) NavPositionInput {
	return NavPositionInput{FilePath: "main.go", Line: line, Column: col}
}

func TestFindDefinitionConfinesLocations(t *testing.T) {
	tb, ws := navWorkspace(t, map[string]string{"main.go": navMain})
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "x.go"), []byte("package x\n\nfunc helper() {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(ws, "out")); err != nil {
		t.Fatal(err)
	}
	useFakeLSP(t, tb, "ok", map[string]string{"textDocument/definition": `[
		{"uri": "$ROOT/main.go", "range": {"start": {"line": 2, "character": 5}, "end": {"line": 2, "character": 11}}},
		{"uri": "file://` + outside + `/x.go", "range": {"start": {"line": 2, "character": 5}, "end": {"line": 2, "character": 11}}},
		{"uri": "$ROOT/out/x.go", "range": {"start": {"line": 2, "character": 5}, "end": {"line": 2, "character": 11}}},
		{"uri": "$ROOT/../escape.go", "range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 1}}},
		{"uri": "untitled:Untitled-1", "range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 1}}}]`})

	res, out, err := tb.findDefinition(t.Context(), FindDefinitionInput{at(5, 20)})
	if err != nil {
		t.Fatal(err)
	}
	want := FindDefinitionOutput{Definitions: []NavLocation{{FilePath: "main.go", Line: 3, Column: 6, Text: "func helper() int { return 1 }"}}, Outside: 4}
	if diff := cmp.Diff(want, out); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}
	text := resultText(t, res)
	if strings.Contains(text, outside) || strings.Contains(text, "x.go") || !strings.Contains(text, "main.go:3:6: func helper()") {
		t.Errorf("text %q shows a location outside the workspace, or not the one inside", text)
	}
}

func TestNavPosition(t *testing.T) {
	tb, _ := navWorkspace(t, map[string]string{
		"main.go":  navMain,
		"wide.go":  "package main\n\nvar é, 𝔸x, x = 1, 2, 3 // x\n",
		"notes.py": "x = 1\n",
	})
	useFakeLSP(t, tb, "ok", nil)
	tests := map[string]struct {
		in       NavPositionInput
		wantChar int    // UTF-16 offset sent to the server
		wantErr  string // else
	}{
		"column":                                 {in: at(3, 6), wantChar: 5},
		"symbol alone: its first whole word":     {in: NavPositionInput{FilePath: "main.go", Line: 5, Symbol: "helper"}, wantChar: 18},
		"symbol and column: nearest occurence":   {in: NavPositionInput{FilePath: "wide.go", Line: 3, Column: 25, Symbol: "x"}, wantChar: 27},
		"symbol not inside a longer name":        {in: NavPositionInput{FilePath: "wide.go", Line: 3, Symbol: "x"}, wantChar: 12},
		"columns are characters, sent as UTF-16": {in: NavPositionInput{FilePath: "wide.go", Line: 3, Column: 9}, wantChar: 9},
		"col, CodeGen-Sandbox's column":          {in: NavPositionInput{FilePath: "main.go", Line: 3, Col: 6}, wantChar: 5},
		"column and col alike":                   {in: NavPositionInput{FilePath: "main.go", Line: 3, Column: 6, Col: 6}, wantChar: 5},
		"column and col differ":                  {in: NavPositionInput{FilePath: "main.go", Line: 3, Column: 6, Col: 7}, wantErr: "column 6 and col 7 differ"},
		"neither column nor symbol":              {in: NavPositionInput{FilePath: "main.go", Line: 3}, wantErr: "give the column"},
		"symbol not on the line":                 {in: NavPositionInput{FilePath: "main.go", Line: 1, Symbol: "helper"}, wantErr: `symbol "helper" does not occur`},
		"line past the end":                      {in: at(99, 1), wantErr: "line 99 is past the end of main.go, which has 6 lines"},
		"column past the end":                    {in: at(1, 13), wantErr: "column 13 is past the end"},
		"line 0":                                 {in: at(0, 1), wantErr: "line must be 1 or more"},
		"no language server for the language":    {in: NavPositionInput{FilePath: "notes.py", Line: 1, Column: 1}, wantErr: `no language server for ".py" files`},
		"outside the workspace":                  {in: NavPositionInput{FilePath: "../x.go", Line: 1, Column: 1}, wantErr: "leaves the workspace"},
		"absolute path elsewhere":                {in: NavPositionInput{FilePath: "/etc/hostname.go", Line: 1, Column: 1}, wantErr: "outside the workspace"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := tb.resolveTarget(tc.in)
			if tc.wantErr != "" {
				sandboxdtest.WantErrContaining(t, err, tc.wantErr)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.pos.Line != tc.in.Line-1 || got.pos.Character != tc.wantChar {
				t.Errorf("position %+v, want line %d character %d", got.pos, tc.in.Line-1, tc.wantChar)
			}
		})
	}
}

func TestFindReferencesListsUsesInOrder(t *testing.T) {
	tb, _ := navWorkspace(t, map[string]string{"main.go": navMain, "b.go": "package main\n\nvar y = helper()\n"})
	fake := useFakeLSP(t, tb, "ok", map[string]string{"textDocument/references": `[
		{"uri": "$ROOT/main.go", "range": {"start": {"line": 4, "character": 18}, "end": {"line": 4, "character": 24}}},
		{"uri": "$ROOT/b.go", "range": {"start": {"line": 2, "character": 8}, "end": {"line": 2, "character": 14}}},
		{"uri": "$ROOT/main.go", "range": {"start": {"line": 2, "character": 5}, "end": {"line": 2, "character": 11}}},
		{"uri": "file:///usr/lib/go/src/x.go", "range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 1}}}]`})
	res, out, err := tb.findReferences(t.Context(), FindReferencesInput{NavPositionInput: at(3, 6)})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := resultText(t, res), "b.go:3:9: var y = helper()\nmain.go:3:6: func helper() int { return 1 }\nmain.go:5:19: func main() { _ = helper() }\n(1 more outside the workspace, not shown)\n"; got != want {
		t.Errorf("text %q, want %q", got, want)
	}
	if out.Total != 3 || out.Outside != 1 {
		t.Errorf("total %d outside %d, want 3 and 1", out.Total, out.Outside)
	}
	// The same server answers the next call, told of the file changed since.
	if err := os.WriteFile(filepath.Join(tb.ws.Dir(), "c.go"), []byte("package main\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := tb.findReferences(t.Context(), FindReferencesInput{NavPositionInput: at(3, 6)}); err != nil {
		t.Fatal(err)
	}
	methods := fake.methods()
	if n := strings.Count(strings.Join(methods, " "), "initialize "); n != 1 {
		t.Errorf("the server was initialized %d times, want once: %v", n, methods)
	}
	if !slices.Contains(methods, "workspace/didChangeWatchedFiles") || !slices.Contains(methods, "textDocument/didOpen") || !slices.Contains(methods, "textDocument/didClose") {
		t.Errorf("methods %v lack didOpen, didClose or didChangeWatchedFiles", methods)
	}
}

func TestNavServerFailures(t *testing.T) {
	tests := map[string]struct {
		mode    string
		big     bool // the file is larger than a pipe's buffer
		wantErr string
	}{
		"a server that crashes": {mode: "crash", wantErr: "exited unexpectedly (exit status 3): fake: crashing on textDocument/definition; it is started again on the next call"},
		"a server that hangs":   {mode: "hang", wantErr: "did not answer within 200ms: it was stopped; it is started again on the next call"},
		"a server that stops reading (a write of a large file would block)": {mode: "deaf", big: true, wantErr: "did not answer within 200ms: it was stopped; it is started again on the next call"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			content := navMain
			if tc.big {
				content += "// " + strings.Repeat("x", 1<<20) + "\n"
			}
			tb, _ := navWorkspace(t, map[string]string{"main.go": content})
			fake := useFakeLSP(t, tb, tc.mode, map[string]string{"textDocument/definition": `{"uri": "$ROOT/main.go", "range": {"start": {"line": 2, "character": 5}, "end": {"line": 2, "character": 11}}}`})
			tb.nav.opts.requestTimeout = 200 * time.Millisecond
			_, _, err := tb.findDefinition(t.Context(), FindDefinitionInput{at(5, 20)})
			sandboxdtest.WantErrContaining(t, err, tc.wantErr)
			leader, child := fake.processes(t)
			if running(leader) {
				t.Errorf("the server (pid %d) still runs", leader)
			}
			waitGone(t, child)
			if n := tb.nav.count(); n != 0 {
				t.Errorf("%d servers still counted", n)
			}

			// The next call starts a new server.
			fake.setMode(tb, "ok")
			_, out, err := tb.findDefinition(t.Context(), FindDefinitionInput{at(5, 20)})
			if err != nil {
				t.Fatalf("the call after the failure: %v", err)
			}
			if len(out.Definitions) != 1 {
				t.Errorf("definitions %v", out.Definitions)
			}
			if l2, _ := fake.processes(t); l2 == leader {
				t.Error("the failed server was reused")
			}
		})
	}
}

func TestNavServerStartFailures(t *testing.T) {
	t.Run("no server on PATH", func(t *testing.T) {
		tb, _ := navWorkspace(t, map[string]string{"main.go": navMain})
		tb.nav.specs[0].command = "airlock-no-such-language-server"
		_, _, err := tb.findReferences(t.Context(), FindReferencesInput{NavPositionInput: at(3, 6)})
		sandboxdtest.WantErrContaining(t, err, "needs the language server gopls, which is not installed in this sandbox (airlock-no-such-language-server is not on PATH")
	})
	t.Run("a server that does not answer initialize", func(t *testing.T) {
		tb, _ := navWorkspace(t, map[string]string{"main.go": navMain})
		fake := useFakeLSP(t, tb, "mute", nil)
		tb.nav.opts.startTimeout = 200 * time.Millisecond
		_, _, err := tb.findDefinition(t.Context(), FindDefinitionInput{at(5, 20)})
		sandboxdtest.WantErrContaining(t, err, "gopls did not start within 200ms: it was stopped; it is started again on the next call")
		leader, child := fake.processes(t)
		if running(leader) {
			t.Errorf("the server (pid %d) still runs", leader)
		}
		waitGone(t, child)
	})
}

func TestNavServerMemoryBound(t *testing.T) {
	tb, _ := navWorkspace(t, map[string]string{"main.go": navMain})
	fake := useFakeLSP(t, tb, "ok", nil)
	tb.nav.opts.memoryLimit = 1 << 10 // any process uses more: checked before the request
	_, _, err := tb.findDefinition(t.Context(), FindDefinitionInput{at(5, 20)})
	sandboxdtest.WantErrContaining(t, err, "was stopped: it used")
	sandboxdtest.WantErrContaining(t, err, "MiB of memory, more than the 0 MiB allowed; it is started again on the next call")
	leader, child := fake.processes(t)
	if running(leader) {
		t.Errorf("the server (pid %d) still runs", leader)
	}
	waitGone(t, child)
}

func TestNavServerIdleAndShutdown(t *testing.T) {
	tb, _ := navWorkspace(t, map[string]string{"main.go": navMain})
	fake := useFakeLSP(t, tb, "ok", nil)
	tb.nav.opts.idleTimeout = 10 * time.Millisecond
	if _, _, err := tb.findDefinition(t.Context(), FindDefinitionInput{at(5, 20)}); err != nil {
		t.Fatal(err)
	}
	leader, child := fake.processes(t)
	waitGone(t, leader) // stopped once idle
	waitGone(t, child)
	if m := fake.methods(); !slices.Contains(m, "shutdown") || !slices.Contains(m, "exit") {
		t.Errorf("an idle server was not asked to shut down: %v", m)
	}

	// Started again on the next call; killed, child and all, at shutdown.
	tb.nav.opts.idleTimeout = time.Hour
	if _, _, err := tb.findDefinition(t.Context(), FindDefinitionInput{at(5, 20)}); err != nil {
		t.Fatal(err)
	}
	l2, c2 := fake.processes(t)
	if l2 == leader || !running(l2) {
		t.Fatalf("no new server runs (pid %d, was %d)", l2, leader)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := tb.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if running(l2) {
		t.Errorf("the server (pid %d) runs after shutdown", l2)
	}
	waitGone(t, c2)
	_, _, err := tb.findDefinition(t.Context(), FindDefinitionInput{at(5, 20)})
	sandboxdtest.WantErrContaining(t, err, "shutting down")
}

// TestNavCancelKeepsTheServer: a call cancelled by the client cancels its
// request and leaves the server running for the next call.
func TestNavCancelKeepsTheServer(t *testing.T) {
	tb, _ := navWorkspace(t, map[string]string{"main.go": navMain})
	fake := useFakeLSP(t, tb, "hang", nil)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, _, err := tb.findDefinition(ctx, FindDefinitionInput{at(5, 20)})
		done <- err
	}()
	waitForMethod(t, fake, "textDocument/definition")
	cancel()
	sandboxdtest.WantErrContaining(t, <-done, "cancelled: context canceled")
	waitForMethod(t, fake, "$/cancelRequest")
	leader, _ := fake.processes(t)
	if !running(leader) || tb.nav.count() != 1 {
		t.Errorf("the server was stopped by a cancelled call")
	}
}

// TestNavCancelWhileStarting: a call cancelled while its server starts
// says so, and the server is not left behind.
func TestNavCancelWhileStarting(t *testing.T) {
	tb, _ := navWorkspace(t, map[string]string{"main.go": navMain})
	fake := useFakeLSP(t, tb, "mute", nil)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, _, err := tb.findDefinition(ctx, FindDefinitionInput{at(5, 20)})
		done <- err
	}()
	waitForMethod(t, fake, "initialize")
	cancel()
	sandboxdtest.WantErrContaining(t, <-done, "cancelled while gopls started: context canceled; it is started again on the next call")
	leader, child := fake.processes(t)
	if running(leader) || tb.nav.count() != 0 {
		t.Errorf("the server (pid %d) was left behind", leader)
	}
	waitGone(t, child)
}

// waitForMethod waits until the fake has received method, watching its
// log's directory with inotify.
func waitForMethod(t *testing.T, fake *fakeLSP, method string) {
	t.Helper()
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if _, err := unix.InotifyAddWatch(fd, filepath.Dir(fake.log), unix.IN_CREATE|unix.IN_MODIFY); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	for !slices.Contains(fake.methods(), method) {
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, int(time.Minute.Milliseconds()))
		if err != nil && !errors.Is(err, unix.EINTR) {
			t.Fatal(err)
		}
		if n == 0 {
			t.Fatalf("the server never received %s: %v", method, fake.methods())
		}
		_, _ = unix.Read(fd, buf) // drain
	}
}
