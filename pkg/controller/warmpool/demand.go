package warmpool

// Pools that follow demand (a registry entry's warmPolicy; docs/decisions.md, "Warm pools that
// follow demand"): what the controller measures, and the size it gives a pool. Arrivals are
// counted from the claim informer, once per claim (its Add), at its creation time, but for a
// claim that resumes a kept workspace (it takes no pool member); ready times
// from the members this process created, when the pod informer first shows them Ready. The
// sizing itself is pkg/warmsize's.

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/airlock-dev/airlock/pkg/admission"
	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
	"github.com/airlock-dev/airlock/pkg/warmsize"
	"github.com/airlock-dev/airlock/pkg/workspace"
)

// streamKey is one runtime's claims of one sandbox: a pool's arrivals are the sum of the
// streams of the runtimes that use its registry. Runtimes by UID: one created again under the
// same name starts with no history.
type streamKey struct {
	runtime types.UID
	sandbox string
}

// poolRef is one registry entry's pool (the registry by UID).
type poolRef struct {
	registry types.UID
	entry    string
}

// startedMember is a member this process created, until it is seen Ready.
type startedMember struct {
	pool    poolRef
	created time.Time
}

// demand is what the controller measured, shared by the event handlers (arrivals, members
// Ready) and the worker (sizing); mu guards it.
type demand struct {
	mu       sync.Mutex
	arrivals map[streamKey]*warmsize.Arrivals
	ready    map[poolRef]*warmsize.ReadyTime
	held     map[poolRef]*warmsize.Held
	started  map[cache.ObjectName]startedMember
	// registries are the UIDs of the registries sized, by name: what a registry's deletion
	// forgets.
	registries map[cache.ObjectName]types.UID
}

func newDemand() *demand {
	return &demand{
		arrivals: map[streamKey]*warmsize.Arrivals{},
		ready:    map[poolRef]*warmsize.ReadyTime{},
		held:     map[poolRef]*warmsize.Held{},
		started:  map[cache.ObjectName]startedMember{},

		registries: map[cache.ObjectName]types.UID{},
	}
}

// arrive counts a claim of the stream, arrived at t.
func (d *demand) arrive(key streamKey, t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	a := d.arrivals[key]
	if a == nil {
		a = &warmsize.Arrivals{}
		d.arrivals[key] = a
	}
	a.Add(t)
}

// memberCreated remembers when this process created a member of the pool.
func (d *demand) memberCreated(member cache.ObjectName, pool poolRef, now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.started[member] = startedMember{pool: pool, created: now}
}

// memberSeen measures a member this process created, the first time it is seen Ready; a member
// deleted before is forgotten.
func (d *demand) memberSeen(pod *corev1.Pod, gone bool, now time.Time) {
	key := cache.MetaObjectToName(pod)
	d.mu.Lock()
	defer d.mu.Unlock()
	s, ok := d.started[key]
	if !ok {
		return
	}
	if gone {
		delete(d.started, key)
		return
	}
	if sandboxpod.ReadyPod([]*corev1.Pod{pod}) == nil {
		return
	}
	delete(d.started, key)
	r := d.ready[s.pool]
	if r == nil {
		r = &warmsize.ReadyTime{}
		d.ready[s.pool] = r
	}
	r.Observe(now.Sub(s.created))
}

// size sizes a pool of the registry's entry at now from the streams of runtimes.
func (d *demand) size(now time.Time, pool poolRef, policy warmsize.Policy, runtimes []types.UID) warmsize.Sizing {
	d.mu.Lock()
	defer d.mu.Unlock()
	streams := make([]*warmsize.Arrivals, 0, len(runtimes))
	for _, rt := range runtimes {
		streams = append(streams, d.arrivals[streamKey{runtime: rt, sandbox: pool.entry}])
	}
	held := d.held[pool]
	if held == nil {
		held = &warmsize.Held{}
		d.held[pool] = held
	}
	var ready warmsize.ReadyTime
	if r := d.ready[pool]; r != nil {
		ready = *r
	}
	return warmsize.Size(now, policy, warmsize.Measure(now, streams...), ready, held)
}

// forget drops what the registry's pools keep that none of its entries with a warmPolicy
// (sized) needs any more (an entry removed, or back to a static count), everything of an earlier
// registry of its name, and the streams that weigh nothing any more.
func (d *demand) forget(now time.Time, reg *airlockv1alpha1.ToolRegistry, sized map[string]bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	key := cache.MetaObjectToName(reg)
	if earlier, ok := d.registries[key]; ok && earlier != reg.UID {
		d.forgetPools(earlier, nil)
	}
	d.registries[key] = reg.UID
	d.forgetPools(reg.UID, sized)
	for stream, a := range d.arrivals {
		if a.Idle(now) {
			delete(d.arrivals, stream)
		}
	}
}

// forgetRegistry drops everything of a registry that is gone.
func (d *demand) forgetRegistry(key cache.ObjectName) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if uid, ok := d.registries[key]; ok {
		d.forgetPools(uid, nil)
		delete(d.registries, key)
	}
}

