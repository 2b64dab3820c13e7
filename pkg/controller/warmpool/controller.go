// Package warmpool is the warm pool controller (issue 14; docs/decisions.md, "Warm pools"): for every ToolRegistry
// sandbox with warm: N, it keeps N members Ready and idle in the registry's namespace, built
// from the entry's record as a claim of it would be; for one with a warmPolicy, as many as its
// claims' arrival rate and its members' ready time ask for, within the policy's bounds
// (demand.go; docs/decisions.md, "Warm pools that follow demand"). It replaces idle members that are stale
// (the class or the entry changed), ended, or cannot start. It writes through a client of its
// own and creates members at a bounded rate, so that refills never take the claim
// controller's turn at the API server. It writes the registry's status: the pools' counts, and
// whether each of its sandboxes can be built now (readiness.go). When the operator reads
// isolation evidence, it reads each member's once, at its readiness, and seals what it read onto
// the member, which is adoptable only then (evidence.go). For a workspace kept within the entry's
// resumeWindow it also keeps a resume member: a member of the pool whose workspace is that kept
// directory, for the one claim that would resume it (resume.go). Adoption is the claim
// controller's (pkg/controller/claim, adopt.go), which finds a pool's idle and resume members
// through Members.
package warmpool

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
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

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/controller/evidence"
	"github.com/airlock-dev/airlock/pkg/controller/handlers"
	"github.com/airlock-dev/airlock/pkg/controller/objectcontrol"
	"github.com/airlock-dev/airlock/pkg/controller/workers"
	airlockclientset "github.com/airlock-dev/airlock/pkg/generated/clientset/versioned"
	airlockscheme "github.com/airlock-dev/airlock/pkg/generated/clientset/versioned/scheme"
	airlockinformers "github.com/airlock-dev/airlock/pkg/generated/informers/externalversions/airlock/v1alpha1"
	airlocklisters "github.com/airlock-dev/airlock/pkg/generated/listers/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
)

// ControllerName is the pool controller's queue name and the field manager of its writes.
const ControllerName = "airlock-warmpool-controller"

// Messages of a pool that cannot be built.
const (
	messageClassNotFound  = "SandboxClass %q not found"
	messageResourceExists = "%s %q already exists and is not controlled by the registry"
	// messageRecordNotOnStatus: the pool's members wait for its record on the registry's status
	// (the admission policy airlock-operator-warm-record reads it there). Normally for one
	// status write; for good when an older CRD prunes the field.
	messageRecordNotOnStatus = "waiting for the pool's key and record on the registry's status (status.warm[].key, .record) before its members: if this stays, the ToolRegistry CRD is older than the operator (apply manifests/crd)"
)

const (
	// DefaultRefillRate is how many members the pool controller creates per second, at most,
	// across all pools (--warm-refill-rate).
	DefaultRefillRate = 5
	// poolStatusInterval is the least time between two status writes of one registry: its
	// ready count moves with every adoption, and the status must not cost a write per claim.
	poolStatusInterval = time.Second
	// memberCreateExpiry is how long a member created and not yet in the cache counts as
	// starting (as kube-controller-manager's expectations expire).
	memberCreateExpiry = time.Minute
)

// MemberKeys derives warm members' keys, in the text form their Secrets hold, their evidence
// tokens, and the key that seals what was read of them; claimtoken.Source is one (through an
// adapter in pkg/operator).
type MemberKeys interface {
	EncodedMemberKey(ctx context.Context, namespace, member string) (string, error)
	// EvidenceToken is the member's evidence token (claimtoken.EvidenceToken): it reads the
	// member's GET /isolation and adopts nothing.
	EvidenceToken(ctx context.Context, namespace, member string) (string, error)
	// MemberEvidenceKey seals members' evidence records (claimtoken.MemberEvidenceKey).
	MemberEvidenceKey(ctx context.Context) ([]byte, error)
	// MemberProxyCredential is the egress proxy credential of the member pod with uid
	// (claimtoken.DeriveMemberProxy of the proxy key), written into the key Secret of a member
	// of a class with egress.
	MemberProxyCredential(ctx context.Context, uid types.UID, namespace, member string) (string, error)
}

