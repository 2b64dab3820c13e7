package claim

// Expectations: what the leader knows the claim cache must show before it may decide over it
// (as kube-controller-manager's ReplicaSet controller tracks its own creates and deletes).
//
// Admission decides a namespace over the claim cache. The watch delivers a resource's events in
// the order they happened, so when the cache holds a claim it holds every change made before
// that claim was created: everything another replica or a runtime did that could change the
// decision of the claims the pass decides. What the cache can lack is the leader's own writes
// (a status it wrote a moment ago) and, right after a failover, what the previous leader wrote:
//   - each status write of a pass is expected: the namespace is not decided again until the cache
//     shows the claim changed since (or gone);
//   - when a term starts, the claims are listed once from the API server (a quorum read) and each
//     is expected at the listed resourceVersion or later, and a cached claim the list lacks is
//     expected gone: the fence.
// An expectation that is not met within expectationsTimeout is dropped with a log line (an
// event that never came would otherwise stall the namespace): the same safety valve as
// kube-controller-manager's.

import (
	"strconv"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
)

// expectationsTimeout bounds how long a namespace waits on one expectation.
const expectationsTimeout = 5 * time.Minute

// expectation is what the cache must show of one claim.
type expectation struct {
	// notRV: the claim is expected changed from this resourceVersion (a write of ours based on it).
	notRV string
	// minRV: the claim is expected at this resourceVersion or later (the fence's list); uid is
	// the listed claim's: the deletion of another claim of the same name (an older one, deleted
	// before the list and recreated since) does not meet it.
	minRV uint64
	uid   types.UID
	// gone: the claim is expected deleted.
	gone bool
	at   time.Time
}

// met says whether the cached claim meets the expectation: cached is nil when the claim is not
// in the cache; deleted says that the cache has just seen cached deleted.
func (e expectation) met(cached *airlockv1alpha1.SandboxClaim, deleted bool) bool {
	switch {
	case deleted:
		// Every expectation of a deleted claim is met, but a listed claim's only by its own deletion.
		return e.uid == "" || cached.UID == e.uid
	case cached == nil:
		// Not in the cache: our write's claim was deleted since, or a listed claim the cache
		// has not seen yet.
		return e.minRV == 0
	case e.gone:
		return false
	case e.notRV != "":
		return cached.ResourceVersion != e.notRV
	}
	rv, err := strconv.ParseUint(cached.ResourceVersion, 10, 64)
	return err != nil || rv >= e.minRV
}

// claimExpectations holds the expectations of each namespace, by claim name.
type claimExpectations struct {
	clock clock.PassiveClock
	mu    sync.Mutex
	byNS  map[string]map[string]expectation
	// fenceDeleted holds, while a fence is raised (beginFence to endFence), the UIDs of the
	// claims the cache has seen deleted since the fence began: a listed claim may be deleted,
	// and its deletion seen, between the list and its expectation, which would then wait for a
	// claim that never comes (a stall found by TestClaimLeaderFailover: the new leader reaps
	// expired refusals as its term starts). nil when no fence is being raised.
	fenceDeleted map[types.UID]bool
}

func newClaimExpectations(clk clock.PassiveClock) *claimExpectations {
	return &claimExpectations{clock: clk, byNS: map[string]map[string]expectation{}}
}

// beginFence starts recording the deletions the cache sees; call it before the fence's list.
func (x *claimExpectations) beginFence() {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.fenceDeleted = map[types.UID]bool{}
}

// endFence stops recording deletions; call it once the fence's expectations are set.
func (x *claimExpectations) endFence() {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.fenceDeleted = nil
}

func (x *claimExpectations) set(namespace, name string, e expectation) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.setLocked(namespace, name, e)
}

// setLocked is set with x.mu held.
func (x *claimExpectations) setLocked(namespace, name string, e expectation) {
	e.at = x.clock.Now()
	m := x.byNS[namespace]
	if m == nil {
		m = map[string]expectation{}
		x.byNS[namespace] = m
	}
	m[name] = e
}

// expectWrite expects the claim changed from resourceVersion rv: a write based on it is in flight.
func (x *claimExpectations) expectWrite(namespace, name, rv string) {
	x.set(namespace, name, expectation{notRV: rv})
}

// forgetWrite drops the expectation of a write that failed: nothing changed.
func (x *claimExpectations) forgetWrite(namespace, name, rv string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if e, ok := x.byNS[namespace][name]; ok && e.notRV == rv {
		delete(x.byNS[namespace], name)
	}
}

// expectAtLeast expects the claim (of that UID) at resourceVersion rv or later (the fence),
// unless the cache has seen it deleted since the fence began: then there is nothing to wait for.
func (x *claimExpectations) expectAtLeast(namespace, name string, uid types.UID, rv uint64) {
	x.mu.Lock() // one critical section: a deletion seen between the check and the set would be lost
	defer x.mu.Unlock()
	if x.fenceDeleted[uid] {
		return
	}
	x.setLocked(namespace, name, expectation{minRV: rv, uid: uid})
}

