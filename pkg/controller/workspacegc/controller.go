// Package workspacegc is the controller that collects kept workspaces (docs/nothing-lost.md,
// "Resume without loss"), shaped like kube-controller-manager's ttlafterfinished and podgc: a
// controller of its own, on informers handed in by the operator, with one queue of records, timers
// as AddAfter on an injected clock, and writes of Jobs only. It meets the claim controller
// (pkg/controller/claim) through the objects only: the claim controller writes a kept workspace's
// record (a suspended Job, pkg/workspace) and takes it when a claim resumes the workspace; this
// controller collects it.
//
// A record is looked at when it appears or changes, when its runtime goes or comes again (or its
// retention changes), when a pod of the claim that kept it goes, and when a claim of its directory
// goes or starts waiting for the collection (Ready False WaitingForWorkspaceCollection). It is
// collected (the Job unsuspended, an Update conditional on the resourceVersion, so that of a take
// and a collection one wins) when the runtime's workspaceRetention has passed since it was kept,
// or at once when its runtime (by name and UID) is gone or the workspace cannot be resumed (a warm
// member's). Before, no pod of the claim that kept it, no sync-back pod of that claim still
// running (read from the API server: no cache holds them), and, in a fresh list of the
// namespace's claims from the API server, no live claim on the directory may be left, other than
// a claim of another owner that waits for the collection, and no resume member of the record
// (read from the API server: the idle ones are deleted here first, its only writes but Jobs).
// A collection that completes is deleted (which wakes the claims that wait for it); one that
// fails is reported.
//
// A claim that garbage collection deleted with its runtime (no sync-back, SPEC section 3) after it
// had a pod leaves a workspace no claim may resume: this controller writes its record, not
// resumable, and collects it as any other.
package workspacegc

import (
	"context"
	"fmt"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	batchinformers "k8s.io/client-go/informers/batch/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	batchlisters "k8s.io/client-go/listers/batch/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/airlock-dev/airlock/pkg/controller/handlers"
	"github.com/airlock-dev/airlock/pkg/controller/objectcontrol"
	"github.com/airlock-dev/airlock/pkg/controller/workers"
	airlockclientset "github.com/airlock-dev/airlock/pkg/generated/clientset/versioned"
	airlockinformers "github.com/airlock-dev/airlock/pkg/generated/informers/externalversions/airlock/v1alpha1"
	airlocklisters "github.com/airlock-dev/airlock/pkg/generated/listers/airlock/v1alpha1"
)

// ControllerName is the events' component and the field manager of the controller's writes.
const ControllerName = "airlock-workspacegc-controller"

// FieldManager names the controller's writes.
const FieldManager = ControllerName

// queueName is the queue's name: the one it had in the claim controller, so that its workqueue
// metrics keep their name label.
const queueName = "airlock-claim-controller-kept-workspaces"

// Controller collects kept workspaces.
type Controller struct {
	eventClient kubernetes.Interface
	// jobs writes the records.
	jobs objectcontrol.Interface[*batchv1.Job]
	// pods deletes the idle resume members of a record before it is collected: its only other
	// write (docs/nothing-lost.md, "Resume members").
	pods objectcontrol.Interface[*corev1.Pod]
	// claims lists a namespace's claims from the API server (a quorum read).
	claims claimReader
	// syncPods reads the pods of a claim's sync-back Jobs, which no cache holds.
	syncPods syncPodControl

	jobLister      batchlisters.JobLister
	jobsSynced     cache.InformerSynced
	podLister      corelisters.PodLister
	podsSynced     cache.InformerSynced
	claimLister    airlocklisters.SandboxClaimLister
	claimsSynced   cache.InformerSynced
	runtimeLister  airlocklisters.AgentRuntimeLister
	runtimesSynced cache.InformerSynced
	classLister    airlocklisters.SandboxClassLister
	classesSynced  cache.InformerSynced

	// handlers are the event handlers added to shared informers, removed when Run returns.
	handlers handlers.Registrations
	queue    workqueue.TypedRateLimitingInterface[cache.ObjectName]
	// orphans are the workspaces (by record key) of claims garbage collection deleted whose
	// records are yet to be written (*SandboxClaim values).
	orphans sync.Map

	broadcaster record.EventBroadcaster
	recorder    record.EventRecorder
	clock       clock.WithTicker

	// syncImage is the image of the records' Jobs (--sync-image).
	syncImage string
}