// Informers are the informers the pool controller reads; Pods and NetworkPolicies are the
// claim controller's (filtered on LabelClaim: members carry it, empty). Claims and Runtimes
// give the arrivals that pools with a warmPolicy follow.
type Informers struct {
	Registries      airlockinformers.ToolRegistryInformer
	Classes         airlockinformers.SandboxClassInformer
	Claims          airlockinformers.SandboxClaimInformer
	Runtimes        airlockinformers.AgentRuntimeInformer
	Pods            coreinformers.PodInformer
	NetworkPolicies networkinginformers.NetworkPolicyInformer
	AllowedServices coreinformers.ServiceInformer
	// Jobs are the claim controller's (filtered on LabelClaim): kept workspaces' records, which
	// resume members wait on (resume.go).
	Jobs batchinformers.JobInformer
}

// Controller keeps the warm pools of every ToolRegistry.
type Controller struct {
	registries poolRegistryControl
	pods       objectcontrol.Interface[*corev1.Pod]
	secrets    objectcontrol.Interface[*corev1.Secret]
	policies   objectcontrol.Interface[*networkingv1.NetworkPolicy]
	// records writes kept workspaces' records: only the annotation that names a record's resume
	// member (resume.go), an update conditional on the record's resourceVersion.
	records objectcontrol.Interface[*batchv1.Job]
	// defaultDeny puts the namespace's standing default-deny policy in place before the first
	// member; nil creates no member (fail closed).
	defaultDeny DefaultDenyEnsurer
	keys        MemberKeys
	// limiter bounds member creations: at baseRefill a second, or at the claims' measured arrival
	// rate of the pools that follow demand, whichever is faster (refillLimit).
	limiter    *rate.Limiter
	baseRefill float64
	// demandRates are, by registry, the measured claims a second of its pools with a warmPolicy;
	// only the worker touches it.
	demandRates map[cache.ObjectName]float64
	clock       clock.WithTicker
	handlers    handlers.Registrations
	queue       workqueue.TypedRateLimitingInterface[cache.ObjectName]
	synced      []cache.InformerSynced
	lastStatus  sync.Map // cache.ObjectName -> time.Time of the last status write
	created     *memberExpectations
	keysWritten sync.Map // member pod UID -> struct{}: its key Secret was created by this process
	// demand is what pools with a warmPolicy are sized from (demand.go).
	demand *demand
	// egressGateway is the operator's egress gateway (--egress-gateway-service), which members
	// of a class with egress are built with as a claim's record is frozen with it; nil: such a
	// class gets no member (SetEgressGateway). Atomic: the Service handler reads it.
	egressGateway atomic.Pointer[sandboxpod.GatewayRef]
	// evidence reads members' isolation evidence (evidence.go); nil: off.
	evidence *readsState
	// members annotates members; nodes reads a member's Node (with its evidence).
	members memberControl
	nodes   evidence.NodeGetter
	// recorder records the events of registries (a member deleted for its evidence);
	// eventClient is where they go.
	broadcaster   record.EventBroadcaster
	recorder      record.EventRecorder
	eventClient   kubernetes.Interface
	registryList  airlocklisters.ToolRegistryLister
	runtimeLister airlocklisters.AgentRuntimeLister
	classLister   airlocklisters.SandboxClassLister
	podLister     corelisters.PodLister
	npLister      networkinglisters.NetworkPolicyLister
	svcLister     corelisters.ServiceLister
	jobLister     batchlisters.JobLister
	claimLister   airlocklisters.SandboxClaimLister
}

// NewController returns a pool controller writing with kubeClient and airlockClient (the
// operator gives it clients of its own), creating at most refillRate members per second.
func NewController(ctx context.Context, kubeClient kubernetes.Interface, airlockClient airlockclientset.Interface, informers Informers, keys MemberKeys, refillRate float64, defaultDeny DefaultDenyEnsurer) (*Controller, error) {
	c, err := newController(ctx, kubeClient, airlockClient, informers, keys, refillRate, clock.RealClock{})
	if err != nil {
		return nil, err
	}
	c.defaultDeny = defaultDeny
	return c, nil
}

