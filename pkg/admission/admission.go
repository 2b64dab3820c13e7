// Package admission is the pure decision function of SPEC section 3: given a namespace's claims,
// runtimes and registries, it says for every claim whether it is admitted (Binding), queued or
// refused. The Sandbox API (against a replica's informer cache, to refuse fast) and the leader's
// claim controller (authoritatively) call the same function, so they cannot disagree on the rules.
//
// It does no I/O, reads no clock and mutates nothing it is given.
//
// # The rules (SPEC section 3, "Admission, oldest first")
//
// Three counters bound the claims of a namespace:
//
//   - per session, keyed by (the claim's runtime, spec.session): the live claims, at most the
//     runtime's spec.sandbox.maxPerSession;
//   - per registry sandbox, keyed by (the runtime's spec.toolRegistryRef.name, spec.sandbox): the
//     live claims of every runtime of the namespace that uses that registry, at most the registry
//     entry's maxInstances;
//   - per runtime: the claims that are Binding or Bound, or Reaping while their pod is not gone,
//     at most the runtime's spec.sandbox.maxConcurrent.
//
// Decisions are sticky, so Decide first counts the claims that hold their place whatever the limits
// say now: Binding, Bound and Reaping claims (all three counters; Reaping only per session and
// sandbox once its pod is gone) and Failed claims that have not been replaced (per session and
// sandbox, never per runtime). A Failed claim is replaced when its status.replacedBy is set or
// when another claim of the input replaces it (Replaced). Then it walks the undecided claims (phase "", Pending or Queued)
// oldest first, by (creationTimestamp, name), and gives each the first of these that applies:
//
//  1. Refuse RuntimeNotFound: spec.runtimeName is not in Input.Runtimes, or names a runtime that is
//     not the claim's (OwnedBy: another of the same name, created after the claim's was deleted);
//  2. Refuse Disabled: the runtime's spec.sandbox.enabled is false;
//  3. Refuse UnknownSandbox: the runtime's registry is not in Input.Registries, or has no entry
//     named spec.sandbox;
//  4. Refuse WorkspaceInUse: the claim's spec.workspaceDir is, holds or lies in the directory of a
//     live claim (counted so far) of another runtime, session or handle: one writer per workspace,
//     decided where claims are decided (a claim and its replacement share one, as they should);
//  5. Refuse MaxPerSession: the session's counter already reaches maxPerSession;
//  6. Refuse MaxInstances: the registry sandbox's counter already reaches maxInstances;
//  7. Admit, when the runtime holds fewer than maxConcurrent claims; the claim then counts on all
//     three counters;
//  8. Queue otherwise; a queued claim is live, so it counts per session and per sandbox, but not
//     per runtime.
//
// A refused claim counts for nothing. Because Queued claims are walked again on every call, the
// oldest Queued claim of a runtime is the one admitted when a slot frees; a Queued claim may also
// turn Refused (its runtime was disabled, or an older claim of its session was seen late).
//
// A claim's runtime is identified by name and UID (RuntimeUID): a runtime deleted and created again
// under the same name is a new owner, whose counters the old runtime's claims never fill.
//
// Limits left at zero take the CRD schema's defaults (DefaultMaxPerSession, DefaultMaxConcurrent,
// DefaultMaxInstances), so objects that never went through an API server behave like served ones.
// The runtime's idle timeout is defaulted here too (IdleTimeout), for the claim controller and
// the Sandbox API alike.
package admission

import (
	"cmp"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
)

// Action is what a claim's decision says to do with it.
type Action string

const (
	// Admit: the claim may be Binding or Bound (or keeps its place if it already is).
	Admit Action = "Admit"
	// Queue: the claim waits for a slot under its runtime's maxConcurrent.
	Queue Action = "Queue"
	// Refuse: the claim would exceed a limit, or cannot be served at all; it never queues.
	Refuse Action = "Refuse"
)

