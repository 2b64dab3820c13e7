// Package claim is the SandboxClaim controller (SPEC section 3): it admits claims oldest first,
// builds what a claim needs (SPEC section 5: a NetworkPolicy, a token Secret and one pod, from the
// record frozen at admission; pkg/sandboxpod), binds it when its pod is ready, fails it when the
// pod cannot start, reaps it when idle (with sync-back), and deletes refused and stale claims.
// Warm members are the warm pool controller's (pkg/controller/warmpool); a claim adopts one
// through warmMembers (adopt.go).
//
// Three queues. Claims are synced by claim (sync.go dispatches by phase). Admission is decided by
// namespace: an admission pass (admit.go) runs admission.Decide over all of the namespace's claims
// in the cache, once the cache shows this controller's own writes (expectations.go), and writes
// the decisions of the undecided (Pending or Queued) claims; whenever a slot may have freed (a
// claim deleted, a claim leaving Binding/Bound, a Reaping claim's pods gone) the namespace is
// decided again. Sync-back turns are taken by namespace too (syncturns.go): one Job at a time into
// a target, oldest claim first.
//
// Workspaces. What a workspace is (its directory, the rules on it, the sync-back Job, the record
// of a kept workspace) is pkg/workspace's. This controller writes every change of a claim's
// status that concerns it: the sync-back turns and attempts (syncback.go, syncturns.go,
// workspace.go), keeping a saved workspace (a record, kept.go) and taking a kept one when a claim
// resumes it (read fresh from the API server only when the Job cache shows the record or this
// controller wrote it a moment ago: a new claim's pod waits for no API read). Collecting kept workspaces is another controller's, pkg/controller/workspacegc: the
// two meet through the records and the claims only.
package claim

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	batchinformers "k8s.io/client-go/informers/batch/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	networkinginformers "k8s.io/client-go/informers/networking/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	batchlisters "k8s.io/client-go/listers/batch/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	networkinglisters "k8s.io/client-go/listers/networking/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/airlock-dev/airlock/pkg/admission"
	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/controller/evidence"
	"github.com/airlock-dev/airlock/pkg/controller/expectations"
	"github.com/airlock-dev/airlock/pkg/controller/handlers"
	"github.com/airlock-dev/airlock/pkg/controller/warmpool"
	"github.com/airlock-dev/airlock/pkg/controller/workers"
	airlockclientset "github.com/airlock-dev/airlock/pkg/generated/clientset/versioned"
	airlockscheme "github.com/airlock-dev/airlock/pkg/generated/clientset/versioned/scheme"
	airlockinformers "github.com/airlock-dev/airlock/pkg/generated/informers/externalversions/airlock/v1alpha1"
	airlocklisters "github.com/airlock-dev/airlock/pkg/generated/listers/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
)

// ControllerName is the queue's name, the events' component and the field manager of every write.
const ControllerName = "airlock-claim-controller"

// FieldManager names the controller's writes.
const FieldManager = ControllerName

// LabelClaim is on every child of a claim and on the claim's sandbox pods; the operator's
// informers for children are filtered on it.
const LabelClaim = airlockv1alpha1.LabelClaim

