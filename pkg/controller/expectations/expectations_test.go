package expectations

import (
	"testing"
	"time"

	"k8s.io/client-go/tools/cache"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"
)

var t0 = time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)

func newStore(t *testing.T, kind string, ttl time.Duration) (*Store[cache.ObjectName, string], *clocktesting.FakeClock) {
	logger, _ := ktesting.NewTestContext(t)
	clk := clocktesting.NewFakeClock(t0)
	return New[cache.ObjectName, string](logger, "test-controller", kind, ttl, clk), clk
}

func expiredCount(t *testing.T, kind string) float64 {
	t.Helper()
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "airlock_controller_expectations_expired_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["controller"] == "test-controller" && labels["kind"] == kind {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// TestStoreExpectObserve: an expectation is kept until it is observed met, and only then.
func TestStoreExpectObserve(t *testing.T) {
	s, _ := newStore(t, "observe", time.Minute)
	a, b := cache.ObjectName{Namespace: "ns", Name: "a"}, cache.ObjectName{Namespace: "ns", Name: "b"}
	s.Expect(a, "rv1")
	s.Expect(b, "rv2")
	if s.Observe(a, func(v string) bool { return v != "rv1" }) {
		t.Error("an expectation not met was observed met")
	}
	if !s.Observe(a, func(v string) bool { return v == "rv1" }) {
		t.Error("a met expectation was not observed")
	}
	if _, ok := s.Get(a); ok || s.Len() != 1 {
		t.Errorf("after the observation: a kept %v, %d left; want only b", ok, s.Len())
	}
	if s.Observe(cache.ObjectName{Namespace: "ns", Name: "none"}, func(string) bool { return true }) {
		t.Error("a key with no expectation was observed met")
	}
	s.Delete(b)
	if s.Len() != 0 {
		t.Errorf("%d left after Delete", s.Len())
	}
}

// TestStoreExpiry: an expectation older than the TTL is gone on every read path, and counted.
func TestStoreExpiry(t *testing.T) {
	s, clk := newStore(t, "expiry", time.Minute)
	k := cache.ObjectName{Namespace: "ns", Name: "a"}
	before := expiredCount(t, "expiry")
	s.Expect(k, "x")
	clk.Step(time.Minute)
	if _, ok := s.Get(k); !ok {
		t.Fatal("an expectation exactly TTL old expired")
	}
	clk.Step(time.Nanosecond)
	if _, ok := s.Get(k); ok {
		t.Error("an expectation older than the TTL is still there")
	}
	if got := expiredCount(t, "expiry") - before; got != 1 {
		t.Errorf("expired count rose by %v, want 1", got)
	}
	// Range, Count and Modify see no expired expectation either.
	s.Expect(k, "y")
	clk.Step(2 * time.Minute)
	s.Range(func(cache.ObjectName, string, time.Duration) bool {
		t.Error("Range gave an expired expectation")
		return true
	})
	s.Expect(k, "z")
	clk.Step(2 * time.Minute)
	s.Modify(k, false, func(v string, ok bool) (string, bool) {
		if ok {
			t.Errorf("Modify got the expired %q", v)
		}
		return "new", true
	})
	if v, ok := s.Get(k); !ok || v != "new" {
		t.Errorf("after Modify: %q, %v", v, ok)
	}
	if got := expiredCount(t, "expiry") - before; got != 3 {
		t.Errorf("expired count rose by %v, want 3", got)
	}
}

// TestStoreModifyAge: Modify keeps an expectation's age unless asked to refresh it; Range gives
// the age, so that a caller can requeue by the TTL left.
func TestStoreModifyAge(t *testing.T) {
	s, clk := newStore(t, "age", time.Minute)
	k := cache.ObjectName{Namespace: "ns", Name: "a"}
	s.Expect(k, "1")
	clk.Step(40 * time.Second)
	s.Modify(k, false, func(v string, ok bool) (string, bool) { return v + "1", ok })
	var age time.Duration
	s.Range(func(_ cache.ObjectName, _ string, a time.Duration) bool { age = a; return true })
	if age != 40*time.Second {
		t.Errorf("age after a Modify without refresh = %s, want 40s", age)
	}
	s.Modify(k, true, func(v string, ok bool) (string, bool) { return v + "1", ok })
	s.Range(func(_ cache.ObjectName, _ string, a time.Duration) bool { age = a; return true })
	if age != 0 {
		t.Errorf("age after a refresh = %s, want 0", age)
	}
	if kept := s.Modify(k, false, func(string, bool) (string, bool) { return "", false }); kept || s.Len() != 0 {
		t.Errorf("Modify returning keep=false kept %v, %d left", kept, s.Len())
	}
	if n := s.Count(func(cache.ObjectName, string) bool { return true }); n != 0 {
		t.Errorf("Count = %d", n)
	}
}
