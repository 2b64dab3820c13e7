package claim

import (
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/controller/expectations"
)

// statusWrites remembers, per claim (by UID), the resourceVersion its last status write by this
// controller was based on, until the cache shows the claim at another one; and the claims this
// controller deleted, until the cache shows them gone. A claim is synced
// again by events that can come before the update event of that write (its pod turning ready, a
// child's add): a sync then would read the claim as it was before the write, decide the same
// write again from the same resourceVersion, and be refused with a conflict (make bench counted
// 54–66 of those for 200 claims at 20–40 claims a second). Such a sync is skipped instead; the
// write's own update event brings the claim back. The watch delivers that update (or a relist
// replaces the cached claim), and a deletion forgets the claim; statusWritesTimeout is the valve
// should neither come.
//
// A claim deleted by this controller is skipped likewise until the cache shows it gone: its
// children go by garbage collection, and a sync-back Job's deletion seen before the claim's
// would have a sync over the cached, still Reaping claim create its Job again (seen once by
// TestClaimSyncBackOneAtATime: two Jobs into one target at once).
type statusWrites struct {
	// store holds, by claim UID, the resourceVersion the write was based on, or deletedMark.
	store *expectations.Store[types.UID, string]
}

// statusWritesTimeout bounds how long a claim's syncs are skipped for a write the cache never
// showed (a watch that lost the event and a relist that did not replace the claim): then the
// sync runs, and a conflict at worst brings the claim back.
const statusWritesTimeout = expectationsTimeout

func newStatusWrites(logger klog.Logger, clk clock.PassiveClock) *statusWrites {
	return &statusWrites{store: expectations.New[types.UID, string](logger, ControllerName, "status", statusWritesTimeout, clk)}
}

// deletedMark marks a claim deleted by this controller: every cached version of it is stale.
const deletedMark = "\x00deleted"

// deleted records a successful deletion of the claim.
func (w *statusWrites) deleted(uid types.UID) {
	w.store.Expect(uid, deletedMark)
}

// wrote records a successful status write based on old.
func (w *statusWrites) wrote(old *airlockv1alpha1.SandboxClaim) {
	w.store.Expect(old.UID, old.ResourceVersion)
}

// stale says whether the cached claim is still the one a status write of this controller was
// based on; once the cache shows it at another resourceVersion, the record is dropped.
func (w *statusWrites) stale(cached *airlockv1alpha1.SandboxClaim) bool {
	stale := false
	w.store.Modify(cached.UID, false, func(rv string, ok bool) (string, bool) {
		stale = ok && (rv == cached.ResourceVersion || rv == deletedMark)
		return rv, stale
	})
	return stale
}

// forget drops the claim's record (it was deleted).
func (w *statusWrites) forget(uid types.UID) {
	w.store.Delete(uid)
}
