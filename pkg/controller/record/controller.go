// Package record is the leader's side of the session record (docs/record.md §2): for each claim
// it keeps the claim's record, a hash chain signed with the operator's key (pkg/record), and
// stores it as SessionRecord segments in the claim's namespace (pkg/recordstore).
//
// What goes in: the claim's phases and reasons as the claim informer shows them (claim.phase
// entries, source operator); the egress gateway's decisions of a claim with egress, followed
// over each gateway pod's GET /decisions (pkg/gatewayrecord, gateway.go); and, for a claim whose pod runs sandboxd with the claim's own token,
// sandboxd's log, followed over GET /record (pkg/sandboxrecord) through the operator's ingress
// (the one POST /stop and the isolation evidence use), into a record.Collector: a cut stream or
// a new boot becomes a record.gap entry there.
//
// When it is stored: a batch of 256 entries, one second after the first entry not yet stored
// (an AddAfter), and at the seal: a claim that binds within a second costs one write. Each write
// is the last segment's Update, conditional on the resourceVersion this leader last wrote or
// read, and a new segment when it is full. A write that finds the segment changed by someone else
// (deleted, or created again) writes the record's own lines again and says so in a record.gap
// entry. The record is sealed (record.sealed, with the session's usage totals: pkg/usage) once
// the claim ended: gone, or Reaping, Refused or Failed with no pod left.
//
// A new leader resumes each record from its segments (the last one's anchor count and head, and
// the collector's cursor; every entry, for the last phase recorded and the usage so far), read
// once per claim and term from the API server; sandboxd kept its whole log, so it reads again
// from there.
//
// The controller runs on the leader only, keyed by the claim's namespace/name; its state per
// claim (by UID) lives in memory for the term, bounded per claim (maxPendingBytes of entries not
// yet stored, one segment).
package record

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	coreinformers "k8s.io/client-go/informers/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/claimtoken"
	"github.com/airlock-dev/airlock/pkg/controller/handlers"
	"github.com/airlock-dev/airlock/pkg/controller/workers"
	airlockclientset "github.com/airlock-dev/airlock/pkg/generated/clientset/versioned"
	airlockinformers "github.com/airlock-dev/airlock/pkg/generated/informers/externalversions/airlock/v1alpha1"
	airlocklisters "github.com/airlock-dev/airlock/pkg/generated/listers/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/record"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
	"github.com/airlock-dev/airlock/pkg/sandboxrecord"
)

// ControllerName is the queue's name and the field manager of the controller's writes.
const ControllerName = "airlock-record-controller"

// FieldManager names the controller's writes.
const FieldManager = ControllerName

const (
	// batchEntries is the batch that is stored at once; flushDelay how long the first entry not
	// yet stored waits for more, a phase's too (docs/record.md §2.5).
	batchEntries = 256
	flushDelay   = time.Second
	// maxPendingBytes bounds a claim's entries read but not yet stored (a stalled API server):
	// past it the controller stops reading sandboxd's log, which keeps everything, and reads on
	// from its cursor once the entries are stored (the bound of sandboxd's own log, §2.1).
	maxPendingBytes = 8 << 20
	// followRetry is how long a cut stream waits before it is read again.
	followRetry = time.Second
	// maxMessage bounds a phase's message in an entry.
	maxMessage = 1024
)

// Signer gives the record's signer (derived from the operator's token key, which may not be
// readable yet: then an error, and the claim is tried again).
type Signer interface {
	Signer(ctx context.Context) (*record.Signer, error)
}

// Tokens derives the tokens a claim's sandbox answers to: its bearer token, and the adoption
// token of the warm member it adopted (claimtoken.Source is one).
type Tokens = claimtoken.Deriver

// follower reads a sandbox's log (*sandboxrecord.Client is one).
type follower interface {
	Follow(ctx context.Context, base, token, boot string, after uint64, take func(line []byte) error) error
}

// Observer is told of each entry appended to a claim's record, in order, as it is appended
// (before it is stored). It is called with the claim's record locked: it must not block (the
// usage ledger and the trace export take entries from here). claim holds only the claim's
// namespace, name and UID when the claim is gone.
type Observer func(claim *airlockv1alpha1.SandboxClaim, e record.Entry)

