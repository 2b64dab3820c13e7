package procgroup

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// processTestTimeout bounds every wait of the process group tests.
const processTestTimeout = 30 * time.Second

// groupMembers returns the live processes (not zombies) of process group
// pgid, from /proc.
func groupMembers(t *testing.T, pgid int) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var members []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // gone meanwhile
		}
		// After the command name (in parentheses): state, ppid, pgrp.
		f := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))
		if len(f) < 3 || f[0] == "Z" || f[0] == "X" {
			continue
		}
		if g, err := strconv.Atoi(f[2]); err == nil && g == pgid {
			members = append(members, pid)
		}
	}
	return members
}

// waitGroupSize waits (bounded) until process group pgid has want live
// members (want 0: none is left).
func waitGroupSize(t *testing.T, pgid, want int) {
	t.Helper()
	deadline := time.Now().Add(processTestTimeout)
	for {
		got := groupMembers(t, pgid)
		if len(got) == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process group %d has %v, want %d processes", pgid, got, want)
		}
		time.Sleep(5 * time.Millisecond) // other processes' state: nothing to wait on
	}
}

// lineWriter hands the first line written to it to a channel.
type lineWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	line chan string
	once sync.Once
}

func newLineWriter() *lineWriter { return &lineWriter{line: make(chan string, 1)} }

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if first, _, ok := strings.Cut(w.buf.String(), "\n"); ok {
		w.once.Do(func() { w.line <- first })
	}
	return len(p), nil
}

// leaderOf reads the pid the command printed first (its $$: the group id).
func leaderOf(t *testing.T, w *lineWriter) int {
	t.Helper()
	select {
	case line := <-w.line:
		pid, err := strconv.Atoi(line)
		if err != nil {
			t.Fatalf("the command printed %q first", line)
		}
		return pid
	case <-time.After(processTestTimeout):
		t.Fatal("the command printed nothing")
		return 0
	}
}

// TestRunForegroundEnds: a foreground command's whole process group is
// gone when it returns, whether the leader exits (its background child is
// killed with the group), its timeout passes (exit code 124) or its
// context ends; its exit code, output and environment are the command's.
func TestRunForegroundEnds(t *testing.T) {
	dir := t.TempDir()
	tests := map[string]struct {
		command      string
		timeout      time.Duration
		cancel       bool
		wantExit     int
		wantTimedOut bool
		wantCanceled bool
		wantOutput   string
	}{
		"leader exits":   {command: "echo $$; sleep 300 & exit 3", timeout: time.Hour, wantExit: 3},
		"timeout":        {command: "echo $$; sleep 300 & wait", timeout: 50 * time.Millisecond, wantExit: ExitTimedOut, wantTimedOut: true},
		"context ends":   {command: "echo $$; sleep 300 & wait", timeout: time.Hour, cancel: true, wantCanceled: true},
		"signalled":      {command: "echo $$; kill -TERM $$", timeout: time.Hour, wantExit: 128 + 15},
		"stderr and env": {command: "echo $$; echo \"$PAGER $GIT_PAGER $GIT_TERMINAL_PROMPT\" >&2", timeout: time.Hour, wantOutput: "cat cat 0\n"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			groups := NewGroups()
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			first := newLineWriter()
			type outcome struct {
				res Result
				err error
			}
			done := make(chan outcome, 1)
			go func() {
				res, err := RunForegroundTee(ctx, groups, dir, tc.command, tc.timeout, first)
				done <- outcome{res, err}
			}()
			pgid := leaderOf(t, first)
			if tc.cancel {
				waitGroupSize(t, pgid, 2) // the shell and its sleep
				cancel()
			}
			o := <-done
			if o.err != nil {
				t.Fatal(o.err)
			}
			res := o.res
			if res.ExitCode != tc.wantExit && !tc.wantCanceled || res.TimedOut != tc.wantTimedOut || res.Canceled != tc.wantCanceled {
				t.Errorf("result %+v, want exit %d, timed out %v, canceled %v", res, tc.wantExit, tc.wantTimedOut, tc.wantCanceled)
			}
			if want := strconv.Itoa(pgid) + "\n" + tc.wantOutput; res.Output != want {
				t.Errorf("output %q, want %q", res.Output, want)
			}
			waitGroupSize(t, pgid, 0)
			if n := groups.Count(); n != 0 {
				t.Errorf("%d groups still tracked", n)
			}
		})
	}
}

// TestRunForegroundCapsItsOutput: the output kept is capped; the tee gets
// all of it.
func TestRunForegroundCapsItsOutput(t *testing.T) {
	var tee bytes.Buffer
	res, err := RunForegroundTee(t.Context(), NewGroups(), t.TempDir(), "head -c 300000 /dev/zero | tr '\\0' a", time.Hour, &tee)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Output) > ForegroundOutputBytes+300 || !strings.HasPrefix(res.Output, "aaa") {
		t.Errorf("%d bytes kept, want at most about %d", len(res.Output), ForegroundOutputBytes)
	}
	if tee.Len() != 300000 {
		t.Errorf("the tee got %d bytes, want 300000", tee.Len())
	}
}

// TestKillAllRefusesNew: KillAll kills a running group whole and refuses
// the groups started after it.
func TestKillAllRefusesNew(t *testing.T) {
	groups := NewGroups()
	first := newLineWriter()
	p, err := Start(groups, t.TempDir(), "echo $$; sleep 300 & wait", first, first)
	if err != nil {
		t.Fatal(err)
	}
	pgid := leaderOf(t, first)
	waitGroupSize(t, pgid, 2)
	groups.KillAll()
	select {
	case <-p.Done():
	case <-time.After(processTestTimeout):
		t.Fatal("the killed group's leader was not reaped")
	}
	if !p.WasKilled() || p.ExitCode() != 128+9 {
		t.Errorf("killed %v, exit code %d, want killed by SIGKILL", p.WasKilled(), p.ExitCode())
	}
	waitGroupSize(t, pgid, 0)
	if _, err := Start(groups, t.TempDir(), "true", first, first); !errors.Is(err, ErrStopped) {
		t.Errorf("Start after KillAll = %v, want ErrStopped", err)
	}
	if _, err := RunForeground(t.Context(), groups, t.TempDir(), "true", time.Hour); !errors.Is(err, ErrStopped) {
		t.Errorf("RunForeground after KillAll = %v, want ErrStopped", err)
	}
}
