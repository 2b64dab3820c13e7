package wire

import (
	"context"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/airlock-dev/airlock/pkg/claimtoken/warmtoken"
)

// What the server's composition (pkg/sandboxd) reaches in the wire's
// pieces: each of these does what its unexported namesake does.

// Enter waits until the call may run (or ctx ends) and returns the function
// that lets the next ones in; exclusive calls run alone.
func (g *Gate) Enter(ctx context.Context, exclusive bool) (release func(), err error) {
	return g.enter(ctx, exclusive)
}

// Wrap puts h behind the guard.
func (g *Guard) Wrap(h http.Handler) http.Handler { return g.wrap(h) }

// WrapEvidence puts h, GET /isolation, behind the guard, which for a warm
// member also takes its evidence token there (and nowhere else).
func (g *Guard) WrapEvidence(h http.Handler) http.Handler { return g.wrapEvidence(h) }

// RequiresToken says whether a token is required (not for a warm member).
func (g *Guard) RequiresToken() bool { return g.tokenHash != nil }

// Warm says whether the guard is a warm member's.
func (g *Guard) Warm() bool { return g.warm != nil }

// SetAdopt sets what serves a warm member's adoption; the guard must be Warm.
func (g *Guard) SetAdopt(adopt func(warmtoken.Adoption) (served, ignored []string, err error)) {
	g.warm.adopt = adopt
}

// StoreCalls sets the direct path's tools.
func (t *SSETransport) StoreCalls(calls *CallTable) { t.calls.Store(calls) }

// LoadCalls returns the direct path's tools (nil before a warm member's adoption).
func (t *SSETransport) LoadCalls() *CallTable { return t.calls.Load() }

// ServeStream serves GET /sse.
func (t *SSETransport) ServeStream(w http.ResponseWriter, r *http.Request) { t.serveStream(w, r) }

// ServeMessage serves POST /message.
func (t *SSETransport) ServeMessage(w http.ResponseWriter, r *http.Request) { t.serveMessage(w, r) }

// Open counts the open SSE streams.
func (t *SSETransport) Open() int { return t.open() }

// Close closes every SSE stream and waits (until ctx is done) for them.
func (t *SSETransport) Close(ctx context.Context) error { return t.close(ctx) }

// MaxBytes is the bound of one POSTed message.
func (t *StreamableTransport) MaxBytes() int64 { return t.maxBytes }

// SetKeep sets what takes a connection over after a direct call.
func (t *StreamableTransport) SetKeep(k *KeepAlive) { t.keep = k }

// SetTasks sets the task store of the 2026-07-28 calls.
func (t *StreamableTransport) SetTasks(tasks *TaskStore) { t.tasks = tasks }

// Tasks is the task store.
func (t *StreamableTransport) Tasks() *TaskStore { return t.tasks }

// StartClosing refuses new sessions and stateless requests from now on.
func (t *StreamableTransport) StartClosing() { t.closing.Store(true) }

// CloseSessions cancels the direct calls of every stateful session and
// waits for them, or for ctx. The sessions themselves are the SDK's to close.
func (t *StreamableTransport) CloseSessions(ctx context.Context) error { return t.sessions.close(ctx) }

// CloseDirect cancels the stateless direct calls in flight and waits for them.
func (t *StreamableTransport) CloseDirect(ctx context.Context) error { return t.direct.close(ctx) }

// Close closes the kept connections that wait for a request, and the
// others once their answers are written, and waits for their loops, or ctx.
func (k *KeepAlive) Close(ctx context.Context) error { return k.close(ctx) }

// Close cancels every call in flight, tasks or not, and waits for them,
// or for ctx.
func (s *TaskStore) Close(ctx context.Context) error { return s.close(ctx) }

// Count counts the tasks kept.
func (s *TaskStore) Count() int { return s.count() }

// Running counts the tasks that run.
func (s *TaskStore) Running() int { return s.running() }

// Created counts the calls that became tasks, by how.
func (s *TaskStore) Created() prometheus.Collector { return s.created }
