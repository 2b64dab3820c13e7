package admission

import (
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
)

// The property tests run propertySeeds seeds each; -seed replays a single one, e.g.
//
//	go test ./pkg/admission -run TestPropertyInterleavings -args -seed=1234
var replaySeed = flag.Uint64("seed", 0, "run the property tests for this seed only (0: every seed)")

// propertySeeds is how many seeds each property test runs, a tenth of it with -short.
const propertySeeds = 2000

// forEachSeed runs f for every seed (or the one given with -seed) and stops at the first seed
// whose f reports a problem, naming the seed so that it can be replayed.
func forEachSeed(t *testing.T, f func(seed uint64) []string) {
	t.Helper()
	n := uint64(propertySeeds)
	if testing.Short() {
		n /= 10
	}
	var seeds []uint64
	if *replaySeed != 0 {
		seeds = append(seeds, *replaySeed)
	} else {
		for s := range n {
			seeds = append(seeds, s+1)
		}
	}
	for _, seed := range seeds {
		if problems := f(seed); len(problems) > 0 {
			t.Fatalf("seed %d (replay: go test ./pkg/admission -run '%s' -args -seed=%d):\n%s",
				seed, t.Name(), seed, strings.Join(problems, "\n"))
		}
	}
}

// The oracle below re-derives what Decide must have done from SPEC section 3, without calling the
// package's own helpers (IsLive, MaxPerSession, ...), so a bug there cannot hide itself.

func specLive(c *airlockv1alpha1.SandboxClaim) bool {
	if c.DeletionTimestamp != nil {
		return false
	}
	switch c.Status.Phase {
	case airlockv1alpha1.ClaimRefused:
		return false
	case airlockv1alpha1.ClaimFailed:
		return c.Status.ReplacedBy == ""
	}
	return true
}

// specHoldsSlot: Binding, Bound, or Reaping with its pod still there, and not being deleted.
func specHoldsSlot(c *airlockv1alpha1.SandboxClaim, podGone map[string]bool) bool {
	if c.DeletionTimestamp != nil {
		return false
	}
	switch c.Status.Phase {
	case airlockv1alpha1.ClaimBinding, airlockv1alpha1.ClaimBound:
		return true
	case airlockv1alpha1.ClaimReaping:
		return !podGone[c.Name]
	}
	return false
}

// specUndecided: the claims that Decide walks.
func specUndecided(c *airlockv1alpha1.SandboxClaim) bool {
	if c.DeletionTimestamp != nil {
		return false
	}
	switch c.Status.Phase {
	case airlockv1alpha1.ClaimBinding, airlockv1alpha1.ClaimBound, airlockv1alpha1.ClaimReaping,
		airlockv1alpha1.ClaimFailed, airlockv1alpha1.ClaimRefused:
		return false
	}
	return true
}

func limit(v, def int32) int {
	if v <= 0 {
		return int(def)
	}
	return int(v)
}

func specMaxPerSession(rt *airlockv1alpha1.AgentRuntime) int {
	return limit(rt.Spec.Sandbox.MaxPerSession, 3)
}
func specMaxConcurrent(rt *airlockv1alpha1.AgentRuntime) int {
	return limit(rt.Spec.Sandbox.MaxConcurrent, 5)
}

func specEntry(in Input, rt *airlockv1alpha1.AgentRuntime, sandbox string) *airlockv1alpha1.RegistrySandbox {
	reg := in.Registries[rt.Spec.ToolRegistryRef.Name]
	if reg == nil {
		return nil
	}
	for i := range reg.Spec.Sandboxes {
		if reg.Spec.Sandboxes[i].Name == sandbox {
			return &reg.Spec.Sandboxes[i]
		}
	}
	return nil
}

// older orders claims as the walk must: creationTimestamp, then name.
func older(a, b *airlockv1alpha1.SandboxClaim) int {
	if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
		return c
	}
	return strings.Compare(a.Name, b.Name)
}