// Controller is the SandboxClaim controller.
type Controller struct {
	// eventClient is the events' sink (a rate limiter of its own); every other API call goes
	// through claims and children.
	eventClient kubernetes.Interface
	claims      claimControl
	children    childControls
	// legacyDeployments removes the Deployments an earlier version built (children.go).
	legacyDeployments legacyDeploymentControl
	podEvents         podEvents
	// lostPods reads the Nodes of pods that cannot run and releases dead ones (nodeloss.go).
	lostPods lostPodControl
	// defaultDeny puts the namespace's standing default-deny NetworkPolicy in place before a
	// pod is created; nil creates no pod (fail closed).
	defaultDeny DefaultDenyEnsurer
	// statusWrites are the claims whose status this controller wrote and the cache has not shown
	// since (statuswrites.go).
	statusWrites *statusWrites
	// podsChecked are the terminated sandbox pods whose events said no eviction (looked up once).
	podsChecked sync.Map
	// warm finds the warm members a claim may adopt (adopt.go).
	warm warmMembers
	// adopting are the warm members (by pod UID) this process adopted or is adopting, so that two
	// workers never try one member (adopt.go); forgotten when the pod is deleted.
	adopting sync.Map

	claimLister    airlocklisters.SandboxClaimLister
	claimsSynced   cache.InformerSynced
	runtimeLister  airlocklisters.AgentRuntimeLister
	runtimesSynced cache.InformerSynced
	registryLister airlocklisters.ToolRegistryLister
	registriesSync cache.InformerSynced
	classLister    airlocklisters.SandboxClassLister
	classesSynced  cache.InformerSynced

	networkPolicyLister networkinglisters.NetworkPolicyLister
	networkPolicySynced cache.InformerSynced
	jobLister           batchlisters.JobLister
	jobsSynced          cache.InformerSynced
	podLister           corelisters.PodLister
	podsSynced          cache.InformerSynced

	// allowedServiceLister reads the Services that claims' records allow (a cluster-wide,
	// stripped cache: StripService); claimIndexer finds the claims that allow one.
	allowedServiceLister  corelisters.ServiceLister
	allowedServicesSynced cache.InformerSynced
	claimIndexer          cache.Indexer

	// handlers are the event handlers the controller added to shared informers, removed when Run
	// returns.
	handlers handlers.Registrations

	queue workqueue.TypedRateLimitingInterface[cache.ObjectName]
	// admitQueue holds the namespaces that have undecided claims: one admission pass per
	// namespace at a time (admitNamespace).
	admitQueue workqueue.TypedRateLimitingInterface[string]
	// expectations are the claim writes (and, after a failover, the claims) the cache must show
	// before a namespace is decided; childExpect the children it must show before a claim's
	// sync writes them again.
	expectations *claimExpectations
	childExpect  *childExpectations
	// builds are the children builds of admission passes in flight; Run waits for them.
	builds sync.WaitGroup
	// fenced is set once the term's fence is raised (fence.go).
	fenced  atomic.Bool
	fenceMu sync.Mutex

	broadcaster record.EventBroadcaster
	recorder    record.EventRecorder
	clock       clock.WithTicker

	// turnQueue holds the namespaces whose claims asked for their sync-back turn (turns): one turn
	// pass per namespace at a time (syncturns.go); syncJobs are the Jobs the passes created that
	// the cache may not show yet (workspace.go).
	turnQueue workqueue.TypedRateLimitingInterface[string]
	turns     turnRequests
	syncJobs  *syncJobsStarted

	// keptRecords reads a kept workspace's record fresh from the API server (kept.go).
	keptRecords jobReader
	// keptWritten holds the records (by namespace and name) this controller wrote that the Job
	// cache may not show yet: a claim's take reads the API server only for a record the cache
	// shows or one of these (kept.go, mayHaveKeptRecord).
	keptWritten *expectations.Store[cache.ObjectName, struct{}]
	// resumedBy are the resume labels (map[string]string) of the claims (by UID) that took a
	// record, for a pod made again after the take (its first create failed, or it ended).
	resumedBy sync.Map

	// syncImage is the image of sync-back Jobs (--sync-image).
	syncImage string

	// newToken returns a claim's bearer token (derived from the operator's key); a seam for tests.
	newToken func(ctx context.Context, claim *airlockv1alpha1.SandboxClaim) (string, error)
	// newProxyCredential returns a claim's egress proxy credential; a seam for tests.
	newProxyCredential func(ctx context.Context, claim *airlockv1alpha1.SandboxClaim) (string, error)
	// stops is the operator's stop of Reaping claims' pods (stop.go); nil: off.
	stops *stops
	// records is the session record's side of a claim's end (records.go); nil: none.
	records SessionRecords
	// evidence reads sandboxes' isolation evidence before Bound (isolation.go); nil: off, with
	// stops.
	evidence *evidence.Reads
	// signingKey is the key of the isolation statements; a seam for tests.
	signingKey signingKeyOf
	// newAdoptionToken returns the token that adopts member for the claim with record's tools;
	// memberEvidenceKey the key that seals members' evidence records. Seams for tests.
	newAdoptionToken  func(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, member string, record *airlockv1alpha1.FrozenSandbox) (string, error)
	memberEvidenceKey func(ctx context.Context) ([]byte, error)
	// egressGateway is the operator's egress gateway (--egress-gateway-service); nil: a class
	// with egress is refused (SetEgressGateway).
	egressGateway *sandboxpod.GatewayRef
	// decide is admission.Decide; a seam for tests.
	decide func(admission.Input) map[string]admission.Decision
	// syncHandler is sync; a seam for tests of the worker loop.
	syncHandler func(ctx context.Context, key cache.ObjectName) (*time.Duration, error)
	// tracer exports sync-back spans (SetTracerProvider; nil: none).
	tracer trace.Tracer
}

