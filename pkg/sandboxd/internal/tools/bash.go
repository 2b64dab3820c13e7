package tools

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/outcap"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/procgroup"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/scrub"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/toolcall"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/wsscan"
)

const (
	// bashDefaultTimeout and bashMaxTimeout bound a foreground Bash call.
	bashDefaultTimeout = 120 * time.Second
	bashMaxTimeout     = 600 * time.Second
	// backgroundOutputBytes caps the unread output kept for each stream of a
	// background shell.
	backgroundOutputBytes = 1 << 20
	// maxRunningShells bounds the background shells that run at once.
	maxRunningShells = 8
	// maxShells bounds the background shells kept (finished ones are
	// forgotten, oldest first, to make room).
	maxShells = 32
)

// Background shell statuses.
const (
	shellRunning = "running"
	shellExited  = "exited"
	shellKilled  = "killed"
)

// BashInput is the input of the Bash tool.
type BashInput struct {
	Command         string `json:"command" jsonschema:"the command to run with /bin/bash -c in the workspace"`
	Description     string `json:"description,omitempty" jsonschema:"a few words on what the command does, for logs and people reading along"`
	Timeout         int    `json:"timeout,omitempty" jsonschema:"timeout in milliseconds, or in seconds when 600 or less (CodeGen-Sandbox's unit); default 120000 (2 minutes), maximum 600000 (10 minutes)"`
	RunInBackground bool   `json:"run_in_background,omitempty" jsonschema:"start the command as a background shell and return its shell_id at once; read its output with BashOutput, stop it with KillShell"`
}

// BashOutput is the structured result of the Bash tool.
type BashOutput struct {
	Output     string `json:"output,omitempty" jsonschema:"stdout and stderr, interleaved; capped at 100 KiB with the elision said"`
	ExitCode   int    `json:"exit_code" jsonschema:"exit code of the command; 124 when it timed out, 128+n when signal n killed it"`
	TimedOut   bool   `json:"timed_out,omitempty" jsonschema:"true when the timeout killed the command's process group"`
	DurationMs int64  `json:"duration_ms" jsonschema:"how long the command ran, in milliseconds"`
	ShellID    string `json:"shell_id,omitempty" jsonschema:"run_in_background: the id of the background shell"`
}

// BashOutputInput is the input of the BashOutput tool.
type BashOutputInput struct {
	ShellID string `json:"shell_id,omitempty" jsonschema:"id of the background shell, as Bash returned it; give shell_id or bash_id"`
	BashID  string `json:"bash_id,omitempty" jsonschema:"the same as shell_id"`
}

// BashOutputOutput is the structured result of the BashOutput tool.
type BashOutputOutput struct {
	ShellID      string `json:"shell_id" jsonschema:"id of the background shell"`
	Status       string `json:"status" jsonschema:"running, exited or killed"`
	ExitCode     *int   `json:"exit_code,omitempty" jsonschema:"exit code, once the shell has ended"`
	Stdout       string `json:"stdout,omitempty" jsonschema:"stdout written since the last BashOutput for this shell"`
	Stderr       string `json:"stderr,omitempty" jsonschema:"stderr written since the last BashOutput for this shell"`
	DroppedBytes int64  `json:"dropped_bytes,omitempty" jsonschema:"unread output dropped because a stream held more than 1 MiB"`
}

// KillShellInput is the input of the KillShell tool.
type KillShellInput struct {
	ShellID string `json:"shell_id" jsonschema:"id of the background shell to kill"`
}

// KillShellOutput is the structured result of the KillShell tool.
type KillShellOutput struct {
	ShellID string `json:"shell_id" jsonschema:"id of the background shell"`
	Status  string `json:"status" jsonschema:"the shell's status after the call: killed, or exited if it had ended already"`
}

