package egress

import (
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
)

// EventReasonDenied is the reason of the Warning event a claim gets for a refused host.
const EventReasonDenied = "EgressDenied"

// Bounds of what DenialEvents remembers: hosts per claim (beyond them a claim gets no more
// events: its audit lines still say everything) and (claim, host) pairs in all (the oldest is
// forgotten first, so a long-lived gateway's memory stays bounded).
const (
	maxDeniedHostsPerClaim = 16
	maxDeniedPairs         = 8192
)

// policyReasons are the refusals of what a claim asked for: its target, as its policy reads it.
// The others (who is asking, a gateway that cannot serve, a request that does not parse) name no
// host of the claim's.
var policyReasons = map[Reason]bool{
	ReasonUserinfo: true, ReasonScheme: true, ReasonIPLiteral: true, ReasonNotAllowed: true,
	ReasonPortNotAllowed: true, ReasonInspection: true, ReasonMethodOrPath: true, ReasonHostMismatch: true,
	ReasonUpgrade: true, ReasonCredentialNeedsTLS: true, ReasonLocalAddress: true, ReasonPrivateAddress: true,
	ReasonClusterAddress: true, ReasonNotTLS: true, ReasonSNIMismatch: true, ReasonPolicyInvalid: true,
}

// DenialEvents records a Warning event (EventReasonDenied) on a claim the first time the gateway
// refuses one of its hosts, deduplicated per claim and host (not port nor reason): an agent that
// tries a host a hundred times makes one event, and the audit log keeps every attempt. Through an
// EventRecorder (NewDenialEvents) each replica remembers on its own, so a claim may get one event
// per replica for a host; SharedDenialEvents makes it one across replicas. Use its Observe as
// Config.Observe.
type DenialEvents struct {
	emit func(r Record, ref *corev1.ObjectReference, message string)

	mu       sync.Mutex
	seen     map[deniedPair]struct{}
	order    []deniedPair // oldest first, at most maxDeniedPairs
	perClaim map[claimRef]int
}

type claimRef struct{ namespace, name string }

type deniedPair struct {
	claim claimRef
	uid   types.UID
	host  string
}

// NewDenialEvents returns DenialEvents that records through recorder.
func NewDenialEvents(recorder record.EventRecorder) *DenialEvents {
	return newDenialEvents(func(_ Record, ref *corev1.ObjectReference, message string) {
		recorder.Event(ref, corev1.EventTypeWarning, EventReasonDenied, message)
	})
}

func newDenialEvents(emit func(Record, *corev1.ObjectReference, string)) *DenialEvents {
	return &DenialEvents{emit: emit, seen: map[deniedPair]struct{}{}, perClaim: map[claimRef]int{}}
}

// Observe records the event for r if it is a claim's first refusal of its host.
func (d *DenialEvents) Observe(r Record) {
	if r.Allowed || r.Claim == "" || r.Namespace == "" || r.Host == "" || !policyReasons[r.Reason] {
		return
	}
	p := deniedPair{claim: claimRef{r.Namespace, r.Claim}, uid: r.ClaimUID, host: r.Host}
	if !d.first(p) {
		return
	}
	ref := &corev1.ObjectReference{
		APIVersion: airlockv1alpha1.SchemeGroupVersion.String(), Kind: "SandboxClaim",
		Namespace: r.Namespace, Name: r.Claim, UID: r.ClaimUID,
	}
	d.emit(r, ref, fmt.Sprintf("The egress gateway refused %s (%s): %s. Only a host's first refusal makes an event; the gateway's audit log has every one.",
		eventTarget(r), r.Kind, r.Reason))
}

// first says whether p is new, and remembers it within the bounds.
func (d *DenialEvents) first(p deniedPair) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.seen[p]; ok || d.perClaim[p.claim] >= maxDeniedHostsPerClaim {
		return false
	}
	if len(d.order) >= maxDeniedPairs {
		old := d.order[0]
		d.order = d.order[1:]
		delete(d.seen, old)
		if d.perClaim[old.claim]--; d.perClaim[old.claim] <= 0 {
			delete(d.perClaim, old.claim)
		}
	}
	d.seen[p] = struct{}{}
	d.order = append(d.order, p)
	d.perClaim[p.claim]++
	return true
}

func eventTarget(r Record) string {
	if r.Port == 0 {
		return r.Host
	}
	return fmt.Sprintf("%s:%d", r.Host, r.Port)
}

// DenialEventsCorrelator is the event broadcaster's correlation for DenialEvents: client-go
// folds the eleventh event of one object and reason within 10 minutes into one "combined from
// similar events" whose message is the latest host; allowing one more than a claim's hosts keeps
// each host's event its own.
func DenialEventsCorrelator() record.CorrelatorOptions {
	return record.CorrelatorOptions{MaxEvents: maxDeniedHostsPerClaim + 1}
}
