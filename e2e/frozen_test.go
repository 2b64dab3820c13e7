//go:build e2e

package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/airlock-dev/airlock/pkg/admission"
	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
)

// TestClaimFrozenAgainstRegistryAndClassEdits (issue 11): what a Bound claim runs is frozen at
// admission. Widening its registry entry's allowedTools, then editing its class and removing the
// entry, never replaces its pod (that would restart the sandbox under the agent) nor drops
// --allowed-tools (which sandboxd would read as "every tool"). A claim admitted after the
// widening gets the new tools; one made after the removal is refused. Each of those later claims
// is also the witness that the operator has seen the edit before the running claim's pod is
// looked at again.
func TestClaimFrozenAgainstRegistryAndClassEdits(t *testing.T) {
	ctx := context.Background()
	e := newClaimEnv(t, "airlock-claim-frozen", claimEnvOptions{maxConcurrent: 5, maxPerSession: 3})
	startClaimOperator(t, e.ns)
	running := e.waitPhase(t, e.createClaim(t, "session-1", "codegen/default", "").Name, airlockv1alpha1.ClaimBound, 60*time.Second)

	if r := running.Status.Frozen; r == nil || !slices.Equal(r.AllowedTools, []airlockv1alpha1.ToolName{"Read", "Bash"}) || r.Image != e2eImage() {
		t.Fatalf("the Bound claim's record %+v: want allowedTools [Read Bash] and image %s", r, e2eImage())
	}
	before := e.pod(t, running.Name)
	wantArg := "--allowed-tools=Read,Bash"
	if args := before.Spec.Containers[0].Args; !slices.Contains(args, wantArg) {
		t.Fatalf("sandbox args %q lack %q", args, wantArg)
	}
	unchanged := func(when string) {
		t.Helper()
		p := e.pod(t, running.Name)
		if p.UID != before.UID || !slices.Equal(p.Spec.Containers[0].Args, before.Spec.Containers[0].Args) ||
			p.Spec.Containers[0].Image != before.Spec.Containers[0].Image {
			t.Errorf("%s: the running claim's pod changed: uid %s → %s, args %q → %q, image %s → %s", when,
				before.UID, p.UID, before.Spec.Containers[0].Args, p.Spec.Containers[0].Args,
				before.Spec.Containers[0].Image, p.Spec.Containers[0].Image)
		}
		c, err := e.getClaim(ctx, running.Name)
		if err != nil || c.Status.Phase != airlockv1alpha1.ClaimBound {
			t.Errorf("%s: the running claim is %v (%v), want Bound", when, c.Status.Phase, err)
		}
	}

	// Widen the entry: a new claim gets Bash and Write; the running one keeps Read,Bash.
	e.updateRegistry(t, func(r *airlockv1alpha1.ToolRegistry) {
		r.Spec.Sandboxes[0].AllowedTools = []airlockv1alpha1.ToolName{"Read", "Bash", "Write"}
	})
	widened := e.waitPhase(t, e.createClaim(t, "session-2", "codegen/default", "").Name, airlockv1alpha1.ClaimBound, 60*time.Second)
	if r := widened.Status.Frozen; r == nil || !slices.Equal(r.AllowedTools, []airlockv1alpha1.ToolName{"Read", "Bash", "Write"}) {
		t.Errorf("a claim admitted after the edit has the record %+v, want allowedTools [Read Bash Write]", r)
	}
	widenedPod := e.pod(t, widened.Name)
	if args := widenedPod.Spec.Containers[0].Args; !slices.Contains(args, "--allowed-tools=Read,Bash,Write") {
		t.Errorf("a claim admitted after the edit runs with %q", args)
	}
	unchanged("after allowedTools was widened")

	// Edit the class and remove the entry: the running claims are left exactly as they were; a
	// new claim is refused.
	class, err := airlockClient.AirlockV1alpha1().SandboxClasses().Get(ctx, e.class, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	class.Spec.Image = "example.com/edited:v2"
	class.Spec.Ports = []airlockv1alpha1.SandboxPort{{Name: "mcp", Port: 9090}}
	if _, err := airlockClient.AirlockV1alpha1().SandboxClasses().Update(ctx, class, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.updateRegistry(t, func(r *airlockv1alpha1.ToolRegistry) { r.Spec.Sandboxes = nil })
	refused := e.waitPhase(t, e.createClaim(t, "session-3", "codegen/default", "").Name, airlockv1alpha1.ClaimRefused, 30*time.Second)
	if refused.Status.Reason != admission.ReasonUnknownSandbox {
		t.Errorf("a claim of the removed entry is Refused with %q, want %s", refused.Status.Reason, admission.ReasonUnknownSandbox)
	}
	unchanged("after the class was edited and the entry removed")
	if p := e.pod(t, widened.Name); p.UID != widenedPod.UID || !slices.Contains(p.Spec.Containers[0].Args, "--allowed-tools=Read,Bash,Write") {
		t.Errorf("after the entry was removed, the second claim's pod is %s (was %s) and runs with %q", p.UID, widenedPod.UID, p.Spec.Containers[0].Args)
	}
	c, err := e.getClaim(ctx, running.Name)
	if err != nil || len(c.Status.Addresses) != 1 || !strings.HasSuffix(c.Status.Addresses[0].URL, ":8080") {
		t.Errorf("after the class's port changed, the running claim's addresses are %+v (%v), want port 8080", c.Status.Addresses, err)
	}
}

// pod returns the claim's pod.
func (e *claimEnv) pod(t *testing.T, name string) *corev1.Pod {
	t.Helper()
	p, err := kubeClient.CoreV1().Pods(e.ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("pod %s: %v", name, err)
	}
	return p
}

// updateRegistry changes the namespace's registry, retrying on a conflict.
func (e *claimEnv) updateRegistry(t *testing.T, mutate func(*airlockv1alpha1.ToolRegistry)) {
	t.Helper()
	eventually(t, 10*time.Second, "the registry update", func(ctx context.Context) (bool, error) {
		r, err := airlockClient.AirlockV1alpha1().ToolRegistries(e.ns).Get(ctx, e.runtime.Spec.ToolRegistryRef.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		mutate(r)
		_, err = airlockClient.AirlockV1alpha1().ToolRegistries(e.ns).Update(ctx, r, metav1.UpdateOptions{})
		if err != nil && strings.Contains(err.Error(), "the object has been modified") {
			return false, nil
		}
		return err == nil, err
	})
}
