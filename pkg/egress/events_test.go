package egress

import (
	"fmt"
	"strings"
	"testing"

	"k8s.io/client-go/tools/record"
)

// TestDenialEvents: a claim gets one Warning event per refused host, the first time; allowed
// exchanges, refusals that name no host of the claim's (who is asking, the gateway's own
// failures) and refusals without a claim make none; a claim's events stop after
// maxDeniedHostsPerClaim hosts, and another claim still gets its own.
func TestDenialEvents(t *testing.T) {
	rec := record.NewFakeRecorder(100)
	d := NewDenialEvents(rec)
	denied := func(ns, claim, host string, port uint16, reason Reason) Record {
		return Record{Kind: "connect", Namespace: ns, Claim: claim, Host: host, Port: port, Reason: reason}
	}
	for _, r := range []Record{
		denied("team-a", "agent-1", "evil.example", 443, ReasonNotAllowed),
		denied("team-a", "agent-1", "evil.example", 443, ReasonNotAllowed),  // the same host again
		denied("team-a", "agent-1", "evil.example", 8443, ReasonNotAllowed), // another port: the same host
		denied("team-a", "agent-1", "evil.example", 443, ReasonSNIMismatch), // another reason: the same host
		{Kind: "connect", Namespace: "team-a", Claim: "agent-1", Host: "ok.example", Port: 443, Allowed: true, Reason: ReasonAllowed},
		denied("team-a", "agent-1", "", 0, ReasonInvalidHost),                  // no host parsed
		denied("team-a", "agent-1", "x.example", 443, ReasonNotSynced),         // the gateway's state
		denied("team-a", "agent-1", "x.example", 443, ReasonResolveFailed),     // the upstream's
		denied("team-a", "agent-1", "x.example", 443, ReasonNoCredentialValue), // the gateway's credential
		denied("", "", "x.example", 443, ReasonNotAllowed),                     // no claim (who is asking failed)
		denied("team-a", "agent-1", "169.254.169.254", 80, ReasonIPLiteral),
		denied("team-b", "agent-1", "evil.example", 443, ReasonNotAllowed), // another namespace's claim of that name
	} {
		d.Observe(r)
	}
	events := drain(rec)
	want := []string{
		"Warning EgressDenied The egress gateway refused evil.example:443 (connect): host_not_allowed.",
		"Warning EgressDenied The egress gateway refused 169.254.169.254:80 (connect): ip_literal.",
		"Warning EgressDenied The egress gateway refused evil.example:443 (connect): host_not_allowed.",
	}
	if len(events) != len(want) {
		t.Fatalf("events:\n%s\nwant %d", strings.Join(events, "\n"), len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(events[i], w) {
			t.Errorf("event %d: %q, want it to start with %q", i, events[i], w)
		}
	}

	for i := range maxDeniedHostsPerClaim + 5 {
		d.Observe(denied("team-c", "busy", fmt.Sprintf("h%d.example", i), 443, ReasonNotAllowed))
	}
	d.Observe(denied("team-c", "quiet", "h0.example", 443, ReasonNotAllowed))
	events = drain(rec)
	if len(events) != maxDeniedHostsPerClaim+1 {
		t.Errorf("%d events for %d hosts of one claim and one of another, want %d", len(events), maxDeniedHostsPerClaim+5, maxDeniedHostsPerClaim+1)
	}
}

// TestDenialEventsBounded: past maxDeniedPairs remembered pairs the oldest is forgotten (its host
// may make an event again), so memory stays bounded.
func TestDenialEventsBounded(t *testing.T) {
	rec := record.NewFakeRecorder(maxDeniedPairs + 10)
	d := NewDenialEvents(rec)
	for i := range maxDeniedPairs + 1 {
		d.Observe(Record{Namespace: "ns", Claim: fmt.Sprintf("c%d", i), Host: "evil.example", Port: 443, Reason: ReasonNotAllowed})
	}
	if len(d.seen) != maxDeniedPairs || len(d.order) != maxDeniedPairs || len(d.perClaim) != maxDeniedPairs {
		t.Errorf("remembered %d pairs (%d in order, %d claims), want %d", len(d.seen), len(d.order), len(d.perClaim), maxDeniedPairs)
	}
	d.Observe(Record{Namespace: "ns", Claim: "c0", Host: "evil.example", Port: 443, Reason: ReasonNotAllowed})
	if got := len(drain(rec)); got != maxDeniedPairs+2 {
		t.Errorf("%d events, want %d (the forgotten first pair once more)", got, maxDeniedPairs+2)
	}
}

func drain(rec *record.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}
