package procgroup

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// stopChildEnv makes the test binary the child of TestStopNamespaceKillsEveryProcess: the init of
// a PID namespace of its own.
const stopChildEnv = "PROCGROUP_TEST_STOP_NAMESPACE"

func TestMain(m *testing.M) {
	if os.Getenv(stopChildEnv) != "" {
		if err := stopNamespaceChild(); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestStopNamespaceRefusedOutsideInit(t *testing.T) {
	if IsInit() {
		t.Fatal("the test process is PID 1")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := StopNamespace(ctx)
	if !errors.Is(err, ErrNotInit) || n != 0 {
		t.Fatalf("StopNamespace outside init = %d, %v; want 0, ErrNotInit (and nothing signalled)", n, err)
	}
}

// TestStopNamespaceKillsEveryProcess runs the test binary as the first process of a new PID
// namespace (and user and mount namespaces, so that it needs no privilege), with processes of
// every kind a shell leaves: a child, a child that ignores SIGTERM, and an orphan that left its
// session (setsid) and was re-parented to init. StopNamespace must leave none of them alive.
func TestStopNamespaceKillsEveryProcess(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), stopChildEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:                 syscall.CLONE_NEWPID | syscall.CLONE_NEWNS | syscall.CLONE_NEWUSER,
		UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
		GidMappingsEnableSetgroups: false,
		Pdeathsig:                  syscall.SIGKILL,
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("the child in a PID namespace of its own: %v\n%s\n(this test needs user namespaces: a kernel that allows them to this user)", err, out.String())
	}
	var killed int
	if _, err := fmt.Sscanf(lastLine(out.String()), "stopped %d", &killed); err != nil {
		t.Fatalf("the child's output: %v\n%s", err, out.String())
	}
	if killed < 3 {
		t.Fatalf("StopNamespace killed %d processes, want the 3 started (or more)\n%s", killed, out.String())
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// stopNamespaceChild is the child's side: it mounts a /proc of its namespace, starts the
// processes, stops them, and checks that none is alive.
func stopNamespaceChild() error {
	if !IsInit() {
		return fmt.Errorf("pid %d, not 1", os.Getpid())
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making mounts private: %w", err)
	}
	procDir, err := os.MkdirTemp("", "proc")
	if err != nil {
		return err
	}
	defer os.Remove(procDir)
	if err := unix.Mount("proc", procDir, "proc", 0, ""); err != nil {
		return fmt.Errorf("mounting proc: %w", err)
	}
	defer unix.Unmount(procDir, unix.MNT_DETACH)

	started := []*exec.Cmd{
		exec.Command("sleep", "1000"),
		exec.Command("/bin/bash", "-c", "trap '' TERM HUP INT; while :; do sleep 1; done"),
	}
	for _, c := range started {
		if err := c.Start(); err != nil {
			return err
		}
	}
	// The orphan: bash starts it in a session of its own and exits; init inherits it.
	marker := filepath.Join(procDir, "..", filepath.Base(procDir)+".orphan")
	orphan := exec.Command("/bin/bash", "-c", `setsid sleep 1000 & echo $! > "$1"`, "bash", marker)
	if err := orphan.Run(); err != nil {
		return fmt.Errorf("starting the orphan: %w", err)
	}
	defer os.Remove(marker)
	data, err := os.ReadFile(marker)
	if err != nil {
		return err
	}
	var orphanPID int
	if _, err := fmt.Sscan(string(data), &orphanPID); err != nil {
		return fmt.Errorf("the orphan's pid %q: %w", data, err)
	}
	before, err := livePIDs(procDir, os.Getpid())
	if err != nil {
		return err
	}
	if !slices.Contains(before, orphanPID) || len(before) < 3 {
		return fmt.Errorf("before the stop, live %v, want the two children and the orphan %d", before, orphanPID)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	killed, err := stopOthers(ctx, procDir)
	if err != nil {
		return fmt.Errorf("stopOthers: %w", err)
	}
	after, err := livePIDs(procDir, os.Getpid())
	if err != nil {
		return err
	}
	if len(after) > 0 {
		return fmt.Errorf("alive after the stop: %v", after)
	}
	for _, c := range started {
		if err := c.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
			return fmt.Errorf("%v ended with %v, want killed", c.Args, err)
		}
	}
	fmt.Printf("stopped %d\n", killed)
	return nil
}