// forgetPools drops the pools of the registry but those of the entries in keep; mu is held.
func (d *demand) forgetPools(registry types.UID, keep map[string]bool) {
	for ref := range d.held {
		if ref.registry == registry && !keep[ref.entry] {
			delete(d.held, ref)
		}
	}
	for ref := range d.ready {
		if ref.registry == registry && !keep[ref.entry] {
			delete(d.ready, ref)
		}
	}
}

// addClaim counts a claim that could adopt a member as an arrival of its runtime's stream, at
// its creation time (to the second, so one second later at most, and never later than now), and
// brings its runtime's registry back to be sized again. A claim older than warmsize.RateHorizon
// (one the informer lists at the start) is history and not counted. A claim's Add comes once:
// an informer relist shows a claim it had as an update.
func (c *Controller) addClaim(obj any) {
	claim, ok := obj.(*airlockv1alpha1.SandboxClaim)
	if !ok || !sandboxpod.WarmEligible(claim) {
		return
	}
	runtime := admission.RuntimeUID(claim)
	if runtime == "" {
		return
	}
	now := c.clock.Now()
	at := claim.CreationTimestamp.Add(time.Second)
	if at.After(now) {
		at = now
	}
	if now.Sub(at) > warmsize.RateHorizon {
		return
	}
	// A claim that resumes a kept workspace adopts only that workspace's resume member, or starts
	// cold: never a member of the pool, so it is no demand on it.
	if !workspace.WouldResume(c.jobLister.Jobs(claim.Namespace), claim) {
		c.demand.arrive(streamKey{runtime: runtime, sandbox: claim.Spec.Sandbox}, at)
	}
	rt, err := c.runtimeLister.AgentRuntimes(claim.Namespace).Get(claim.Spec.RuntimeName)
	if err != nil || rt.UID != runtime {
		return // the registry is sized again when its own events come
	}
	c.queue.Add(cache.ObjectName{Namespace: claim.Namespace, Name: rt.Spec.ToolRegistryRef.Name})
}

// policyOf returns the sizing policy of an entry with a warmPolicy, its defaults filled.
func policyOf(entry *airlockv1alpha1.RegistrySandbox) warmsize.Policy {
	wp := entry.WarmPolicy
	return warmsize.Policy{
		Min: wp.Min, Max: wp.Max,
		HeadroomPercent: ptr.Deref(wp.HeadroomPercent, airlockv1alpha1.DefaultWarmHeadroomPercent),
	}
}

// runtimesOf returns the UIDs of the registry's runtimes: those whose toolRegistryRef names it.
func (c *Controller) runtimesOf(reg *airlockv1alpha1.ToolRegistry) ([]types.UID, error) {
	rts, err := c.runtimeLister.AgentRuntimes(reg.Namespace).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	var out []types.UID
	for _, rt := range rts {
		if rt.Spec.ToolRegistryRef.Name == reg.Name {
			out = append(out, rt.UID)
		}
	}
	return out, nil
}

// sizePool sets the target of a pool with a warmPolicy (wanted: members are created up to it;
// keep: idle members are deleted only beyond it) and what the status says of it, and returns
// when to size it again with no new event (zero: not needed).
func (c *Controller) sizePool(reg *airlockv1alpha1.ToolRegistry, p *pool, runtimes []types.UID) time.Duration {
	s := c.demand.size(c.clock.Now(), poolRef{registry: reg.UID, entry: p.entry.Name}, policyOf(p.entry), runtimes)
	p.wanted, p.keep = s.Target, s.Keep
	p.sizing = &s
	return s.Recheck
}

// refillLimit sets the member creations' rate: the --warm-refill-rate floor, or the claims a
// second that the pools following demand measure, all registries together, whichever is
// faster. A member a claim adopts is a pod that claim would have created cold, so refilling as
// fast as claims arrive asks no more of the API server than the claims would; a static pool, or
// no demand, refills at the floor (docs/decisions.md, "Warm pools that follow demand").
func (c *Controller) refillLimit(key cache.ObjectName, pools []*pool) {
	perSecond := 0.0
	for _, p := range pools {
		if p.sizing != nil {
			perSecond += p.sizing.Rate.PerSecond()
		}
	}
	if perSecond > 0 {
		c.demandRates[key] = perSecond
	} else {
		delete(c.demandRates, key)
	}
	c.setRefillLimit()
}

// setRefillLimit sets the limiter to the larger of the floor and the registries' demand.
func (c *Controller) setRefillLimit() {
	total := 0.0
	for _, r := range c.demandRates {
		total += r
	}
	limit := max(c.baseRefill, total)
	if now := c.clock.Now(); float64(c.limiter.Limit()) != limit {
		c.limiter.SetLimitAt(now, rate.Limit(limit))
		c.limiter.SetBurstAt(now, max(1, int(limit)))
	}
}

// sizingStatus fills a pool status's warmPolicy fields.
func sizingStatus(st *airlockv1alpha1.WarmPoolStatus, s *warmsize.Sizing) {
	st.ArrivalsPerMinute = resource.NewMilliQuantity(warmsize.PerMinute(s.Rate.PerSecond()), resource.DecimalSI)
	st.ReadyMilliseconds = s.ReadyMilliseconds()
	st.Sizing = truncateMessage(s.String(), 1024)
}
