package sandboxd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/procgroup"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/wire"
)

// defaultShutdownGrace is used when Config.ShutdownGrace is not set.
const defaultShutdownGrace = 10 * time.Second

// defaultIdleTimeout closes a kept-alive HTTP connection that has carried
// no request for this long.
const defaultIdleTimeout = 2 * time.Minute

// Run serves MCP on cfg.Listen until ctx is done, then shuts down within
// cfg.ShutdownGrace: SSE streams are closed and every process group killed
// before the HTTP server is shut down.
func Run(ctx context.Context, cfg Config) error {
	logger := klog.FromContext(ctx).WithName("sandboxd")
	if cfg.Listen == "" {
		return errors.New("the listen address is empty")
	}
	// Listen first, before the server is built (its tools' schemas take some milliseconds):
	// the kubelet's first readiness probe comes a few milliseconds after the container starts,
	// and one refused there is tried again only on the next period (or when the kubelet next
	// syncs the pod), up to a second later. A probe (or a client) that connects now waits in the
	// listen backlog until serve answers it.
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Listen, err)
	}
	tuneGC(logger)
	if procgroup.IsInit() {
		// The container's first process: the operator's stop (stop.go) rests on it, so no
		// process of the sandbox (same user) may attach to it (ptrace) or read its memory.
		if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
			_ = ln.Close()
			return fmt.Errorf("making sandboxd not dumpable: %w", err)
		}
	}
	s, err := newServer(cfg, defaultOptions(), logger)
	if err != nil {
		_ = ln.Close()
		return err
	}
	defer s.close()
	releaseStartupGarbage()
	return s.serve(ctx, ln)
}

// serve serves on ln until ctx is done, then shuts down.
func (s *server) serve(ctx context.Context, ln net.Listener) error {
	hs := &http.Server{
		Handler:           s.handler(),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       s.idleTimeout,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          klog.NewStandardLogger("WARNING"),
		// No WriteTimeout: SSE streams and tool calls last long.
	}
	// Kept connections (keepalive.go) hand the requests they do not serve
	// back to hs through back.
	back := wire.NewBackListener(ln.Addr())
	keep := wire.NewKeepAlive(hs, back, s.streamable.MaxBytes(), s.clock)
	s.streamable.SetKeep(keep)
	// The evidence is gathered while the probes are answered: nothing else is served before it.
	gathered := make(chan error, 1)
	gctx, endGather := context.WithCancel(ctx)
	defer endGather()
	go func() { gathered <- s.gatherIsolation(gctx) }()
	if s.usage != nil {
		go s.usage.run(gctx) // ends with gctx, before the shutdown's stopped entry
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	backDone := make(chan error, 1)
	go func() { backDone <- hs.Serve(back) }()
	s.logger.Info("sandboxd listening", "address", ln.Addr().String(), "workspace", s.tb.Workspace().Dir(),
		"tools", s.served, "readOnly", s.cfg.ReadOnly, "auth", s.guard.RequiresToken(), "warm", s.guard.Warm(),
		"openat2", s.tb.Workspace().FastOpen())

	var serveErr error
	for waiting := true; waiting; {
		select {
		case <-ctx.Done():
			waiting = false
		case serveErr = <-errc:
			serveErr = fmt.Errorf("serving on %s: %w", ln.Addr(), serveErr)
			waiting = false
		case err := <-gathered:
			gathered = nil // gathered once
			if err != nil && ctx.Err() == nil {
				serveErr = fmt.Errorf("gathering the isolation evidence: %w", err)
				waiting = false
			}
		}
	}
	endGather()
	if gathered != nil {
		<-gathered // the probes end with gctx
	}
	grace := s.cfg.ShutdownGrace
	if grace <= 0 {
		grace = defaultShutdownGrace
	}
	s.logger.Info("sandboxd shutting down", "grace", grace)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
	defer cancel()
	if err := s.shutdown(sctx); err != nil {
		s.logger.Error(err, "Shutdown did not finish in time")
	}
	s.endRecord(sctx)
	if err := keep.Close(sctx); err != nil {
		s.logger.Error(err, "Kept connections did not end in time")
	}
	if err := hs.Shutdown(sctx); err != nil {
		s.logger.Error(err, "HTTP shutdown did not finish in time: closing the remaining connections")
		_ = hs.Close()
	}
	<-backDone // Shutdown closed back: its Serve has returned
	if serveErr == nil {
		if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
			serveErr = err
		}
	}
	s.logger.Info("sandboxd stopped")
	return serveErr
}
