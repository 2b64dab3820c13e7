package warmpool

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	core "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/sandboxpod/sandboxpodtest"
	"github.com/airlock-dev/airlock/pkg/warmsize"
	"github.com/airlock-dev/airlock/pkg/workspace"
)

// demandRegistry is warmRegistry with a pool that follows demand within [min, max], at the
// default headroom (50%).
func demandRegistry(min, max int32) *airlockv1alpha1.ToolRegistry {
	reg := warmRegistry(0)
	reg.Spec.Sandboxes[0].MaxInstances = 1000
	reg.Spec.Sandboxes[0].WarmPolicy = &airlockv1alpha1.WarmPolicy{Min: min, Max: max}
	return reg
}

// testRuntime is the runtime "agent" of the registry "tools", whose UID the fixtures' claims carry.
func testRuntime() *airlockv1alpha1.AgentRuntime {
	return &airlockv1alpha1.AgentRuntime{
		ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: testNamespace, UID: "uid-rt-agent"},
		Spec: airlockv1alpha1.AgentRuntimeSpec{
			ServiceAccountName: "agent",
			ToolRegistryRef:    airlockv1alpha1.LocalObjectReference{Name: "tools"},
		},
	}
}

// demandFixture is a fixture with a registry whose pool follows demand, its runtime and class,
// and the given pods and policies cached.
func demandFixture(t *testing.T, min, max int32, pods []*corev1.Pod, policies ...*networkingv1.NetworkPolicy) *fixture {
	f := newFixture(t)
	f.registries = append(f.registries, demandRegistry(min, max))
	f.runtimes = append(f.runtimes, testRuntime())
	f.classes = append(f.classes, newClass("codegen"))
	f.pods = append(f.pods, pods...)
	f.netpols = append(f.netpols, policies...)
	return f
}

// arrivals feeds the controller's claim handler claims of the fixtures' runtime and sandbox
// at perSecond for d, on the fake clock, each created at the moment it arrives; every second it
// calls each (a sync, as the worker would after the arrivals' enqueues).
type arrivals struct {
	f    *fixture
	c    *Controller
	n    int
	each func()
}

func (a *arrivals) at(perSecond float64, d time.Duration) {
	gap := time.Duration(float64(time.Second) / perSecond)
	start := a.f.clock.Now()
	nextSecond := start.Add(time.Second)
	for now := start; now.Before(start.Add(d)); now = now.Add(gap) {
		if !now.Before(nextSecond) {
			a.f.clock.SetTime(nextSecond)
			a.each()
			nextSecond = nextSecond.Add(time.Second)
		}
		a.f.clock.SetTime(now)
		a.n++
		name := fmt.Sprintf("agent-%010x", a.n)
		a.c.addClaim(sandboxpodtest.Claim(name, "s-"+name, "", now))
	}
	a.f.clock.SetTime(start.Add(d))
	a.each()
}

// quiet lets d pass with no claim, calling each every second.
func (a *arrivals) quiet(d time.Duration) {
	for end := a.f.clock.Now().Add(d); a.f.clock.Now().Before(end); {
		a.f.clock.Step(time.Second)
		a.each()
	}
}

// poolStatus returns the status the last sync wrote of the registry's pool "codegen".
func (f *fixture) poolStatus() airlockv1alpha1.WarmPoolStatus {
	f.t.Helper()
	written := f.written("toolregistries", "status").(*airlockv1alpha1.ToolRegistry)
	for _, st := range written.Status.Warm {
		if st.Name == "codegen" {
			return st
		}
	}
	f.t.Fatalf("no status of the pool codegen in %+v", written.Status)
	return airlockv1alpha1.WarmPoolStatus{}
}

// measuredReady gives the controller's pool "codegen" a measured ready time d.
func measuredReady(c *Controller, d time.Duration) {
	r := &warmsize.ReadyTime{}
	r.Observe(d)
	c.demand.ready[poolRef{registry: "uid-reg-tools", entry: "codegen"}] = r
}