// applied is what the controller writes after a Decide: Admit → Binding, Queue → Queued,
// Refuse → Refused with the reason; deleting and already decided claims are left alone. The
// claims of in are not modified.
func applied(in Input, out map[string]Decision) Input {
	next := in
	next.Claims = make([]*airlockv1alpha1.SandboxClaim, 0, len(in.Claims))
	for _, c := range in.Claims {
		if c == nil {
			continue
		}
		if specUndecided(c) {
			c = c.DeepCopy()
			applyTo(c, out[c.Name])
		}
		next.Claims = append(next.Claims, c)
	}
	return next
}

func applyTo(c *airlockv1alpha1.SandboxClaim, d Decision) {
	switch d.Action {
	case Admit:
		c.Status.Phase, c.Status.Reason = airlockv1alpha1.ClaimBinding, ""
	case Queue:
		c.Status.Phase, c.Status.Reason = airlockv1alpha1.ClaimQueued, ""
	case Refuse:
		c.Status.Phase, c.Status.Reason = airlockv1alpha1.ClaimRefused, d.Reason
	}
}

type counts struct {
	session map[sessionKey]int
	sandbox map[sandboxKey]int
	running map[string]int
}

// countClaims counts the live claims per session and registry sandbox, and the slots held per
// runtime. With onlyDecided, claims not yet walked (Pending, Queued) are left out of all three.
func countClaims(in Input, claims []*airlockv1alpha1.SandboxClaim, onlyDecided bool) counts {
	n := counts{session: map[sessionKey]int{}, sandbox: map[sandboxKey]int{}, running: map[string]int{}}
	for _, c := range claims {
		if c == nil || (onlyDecided && specUndecided(c)) {
			continue
		}
		if specLive(c) {
			n.session[sessionKey{claimRuntime(c), c.Spec.Session}]++
			if rt := in.Runtimes[c.Spec.RuntimeName]; rt != nil {
				n.sandbox[sandboxKey{rt.Spec.ToolRegistryRef.Name, c.Spec.Sandbox}]++
			}
		}
		if specHoldsSlot(c, in.PodGone) {
			n.running[c.Spec.RuntimeName]++
		}
	}
	return n
}

