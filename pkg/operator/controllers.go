package operator

import (
	"context"
	"errors"
	"fmt"
	"sync"

	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	airlockclientset "github.com/airlock-dev/airlock/pkg/generated/clientset/versioned"
	airlockinformers "github.com/airlock-dev/airlock/pkg/generated/informers/externalversions"
)

// ControllerContext is what a controller is built from. The informer factories are shared by
// every controller (and, for airlock, by the Sandbox API): ask them for informers in a
// controllerInitFunc, and runControllers starts them.
type ControllerContext struct {
	KubeClient       kubernetes.Interface
	AirlockClient    airlockclientset.Interface
	KubeInformers    kubeinformers.SharedInformerFactory
	AirlockInformers airlockinformers.SharedInformerFactory
	EventRecorder    record.EventRecorder

	// Workers is the number of workers each controller runs (--workers).
	Workers int
	// SyncImage is the image of sync-back Jobs (--sync-image).
	SyncImage string
}

// A controllerInitFunc builds one controller and returns the function that runs it. It must not
// start anything itself: runControllers starts the informer factories once every controller has
// asked them for its informers, then calls each run function in its own goroutine. run must block
// until ctx is done and return only when all of the controller's goroutines have exited (the lease
// is released only after that); an error from run stops the operator.
type controllerInitFunc func(ctx context.Context, cc ControllerContext) (run func(ctx context.Context) error, err error)

// controllerDescriptor names a controller of the operator.
type controllerDescriptor struct {
	name string
	init controllerInitFunc
}

// newControllerDescriptors lists the controllers the leader runs.
func newControllerDescriptors() []controllerDescriptor {
	// The SandboxClaim and AgentRuntime controllers are added here as they land.
	return nil
}

// runControllers builds and runs the controllers until ctx is done, then waits for them all to
// return. informersDone stops the informers that the controllers asked for; it outlives ctx, so
// that controllers still read a live cache while they stop.
func runControllers(ctx context.Context, controllers []controllerDescriptor, cc ControllerContext, informersDone <-chan struct{}) error {
	logger := klog.FromContext(ctx)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	type runnable struct {
		name string
		run  func(ctx context.Context) error
	}
	var runnables []runnable
	for _, c := range controllers {
		run, err := c.init(klog.NewContext(ctx, klog.LoggerWithName(logger, c.name)), cc)
		if err != nil {
			return fmt.Errorf("building the %s controller: %w", c.name, err)
		}
		runnables = append(runnables, runnable{name: c.name, run: run})
	}
	// Start only what the controllers asked for and is not running yet.
	cc.KubeInformers.Start(informersDone)
	cc.AirlockInformers.Start(informersDone)
	logger.Info("Starting controllers", "count", len(runnables))

	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		failures []error
	)
	for _, r := range runnables {
		wg.Go(func() {
			err := r.run(klog.NewContext(ctx, klog.LoggerWithName(logger, r.name)))
			if ctx.Err() != nil && errors.Is(err, context.Canceled) {
				err = nil // asked to stop, and said so
			}
			if err == nil && ctx.Err() == nil {
				err = errors.New("returned before it was asked to stop")
			}
			if err != nil {
				mu.Lock()
				failures = append(failures, fmt.Errorf("%s controller: %w", r.name, err))
				mu.Unlock()
				cancel() // one controller down stops them all: the operator restarts whole
			}
		})
	}
	<-ctx.Done()
	wg.Wait()
	logger.Info("Stopped controllers")
	return errors.Join(failures...)
}
