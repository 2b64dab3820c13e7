package tools

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/confine"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/lsp"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/outcap"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/procgroup"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/toolcall"
)

// The language servers behind find_definition, find_references and
// rename_symbol: started lazily on the first call for their language,
// reused across calls, one call at a time, stopped after they sit idle, and
// killed (their whole process group) when they use too much memory, do not
// answer in time, or sandboxd shuts down. A server that crashed or was
// killed is started again by the next call.

const (
	// lspClientName is the name sandboxd gives a language server: the one
	// it gives MCP clients.
	lspClientName = "airlock-sandboxd"
	// lspRequestTimeout bounds one call to a language server (the first
	// one includes loading the workspace).
	lspRequestTimeout = 60 * time.Second
	// lspIdleTimeout is how long a server with no call stays up.
	lspIdleTimeout = 10 * time.Minute
	// lspMemoryLimit is the resident memory at which a server is killed:
	// a third of the sample class's 4 GiB pod limit, which leaves the rest
	// to the agent's builds and tests. lspSoftMemoryLimit is the GOMEMLIMIT
	// it runs with, so that a Go server collects harder before it gets there.
	lspMemoryLimit     = 1536 << 20
	lspSoftMemoryLimit = 1024 << 20
	// lspMemoryCheck is how often a server's memory is checked.
	lspMemoryCheck = 2 * time.Second
	// lspStopGrace is how long an idle server gets to exit after shutdown.
	lspStopGrace = 2 * time.Second
	// lspMaxWatchedFiles bounds the workspace walk that finds changed files.
	lspMaxWatchedFiles = 100000
)

// langServerSpec says how to run the language server of one language.
type langServerSpec struct {
	language string
	name     string   // what errors call it
	command  string   // looked up on PATH
	args     []string // after the command
	env      []string // added to sandboxd's environment
	exts     []string // the file name extensions it serves
	watched  func(name string) bool
}

// defaultLangServers are the servers sandboxd knows: gopls for Go.
func defaultLangServers() []langServerSpec {
	return []langServerSpec{{
		language: "go",
		name:     "gopls",
		command:  "gopls",
		env:      []string{"GOMEMLIMIT=" + strconv.Itoa(lspSoftMemoryLimit>>20) + "MiB"},
		exts:     []string{".go"},
		watched: func(name string) bool {
			switch name {
			case "go.mod", "go.sum", "go.work", "go.work.sum":
				return true
			}
			return path.Ext(name) == ".go"
		},
	}}
}

// navOptions are the bounds of the language servers; tests shorten them.
type navOptions struct {
	// startTimeout bounds starting a server (its initialize); requestTimeout one request.
	startTimeout   time.Duration
	requestTimeout time.Duration
	idleTimeout    time.Duration
	memoryLimit    int64
	memoryCheck    time.Duration
}

func defaultNavOptions() navOptions {
	return navOptions{startTimeout: lspRequestTimeout, requestTimeout: lspRequestTimeout, idleTimeout: lspIdleTimeout, memoryLimit: lspMemoryLimit, memoryCheck: lspMemoryCheck}
}

// langServers runs the language servers of one workspace.
type langServers struct {
	ws    *confine.Resolver
	specs []langServerSpec
	opts  navOptions
	turn  chan struct{} // one navigation call at a time

	mu      sync.Mutex
	closed  bool
	running map[string]*langServer // by language
}

func newLangServers(ws *confine.Resolver) *langServers {
	return &langServers{ws: ws, specs: defaultLangServers(), opts: defaultNavOptions(), turn: make(chan struct{}, 1), running: map[string]*langServer{}}
}

// langServer is one running server process, in its own process group.
type langServer struct {
	spec   langServerSpec
	cmd    *exec.Cmd
	pgid   int
	conn   *lsp.Conn
	stdin  *os.File
	stderr *outcap.Buffer
	exited chan struct{} // closed once the process is reaped and its group killed
	idle   *time.Timer
	files  map[string]fileStamp // the watched files as last told to the server
	ver    int

	mu     sync.Mutex
	reason string // why sandboxd killed it, if it did
}

// specFor returns the server spec for a file, by its extension.
func (l *langServers) specFor(rel string) (langServerSpec, error) {
	ext := path.Ext(rel)
	for _, s := range l.specs {
		for _, e := range s.exts {
			if e == ext {
				return s, nil
			}
		}
	}
	return langServerSpec{}, fmt.Errorf("no language server for %q files in this sandbox: code navigation works for Go (.go, through gopls); use Grep to find uses instead", ext)
}

