// Package workers runs the workers of a controller whose sync needs no more than an error: a
// key that fails is retried with the queue's backoff, one that succeeds is forgotten. (The claim
// controller, whose sync also says when to look again, has a loop of its own.)
package workers

import (
	"context"
	"time"

	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// Run starts n workers that sync the queue's keys until ctx is done, then shuts the queue down
// and returns once every worker has. what names the keys in error logs ("runtime", ...).
func Run(ctx context.Context, n int, queue workqueue.TypedRateLimitingInterface[cache.ObjectName], what string, sync func(context.Context, cache.ObjectName) error) {
	var wg wait.Group
	for range n {
		wg.StartWithContext(ctx, func(ctx context.Context) {
			wait.UntilWithContext(ctx, func(ctx context.Context) {
				for processNext(ctx, queue, what, sync) {
				}
			}, time.Second)
		})
	}
	<-ctx.Done()
	queue.ShutDown()
	wg.Wait()
}

// processNext syncs one key; it says false once the queue is shut down.
func processNext(ctx context.Context, queue workqueue.TypedRateLimitingInterface[cache.ObjectName], what string, sync func(context.Context, cache.ObjectName) error) bool {
	key, shutdown := queue.Get()
	if shutdown {
		return false
	}
	defer queue.Done(key)
	if err := sync(ctx, key); err != nil {
		utilruntime.HandleErrorWithContext(ctx, err, "Error syncing "+what, what, klog.KRef(key.Namespace, key.Name))
		queue.AddRateLimited(key)
		return true
	}
	queue.Forget(key)
	return true
}