// SetEgressGateway names the egress gateway that the members of classes with egress are built
// with (docs/egress.md, "Warm members of a class with egress"): the claim controller's
// (claim.Controller.SetEgressGateway), so that a claim's record, frozen with it, gives the pool key
// of those members. Without one, such a class keeps no member. Call before Run.
func (c *Controller) SetEgressGateway(ref *sandboxpod.GatewayRef) { c.egressGateway.Store(ref) }

// DefaultDenyEnsurer puts a namespace's standing default-deny NetworkPolicy in place
// (*defaultdeny.Ensurer is one): asked before a pool's members are created.
type DefaultDenyEnsurer interface {
	Ensure(ctx context.Context, namespace string) error
}

func newController(ctx context.Context, kubeClient kubernetes.Interface, airlockClient airlockclientset.Interface, informers Informers, keys MemberKeys, refillRate float64, clk clock.WithTicker) (*Controller, error) {
	if refillRate <= 0 {
		return nil, fmt.Errorf("the warm refill rate must be > 0, got %v", refillRate)
	}
	c := &Controller{
		registries:  realPoolRegistryControl{client: airlockClient},
		pods:        objectcontrol.Pods(kubeClient, ControllerName),
		secrets:     objectcontrol.Secrets(kubeClient, ControllerName),
		policies:    objectcontrol.NetworkPolicies(kubeClient, ControllerName),
		records:     objectcontrol.Jobs(kubeClient, ControllerName),
		keys:        keys,
		limiter:     rate.NewLimiter(rate.Limit(refillRate), max(1, int(refillRate))),
		baseRefill:  refillRate,
		demandRates: map[cache.ObjectName]float64{},
		clock:       clk,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[cache.ObjectName](50*time.Millisecond, 5*time.Minute),
			workqueue.TypedRateLimitingQueueConfig[cache.ObjectName]{Name: ControllerName, Clock: clk}),
		created: newMemberExpectations(klog.FromContext(ctx), clk),
		members: realMemberControl{client: kubeClient},
		nodes: func(ctx context.Context, name string) (*corev1.Node, error) {
			return kubeClient.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		},
		eventClient:   kubeClient,
		demand:        newDemand(),
		registryList:  informers.Registries.Lister(),
		runtimeLister: informers.Runtimes.Lister(),
		classLister:   informers.Classes.Lister(),
		podLister:     informers.Pods.Lister(),
		npLister:      informers.NetworkPolicies.Lister(),
		svcLister:     informers.AllowedServices.Lister(),
		jobLister:     informers.Jobs.Lister(),
		claimLister:   informers.Claims.Lister(),
		synced: []cache.InformerSynced{
			informers.Jobs.Informer().HasSynced,
			informers.Registries.Informer().HasSynced, informers.Classes.Informer().HasSynced,
			informers.Pods.Informer().HasSynced, informers.NetworkPolicies.Informer().HasSynced,
			informers.AllowedServices.Informer().HasSynced,
			informers.Claims.Informer().HasSynced, informers.Runtimes.Informer().HasSynced,
		},
	}
	c.broadcaster, c.recorder = newEventRecorder(ctx)
	if err := c.addEventHandlers(informers); err != nil {
		return nil, err
	}
	registerMetrics()
	klog.FromContext(ctx).V(4).Info("Built the warm pool controller", "refillRate", refillRate)
	return c, nil
}

// onChange calls f on an object's add and delete, and on an update when changed(old, cur).
func onChange(f func(obj any), changed func(old, cur metav1.Object) bool) cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: f,
		UpdateFunc: func(old, cur any) {
			if changed(old.(metav1.Object), cur.(metav1.Object)) {
				f(cur)
			}
		},
		DeleteFunc: f,
	}
}