// checkDecide checks one Decide(in) = out against SPEC section 3, for any input: every claim has a
// decision; claims not walked keep the decision of their phase; walked claims are refused for the
// right reason; after the decisions are applied, no counter that a walked claim joined is over its
// limit; nothing is queued or refused for a limit that was not reached; and the admitted set is the
// oldest.
func checkDecide(in Input, out map[string]Decision) []string {
	var problems []string
	fail := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }

	var walked []*airlockv1alpha1.SandboxClaim
	seen := map[string]bool{}
	for _, c := range in.Claims {
		if c == nil {
			continue
		}
		seen[c.Name] = true
		d, ok := out[c.Name]
		if !ok {
			fail("claim %s has no decision", c.Name)
			continue
		}
		var want *Decision
		switch {
		case c.DeletionTimestamp != nil || !specUndecided(c):
			switch c.Status.Phase {
			case airlockv1alpha1.ClaimBinding, airlockv1alpha1.ClaimBound, airlockv1alpha1.ClaimReaping, airlockv1alpha1.ClaimFailed:
				want = &Decision{Action: Admit}
			case airlockv1alpha1.ClaimRefused:
				want = &Decision{Action: Refuse, Reason: c.Status.Reason}
			default:
				want = &Decision{Action: Queue}
			}
		default:
			walked = append(walked, c)
			rt := in.Runtimes[c.Spec.RuntimeName]
			switch {
			case rt == nil:
				want = &Decision{Action: Refuse, Reason: ReasonRuntimeNotFound}
			case !rt.Spec.Sandbox.Enabled:
				want = &Decision{Action: Refuse, Reason: ReasonDisabled}
			case specEntry(in, rt, c.Spec.Sandbox) == nil:
				want = &Decision{Action: Refuse, Reason: ReasonUnknownSandbox}
			default:
				switch d {
				case Decision{Action: Admit}, Decision{Action: Queue},
					Decision{Action: Refuse, Reason: ReasonMaxPerSession}, Decision{Action: Refuse, Reason: ReasonMaxInstances}:
				default:
					fail("claim %s: decision %+v is not Admit, Queue or a limit's refusal", c.Name, d)
				}
			}
		}
		if want != nil && d != *want {
			fail("claim %s (phase %q, deleting %v): decision %+v, want %+v", c.Name, c.Status.Phase, c.DeletionTimestamp != nil, d, *want)
		}
	}
	for name := range out {
		if !seen[name] {
			fail("decision for %s, which is not a claim", name)
		}
	}

	after := countClaims(in, applied(in, out).Claims, false)
	before := countClaims(in, in.Claims, true) // the sticky claims only
	joinedSession, joinedSandbox, joinedRuntime := map[sessionKey]bool{}, map[sandboxKey]bool{}, map[string]bool{}
	slices.SortFunc(walked, older)
	queuedIn, perSessionRefusedIn, maxInstancesRefusedIn := map[string]string{}, map[sessionKey]string{}, map[sandboxKey]string{}
	for _, c := range walked {
		d := out[c.Name]
		rt := in.Runtimes[c.Spec.RuntimeName]
		if rt == nil || !rt.Spec.Sandbox.Enabled {
			continue
		}
		entry := specEntry(in, rt, c.Spec.Sandbox)
		if entry == nil {
			continue
		}
		sk := sessionKey{claimRuntime(c), c.Spec.Session}
		xk := sandboxKey{rt.Spec.ToolRegistryRef.Name, c.Spec.Sandbox}
		switch d {
		case Decision{Action: Admit}, Decision{Action: Queue}:
			joinedSession[sk], joinedSandbox[xk] = true, true
			if d.Action == Admit {
				joinedRuntime[c.Spec.RuntimeName] = true
				if q, ok := queuedIn[c.Spec.RuntimeName]; ok {
					fail("claim %s is Queued but the younger %s of runtime %s is Admitted", q, c.Name, c.Spec.RuntimeName)
				}
			} else {
				if _, ok := queuedIn[c.Spec.RuntimeName]; !ok {
					queuedIn[c.Spec.RuntimeName] = c.Name
				}
				if n, lim := after.running[c.Spec.RuntimeName], specMaxConcurrent(rt); n < lim {
					fail("claim %s is Queued, yet runtime %s holds %d of %d slots", c.Name, c.Spec.RuntimeName, n, lim)
				}
			}
			if r, ok := perSessionRefusedIn[sk]; ok {
				fail("claim %s is refused MaxPerSession but the younger %s of its session is %s", r, c.Name, d.Action)
			}
			if r, ok := maxInstancesRefusedIn[xk]; ok {
				fail("claim %s is refused MaxInstances but the younger %s of its sandbox is %s", r, c.Name, d.Action)
			}
		case Decision{Action: Refuse, Reason: ReasonMaxPerSession}:
			if _, ok := perSessionRefusedIn[sk]; !ok {
				perSessionRefusedIn[sk] = c.Name
			}
			if n, lim := after.session[sk], specMaxPerSession(rt); n < lim {
				fail("claim %s is refused MaxPerSession, yet session %v holds %d of %d", c.Name, sk, n, lim)
			}
		case Decision{Action: Refuse, Reason: ReasonMaxInstances}:
			if _, ok := maxInstancesRefusedIn[xk]; !ok {
				maxInstancesRefusedIn[xk] = c.Name
			}
			if n, lim := after.sandbox[xk], limit(entry.MaxInstances, 10); n < lim {
				fail("claim %s is refused MaxInstances, yet sandbox %v holds %d of %d", c.Name, xk, n, lim)
			}
		}
	}
	// A counter that a walked claim joined is within its limit; one that none joined holds no
	// more than its sticky claims did.
	for sk, n := range after.session {
		if rt := in.Runtimes[sk.runtime.name]; rt != nil && joinedSession[sk] && n > specMaxPerSession(rt) {
			fail("session %v: %d live claims, maxPerSession %d", sk, n, specMaxPerSession(rt))
		}
		if !joinedSession[sk] && n > before.session[sk] {
			fail("session %v grew from %d to %d without a walked claim joining it", sk, before.session[sk], n)
		}
	}
	for xk, n := range after.sandbox {
		if lim := sandboxLimit(in, xk); joinedSandbox[xk] && n > lim {
			fail("registry sandbox %v: %d live claims, maxInstances %d", xk, n, lim)
		}
		if !joinedSandbox[xk] && n > before.sandbox[xk] {
			fail("registry sandbox %v grew from %d to %d without a walked claim joining it", xk, before.sandbox[xk], n)
		}
	}
	for name, n := range after.running {
		if rt := in.Runtimes[name]; rt != nil && joinedRuntime[name] && n > specMaxConcurrent(rt) {
			fail("runtime %s: %d claims hold slots, maxConcurrent %d", name, n, specMaxConcurrent(rt))
		}
		if !joinedRuntime[name] && n > before.running[name] {
			fail("runtime %s grew from %d to %d slots without a walked claim admitted", name, before.running[name], n)
		}
	}
	return problems
}