// with runs f against the running server for spec (started if need be),
// bounded by the request timeout. A server that fails the call (it exited,
// did not answer in time) is killed and forgotten, so that the next call
// starts a new one.
func (l *langServers) with(ctx context.Context, spec langServerSpec, f func(ctx context.Context, s *langServer) error) error {
	select {
	case l.turn <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("cancelled while waiting for another code navigation call: %v", ctx.Err())
	}
	defer func() { <-l.turn }()
	// The start and the request have a budget each: a server's start (gopls loading the
	// workspace) does not eat into the request's time.
	sctx, scancel := context.WithTimeout(ctx, l.opts.startTimeout)
	s, err := l.get(sctx, spec)
	scancel()
	rctx, cancel := context.WithTimeout(ctx, l.opts.requestTimeout)
	defer cancel()
	if err == nil {
		s.idle.Stop()
		// A server that stops reading would block a write (a large didOpen)
		// past the timeout: writes share the call's deadline.
		if d, ok := rctx.Deadline(); ok {
			_ = s.stdin.SetWriteDeadline(d)
			defer s.stdin.SetWriteDeadline(time.Time{})
		}
		if err = s.checkMemory(l.opts.memoryLimit); err == nil {
			if err = s.syncFiles(l.ws); err == nil {
				err = f(rctx, s)
			}
		}
	}
	if err == nil {
		s.idle.Reset(l.opts.idleTimeout)
		return nil
	}
	if s == nil {
		if ctx.Err() != nil && !errors.Is(err, procgroup.ErrStopped) {
			return fmt.Errorf("cancelled while %s started: %v; it is started again on the next call", spec.name, ctx.Err())
		}
		return err
	}
	var le *lsp.Error
	if errors.As(err, &le) { // the server answered with an error: it is fine
		s.idle.Reset(l.opts.idleTimeout)
		return fmt.Errorf("%s: %v", spec.name, le.Message)
	}
	if ctx.Err() != nil && s.killedFor() == "" && s.alive() {
		// Cancelled by the client: the request was cancelled ($/cancelRequest),
		// the server is kept.
		s.idle.Reset(l.opts.idleTimeout)
		return fmt.Errorf("cancelled: %v", ctx.Err())
	}
	l.forget(s)
	switch {
	case s.killedFor() != "":
		err = fmt.Errorf("%s was stopped: %s", spec.name, s.killedFor())
	case ctx.Err() != nil:
		err = fmt.Errorf("cancelled: %v (%s had failed: it was stopped)", ctx.Err(), spec.name)
	case rctx.Err() != nil || errors.Is(err, os.ErrDeadlineExceeded):
		// A write that hit the call's deadline can return before the context's own timer
		// has fired: both are the same timeout.
		err = fmt.Errorf("%s did not answer within %s: it was stopped", spec.name, l.opts.requestTimeout)
	default:
		err = fmt.Errorf("%s exited unexpectedly (%s)%s", spec.name, s.exitStatus(), s.stderrTail())
	}
	return fmt.Errorf("%v; it is started again on the next call", err)
}

// get returns the running server for spec, or starts one.
func (l *langServers) get(ctx context.Context, spec langServerSpec) (*langServer, error) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, procgroup.ErrStopped
	}
	if s, ok := l.running[spec.language]; ok {
		l.mu.Unlock()
		return s, nil
	}
	l.mu.Unlock()
	s, err := l.start(ctx, spec)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed { // shutdown began while it started
		s.kill("sandboxd is shutting down")
		return nil, procgroup.ErrStopped
	}
	l.running[spec.language] = s
	return s, nil
}

// reap waits for the server's process group to end, kills what is left of it, closes its pipes,
// records the process under the call that started it (rec), and says it exited.
func (s *langServer) reap(rec toolcall.Recorder, argv []string, started time.Time, inW, outR *os.File) {
	procgroup.WaitExit(s.pgid)
	procgroup.KillGroup(s.pgid) // the leader is a zombie: the group id is still ours
	_ = s.cmd.Wait()
	inW.Close()
	outR.Close() // ends the reader, even if a process that left the group holds the pipe
	rec.ProcessEnded(argv, s.cmd.ProcessState.ExitCode(), time.Since(started))
	close(s.exited)
}