func generationChanged(old, cur metav1.Object) bool {
	return old.GetGeneration() != cur.GetGeneration()
}

// registryChanged: the registry's spec, or the pool records on its status (members wait for
// their pool's record there: recordOnStatus).
func registryChanged(old, cur metav1.Object) bool {
	if generationChanged(old, cur) {
		return true
	}
	o, c := old.(*airlockv1alpha1.ToolRegistry), cur.(*airlockv1alpha1.ToolRegistry)
	if len(o.Status.Warm) != len(c.Status.Warm) {
		return true
	}
	for i := range o.Status.Warm {
		ow, cw := &o.Status.Warm[i], &c.Status.Warm[i]
		if ow.Name != cw.Name || ow.Key != cw.Key || !apiequality.Semantic.DeepEqual(ow.Record, cw.Record) {
			return true
		}
	}
	return false
}

func resourceVersionChanged(old, cur metav1.Object) bool {
	return old.GetResourceVersion() != cur.GetResourceVersion()
}

// addEventHandlers: registries and classes by generation, members (pods, policies) by
// resourceVersion, with the pods' ready times and keys, and claims' arrivals.
func (c *Controller) addEventHandlers(informers Informers) error {
	if err := c.handlers.Add(informers.Registries.Informer(), onChange(c.enqueue, registryChanged)); err != nil {
		return fmt.Errorf("adding the registry event handler: %w", err)
	}
	if err := c.handlers.Add(informers.Classes.Informer(), onChange(c.enqueueClassUsers, generationChanged)); err != nil {
		return fmt.Errorf("adding the class event handler: %w", err)
	}
	member := onChange(c.enqueueOwner, resourceVersionChanged)
	podHandler := member
	podHandler.AddFunc = func(obj any) {
		c.memberSeen(obj, false)
		c.enqueueOwner(obj)
	}
	podHandler.UpdateFunc = func(old, cur any) {
		if old.(metav1.Object).GetResourceVersion() != cur.(metav1.Object).GetResourceVersion() {
			c.memberSeen(cur, false)
			c.enqueueOwner(cur)
		}
	}
	podHandler.DeleteFunc = func(obj any) {
		if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tombstone.Obj
		}
		if pod, ok := obj.(*corev1.Pod); ok {
			c.keysWritten.Delete(pod.UID) // an adopted member is deleted by its claim, not here
			c.forgetRead(pod.UID)
		}
		c.memberSeen(obj, true)
		c.enqueueOwner(obj)
	}
	if err := c.handlers.Add(informers.Pods.Informer(), podHandler); err != nil {
		return fmt.Errorf("adding the pod event handler: %w", err)
	}
	if err := c.handlers.Add(informers.NetworkPolicies.Informer(), member); err != nil {
		return fmt.Errorf("adding the networkpolicy event handler: %w", err)
	}
	// The egress gateway's Service: its address and selector are in the records of the members
	// of classes with egress (their pool key), so its every change rebuilds those pools.
	if err := c.handlers.Add(informers.AllowedServices.Informer(), onChange(c.gatewayChanged, resourceVersionChanged)); err != nil {
		return fmt.Errorf("adding the egress gateway Service event handler: %w", err)
	}
	// Arrivals: a claim's Add only (its creation); nothing else of a claim sizes a pool. Its
	// deletion may let a resume member start on the workspace it kept (resume.go).
	if err := c.handlers.Add(informers.Claims.Informer(), cache.ResourceEventHandlerFuncs{AddFunc: c.addClaim, DeleteFunc: c.enqueueRegistriesOf}); err != nil {
		return fmt.Errorf("adding the claim event handler: %w", err)
	}
	// Kept workspaces' records: one kept, taken, collected or annotated changes what resume
	// members its namespace's pools keep.
	if err := c.handlers.Add(informers.Jobs.Informer(), onChange(c.recordChanged, resourceVersionChanged)); err != nil {
		return fmt.Errorf("adding the kept workspace event handler: %w", err)
	}
	return nil
}