// bash is the Bash tool.
func (tb *Toolbox) bash(ctx context.Context, in BashInput) (*mcp.CallToolResult, BashOutput, error) {
	if strings.TrimSpace(in.Command) == "" {
		return nil, BashOutput{}, errors.New("command is empty")
	}
	timeout, err := timeoutFrom(in.Timeout, bashDefaultTimeout, bashMaxTimeout)
	if err != nil {
		return nil, BashOutput{}, err
	}
	if in.RunInBackground {
		since := wsscan.Now()
		sh, err := tb.shells.start(tb.procs, tb.ws.Dir(), in.Command, procgroup.EnvFrom(ctx))
		if err != nil {
			return nil, BashOutput{}, err
		}
		go sh.recordEnd(toolcall.RecorderFrom(ctx), since)
		out := BashOutput{ShellID: sh.id}
		return textResult(fmt.Sprintf("Started background shell %s. Read its output with BashOutput (shell_id %q); stop it with KillShell.", sh.id, sh.id)), out, nil
	}
	since := wsscan.Now()
	res, err := procgroup.RunForeground(ctx, tb.procs, tb.ws.Dir(), in.Command, timeout)
	if err != nil {
		return nil, BashOutput{}, err
	}
	recordProcess(ctx, in.Command, since, res)
	if res.Canceled {
		return nil, BashOutput{}, fmt.Errorf("cancelled after %v: the command's process group was killed", res.Elapsed.Round(time.Millisecond))
	}
	out := BashOutput{Output: res.Output, ExitCode: res.ExitCode, TimedOut: res.TimedOut, DurationMs: res.Elapsed.Milliseconds()}
	return commandResult(res, timeout), out, nil
}

// commandResult is the text the model reads for a finished command.
func commandResult(res procgroup.Result, timeout time.Duration) *mcp.CallToolResult {
	var b strings.Builder
	b.WriteString(res.Output)
	if res.Output != "" && !strings.HasSuffix(res.Output, "\n") {
		b.WriteByte('\n')
	}
	switch {
	case res.TimedOut:
		fmt.Fprintf(&b, "[timed out after %v: the command's process group was killed; exit code %d]", timeout, procgroup.ExitTimedOut)
	case res.ExitCode != 0:
		fmt.Fprintf(&b, "[exit code %d]", res.ExitCode)
	case res.Output == "":
		b.WriteString("[no output; exit code 0]")
	}
	return textResult(b.String())
}

// secondsTimeoutMax is the largest timeout read in seconds: CodeGen-Sandbox's
// tools take `timeout` in seconds (default 120, at most 600), airlock's and
// Claude Code's in milliseconds (120000 is 2 minutes). One field cannot have
// two units, so its value says which: 1 to 600 are seconds, above that
// milliseconds. A timeout of 600 ms or less cannot be asked for; no command,
// test run or build is meant to end that soon (docs/sandboxd-tools.md,
// "Field names").
const secondsTimeoutMax = 600

// timeoutFrom is a tool's timeout field as a duration: def when 0, in
// seconds up to secondsTimeoutMax, else in milliseconds; above max, or
// negative, an error the model can read.
func timeoutFrom(v int, def, max time.Duration) (time.Duration, error) {
	d := time.Duration(v) * time.Millisecond
	if v > 0 && v <= secondsTimeoutMax {
		d = time.Duration(v) * time.Second
	}
	switch {
	case v < 0:
		return 0, fmt.Errorf("timeout must be positive, got %d", v)
	case v == 0:
		return def, nil
	case d > max:
		return 0, fmt.Errorf("timeout %v is above the maximum of %d ms", d, max.Milliseconds())
	}
	return d, nil
}

