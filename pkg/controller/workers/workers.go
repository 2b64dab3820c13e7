// Package workers runs the workers of a controller: a key that fails is retried with the queue's
// backoff, one that succeeds is forgotten, and (RunRequeue) one whose sync says when to look
// again is added after that long. (The claim controller, which also keeps a deadline through its
// backoff, has a loop of its own.)
package workers

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// NamespaceTerminating says whether err is the API server's refusal of a create in a namespace
// being deleted. Nothing can be created there again (a namespace being deleted is never
// undeleted), and the namespace controller deletes what is in it, whose deletion brings the key
// back to its controller: retrying with backoff until then would only load the API server (a
// namespace of 200 claims retried each claim's writes a dozen times in `make bench`).
func NamespaceTerminating(err error) bool {
	return err != nil && apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause)
}

// Run starts n workers that sync the queue's keys until ctx is done, then shuts the queue down
// and returns once every worker has. what names the keys in error logs ("runtime", ...).
func Run(ctx context.Context, n int, queue workqueue.TypedRateLimitingInterface[cache.ObjectName], what string, sync func(context.Context, cache.ObjectName) error) {
	RunRequeue(ctx, n, queue, what, func(ctx context.Context, key cache.ObjectName) (*time.Duration, error) {
		return nil, sync(ctx, key)
	})
}

// RunRequeue is Run for a sync that also returns when to look at the key again (nil: when an
// event says so): a key synced without an error is forgotten and, with a duration, added after it.
func RunRequeue(ctx context.Context, n int, queue workqueue.TypedRateLimitingInterface[cache.ObjectName], what string, sync func(context.Context, cache.ObjectName) (*time.Duration, error)) {
	var wg wait.Group
	for range n {
		wg.StartWithContext(ctx, func(ctx context.Context) {
			wait.UntilWithContext(ctx, func(ctx context.Context) {
				for ProcessNext(ctx, queue, what, sync) {
				}
			}, time.Second)
		})
	}
	<-ctx.Done()
	queue.ShutDown()
	wg.Wait()
}

// ProcessNext syncs one key; it says false once the queue is shut down. A conflict (the cache
// was behind the API server: the key is synced again from a newer cache) is logged at V(4), any
// other error as an error; both are retried with the queue's backoff. A write refused because
// its namespace is being deleted (NamespaceTerminating) is logged at V(2) and not retried. Tests call it to sync the
// next key of a controller's queue as its workers would.
func ProcessNext(ctx context.Context, queue workqueue.TypedRateLimitingInterface[cache.ObjectName], what string, sync func(context.Context, cache.ObjectName) (*time.Duration, error)) bool {
	key, shutdown := queue.Get()
	if shutdown {
		return false
	}
	defer queue.Done(key)
	requeue, err := sync(ctx, key)
	if NamespaceTerminating(err) {
		klog.FromContext(ctx).V(2).Info("Not retrying "+what+": its write went to a namespace being deleted", what, klog.KRef(key.Namespace, key.Name), "err", err)
		queue.Forget(key)
		return true
	}
	if err != nil {
		if apierrors.IsConflict(err) {
			klog.FromContext(ctx).V(4).Info("Conflict syncing "+what+", retrying", what, klog.KRef(key.Namespace, key.Name), "err", err)
		} else {
			utilruntime.HandleErrorWithContext(ctx, err, "Error syncing "+what, what, klog.KRef(key.Namespace, key.Name))
		}
		queue.AddRateLimited(key)
		return true
	}
	queue.Forget(key)
	if requeue != nil {
		queue.AddAfter(key, *requeue)
	}
	return true
}
