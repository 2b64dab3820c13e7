package main

// The warm-day scenario's replay: the trace's sessions sent at their arrival times divided by the
// speed-up, each acquiring its handle through the Sandbox API, holding it for its length divided
// by the speed-up (renewing it as a runtime does when that is longer than half the idle timeout),
// then closing its session through sessions/close, the call runtime clients end a session with:
// the claim is reaped, so warm members are consumed and the pool must refill, and shrink again.

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/airlock-dev/airlock/pkg/client"
)

// closeTimeout bounds one sessions/close (and a renewal).
const closeTimeout = 30 * time.Second

// sessionCalls are the Sandbox API calls the replay makes for one namespace (airlock's only):
// acquire says whether the claim adopted a warm member and the runtime's idle timeout.
type sessionCalls struct {
	acquire func(ctx context.Context, session, handle string, waitSeconds int) (acquired, error)
	renew   func(ctx context.Context, session, handle string) error
	close   func(ctx context.Context, session string) error
}

// acquired is what a Bound acquire answered.
type acquired struct {
	warm        bool
	idleTimeout time.Duration
}

// dayAnswer is what one session of the replay saw.
type dayAnswer struct {
	// answer is its acquire: sent, answered (Bound or the error).
	answer
	warm bool
	// closed is when its sessions/close was sent (zero: never, the replay was cancelled);
	// closeErr that call's error.
	closed   time.Time
	closeErr error
	renewals int
}

// replayDay replays trace against calls, speedUp times faster than the day, from now: session i
// is sent at start + At/speedUp whatever the answers. It returns the start (the day's midnight,
// replayed) once every session is closed.
func replayDay(ctx context.Context, clk clock.Clock, calls sessionCalls, trace []daySession, speedUp float64, acquireTimeout time.Duration) (time.Time, []dayAnswer) {
	answers := make([]dayAnswer, len(trace))
	var wg sync.WaitGroup
	start := clk.Now()
	for i, s := range trace {
		if !waitUntil(ctx, clk, start.Add(scaled(s.At, speedUp))) {
			answers[i] = dayAnswer{answer: answer{sent: clk.Now(), answered: clk.Now(), err: ctx.Err()}}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i] = replaySession(ctx, clk, calls, s, speedUp, acquireTimeout)
		}()
	}
	wg.Wait()
	return start, answers
}

// replaySession acquires s's handle, holds it for its length over speedUp, then closes the
// session (at once when the acquire failed: a claim it may have created is not left behind).
func replaySession(ctx context.Context, clk clock.Clock, calls sessionCalls, s daySession, speedUp float64, acquireTimeout time.Duration) dayAnswer {
	var a dayAnswer
	actx, cancel := context.WithTimeout(ctx, acquireTimeout)
	a.sent = clk.Now()
	got, err := calls.acquire(actx, s.Session, s.Handle, int(min(acquireTimeout, 300*time.Second).Seconds()))
	cancel()
	a.answered, a.err, a.warm = clk.Now(), err, got.warm
	if err == nil {
		a.renewals = hold(ctx, clk, calls, s, a.answered.Add(scaled(s.Length, speedUp)), got.idleTimeout)
	}
	if ctx.Err() != nil {
		return a
	}
	cctx, cancel := context.WithTimeout(ctx, closeTimeout)
	defer cancel()
	a.closed = clk.Now()
	for {
		// A 503 (the operator cannot reach the API server now) is called again after its
		// Retry-After, as pkg/client does for an acquire.
		a.closeErr = calls.close(cctx, s.Session)
		var apiErr *client.APIError
		if !errors.As(a.closeErr, &apiErr) || apiErr.Status != http.StatusServiceUnavailable ||
			!waitUntil(cctx, clk, clk.Now().Add(apiErr.RetryAfter)) {
			return a
		}
	}
}

// hold waits until end, renewing the sandbox every half idle timeout meanwhile (a runtime renews
// after its tool calls; a renewal within half the idle timeout writes nothing), and returns the
// renewals made.
func hold(ctx context.Context, clk clock.Clock, calls sessionCalls, s daySession, end time.Time, idleTimeout time.Duration) int {
	renewals := 0
	for {
		next := end
		if idleTimeout > 0 {
			next = minTime(end, clk.Now().Add(idleTimeout/2))
		}
		if !waitUntil(ctx, clk, next) || !next.Before(end) {
			return renewals
		}
		rctx, cancel := context.WithTimeout(ctx, closeTimeout)
		_ = calls.renew(rctx, s.Session, s.Handle) // a failed renewal is retried at the next one
		cancel()
		renewals++
	}
}

// waitUntil waits until t on clk; false when ctx ended first.
func waitUntil(ctx context.Context, clk clock.Clock, t time.Time) bool {
	if d := t.Sub(clk.Now()); d > 0 {
		timer := clk.NewTimer(d)
		defer timer.Stop()
		select {
		case <-timer.C():
		case <-ctx.Done():
		}
	}
	return ctx.Err() == nil
}

// scaled is d of the day, replayed speedUp times faster.
func scaled(d time.Duration, speedUp float64) time.Duration {
	return time.Duration(float64(d) / speedUp)
}
