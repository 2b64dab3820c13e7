package warmpool

import (
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/airlock-dev/airlock/pkg/controller/expectations"
)

// memberExpectations are the members created and not yet seen in the cache, by name, with the
// pool key each was created for: they count as starting, so that a sync over a cache that lacks
// them does not create more. Each expires after memberCreateExpiry (as kube-controller-manager's
// expectations do).
type memberExpectations struct {
	store *expectations.Store[cache.ObjectName, string]
}

func newMemberExpectations(logger klog.Logger, clk clock.PassiveClock) *memberExpectations {
	return &memberExpectations{store: expectations.New[cache.ObjectName, string](logger, ControllerName, "member", memberCreateExpiry, clk)}
}

func (e *memberExpectations) expect(namespace, name, pool string) {
	e.store.Expect(cache.ObjectName{Namespace: namespace, Name: name}, pool)
}

func (e *memberExpectations) seen(namespace, name string) {
	e.store.Delete(cache.ObjectName{Namespace: namespace, Name: name})
}

// pending counts the members of pool in namespace created and not seen.
func (e *memberExpectations) pending(namespace, pool string) int {
	return e.store.Count(func(k cache.ObjectName, p string) bool { return k.Namespace == namespace && p == pool })
}

// expectResume expects a resume member of the entry, waiting on the record, created by name.
func (e *memberExpectations) expectResume(namespace, name, entry, record string) {
	e.store.Expect(cache.ObjectName{Namespace: namespace, Name: name}, resumeExpectation(entry, record))
}

// pendingResumes returns the records (by name) whose resume member of the entry in namespace was
// created and not seen.
func (e *memberExpectations) pendingResumes(namespace, entry string) map[string]bool {
	out := map[string]bool{}
	e.store.Count(func(k cache.ObjectName, v string) bool {
		if record := recordOfExpectation(v, entry); k.Namespace == namespace && record != "" {
			out[record] = true
		}
		return false
	})
	return out
}
