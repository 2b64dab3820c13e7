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
// An expectation that is not met within expectationsTimeout is dropped with a log line and a
// count (an event that never came would otherwise stall the namespace): the same safety valve as
// kube-controller-manager's, and the one expiry of pkg/controller/expectations, which holds every
// tracker here.

import (
	"strconv"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/controller/expectations"
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

// claimExpectations holds the expectations of every claim, by namespace and name.
type claimExpectations struct {
	store *expectations.Store[cache.ObjectName, expectation]
	// mu makes the fence's check and set one critical section with the deletions it records.
	mu sync.Mutex
	// fenceDeleted holds, while a fence is raised (beginFence to endFence), the UIDs of the
	// claims the cache has seen deleted since the fence began: a listed claim may be deleted,
	// and its deletion seen, between the list and its expectation, which would then wait for a
	// claim that never comes (a stall found by TestClaimLeaderFailover: the new leader reaps
	// expired refusals as its term starts). nil when no fence is being raised.
	fenceDeleted map[types.UID]bool
}

func newClaimExpectations(logger klog.Logger, clk clock.PassiveClock) *claimExpectations {
	return &claimExpectations{store: expectations.New[cache.ObjectName, expectation](logger, ControllerName, "claim", expectationsTimeout, clk)}
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

// expectWrite expects the claim changed from resourceVersion rv: a write based on it is in flight.
func (x *claimExpectations) expectWrite(namespace, name, rv string) {
	x.store.Expect(cache.ObjectName{Namespace: namespace, Name: name}, expectation{notRV: rv})
}

// forgetWrite drops the expectation of a write that failed: nothing changed.
func (x *claimExpectations) forgetWrite(namespace, name, rv string) {
	x.store.Modify(cache.ObjectName{Namespace: namespace, Name: name}, false, func(e expectation, ok bool) (expectation, bool) {
		return e, ok && e.notRV != rv
	})
}

// expectAtLeast expects the claim (of that UID) at resourceVersion rv or later (the fence),
// unless the cache has seen it deleted since the fence began: then there is nothing to wait for.
func (x *claimExpectations) expectAtLeast(namespace, name string, uid types.UID, rv uint64) {
	x.mu.Lock() // one critical section: a deletion seen between the check and the set would be lost
	defer x.mu.Unlock()
	if x.fenceDeleted[uid] {
		return
	}
	x.store.Expect(cache.ObjectName{Namespace: namespace, Name: name}, expectation{minRV: rv, uid: uid})
}

// expectGone expects the claim deleted (the fence: listed no more).
func (x *claimExpectations) expectGone(namespace, name string) {
	x.store.Expect(cache.ObjectName{Namespace: namespace, Name: name}, expectation{gone: true})
}

// observe checks the expectation of the claim against what the cache now holds, and says whether
// it met one: the namespace should then be looked at again, as the others may be met already
// (satisfied checks them against the cache; a stall when the last one to be seen is not the last
// one left was found by TestClaimLeaderFailover).
func (x *claimExpectations) observe(namespace, name string, cached *airlockv1alpha1.SandboxClaim) bool {
	return x.store.Observe(cache.ObjectName{Namespace: namespace, Name: name}, func(e expectation) bool { return e.met(cached, false) })
}

// observeDeleted is observe for a claim the cache has just seen deleted.
func (x *claimExpectations) observeDeleted(claim *airlockv1alpha1.SandboxClaim) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.fenceDeleted != nil {
		x.fenceDeleted[claim.UID] = true
	}
	return x.store.Observe(cache.MetaObjectToName(claim), func(e expectation) bool { return e.met(claim, true) })
}

// satisfied says whether the namespace may be decided: every expectation is met, given the
// cache (get returns the cached claim, or nil). Expectations older than expectationsTimeout are
// dropped (the store logs and counts them). When some are left, timeout says when the oldest of
// them times out: the namespace must be looked at again then even if no event comes (nothing
// waits forever).
func (x *claimExpectations) satisfied(namespace string, get func(name string) *airlockv1alpha1.SandboxClaim) (ok bool, timeout time.Duration) {
	timeout = expectationsTimeout
	left := 0
	x.store.Range(func(key cache.ObjectName, e expectation, age time.Duration) bool {
		if key.Namespace != namespace {
			return true
		}
		if e.met(get(key.Name), false) {
			return false
		}
		left++
		timeout = min(timeout, expectationsTimeout-age)
		return true
	})
	if left == 0 {
		return true, 0
	}
	return false, timeout
}

// pending returns the number of expectations of the namespace (for logs and tests).
func (x *claimExpectations) pending(namespace string) int {
	return x.store.Count(func(key cache.ObjectName, _ expectation) bool { return key.Namespace == namespace })
}

// childExpectations counts, per claim (by UID), the children (pod, NetworkPolicy) the leader
// created and the cache has not shown yet, and holds a claim the leader is about to build. While
// a claim has any, its own sync does not write its children: the cache would not show them yet,
// and a second create would only be answered AlreadyExists. (The token Secret has no informer;
// it is created before the pod that mounts it, and ensureSecret reads the pod.)
type childExpectations struct {
	store *expectations.Store[types.UID, int]
}

// childExpectationsTimeout bounds how long a claim's sync leaves its children alone.
const childExpectationsTimeout = time.Minute

func newChildExpectations(logger klog.Logger, clk clock.PassiveClock) *childExpectations {
	return &childExpectations{store: expectations.New[types.UID, int](logger, ControllerName, "children", childExpectationsTimeout, clk)}
}

// raise adds n to the claim's pending children (a hold before a build is 1; each create is 1).
func (x *childExpectations) raise(uid types.UID, n int) {
	x.store.Modify(uid, true, func(pending int, _ bool) (int, bool) { return pending + n, true })
}

// lower takes one from the claim's pending children (a create answered, a hold released, or a
// child seen) and says whether none is left.
func (x *childExpectations) lower(uid types.UID) bool {
	had := false
	kept := x.store.Modify(uid, false, func(pending int, ok bool) (int, bool) {
		had = ok
		return pending - 1, ok && pending > 1
	})
	return had && !kept
}

// satisfied says whether the claim's sync may write its children.
func (x *childExpectations) satisfied(uid types.UID) bool {
	_, pending := x.store.Get(uid)
	return !pending
}

// forget drops the claim's expectations (it is gone).
func (x *childExpectations) forget(uid types.UID) {
	x.store.Delete(uid)
}