// Reasons of refusals, as they appear in a claim's status.reason and the Sandbox API's answers.
const (
	ReasonMaxPerSession   = "MaxPerSession"
	ReasonMaxInstances    = "MaxInstances"
	ReasonDisabled        = "Disabled"
	ReasonRuntimeNotFound = "RuntimeNotFound"
	ReasonUnknownSandbox  = "UnknownSandbox"
	ReasonWorkspaceInUse  = "WorkspaceInUse"
)

// Decision is the verdict on one claim.
type Decision struct {
	Action Action
	// Reason is set for Refuse (one of the Reason constants) and empty otherwise.
	Reason string
	// Holder is, for WorkspaceInUse, the live claim whose workspace directory is in the way.
	Holder string
}

// Input is everything one namespace's decision depends on.
//
// An Input is one namespace: Decide never reads metadata.namespace, so the caller must not mix
// the claims, runtimes or registries of several namespaces in one Input (they would be counted
// together); call Decide once per namespace instead.
type Input struct {
	// Claims are every claim of the namespace, in any order, in any phase. Nil entries are
	// skipped. Names are unique in a namespace; if a name appears twice, one of its decisions is
	// returned, which one is unspecified. A claim that does not exist yet (the Sandbox API asking
	// whether it would be refused) should carry the caller's current time as creationTimestamp:
	// a zero timestamp sorts before every served claim.
	Claims []*airlockv1alpha1.SandboxClaim
	// Runtimes are the namespace's AgentRuntimes by name.
	Runtimes map[string]*airlockv1alpha1.AgentRuntime
	// Registries are the namespace's ToolRegistries by name.
	Registries map[string]*airlockv1alpha1.ToolRegistry
	// PodGone names the Reaping claims whose pods are gone: they no longer hold a slot under
	// maxConcurrent (SPEC section 3: "a slot frees when ... a Reaping claim's pod has gone").
	PodGone map[string]bool
}

// NewInput returns an Input of claims, with the runtimes and registries indexed by name (PodGone
// empty).
func NewInput(claims []*airlockv1alpha1.SandboxClaim, runtimes []*airlockv1alpha1.AgentRuntime, registries []*airlockv1alpha1.ToolRegistry) Input {
	in := Input{
		Claims:     claims,
		Runtimes:   make(map[string]*airlockv1alpha1.AgentRuntime, len(runtimes)),
		Registries: make(map[string]*airlockv1alpha1.ToolRegistry, len(registries)),
	}
	for _, rt := range runtimes {
		in.Runtimes[rt.Name] = rt
	}
	for _, r := range registries {
		in.Registries[r.Name] = r
	}
	return in
}

// The defaults of the CRD schema (manifests/crd), used when a limit is zero, as it is on objects
// that were built in code rather than served by an API server. Non-positive values, which the
// schema's minimum of 1 rejects, are treated as zero.
const (
	// DefaultMaxPerSession is spec.sandbox.maxPerSession's default on an AgentRuntime.
	DefaultMaxPerSession = airlockv1alpha1.DefaultMaxPerSession
	// DefaultMaxConcurrent is spec.sandbox.maxConcurrent's default on an AgentRuntime.
	DefaultMaxConcurrent = airlockv1alpha1.DefaultMaxConcurrent
	// DefaultMaxInstances is maxInstances' default on a ToolRegistry sandbox entry.
	DefaultMaxInstances = airlockv1alpha1.DefaultMaxInstances
	// DefaultIdleTimeout is spec.sandbox.idleTimeout's default on an AgentRuntime.
	DefaultIdleTimeout = airlockv1alpha1.DefaultIdleTimeout
)

// IdleTimeout is the runtime's effective spec.sandbox.idleTimeout (the default for nil, unset or
// not positive): how long a Bound claim lives without a renewal. The claim controller reaps by it
// and the Sandbox API renews by it, so they cannot disagree.
func IdleTimeout(rt *airlockv1alpha1.AgentRuntime) time.Duration {
	if rt == nil || rt.Spec.Sandbox.IdleTimeout == nil || rt.Spec.Sandbox.IdleTimeout.Duration <= 0 {
		return DefaultIdleTimeout
	}
	return rt.Spec.Sandbox.IdleTimeout.Duration
}