func sandboxLimit(in Input, xk sandboxKey) int {
	if reg := in.Registries[xk.registry]; reg != nil {
		for _, sb := range reg.Spec.Sandboxes {
			if sb.Name == xk.sandbox {
				return limit(sb.MaxInstances, 10)
			}
		}
	}
	return 0
}

// checkInvariant is SPEC section 3's invariant over a namespace that only ever changed through the
// lifecycle: never more live claims than maxPerSession per session or maxInstances per registry
// sandbox, never more Binding+Bound (+Reaping with its pod) than maxConcurrent per runtime. Claims
// not decided yet are left out: nothing has let them in.
func checkInvariant(in Input) []string {
	var problems []string
	n := countClaims(in, in.Claims, true)
	for sk, v := range n.session {
		if rt := in.Runtimes[sk.runtime.name]; rt != nil && v > specMaxPerSession(rt) {
			problems = append(problems, fmt.Sprintf("invariant: session %v has %d live claims, maxPerSession %d", sk, v, specMaxPerSession(rt)))
		}
	}
	for xk, v := range n.sandbox {
		if lim := sandboxLimit(in, xk); v > lim {
			problems = append(problems, fmt.Sprintf("invariant: registry sandbox %v has %d live claims, maxInstances %d", xk, v, lim))
		}
	}
	for name, v := range n.running {
		if rt := in.Runtimes[name]; rt != nil && v > specMaxConcurrent(rt) {
			problems = append(problems, fmt.Sprintf("invariant: runtime %s has %d claims holding slots, maxConcurrent %d", name, v, specMaxConcurrent(rt)))
		}
	}
	return problems
}

