//go:build e2e

package e2e

import (
	"cmp"
	"context"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
)

// TestReapingWhenTheStopCannotReachSandboxd: with the operator's stop on (--operator-pod-labels),
// a claim's NetworkPolicy lets the operator's pods in to sandboxd's port, and a reaped claim
// whose sandboxd does not answer (here no sandboxd runs at all: kwok's pods have addresses that
// nothing listens on) is reaped as without the stop, once the kubelet (kwok) has removed its
// pod: no SandboxStopped event, the pod not released early (fail closed). The stop itself, on a
// real node: TestRealNodeReacquire.
func TestReapingWhenTheStopCannotReachSandboxd(t *testing.T) {
	e := newClaimEnv(t, "airlock-stop-unreachable", claimEnvOptions{maxConcurrent: 5, maxPerSession: 3, idleTimeout: 5 * time.Second})
	// No sandboxd runs on kwok: the evidence is not read (--read-isolation-evidence=false).
	startClaimOperatorWithArgs(t, e.ns, "--operator-pod-labels=app.kubernetes.io/name=airlock,app.kubernetes.io/component=operator", "--read-isolation-evidence=false")
	c := e.createClaim(t, "session-1", "codegen/default", "")
	e.waitPhase(t, c.Name, airlockv1alpha1.ClaimBound, 60*time.Second)

	np, err := kubeClient.NetworkingV1().NetworkPolicies(e.ns).Get(context.Background(), c.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	opNS := cmp.Or(os.Getenv("POD_NAMESPACE"), "airlock-system") // the operator's namespace (pkg/cmd)
	var operatorRule bool
	for _, r := range np.Spec.Ingress {
		for _, from := range r.From {
			if from.NamespaceSelector != nil && from.NamespaceSelector.MatchLabels[corev1.LabelMetadataName] == opNS &&
				from.PodSelector != nil && from.PodSelector.MatchLabels["app.kubernetes.io/component"] == "operator" {
				operatorRule = true
			}
		}
	}
	if !operatorRule {
		t.Errorf("the claim's NetworkPolicy ingress %+v has no rule for the operator's pods of %s", np.Spec.Ingress, opNS)
	}

	e.waitGone(t, c.Name, 90*time.Second)
	events, err := kubeClient.CoreV1().Events(e.ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + c.Name + ",reason=SandboxStopped"})
	if err != nil {
		t.Fatal(err)
	}
	if len(events.Items) != 0 {
		t.Errorf("SandboxStopped events %v, but no sandboxd answered", events.Items)
	}
}