// MaxPerSession is the runtime's effective spec.sandbox.maxPerSession (the default for nil).
func MaxPerSession(rt *airlockv1alpha1.AgentRuntime) int32 {
	if rt == nil {
		return DefaultMaxPerSession
	}
	return orDefault(rt.Spec.Sandbox.MaxPerSession, DefaultMaxPerSession)
}

// MaxConcurrent is the runtime's effective spec.sandbox.maxConcurrent (the default for nil).
func MaxConcurrent(rt *airlockv1alpha1.AgentRuntime) int32 {
	if rt == nil {
		return DefaultMaxConcurrent
	}
	return orDefault(rt.Spec.Sandbox.MaxConcurrent, DefaultMaxConcurrent)
}

// MaxInstances is the registry sandbox's effective maxInstances (the default for nil).
func MaxInstances(sb *airlockv1alpha1.RegistrySandbox) int32 {
	if sb == nil {
		return DefaultMaxInstances
	}
	return orDefault(sb.MaxInstances, DefaultMaxInstances)
}

func orDefault(v, def int32) int32 {
	if v <= 0 {
		return def
	}
	return v
}

// IsLive reports whether a claim counts toward maxPerSession and maxInstances (SPEC section 3):
// every claim is live unless it is Refused, being deleted (deletionTimestamp set), or Failed and
// replaced (status.replacedBy set). A nil claim is not live.
//
// A live claim is not necessarily counted: Decide counts a Pending or Queued claim only once its
// walk has admitted or queued it.
func IsLive(c *airlockv1alpha1.SandboxClaim) bool {
	switch {
	case c == nil:
		return false
	case c.DeletionTimestamp != nil:
		return false
	case c.Status.Phase == airlockv1alpha1.ClaimRefused:
		return false
	case c.Status.Phase == airlockv1alpha1.ClaimFailed && c.Status.ReplacedBy != "":
		return false
	}
	return true
}

// Replaced returns the names of the claims that another claim of claims replaces: one whose
// spec.replaces names it and that is neither being deleted nor Refused (SPEC section 3, "Failure
// and replacement, once"). A Failed claim so replaced is not live, whatever its status.replacedBy
// says yet: whether a claim is replaced follows from the claims themselves, so no order of writes
// between the replacement's creation and the replacedBy link matters, and a cache that has the
// replacement never counts both.
func Replaced(claims []*airlockv1alpha1.SandboxClaim) map[string]bool {
	out := map[string]bool{}
	for _, c := range claims {
		if c == nil || c.Spec.Replaces == "" || c.DeletionTimestamp != nil || c.Status.Phase == airlockv1alpha1.ClaimRefused {
			continue
		}
		out[c.Spec.Replaces] = true
	}
	return out
}

// RuntimeUID is the UID of the AgentRuntime the claim is for: spec.runtimeUID, else (a claim
// written before that field) the UID its controller ownerReference names, else "".
func RuntimeUID(c *airlockv1alpha1.SandboxClaim) types.UID {
	if c.Spec.RuntimeUID != "" {
		return c.Spec.RuntimeUID
	}
	if ref := metav1.GetControllerOf(c); ref != nil && ref.Kind == "AgentRuntime" && ref.Name == c.Spec.RuntimeName {
		return ref.UID
	}
	return ""
}

// OwnedBy says whether the claim is rt's: rt has the claim's spec.runtimeName and its UID is the
// claim's RuntimeUID. A runtime deleted and created again under the same name has another UID,
// and owns none of the old one's claims.
func OwnedBy(c *airlockv1alpha1.SandboxClaim, rt *airlockv1alpha1.AgentRuntime) bool {
	return c != nil && rt != nil && c.Spec.RuntimeName == rt.Name && RuntimeUID(c) == rt.UID
}

// runtimeKey identifies a claim's runtime: its name and UID.
type runtimeKey struct {
	name string
	uid  types.UID
}

func claimRuntime(c *airlockv1alpha1.SandboxClaim) runtimeKey {
	return runtimeKey{c.Spec.RuntimeName, RuntimeUID(c)}
}