// describe lists a namespace for a failure message, oldest claim first.
func describe(in Input) string {
	var b strings.Builder
	for _, name := range sortedKeys(in.Runtimes) {
		rt := in.Runtimes[name]
		if rt == nil {
			fmt.Fprintf(&b, "  runtime %s: nil\n", name)
			continue
		}
		fmt.Fprintf(&b, "  runtime %s: registry=%s enabled=%v maxConcurrent=%d maxPerSession=%d\n", name,
			rt.Spec.ToolRegistryRef.Name, rt.Spec.Sandbox.Enabled, rt.Spec.Sandbox.MaxConcurrent, rt.Spec.Sandbox.MaxPerSession)
	}
	for _, name := range sortedKeys(in.Registries) {
		fmt.Fprintf(&b, "  registry %s:", name)
		if in.Registries[name] == nil {
			b.WriteString(" nil\n")
			continue
		}
		for _, sb := range in.Registries[name].Spec.Sandboxes {
			fmt.Fprintf(&b, " %s(maxInstances %d)", sb.Name, sb.MaxInstances)
		}
		b.WriteString("\n")
	}
	claims := slices.DeleteFunc(slices.Clone(in.Claims), func(c *airlockv1alpha1.SandboxClaim) bool { return c == nil })
	if len(claims) < len(in.Claims) {
		fmt.Fprintf(&b, "  %d nil claims\n", len(in.Claims)-len(claims))
	}
	slices.SortFunc(claims, older)
	for _, c := range claims {
		fmt.Fprintf(&b, "  claim %s: t=%d runtime=%s session=%s sandbox=%s phase=%q reason=%q deleting=%v replacedBy=%q podGone=%v\n",
			c.Name, c.CreationTimestamp.Unix()-t0.Unix(), c.Spec.RuntimeName, c.Spec.Session, c.Spec.Sandbox, c.Status.Phase,
			c.Status.Reason, c.DeletionTimestamp != nil, c.Status.ReplacedBy, in.PodGone[c.Name])
	}
	return b.String()
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// randomPolicy makes 1 to 3 registries with 1 to 3 of the sandboxes a, b, c each, and 1 to 4
// runtimes over them (sometimes on a registry that does not exist, sometimes disabled). Limits
// are small, and zero (the CRD default) now and then.
func randomPolicy(rng *rand.Rand) (map[string]*airlockv1alpha1.AgentRuntime, map[string]*airlockv1alpha1.ToolRegistry) {
	registries := map[string]*airlockv1alpha1.ToolRegistry{}
	nRegistries := 1 + rng.IntN(3)
	for i := range nRegistries {
		name := fmt.Sprintf("reg%d", i)
		r := &airlockv1alpha1.ToolRegistry{ObjectMeta: metav1.ObjectMeta{Name: name}}
		for _, sb := range []string{"a", "b", "c"} {
			if rng.IntN(5) == 0 && len(r.Spec.Sandboxes) > 0 {
				continue
			}
			r.Spec.Sandboxes = append(r.Spec.Sandboxes, airlockv1alpha1.RegistrySandbox{Name: sb, Class: "k", MaxInstances: smallLimit(rng, 5)})
		}
		registries[name] = r
	}
	runtimes := map[string]*airlockv1alpha1.AgentRuntime{}
	for i := range 1 + rng.IntN(4) {
		name := fmt.Sprintf("rt%d", i)
		registry := fmt.Sprintf("reg%d", rng.IntN(nRegistries))
		if rng.IntN(12) == 0 {
			registry = "reg-missing"
		}
		runtimes[name] = &airlockv1alpha1.AgentRuntime{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: airlockv1alpha1.AgentRuntimeSpec{
				ToolRegistryRef: airlockv1alpha1.LocalObjectReference{Name: registry},
				Sandbox: airlockv1alpha1.SandboxPolicy{
					Enabled:       rng.IntN(10) != 0,
					MaxConcurrent: smallLimit(rng, 4),
					MaxPerSession: smallLimit(rng, 3),
				},
			},
		}
	}
	return runtimes, registries
}

// smallLimit is 1..lim, or 0 (the CRD default) one time in eight.
func smallLimit(rng *rand.Rand, lim int) int32 {
	if rng.IntN(8) == 0 {
		return 0
	}
	return int32(1 + rng.IntN(lim))
}

// randomSpec picks a runtime (one time in twenty one that does not exist), a session and a
// sandbox (one time in fifteen one that no registry has).
func randomSpec(rng *rand.Rand, runtimes map[string]*airlockv1alpha1.AgentRuntime) airlockv1alpha1.SandboxClaimSpec {
	rt := fmt.Sprintf("rt%d", rng.IntN(len(runtimes)))
	if rng.IntN(20) == 0 {
		rt = "rt-ghost"
	}
	sandbox := []string{"a", "b", "c"}[rng.IntN(3)]
	if rng.IntN(15) == 0 {
		sandbox = "zz"
	}
	return airlockv1alpha1.SandboxClaimSpec{
		RuntimeName: rt,
		Session:     fmt.Sprintf("s%d", rng.IntN(3)),
		Sandbox:     sandbox,
		Handle:      sandbox + "/default",
	}
}

func newPropertyClaim(name string, at int, spec airlockv1alpha1.SandboxClaimSpec) *airlockv1alpha1.SandboxClaim {
	return &airlockv1alpha1.SandboxClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(t0.Add(time.Duration(at) * time.Second))},
		Spec:       spec,
		Status:     airlockv1alpha1.SandboxClaimStatus{Phase: airlockv1alpha1.ClaimPending},
	}
}

