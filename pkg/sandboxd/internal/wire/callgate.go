package wire

import (
	"context"

	"golang.org/x/sync/semaphore"
)

// gateWeight is the weight an exclusive call takes: all of it.
const gateWeight = 1 << 30

// Gate lets tool calls run side by side but for snapshot_restore and
// snapshot_create, which run alone: each waits for the calls in flight to
// end, and the calls that come after it wait for it, so that no Read,
// Write, Edit or Bash sees (or makes) a half-restored workspace, and a
// snapshot holds the workspace as it was between two calls. Waiters are served in arrival order, so a
// restore is not starved by a stream of calls. Background shells are not
// tool calls: they run on, outside the gate.
type Gate struct {
	sem *semaphore.Weighted
}

func NewGate() *Gate { return &Gate{sem: semaphore.NewWeighted(gateWeight)} }

// enter waits until the call may run (or ctx ends) and returns the function
// that lets the next ones in.
func (g *Gate) enter(ctx context.Context, exclusive bool) (release func(), err error) {
	n := int64(1)
	if exclusive {
		n = gateWeight
	}
	if err := g.sem.Acquire(ctx, n); err != nil {
		return nil, err
	}
	return func() { g.sem.Release(n) }, nil
}

// tryEnter lets a call that shares the workspace in if it can enter at
// once (no snapshot runs or waits), and returns the function that lets the
// next ones in; ok is false when it would have to wait.
func (g *Gate) tryEnter() (release func(), ok bool) {
	if !g.sem.TryAcquire(1) {
		return nil, false
	}
	return func() { g.sem.Release(1) }, true
}

// gateHeldKey marks the context of a call that entered the gate before the
// middleware (a direct call answered in its POST).
type gateHeldKey struct{}

func WithGateHeld(ctx context.Context) context.Context {
	return context.WithValue(ctx, gateHeldKey{}, true)
}

func GateHeld(ctx context.Context) bool {
	held, _ := ctx.Value(gateHeldKey{}).(bool)
	return held
}
