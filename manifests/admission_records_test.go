package manifests

// The policy that keeps a claim's record as admission wrote it (rbac/admission_policy_records.yaml).

import (
	"testing"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
)

const recordsPolicyFile = "rbac/admission_policy_records.yaml"

// TestRecordFrozenPolicy: the operator writes a claim's record once (from none, at admission or
// for a claim an earlier operator admitted without one) and then writes the claim's status with
// the record as it is; a status write that changes the record, or removes it, is refused.
func TestRecordFrozenPolicy(t *testing.T) {
	policies, _ := policiesOf(t, recordsPolicyFile)
	if len(policies) != 1 || policies["airlock-operator-record-frozen"] == nil {
		t.Fatalf("policies of %s: %v, want airlock-operator-record-frozen", recordsPolicyFile, policies)
	}
	p := compile(t, policies["airlock-operator-record-frozen"])
	admitted := testClaim(testRecord())
	unadmitted := with(admitted, func(c *airlockv1alpha1.SandboxClaim) { c.Status = airlockv1alpha1.SandboxClaimStatus{} })
	status := func(old, obj *airlockv1alpha1.SandboxClaim) request {
		r := update(old, obj)
		r.subResource = "status"
		return r
	}
	const msg = "a claim's record (status.frozen) is written once, at admission, and never changed or removed"
	tests := map[string]policyCase{
		"admission writes the record": {r: status(unadmitted, admitted)},
		"a status write keeping the record": {r: status(admitted, with(admitted, func(c *airlockv1alpha1.SandboxClaim) {
			c.Status.Phase, c.Status.Reason = airlockv1alpha1.ClaimReaping, "IdleTimeout"
		}))},
		"a record written to a claim without one, by an earlier operator's admission": {r: status(
			with(admitted, func(c *airlockv1alpha1.SandboxClaim) { c.Status.Frozen = nil }), admitted)},
		"another image": {r: status(admitted, with(admitted, func(c *airlockv1alpha1.SandboxClaim) {
			c.Status.Frozen.Image = "example.com/other:v1"
		})), want: msg},
		"another sync image": {r: status(admitted, with(admitted, func(c *airlockv1alpha1.SandboxClaim) {
			c.Status.Frozen.SyncImage = "example.com/exfil:v1"
		})), want: msg},
		"more tools": {r: status(admitted, with(admitted, func(c *airlockv1alpha1.SandboxClaim) {
			c.Status.Frozen.AllowedTools = append(c.Status.Frozen.AllowedTools, "Write")
		})), want: msg},
		"the record removed": {r: status(admitted, with(admitted, func(c *airlockv1alpha1.SandboxClaim) { c.Status.Frozen = nil })), want: msg},
		"the claim's spec (not its status)": {r: update(admitted, with(admitted, func(c *airlockv1alpha1.SandboxClaim) {
			c.Status.Frozen.Image = "example.com/other:v1"
		})), notApply: true},
		"someone else's status write": {r: func() request {
			r := status(admitted, with(admitted, func(c *airlockv1alpha1.SandboxClaim) { c.Status.Frozen = nil }))
			r.user = "system:serviceaccount:team:deployer"
			return r
		}(), notApply: true},
	}
	checkPolicyCases(t, p, tests)
}