// sessionKey identifies a session's claims: sessions are per runtime.
type sessionKey struct {
	runtime runtimeKey
	session string
}

// sandboxKey identifies a registry sandbox: every runtime that uses the registry shares it.
type sandboxKey struct{ registry, sandbox string }

// Decide returns a decision for every claim of in.Claims, keyed by claim name, following the rules
// in the package documentation. It is O(n log n) in the number of claims, and never mutates in.
//
// Claims that are not walked get the decision that matches their phase; the controller acts on
// none of these, they are returned so that every claim has an answer:
//
//   - Binding, Bound and Reaping: Admit (sticky, even if the runtime has since been deleted or
//     disabled, or its limits lowered: nothing running is preempted).
//   - Refused: Refuse, with the claim's status.reason as Reason (possibly empty).
//   - Failed: Admit, replaced or not. An unreplaced Failed claim still counts per session and per
//     sandbox; it never counts per runtime.
//   - Being deleted, whatever the phase: not live, counts for nothing, and gets the decision of
//     its phase as above; a deleting claim that was never decided (phase "" or Pending) or was
//     Queued gets Queue, meaning "holds nothing and will not be admitted by this call".
//
// A claim in a phase the CRD schema does not know is walked like a Pending one.
//
// Sticky claims whose runtime is missing count per session and per runtime under their own
// runtime's key, but not per registry sandbox, because their registry cannot be known. Those of
// an earlier runtime of the same name (not OwnedBy the one in the input) count under their own
// runtime's key too, never under the new runtime's, and per registry sandbox under the new one's
// registry, the likeliest (erring towards fewer sandboxes).
func Decide(in Input) map[string]Decision {
	d := decider{
		in:         in,
		perSession: make(map[sessionKey]int32),
		perSandbox: make(map[sandboxKey]int32),
		perRuntime: make(map[runtimeKey]int32),
		sandboxes:  registryIndex{registries: in.Registries},
		workspaces: newWorkspaceIndex(),
	}
	out := make(map[string]Decision, len(in.Claims))
	undecided := make([]*airlockv1alpha1.SandboxClaim, 0, len(in.Claims))
	replaced := Replaced(in.Claims)

	// Sticky claims first: they keep their place whatever their age.
	for _, c := range in.Claims {
		if c == nil {
			continue
		}
		if c.DeletionTimestamp != nil {
			out[c.Name] = phaseDecision(c)
			continue
		}
		switch c.Status.Phase {
		case airlockv1alpha1.ClaimBinding, airlockv1alpha1.ClaimBound:
			d.count(c, true)
		case airlockv1alpha1.ClaimReaping:
			d.count(c, !in.PodGone[c.Name])
		case airlockv1alpha1.ClaimFailed:
			if IsLive(c) && !replaced[c.Name] {
				d.count(c, false)
			}
		case airlockv1alpha1.ClaimRefused:
			// not live: counts for nothing, stays Refused
		default: // "", Pending, Queued, or a phase this version does not know
			undecided = append(undecided, c)
			continue
		}
		out[c.Name] = phaseDecision(c)
	}

	// Then the undecided claims, oldest first, into the capacity that remains.
	slices.SortFunc(undecided, func(a, b *airlockv1alpha1.SandboxClaim) int {
		return cmp.Or(
			a.CreationTimestamp.Compare(b.CreationTimestamp.Time),
			strings.Compare(a.Name, b.Name),
		)
	})
	for _, c := range undecided {
		out[c.Name] = d.decide(c)
	}
	return out
}

// decider holds the counters of one Decide call.
type decider struct {
	in         Input
	perSession map[sessionKey]int32
	perSandbox map[sandboxKey]int32
	perRuntime map[runtimeKey]int32 // claims holding a slot under maxConcurrent
	sandboxes  registryIndex
	workspaces workspaceIndex // the directories of the claims counted so far
}

