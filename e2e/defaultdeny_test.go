//go:build e2e

package e2e

import (
	"context"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
)

// TestDefaultDenyPolicyStands: in a namespace with a runtime, the operator puts the standing
// default-deny NetworkPolicy in place (a claim's pod is there only with it), writes it back when
// it is changed or deleted, and keeps it when the runtime goes.
func TestDefaultDenyPolicyStands(t *testing.T) {
	e := newClaimEnv(t, "airlock-deny", claimEnvOptions{maxConcurrent: 5, maxPerSession: 3})
	startClaimOperator(t, e.ns)
	ctx := context.Background()
	policies := kubeClient.NetworkingV1().NetworkPolicies(e.ns)
	want := sandboxpod.DefaultDenyPolicy(e.ns).Spec
	inPlace := func(what string) *networkingv1.NetworkPolicy {
		t.Helper()
		var got *networkingv1.NetworkPolicy
		eventually(t, 30*time.Second, what, func(ctx context.Context) (bool, error) {
			np, err := policies.Get(ctx, sandboxpod.DefaultDenyPolicyName, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			got = np
			return apiequality.Semantic.DeepEqual(np.Spec, want), nil
		})
		return got
	}
	first := inPlace("the default-deny policy of a namespace with a runtime")

	c := e.createClaim(t, "session-1", "codegen/default", "")
	e.waitPhase(t, c.Name, airlockv1alpha1.ClaimBound, 60*time.Second)
	pod, err := kubeClient.CoreV1().Pods(e.ns).Get(ctx, c.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pod.CreationTimestamp.Before(&first.CreationTimestamp) {
		t.Errorf("the claim's pod (%s) is older than the default-deny policy (%s)", pod.CreationTimestamp, first.CreationTimestamp)
	}
	if _, ok := pod.Labels[airlockv1alpha1.LabelClaim]; !ok {
		t.Errorf("the claim's pod has no %s label: the policy does not select it", airlockv1alpha1.LabelClaim)
	}

	changed := first.DeepCopy()
	changed.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
	if _, err := policies.Update(ctx, changed, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	inPlace("the default-deny policy written back after a change")

	if err := policies.Delete(ctx, sandboxpod.DefaultDenyPolicyName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	again := inPlace("the default-deny policy created again after its deletion")
	if again.UID == first.UID {
		t.Error("the policy was not deleted")
	}

	if err := airlockClient.AirlockV1alpha1().AgentRuntimes(e.ns).Delete(ctx, e.runtime.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitGone(t, c.Name, 60*time.Second)
	if np, err := policies.Get(ctx, sandboxpod.DefaultDenyPolicyName, metav1.GetOptions{}); err != nil || np.UID != again.UID {
		t.Errorf("the default-deny policy after the runtime's deletion: %v (it stands)", err)
	}
}
