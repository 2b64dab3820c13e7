package sandboxd

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/lsp"
)

// A fake language server: the test binary itself, run again with
// AIRLOCK_FAKE_LSP set to a mode. It speaks LSP on stdin and stdout:
//
//	ok     answers every request with the result that AIRLOCK_FAKE_LSP_ANSWERS
//	       (a JSON object of method to result) gives, "$ROOT" in it replaced
//	       by the root URI of initialize; null for other methods
//	crash  exits 3 at the first request after initialize
//	hang   never answers a request after initialize
//	mute   never answers any request, initialize included
//	deaf   stops reading its input at the first message after initialize
//
// It writes its pid and that of a child it starts in its process group (a
// sleep) to AIRLOCK_FAKE_LSP_PIDS, and every method it receives to
// AIRLOCK_FAKE_LSP_LOG.

func TestMain(m *testing.M) {
	if mode := os.Getenv("AIRLOCK_FAKE_LSP"); mode != "" {
		os.Exit(runFakeLSP(mode))
	}
	if ws := os.Getenv(mcpgoServerEnv); ws != "" {
		os.Exit(runMCPGoServer(ws))
	}
	if mode := os.Getenv(floorServerEnv); mode != "" {
		os.Exit(runFloorServer(mode))
	}
	os.Exit(m.Run())
}

func runFakeLSP(mode string) int {
	child := exec.Command("sleep", "600")
	if err := child.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "fake: starting the child:", err)
		return 1
	}
	if f := os.Getenv("AIRLOCK_FAKE_LSP_PIDS"); f != "" {
		_ = os.WriteFile(f, fmt.Appendf(nil, "%d %d\n", os.Getpid(), child.Process.Pid), 0o644)
	}
	var logf *os.File
	if f := os.Getenv("AIRLOCK_FAKE_LSP_LOG"); f != "" {
		logf, _ = os.OpenFile(f, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	}
	answers := map[string]json.RawMessage{}
	_ = json.Unmarshal([]byte(os.Getenv("AIRLOCK_FAKE_LSP_ANSWERS")), &answers)
	root := ""
	r := bufio.NewReader(os.Stdin)
	for {
		body, err := lsp.ReadFrame(r)
		if err != nil {
			return 0
		}
		var msg lsp.Message
		if err := json.Unmarshal(body, &msg); err != nil {
			return 2
		}
		if logf != nil {
			fmt.Fprintln(logf, msg.Method)
		}
		if mode == "deaf" && root != "" {
			time.Sleep(time.Hour) // stops reading its input (killed long before)
		}
		if len(msg.ID) == 0 {
			if msg.Method == "exit" {
				return 0
			}
			continue
		}
		result := json.RawMessage("null")
		switch {
		case mode == "mute":
			continue
		case msg.Method == "initialize":
			var p struct {
				RootURI string `json:"rootUri"`
			}
			_ = json.Unmarshal(msg.Params, &p)
			root = p.RootURI
			result = json.RawMessage(`{"capabilities":{}}`)
		case msg.Method == "shutdown":
		case mode == "crash":
			fmt.Fprintln(os.Stderr, "fake: crashing on", msg.Method)
			return 3
		case mode == "hang":
			continue
		default:
			if a, ok := answers[msg.Method]; ok {
				result = json.RawMessage(strings.ReplaceAll(string(a), "$ROOT", root))
			}
		}
		out, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": msg.ID, "result": result})
		fmt.Fprintf(os.Stdout, "Content-Length: %d\r\n\r\n%s", len(out), out)
	}
}

// fakeLSP points the toolbox's Go language server at the fake, in mode,
// with short bounds, and returns the files where the fake writes its pids
// and the methods it receives.
type fakeLSP struct {
	pids, log string
}

func useFakeLSP(t *testing.T, tb *toolbox, mode string, answers map[string]string) *fakeLSP {
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
func (f *fakeLSP) setMode(tb *toolbox, mode string) {
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
