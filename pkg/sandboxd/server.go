package sandboxd

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/airlock-dev/airlock/pkg/claimtoken/warmtoken"
	"github.com/airlock-dev/airlock/pkg/isolation"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/confine"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/evidence"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/recordlog"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/snapshot"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/tools"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/wire"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/wsscan"
	"github.com/airlock-dev/airlock/pkg/sandboxstop"
	"github.com/airlock-dev/airlock/pkg/toolnames"
)

// options are the knobs that Config does not expose; tests shorten them.
type options struct {
	keepAlive       time.Duration    // interval of SSE keepalive comments
	maxMessageBytes int64            // bound of one POSTed message
	sessionTimeout  time.Duration    // idle timeout of Streamable HTTP sessions
	idleTimeout     time.Duration    // idle timeout of a kept-alive HTTP connection
	tasks           wire.TaskOptions // when a call becomes a task, how long one is kept
	// clock runs the idle timeout of Streamable HTTP sessions (nil: the
	// real one).
	clock clock.WithDelayedExecution
	// recordBytes bounds the session's log (recordlog.DefaultMaxBytes when 0).
	recordBytes int
	// withoutRecord leaves the session record out: no log, no entry, GET /record not routed.
	// It is for one thing only, the baseline of BenchmarkRecordOverhead (docs/record.md §4):
	// Run takes defaultOptions(), which leaves it false, and no Config field or flag reaches
	// it, so the record is not something a class or a user can turn off
	// (TestOnlyTestsLeaveTheRecordOut holds the package's code to that).
	withoutRecord bool
	// evidence is where the isolation evidence is gathered from (isolation.go): the host's.
	evidence *evidence.Sources
	// usage says where usage is read from (usage.go); nil: the container's cgroup, the real clock.
	usage *usageOptions
	// fileScan bounds the scan of the workspace after a call's processes (wsscan.DefaultLimits
	// when zero).
	fileScan wsscan.Limits
}

func defaultOptions() options {
	return options{
		keepAlive:       wire.DefaultSSEKeepAlive,
		maxMessageBytes: wire.MaxMessageBytes,
		sessionTimeout:  wire.DefaultSessionTimeout,
		idleTimeout:     defaultIdleTimeout,
		clock:           clock.RealClock{},
		tasks:           wire.TaskOptions{Threshold: wire.DefaultTaskThreshold, Retention: wire.DefaultTaskRetention, Clock: clock.RealClock{}},
		evidence:        hostEvidence,
	}
}

// hostEvidence are the sources of the isolation evidence of a real sandboxd: its own kernel,
// /proc, environment and network. The package's tests put a fake one here.
var hostEvidence = evidence.Host()

// server is one sandboxd: the tools, the protocol layer, both transports,
// health and metrics, behind one http.Handler.
type server struct {
	cfg    Config
	logger klog.Logger
	tb     *tools.Toolbox
	// gate runs snapshot_restore and snapshot_create alone (callgate.go).
	gate       *wire.Gate
	served     []string
	mcp        *mcp.Server
	sse        *wire.SSETransport
	streamable *wire.StreamableTransport
	metrics    *metrics
	guard      *wire.Guard
	stopper    *stopper
	// record is the session's log (docs/record.md), read by the operator at GET /record; nil
	// only under options.withoutRecord, a benchmark's baseline.
	record *recordlog.Log
	// usage appends the session's usage to record (usage.go); nil when record is.
	usage *usageMeter
	// recording is what each tool call is recorded with (record.go): record, and the scan of
	// the workspace after a call's processes; its log is nil when record is.
	recording callRecording
	// evidence is where the isolation evidence is gathered from; isolation holds it once
	// gathered, and isolated is closed when gathering has ended, with or without it
	// (isolation.go).
	evidence  *evidence.Sources
	isolation atomic.Pointer[gatheredEvidence]
	isolated  chan struct{}
	closing   atomic.Bool
	// idleTimeout is options.idleTimeout, for the HTTP server.
	idleTimeout time.Duration
	// clock is options.clock (the real one when nil).
	clock clock.WithDelayedExecution
	// shutdownOnce runs shutdown once: the operator's stop (stop.go) and the end of Run both ask.
	shutdownOnce sync.Once
	shutdownErr  error
}