var allPhases = []airlockv1alpha1.ClaimPhase{
	"", airlockv1alpha1.ClaimPending, airlockv1alpha1.ClaimQueued, airlockv1alpha1.ClaimBinding,
	airlockv1alpha1.ClaimBound, airlockv1alpha1.ClaimReaping, airlockv1alpha1.ClaimRefused, airlockv1alpha1.ClaimFailed,
}

// randomNamespace is a namespace in any state at all, limits already exceeded included: claims in
// every phase, creation times with many ties, some being deleted, some Failed ones replaced, some
// Reaping pods gone, now and then nil entries.
func randomNamespace(rng *rand.Rand) Input {
	runtimes, registries := randomPolicy(rng)
	in := Input{Runtimes: runtimes, Registries: registries, PodGone: map[string]bool{}}
	for i := range rng.IntN(40) {
		c := newPropertyClaim(fmt.Sprintf("c%02d-%d", rng.IntN(100), i), rng.IntN(15), randomSpec(rng, runtimes))
		c.Status.Phase = allPhases[rng.IntN(len(allPhases))]
		switch c.Status.Phase {
		case airlockv1alpha1.ClaimRefused:
			c.Status.Reason = []string{ReasonMaxPerSession, ReasonMaxInstances, ReasonDisabled, ""}[rng.IntN(4)]
		case airlockv1alpha1.ClaimFailed:
			if rng.IntN(2) == 0 {
				c.Status.ReplacedBy = c.Name + "-r1"
			}
		case airlockv1alpha1.ClaimReaping:
			in.PodGone[c.Name] = rng.IntN(2) == 0
		}
		if rng.IntN(8) == 0 {
			now := metav1.NewTime(t0.Add(time.Hour))
			c.DeletionTimestamp = &now
		}
		in.Claims = append(in.Claims, c)
	}
	// Odd but possible input: nil entries, and no pod-gone map at all.
	if rng.IntN(10) == 0 {
		in.PodGone = nil
	}
	if rng.IntN(10) == 0 {
		in.Claims = slices.Insert(in.Claims, rng.IntN(len(in.Claims)+1), nil)
	}
	if rng.IntN(10) == 0 {
		in.Runtimes["rt-ghost"] = nil
	}
	if rng.IntN(10) == 0 {
		in.Registries["reg-missing"] = nil
	}
	return in
}

// TestPropertyDecide decides random namespaces in any state and checks each decision against the
// oracle, and that Decide mutates nothing, does not depend on the order of its input, and is a
// fixed point: deciding again after the decisions are applied changes none of them.
func TestPropertyDecide(t *testing.T) {
	forEachSeed(t, func(seed uint64) []string {
		rng := rand.New(rand.NewPCG(seed, 0xad315510))
		in := randomNamespace(rng)
		before := copyInput(in)
		out := Decide(in)
		problems := checkDecide(in, out)
		// reflect.DeepEqual first: cmp.Diff over every seed's objects would be most of the test's time.
		if !reflect.DeepEqual(before, in) {
			problems = append(problems, "Decide mutated its input (-before +after):\n"+cmp.Diff(before, in))
		}

		shuffled := in
		shuffled.Claims = slices.Clone(in.Claims)
		rng.Shuffle(len(shuffled.Claims), func(i, j int) { shuffled.Claims[i], shuffled.Claims[j] = shuffled.Claims[j], shuffled.Claims[i] })
		if again := Decide(shuffled); !maps.Equal(out, again) {
			problems = append(problems, "Decide depends on the order of the claims (-in order +shuffled):\n"+cmp.Diff(out, again))
		}

		if again := Decide(applied(in, out)); !maps.Equal(out, again) {
			problems = append(problems, "deciding again after applying the decisions changes them (-first +second):\n"+cmp.Diff(out, again))
		}
		if len(problems) > 0 {
			problems = append(problems, "namespace:\n"+describe(in))
		}
		return problems
	})
}