// TestDemandPoolFollowsABurst (issue 40 item 3): steady 2 claims a second, members Ready in
// 1.2 s: the pool's target is ceil(2 × 1.2 × 1.5) + 1 = 5; a 10× burst doubles it within two
// seconds and brings it to ceil(20 × 1.2 × 1.5) + 1 = 37; back at 2/s, it decays to 5 within
// five minutes. The status says the rate, the ready time and the sizing.
func TestDemandPoolFollowsABurst(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := demandFixture(t, 0, 100, nil, currentPolicy())
	f.defaultDenyErr = errors.New("not in this test") // sizing only: no member is created
	c := f.newController(ctx, 1000)
	measuredReady(c, 1200*time.Millisecond)
	var targets []int32
	sync := func() {
		if _, err := c.sync(ctx, registryKey()); err != nil {
			t.Fatal(err)
		}
		targets = append(targets, f.poolStatus().Wanted)
	}
	a := &arrivals{f: f, c: c, each: sync}

	a.at(2, 10*time.Minute)
	st := f.poolStatus()
	if st.Wanted != 5 {
		t.Fatalf("at a steady 2/s: wanted %d (%s), want 5", st.Wanted, st.Sizing)
	}
	if st.ArrivalsPerMinute == nil || st.ArrivalsPerMinute.Cmp(resource.MustParse("120")) != 0 || st.ReadyMilliseconds != 1200 {
		t.Errorf("status: %v claims a minute, ready %d ms, want 120 and 1200", st.ArrivalsPerMinute, st.ReadyMilliseconds)
	}
	if want := "5 = ceil(2 claims/s × ready 1.2s × 1.5) + 1, within [0, 100]"; st.Sizing != want {
		t.Errorf("sizing %q, want %q", st.Sizing, want)
	}

	targets = nil
	a.at(20, 2*time.Second)
	if got := targets[len(targets)-1]; got < 10 {
		t.Errorf("2 s into a 10× burst: targets %v, want 10 or more", targets)
	}
	a.at(20, 28*time.Second)
	if st := f.poolStatus(); st.Wanted != 37 {
		t.Errorf("at the end of the burst: wanted %d (%s), want 37", st.Wanted, st.Sizing)
	}

	targets = nil
	a.at(2, 5*time.Minute)
	back := slices.Index(targets, 5)
	if back < 0 || slices.ContainsFunc(targets[back:], func(n int32) bool { return n != 5 }) {
		t.Errorf("targets after the burst %v: want back at 5, and staying", targets)
	}
	t.Logf("back at the steady target %d s after the burst", back+1)
}

// TestDemandPoolBounds: with no claims the pool keeps min (and is not looked at again for its
// sizing's sake); however fast claims arrive, max; some minutes after the last, min again.
func TestDemandPoolBounds(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := demandFixture(t, 2, 8, nil, currentPolicy())
	c := f.newController(ctx, 100)
	requeue, err := c.sync(ctx, registryKey())
	if err != nil {
		t.Fatal(err)
	}
	st := f.poolStatus()
	if st.Wanted != 2 || len(f.createdOf("pods")) != 2 || requeue != nil {
		t.Errorf("no claims: wanted %d, created %d members, requeue %v; want min 2, 2, none", st.Wanted, len(f.createdOf("pods")), requeue)
	}
	if !strings.HasPrefix(st.Sizing, "2 = min: no claims") || st.ReadyMilliseconds != 2000 || !strings.Contains(st.Sizing, "default") {
		t.Errorf("sizing %q, ready %d ms: want min and the default ready time", st.Sizing, st.ReadyMilliseconds)
	}

	a := &arrivals{f: f, c: c, each: func() {
		if requeue, err = c.sync(ctx, registryKey()); err != nil {
			t.Fatal(err)
		}
	}}
	a.at(20, 5*time.Second)
	if st := f.poolStatus(); st.Wanted != 8 {
		t.Errorf("at 20/s: wanted %d (%s), want max 8", st.Wanted, st.Sizing)
	}
	// The claims stop: the rate decays to zero (not for ever), the pool to min, the timer stops.
	a.quiet(10 * time.Minute)
	if st := f.poolStatus(); st.Wanted != 2 || st.ArrivalsPerMinute.Sign() != 0 || requeue != nil {
		t.Errorf("10 min after the last claim: wanted %d, %v a minute (%s), requeue %v; want min 2, 0, none", st.Wanted, st.ArrivalsPerMinute, st.Sizing, requeue)
	}
}