// newServer builds a server for cfg. It does not listen.
func newServer(cfg Config, opts options, logger klog.Logger) (*server, error) {
	var served []string
	var g *wire.Guard
	var err error
	if cfg.WarmKeyFile != "" {
		// A warm member serves nothing until its adoption (adopt).
		if g, err = newWarmServerGuard(cfg, logger); err != nil {
			return nil, err
		}
	} else {
		if served, err = tools.Select(cfg.AllowedTools, cfg.ReadOnly); err != nil {
			return nil, err
		}
		if g, err = wire.NewGuard(cfg.AuthTokenFile); err != nil {
			return nil, err
		}
	}
	tb, err := tools.NewToolbox(cfg.Workspace)
	if err != nil {
		return nil, err
	}
	snaps, err := newStateStore(cfg.StateDir, tb.Workspace(), logger)
	if err != nil {
		tb.Close()
		return nil, err
	}
	tb.SetSnapshots(snaps)
	if opts.evidence == nil {
		tb.Close()
		return nil, errors.New("no source of isolation evidence")
	}
	s := &server{cfg: cfg, logger: logger, tb: tb, gate: wire.NewGate(), served: served, guard: g, stopper: newStopper(), idleTimeout: opts.idleTimeout,
		evidence: opts.evidence, isolated: make(chan struct{})}
	if s.idleTimeout <= 0 {
		s.idleTimeout = defaultIdleTimeout
	}
	if s.clock = opts.clock; s.clock == nil {
		s.clock = clock.RealClock{}
	}
	if !opts.withoutRecord {
		if s.record, err = recordlog.New(s.clock.Now, opts.recordBytes); err != nil {
			tb.Close()
			return nil, err
		}
		uopts := defaultUsageOptions()
		if opts.usage != nil {
			uopts = *opts.usage
		}
		s.usage = newUsageMeter(uopts, tb.Workspace().Dir(), s.record, logger)
		s.record.OnStop(s.usage.final)
		s.recording = newCallRecording(s.record, tb.Workspace(), opts.fileScan)
	}
	s.metrics = newMetrics(served,
		func() float64 { return float64(s.sse.Open()) },
		func() float64 { return float64(countSessions(s.mcp)) },
		func() float64 { return float64(tb.RunningShells()) },
	)
	var calls *wire.CallTable
	if g.Warm() {
		s.mcp = newBareMCPServer(tb, logger)
		g.SetAdopt(s.adopt)
	} else {
		s.mcp, calls = newMCPServer(tb, s.gate, served, s.metrics, s.recording, logger)
	}
	s.mcp.AddReceivingMiddleware(isolationMeta(s.isolationDigest))
	s.sse = wire.NewSSETransport(s.mcp, opts.keepAlive, opts.maxMessageBytes, logger)
	s.sse.StoreCalls(calls)
	s.streamable = wire.NewStreamableTransport(s.mcp, s.sse.LoadCalls, opts.maxMessageBytes, opts.sessionTimeout, opts.clock, logger)
	tasks := wire.NewTaskStore(opts.tasks, s.sse.LoadCalls, logger.WithName("tasks"))
	s.streamable.SetTasks(tasks)
	s.streamable.CountStateless = s.metrics.countStateless
	s.metrics.registerTasks(func() float64 { return float64(tasks.Running()) }, func() float64 { return float64(tasks.Count()) }, tasks.Created())
	return s, nil
}

// newWarmServerGuard checks that cfg asks for nothing the adoption token
// decides (pkg/cmd refuses these flags together already) and reads the
// member key.
func newWarmServerGuard(cfg Config, logger klog.Logger) (*wire.Guard, error) {
	var conflicts []string
	if cfg.AuthTokenFile != "" {
		conflicts = append(conflicts, "an auth token file")
	}
	if cfg.AllowedTools != nil {
		conflicts = append(conflicts, "allowed tools")
	}
	if cfg.ReadOnly {
		conflicts = append(conflicts, "read-only")
	}
	if len(conflicts) > 0 {
		return nil, fmt.Errorf("a warm member takes its token and tools from its adoption: a warm key file excludes %s", strings.Join(conflicts, ", "))
	}
	return wire.NewWarmGuard(cfg.WarmKeyFile, logger)
}

// adopt serves the tools of a warm member's adoption: those of the token's
// tools that this sandboxd has (a newer operator may name more; they are
// ignored), in canonical order. A token that names none of them is
// refused. The warm guard calls it under its lock, before the adopting
// request reaches the transport and before any session exists, so the tools
// are all there when the first tools/list is answered.
func (s *server) adopt(a warmtoken.Adoption) (served, ignored []string, err error) {
	all := toolnames.All()
	for _, name := range all {
		if slices.Contains(a.Tools, name) {
			served = append(served, name)
		}
	}
	for _, name := range a.Tools {
		if !slices.Contains(all, name) {
			ignored = append(ignored, name)
		}
	}
	if len(served) == 0 {
		return nil, ignored, fmt.Errorf("the token names no tool this sandboxd serves (it names %s)", strings.Join(a.Tools, ", "))
	}
	s.metrics.startTools(served)
	s.metrics.adopted()
	s.sse.StoreCalls(serveTools(s.mcp, s.tb, s.gate, served, s.metrics, s.recording, s.logger))
	return served, ignored, nil
}

