package workers

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"
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

// TestRunRequeue: a key whose sync says when to look again is synced again after that long on
// the queue's clock, not before, and forgotten (no backoff) in between.
func TestRunRequeue(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	queue := workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[cache.ObjectName](time.Millisecond, time.Millisecond),
		workqueue.TypedRateLimitingQueueConfig[cache.ObjectName]{Clock: clk})
	key := cache.ObjectName{Namespace: "ns", Name: "a"}
	synced := make(chan int, 2)
	calls := 0
	sync := func(_ context.Context, k cache.ObjectName) (*time.Duration, error) {
		calls++
		synced <- calls
		if calls == 1 {
			d := time.Minute
			return &d, nil
		}
		return nil, nil
	}
	go RunRequeue(ctx, 1, queue, "thing", sync)
	queue.Add(key)
	if n := <-synced; n != 1 {
		t.Fatalf("sync %d first", n)
	}
	// The requeue waits on the clock (AddAfter): only then is a second sync possible.
	for !clk.HasWaiters() {
		runtime.Gosched()
	}
	if n := queue.NumRequeues(key); n != 0 {
		t.Errorf("the key has %d rate-limited requeues, want it forgotten", n)
	}
	select {
	case n := <-synced:
		t.Fatalf("sync %d before the requeue's time", n)
	default:
	}
	clk.Step(time.Minute)
	select {
	case n := <-synced:
		if n != 2 {
			t.Errorf("sync %d, want 2", n)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the key was not synced again after its requeue")
	}
}

// TestProcessNextNamespaceTerminating: a sync refused because its namespace is being deleted is
// forgotten, not retried (nothing can be created there again, and the namespace's deletion brings
// the key back); any other refusal is retried with backoff.
func TestProcessNextNamespaceTerminating(t *testing.T) {
	terminating := &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: 403, Reason: metav1.StatusReasonForbidden,
		Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{Type: corev1.NamespaceTerminatingCause}}},
	}}
	for name, tc := range map[string]struct {
		err          error
		wantRequeues int
	}{
		"a namespace being deleted": {err: terminating},
		"another refusal":           {err: apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, "a", errors.New("no")), wantRequeues: 1},
	} {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			queue := workqueue.NewTypedRateLimitingQueue(workqueue.NewTypedItemExponentialFailureRateLimiter[cache.ObjectName](time.Hour, time.Hour))
			defer queue.ShutDown()
			key := cache.ObjectName{Namespace: "ns", Name: "a"}
			calls := 0
			queue.Add(key)
			if !ProcessNext(ctx, queue, "thing", func(context.Context, cache.ObjectName) (*time.Duration, error) {
				calls++
				return nil, tc.err
			}) {
				t.Fatal("ProcessNext returned false")
			}
			if calls != 1 {
				t.Errorf("%d syncs, want 1", calls)
			}
			if n := queue.NumRequeues(key); n != tc.wantRequeues {
				t.Errorf("%d requeues, want %d", n, tc.wantRequeues)
			}
		})
	}
}
