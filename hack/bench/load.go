package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/airlock-dev/airlock/pkg/client"
)

// target is where an acquire goes: a namespace of the product under test. acquire asks for the
// sandbox of session and waits up to waitSeconds for it to be ready (0: returns once it is asked
// for); product.go and peer.go make it.
type target struct {
	namespace string
	acquire   func(ctx context.Context, session string, waitSeconds int) error
	// sessions are the calls of a replayed day's sessions (dayreplay.go): airlock's only, nil
	// for the peer.
	sessions *sessionCalls
}

// answer is what one acquire saw.
type answer struct {
	sent, answered time.Time
	err            error
}

// openLoop sends n acquires, request i at t0 + at(i) whatever the answers (scenario.offset: i/rate,
// or by phases), request i to targets[i % len(targets)] with session "<prefix>-<i>" (session),
// and waits for every answer: 200 Bound, an error, or acquireTimeout.
func openLoop(ctx context.Context, clk clock.Clock, targets []target, prefix string, n int, at func(i int) time.Duration, acquireTimeout time.Duration) []answer {
	answers := make([]answer, n)
	var wg sync.WaitGroup
	start := clk.Now()
	for i := range n {
		if d := at(i) - clk.Since(start); d > 0 {
			t := clk.NewTimer(d)
			select {
			case <-t.C():
			case <-ctx.Done():
				t.Stop()
			}
		}
		if ctx.Err() != nil {
			answers[i] = answer{sent: clk.Now(), answered: clk.Now(), err: ctx.Err()}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			tg := targets[i%len(targets)]
			actx, cancel := context.WithTimeout(ctx, acquireTimeout)
			defer cancel()
			sent := clk.Now()
			err := tg.acquire(actx, session(prefix, i), int(min(acquireTimeout, 300*time.Second).Seconds()))
			answers[i] = answer{sent: sent, answered: clk.Now(), err: err}
		}()
	}
	wg.Wait()
	return answers
}

// session is the session of an open loop's acquire i.
func session(prefix string, i int) string { return fmt.Sprintf("%s-%d", prefix, i) }

// fill creates n claims in tg's namespace through the Sandbox API without waiting for them
// (waitSeconds 0: the answer is 202 once the claim exists; a 503 is retried after its
// Retry-After, as pkg/client does), at most `parallel` requests at once.
func fill(ctx context.Context, tg target, prefix string, n, parallel int) error {
	sem := make(chan struct{}, parallel)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return ctx.Err()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := tg.acquire(ctx, fmt.Sprintf("%s-%d", prefix, i), 0); err != nil {
				errs <- fmt.Errorf("filling %s, claim %d: %w", tg.namespace, i, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	if len(all) > 0 {
		return fmt.Errorf("%d of %d fill acquires failed; the first: %w", len(all), n, all[0])
	}
	return nil
}

func ptrInt(v int) *int { return &v }

// classify names an acquire error for the counts: the Sandbox API's code, or the Go error.
func classify(err error) string {
	var apiErr *client.APIError
	switch {
	case errors.As(err, &apiErr):
		if apiErr.Reason != "" {
			return fmt.Sprintf("%d %s (%s)", apiErr.Status, apiErr.Code, apiErr.Reason)
		}
		return fmt.Sprintf("%d %s", apiErr.Status, apiErr.Code)
	case errors.Is(err, context.DeadlineExceeded):
		return "timed out"
	}
	return err.Error()
}