// bashOutput is the BashOutput tool.
func (tb *Toolbox) bashOutput(_ context.Context, in BashOutputInput) (*mcp.CallToolResult, BashOutputOutput, error) {
	id, err := oneOf("shell_id", in.ShellID, "bash_id", in.BashID)
	if err != nil {
		return nil, BashOutputOutput{}, err
	}
	if id == "" {
		return nil, BashOutputOutput{}, errors.New("shell_id is required: the id Bash returned for a run_in_background command")
	}
	sh, err := tb.shells.get(id)
	if err != nil {
		return nil, BashOutputOutput{}, err
	}
	out := sh.read()
	var b strings.Builder
	fmt.Fprintf(&b, "shell %s: %s", sh.id, out.Status)
	if out.ExitCode != nil {
		fmt.Fprintf(&b, " (exit code %d)", *out.ExitCode)
	}
	b.WriteByte('\n')
	if out.DroppedBytes > 0 {
		fmt.Fprintf(&b, "[%d bytes of unread output were dropped: each stream keeps at most 1 MiB between reads]\n", out.DroppedBytes)
	}
	if out.Stdout != "" {
		fmt.Fprintf(&b, "<stdout>\n%s\n</stdout>\n", strings.TrimSuffix(out.Stdout, "\n"))
	}
	if out.Stderr != "" {
		fmt.Fprintf(&b, "<stderr>\n%s\n</stderr>\n", strings.TrimSuffix(out.Stderr, "\n"))
	}
	if out.Stdout == "" && out.Stderr == "" {
		b.WriteString("(no new output)\n")
	}
	return textResult(b.String()), out, nil
}

// killShell is the KillShell tool.
func (tb *Toolbox) killShell(ctx context.Context, in KillShellInput) (*mcp.CallToolResult, KillShellOutput, error) {
	sh, err := tb.shells.get(in.ShellID)
	if err != nil {
		return nil, KillShellOutput{}, err
	}
	status := sh.kill(ctx)
	return textResult(fmt.Sprintf("shell %s: %s", sh.id, status)), KillShellOutput{ShellID: sh.id, Status: status}, nil
}

// shellTable holds the background shells.
type shellTable struct {
	mu     sync.Mutex
	shells map[string]*shell
}

func newShellTable() *shellTable { return &shellTable{shells: make(map[string]*shell)} }

// shell is one background shell.
type shell struct {
	id      string
	command string
	started time.Time
	proc    *procgroup.Process
	stdout  *streamBuffer
	stderr  *streamBuffer
}

// start starts a background shell, if fewer than maxRunningShells run.
func (t *shellTable) start(groups *procgroup.Groups, dir, command string, env []string) (*shell, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	running := 0
	for _, sh := range t.shells {
		if sh.status() == shellRunning {
			running++
		}
	}
	if running >= maxRunningShells {
		return nil, fmt.Errorf("%d background shells are running already, the most allowed: stop one with KillShell first", running)
	}
	if len(t.shells) >= maxShells {
		t.evictFinished()
	}
	sh := &shell{
		id:      "shell-" + strings.ToLower(rand.Text()[:8]),
		command: command,
		started: time.Now(),
		stdout:  &streamBuffer{limit: backgroundOutputBytes},
		stderr:  &streamBuffer{limit: backgroundOutputBytes},
	}
	p, err := procgroup.StartEnv(groups, dir, command, env, sh.stdout, sh.stderr)
	if err != nil {
		return nil, err
	}
	sh.proc = p
	t.shells[sh.id] = sh
	return sh, nil
}

// evictFinished forgets the oldest finished shell. t.mu is held.
func (t *shellTable) evictFinished() {
	var finished []*shell
	for _, sh := range t.shells {
		if sh.status() != shellRunning {
			finished = append(finished, sh)
		}
	}
	sort.Slice(finished, func(i, j int) bool { return finished[i].started.Before(finished[j].started) })
	if len(finished) > 0 {
		delete(t.shells, finished[0].id)
	}
}

func (t *shellTable) get(id string) (*shell, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	sh, ok := t.shells[id]
	if !ok {
		return nil, fmt.Errorf("no background shell %q (shells are started by Bash with run_in_background; finished ones are forgotten after a while)", id)
	}
	return sh, nil
}

// running returns the number of running background shells.
func (t *shellTable) running() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, sh := range t.shells {
		if sh.status() == shellRunning {
			n++
		}
	}
	return n
}

