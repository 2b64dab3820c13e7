// Package expectations is the one way airlock's controllers wait until their informer caches show
// their own writes, as kube-controller-manager's ControllerExpectations does: per key (a
// cache.ObjectName or a UID), what the controller expects the cache to show, kept until the
// controller sees it met or it expires.
//
// One expiry policy for all: an expectation older than its store's TTL is dropped when it is next
// read, with a log line and a count in airlock_controller_expectations_expired_total{controller,
// kind}, and the controller acts as if it were met. An event that never comes (a watch that
// missed it, a relist that replaced it) then costs a wait of the TTL, never a stall; and a
// controller that has to act by a deadline requeues itself by the TTL left (Range gives each
// expectation's age).
package expectations

import (
	"sync"
	"time"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

var expired = metrics.NewCounterVec(&metrics.CounterOpts{
	Subsystem:      "airlock",
	Name:           "controller_expectations_expired_total",
	Help:           "Expectations of a controller's own writes that the cache did not show within their TTL, by controller and kind of expectation: each one is an event that never came, and a wait of the TTL.",
	StabilityLevel: metrics.ALPHA,
}, []string{"controller", "kind"})

var registerOnce sync.Once

// Store holds, per key of type K, an expectation of type V and when it was set. It is safe for
// concurrent use.
type Store[K comparable, V any] struct {
	logger           klog.Logger
	controller, kind string
	ttl              time.Duration
	clock            clock.PassiveClock

	mu sync.Mutex
	m  map[K]entry[V]
}

type entry[V any] struct {
	v  V
	at time.Time
}

// New returns an empty store of the controller's expectations of one kind (both name the
// metric's labels and the expiry's log line), each dropped ttl after it was set.
func New[K comparable, V any](logger klog.Logger, controller, kind string, ttl time.Duration, clk clock.PassiveClock) *Store[K, V] {
	registerOnce.Do(func() { legacyregistry.MustRegister(expired) })
	return &Store[K, V]{logger: logger, controller: controller, kind: kind, ttl: ttl, clock: clk, m: map[K]entry[V]{}}
}

// TTL is how long an expectation is kept.
func (s *Store[K, V]) TTL() time.Duration { return s.ttl }

// Expect sets the expectation of k, from now.
func (s *Store[K, V]) Expect(k K, v V) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[k] = entry[V]{v: v, at: s.clock.Now()}
}

// Get returns the expectation of k, if one is set and not expired.
func (s *Store[K, V]) Get(k K) (V, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.liveLocked(k, s.clock.Now())
	return e.v, ok
}

// Modify replaces the expectation of k by what f returns: f gets the current one (ok false when
// there is none, or it expired) and returns the new one and whether to keep one at all. A kept
// expectation is aged from now when refresh is set or it is new, else keeps its age. Modify says
// whether an expectation is kept.
func (s *Store[K, V]) Modify(k K, refresh bool, f func(v V, ok bool) (V, bool)) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	e, ok := s.liveLocked(k, now)
	v, keep := f(e.v, ok)
	if !keep {
		delete(s.m, k)
		return false
	}
	at := e.at
	if refresh || !ok {
		at = now
	}
	s.m[k] = entry[V]{v: v, at: at}
	return true
}

// Observe drops the expectation of k when met says the cache now meets it, and says whether it did.
func (s *Store[K, V]) Observe(k K, met func(v V) bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.liveLocked(k, s.clock.Now())
	if !ok || !met(e.v) {
		return false
	}
	delete(s.m, k)
	return true
}

// Delete drops the expectation of k (its object is gone, or the write failed).
func (s *Store[K, V]) Delete(k K) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, k)
}

// Range calls f with every expectation that has not expired, and its age, in no order; those for
// which f returns false are dropped. Expired ones are dropped first. f must not call the store.
func (s *Store[K, V]) Range(f func(k K, v V, age time.Duration) (keep bool)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	for k := range s.m {
		e, ok := s.liveLocked(k, now)
		if ok && !f(k, e.v, now.Sub(e.at)) {
			delete(s.m, k)
		}
	}
}

// Count returns the number of unexpired expectations for which match says true.
func (s *Store[K, V]) Count(match func(k K, v V) bool) int {
	n := 0
	s.Range(func(k K, v V, _ time.Duration) bool {
		if match(k, v) {
			n++
		}
		return true
	})
	return n
}

// Len returns the number of unexpired expectations.
func (s *Store[K, V]) Len() int {
	return s.Count(func(K, V) bool { return true })
}

// liveLocked returns k's entry unless there is none or it expired (then it is dropped, logged
// and counted). s.mu must be held.
func (s *Store[K, V]) liveLocked(k K, now time.Time) (entry[V], bool) {
	e, ok := s.m[k]
	if !ok {
		return e, false
	}
	if waited := now.Sub(e.at); waited > s.ttl {
		delete(s.m, k)
		expired.WithLabelValues(s.controller, s.kind).Inc()
		s.logger.Info("An expected change was not seen in the cache in time; acting without it",
			"controller", s.controller, "expectation", s.kind, "key", k, "waited", waited)
		return entry[V]{}, false
	}
	return e, true
}