// sim is one namespace living through random interleavings of the lifecycle: the Sandbox API
// creates claims (sometimes two replicas at once, each deciding on its own stale snapshot), the
// leader decides and applies, pods bind or fail, Failed claims are replaced, idle claims are
// reaped, claims are deleted.
type sim struct {
	rng     *rand.Rand
	in      Input // the namespace as the API server has it
	now     int   // seconds after t0
	next    int   // for unique claim names
	stale   [2][]*airlockv1alpha1.SandboxClaim
	decides int
	tally   map[string]int // walked claims' decisions, to show the generator reaches every rule
}

func (s *sim) name() string {
	s.next++
	// A random prefix makes the name tiebreak unrelated to creation order.
	return fmt.Sprintf("c%02d-%d", s.rng.IntN(100), s.next)
}

// create is the Sandbox API creating a Pending claim at, seconds after t0.
func (s *sim) create(at int, spec airlockv1alpha1.SandboxClaimSpec) {
	s.in.Claims = append(s.in.Claims, newPropertyClaim(s.name(), at, spec))
}

// pick returns a random claim that matches, or nil.
func (s *sim) pick(match func(*airlockv1alpha1.SandboxClaim) bool) *airlockv1alpha1.SandboxClaim {
	var candidates []*airlockv1alpha1.SandboxClaim
	for _, c := range s.in.Claims {
		if match(c) {
			candidates = append(candidates, c)
		}
	}
	if len(candidates) == 0 {
		return nil
	}
	return candidates[s.rng.IntN(len(candidates))]
}

func inPhase(p airlockv1alpha1.ClaimPhase) func(*airlockv1alpha1.SandboxClaim) bool {
	return func(c *airlockv1alpha1.SandboxClaim) bool { return c.DeletionTimestamp == nil && c.Status.Phase == p }
}

func snapshot(claims []*airlockv1alpha1.SandboxClaim) []*airlockv1alpha1.SandboxClaim {
	out := make([]*airlockv1alpha1.SandboxClaim, len(claims))
	for i, c := range claims {
		out[i] = c.DeepCopy()
	}
	return out
}

// replicas: two API replicas, each deciding against its own stale snapshot whether a new claim
// would be refused, and creating it when not; the two claims often share a session.
func (s *sim) replicas() {
	spec := randomSpec(s.rng, s.in.Runtimes)
	for i := range s.stale {
		if s.stale[i] == nil || s.rng.IntN(3) == 0 {
			s.stale[i] = snapshot(s.in.Claims)
		}
		if i == 1 && s.rng.IntN(2) == 0 {
			spec = randomSpec(s.rng, s.in.Runtimes)
		}
		proposed := newPropertyClaim(s.name(), s.now, spec)
		view := s.in
		view.Claims = append(slices.Clone(s.stale[i]), proposed)
		if Decide(view)[proposed.Name].Action != Refuse {
			s.in.Claims = append(s.in.Claims, proposed)
		}
	}
}

// leader decides, checks the decision, applies it as the controller would, and checks the
// invariant on the result.
func (s *sim) leader() []string {
	s.decides++
	out := Decide(s.in)
	problems := checkDecide(s.in, out)
	for _, c := range s.in.Claims {
		if specUndecided(c) {
			d := out[c.Name]
			s.tally[strings.TrimSpace(fmt.Sprintf("%s %s %s", c.Status.Phase, d.Action, d.Reason))]++
			applyTo(c, d)
		}
	}
	return append(problems, checkInvariant(s.in)...)
}

