// Package fakelsp is a fake language server for the tests of code
// navigation: the test binary itself, run again with AIRLOCK_FAKE_LSP set to
// a mode, whose TestMain calls Run. It is imported by tests only.
//
// It speaks LSP on stdin and stdout:
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
package fakelsp

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/lsp"
)

// ModeEnv names the environment variable that makes the test binary the fake, in its mode.
const ModeEnv = "AIRLOCK_FAKE_LSP"

// Run is the fake, in mode; it returns the exit code.
func Run(mode string) int {
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