// start runs the server and initializes it.
func (l *langServers) start(ctx context.Context, spec langServerSpec) (*langServer, error) {
	bin, err := exec.LookPath(spec.command)
	if err != nil {
		return nil, fmt.Errorf("code navigation for %s needs the language server %s, which is not installed in this sandbox (%s is not on PATH; the -go sandbox image has it): use Grep to find definitions and uses instead", spec.language, spec.name, spec.command)
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, err
	}
	cmd := exec.Command(bin, spec.args...)
	cmd.Dir = l.ws.Dir()
	cmd.Env = append(os.Environ(), spec.env...)
	cmd.Stdin, cmd.Stdout = inR, outW
	s := &langServer{spec: spec, cmd: cmd, stdin: inW, stderr: outcap.New(8 << 10), exited: make(chan struct{})}
	cmd.Stderr = s.stderr
	cmd.WaitDelay = lspStopGrace // a process that left the group and kept stderr
	// Its own process group, killed whole; and killed if sandboxd dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	err = cmd.Start()
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return nil, fmt.Errorf("starting %s: %v", spec.name, err)
	}
	s.pgid = cmd.Process.Pid
	s.conn = lsp.NewConn(outR, inW)
	s.idle = time.AfterFunc(time.Hour, func() { l.stopIdle(s) })
	s.idle.Stop()
	// The server is a process the call that needed it started: its process entry, under that
	// call, when it ends (docs/record.md §2.3), before exited says so (a stop waits for exited,
	// so the entry comes before the log's end).
	go s.reap(toolcall.RecorderFrom(ctx), append([]string{bin}, spec.args...), time.Now(), inW, outR)
	go s.watchMemory(l.opts)

	root := pathURI(l.ws.Dir())
	init := map[string]any{
		"processId":  os.Getpid(),
		"clientInfo": map[string]any{"name": lspClientName},
		"rootUri":    root,
		"workspaceFolders": []map[string]any{
			{"uri": root, "name": path.Base(filepath.ToSlash(l.ws.Dir()))},
		},
		"capabilities": map[string]any{
			"general":   map[string]any{"positionEncodings": []string{"utf-16"}},
			"workspace": map[string]any{"workspaceEdit": map[string]any{"documentChanges": true}, "workspaceFolders": true},
			"textDocument": map[string]any{
				"definition": map[string]any{},
				"references": map[string]any{},
				"rename":     map[string]any{},
			},
		},
	}
	err = s.conn.Call(ctx, "initialize", init, nil)
	if err == nil {
		err = s.conn.Notify("initialized", map[string]any{})
	}
	if err != nil {
		s.kill("")
		<-s.exited
		switch {
		case s.killedFor() != "":
			err = fmt.Errorf("%s was stopped: %s", spec.name, s.killedFor())
		case ctx.Err() != nil:
			err = fmt.Errorf("%s did not start within %s: it was stopped", spec.name, l.opts.startTimeout)
		default:
			err = fmt.Errorf("%s did not start (%v; %s)%s", spec.name, err, s.exitStatus(), s.stderrTail())
		}
		return nil, fmt.Errorf("%v; it is started again on the next call", err)
	}
	s.files = scanWatched(l.ws, spec.watched)
	return s, nil
}

// forget kills s and waits until it is gone.
func (l *langServers) forget(s *langServer) {
	l.mu.Lock()
	if l.running[s.spec.language] == s {
		delete(l.running, s.spec.language)
	}
	l.mu.Unlock()
	s.idle.Stop()
	s.kill("")
	<-s.exited
}

// stopIdle stops a server that had no call for the idle timeout: asked to
// shut down, then killed.
func (l *langServers) stopIdle(s *langServer) {
	select {
	case l.turn <- struct{}{}:
	default:
		return // a call runs: it sets the timer again when it ends
	}
	defer func() { <-l.turn }()
	l.mu.Lock()
	current := l.running[s.spec.language] == s
	if current {
		delete(l.running, s.spec.language)
	}
	l.mu.Unlock()
	if !current {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), lspStopGrace)
	defer cancel()
	_ = s.stdin.SetWriteDeadline(time.Now().Add(lspStopGrace))
	if s.conn.Call(ctx, "shutdown", nil, nil) == nil {
		_ = s.conn.Notify("exit", nil)
	}
	select {
	case <-s.exited:
	case <-ctx.Done():
	}
	s.kill("")
	<-s.exited
}

// close kills every server and refuses new ones; it waits until they are
// gone or ctx ends.
func (l *langServers) close(ctx context.Context) error {
	l.mu.Lock()
	l.closed = true
	servers := make([]*langServer, 0, len(l.running))
	for _, s := range l.running {
		servers = append(servers, s)
	}
	clear(l.running)
	l.mu.Unlock()
	for _, s := range servers {
		s.idle.Stop()
		s.kill("sandboxd is shutting down")
	}
	for _, s := range servers {
		select {
		case <-s.exited:
		case <-ctx.Done():
			return fmt.Errorf("language server %s not reaped: %w", s.spec.name, ctx.Err())
		}
	}
	return nil
}