func (s *sim) step() []string {
	rng := s.rng
	switch r := rng.IntN(100); {
	case r < 25: // an acquire
		s.create(s.now, randomSpec(rng, s.in.Runtimes))
		s.now += rng.IntN(2) // equal timestamps half the time
	case r < 29: // a claim the leader's cache sees late: older than claims it has decided
		s.create(s.now-rng.IntN(10), randomSpec(rng, s.in.Runtimes))
	case r < 37: // two replicas racing, then the leader
		s.replicas()
		s.now += rng.IntN(2)
		return s.leader()
	case r < 57:
		return s.leader()
	case r < 64:
		if c := s.pick(inPhase(airlockv1alpha1.ClaimBinding)); c != nil {
			c.Status.Phase = airlockv1alpha1.ClaimBound
		}
	case r < 67:
		if c := s.pick(inPhase(airlockv1alpha1.ClaimBinding)); c != nil {
			c.Status.Phase, c.Status.Reason = airlockv1alpha1.ClaimFailed, "StartupTimeout"
		}
	case r < 70: // the next acquire of a Failed handle replaces it, once
		if c := s.pick(func(c *airlockv1alpha1.SandboxClaim) bool {
			return inPhase(airlockv1alpha1.ClaimFailed)(c) && c.Status.ReplacedBy == "" && c.Spec.Replaces == ""
		}); c != nil {
			spec := c.Spec
			spec.Replaces = c.Name
			r1 := newPropertyClaim(c.Name+"-r1", s.now, spec)
			c.Status.ReplacedBy = r1.Name
			s.in.Claims = append(s.in.Claims, r1)
		}
	case r < 77:
		if c := s.pick(inPhase(airlockv1alpha1.ClaimBound)); c != nil {
			c.Status.Phase = airlockv1alpha1.ClaimReaping
		}
	case r < 83:
		if c := s.pick(inPhase(airlockv1alpha1.ClaimReaping)); c != nil {
			s.in.PodGone[c.Name] = true
		}
	case r < 92: // deletions: reaped, refused, timed out in the queue, or by hand
		if c := s.pick(func(c *airlockv1alpha1.SandboxClaim) bool { return c.DeletionTimestamp == nil }); c != nil {
			gone := metav1.NewTime(t0.Add(time.Duration(s.now) * time.Second))
			c.DeletionTimestamp = &gone
		}
	case r < 97: // finalizers done: deleting claims disappear
		s.in.Claims = slices.DeleteFunc(s.in.Claims, func(c *airlockv1alpha1.SandboxClaim) bool {
			if c.DeletionTimestamp != nil {
				delete(s.in.PodGone, c.Name)
				return true
			}
			return false
		})
	default: // an administrator enables a runtime, or now and then disables one
		rt := s.in.Runtimes[fmt.Sprintf("rt%d", rng.IntN(len(s.in.Runtimes)))]
		rt.Spec.Sandbox.Enabled = !rt.Spec.Sandbox.Enabled || rng.IntN(4) != 0
	}
	// Between leader decisions the decided claims stay within the limits too.
	return checkInvariant(s.in)
}

// TestPropertyInterleavings runs random lifecycles from an empty namespace and checks, after every
// step and in particular after every leader Decide applied, that SPEC section 3's invariant holds,
// and every decision against the oracle of checkDecide.
func TestPropertyInterleavings(t *testing.T) {
	const steps = 100
	total, tally := 0, map[string]int{}
	forEachSeed(t, func(seed uint64) []string {
		s := newSim(seed)
		for i := range steps {
			if problems := s.step(); len(problems) > 0 {
				// Replay the seed up to the failing step to show the namespace it started from.
				replay := newSim(seed)
				for range i {
					replay.step()
				}
				return append(problems, fmt.Sprintf("at step %d; namespace before the step:\n%s", i, describe(replay.in)))
			}
		}
		total += s.decides
		for k, v := range s.tally {
			tally[k] += v
		}
		return nil
	})
	t.Logf("%d leader decisions checked; walked claims by phase and decision:", total)
	for _, k := range sortedKeys(tally) {
		t.Logf("  %-42s %d", k, tally[k])
	}
}

func newSim(seed uint64) *sim {
	rng := rand.New(rand.NewPCG(seed, 0x1eade7))
	runtimes, registries := randomPolicy(rng)
	return &sim{rng: rng, in: Input{Runtimes: runtimes, Registries: registries, PodGone: map[string]bool{}}, tally: map[string]int{}}
}