// Controller keeps the session records of claims.
type Controller struct {
	records  recordControl
	tokens   Tokens
	signer   Signer
	follower follower
	// readSandboxes says whether the operator reaches sandboxes (its ingress, --operator-pod-labels).
	readSandboxes bool
	observers     []Observer

	claimLister  airlocklisters.SandboxClaimLister
	claimsSynced cache.InformerSynced
	podLister    corelisters.PodLister
	podsSynced   cache.InformerSynced
	// The egress gateway's decisions (gateway.go; SetGateway): nil gwPods, none read.
	gwPods          corelisters.PodLister
	gwPodsSynced    cache.InformerSynced
	decisions       decisionsFollower
	decisionsTokens DecisionsTokens

	handlers handlers.Registrations
	queue    workqueue.TypedRateLimitingInterface[cache.ObjectName]
	clock    clock.WithTicker

	mu       sync.Mutex
	sessions map[types.UID]*session
	byName   map[cache.ObjectName]types.UID
	// ctx is Run's: the followers' goroutines end with it; wg joins them.
	ctx context.Context
	wg  sync.WaitGroup
	// storeWaiters are the claim controller's waits for a claim's record to be stored (by the
	// claim's UID): WaitStored.
	storeWaiters map[types.UID][]chan struct{}
	// deleted are the claims seen deleted, by name, until their next sync: a claim this leader
	// never synced still has its record sealed (sync.go, endDeleted).
	deleted map[cache.ObjectName]*airlockv1alpha1.SandboxClaim
	// started is when Run began (this leader's term): a claim created before it with no stored
	// record may have lost a previous leader's entries (sync.go, unrecordedStart).
	started time.Time
}

// NewController returns the controller on the claims' informer and the operator's filtered pod
// informer. readSandboxes says whether the operator's pods may reach sandboxd (its ingress is in
// every claim's NetworkPolicy): without it only the operator's entries are recorded.
func NewController(airlockClient airlockclientset.Interface, claims airlockinformers.SandboxClaimInformer, pods coreinformers.PodInformer, tokens Tokens, signer Signer, readSandboxes bool) (*Controller, error) {
	return newControllerWithClock(realRecords{client: airlockClient}, claims, pods, tokens, signer, sandboxrecord.NewClient(), readSandboxes, clock.RealClock{})
}

func newControllerWithClock(records recordControl, claims airlockinformers.SandboxClaimInformer, pods coreinformers.PodInformer, tokens Tokens, signer Signer, f follower, readSandboxes bool, clk clock.WithTicker) (*Controller, error) {
	c := &Controller{
		records:       records,
		tokens:        tokens,
		signer:        signer,
		follower:      f,
		readSandboxes: readSandboxes,
		claimLister:   claims.Lister(),
		claimsSynced:  claims.Informer().HasSynced,
		podLister:     pods.Lister(),
		podsSynced:    pods.Informer().HasSynced,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[cache.ObjectName](5*time.Millisecond, time.Minute),
			workqueue.TypedRateLimitingQueueConfig[cache.ObjectName]{Name: ControllerName, Clock: clk}),
		clock:    clk,
		sessions: map[types.UID]*session{},
		byName:   map[cache.ObjectName]types.UID{},
		deleted:  map[cache.ObjectName]*airlockv1alpha1.SandboxClaim{},

		storeWaiters: map[types.UID][]chan struct{}{},
		ctx:          context.Background(),
	}
	if err := c.handlers.Add(claims.Informer(), cache.ResourceEventHandlerFuncs{
		AddFunc: c.enqueueClaim,
		UpdateFunc: func(old, cur any) {
			o, n := old.(*airlockv1alpha1.SandboxClaim), cur.(*airlockv1alpha1.SandboxClaim)
			if o.ResourceVersion != n.ResourceVersion {
				c.enqueueClaim(cur)
			}
		},
		DeleteFunc: c.claimDeleted,
	}); err != nil {
		return nil, err
	}
	if err := c.handlers.Add(pods.Informer(), cache.ResourceEventHandlerFuncs{
		AddFunc: c.enqueuePodOwner,
		UpdateFunc: func(old, cur any) {
			o, n := old.(*corev1.Pod), cur.(*corev1.Pod)
			if o.ResourceVersion != n.ResourceVersion {
				c.enqueuePodOwner(cur)
			}
		},
		DeleteFunc: c.enqueuePodOwner,
	}); err != nil {
		return nil, err
	}
	return c, nil
}

// AddObserver adds an observer of every entry appended (call before Run).
func (c *Controller) AddObserver(o Observer) { c.observers = append(c.observers, o) }

// Run runs n workers until ctx is done, then waits for them and for every follower.
func (c *Controller) Run(ctx context.Context, n int) error {
	defer utilruntime.HandleCrashWithContext(ctx)
	defer c.handlers.RemoveAll()
	defer c.queue.ShutDown()
	logger := klog.FromContext(ctx)
	logger.Info("Starting controller", "controller", ControllerName, "workers", n)
	defer logger.Info("Shutting down controller", "controller", ControllerName)
	c.mu.Lock()
	c.ctx, c.started = ctx, c.clock.Now()
	c.mu.Unlock()
	defer c.wg.Wait()
	synced := []cache.InformerSynced{c.claimsSynced, c.podsSynced}
	if c.gwPodsSynced != nil {
		synced = append(synced, c.gwPodsSynced)
	}
	if !cache.WaitForNamedCacheSyncWithContext(ctx, synced...) {
		return fmt.Errorf("waiting for the informer caches to sync: %w", ctx.Err())
	}
	// The key, before any claim needs it: its public half is published from here on (airlock-ca).
	if _, err := c.signer.Signer(ctx); err != nil {
		logger.Error(err, "No record signing key yet; every claim's record waits for it")
	}
	workers.RunRequeue(ctx, n, c.queue, "claim", c.sync)
	return nil
}