// expectGone expects the claim deleted (the fence: listed no more).
func (x *claimExpectations) expectGone(namespace, name string) {
	x.set(namespace, name, expectation{gone: true})
}

// observe checks the expectation of the claim against what the cache now holds, and says whether
// it met one: the namespace should then be looked at again, as the others may be met already
// (satisfied checks them against the cache; a stall when the last one to be seen is not the last
// one left was found by TestClaimLeaderFailover).
func (x *claimExpectations) observe(namespace, name string, cached *airlockv1alpha1.SandboxClaim) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.observeLocked(namespace, name, cached, false)
}

// observeDeleted is observe for a claim the cache has just seen deleted.
func (x *claimExpectations) observeDeleted(claim *airlockv1alpha1.SandboxClaim) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.fenceDeleted != nil {
		x.fenceDeleted[claim.UID] = true
	}
	return x.observeLocked(claim.Namespace, claim.Name, claim, true)
}

// observeLocked is observe with x.mu held; deleted says that cached was just deleted.
func (x *claimExpectations) observeLocked(namespace, name string, cached *airlockv1alpha1.SandboxClaim, deleted bool) bool {
	m := x.byNS[namespace]
	e, ok := m[name]
	if !ok || !e.met(cached, deleted) {
		return false
	}
	delete(m, name)
	if len(m) == 0 {
		delete(x.byNS, namespace)
	}
	return true
}

// satisfied says whether the namespace may be decided: every expectation is met, given the
// cache (get returns the cached claim, or nil). Expectations older than expectationsTimeout are
// dropped. When some are left, timeout says when the oldest of them times out: the namespace
// must be looked at again then even if no event comes (nothing waits forever).
func (x *claimExpectations) satisfied(logger klog.Logger, namespace string, get func(name string) *airlockv1alpha1.SandboxClaim) (ok bool, timeout time.Duration) {
	x.mu.Lock()
	defer x.mu.Unlock()
	m := x.byNS[namespace]
	now := x.clock.Now()
	timeout = expectationsTimeout
	for name, e := range m {
		switch left := e.at.Add(expectationsTimeout).Sub(now); {
		case e.met(get(name), false):
			delete(m, name)
		case left < 0:
			logger.Info("An expected change of a claim was not seen in time; deciding without it",
				"claim", klog.KRef(namespace, name), "waited", now.Sub(e.at))
			delete(m, name)
		default:
			timeout = min(timeout, left)
		}
	}
	if len(m) == 0 {
		delete(x.byNS, namespace)
		return true, 0
	}
	return false, timeout
}

// pending returns the number of expectations of the namespace (for logs and tests).
func (x *claimExpectations) pending(namespace string) int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return len(x.byNS[namespace])
}

// childExpectations counts, per claim (by UID), the children (Deployment, Service,
// NetworkPolicy) the leader created and the cache has not shown yet, and holds a claim the
// leader is about to build. While a claim has any, its own sync does not write its children:
// the cache would not show them yet, and a second create would only be answered AlreadyExists.
// (The token Secret has no informer; it is created before the Deployment that mounts it, and
// ensureSecret reads the Deployment.)
type childExpectations struct {
	clock clock.PassiveClock
	mu    sync.Mutex
	byUID map[types.UID]*childExpectation
}

type childExpectation struct {
	pending int
	at      time.Time
}

// childExpectationsTimeout bounds how long a claim's sync leaves its children alone.
const childExpectationsTimeout = time.Minute

func newChildExpectations(clk clock.PassiveClock) *childExpectations {
	return &childExpectations{clock: clk, byUID: map[types.UID]*childExpectation{}}
}

// raise adds n to the claim's pending children (a hold before a build is 1; each create is 1).
func (x *childExpectations) raise(uid types.UID, n int) {
	x.mu.Lock()
	defer x.mu.Unlock()
	e := x.byUID[uid]
	if e == nil {
		e = &childExpectation{}
		x.byUID[uid] = e
	}
	e.pending += n
	e.at = x.clock.Now()
}

// lower takes one from the claim's pending children (a create answered, a hold released, or a
// child seen) and says whether none is left.
func (x *childExpectations) lower(uid types.UID) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	e := x.byUID[uid]
	if e == nil {
		return false
	}
	e.pending--
	if e.pending <= 0 {
		delete(x.byUID, uid)
		return true
	}
	return false
}

// satisfied says whether the claim's sync may write its children.
func (x *childExpectations) satisfied(uid types.UID) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	e := x.byUID[uid]
	if e == nil {
		return true
	}
	if x.clock.Since(e.at) > childExpectationsTimeout {
		delete(x.byUID, uid)
		return true
	}
	return false
}

// forget drops the claim's expectations (it is gone).
func (x *childExpectations) forget(uid types.UID) {
	x.mu.Lock()
	defer x.mu.Unlock()
	delete(x.byUID, uid)
}
