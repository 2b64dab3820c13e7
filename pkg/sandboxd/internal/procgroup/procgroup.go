// Package procgroup runs sandboxd's commands: /bin/bash -c in a process
// group of its own, killed whole when the leader exits, when a timeout or
// a context ends, or at shutdown (Groups.KillAll), so that nothing a
// command started outlives it; RunForeground waits for one and returns its
// capped output and exit code.
package procgroup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/outcap"
)

const (
	// ForegroundOutputBytes caps the output a Bash or run_* call returns.
	ForegroundOutputBytes = 100 << 10
	// DrainGrace is how long output is still read after a process group
	// is gone, from processes that left the group (setsid) but kept the pipe.
	DrainGrace = 2 * time.Second
	// ExitTimedOut is the exit code of a call killed by its timeout, as
	// timeout(1) reports it.
	ExitTimedOut = 124
)

// Env is added to the environment of every command: no pager, no
// prompt that would wait for a terminal that is not there.
var Env = []string{"PAGER=cat", "GIT_PAGER=cat", "GIT_TERMINAL_PROMPT=0"}

// Groups tracks the process groups that run, so that shutdown can
// kill every one of them. Once closed, a new group is killed as it starts.
type Groups struct {
	mu     sync.Mutex
	groups map[int]*Process
	closed bool
}

func NewGroups() *Groups { return &Groups{groups: make(map[int]*Process)} }

// ErrStopped refuses a command once shutdown has begun.
var ErrStopped = errors.New("sandboxd is shutting down: no new commands are started")

// IsClosed reports whether shutdown has begun.
func (p *Groups) IsClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

// add records the group; it returns false (and the caller must kill the
// group) once shutdown has begun.
func (p *Groups) add(g *Process) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.groups[g.pgid] = g
	return true
}

func (p *Groups) remove(pgid int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.groups, pgid)
}

// KillAll kills every group and refuses new ones.
func (p *Groups) KillAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, g := range p.groups {
		g.Kill()
	}
}

// Count returns the number of running groups.
func (p *Groups) Count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.groups)
}

// KillGroup sends SIGKILL to the whole process group pgid.
func KillGroup(pgid int) {
	if pgid > 0 {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
}

// Process is a command started in a process group of its own, whose
// output goes to writers through pipes.
type Process struct {
	cmd    *exec.Cmd
	pgid   int
	groups *Groups
	// exited is closed when the leader has exited (not yet reaped), after the
	// rest of its group was killed.
	exited chan struct{}
	// done is closed when the leader is reaped and the pipes are drained.
	done    chan struct{}
	waitErr error
	killed  chan struct{} // closed by kill
	kOnce   sync.Once
}

// Start starts /bin/bash -c command in dir, in a new process group,
// stdin from /dev/null, stdout and stderr copied to the writers (which may be
// the same). The group is killed whole when the leader exits, so that
// nothing a foreground command left behind outlives it.
func Start(groups *Groups, dir, command string, stdout, stderr io.Writer) (*Process, error) {
	return StartEnv(groups, dir, command, nil, stdout, stderr)
}

// StartEnv is Start with env added last to the command's environment (a variable named twice
// takes its last value): the tool call's trace context (WithEnv).
func StartEnv(groups *Groups, dir, command string, env []string, stdout, stderr io.Writer) (*Process, error) {
	if groups.IsClosed() {
		return nil, ErrStopped
	}
	cmd := exec.Command("/bin/bash", "-c", command)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), Env...), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}

	var pipes []*os.File // read ends
	var writeEnds []*os.File
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("creating a pipe: %v", err)
	}
	pipes, writeEnds = append(pipes, outR), append(writeEnds, outW)
	cmd.Stdout = outW
	cmd.Stderr = outW
	if stderr != stdout {
		errR, errW, err := os.Pipe()
		if err != nil {
			outR.Close()
			outW.Close()
			return nil, fmt.Errorf("creating a pipe: %v", err)
		}
		pipes, writeEnds = append(pipes, errR), append(writeEnds, errW)
		cmd.Stderr = errW
	}
	startErr := cmd.Start()
	for _, w := range writeEnds {
		w.Close() // the child has its copies
	}
	if startErr != nil {
		for _, r := range pipes {
			r.Close()
		}
		return nil, fmt.Errorf("starting /bin/bash: %v", startErr)
	}
	p := &Process{
		cmd:    cmd,
		pgid:   cmd.Process.Pid,
		groups: groups,
		exited: make(chan struct{}),
		done:   make(chan struct{}),
		killed: make(chan struct{}),
	}
	if !groups.add(p) {
		p.Kill() // shutdown began while it started
	}

	var copies sync.WaitGroup
	writers := []io.Writer{stdout, stderr}
	for i, r := range pipes {
		copies.Go(func() { _, _ = io.Copy(writers[i], r) })
	}
	go func() {
		defer close(p.done)
		WaitExit(p.pgid)
		KillGroup(p.pgid) // the leader is a zombie: the group id cannot be reused yet
		close(p.exited)
		p.waitErr = cmd.Wait()
		groups.remove(p.pgid)
		drained := make(chan struct{})
		go func() { copies.Wait(); close(drained) }()
		select {
		case <-drained:
		case <-time.After(DrainGrace):
			for _, r := range pipes {
				r.Close() // a process that left the group holds the pipe: stop reading
			}
			<-drained
		}
		for _, r := range pipes {
			r.Close()
		}
	}()
	return p, nil
}