// TestDemandPoolScalesDownGently: after demand falls, idle members beyond the target are kept
// for warmsize.ScaleDownDelay, and then deleted, the newest first, each only as the cache showed
// it, never below min; an adopted member is never touched. The wait is the sync's requeue.
func TestDemandPoolScalesDownGently(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	reg := demandRegistry(2, 20)
	var members []*corev1.Pod
	for i := range 7 {
		members = append(members, warmMember(reg, fmt.Sprintf("tools-codegen-member%06d", i), testRecord(), t0.Add(time.Duration(i)*time.Second), "10.244.0.40"))
	}
	adopted := warmMember(reg, "tools-codegen-adoptedadop", testRecord(), t0, "10.244.0.43")
	adoptBy("c1", adopted)
	f := demandFixture(t, 2, 20, append(slices.Clone(members), adopted), currentPolicy())
	f.clock.SetTime(t0.Add(time.Minute))
	c := f.newController(ctx, 100)
	for _, m := range members {
		c.keysWritten.Store(m.UID, struct{}{})
	}
	measuredReady(c, time.Second)
	// 4 claims a second for 10 s: ceil(4 × 1 × 1.5) + 1 = 7, the members there are.
	a := &arrivals{f: f, c: c, each: func() {}}
	a.at(4, 10*time.Second)
	if _, err := c.sync(ctx, registryKey()); err != nil {
		t.Fatal(err)
	}
	if st := f.poolStatus(); st.Wanted != 7 || st.Ready != 7 {
		t.Fatalf("during the claims: wanted %d ready %d (%s), want 7 and 7", st.Wanted, st.Ready, st.Sizing)
	}

	// The claims stop: once the burst window is past, the target is min, but the members stay.
	f.clock.Step(warmsize.BurstWindow + time.Second)
	requeue, err := c.sync(ctx, registryKey())
	if err != nil {
		t.Fatal(err)
	}
	if st := f.poolStatus(); st.Wanted != 2 || !strings.Contains(st.Sizing, "up to 7 kept") {
		t.Errorf("after the claims: wanted %d (%s), want 2 and 7 kept", st.Wanted, st.Sizing)
	}
	if deleted := f.deletedPods(); len(deleted) > 0 {
		t.Fatalf("deleted %v at once, want none before the scale-down delay", deleted)
	}
	if requeue == nil || *requeue < warmsize.ScaleDownDelay || *requeue > warmsize.ScaleDownDelay+time.Second {
		t.Fatalf("requeue %v, want the scale-down delay", requeue)
	}

	f.clock.Step(*requeue)
	if _, err := c.sync(ctx, registryKey()); err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, m := range members[2:] {
		want = append(want, m.Name)
	}
	deleted := f.deletedPods()
	slices.Sort(deleted)
	if !slices.Equal(deleted, want) {
		t.Errorf("deleted %v, want the 5 newest idle members %v (min 2 kept, the adopted one untouched)", deleted, want)
	}
	for _, act := range f.log {
		if del, ok := act.(core.DeleteAction); ok && del.GetResource().Resource == "pods" {
			if pre := del.GetDeleteOptions().Preconditions; pre == nil || pre.ResourceVersion == nil || *pre.ResourceVersion != "7" {
				t.Errorf("member %s deleted without the resourceVersion the cache showed: %+v", del.GetName(), pre)
			}
		}
	}
}