// Informers are the informers the controller reads. The kube informers must be filtered on the
// LabelClaim label (the operator caches only the claims' children). There is no Secret informer:
// the operator may create Secrets outside its namespace but not read them (docs/decisions.md,
// "Least privilege").
type Informers struct {
	Claims          airlockinformers.SandboxClaimInformer
	Runtimes        airlockinformers.AgentRuntimeInformer
	Registries      airlockinformers.ToolRegistryInformer
	Classes         airlockinformers.SandboxClassInformer
	NetworkPolicies networkinginformers.NetworkPolicyInformer
	Jobs            batchinformers.JobInformer
	Pods            coreinformers.PodInformer
	// AllowedServices is an informer of every Service, not filtered on LabelClaim, whose objects
	// should be stripped with StripService: the Services that claims' records allow are read
	// from it.
	AllowedServices coreinformers.ServiceInformer
}

// DefaultDenyEnsurer puts a namespace's standing default-deny NetworkPolicy in place
// (*defaultdeny.Controller is one): asked before every sandbox pod is created.
type DefaultDenyEnsurer interface {
	Ensure(ctx context.Context, namespace string) error
}

// TokenSource derives a claim's bearer token; *claimtoken.Source is one.
type TokenSource interface {
	Token(ctx context.Context, uid types.UID, namespace, name string) (string, error)
	// ProxyCredential derives a claim's egress proxy credential (claimtoken.DeriveProxy).
	ProxyCredential(ctx context.Context, uid types.UID, namespace, name string) (string, error)
	// AdoptionToken derives the token that adopts a warm member for a claim
	// (claimtoken.AdoptionToken), whose hash a warm claim's isolation statement carries.
	AdoptionToken(ctx context.Context, namespace, member string, claimUID types.UID, tools []string) (string, error)
	// MemberEvidenceKey derives the key that seals warm members' evidence records
	// (claimtoken.MemberEvidenceKey).
	MemberEvidenceKey(ctx context.Context) ([]byte, error)
}

// SigningKeys gives the key that signs isolation statements now; *isolationkey.Keys is one (the
// Secret airlock-isolation-signing-key, rotated by its controller).
type SigningKeys interface {
	SigningKey(ctx context.Context) (ed25519.PrivateKey, error)
}

// NewController returns a SandboxClaim controller on the given informers. Events are recorded
// with eventClient (nil: kubeClient). tokens derives the token written into each claim's Secret;
// keys sign the isolation statements.
func NewController(ctx context.Context, kubeClient, eventClient kubernetes.Interface, airlockClient airlockclientset.Interface, informers Informers, syncImage string, tokens TokenSource, keys SigningKeys, defaultDeny DefaultDenyEnsurer) (*Controller, error) {
	c, err := newControllerWithClock(ctx, kubeClient, airlockClient, informers, syncImage, clock.RealClock{})
	if err != nil {
		return nil, err
	}
	c.defaultDeny = defaultDeny
	if eventClient != nil {
		c.eventClient = eventClient
	}
	c.newToken = func(ctx context.Context, claim *airlockv1alpha1.SandboxClaim) (string, error) {
		return tokens.Token(ctx, claim.UID, claim.Namespace, claim.Name)
	}
	c.newProxyCredential = func(ctx context.Context, claim *airlockv1alpha1.SandboxClaim) (string, error) {
		return tokens.ProxyCredential(ctx, claim.UID, claim.Namespace, claim.Name)
	}
	c.signingKey = keys.SigningKey
	c.newAdoptionToken = func(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, member string, record *airlockv1alpha1.FrozenSandbox) (string, error) {
		return tokens.AdoptionToken(ctx, claim.Namespace, member, claim.UID, adoptionTools(record))
	}
	c.memberEvidenceKey = tokens.MemberEvidenceKey
	return c, nil
}

// SetEgressGateway names the egress gateway that claims of classes with egress are frozen with
// (docs/egress.md); without one such claims are Failed (EgressUnavailable). Call before Run.
func (c *Controller) SetEgressGateway(ref *sandboxpod.GatewayRef) { c.egressGateway = ref }

