package sandboxpod

import (
	"slices"

	corev1 "k8s.io/api/core/v1"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/sandboxpod/sandboxpodtest"
)

// testRecord is what a claim of the fixtures' class and registry runs.
func testRecord() *airlockv1alpha1.FrozenSandbox {
	return Freeze(sandboxpodtest.Class("codegen"), &sandboxpodtest.Registry("tools", "").Spec.Sandboxes[0])
}

// bound returns a Bound claim, with the fixtures' record.
func bound(name string) *airlockv1alpha1.SandboxClaim {
	c := sandboxpodtest.Claim(name, "s-"+name, airlockv1alpha1.ClaimBound, sandboxpodtest.T0)
	c.Status.Frozen = testRecord()
	return c
}

// newPod returns the claim's pod built from its record, its token in the Secret "token-secret",
// changed by mutate.
func newPod(claim *airlockv1alpha1.SandboxClaim, mutate func(*corev1.Pod)) *corev1.Pod {
	pod := ClaimPod(claim, claim.Status.Frozen)
	UseTokenSecret(pod, "token-secret")
	if mutate != nil {
		mutate(pod)
	}
	return pod
}

// sameContainers says whether two pods run the same containers: names, images and args.
func sameContainers(a, b []corev1.Container) bool {
	return slices.EqualFunc(a, b, func(x, y corev1.Container) bool {
		return x.Name == y.Name && x.Image == y.Image && slices.Equal(x.Args, y.Args)
	})
}