// waitAll waits until every background shell is done, or ctx is.
func (t *shellTable) waitAll(ctx context.Context) error {
	t.mu.Lock()
	procs := make([]*procgroup.Process, 0, len(t.shells))
	for _, sh := range t.shells {
		procs = append(procs, sh.proc)
	}
	t.mu.Unlock()
	for _, p := range procs {
		select {
		case <-p.Done():
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (sh *shell) status() string {
	select {
	case <-sh.proc.Done():
		if sh.proc.WasKilled() {
			return shellKilled
		}
		return shellExited
	default:
		return shellRunning
	}
}

// read returns the status and the output written since the last read.
func (sh *shell) read() BashOutputOutput {
	status := sh.status() // before the output, so that an ended shell's output is complete
	out := BashOutputOutput{ShellID: sh.id, Status: status}
	if status != shellRunning {
		code := sh.proc.ExitCode()
		out.ExitCode = &code
	}
	var d1, d2 int64
	out.Stdout, d1 = sh.stdout.take()
	out.Stderr, d2 = sh.stderr.take()
	out.DroppedBytes = d1 + d2
	return out
}

// kill kills the shell's process group and waits for it to end.
func (sh *shell) kill(ctx context.Context) string {
	if sh.status() != shellRunning {
		return sh.status()
	}
	sh.proc.Kill()
	select {
	case <-sh.proc.Done():
	case <-ctx.Done():
	}
	return shellKilled
}

// streamBuffer keeps the unread output of one stream of a background shell,
// at most limit bytes: when more arrives, the oldest unread bytes are
// dropped and counted.
type streamBuffer struct {
	mu      sync.Mutex
	limit   int
	buf     []byte
	dropped int64
	// lastDropped is the newest byte dropped: whether the drop split a token.
	lastDropped byte
}

func (b *streamBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := len(p)
	if len(p) >= b.limit {
		switch {
		case len(p) > b.limit:
			b.lastDropped = p[len(p)-b.limit-1]
		case len(b.buf) > 0:
			b.lastDropped = b.buf[len(b.buf)-1]
		}
		b.dropped += int64(len(b.buf) + len(p) - b.limit)
		b.buf = append(b.buf[:0], p[len(p)-b.limit:]...)
		return n, nil
	}
	if over := len(b.buf) + len(p) - b.limit; over > 0 {
		b.dropped += int64(over)
		b.lastDropped = b.buf[over-1]
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	b.buf = append(b.buf, p...)
	return n, nil
}

// take returns the unread output and the bytes dropped, and resets both.
func (b *streamBuffer) take() (string, int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, d := string(b.buf), b.dropped
	if d > 0 { // the oldest bytes were dropped: drop a token they cut too
		kept := outcap.SkipPartialRune(b.buf)
		if scrub.IsTokenByte(b.lastDropped) {
			kept = scrub.TrimTokenStart(kept)
		}
		s, d = string(kept), d+int64(len(b.buf)-len(kept))
	}
	b.buf, b.dropped, b.lastDropped = b.buf[:0], 0, 0
	return s, d
}

// recordProcess records the process a foreground command ran: /bin/bash -c command, its exit
// status (procgroup.ExitTimedOut on a timeout, -1 when it was cancelled) and how long it took;
// then the files it created or changed in the workspace since (wsscan.Now, taken before it
// started). Its process group has ended (RunForeground waits for it), but a child that left the
// group (setsid) may still write: what it writes after the scan is not this call's entry.
func recordProcess(ctx context.Context, command string, since time.Time, res procgroup.Result) {
	exit := res.ExitCode
	if res.Canceled {
		exit = -1
	}
	r := toolcall.RecorderFrom(ctx)
	r.ProcessEnded([]string{"/bin/bash", "-c", command}, exit, res.Elapsed)
	r.FilesChanged(since)
}

// recordEnd records the shell's process once it has ended, under the call that started it
// (exit -1 when KillShell or a stop killed it). It returns when the process is done: sandboxd's
// stop kills every process group, so none outlives the server.
func (sh *shell) recordEnd(r toolcall.Recorder, since time.Time) {
	<-sh.proc.Done()
	exit := sh.proc.ExitCode()
	if sh.proc.WasKilled() {
		exit = -1
	}
	r.ProcessEnded([]string{"/bin/bash", "-c", sh.command}, exit, time.Since(sh.started))
	r.FilesChanged(since)
}