func newControllerWithClock(ctx context.Context, kubeClient kubernetes.Interface, airlockClient airlockclientset.Interface, informers Informers, syncImage string, clk clock.WithTicker) (*Controller, error) {
	logger := klog.FromContext(ctx)
	broadcaster, recorder := newEventRecorder(ctx)
	ratelimiter := workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[cache.ObjectName](5*time.Millisecond, 1000*time.Second),
		&workqueue.TypedBucketRateLimiter[cache.ObjectName]{Limiter: rate.NewLimiter(rate.Limit(50), 300)},
	)
	c := &Controller{
		eventClient:         kubeClient,
		claims:              realClaimControl{client: airlockClient},
		children:            realChildControls(kubeClient),
		legacyDeployments:   realLegacyDeployments{client: kubeClient},
		podEvents:           realPodEvents{client: kubeClient},
		lostPods:            realLostPodControl{client: kubeClient},
		claimLister:         informers.Claims.Lister(),
		claimsSynced:        informers.Claims.Informer().HasSynced,
		runtimeLister:       informers.Runtimes.Lister(),
		runtimesSynced:      informers.Runtimes.Informer().HasSynced,
		registryLister:      informers.Registries.Lister(),
		registriesSync:      informers.Registries.Informer().HasSynced,
		classLister:         informers.Classes.Lister(),
		classesSynced:       informers.Classes.Informer().HasSynced,
		networkPolicyLister: informers.NetworkPolicies.Lister(),
		networkPolicySynced: informers.NetworkPolicies.Informer().HasSynced,
		jobLister:           informers.Jobs.Lister(),
		jobsSynced:          informers.Jobs.Informer().HasSynced,
		podLister:           informers.Pods.Lister(),
		podsSynced:          informers.Pods.Informer().HasSynced,
		warm:                warmpool.Members{Pods: informers.Pods.Lister()},

		allowedServiceLister:  informers.AllowedServices.Lister(),
		allowedServicesSynced: informers.AllowedServices.Informer().HasSynced,
		claimIndexer:          informers.Claims.Informer().GetIndexer(),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(ratelimiter, workqueue.TypedRateLimitingQueueConfig[cache.ObjectName]{
			Name:  ControllerName,
			Clock: clk,
		}),
		admitQueue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](5*time.Millisecond, 10*time.Second),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: ControllerName + "-admission", Clock: clk}),
		turnQueue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](5*time.Millisecond, 10*time.Second),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: ControllerName + "-sync-turns", Clock: clk}),
		keptRecords:  realJobReader{client: kubeClient},
		keptWritten:  expectations.New[cache.ObjectName, struct{}](logger, ControllerName, "kept-record", expectationsTimeout, clk),
		expectations: newClaimExpectations(logger, clk),
		childExpect:  newChildExpectations(logger, clk),
		statusWrites: newStatusWrites(logger, clk),
		syncJobs:     newSyncJobsStarted(logger, clk),
		broadcaster:  broadcaster,
		recorder:     recorder,
		clock:        clk,
		syncImage:    syncImage,
		newToken: func(context.Context, *airlockv1alpha1.SandboxClaim) (string, error) {
			return "", errors.New("no token source") // NewController sets it: fail closed
		},
		newProxyCredential: func(context.Context, *airlockv1alpha1.SandboxClaim) (string, error) {
			return "", errors.New("no token source")
		},
		newAdoptionToken: func(context.Context, *airlockv1alpha1.SandboxClaim, string, *airlockv1alpha1.FrozenSandbox) (string, error) {
			return "", errors.New("no token source")
		},
		memberEvidenceKey: func(context.Context) ([]byte, error) {
			return nil, errors.New("no token source")
		},
		decide: admission.Decide,
	}
	c.syncHandler = c.sync

	if err := c.addEventHandlers(logger, informers); err != nil {
		return nil, err
	}
	registerMetrics(c.claimLister)
	return c, nil
}

// newEventRecorder returns the broadcaster and recorder of the controller's events. Events
// reference claims: the scheme must know the airlock kinds. A scheme of its own: adding them to
// client-go's global scheme here raced with the lease renewals that decode with it (the controller
// is built once the lease is held): "concurrent map read and map write".
func newEventRecorder(ctx context.Context) (record.EventBroadcaster, record.EventRecorder) {
	eventScheme := runtime.NewScheme()
	utilruntime.Must(scheme.AddToScheme(eventScheme))
	utilruntime.Must(airlockscheme.AddToScheme(eventScheme))
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	return broadcaster, broadcaster.NewRecorder(eventScheme, corev1.EventSource{Component: ControllerName})
}

