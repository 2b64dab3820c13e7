package claim

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
)

func claimAt(name, rv string) *airlockv1alpha1.SandboxClaim {
	c := newClaim(name, "s1", airlockv1alpha1.ClaimPending, t0)
	c.ResourceVersion = rv
	return c
}

// listedAfterDeletion raises a fence that lists claim c1 (UID u1) at resourceVersion 9, after
// the cache has seen a claim c1 of UID deletedUID deleted: while the fence is being raised (between
// its list and its expectations), or before it began.
func listedAfterDeletion(deletedUID types.UID, whileFencing bool) func(x *claimExpectations) {
	return func(x *claimExpectations) {
		deleted := claimAt("c1", "9")
		deleted.UID = deletedUID
		if !whileFencing {
			x.observeDeleted(deleted)
		}
		x.beginFence()
		if whileFencing {
			x.observeDeleted(deleted)
		}
		x.expectAtLeast(testNamespace, "c1", "u1", 9)
		x.endFence()
	}
}

// TestClaimExpectations: what meets each kind of expectation, as the handlers see events and as
// a pass looks at the cache.
func TestClaimExpectations(t *testing.T) {
	tests := map[string]struct {
		expect func(x *claimExpectations)
		cache  *airlockv1alpha1.SandboxClaim // what the pass finds; nil: not in the cache
		want   bool
	}{
		"a write, the cache still at its base":                     {expect: func(x *claimExpectations) { x.expectWrite(testNamespace, "c1", "5") }, cache: claimAt("c1", "5"), want: false},
		"a write, the cache moved on":                              {expect: func(x *claimExpectations) { x.expectWrite(testNamespace, "c1", "5") }, cache: claimAt("c1", "6"), want: true},
		"a write, the claim deleted since":                         {expect: func(x *claimExpectations) { x.expectWrite(testNamespace, "c1", "5") }, want: true},
		"listed, the cache behind":                                 {expect: func(x *claimExpectations) { x.expectAtLeast(testNamespace, "c1", "u1", 9) }, cache: claimAt("c1", "8"), want: false},
		"listed, the cache there":                                  {expect: func(x *claimExpectations) { x.expectAtLeast(testNamespace, "c1", "u1", 9) }, cache: claimAt("c1", "9"), want: true},
		"listed, the cache past it":                                {expect: func(x *claimExpectations) { x.expectAtLeast(testNamespace, "c1", "u1", 9) }, cache: claimAt("c1", "12"), want: true},
		"listed, not in the cache yet":                             {expect: func(x *claimExpectations) { x.expectAtLeast(testNamespace, "c1", "u1", 9) }, want: false},
		"listed, its deletion seen before the expectation was set": {expect: listedAfterDeletion("u1", true), want: true},
		"listed, another claim of the name seen deleted":           {expect: listedAfterDeletion("u0", true), want: false},
		"listed, its deletion seen before the fence began":         {expect: listedAfterDeletion("u1", false), want: false},
		"unlisted, still in the cache":                             {expect: func(x *claimExpectations) { x.expectGone(testNamespace, "c1") }, cache: claimAt("c1", "3"), want: false},
		"unlisted, gone from the cache":                            {expect: func(x *claimExpectations) { x.expectGone(testNamespace, "c1") }, want: true},
		"a failed write is forgotten": {expect: func(x *claimExpectations) {
			x.expectWrite(testNamespace, "c1", "5")
			x.forgetWrite(testNamespace, "c1", "5")
		}, cache: claimAt("c1", "5"), want: true},
		"another namespace's expectation": {expect: func(x *claimExpectations) { x.expectWrite("team-b", "c1", "5") }, cache: claimAt("c1", "5"), want: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			logger, _ := ktesting.NewTestContext(t)
			x := newClaimExpectations(logger, clocktesting.NewFakePassiveClock(t0))
			tc.expect(x)
			get := func(string) *airlockv1alpha1.SandboxClaim { return tc.cache }
			if got, _ := x.satisfied(testNamespace, get); got != tc.want {
				t.Errorf("satisfied = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestClaimExpectationsObserve: the claim handlers' events meet expectations and say so, so that
// the namespace is looked at again; a deletion meets any expectation of that claim, but not the
// fence's expectation of a listed claim when it is another claim of the same name.
func TestClaimExpectationsObserve(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	x := newClaimExpectations(logger, clocktesting.NewFakePassiveClock(t0))
	x.expectWrite(testNamespace, "c1", "5")
	x.expectAtLeast(testNamespace, "c2", "uid-c2", 9)
	if x.observe(testNamespace, "c1", claimAt("c1", "5")) {
		t.Error("an event at the write's base met it")
	}
	if !x.observe(testNamespace, "c1", claimAt("c1", "6")) {
		t.Error("meeting c1's expectation did not ask for the namespace again (c2's may be met in the cache already)")
	}
	if x.observe(testNamespace, "c3", claimAt("c3", "1")) {
		t.Error("an unexpected claim's event reported the namespace free")
	}
	older := claimAt("c2", "4")
	older.UID = "uid-c2-older"
	if x.observeDeleted(older) {
		t.Error("the deletion of an older claim of c2's name met the fence's expectation of the listed c2")
	}
	if !x.observeDeleted(claimAt("c2", "9")) {
		t.Error("c2's deletion did not ask for the namespace again")
	}
	if n := x.pending(testNamespace); n != 0 {
		t.Errorf("%d expectations left", n)
	}
}

// TestClaimExpectationsTimeout: an expectation never met is dropped after expectationsTimeout,
// so that a namespace is never stalled for good.
func TestClaimExpectationsTimeout(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	clk := clocktesting.NewFakePassiveClock(t0)
	x := newClaimExpectations(logger, clk)
	x.expectAtLeast(testNamespace, "c1", "u1", 9)
	get := func(string) *airlockv1alpha1.SandboxClaim { return nil }
	clk.SetTime(t0.Add(time.Minute))
	if ok, timeout := x.satisfied(testNamespace, get); ok || timeout != expectationsTimeout-time.Minute {
		t.Errorf("satisfied %v, look again in %v; want false, in %v", ok, timeout, expectationsTimeout-time.Minute)
	}
	clk.SetTime(t0.Add(expectationsTimeout))
	if ok, _ := x.satisfied(testNamespace, get); ok {
		t.Error("satisfied at the timeout")
	}
	clk.SetTime(t0.Add(expectationsTimeout + time.Second))
	if ok, _ := x.satisfied(testNamespace, get); !ok {
		t.Error("not satisfied after the timeout")
	}
}

// TestChildExpectations: a hold and the creates keep a claim's sync from writing its children
// until the creates are answered or seen; the timeout frees it.
func TestChildExpectations(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	clk := clocktesting.NewFakePassiveClock(t0)
	x := newChildExpectations(logger, clk)
	uid := types.UID("u1")
	x.raise(uid, 1) // the pass's hold
	x.raise(uid, 1) // a create
	x.raise(uid, 1) // another
	if x.satisfied(uid) {
		t.Fatal("satisfied while held")
	}
	if x.lower(uid) || x.lower(uid) {
		t.Fatal("free with one left")
	}
	if !x.lower(uid) {
		t.Fatal("not free once all were lowered")
	}
	if !x.satisfied(uid) {
		t.Error("not satisfied once free")
	}
	x.raise(uid, 1)
	clk.SetTime(t0.Add(childExpectationsTimeout + time.Second))
	if !x.satisfied(uid) {
		t.Error("not satisfied after the timeout")
	}
	x.raise("u2", 1)
	x.forget("u2")
	if !x.satisfied("u2") {
		t.Error("not satisfied once forgotten")
	}
}