// Informers are the informers the controller reads. The Job and Pod informers are the operator's
// filtered ones (on LabelClaim): records and the pods of claims carry it.
type Informers struct {
	Jobs     batchinformers.JobInformer
	Pods     coreinformers.PodInformer
	Claims   airlockinformers.SandboxClaimInformer
	Runtimes airlockinformers.AgentRuntimeInformer
	Classes  airlockinformers.SandboxClassInformer
}

// NewController returns the controller on the given informers. Events are recorded with
// eventClient (nil: kubeClient).
func NewController(ctx context.Context, kubeClient, eventClient kubernetes.Interface, airlockClient airlockclientset.Interface, informers Informers, syncImage string) (*Controller, error) {
	c, err := newControllerWithClock(ctx, kubeClient, airlockClient, informers, syncImage, clock.RealClock{})
	if err != nil {
		return nil, err
	}
	if eventClient != nil {
		c.eventClient = eventClient
	}
	return c, nil
}

func newControllerWithClock(ctx context.Context, kubeClient kubernetes.Interface, airlockClient airlockclientset.Interface, informers Informers, syncImage string, clk clock.WithTicker) (*Controller, error) {
	broadcaster, recorder := newEventRecorder(ctx)
	c := &Controller{
		eventClient:    kubeClient,
		jobs:           objectcontrol.Jobs(kubeClient, FieldManager),
		pods:           objectcontrol.Pods(kubeClient, FieldManager),
		claims:         realClaimReader{client: airlockClient},
		syncPods:       realSyncPods{client: kubeClient},
		jobLister:      informers.Jobs.Lister(),
		jobsSynced:     informers.Jobs.Informer().HasSynced,
		podLister:      informers.Pods.Lister(),
		podsSynced:     informers.Pods.Informer().HasSynced,
		claimLister:    informers.Claims.Lister(),
		claimsSynced:   informers.Claims.Informer().HasSynced,
		runtimeLister:  informers.Runtimes.Lister(),
		runtimesSynced: informers.Runtimes.Informer().HasSynced,
		classLister:    informers.Classes.Lister(),
		classesSynced:  informers.Classes.Informer().HasSynced,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[cache.ObjectName](5*time.Millisecond, 5*time.Minute),
			workqueue.TypedRateLimitingQueueConfig[cache.ObjectName]{Name: queueName, Clock: clk}),
		broadcaster: broadcaster,
		recorder:    recorder,
		clock:       clk,
		syncImage:   syncImage,
	}
	if err := c.addEventHandlers(klog.FromContext(ctx), informers); err != nil {
		return nil, err
	}
	return c, nil
}

// newEventRecorder returns the broadcaster and recorder of the controller's events, on a scheme
// of its own (see the claim controller's: the global scheme raced with lease renewals).
func newEventRecorder(ctx context.Context) (record.EventBroadcaster, record.EventRecorder) {
	eventScheme := runtime.NewScheme()
	utilruntime.Must(scheme.AddToScheme(eventScheme))
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	return broadcaster, broadcaster.NewRecorder(eventScheme, corev1.EventSource{Component: ControllerName})
}

// Run starts the event broadcaster and workers, and blocks until ctx is done and every worker has
// returned.
func (c *Controller) Run(ctx context.Context, n int) error {
	defer utilruntime.HandleCrashWithContext(ctx)
	defer c.handlers.RemoveAll()

	c.broadcaster.StartStructuredLogging(3)
	c.broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: c.eventClient.CoreV1().Events("")})
	defer c.broadcaster.Shutdown()
	defer c.queue.ShutDown()

	logger := klog.FromContext(ctx)
	logger.Info("Starting controller", "controller", ControllerName, "workers", n)
	defer logger.Info("Shutting down controller", "controller", ControllerName)

	if !cache.WaitForNamedCacheSyncWithContext(ctx, c.jobsSynced, c.podsSynced, c.claimsSynced, c.runtimesSynced, c.classesSynced) {
		return fmt.Errorf("waiting for the informer caches to sync: %w", ctx.Err())
	}
	workers.RunRequeue(ctx, n, c.queue, "record", c.sync)
	return nil
}