// deletedPods returns the names of the pods deleted.
func (f *fixture) deletedPods() []string {
	var out []string
	for _, a := range f.actions() {
		if name, ok := strings.CutPrefix(a, "delete pods "); ok {
			out = append(out, name)
		}
	}
	return out
}

// TestDemandCountsEligibleArrivals: a claim that could adopt a member is counted once, when the
// claim informer adds it, and brings its registry back; a claim of a session's workspace or a
// mount role, one the informer lists at the start (older than the horizon), and one of an
// earlier runtime of the same name (another UID) do not make the pool's rate, nor does one that
// resumes a kept workspace (it adopts only that workspace's resume member, or starts cold).
func TestDemandCountsEligibleArrivals(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := demandFixture(t, 0, 10, nil, currentPolicy())
	f.clock.SetTime(t0.Add(time.Hour))
	f.jobs = append(f.jobs, keptRecordOf("agent-back", t0))
	c := f.newController(ctx, 100)
	now := f.clock.Now()

	session := sandboxpodtest.Claim("agent-session", "s1", "", now)
	session.Spec.WorkspaceDir = testNamespace + "/sandboxes/sessions/0123456789"
	role := sandboxpodtest.Claim("agent-role", "s2", "", now)
	role.Spec.MountRole = "repo"
	listed := sandboxpodtest.Claim("agent-listed", "s3", "", now.Add(-warmsize.RateHorizon-time.Minute))
	other := sandboxpodtest.Claim("agent-other", "s4", "", now)
	other.Spec.RuntimeUID = "uid-rt-earlier"
	other.Spec.WorkspaceDir = testNamespace + "/sandboxes/" + workspace.ClaimDirName(other.Name, "uid-rt-earlier")
	for _, claim := range []*airlockv1alpha1.SandboxClaim{session, role, listed, other} {
		c.addClaim(claim)
	}
	if n := c.queue.Len(); n != 0 {
		t.Errorf("%d registries enqueued for claims that make no demand, want 0", n)
	}
	c.addClaim(sandboxpodtest.Claim("agent-fresh", "s5", "", now.Truncate(time.Second)))
	if n := c.queue.Len(); n != 1 {
		t.Errorf("%d registries enqueued for a fresh claim, want its registry", n)
	}
	// A claim that resumes the workspace its name kept adopts no pool member: its registry is
	// looked at again, its arrival is not counted.
	c.addClaim(sandboxpodtest.Claim("agent-back", "s6", "", now.Truncate(time.Second)))
	if _, err := c.sync(ctx, registryKey()); err != nil {
		t.Fatal(err)
	}
	// One claim in the five-second window: 12 a minute.
	if st := f.poolStatus(); st.ArrivalsPerMinute == nil || st.ArrivalsPerMinute.Cmp(resource.MustParse("12")) != 0 || st.Wanted != 2 {
		t.Errorf("one fresh claim: %v a minute, wanted %d; want 12 and 2 (%s)", st.ArrivalsPerMinute, st.Wanted, st.Sizing)
	}
}

