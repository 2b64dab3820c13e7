package admission

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
)

// t0 is the creation time of the oldest claim of every table; claimSpec.at counts seconds after it.
var t0 = time.Date(2026, time.March, 1, 12, 0, 0, 0, time.UTC)

// claimSpec is a SandboxClaim in a table row. Empty runtime, session and sandbox default to "r1",
// "s1" and "box".
type claimSpec struct {
	name       string
	namespace  string
	runtime    string
	session    string
	sandbox    string
	at         int // seconds after t0
	phase      airlockv1alpha1.ClaimPhase
	reason     string
	deleting   bool
	replacedBy string
	replaces   string
}

func (s claimSpec) build() *airlockv1alpha1.SandboxClaim {
	c := &airlockv1alpha1.SandboxClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name:              s.name,
			Namespace:         orString(s.namespace, "team"),
			CreationTimestamp: metav1.NewTime(t0.Add(time.Duration(s.at) * time.Second)),
		},
		Spec: airlockv1alpha1.SandboxClaimSpec{
			RuntimeName: orString(s.runtime, "r1"),
			Session:     orString(s.session, "s1"),
			Sandbox:     orString(s.sandbox, "box"),
			Replaces:    s.replaces,
		},
		Status: airlockv1alpha1.SandboxClaimStatus{
			Phase:      s.phase,
			Reason:     s.reason,
			ReplacedBy: s.replacedBy,
		},
	}
	c.Spec.Handle = c.Spec.Sandbox + "/default"
	if s.deleting {
		gone := metav1.NewTime(t0.Add(time.Hour))
		c.DeletionTimestamp = &gone
	}
	return c
}

// runtimeSpec is an AgentRuntime in a table row: enabled unless disabled, limits left at zero
// take the CRD defaults.
type runtimeSpec struct {
	name          string
	registry      string
	disabled      bool
	maxConcurrent int32
	maxPerSession int32
}

func (s runtimeSpec) build() *airlockv1alpha1.AgentRuntime {
	return &airlockv1alpha1.AgentRuntime{
		ObjectMeta: metav1.ObjectMeta{Name: s.name, Namespace: "team"},
		Spec: airlockv1alpha1.AgentRuntimeSpec{
			ServiceAccountName: s.name,
			ToolRegistryRef:    airlockv1alpha1.LocalObjectReference{Name: s.registry},
			Sandbox: airlockv1alpha1.SandboxPolicy{
				Enabled:       !s.disabled,
				MaxConcurrent: s.maxConcurrent,
				MaxPerSession: s.maxPerSession,
			},
		},
	}
}

// registrySpec is a ToolRegistry in a table row: sandboxes maps entry names to maxInstances
// (zero takes the CRD default).
type registrySpec struct {
	name      string
	sandboxes map[string]int32
}

func (s registrySpec) build() *airlockv1alpha1.ToolRegistry {
	r := &airlockv1alpha1.ToolRegistry{ObjectMeta: metav1.ObjectMeta{Name: s.name, Namespace: "team"}}
	for name, max := range s.sandboxes {
		r.Spec.Sandboxes = append(r.Spec.Sandboxes, airlockv1alpha1.RegistrySandbox{Name: name, Class: "codegen", MaxInstances: max})
	}
	return r
}

func buildInput(claims []claimSpec, runtimes []runtimeSpec, registries []registrySpec, podGone map[string]bool) Input {
	in := Input{PodGone: podGone}
	for _, c := range claims {
		in.Claims = append(in.Claims, c.build())
	}
	if runtimes != nil {
		in.Runtimes = map[string]*airlockv1alpha1.AgentRuntime{}
		for _, r := range runtimes {
			in.Runtimes[r.name] = r.build()
		}
	}
	if registries != nil {
		in.Registries = map[string]*airlockv1alpha1.ToolRegistry{}
		for _, r := range registries {
			in.Registries[r.name] = r.build()
		}
	}
	return in
}

// copyInput is a deep copy of in, to show that Decide changed nothing.
func copyInput(in Input) Input {
	out := Input{}
	if in.Claims != nil {
		out.Claims = make([]*airlockv1alpha1.SandboxClaim, len(in.Claims))
		for i, c := range in.Claims {
			out.Claims[i] = c.DeepCopy()
		}
	}
	if in.Runtimes != nil {
		out.Runtimes = make(map[string]*airlockv1alpha1.AgentRuntime, len(in.Runtimes))
		for k, v := range in.Runtimes {
			out.Runtimes[k] = v.DeepCopy()
		}
	}
	if in.Registries != nil {
		out.Registries = make(map[string]*airlockv1alpha1.ToolRegistry, len(in.Registries))
		for k, v := range in.Registries {
			out.Registries[k] = v.DeepCopy()
		}
	}
	if in.PodGone != nil {
		out.PodGone = make(map[string]bool, len(in.PodGone))
		for k, v := range in.PodGone {
			out.PodGone[k] = v
		}
	}
	return out
}

// decideChecked calls Decide and fails the test if Decide changed its input.
func decideChecked(t testing.TB, in Input) map[string]Decision {
	t.Helper()
	before := copyInput(in)
	got := Decide(in)
	if diff := cmp.Diff(before, in); diff != "" {
		t.Errorf("Decide mutated its input (-before +after):\n%s", diff)
	}
	return got
}

var (
	admit = Decision{Action: Admit}
	queue = Decision{Action: Queue}
)

func refused(reason string) Decision { return Decision{Action: Refuse, Reason: reason} }

// oneRuntime is the most common world: runtime r1 on registry reg, whose sandbox box has
// maxInstances instances.
func oneRuntime(maxConcurrent, maxPerSession, maxInstances int32) ([]runtimeSpec, []registrySpec) {
	return []runtimeSpec{{name: "r1", registry: "reg", maxConcurrent: maxConcurrent, maxPerSession: maxPerSession}},
		[]registrySpec{{name: "reg", sandboxes: map[string]int32{"box": maxInstances}}}
}

