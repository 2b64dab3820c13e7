//go:build e2e && realnode

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
)

// scaleOperator sets the in-cluster operator's replicas.
func scaleOperator(t *testing.T, replicas int32) {
	t.Helper()
	ctx := context.Background()
	_, err := kubeClient.AppsV1().Deployments(operatorNamespace).UpdateScale(ctx, "airlock-operator", &autoscalingv1.Scale{
		ObjectMeta: metav1.ObjectMeta{Name: "airlock-operator", Namespace: operatorNamespace},
		Spec:       autoscalingv1.ScaleSpec{Replicas: replicas},
	}, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("scaling the operator to %d: %v", replicas, err)
	}
}

// attempts parses the sandbox's log of connection attempts: "<unix seconds> <OPEN|BLOCKED>" lines.
func attempts(log string) (times []int64, results []string) {
	for _, line := range strings.Split(strings.TrimSpace(log), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		ts, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			continue
		}
		times, results = append(times, ts), append(results, f[1])
	}
	return times, results
}

// TestRealNodeNoPodWithoutDenyAll: no sandbox pod ever runs without a deny-all policy selecting
// it, whatever is deleted in which order (issue 23 item 4). A sandbox runs a loop that tries to
// reach the API server (its Service and the node's address) every few seconds and writes each
// attempt into its workspace. With the operator stopped (so nothing writes the claim's policy
// back), the claim's own NetworkPolicy is deleted first, as garbage collection may do, and then
// the runtime, whose deletion takes the claim and its pod; no attempt succeeds, before, between
// or after. A pod no policy selects (the runtime's) reaches the API server: BLOCKED is the policy.
func TestRealNodeNoPodWithoutDenyAll(t *testing.T) {
	requireRealNode(t)
	ctx := context.Background()
	e := newRealnodeEnv(t, "airlock-rn-deny", realnodeOptions{maxConcurrent: 2, maxPerSession: 1, maxInstances: 2, idleTimeout: 20 * time.Minute})
	kubernetesIP := serviceIP(t, "default", "kubernetes")
	if _, err := kubeClient.NetworkingV1().NetworkPolicies(e.ns).Get(ctx, sandboxpod.DefaultDenyPolicyName, metav1.GetOptions{}); err != nil {
		// The runtime exists: the operator puts the namespace's policy in place.
		eventually(t, 30*time.Second, "the namespace's default-deny policy", func(ctx context.Context) (bool, error) {
			_, err := kubeClient.NetworkingV1().NetworkPolicies(e.ns).Get(ctx, sandboxpod.DefaultDenyPolicyName, metav1.GetOptions{})
			return err == nil, nil
		})
	}

	loop := fmt.Sprintf(`for i in $(seq 1 2000); do r=$(%s); echo "$(date +%%s) $r" >> attempts.log; sleep 1; done`, tcpProbe(kubernetesIP, 443))
	plan := map[string]any{"api": apiURL(), "namespace": e.ns, "runtime": "agent", "session": "session-1", "handle": "codegen/default",
		"steps":  []map[string]any{step("loop", "Bash", map[string]any{"command": loop, "run_in_background": true})},
		"probes": []string{fmt.Sprintf("%s:443", kubernetesIP)}}
	var res rnSession
	e.runClient(t, "runtime", "session", plan, 3*time.Minute, &res)
	if res.Error != "" {
		t.Fatalf("runtime: %s", res.Error)
	}
	if c := res.call(t, "loop"); c.Err != "" || c.IsError {
		t.Fatalf("the loop did not start: %q %s", c.Err, c.Text)
	}
	if p := res.Probes[fmt.Sprintf("%s:443", kubernetesIP)]; p != "OPEN" {
		t.Fatalf("control: the runtime pod's probe of the API server answered %q, want OPEN (BLOCKED must mean the policy)", p)
	}
	claim, err := airlockClient.AirlockV1alpha1().SandboxClaims(e.ns).Get(ctx, res.Claim, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	logPath := claim.Spec.WorkspaceDir + "/attempts.log"
	countAfter := func(since int64) (int, []string, error) {
		log, err := e.readContent(logPath)
		if err != nil {
			return 0, nil, err
		}
		times, results := attempts(log)
		n := 0
		for _, ts := range times {
			if ts >= since {
				n++
			}
		}
		return n, results, nil
	}
	eventually(t, 2*time.Minute, "the loop's first attempts", func(context.Context) (bool, error) {
		n, _, err := countAfter(0)
		return err == nil && n >= 2, nil
	})

	// The operator stopped: nothing puts the claim's policy back.
	d, err := kubeClient.AppsV1().Deployments(operatorNamespace).Get(ctx, "airlock-operator", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	replicas := *d.Spec.Replicas
	scaleOperator(t, 0)
	t.Cleanup(func() { scaleOperator(t, replicas) })
	eventually(t, 2*time.Minute, "the operator's pods to be gone", func(ctx context.Context) (bool, error) {
		pods, err := kubeClient.CoreV1().Pods(operatorNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=airlock"})
		if err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			if strings.HasPrefix(p.Name, "airlock-operator-") {
				return false, nil
			}
		}
		return true, nil
	})

	// The claim's own policy first, as garbage collection may delete it before the pod.
	if err := kubeClient.NetworkingV1().NetworkPolicies(e.ns).Delete(ctx, claim.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting the claim's NetworkPolicy: %v", err)
	}
	policyGone := time.Now().Unix()
	eventually(t, 2*time.Minute, "attempts with only the default-deny policy", func(context.Context) (bool, error) {
		n, _, err := countAfter(policyGone + 2)
		return err == nil && n >= 5, nil
	})

	// Then the runtime: its claim goes, and the claim's pod. With no operator running, a person
	// finishes the deletion as docs/nothing-lost.md says: the claim deleted by hand (garbage
	// collection may not delete a claim whose workspace is not recorded:
	// airlock-workspaces-recorded), then the runtime's finalizer (airlock.dev/workspaces) taken off.
	if err := airlockClient.AirlockV1alpha1().AgentRuntimes(e.ns).Delete(ctx, "agent", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := airlockClient.AirlockV1alpha1().SandboxClaims(e.ns).Delete(ctx, claim.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting the claim by hand: %v", err)
	}
	dropRuntimeFinalizer(t, e.ns, "agent")
	eventually(t, 3*time.Minute, "the sandbox pod to be gone", func(ctx context.Context) (bool, error) {
		_, err := kubeClient.CoreV1().Pods(e.ns).Get(ctx, claim.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	n, results, err := countAfter(policyGone + 2)
	if err != nil {
		t.Fatal(err)
	}
	open := 0
	for _, r := range results {
		if r != "BLOCKED" {
			open++
		}
	}
	t.Logf("%d attempts to reach the API server, %d with only the default-deny policy selecting the pod; %d not blocked", len(results), n, open)
	if open > 0 || len(results) < 7 {
		t.Errorf("attempts %q: want every one BLOCKED (at least 7)", results)
	}
	if _, err := kubeClient.NetworkingV1().NetworkPolicies(e.ns).Get(ctx, sandboxpod.DefaultDenyPolicyName, metav1.GetOptions{}); err != nil {
		t.Errorf("the namespace's default-deny policy after the runtime's deletion: %v (it is never deleted)", err)
	}
}

// dropRuntimeFinalizer takes the operator's finalizer off the runtime, as a person does when no
// operator runs (docs/nothing-lost.md).
func dropRuntimeFinalizer(t *testing.T, ns, name string) {
	t.Helper()
	eventually(t, time.Minute, "the runtime's finalizer taken off", func(ctx context.Context) (bool, error) {
		rt, err := airlockClient.AirlockV1alpha1().AgentRuntimes(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		if err != nil {
			return false, nil
		}
		rt.Finalizers = slices.DeleteFunc(rt.Finalizers, func(f string) bool { return f == airlockv1alpha1.FinalizerWorkspaces })
		_, err = airlockClient.AirlockV1alpha1().AgentRuntimes(ns).Update(ctx, rt, metav1.UpdateOptions{})
		return err == nil || apierrors.IsNotFound(err), nil
	})
}