// Run starts the event broadcaster and workers, and blocks until ctx is done and every worker
// has returned, so that the lease is released only after the controller has stopped.
func (c *Controller) Run(ctx context.Context, workers int) error {
	defer utilruntime.HandleCrashWithContext(ctx)
	defer c.handlers.RemoveAll()

	c.broadcaster.StartStructuredLogging(3)
	c.broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: c.eventClient.CoreV1().Events("")})
	defer c.broadcaster.Shutdown()
	defer c.queue.ShutDown()
	defer c.admitQueue.ShutDown()
	defer c.turnQueue.ShutDown()

	logger := klog.FromContext(ctx)
	logger.Info("Starting controller", "controller", ControllerName, "workers", workers)
	defer logger.Info("Shutting down controller", "controller", ControllerName)

	if !cache.WaitForNamedCacheSyncWithContext(ctx, c.claimsSynced, c.runtimesSynced, c.registriesSync, c.classesSynced,
		c.networkPolicySynced, c.jobsSynced, c.podsSynced,
		c.allowedServicesSynced) {
		return fmt.Errorf("waiting for the informer caches to sync: %w", ctx.Err())
	}

	var wg wait.Group
	for range workers {
		wg.StartWithContext(ctx, func(ctx context.Context) {
			wait.UntilWithContext(ctx, c.runWorker, time.Second)
		})
		wg.StartWithContext(ctx, func(ctx context.Context) {
			wait.UntilWithContext(ctx, c.runAdmissionWorker, time.Second)
		})
		wg.StartWithContext(ctx, func(ctx context.Context) {
			wait.UntilWithContext(ctx, c.runSyncTurnWorker, time.Second)
		})
	}
	<-ctx.Done()
	c.queue.ShutDown()
	c.admitQueue.ShutDown()
	c.turnQueue.ShutDown()
	wg.Wait()
	c.builds.Wait()
	c.waitForStops()
	c.waitForReads()
	return nil
}

func (c *Controller) runWorker(ctx context.Context) {
	for c.processNextWorkItem(ctx) {
	}
}

func (c *Controller) processNextWorkItem(ctx context.Context) bool {
	key, shutdown := c.queue.Get()
	if shutdown {
		return false
	}
	defer c.queue.Done(key)

	requeueAfter, err := c.syncHandler(ctx, key)
	if err != nil && requeueAfter != nil {
		// A deadline that must be kept whatever the backoff (a Binding claim's startupTimeout):
		// looked at again then, and retried with backoff before.
		c.queue.AddAfter(key, *requeueAfter)
	}
	switch {
	case workers.NamespaceTerminating(err):
		// Its namespace is being deleted: the namespace controller deletes the claim, whose
		// deletion brings it back (what it would write cannot be created any more).
		klog.FromContext(ctx).V(2).Info("Not retrying the claim: its write went to a namespace being deleted", "claim", klog.KRef(key.Namespace, key.Name), "err", err)
		c.queue.Forget(key)
	case apierrors.IsConflict(err):
		// A write raced with the cache (the claim changed since it was read): normal, retried.
		klog.FromContext(ctx).V(4).Info("Conflict syncing claim; retrying", "claim", klog.KRef(key.Namespace, key.Name), "err", err)
		c.queue.AddRateLimited(key)
	case err != nil:
		utilruntime.HandleErrorWithContext(ctx, err, "Error syncing claim", "claim", klog.KRef(key.Namespace, key.Name))
		c.queue.AddRateLimited(key)
	case requeueAfter != nil:
		c.queue.Forget(key)
		c.queue.AddAfter(key, *requeueAfter)
	default:
		c.queue.Forget(key)
	}
	return true
}

func (c *Controller) runAdmissionWorker(ctx context.Context) {
	for c.processNextAdmission(ctx) {
	}
}

func (c *Controller) processNextAdmission(ctx context.Context) bool {
	namespace, shutdown := c.admitQueue.Get()
	if shutdown {
		return false
	}
	defer c.admitQueue.Done(namespace)
	err := c.admitNamespace(ctx, namespace)
	switch {
	case apierrors.IsConflict(err):
		klog.FromContext(ctx).V(4).Info("Conflict deciding a namespace; deciding it again", "namespace", namespace, "err", err)
		c.admitQueue.AddRateLimited(namespace)
	case err != nil:
		utilruntime.HandleErrorWithContext(ctx, err, "Error deciding the namespace's claims", "namespace", namespace)
		c.admitQueue.AddRateLimited(namespace)
	default:
		c.admitQueue.Forget(namespace)
	}
	return true
}
