package tools

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/fakelsp"
)

// The fake language server is internal/fakelsp: the test binary, run again
// with AIRLOCK_FAKE_LSP set to a mode.

func TestMain(m *testing.M) {
	if mode := os.Getenv(fakelsp.ModeEnv); mode != "" {
		os.Exit(fakelsp.Run(mode))
	}
	os.Exit(m.Run())
}

// fakeLSP points the toolbox's Go language server at the fake, in mode,
// with short bounds, and returns the files where the fake writes its pids
// and the methods it receives.
type fakeLSP struct {
	pids, log string
}

func useFakeLSP(t *testing.T, tb *Toolbox, mode string, answers map[string]string) *fakeLSP {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	f := &fakeLSP{pids: dir + "/pids", log: dir + "/log"}
	raw := map[string]json.RawMessage{}
	for k, v := range answers {
		raw[k] = json.RawMessage(v)
	}
	a, err := json.Marshal(raw)
	if err != nil {
		t.Fatal(err)
	}
	spec := defaultLangServers()[0]
	spec.command = exe
	spec.env = []string{"AIRLOCK_FAKE_LSP=" + mode, "AIRLOCK_FAKE_LSP_PIDS=" + f.pids, "AIRLOCK_FAKE_LSP_LOG=" + f.log, "AIRLOCK_FAKE_LSP_ANSWERS=" + string(a)}
	tb.nav.specs = []langServerSpec{spec}
	// Starts are given all the time a loaded machine may take; tests of a failing request shorten
	// requestTimeout only, so that what times out is the request, never the start.
	tb.nav.opts = navOptions{startTimeout: wait.ForeverTestTimeout, requestTimeout: 5 * time.Second, idleTimeout: time.Hour, memoryLimit: 1 << 40, memoryCheck: time.Hour}
	return f
}

// setMode changes the fake's mode for the next server started.
func (f *fakeLSP) setMode(tb *Toolbox, mode string) {
	spec := tb.nav.specs[0]
	spec.env = append([]string{"AIRLOCK_FAKE_LSP=" + mode}, spec.env[1:]...)
	tb.nav.specs = []langServerSpec{spec}
}

// processes returns the fake's pid and its child's, as it wrote them.
func (f *fakeLSP) processes(t *testing.T) (leader, child int) {
	t.Helper()
	b, err := os.ReadFile(f.pids)
	if err != nil {
		t.Fatalf("the fake language server did not write its pids: %v", err)
	}
	fields := strings.Fields(string(b))
	if len(fields) != 2 {
		t.Fatalf("pids file %q", b)
	}
	leader, _ = strconv.Atoi(fields[0])
	child, _ = strconv.Atoi(fields[1])
	return leader, child
}

// methods returns the methods the fake received, in order.
func (f *fakeLSP) methods() []string {
	b, _ := os.ReadFile(f.log)
	return strings.Fields(string(b))
}

// waitGone waits until the process pid has terminated (a zombie counts: it
// runs nothing), watching a pidfd, for at most the test's own bound.
func waitGone(t *testing.T, pid int) {
	t.Helper()
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return // gone and reaped
	}
	if err != nil {
		t.Fatalf("pidfd_open(%d): %v", pid, err)
	}
	defer unix.Close(fd)
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, int(time.Minute.Milliseconds()))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			t.Fatalf("poll: %v", err)
		}
		if n == 0 {
			t.Fatalf("process %d still runs", pid)
		}
		return
	}
}

// running reports whether pid runs (exists and is not a zombie).
func running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}