// TestDemandMeasuresReadyTime: the ready time is the time from this process's creation of a
// member to the pod informer's first Ready of it.
func TestDemandMeasuresReadyTime(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := demandFixture(t, 1, 10, nil, currentPolicy())
	c := f.newController(ctx, 100)
	if _, err := c.sync(ctx, registryKey()); err != nil {
		t.Fatal(err)
	}
	created := f.createdOf("pods")
	if len(created) != 1 {
		t.Fatalf("created %d members, want min 1", len(created))
	}
	pod := created[0].(*corev1.Pod).DeepCopy()
	f.clock.Step(1500 * time.Millisecond)
	c.memberSeen(sandboxpodtest.AsCached(pod.DeepCopy(), t0, ""), false) // seen, not Ready yet
	f.clock.Step(time.Second)
	c.memberSeen(sandboxpodtest.AsCached(pod.DeepCopy(), t0, "10.244.0.40"), false)
	f.clock.Step(time.Second)
	c.memberSeen(sandboxpodtest.AsCached(pod.DeepCopy(), t0, "10.244.0.40"), false) // measured once
	if _, err := c.sync(ctx, registryKey()); err != nil {
		t.Fatal(err)
	}
	if st := f.poolStatus(); st.ReadyMilliseconds != 2500 || strings.Contains(st.Sizing, "default") {
		t.Errorf("ready %d ms (%s), want 2500 measured", st.ReadyMilliseconds, st.Sizing)
	}
}

// TestStaticPoolIgnoresDemand: a static pool (warm: 3) keeps 3 whatever the claims, reports no
// rate, and is not looked at again for sizing.
func TestStaticPoolIgnoresDemand(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := poolFixture(t, 3, nil, currentPolicy())
	f.runtimes = append(f.runtimes, testRuntime())
	c := f.newController(ctx, 100)
	var requeue *time.Duration
	a := &arrivals{f: f, c: c, each: func() {
		var err error
		if requeue, err = c.sync(ctx, registryKey()); err != nil {
			t.Fatal(err)
		}
	}}
	a.at(20, 5*time.Second)
	st := f.poolStatus()
	if st.Wanted != 3 || st.ArrivalsPerMinute != nil || st.Sizing != "" || st.ReadyMilliseconds != 0 || requeue != nil {
		t.Errorf("status %+v, requeue %v; want wanted 3, no sizing, no requeue", st, requeue)
	}
	if n := len(f.createdOf("pods")); n != 3 {
		t.Errorf("created %d members, want 3", n)
	}
}

// TestRefillFollowsDemand: members are created at --warm-refill-rate (5/s here) at the least, and
// as fast as claims arrive at the pools that follow demand when that is faster: a 20/s burst
// raises the limit to its measured rate, and a registry whose pool no longer follows demand, or
// that is gone, gives it back.
func TestRefillFollowsDemand(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := demandFixture(t, 0, 100, nil, currentPolicy())
	f.defaultDenyErr = errors.New("not in this test") // sizing only: no member is created
	c := f.newController(ctx, 5)
	measuredReady(c, 1200*time.Millisecond)
	sync := func() {
		if _, err := c.sync(ctx, registryKey()); err != nil {
			t.Fatal(err)
		}
	}
	if sync(); c.limiter.Limit() != 5 {
		t.Fatalf("with no claims: limit %v/s, want the floor 5", c.limiter.Limit())
	}
	a := &arrivals{f: f, c: c, each: sync}
	a.at(20, 10*time.Second)
	if got := float64(c.limiter.Limit()); got < 19 || got > 21 || c.limiter.Burst() < 19 {
		t.Errorf("during a 20/s burst: limit %v/s, burst %d; want about 20", got, c.limiter.Burst())
	}
	a.at(2, 10*time.Minute)
	if got := c.limiter.Limit(); got != 5 {
		t.Errorf("back at 2/s: limit %v/s, want the floor 5", got)
	}
	a.at(20, 10*time.Second)
	f.registries[0].Spec.Sandboxes[0].WarmPolicy = nil // a static pool now: its demand weighs nothing
	c2 := f.newController(ctx, 5)
	c2.demandRates = c.demandRates
	c2.limiter = c.limiter
	if _, err := c2.sync(ctx, registryKey()); err != nil {
		t.Fatal(err)
	}
	if got := c2.limiter.Limit(); got != 5 || len(c2.demandRates) != 0 {
		t.Errorf("the pool no longer follows demand: limit %v/s, rates %v; want the floor 5 and none", got, c2.demandRates)
	}
}