// enqueue adds a registry.
func (c *Controller) enqueue(obj any) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	if o, ok := obj.(metav1.Object); ok {
		c.queue.Add(cache.ObjectName{Namespace: o.GetNamespace(), Name: o.GetName()})
	}
}

// enqueueClassUsers adds every registry that has a sandbox of the class (its pools, and its
// sandboxes' readiness, follow the class).
func (c *Controller) enqueueClassUsers(obj any) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	class, ok := obj.(metav1.Object)
	if !ok {
		return
	}
	regs, err := c.registryList.List(labels.Everything())
	if err != nil {
		return
	}
	for _, reg := range regs {
		for _, e := range reg.Spec.Sandboxes {
			if e.Class == class.GetName() {
				c.enqueue(reg)
				break
			}
		}
	}
}

// gatewayChanged adds every registry with a sandbox of a class with egress when the Service is
// the egress gateway's.
func (c *Controller) gatewayChanged(obj any) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	svc, ok := obj.(metav1.Object)
	gw := c.egressGateway.Load()
	if !ok || gw == nil || svc.GetNamespace() != gw.Namespace || svc.GetName() != gw.Name {
		return
	}
	regs, err := c.registryList.List(labels.Everything())
	if err != nil {
		return
	}
	for _, reg := range regs {
		for _, e := range reg.Spec.Sandboxes {
			if class, err := c.classLister.Get(e.Class); err == nil && class.Spec.Egress != nil {
				c.enqueue(reg)
				break
			}
		}
	}
}

// enqueueOwner adds the registry of a pool object: the one its LabelWarmRegistry names (an
// adopted member keeps it, so that its deletion lets the pool's policy go).
func (c *Controller) enqueueOwner(obj any) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	o, ok := obj.(metav1.Object)
	if !ok {
		return
	}
	if reg := o.GetLabels()[airlockv1alpha1.LabelWarmRegistry]; reg != "" {
		if pod, ok := obj.(*corev1.Pod); ok {
			c.created.seen(pod.Namespace, pod.Name)
		}
		c.queue.Add(cache.ObjectName{Namespace: o.GetNamespace(), Name: reg})
	}
}

// memberSeen passes a member pod's event to the ready-time measurement (demand.memberSeen).
func (c *Controller) memberSeen(obj any, gone bool) {
	if pod, ok := obj.(*corev1.Pod); ok && pod.Labels[airlockv1alpha1.LabelWarmMember] != "" {
		c.demand.memberSeen(pod, gone, c.clock.Now())
	}
}

// Run runs the controller's worker until ctx is done.
func (c *Controller) Run(ctx context.Context) error {
	defer utilruntime.HandleCrashWithContext(ctx)
	defer c.handlers.RemoveAll()
	c.broadcaster.StartStructuredLogging(3)
	c.broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: c.eventClient.CoreV1().Events("")})
	defer c.broadcaster.Shutdown()
	defer c.waitForReads()
	defer c.queue.ShutDown()
	logger := klog.FromContext(ctx)
	logger.Info("Starting controller", "controller", ControllerName)
	defer logger.Info("Shutting down controller", "controller", ControllerName)
	if !cache.WaitForNamedCacheSyncWithContext(ctx, c.synced...) {
		return fmt.Errorf("waiting for the informer caches to sync: %w", ctx.Err())
	}
	// One worker: pools are filled one registry at a time, at the refill rate.
	workers.RunRequeue(ctx, 1, c.queue, "registry", c.sync)
	return nil
}

// newEventRecorder returns the broadcaster and recorder of the controller's events, which
// reference registries: a scheme of its own with the airlock kinds (as the claim controller's).
func newEventRecorder(ctx context.Context) (record.EventBroadcaster, record.EventRecorder) {
	eventScheme := runtime.NewScheme()
	utilruntime.Must(scheme.AddToScheme(eventScheme))
	utilruntime.Must(airlockscheme.AddToScheme(eventScheme))
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	return broadcaster, broadcaster.NewRecorder(eventScheme, corev1.EventSource{Component: ControllerName})
}
