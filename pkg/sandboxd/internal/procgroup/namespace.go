package procgroup

// Stopping a whole container (the operator's stop, docs/nothing-lost.md "The operator's stop"):
// when sandboxd is the first process of its PID namespace (the container's entrypoint, as in the
// sandbox images), every other process of the container is its descendant or was re-parented to
// it, and kill(-1) reaches all of them: the process groups sandboxd started and whatever left them
// (setsid, nohup, a double fork).

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// ErrNotInit refuses StopNamespace in a process that is not its PID namespace's init: kill(-1)
// there would reach processes outside the container (or, run by hand, the user's own), and the
// processes that left sandboxd's groups could not all be found.
var ErrNotInit = errors.New("sandboxd is not its container's first process (PID 1): it cannot stop every process of the container")

// IsInit says whether this process is its PID namespace's init.
func IsInit() bool { return os.Getpid() == 1 }

// StopNamespace kills every other process of this PID namespace (SIGKILL, which none can catch)
// and returns once each has exited, with the number it killed. A process that has exited holds no
// file open and writes nothing more, so it need not be reaped: StopNamespace waits on each one's
// pidfd, which is readable from its exit on. It repeats until a scan of /proc finds no live process
// but itself (one forked between a scan and its kill(-1) is found by the next scan). The count is
// of the processes found alive and killed. It fails with
// ErrNotInit unless this process is the namespace's init, and with ctx's error when ctx ends
// first; ctx must have a deadline.
func StopNamespace(ctx context.Context) (int, error) {
	if !IsInit() {
		return 0, ErrNotInit
	}
	return stopOthers(ctx, "/proc")
}

// stopOthers is StopNamespace on the /proc at procDir.
func stopOthers(ctx context.Context, procDir string) (int, error) {
	if _, ok := ctx.Deadline(); !ok {
		return 0, errors.New("stopping the container's processes needs a deadline")
	}
	self := os.Getpid()
	killed := make(map[int]bool)
	for {
		if err := ctx.Err(); err != nil {
			return len(killed), err
		}
		// The scan comes first, so that what the kill ends is counted (a killed process may be
		// gone from /proc a moment later).
		live, err := livePIDs(procDir, self)
		if err != nil {
			return len(killed), err
		}
		if len(live) == 0 {
			return len(killed), nil
		}
		// kill(-1) signals every process this one may signal but itself and init; ESRCH: none.
		if err := unix.Kill(-1, unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
			return len(killed), fmt.Errorf("kill(-1): %w", err)
		}
		for _, pid := range live {
			killed[pid] = true
			if err := waitExited(ctx, pid); err != nil {
				return len(killed), fmt.Errorf("waiting for process %d to exit: %w", pid, err)
			}
		}
	}
}

// livePIDs returns the processes of procDir that are not self, not init and not zombies.
func livePIDs(procDir string, self int) ([]int, error) {
	entries, err := os.ReadDir(procDir)
	if err != nil {
		return nil, fmt.Errorf("listing processes: %w", err)
	}
	var live []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self || pid == 1 {
			continue
		}
		state, err := processState(procDir, pid)
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ESRCH) {
			continue // gone since the listing
		}
		if err != nil {
			return nil, err
		}
		if state != 'Z' && state != 'X' {
			live = append(live, pid)
		}
	}
	return live, nil
}

// processState reads the state letter of /proc/<pid>/stat: the field after the command name,
// which is in parentheses and may itself hold spaces and parentheses.
func processState(procDir string, pid int) (byte, error) {
	data, err := os.ReadFile(procDir + "/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return 0, fmt.Errorf("reading the state of process %d: unexpected %q", pid, s)
	}
	return s[i+2], nil
}

// waitExited waits until pid has exited (a zombie or reaped), or ctx's deadline.
func waitExited(ctx context.Context, pid int) error {
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return nil // gone
	}
	if err != nil {
		return fmt.Errorf("pidfd_open: %w", err)
	}
	defer unix.Close(fd)
	deadline, _ := ctx.Deadline()
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return context.DeadlineExceeded
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, int(min(left, time.Second)/time.Millisecond)+1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("poll of its pidfd: %w", err)
		}
		if n > 0 {
			return nil // readable: it has exited
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}