// count adds a live claim to its session's and its sandbox's counters and, if it holds a slot
// under maxConcurrent, to its runtime's.
func (d *decider) count(c *airlockv1alpha1.SandboxClaim, holdsSlot bool) {
	key := claimRuntime(c)
	d.perSession[sessionKey{key, c.Spec.Session}]++
	// Per registry sandbox by the runtime's name, even one that is not the claim's (created again
	// since): the claim's sandbox runs, and its registry is most likely that one's; counting it
	// errs on the side of fewer sandboxes.
	if rt := d.in.Runtimes[c.Spec.RuntimeName]; rt != nil {
		d.perSandbox[sandboxKey{rt.Spec.ToolRegistryRef.Name, c.Spec.Sandbox}]++
	}
	if holdsSlot {
		d.perRuntime[key]++
	}
	d.workspaces.add(c)
}

// decide walks one undecided claim: the rules 1 to 7 of the package documentation.
func (d *decider) decide(c *airlockv1alpha1.SandboxClaim) Decision {
	rt := d.in.Runtimes[c.Spec.RuntimeName]
	if !OwnedBy(c, rt) {
		return refuse(ReasonRuntimeNotFound)
	}
	if !rt.Spec.Sandbox.Enabled {
		return refuse(ReasonDisabled)
	}
	registry := rt.Spec.ToolRegistryRef.Name
	sb := d.sandboxes.lookup(registry, c.Spec.Sandbox)
	if sb == nil {
		return refuse(ReasonUnknownSandbox)
	}
	if holder := d.workspaces.conflict(c); holder != "" {
		return Decision{Action: Refuse, Reason: ReasonWorkspaceInUse, Holder: holder}
	}
	key := claimRuntime(c)
	if d.perSession[sessionKey{key, c.Spec.Session}] >= MaxPerSession(rt) {
		return refuse(ReasonMaxPerSession)
	}
	if d.perSandbox[sandboxKey{registry, c.Spec.Sandbox}] >= MaxInstances(sb) {
		return refuse(ReasonMaxInstances)
	}
	admit := d.perRuntime[key] < MaxConcurrent(rt)
	d.count(c, admit)
	if admit {
		return Decision{Action: Admit}
	}
	return Decision{Action: Queue}
}

// phaseDecision is the decision that a claim's phase already stands for; see Decide.
func phaseDecision(c *airlockv1alpha1.SandboxClaim) Decision {
	switch c.Status.Phase {
	case airlockv1alpha1.ClaimBinding, airlockv1alpha1.ClaimBound, airlockv1alpha1.ClaimReaping, airlockv1alpha1.ClaimFailed:
		return Decision{Action: Admit}
	case airlockv1alpha1.ClaimRefused:
		return Decision{Action: Refuse, Reason: c.Status.Reason}
	default:
		return Decision{Action: Queue}
	}
}

func refuse(reason string) Decision {
	return Decision{Action: Refuse, Reason: reason}
}

// registryIndex finds registry sandbox entries by name, indexing each registry the first time it
// is asked for, so a lookup costs O(1) however many sandboxes a registry lists.
type registryIndex struct {
	registries map[string]*airlockv1alpha1.ToolRegistry
	byName     map[string]map[string]*airlockv1alpha1.RegistrySandbox
}

// lookup returns the entry named sandbox in the registry named registry, or nil if either is
// missing. The entry points into the registry: callers must not modify it.
func (x *registryIndex) lookup(registry, sandbox string) *airlockv1alpha1.RegistrySandbox {
	entries, ok := x.byName[registry]
	if !ok {
		if r := x.registries[registry]; r != nil {
			entries = make(map[string]*airlockv1alpha1.RegistrySandbox, len(r.Spec.Sandboxes))
			for i := range r.Spec.Sandboxes {
				sb := &r.Spec.Sandboxes[i]
				if _, dup := entries[sb.Name]; !dup { // listType=map forbids duplicates; first wins
					entries[sb.Name] = sb
				}
			}
		}
		if x.byName == nil {
			x.byName = make(map[string]map[string]*airlockv1alpha1.RegistrySandbox)
		}
		x.byName[registry] = entries // nil for a missing registry: looked up once
	}
	return entries[sandbox]
}
