package sandboxd

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
	// foregroundOutputBytes caps the output a Bash or run_* call returns.
	foregroundOutputBytes = 100 << 10
	// pipeDrainGrace is how long output is still read after a process group
	// is gone, from processes that left the group (setsid) but kept the pipe.
	pipeDrainGrace = 2 * time.Second
	// exitTimedOut is the exit code of a call killed by its timeout, as
	// timeout(1) reports it.
	exitTimedOut = 124
)

// commandEnv is added to the environment of every command: no pager, no
// prompt that would wait for a terminal that is not there.
var commandEnv = []string{"PAGER=cat", "GIT_PAGER=cat", "GIT_TERMINAL_PROMPT=0"}

// processGroups tracks the process groups that run, so that shutdown can
// kill every one of them. Once closed, a new group is killed as it starts.
type processGroups struct {
	mu     sync.Mutex
	groups map[int]*groupProcess
	closed bool
}

func newProcessGroups() *processGroups { return &processGroups{groups: make(map[int]*groupProcess)} }

// errStopped refuses a command once shutdown has begun.
var errStopped = errors.New("sandboxd is shutting down: no new commands are started")

// isClosed reports whether shutdown has begun.
func (p *processGroups) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

// add records the group; it returns false (and the caller must kill the
// group) once shutdown has begun.
func (p *processGroups) add(g *groupProcess) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.groups[g.pgid] = g
	return true
}

func (p *processGroups) remove(pgid int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.groups, pgid)
}

// killAll kills every group and refuses new ones.
func (p *processGroups) killAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, g := range p.groups {
		g.kill()
	}
}

// count returns the number of running groups.
func (p *processGroups) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.groups)
}

// killGroup sends SIGKILL to the whole process group pgid.
func killGroup(pgid int) {
	if pgid > 0 {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
}

// groupProcess is a command started in a process group of its own, whose
// output goes to writers through pipes.
type groupProcess struct {
	cmd    *exec.Cmd
	pgid   int
	groups *processGroups
	// exited is closed when the leader has exited (not yet reaped), after the
	// rest of its group was killed.
	exited chan struct{}
	// done is closed when the leader is reaped and the pipes are drained.
	done    chan struct{}
	waitErr error
	killed  chan struct{} // closed by kill
	kOnce   sync.Once
}

// startGroup starts /bin/bash -c command in dir, in a new process group,
// stdin from /dev/null, stdout and stderr copied to the writers (which may be
// the same). The group is killed whole when the leader exits, so that
// nothing a foreground command left behind outlives it.
func startGroup(groups *processGroups, dir, command string, stdout, stderr io.Writer) (*groupProcess, error) {
	if groups.isClosed() {
		return nil, errStopped
	}
	cmd := exec.Command("/bin/bash", "-c", command)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), commandEnv...)
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
	p := &groupProcess{
		cmd:    cmd,
		pgid:   cmd.Process.Pid,
		groups: groups,
		exited: make(chan struct{}),
		done:   make(chan struct{}),
		killed: make(chan struct{}),
	}
	if !groups.add(p) {
		p.kill() // shutdown began while it started
	}

	var copies sync.WaitGroup
	writers := []io.Writer{stdout, stderr}
	for i, r := range pipes {
		copies.Go(func() { _, _ = io.Copy(writers[i], r) })
	}
	go func() {
		defer close(p.done)
		waitExit(p.pgid)
		killGroup(p.pgid) // the leader is a zombie: the group id cannot be reused yet
		close(p.exited)
		p.waitErr = cmd.Wait()
		groups.remove(p.pgid)
		drained := make(chan struct{})
		go func() { copies.Wait(); close(drained) }()
		select {
		case <-drained:
		case <-time.After(pipeDrainGrace):
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

// waitExit waits until the process pid has exited, without reaping it.
func waitExit(pid int) {
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			return
		}
	}
}

// kill kills the whole group.
func (p *groupProcess) kill() {
	p.kOnce.Do(func() { close(p.killed) })
	killGroup(p.pgid)
}

// wasKilled reports whether kill was called.
func (p *groupProcess) wasKilled() bool {
	select {
	case <-p.killed:
		return true
	default:
		return false
	}
}

// exitCode is the leader's exit code once done is closed: 128+n for a
// signal, as bash reports it.
func (p *groupProcess) exitCode() int {
	st := p.cmd.ProcessState
	if st == nil {
		return -1
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return st.ExitCode()
}

// runResult is the outcome of a foreground command.
type runResult struct {
	output   string
	exitCode int
	timedOut bool
	canceled bool
	elapsed  time.Duration
}

// runForeground runs command in dir and waits for it, for at most timeout;
// on timeout or when ctx ends, the whole process group is killed. The
// output (stdout and stderr, interleaved) is capped at foregroundOutputBytes.
func runForeground(ctx context.Context, groups *processGroups, dir, command string, timeout time.Duration) (runResult, error) {
	return runForegroundTee(ctx, groups, dir, command, timeout, nil)
}

// runForegroundTee is runForeground that also writes the whole output, as it
// comes and before the cap, to tee (when it is not nil).
func runForegroundTee(ctx context.Context, groups *processGroups, dir, command string, timeout time.Duration, tee io.Writer) (runResult, error) {
	out := outcap.New(foregroundOutputBytes)
	var w io.Writer = out
	if tee != nil {
		w = io.MultiWriter(out, tee)
	}
	start := time.Now()
	p, err := startGroup(groups, dir, command, w, w)
	if err != nil {
		return runResult{}, err
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	res := runResult{}
	select {
	case <-p.exited:
	case <-timer.C:
		res.timedOut = true
		p.kill()
	case <-ctx.Done():
		res.canceled = true
		p.kill()
	}
	<-p.done
	res.elapsed = time.Since(start)
	res.output = out.String()
	res.exitCode = p.exitCode()
	if res.timedOut {
		res.exitCode = exitTimedOut
	}
	return res, nil
}
