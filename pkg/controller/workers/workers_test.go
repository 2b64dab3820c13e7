package workers

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2/ktesting"
)

// TestRun: a key whose sync fails is synced again (after the queue's backoff) until it succeeds,
// then forgotten; Run returns once ctx is done and its workers have stopped, with the queue shut
// down.
func TestRun(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	queue := workqueue.NewTypedRateLimitingQueue(workqueue.NewTypedItemExponentialFailureRateLimiter[cache.ObjectName](time.Millisecond, time.Millisecond))
	key := cache.ObjectName{Namespace: "ns", Name: "a"}
	var (
		mu    sync.Mutex
		calls int
	)
	done := make(chan struct{})
	sync := func(_ context.Context, k cache.ObjectName) error {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls < 3 {
			return errors.New("not yet")
		}
		close(done)
		return nil
	}
	returned := make(chan struct{})
	go func() {
		Run(ctx, 2, queue, "thing", sync)
		close(returned)
	}()
	queue.Add(key)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the key was not synced until it succeeded")
	}
	cancel()
	select {
	case <-returned:
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after ctx was done")
	}
	if !queue.ShuttingDown() {
		t.Error("the queue is not shut down")
	}
	if n := queue.NumRequeues(key); n != 0 {
		t.Errorf("the key has %d requeues after it succeeded, want it forgotten", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if calls != 3 {
		t.Errorf("%d syncs, want 3", calls)
	}
}