func (c *Controller) enqueueClaim(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	claim, ok := obj.(*airlockv1alpha1.SandboxClaim)
	if !ok {
		return
	}
	c.queue.Add(cache.MetaObjectToName(claim))
}

// claimDeleted notes the deleted claim (its last state) for its next sync, and enqueues it.
func (c *Controller) claimDeleted(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	claim, ok := obj.(*airlockv1alpha1.SandboxClaim)
	if !ok {
		return
	}
	key := cache.MetaObjectToName(claim)
	c.mu.Lock()
	c.deleted[key] = claim
	c.mu.Unlock()
	c.queue.Add(key)
}

// deletedClaim is the claim of key last seen deleted, nil when none.
func (c *Controller) deletedClaim(key cache.ObjectName) *airlockv1alpha1.SandboxClaim {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.deleted[key]
}

// clearDeleted forgets the deleted claim of key with uid (not a later one of its name).
func (c *Controller) clearDeleted(key cache.ObjectName, uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d := c.deleted[key]; d != nil && d.UID == uid {
		delete(c.deleted, key)
	}
}

// enqueuePodOwner enqueues the claim that controls a sandbox pod.
func (c *Controller) enqueuePodOwner(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	if ref := metav1.GetControllerOf(pod); ref != nil && ref.Kind == "SandboxClaim" {
		c.queue.Add(cache.ObjectName{Namespace: pod.Namespace, Name: ref.Name})
	}
}

// claimPods are the claim's own sandbox pods in the cache.
func (c *Controller) claimPods(claim *airlockv1alpha1.SandboxClaim) ([]*corev1.Pod, error) {
	selector := sandboxpod.PolicySelector(claim)
	if claim.Status.Frozen != nil {
		selector = sandboxpod.SelectorLabels(claim)
	}
	pods, err := c.podLister.Pods(claim.Namespace).List(labels.SelectorFromSet(selector))
	if err != nil {
		return nil, err
	}
	own := pods[:0:0]
	for _, p := range pods {
		if metav1.IsControlledBy(p, claim) {
			own = append(own, p)
		}
	}
	return own, nil
}

// WaitStopped waits until the claim's record has read its sandboxd's stopped entry, or ctx ends;
// it says whether it was read. The claim controller asks it after sandboxd answered its stop and
// before it deletes the pod, so that an ordinary end leaves no gap (docs/record.md §2.6). It
// returns false at once when nothing follows the claim's log.
func (c *Controller) WaitStopped(ctx context.Context, claimUID types.UID) bool {
	c.mu.Lock()
	s := c.sessions[claimUID]
	c.mu.Unlock()
	if s == nil {
		return false
	}
	s.mu.Lock()
	followed := s.followedPod != ""
	ch := s.stoppedCh
	s.mu.Unlock()
	if !followed {
		return false
	}
	select {
	case <-ch:
		return true
	case <-ctx.Done():
		return false
	}
}

// WaitStored asks for the claim's record to be stored now, not at its batch's second, and waits
// until nothing of it waits to be stored, or ctx ends; it says whether it was stored. The claim
// controller asks it before it moves the claim's records to its kept workspace and deletes the
// claim: a record not stored yet (a claim reaped within its record's first second, or as a new
// leader's term began, before the record's first sync) would otherwise be created after the
// claim is gone, owned by it, and collected with it.
func (c *Controller) WaitStored(ctx context.Context, claim *airlockv1alpha1.SandboxClaim) bool {
	c.mu.Lock()
	s := c.sessions[claim.UID]
	c.mu.Unlock()
	if s != nil && s.nothingPending() {
		return true
	}
	// Stored meanwhile: the sync this asks for releases the wait at once.
	ch := make(chan struct{})
	c.mu.Lock()
	c.storeWaiters[claim.UID] = append(c.storeWaiters[claim.UID], ch)
	c.mu.Unlock()
	c.queue.Add(cache.MetaObjectToName(claim))
	select {
	case <-ch:
		return true
	case <-ctx.Done():
		return false
	}
}

// waitedFor says whether the claim controller waits for the record of uid to be stored.
func (c *Controller) waitedFor(uid types.UID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.storeWaiters[uid]) > 0
}

// releaseStoreWaiters ends the waits for the record of uid (nothing of it waits to be stored).
func (c *Controller) releaseStoreWaiters(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ch := range c.storeWaiters[uid] {
		close(ch)
	}
	delete(c.storeWaiters, uid)
}
