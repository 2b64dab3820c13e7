// Package sandboxclass is the SandboxClass status controller: it says in each class's conditions
// whether a sandbox can be built from it (condition Valid: the checks admission makes of a class,
// sandboxpod.ClassConflict), so that `kubectl get sbc` shows a class that every claim of it would
// fail before any claim does. It writes only SandboxClass status.
package sandboxclass

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/controller/handlers"
	"github.com/airlock-dev/airlock/pkg/controller/workers"
	airlockclientset "github.com/airlock-dev/airlock/pkg/generated/clientset/versioned"
	airlockinformers "github.com/airlock-dev/airlock/pkg/generated/informers/externalversions/airlock/v1alpha1"
	airlocklisters "github.com/airlock-dev/airlock/pkg/generated/listers/airlock/v1alpha1"
)

// ControllerName is the queue's name and the field manager of the status writes.
const ControllerName = "airlock-class-controller"

// Controller keeps SandboxClass status.
type Controller struct {
	classes       classStatusControl
	classLister   airlocklisters.SandboxClassLister
	classesSynced cache.InformerSynced
	handlers      handlers.Registrations
	queue         workqueue.TypedRateLimitingInterface[cache.ObjectName]
	clock         clock.PassiveClock
}

// NewController returns a SandboxClass status controller on the class informer.
func NewController(ctx context.Context, airlockClient airlockclientset.Interface, classes airlockinformers.SandboxClassInformer) (*Controller, error) {
	return newControllerWithClock(ctx, airlockClient, classes, clock.RealClock{})
}

func newControllerWithClock(_ context.Context, airlockClient airlockclientset.Interface, classes airlockinformers.SandboxClassInformer, clk clock.WithTicker) (*Controller, error) {
	c := &Controller{
		classes:       realClassStatusControl{client: airlockClient},
		classLister:   classes.Lister(),
		classesSynced: classes.Informer().HasSynced,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[cache.ObjectName](),
			workqueue.TypedRateLimitingQueueConfig[cache.ObjectName]{Name: ControllerName, Clock: clk}),
		clock: clk,
	}
	if err := c.handlers.Add(classes.Informer(), cache.ResourceEventHandlerFuncs{
		AddFunc: c.enqueue,
		// A spec change (its generation) is what the condition follows; a status-only change is
		// this controller's own write, or someone else's that the next spec change repairs.
		UpdateFunc: func(old, cur any) {
			if old.(metav1.Object).GetGeneration() != cur.(metav1.Object).GetGeneration() {
				c.enqueue(cur)
			}
		},
	}); err != nil {
		return nil, fmt.Errorf("adding the class event handler: %w", err)
	}
	return c, nil
}

func (c *Controller) enqueue(obj any) {
	if class, ok := obj.(*airlockv1alpha1.SandboxClass); ok {
		c.queue.Add(cache.MetaObjectToName(class))
	}
}

// Run runs the workers until ctx is done, and returns once they all have.
func (c *Controller) Run(ctx context.Context, n int) error {
	defer utilruntime.HandleCrashWithContext(ctx)
	defer c.handlers.RemoveAll()
	defer c.queue.ShutDown()
	logger := klog.FromContext(ctx)
	logger.Info("Starting controller", "controller", ControllerName, "workers", n)
	defer logger.Info("Shutting down controller", "controller", ControllerName)
	if !cache.WaitForNamedCacheSyncWithContext(ctx, c.classesSynced) {
		return fmt.Errorf("waiting for the informer caches to sync: %w", ctx.Err())
	}
	workers.Run(ctx, n, c.queue, "class", c.sync)
	return nil
}