// count returns the number of servers running.
func (l *langServers) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.running)
}

// kill kills the server's whole process group, recording why (when reason
// is not empty).
func (s *langServer) kill(reason string) {
	s.mu.Lock()
	if s.reason == "" {
		s.reason = reason
	}
	s.mu.Unlock()
	select {
	case <-s.exited: // reaped: the group id may belong to someone else now
	default:
		procgroup.KillGroup(s.pgid)
	}
}

// alive reports whether the server's output is still open.
func (s *langServer) alive() bool {
	select {
	case <-s.conn.Closed():
		return false
	default:
		return true
	}
}

func (s *langServer) killedFor() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reason
}

// exitStatus says how the process ended, once it has.
func (s *langServer) exitStatus() string {
	select {
	case <-s.exited:
	case <-time.After(lspStopGrace):
		return "still running"
	}
	if st := s.cmd.ProcessState; st != nil {
		return st.String()
	}
	return "not started"
}

// stderrTail is the end of what the server wrote on stderr, for errors.
func (s *langServer) stderrTail() string {
	t := strings.TrimSpace(s.stderr.String())
	if t == "" {
		return ""
	}
	if len(t) > 1000 {
		t = "..." + t[len(t)-1000:]
	}
	return ": " + t
}

// watchMemory kills the server when its resident memory passes the limit
// while it works (with checks it before each call).
func (s *langServer) watchMemory(opts navOptions) {
	t := time.NewTicker(opts.memoryCheck)
	defer t.Stop()
	for {
		select {
		case <-s.exited:
			return
		case <-t.C:
			_ = s.checkMemory(opts.memoryLimit)
		}
	}
}

// checkMemory kills the server if its resident memory is past limit.
func (s *langServer) checkMemory(limit int64) error {
	if rss := residentBytes(s.pgid); rss > limit {
		s.kill(fmt.Sprintf("it used %d MiB of memory, more than the %d MiB allowed", rss>>20, limit>>20))
		return errors.New("memory bound")
	}
	return nil
}

// residentBytes is the resident memory of process pid (0 when unknown).
func residentBytes(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// syncFiles tells the server which watched files were created, changed or
// deleted since it last heard (by Write, Edit, Bash or anything else), so
// that it answers on the workspace as it is.
func (s *langServer) syncFiles(ws *confine.Resolver) error {
	now := scanWatched(ws, s.spec.watched)
	var events []map[string]any
	for rel, st := range now {
		old, ok := s.files[rel]
		switch {
		case !ok:
			events = append(events, map[string]any{"uri": pathURI(filepath.Join(ws.Dir(), rel)), "type": 1})
		case old != st:
			events = append(events, map[string]any{"uri": pathURI(filepath.Join(ws.Dir(), rel)), "type": 2})
		}
	}
	for rel := range s.files {
		if _, ok := now[rel]; !ok {
			events = append(events, map[string]any{"uri": pathURI(filepath.Join(ws.Dir(), rel)), "type": 3})
		}
	}
	s.files = now
	if len(events) == 0 {
		return nil
	}
	return s.conn.Notify("workspace/didChangeWatchedFiles", map[string]any{"changes": events})
}

// scanWatched walks the workspace (not following symbolic links, skipping
// .git and node_modules) for the files a server watches, links to files
// included.
func scanWatched(ws *confine.Resolver, watched func(string) bool) map[string]fileStamp {
	files := map[string]fileStamp{}
	seen := 0
	_ = fs.WalkDir(ws.Root().FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if seen++; seen > lspMaxWatchedFiles {
			return fs.SkipAll
		}
		if d.IsDir() {
			if p != "." && (d.Name() == ".git" || d.Name() == "node_modules") {
				return fs.SkipDir
			}
			return nil
		}
		// Symbolic links too: the server may read a file linked in (and a
		// rename must then be refused, not miss it).
		if (d.Type().IsRegular() || d.Type()&fs.ModeSymlink != 0) && watched(d.Name()) {
			if fi, err := d.Info(); err == nil {
				files[p] = stampOf(fi)
			}
		}
		return nil
	})
	return files
}

// pathURI is the file: URI of an absolute path.
func pathURI(p string) string {
	return (&url.URL{Scheme: "file", Path: filepath.ToSlash(p)}).String()
}

// uriPath is the path of a file: URI, or "" for another kind.
func uriPath(uri string) string {
	u, err := url.Parse(uri)
	if err != nil || u.Scheme != "file" || (u.Host != "" && u.Host != "localhost") {
		return ""
	}
	return filepath.FromSlash(u.Path)
}
