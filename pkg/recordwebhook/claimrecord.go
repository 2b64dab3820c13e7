package recordwebhook

import (
	"encoding/json"
	"fmt"
	"maps"

	"k8s.io/apimachinery/pkg/api/equality"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
)

// EgressServiceLabels are the labels of an egress gateway's Service that a record may name
// (manifests/components/egress and the chart's egress.enabled label it so): the operator cannot
// write Services, so a record cannot name pods of its own choosing as its gateway.
var EgressServiceLabels = map[string]string{"app.kubernetes.io/name": "airlock", "app.kubernetes.io/component": "egress"}

// claimRecord checks the first write of a claim's record (status.frozen, from none to one; the
// policy airlock-operator-record-frozen keeps it from changing after): it must be what the claim
// controller freezes from the claim's class and its runtime's registry entry as they are now
// (sandboxpod.Freeze), with the operator's sync image, and, with egress, a gateway frozen from an
// egress gateway Service of airlock's (sandboxpod.FreezeGateway). A class or entry edited in the
// moment between the operator's read and this one refuses the write, and the operator freezes
// the claim again from what it reads next.
func (r reviewer) claimRecord(oldRaw []byte) Verdict {
	var claim, old airlockv1alpha1.SandboxClaim
	if err := json.Unmarshal(r.raw, &claim); err != nil {
		return refuse("the SandboxClaim could not be read: %v", err)
	}
	if err := json.Unmarshal(oldRaw, &old); err != nil {
		return refuse("the SandboxClaim's previous version could not be read: %v", err)
	}
	got := claim.Status.Frozen
	if got == nil || old.Status.Frozen != nil {
		return allow() // no record written now (changing one is the policies')
	}
	want, v := r.freeze(&claim)
	if !v.Allowed {
		return v
	}
	if r.cfg.SyncImage != "" && got.SyncImage != r.cfg.SyncImage {
		return refuse("the record of claim %s/%s runs the sync image %q, not the operator's %q", claim.Namespace, claim.Name, got.SyncImage, r.cfg.SyncImage)
	}
	want.SyncImage = got.SyncImage
	if (want.Egress == nil) != (got.Egress == nil) {
		return refuse("the record of claim %s/%s has egress %v, its class %s %v", claim.Namespace, claim.Name, got.Egress != nil, claim.Spec.ClassName, want.Egress != nil)
	}
	if got.Egress != nil {
		if v := r.gateway(&claim, &got.Egress.Gateway); !v.Allowed {
			return v
		}
		want.Egress.Gateway = got.Egress.Gateway
	}
	if !equality.Semantic.DeepEqual(want, got) {
		return refuse("the record of claim %s/%s is not what its class %s (generation %d) and its registry's sandbox %s freeze now",
			claim.Namespace, claim.Name, claim.Spec.ClassName, want.ClassGeneration, claim.Spec.Sandbox)
	}
	return allow()
}

// freeze is the record the claim controller makes for claim now: from the class it names and the
// entry of its runtime's registry.
func (r reviewer) freeze(claim *airlockv1alpha1.SandboxClaim) (*airlockv1alpha1.FrozenSandbox, Verdict) {
	ns := claim.Namespace
	class, err := r.look.Class(r.ctx, claim.Spec.ClassName)
	if err != nil {
		return nil, refuse("reading the SandboxClass %s: %v", claim.Spec.ClassName, err)
	}
	if class == nil {
		return nil, refuse("the claim %s/%s is recorded from the SandboxClass %s, which does not exist", ns, claim.Name, claim.Spec.ClassName)
	}
	rt, err := r.look.Runtime(r.ctx, ns, claim.Spec.RuntimeName)
	if err != nil {
		return nil, refuse("reading the AgentRuntime %s/%s: %v", ns, claim.Spec.RuntimeName, err)
	}
	if rt == nil {
		return nil, refuse("the claim %s/%s is recorded for the AgentRuntime %s, which does not exist", ns, claim.Name, claim.Spec.RuntimeName)
	}
	reg, err := r.look.Registry(r.ctx, ns, rt.Spec.ToolRegistryRef.Name)
	if err != nil {
		return nil, refuse("reading the ToolRegistry %s/%s: %v", ns, rt.Spec.ToolRegistryRef.Name, err)
	}
	if reg != nil {
		for i := range reg.Spec.Sandboxes {
			if e := &reg.Spec.Sandboxes[i]; e.Name == claim.Spec.Sandbox {
				return sandboxpod.Freeze(class, e), allow()
			}
		}
	}
	return nil, refuse("the claim %s/%s is recorded from the sandbox %s of the ToolRegistry %s, which has none", ns, claim.Name, claim.Spec.Sandbox, rt.Spec.ToolRegistryRef.Name)
}

// gateway checks a record's egress gateway: frozen, as the operator freezes it, from a Service
// of airlock's egress gateway (EgressServiceLabels) as it is now.
func (r reviewer) gateway(claim *airlockv1alpha1.SandboxClaim, gw *airlockv1alpha1.EgressGateway) Verdict {
	svc, err := r.look.Service(r.ctx, gw.Namespace, gw.Service)
	if err != nil {
		return refuse("reading the egress gateway's Service %s/%s: %v", gw.Namespace, gw.Service, err)
	}
	if svc == nil || !labelsInclude(svc.Labels, EgressServiceLabels) {
		return refuse("the record of claim %s/%s names the egress gateway Service %s/%s, which is not an airlock egress gateway's (labels %v)",
			claim.Namespace, claim.Name, gw.Namespace, gw.Service, EgressServiceLabels)
	}
	want, why := sandboxpod.FreezeGateway(&sandboxpod.GatewayRef{Namespace: gw.Namespace, Name: gw.Service, Port: gw.Port, CABundleConfigMap: gw.CABundleConfigMap}, svc)
	if why != "" {
		return refuse("the record of claim %s/%s: %s", claim.Namespace, claim.Name, why)
	}
	if !equality.Semantic.DeepEqual(want, gw) {
		return refuse("the record of claim %s/%s has the egress gateway %s, not what its Service %s/%s says now (%s)",
			claim.Namespace, claim.Name, describeGateway(gw), gw.Namespace, gw.Service, describeGateway(want))
	}
	return allow()
}

func labelsInclude(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

func describeGateway(gw *airlockv1alpha1.EgressGateway) string {
	sel := maps.Clone(gw.PodSelector)
	return fmt.Sprintf("%s:%d -> %s, pods %v", gw.Address, gw.Port, gw.TargetPort.String(), sel)
}
