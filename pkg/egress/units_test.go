package egress

import (
	"context"
	"net/netip"
	"testing"

	"github.com/airlock-dev/airlock/pkg/egress/policy"
)

// TestInvalidPolicyAllowsNothing: a claim whose policy does not compile is refused, with its
// reason, for every host, including those its valid rules name.
func TestInvalidPolicyAllowsNothing(t *testing.T) {
	claims, err := NewStaticClaims(StaticClaim{Namespace: "team-a", Claim: "c", Password: passwordA,
		Sources: []netip.Addr{netip.MustParseAddr("127.0.0.1")},
		Policy:  policy.Policy{Rules: []policy.Rule{{Host: "allowed.example", Ports: []uint16{443}}, {Host: "*", Ports: []uint16{443}}}}})
	if err != nil {
		t.Fatal(err)
	}
	claims.SetSynced()
	id, err := claims.Lookup(context.Background(), Credential{Username: "team-a.c", Password: passwordA}, netip.MustParseAddr("127.0.0.1"))
	if lookupReason(err) != ReasonPolicyInvalid || id.Policy != nil {
		t.Errorf("lookup: %v, policy %v; want %q and no policy", err, id.Policy, ReasonPolicyInvalid)
	}
}