// newStateStore returns the snapshot store under stateDir or, when it is
// empty, under the first default state directory that is not inside the
// workspace. A default that cannot serve leaves sandboxd without snapshots
// (the snapshot tools say so); an explicit one is an error.
func newStateStore(stateDir string, ws *confine.Resolver, logger klog.Logger) (*snapshot.Store, error) {
	if stateDir != "" {
		return snapshot.NewStore(stateDir, ws)
	}
	var candidates []string
	if cache, err := os.UserCacheDir(); err == nil {
		candidates = append(candidates, filepath.Join(cache, "airlock-sandboxd"))
	}
	candidates = append(candidates, filepath.Join(os.TempDir(), fmt.Sprintf("airlock-sandboxd-%d", os.Getuid())))
	var errs []error
	for _, dir := range candidates {
		store, err := snapshot.NewStore(dir, ws)
		if err == nil {
			logger.V(2).Info("Snapshot store", "dir", store.Dir())
			return store, nil
		}
		errs = append(errs, err)
	}
	logger.Info("No state directory for snapshots: the snapshot tools will refuse; pass --state-dir", "err", errors.Join(errs...))
	return nil, nil
}

func countSessions(m *mcp.Server) int {
	n := 0
	for range m.Sessions() {
		n++
	}
	return n
}

// handler routes the one listener: the two MCP transports and /metrics behind
// the guard (the claim's bearer token; a warm member's adopting token), the
// probes without it (the kubelet has no token). /metrics is guarded because
// a sandbox's NetworkPolicy admits every pod of the claim's namespace, and
// its series (tool names, call counts and timings, secrets scrubbed) are the
// claim's business only: docs/security.md. The MCP transports and
// /isolation serve nothing before the isolation evidence is gathered
// (afterIsolation).
func (s *server) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/sse", s.guard.Wrap(s.afterIsolation(http.HandlerFunc(s.sse.ServeStream))))
	mux.Handle(wire.SSEEndpointPath, s.guard.Wrap(s.afterIsolation(http.HandlerFunc(s.sse.ServeMessage))))
	mux.Handle("/mcp", s.guard.Wrap(s.afterIsolation(s.streamable)))
	mux.Handle("POST "+sandboxstop.Path, s.guard.Wrap(http.HandlerFunc(s.serveStop)))
	if s.record != nil {
		// Read-only: the agent holds the token too (docs/security.md).
		mux.Handle("GET "+recordlog.Path, s.guard.Wrap(s.record))
	}
	// A warm member's evidence token opens this route alone: the operator reads a member's
	// evidence before any claim adopts it (docs/isolation.md, "Warm members").
	mux.Handle("GET "+isolation.Path, s.guard.WrapEvidence(s.afterIsolation(http.HandlerFunc(s.serveIsolation))))
	mux.HandleFunc("GET /healthz", s.healthz)
	mux.HandleFunc("GET /readyz", s.readyz)
	mux.Handle("GET /metrics", s.guard.Wrap(promhttp.HandlerFor(s.metrics.registry, promhttp.HandlerOpts{})))
	return mux
}

// shutdown ends everything that runs, in order: no new sessions, the SSE
// streams closed, every MCP session ended (which cancels the calls in
// flight), and every process group killed. It returns once all of it is
// done, or when ctx is. It runs once; a second call returns the first's error.
func (s *server) shutdown(ctx context.Context) error {
	s.shutdownOnce.Do(func() { s.shutdownErr = s.endAll(ctx) })
	return s.shutdownErr
}

func (s *server) endAll(ctx context.Context) error {
	s.closing.Store(true)
	s.streamable.StartClosing()
	var errs []error
	if err := s.sse.Close(ctx); err != nil {
		errs = append(errs, fmt.Errorf("closing SSE streams: %w", err))
	}
	for _, ss := range slices.Collect(s.mcp.Sessions()) {
		_ = ss.Close()
	}
	if err := s.streamable.CloseSessions(ctx); err != nil {
		errs = append(errs, err)
	}
	if err := s.streamable.CloseDirect(ctx); err != nil {
		errs = append(errs, err)
	}
	if err := s.streamable.Tasks().Close(ctx); err != nil {
		errs = append(errs, err)
	}
	if err := s.tb.Stop(ctx); err != nil {
		errs = append(errs, fmt.Errorf("waiting for background shells: %w", err))
	}
	return errors.Join(errs...)
}

// close releases the workspace.
func (s *server) close() error {
	if s.usage != nil {
		s.usage.stop()
	}
	return s.tb.Close()
}