// series is n Pending claims named prefix-00, prefix-01, ..., created a second apart, each in its
// own session unless sameSession.
func series(prefix string, n int, sameSession bool) []claimSpec {
	var out []claimSpec
	for i := range n {
		c := claimSpec{name: fmt.Sprintf("%s-%02d", prefix, i), at: i, phase: airlockv1alpha1.ClaimPending}
		if !sameSession {
			c.session = c.name
		}
		out = append(out, c)
	}
	return out
}

// decisionsFor maps the names of claims to d.
func decisionsFor(claims []claimSpec, d Decision) map[string]Decision {
	out := map[string]Decision{}
	for _, c := range claims {
		out[c.name] = d
	}
	return out
}

func TestDecide(t *testing.T) {
	const (
		pending  = airlockv1alpha1.ClaimPending
		queued   = airlockv1alpha1.ClaimQueued
		binding  = airlockv1alpha1.ClaimBinding
		bound    = airlockv1alpha1.ClaimBound
		reaping  = airlockv1alpha1.ClaimReaping
		refusedP = airlockv1alpha1.ClaimRefused
		failed   = airlockv1alpha1.ClaimFailed
	)
	rt1Mc1, reg := oneRuntime(1, 10, 100)
	rt1Mc10Mps1, _ := oneRuntime(10, 1, 100)
	rt1Mc10Mps2, _ := oneRuntime(10, 2, 100)
	sharedRegistry := []runtimeSpec{
		{name: "r1", registry: "reg", maxConcurrent: 10, maxPerSession: 10},
		{name: "r2", registry: "reg", maxConcurrent: 10, maxPerSession: 10},
		{name: "r3", registry: "other", maxConcurrent: 10, maxPerSession: 10},
	}
	sharedRegistries := []registrySpec{
		{name: "reg", sandboxes: map[string]int32{"box": 2}},
		{name: "other", sandboxes: map[string]int32{"box": 2}},
	}
	defaultsRuntime, defaultsRegistry := oneRuntime(0, 0, 0)
	defaultsWideRuntime := []runtimeSpec{{name: "r1", registry: "reg", maxConcurrent: 20, maxPerSession: 20}}
	elevenSessions := series("c", 11, false)
	sixSessions := series("c", 6, false)
	fourInOneSession := series("c", 4, true)

	tests := map[string]struct {
		claims     []claimSpec
		runtimes   []runtimeSpec
		registries []registrySpec
		podGone    map[string]bool
		want       map[string]Decision
	}{
		"empty input": {
			want: map[string]Decision{},
		},
		"nil claims and nil maps": {
			claims: nil,
			want:   map[string]Decision{},
		},
		"claims without runtimes or registries": {
			claims: []claimSpec{{name: "a", phase: pending}},
			want:   map[string]Decision{"a": refused(ReasonRuntimeNotFound)},
		},

		// Oldest first.
		"oldest first by creationTimestamp, whatever the input order and the names": {
			claims: []claimSpec{
				{name: "a", at: 3, session: "x", phase: pending},
				{name: "c", at: 1, session: "y", phase: pending},
				{name: "b", at: 2, session: "z", phase: pending},
			},
			runtimes: rt1Mc1, registries: reg,
			want: map[string]Decision{"c": admit, "a": queue, "b": queue},
		},
		"equal creationTimestamps: the name breaks the tie": {
			claims: []claimSpec{
				{name: "z", at: 1, session: "x", phase: pending},
				{name: "b", at: 1, session: "y", phase: pending},
				{name: "a", at: 1, session: "z", phase: pending},
			},
			runtimes: rt1Mc1, registries: reg,
			want: map[string]Decision{"a": admit, "b": queue, "z": queue},
		},
		"two replicas let two claims of a full session through: the older is admitted, the younger refused": {
			claims: []claimSpec{
				{name: "young", at: 2, phase: pending},
				{name: "old", at: 1, phase: pending},
			},
			runtimes: rt1Mc10Mps1, registries: reg,
			want: map[string]Decision{"old": admit, "young": refused(ReasonMaxPerSession)},
		},

		// maxPerSession.
		"maxPerSession refuses the youngest of the session": {
			claims: []claimSpec{
				{name: "c", at: 3, phase: pending},
				{name: "a", at: 1, phase: pending},
				{name: "b", at: 2, phase: pending},
				{name: "other-session", at: 4, session: "s2", phase: pending},
			},
			runtimes: rt1Mc10Mps2, registries: reg,
			want: map[string]Decision{"a": admit, "b": admit, "c": refused(ReasonMaxPerSession), "other-session": admit},
		},
		"sessions are per runtime": {
			claims: []claimSpec{
				{name: "a", at: 1, runtime: "r1", phase: pending},
				{name: "b", at: 2, runtime: "r2", phase: pending},
			},
			runtimes: []runtimeSpec{
				{name: "r1", registry: "reg", maxPerSession: 1},
				{name: "r2", registry: "reg", maxPerSession: 1},
			},
			registries: reg,
			want:       map[string]Decision{"a": admit, "b": admit},
		},
		"a queued claim counts per session": {
			claims: []claimSpec{
				{name: "a", at: 1, phase: pending},
				{name: "b", at: 2, phase: pending},
				{name: "c", at: 3, phase: pending},
			},
			runtimes:   []runtimeSpec{{name: "r1", registry: "reg", maxConcurrent: 1, maxPerSession: 2}},
			registries: reg,
			want:       map[string]Decision{"a": admit, "b": queue, "c": refused(ReasonMaxPerSession)},
		},
		"maxPerSession is checked before maxInstances": {
			claims: []claimSpec{
				{name: "a", at: 1, phase: pending},
				{name: "b", at: 2, phase: pending},
			},
			runtimes:   rt1Mc10Mps1,
			registries: []registrySpec{{name: "reg", sandboxes: map[string]int32{"box": 1}}},
			want:       map[string]Decision{"a": admit, "b": refused(ReasonMaxPerSession)},
		},

		// maxInstances.
		"maxInstances counts across the runtimes that share a registry": {
			claims: []claimSpec{
				{name: "a", at: 1, runtime: "r1", session: "s1", phase: pending},
				{name: "b", at: 2, runtime: "r2", session: "s2", phase: pending},
				{name: "c", at: 3, runtime: "r2", session: "s3", phase: pending},
				{name: "d", at: 4, runtime: "r3", session: "s4", phase: pending},
			},
			runtimes: sharedRegistry, registries: sharedRegistries,
			want: map[string]Decision{"a": admit, "b": admit, "c": refused(ReasonMaxInstances), "d": admit},
		},
		"maxInstances counts bound claims of another runtime first": {
			claims: []claimSpec{
				{name: "old", at: 1, runtime: "r1", session: "s1", phase: pending},
				{name: "b1", at: 5, runtime: "r2", session: "s2", phase: bound},
				{name: "b2", at: 6, runtime: "r2", session: "s3", phase: binding},
			},
			runtimes: sharedRegistry, registries: sharedRegistries,
			want: map[string]Decision{"old": refused(ReasonMaxInstances), "b1": admit, "b2": admit},
		},
		"a queued claim counts per sandbox": {
			claims: []claimSpec{
				{name: "a", at: 1, session: "s1", phase: pending},
				{name: "b", at: 2, session: "s2", phase: pending},
				{name: "c", at: 3, session: "s3", phase: pending},
			},
			runtimes: rt1Mc1, registries: []registrySpec{{name: "reg", sandboxes: map[string]int32{"box": 2}}},
			want: map[string]Decision{"a": admit, "b": queue, "c": refused(ReasonMaxInstances)},
		},
		"refused claims count for nothing": {
			claims: []claimSpec{
				{name: "unknown", at: 0, sandbox: "nope", phase: pending},
				{name: "a", at: 1, phase: pending},
				{name: "b", at: 2, phase: pending},
				{name: "c", at: 3, sandbox: "box2", phase: pending},
			},
			runtimes:   rt1Mc10Mps2,
			registries: []registrySpec{{name: "reg", sandboxes: map[string]int32{"box": 1, "box2": 1}}},
			want: map[string]Decision{
				"unknown": refused(ReasonUnknownSandbox),
				"a":       admit,
				"b":       refused(ReasonMaxInstances),
				"c":       admit,
			},
		},

		// maxConcurrent and promotion.
		"maxConcurrent queues the excess": {
			claims: []claimSpec{
				{name: "a", at: 1, session: "s1", phase: pending},
				{name: "b", at: 2, session: "s2", phase: pending},
				{name: "c", at: 3, session: "s3", phase: pending},
				{name: "d", at: 4, session: "s4", phase: queued},
			},
			runtimes:   []runtimeSpec{{name: "r1", registry: "reg", maxConcurrent: 2}},
			registries: reg,
			want:       map[string]Decision{"a": admit, "b": admit, "c": queue, "d": queue},
		},
		"maxConcurrent is per runtime": {
			claims: []claimSpec{
				{name: "a", at: 1, runtime: "r1", session: "s1", phase: pending},
				{name: "b", at: 2, runtime: "r2", session: "s2", phase: pending},
			},
			runtimes: []runtimeSpec{
				{name: "r1", registry: "reg", maxConcurrent: 1},
				{name: "r2", registry: "reg", maxConcurrent: 1},
			},
			registries: reg,
			want:       map[string]Decision{"a": admit, "b": admit},
		},
		"the oldest queued claim is promoted when a slot is free": {
			claims: []claimSpec{
				{name: "q2", at: 3, session: "s3", phase: queued},
				{name: "q1", at: 2, session: "s2", phase: queued},
			},
			runtimes: rt1Mc1, registries: reg,
			want: map[string]Decision{"q1": admit, "q2": queue},
		},
		"no promotion while a bound claim holds the slot": {
			claims: []claimSpec{
				{name: "b", at: 1, session: "s1", phase: bound},
				{name: "q1", at: 2, session: "s2", phase: queued},
				{name: "q2", at: 3, session: "s3", phase: queued},
			},
			runtimes: rt1Mc1, registries: reg,
			want: map[string]Decision{"b": admit, "q1": queue, "q2": queue},
		},
		"no promotion while a binding claim holds the slot": {
			claims: []claimSpec{
				{name: "b", at: 1, session: "s1", phase: binding},
				{name: "q1", at: 2, session: "s2", phase: queued},
			},
			runtimes: rt1Mc1, registries: reg,
			want: map[string]Decision{"b": admit, "q1": queue},
		},
		"promotion when the bound claim is being deleted": {
			claims: []claimSpec{
				{name: "b", at: 1, session: "s1", phase: bound, deleting: true},
				{name: "q1", at: 2, session: "s2", phase: queued},
				{name: "q2", at: 3, session: "s3", phase: queued},
			},
			runtimes: rt1Mc1, registries: reg,
			want: map[string]Decision{"b": admit, "q1": admit, "q2": queue},
		},
		"promotion when a reaping claim's pod is gone": {
			claims: []claimSpec{
				{name: "b", at: 1, session: "s1", phase: reaping},
				{name: "q1", at: 2, session: "s2", phase: queued},
				{name: "q2", at: 3, session: "s3", phase: queued},
			},
			runtimes: rt1Mc1, registries: reg,
			podGone: map[string]bool{"b": true},
			want:    map[string]Decision{"b": admit, "q1": admit, "q2": queue},
		},
		"no promotion while a reaping claim's pod is present": {
			claims: []claimSpec{
				{name: "b", at: 1, session: "s1", phase: reaping},
				{name: "q1", at: 2, session: "s2", phase: queued},
			},
			runtimes: rt1Mc1, registries: reg,
			podGone: map[string]bool{"someone-else": true, "b": false},
			want:    map[string]Decision{"b": admit, "q1": queue},
		},
		"a reaping claim whose pod is gone still counts per session until it is deleted": {
			claims: []claimSpec{
				{name: "b", at: 1, phase: reaping},
				{name: "p", at: 2, phase: pending},
			},
			runtimes: rt1Mc10Mps1, registries: reg,
			podGone: map[string]bool{"b": true},
			want:    map[string]Decision{"b": admit, "p": refused(ReasonMaxPerSession)},
		},

		// Sticky decisions.
		"sticky: a younger bound claim keeps its slot over an older pending claim, which queues": {
			claims: []claimSpec{
				{name: "old", at: 1, session: "s1", phase: pending},
				{name: "young", at: 5, session: "s2", phase: bound},
			},
			runtimes: rt1Mc1, registries: reg,
			want: map[string]Decision{"young": admit, "old": queue},
		},
		"sticky: a younger binding claim keeps its place over an older pending claim of its session, which is refused": {
			claims: []claimSpec{
				{name: "old", at: 1, phase: pending},
				{name: "young", at: 5, phase: binding},
			},
			runtimes: rt1Mc10Mps1, registries: reg,
			want: map[string]Decision{"young": admit, "old": refused(ReasonMaxPerSession)},
		},
		"sticky: an older claim seen late refuses a younger queued claim of its session": {
			claims: []claimSpec{
				{name: "running", at: 0, session: "s0", phase: bound},
				{name: "late", at: 1, session: "s1", phase: pending},
				{name: "young", at: 5, session: "s1", phase: queued},
			},
			runtimes:   []runtimeSpec{{name: "r1", registry: "reg", maxConcurrent: 1, maxPerSession: 1}},
			registries: reg,
			want:       map[string]Decision{"running": admit, "late": queue, "young": refused(ReasonMaxPerSession)},
		},
		"sticky claims are kept over limits lowered since": {
			claims: []claimSpec{
				{name: "b1", at: 1, phase: bound},
				{name: "b2", at: 2, phase: binding},
				{name: "b3", at: 3, session: "s2", phase: reaping},
				{name: "p-same-session", at: 4, phase: pending},
				{name: "p-other-session", at: 5, session: "s3", phase: pending},
			},
			runtimes:   []runtimeSpec{{name: "r1", registry: "reg", maxConcurrent: 1, maxPerSession: 1}},
			registries: reg,
			want: map[string]Decision{
				"b1": admit, "b2": admit, "b3": admit,
				"p-same-session":  refused(ReasonMaxPerSession),
				"p-other-session": queue,
			},
		},
		"refused stays refused, keeps its reason and counts for nothing": {
			claims: []claimSpec{
				{name: "r", at: 1, phase: refusedP, reason: ReasonMaxInstances},
				{name: "r-no-reason", at: 2, phase: refusedP},
				{name: "p", at: 3, phase: pending},
			},
			runtimes: rt1Mc10Mps1, registries: []registrySpec{{name: "reg", sandboxes: map[string]int32{"box": 1}}},
			want: map[string]Decision{"r": refused(ReasonMaxInstances), "r-no-reason": refused(""), "p": admit},
		},

		// Runtimes, registries and sandboxes that cannot serve.
		"disabled runtime refuses pending and queued claims, keeps running ones": {
			claims: []claimSpec{
				{name: "b", at: 1, session: "s1", phase: bound},
				{name: "p", at: 2, session: "s2", phase: pending},
				{name: "q", at: 3, session: "s3", phase: queued},
			},
			runtimes:   []runtimeSpec{{name: "r1", registry: "reg", disabled: true}},
			registries: reg,
			want:       map[string]Decision{"b": admit, "p": refused(ReasonDisabled), "q": refused(ReasonDisabled)},
		},
		"disabled is checked before the registry": {
			claims:     []claimSpec{{name: "p", at: 1, phase: pending}},
			runtimes:   []runtimeSpec{{name: "r1", registry: "missing", disabled: true}},
			registries: reg,
			want:       map[string]Decision{"p": refused(ReasonDisabled)},
		},
		"unknown runtime refuses pending and queued claims, keeps running ones": {
			claims: []claimSpec{
				{name: "b", at: 1, runtime: "ghost", session: "s1", phase: bound},
				{name: "p", at: 2, runtime: "ghost", session: "s2", phase: pending},
				{name: "q", at: 3, runtime: "ghost", session: "s3", phase: queued},
				{name: "ok", at: 4, runtime: "r1", session: "s4", phase: pending},
			},
			runtimes: rt1Mc1, registries: reg,
			want: map[string]Decision{"b": admit, "p": refused(ReasonRuntimeNotFound), "q": refused(ReasonRuntimeNotFound), "ok": admit},
		},
		"unknown sandbox": {
			claims:     []claimSpec{{name: "p", at: 1, sandbox: "nope", phase: pending}},
			runtimes:   rt1Mc1,
			registries: reg,
			want:       map[string]Decision{"p": refused(ReasonUnknownSandbox)},
		},
		"missing registry": {
			claims: []claimSpec{
				{name: "p", at: 1, session: "s1", phase: pending},
				{name: "q", at: 2, session: "s2", phase: queued},
			},
			runtimes:   []runtimeSpec{{name: "r1", registry: "missing"}},
			registries: reg,
			want:       map[string]Decision{"p": refused(ReasonUnknownSandbox), "q": refused(ReasonUnknownSandbox)},
		},
		"empty registry": {
			claims:     []claimSpec{{name: "p", at: 1, phase: pending}},
			runtimes:   rt1Mc1,
			registries: []registrySpec{{name: "reg"}},
			want:       map[string]Decision{"p": refused(ReasonUnknownSandbox)},
		},

		// Failed claims.
		"failed claims do not count toward maxConcurrent": {
			claims: []claimSpec{
				{name: "f", at: 1, session: "s1", phase: failed},
				{name: "p", at: 2, session: "s2", phase: pending},
			},
			runtimes: rt1Mc1, registries: reg,
			want: map[string]Decision{"f": admit, "p": admit},
		},
		"failed claims count per session": {
			claims: []claimSpec{
				{name: "f", at: 1, phase: failed},
				{name: "p", at: 2, phase: pending},
			},
			runtimes: rt1Mc10Mps1, registries: reg,
			want: map[string]Decision{"f": admit, "p": refused(ReasonMaxPerSession)},
		},
		"failed claims count per sandbox": {
			claims: []claimSpec{
				{name: "f", at: 1, session: "s1", phase: failed},
				{name: "p", at: 2, session: "s2", phase: pending},
			},
			runtimes: rt1Mc10Mps1, registries: []registrySpec{{name: "reg", sandboxes: map[string]int32{"box": 1}}},
			want: map[string]Decision{"f": admit, "p": refused(ReasonMaxInstances)},
		},
		"a replaced failed claim counts for nothing": {
			claims: []claimSpec{
				{name: "f", at: 1, phase: failed, replacedBy: "f-r1"},
				{name: "f-r1", at: 2, phase: pending},
			},
			runtimes:   []runtimeSpec{{name: "r1", registry: "reg", maxConcurrent: 1, maxPerSession: 1}},
			registries: []registrySpec{{name: "reg", sandboxes: map[string]int32{"box": 1}}},
			want:       map[string]Decision{"f": admit, "f-r1": admit},
		},
		// Whether a claim is replaced follows from the claims: the replacement's spec.replaces,
		// before (or without) any replacedBy on the Failed claim.
		"a failed claim that a claim replaces counts for nothing, replacedBy or not": {
			claims: []claimSpec{
				{name: "f", at: 1, phase: failed},
				{name: "f-r1", at: 2, phase: pending, replaces: "f"},
			},
			runtimes:   []runtimeSpec{{name: "r1", registry: "reg", maxConcurrent: 1, maxPerSession: 1}},
			registries: []registrySpec{{name: "reg", sandboxes: map[string]int32{"box": 1}}},
			want:       map[string]Decision{"f": admit, "f-r1": admit},
		},
		"a refused or deleting claim replaces nothing": {
			claims: []claimSpec{
				{name: "f", at: 1, phase: failed},
				{name: "g", at: 1, session: "s2", phase: failed},
				{name: "f-r1", at: 2, phase: refusedP, reason: ReasonMaxPerSession, replaces: "f"},
				{name: "g-r1", at: 2, session: "s2", phase: binding, replaces: "g", deleting: true},
				{name: "p", at: 3, phase: pending},
				{name: "q", at: 3, session: "s2", phase: pending},
			},
			runtimes:   []runtimeSpec{{name: "r1", registry: "reg", maxConcurrent: 10, maxPerSession: 1}},
			registries: []registrySpec{{name: "reg", sandboxes: map[string]int32{"box": 10}}},
			want: map[string]Decision{
				"f": admit, "g": admit, "f-r1": refused(ReasonMaxPerSession), "g-r1": admit,
				"p": refused(ReasonMaxPerSession), "q": refused(ReasonMaxPerSession),
			},
		},

		// Deleting claims.
		"deleting claims count for nothing and get the decision of their phase": {
			claims: []claimSpec{
				{name: "d-none", at: 0, deleting: true},
				{name: "d-pending", at: 1, phase: pending, deleting: true},
				{name: "d-queued", at: 2, phase: queued, deleting: true},
				{name: "d-binding", at: 3, phase: binding, deleting: true},
				{name: "d-bound", at: 4, phase: bound, deleting: true},
				{name: "d-reaping", at: 5, phase: reaping, deleting: true},
				{name: "d-refused", at: 6, phase: refusedP, reason: ReasonMaxPerSession, deleting: true},
				{name: "d-failed", at: 7, phase: failed, deleting: true},
				{name: "p", at: 8, phase: pending},
			},
			runtimes:   []runtimeSpec{{name: "r1", registry: "reg", maxConcurrent: 1, maxPerSession: 1}},
			registries: []registrySpec{{name: "reg", sandboxes: map[string]int32{"box": 1}}},
			want: map[string]Decision{
				"d-none":    queue,
				"d-pending": queue,
				"d-queued":  queue,
				"d-binding": admit,
				"d-bound":   admit,
				"d-reaping": admit,
				"d-refused": refused(ReasonMaxPerSession),
				"d-failed":  admit,
				"p":         admit,
			},
		},

		// Defaults and odd input.
		"maxPerSession left at zero is 3": {
			claims:   fourInOneSession,
			runtimes: []runtimeSpec{{name: "r1", registry: "reg", maxConcurrent: 10}}, registries: reg,
			want: map[string]Decision{"c-00": admit, "c-01": admit, "c-02": admit, "c-03": refused(ReasonMaxPerSession)},
		},
		"maxConcurrent left at zero is 5": {
			claims:   sixSessions,
			runtimes: defaultsRuntime, registries: defaultsRegistry,
			want: map[string]Decision{"c-00": admit, "c-01": admit, "c-02": admit, "c-03": admit, "c-04": admit, "c-05": queue},
		},
		"maxInstances left at zero is 10": {
			claims:   elevenSessions,
			runtimes: defaultsWideRuntime, registries: defaultsRegistry,
			want: func() map[string]Decision {
				want := decisionsFor(elevenSessions[:10], admit)
				want["c-10"] = refused(ReasonMaxInstances)
				return want
			}(),
		},
		"phase empty is pending": {
			claims:   []claimSpec{{name: "p", at: 1}},
			runtimes: rt1Mc1, registries: reg,
			want: map[string]Decision{"p": admit},
		},
		"a phase this version does not know is walked like pending": {
			claims: []claimSpec{
				{name: "x", at: 1, session: "s1", phase: "FromTheFuture"},
				{name: "p", at: 2, session: "s2", phase: pending},
			},
			runtimes: rt1Mc1, registries: reg,
			want: map[string]Decision{"x": admit, "p": queue},
		},
		"Input is one namespace: metadata.namespace is not read, the caller splits namespaces": {
			claims: []claimSpec{
				{name: "a", namespace: "team-a", at: 1, phase: pending},
				{name: "b", namespace: "team-b", at: 2, phase: pending},
			},
			runtimes: rt1Mc10Mps1, registries: reg,
			want: map[string]Decision{"a": admit, "b": refused(ReasonMaxPerSession)},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			in := buildInput(tc.claims, tc.runtimes, tc.registries, tc.podGone)
			got := decideChecked(t, in)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Decide() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecideNilEntries(t *testing.T) {
	in := Input{
		Claims: []*airlockv1alpha1.SandboxClaim{
			nil,
			claimSpec{name: "p", at: 1, runtime: "nil-runtime", phase: airlockv1alpha1.ClaimPending}.build(),
			claimSpec{name: "q", at: 2, runtime: "r1", phase: airlockv1alpha1.ClaimPending}.build(),
			nil,
		},
		Runtimes: map[string]*airlockv1alpha1.AgentRuntime{
			"nil-runtime": nil,
			"r1":          runtimeSpec{name: "r1", registry: "nil-registry"}.build(),
		},
		Registries: map[string]*airlockv1alpha1.ToolRegistry{"nil-registry": nil},
	}
	want := map[string]Decision{"p": refused(ReasonRuntimeNotFound), "q": refused(ReasonUnknownSandbox)}
	if diff := cmp.Diff(want, decideChecked(t, in)); diff != "" {
		t.Errorf("Decide() mismatch (-want +got):\n%s", diff)
	}
}

func TestIsLive(t *testing.T) {
	tests := map[string]struct {
		claim *airlockv1alpha1.SandboxClaim
		want  bool
	}{
		"nil":                                   {claim: nil, want: false},
		"no phase":                              {claim: claimSpec{name: "c"}.build(), want: true},
		"pending":                               {claim: claimSpec{name: "c", phase: airlockv1alpha1.ClaimPending}.build(), want: true},
		"queued":                                {claim: claimSpec{name: "c", phase: airlockv1alpha1.ClaimQueued}.build(), want: true},
		"binding":                               {claim: claimSpec{name: "c", phase: airlockv1alpha1.ClaimBinding}.build(), want: true},
		"bound":                                 {claim: claimSpec{name: "c", phase: airlockv1alpha1.ClaimBound}.build(), want: true},
		"reaping":                               {claim: claimSpec{name: "c", phase: airlockv1alpha1.ClaimReaping}.build(), want: true},
		"refused":                               {claim: claimSpec{name: "c", phase: airlockv1alpha1.ClaimRefused, reason: ReasonMaxInstances}.build(), want: false},
		"failed":                                {claim: claimSpec{name: "c", phase: airlockv1alpha1.ClaimFailed}.build(), want: true},
		"failed and replaced":                   {claim: claimSpec{name: "c", phase: airlockv1alpha1.ClaimFailed, replacedBy: "c-r1"}.build(), want: false},
		"bound with replacedBy is not replaced": {claim: claimSpec{name: "c", phase: airlockv1alpha1.ClaimBound, replacedBy: "c-r1"}.build(), want: true},
		"bound and being deleted":               {claim: claimSpec{name: "c", phase: airlockv1alpha1.ClaimBound, deleting: true}.build(), want: false},
		"pending and being deleted":             {claim: claimSpec{name: "c", phase: airlockv1alpha1.ClaimPending, deleting: true}.build(), want: false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := IsLive(tc.claim); got != tc.want {
				t.Errorf("IsLive() = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestIdleTimeout: a runtime's idle timeout, or the CRD's default for none, an unset one and one
// that is not positive.
func TestIdleTimeout(t *testing.T) {
	withIdle := func(d *metav1.Duration) *airlockv1alpha1.AgentRuntime {
		rt := &airlockv1alpha1.AgentRuntime{}
		rt.Spec.Sandbox.IdleTimeout = d
		return rt
	}
	tests := map[string]struct {
		runtime *airlockv1alpha1.AgentRuntime
		want    time.Duration
	}{
		"nil runtime":   {runtime: nil, want: airlockv1alpha1.DefaultIdleTimeout},
		"unset":         {runtime: withIdle(nil), want: airlockv1alpha1.DefaultIdleTimeout},
		"zero":          {runtime: withIdle(&metav1.Duration{}), want: airlockv1alpha1.DefaultIdleTimeout},
		"negative":      {runtime: withIdle(&metav1.Duration{Duration: -time.Minute}), want: airlockv1alpha1.DefaultIdleTimeout},
		"set":           {runtime: withIdle(&metav1.Duration{Duration: 7 * time.Minute}), want: 7 * time.Minute},
		"default value": {runtime: withIdle(&metav1.Duration{Duration: 30 * time.Minute}), want: 30 * time.Minute},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := IdleTimeout(tc.runtime); got != tc.want {
				t.Errorf("IdleTimeout = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestLimits(t *testing.T) {
	tests := map[string]struct {
		runtime           *airlockv1alpha1.AgentRuntime
		sandbox           *airlockv1alpha1.RegistrySandbox
		wantMaxPerSession int32
		wantMaxConcurrent int32
		wantMaxInstances  int32
	}{
		"nil objects take the CRD defaults": {
			wantMaxPerSession: 3, wantMaxConcurrent: 5, wantMaxInstances: 10,
		},
		"zero limits take the CRD defaults": {
			runtime:           &airlockv1alpha1.AgentRuntime{},
			sandbox:           &airlockv1alpha1.RegistrySandbox{},
			wantMaxPerSession: 3, wantMaxConcurrent: 5, wantMaxInstances: 10,
		},
		"negative limits, which the schema rejects, take the CRD defaults": {
			runtime:           runtimeSpec{maxConcurrent: -1, maxPerSession: -2}.build(),
			sandbox:           &airlockv1alpha1.RegistrySandbox{MaxInstances: -3},
			wantMaxPerSession: 3, wantMaxConcurrent: 5, wantMaxInstances: 10,
		},
		"set limits are kept": {
			runtime:           runtimeSpec{maxConcurrent: 7, maxPerSession: 1}.build(),
			sandbox:           &airlockv1alpha1.RegistrySandbox{MaxInstances: 42},
			wantMaxPerSession: 1, wantMaxConcurrent: 7, wantMaxInstances: 42,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := [3]int32{MaxPerSession(tc.runtime), MaxConcurrent(tc.runtime), MaxInstances(tc.sandbox)}
			want := [3]int32{tc.wantMaxPerSession, tc.wantMaxConcurrent, tc.wantMaxInstances}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("[MaxPerSession MaxConcurrent MaxInstances] mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// BenchmarkDecide decides namespaces of 1k and 10k claims spread over 50 runtimes, in a mix of
// phases, in shuffled order.
func BenchmarkDecide(b *testing.B) {
	for _, n := range []int{1_000, 10_000} {
		b.Run(fmt.Sprintf("claims=%d", n), func(b *testing.B) {
			in := benchmarkInput(n, 50)
			b.ReportAllocs()
			for b.Loop() {
				Decide(in)
			}
		})
	}
}

func benchmarkInput(claims, runtimes int) Input {
	in := Input{
		Runtimes:   map[string]*airlockv1alpha1.AgentRuntime{},
		Registries: map[string]*airlockv1alpha1.ToolRegistry{},
		PodGone:    map[string]bool{},
	}
	for r := range 5 {
		name := fmt.Sprintf("reg-%d", r)
		in.Registries[name] = registrySpec{name: name, sandboxes: map[string]int32{"codegen": 500, "lint": 200, "docs": 50}}.build()
	}
	for r := range runtimes {
		name := fmt.Sprintf("runtime-%02d", r)
		in.Runtimes[name] = runtimeSpec{name: name, registry: fmt.Sprintf("reg-%d", r%5), maxConcurrent: 20, maxPerSession: 3}.build()
	}
	phases := []airlockv1alpha1.ClaimPhase{
		airlockv1alpha1.ClaimPending, airlockv1alpha1.ClaimPending, airlockv1alpha1.ClaimQueued,
		airlockv1alpha1.ClaimBinding, airlockv1alpha1.ClaimBound, airlockv1alpha1.ClaimBound,
		airlockv1alpha1.ClaimReaping, airlockv1alpha1.ClaimRefused, airlockv1alpha1.ClaimFailed,
	}
	sandboxes := []string{"codegen", "lint", "docs"}
	for i := range claims {
		// A fixed permutation (7919 is prime, so coprime with 1k and 10k) scatters creation times
		// through the slice.
		at := (i * 7919) % claims
		c := claimSpec{
			name:    fmt.Sprintf("claim-%05d", i),
			runtime: fmt.Sprintf("runtime-%02d", i%runtimes),
			session: fmt.Sprintf("session-%d", i/4),
			sandbox: sandboxes[i%len(sandboxes)],
			at:      at / 2, // pairs of equal timestamps
			phase:   phases[i%len(phases)],
		}.build()
		if i%37 == 0 {
			in.PodGone[c.Name] = true
		}
		in.Claims = append(in.Claims, c)
	}
	return in
}

func orString(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// TestNewInput: runtimes and registries are indexed by name; the claims are kept as given.
func TestNewInput(t *testing.T) {
	claims := []*airlockv1alpha1.SandboxClaim{{ObjectMeta: metav1.ObjectMeta{Name: "c1"}}}
	in := NewInput(claims,
		[]*airlockv1alpha1.AgentRuntime{{ObjectMeta: metav1.ObjectMeta{Name: "a"}}, {ObjectMeta: metav1.ObjectMeta{Name: "b"}}},
		[]*airlockv1alpha1.ToolRegistry{{ObjectMeta: metav1.ObjectMeta{Name: "tools"}}})
	if len(in.Claims) != 1 || in.Claims[0] != claims[0] {
		t.Errorf("claims %v, want the given ones", in.Claims)
	}
	if in.Runtimes["a"] == nil || in.Runtimes["b"] == nil || len(in.Runtimes) != 2 || in.Registries["tools"] == nil || len(in.Registries) != 1 {
		t.Errorf("runtimes %v registries %v, want them by name", in.Runtimes, in.Registries)
	}
}

// TestRecreatedRuntimeInheritsNothing: a runtime deleted and created again under the same name
// (another UID) owns none of the old one's claims. Its new claims are admitted whatever the old
// claims hold per session and per runtime (they count under the old runtime), and a claim of the
// old runtime still undecided is refused RuntimeNotFound. The old claims still count per registry
// sandbox, since their sandboxes run. A claim written before spec.runtimeUID is the runtime's its
// controller ownerReference names.
func TestRecreatedRuntimeInheritsNothing(t *testing.T) {
	rt := runtimeSpec{name: "r1", registry: "reg", maxConcurrent: 1, maxPerSession: 1}.build()
	rt.UID = "uid-new"
	reg := registrySpec{name: "reg", sandboxes: map[string]int32{"box": 3}}.build()
	of := func(c *airlockv1alpha1.SandboxClaim, uid string) *airlockv1alpha1.SandboxClaim {
		c.Spec.RuntimeUID = types.UID(uid)
		return c
	}
	oldBound := of(claimSpec{name: "old-bound", at: 0, phase: airlockv1alpha1.ClaimBound}.build(), "uid-old")
	oldPending := of(claimSpec{name: "old-pending", session: "s2", at: 1}.build(), "uid-old")
	newClaim := of(claimSpec{name: "new", at: 2}.build(), "uid-new")
	legacy := claimSpec{name: "legacy", session: "s3", at: 3}.build()
	legacy.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(rt, airlockv1alpha1.SchemeGroupVersion.WithKind("AgentRuntime"))}
	overflow := of(claimSpec{name: "overflow", session: "s4", at: 4}.build(), "uid-new")

	got := Decide(NewInput([]*airlockv1alpha1.SandboxClaim{oldBound, oldPending, newClaim, legacy, overflow},
		[]*airlockv1alpha1.AgentRuntime{rt}, []*airlockv1alpha1.ToolRegistry{reg}))
	want := map[string]Decision{
		"old-bound":   {Action: Admit},                                 // sticky, under the old runtime
		"old-pending": {Action: Refuse, Reason: ReasonRuntimeNotFound}, // its runtime is gone
		"new":         {Action: Admit},                                 // session s1 and the runtime's slot are the new runtime's
		"legacy":      {Action: Queue},                                 // the new runtime's by its ownerReference; its one slot is taken
		"overflow":    {Action: Refuse, Reason: ReasonMaxInstances},    // old-bound (still running), new and legacy fill box's 3
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("decisions (-want +got):\n%s", diff)
	}
	if OwnedBy(oldBound, rt) || !OwnedBy(newClaim, rt) || !OwnedBy(legacy, rt) {
		t.Errorf("OwnedBy: old %v new %v legacy %v", OwnedBy(oldBound, rt), OwnedBy(newClaim, rt), OwnedBy(legacy, rt))
	}
	orphan := claimSpec{name: "orphan"}.build() // no runtimeUID, no owner: nobody's
	if OwnedBy(orphan, rt) {
		t.Error("a claim without a runtime UID or owner is owned by the runtime of its name")
	}
}

// TestWorkspaceInUse: no two live claims of different runtimes, sessions or handles resolve to
// the same or nested workspace directories, decided where claims are decided: the younger is
// refused WorkspaceInUse, naming the claim in the way. A claim and its replacement (one owner)
// share a directory; a directory whose holder is no longer live (Refused, being deleted) is free.
func TestWorkspaceInUse(t *testing.T) {
	rt := runtimeSpec{name: "r1", registry: "reg", maxConcurrent: 10, maxPerSession: 10}.build()
	other := runtimeSpec{name: "r2", registry: "reg", maxConcurrent: 10, maxPerSession: 10}.build()
	reg := registrySpec{name: "reg", sandboxes: map[string]int32{"box": 20}}.build()
	in := func(c *airlockv1alpha1.SandboxClaim, dir string) *airlockv1alpha1.SandboxClaim {
		c.Spec.WorkspaceDir = dir
		return c
	}
	handle := func(c *airlockv1alpha1.SandboxClaim, h string) *airlockv1alpha1.SandboxClaim {
		c.Spec.Handle = h
		return c
	}
	claims := []*airlockv1alpha1.SandboxClaim{
		in(claimSpec{name: "a", at: 0, phase: airlockv1alpha1.ClaimBound}.build(), "team/sandboxes/sessions/x"),
		// Another runtime, one session id and handle, one directory: refused.
		in(claimSpec{name: "b", runtime: "r2", at: 1}.build(), "team/sandboxes/sessions/x"),
		// The same runtime and session, another handle, the same directory: refused.
		in(handle(claimSpec{name: "c", at: 2}.build(), "box/second"), "/team/sandboxes/sessions/x/"),
		// A directory inside a's, and one that holds a's: refused.
		in(claimSpec{name: "d", session: "s2", at: 3}.build(), "team/sandboxes/sessions/x/sub"),
		in(claimSpec{name: "e", session: "s3", at: 4}.build(), "team/sandboxes"),
		// a's replacement (one owner) shares it; a sibling directory is free.
		in(claimSpec{name: "a-r1", at: 5, replaces: "a"}.build(), "team/sandboxes/sessions/x"),
		in(claimSpec{name: "f", session: "s4", at: 6}.build(), "team/sandboxes/sessions/xy"),
		// A directory whose only holder is being deleted is free.
		in(claimSpec{name: "g", session: "s5", at: 7, phase: airlockv1alpha1.ClaimBound, deleting: true}.build(), "team/sandboxes/g"),
		in(claimSpec{name: "h", session: "s6", at: 8}.build(), "team/sandboxes/g"),
		// A younger claim is refused by an older Queued one too (it is live).
		in(claimSpec{name: "i", session: "s7", at: 9}.build(), "team/proj"),
		in(claimSpec{name: "j", runtime: "r2", session: "s7", at: 10}.build(), "team/proj/inner"),
	}
	got := Decide(NewInput(claims, []*airlockv1alpha1.AgentRuntime{rt, other}, []*airlockv1alpha1.ToolRegistry{reg}))
	inUse := func(holder string) Decision {
		return Decision{Action: Refuse, Reason: ReasonWorkspaceInUse, Holder: holder}
	}
	want := map[string]Decision{
		"a": {Action: Admit}, "b": inUse("a"), "c": inUse("a"), "d": inUse("a"), "e": inUse("a"),
		"a-r1": {Action: Admit}, "f": {Action: Admit},
		"g": {Action: Admit}, "h": {Action: Admit},
		"i": {Action: Admit}, "j": inUse("i"),
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("decisions (-want +got):\n%s", diff)
	}
}