// WaitExit waits until the process pid has exited, without reaping it.
func WaitExit(pid int) {
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			return
		}
	}
}

// Exited is closed when the leader has exited, once the rest of its group
// was killed.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// Done is closed when the leader is reaped and the output drained.
func (p *Process) Done() <-chan struct{} { return p.done }

// Kill kills the whole group.
func (p *Process) Kill() {
	p.kOnce.Do(func() { close(p.killed) })
	KillGroup(p.pgid)
}

// WasKilled reports whether kill was called.
func (p *Process) WasKilled() bool {
	select {
	case <-p.killed:
		return true
	default:
		return false
	}
}

// ExitCode is the leader's exit code once done is closed: 128+n for a
// signal, as bash reports it.
func (p *Process) ExitCode() int {
	st := p.cmd.ProcessState
	if st == nil {
		return -1
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return st.ExitCode()
}

type envKey struct{}

// WithEnv returns ctx with env, which the commands started with it get last in their
// environment: the composition gives a tool call's processes its trace context this way
// (TRACEPARENT, the proxy URLs naming the call's span: docs/record.md §1).
func WithEnv(ctx context.Context, env []string) context.Context {
	return context.WithValue(ctx, envKey{}, env)
}

// EnvFrom returns the environment WithEnv put in ctx, or nil.
func EnvFrom(ctx context.Context) []string {
	env, _ := ctx.Value(envKey{}).([]string)
	return env
}

// Result is the outcome of a foreground command.
type Result struct {
	Output   string
	ExitCode int
	TimedOut bool
	Canceled bool
	Elapsed  time.Duration
}

// RunForeground runs command in dir and waits for it, for at most timeout;
// on timeout or when ctx ends, the whole process group is killed. The
// output (stdout and stderr, interleaved) is capped at ForegroundOutputBytes.
func RunForeground(ctx context.Context, groups *Groups, dir, command string, timeout time.Duration) (Result, error) {
	return RunForegroundTee(ctx, groups, dir, command, timeout, nil)
}

// RunForegroundTee is RunForeground that also writes the whole output, as it
// comes and before the cap, to tee (when it is not nil).
func RunForegroundTee(ctx context.Context, groups *Groups, dir, command string, timeout time.Duration, tee io.Writer) (Result, error) {
	out := outcap.New(ForegroundOutputBytes)
	var w io.Writer = out
	if tee != nil {
		w = io.MultiWriter(out, tee)
	}
	start := time.Now()
	p, err := StartEnv(groups, dir, command, EnvFrom(ctx), w, w)
	if err != nil {
		return Result{}, err
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	res := Result{}
	select {
	case <-p.Exited():
	case <-timer.C:
		res.TimedOut = true
		p.Kill()
	case <-ctx.Done():
		res.Canceled = true
		p.Kill()
	}
	<-p.Done()
	res.Elapsed = time.Since(start)
	res.Output = out.String()
	res.ExitCode = p.ExitCode()
	if res.TimedOut {
		res.ExitCode = ExitTimedOut
	}
	return res, nil
}
