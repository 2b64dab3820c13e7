package claimtoken

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
)

type fakeDeriver struct{}

func (fakeDeriver) Token(_ context.Context, uid types.UID, _, _ string) (string, error) {
	return "claim-token-" + string(uid), nil
}

func (fakeDeriver) AdoptionToken(_ context.Context, ns, member string, uid types.UID, tools []string) (string, error) {
	return "adopt:" + ns + "/" + member + ":" + string(uid) + ":" + strings.Join(tools, ","), nil
}

// TestSandboxToken: the claim's own pod answers to the claim's token, the warm member it adopted
// to its adoption token with the frozen tools; a pod on another token, a member it did not
// adopt, and an adopted member without a tool list answer to none of the claim's.
func TestSandboxToken(t *testing.T) {
	claim := func(mut func(*airlockv1alpha1.SandboxClaim)) *airlockv1alpha1.SandboxClaim {
		c := &airlockv1alpha1.SandboxClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1", UID: "uid-1"},
			Status: airlockv1alpha1.SandboxClaimStatus{Frozen: &airlockv1alpha1.FrozenSandbox{AllowedTools: []airlockv1alpha1.ToolName{"Read", "Bash"}}}}
		if mut != nil {
			mut(c)
		}
		return c
	}
	pod := func(name, secret string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
			Spec: corev1.PodSpec{Volumes: []corev1.Volume{{Name: sandboxpod.TokenVolumeName,
				VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: secret}}}}}}
	}
	adopted := func(member string) func(*airlockv1alpha1.SandboxClaim) {
		return func(c *airlockv1alpha1.SandboxClaim) {
			c.Status.Warm = &airlockv1alpha1.WarmAdoption{Member: member, WorkspaceDir: "d"}
		}
	}
	own := ClaimSecretName("c1", "claim-token-uid-1")
	tests := map[string]struct {
		claim *airlockv1alpha1.SandboxClaim
		pod   *corev1.Pod
		want  string // "" for ErrNotTheClaimsSandbox
	}{
		"its own pod":               {claim: claim(nil), pod: pod("c1", own), want: "claim-token-uid-1"},
		"a pod on another token":    {claim: claim(nil), pod: pod("c1", "airlock-warm-x")},
		"the member it adopted":     {claim: claim(adopted("m1")), pod: pod("m1", "airlock-warm-x"), want: "adopt:ns/m1:uid-1:Read,Bash"},
		"a member it did not adopt": {claim: claim(adopted("m1")), pod: pod("m2", "airlock-warm-x")},
		"an adopted member, no tools": {claim: claim(func(c *airlockv1alpha1.SandboxClaim) {
			adopted("m1")(c)
			c.Status.Frozen = nil
		}), pod: pod("m1", "airlock-warm-x")},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := SandboxToken(context.Background(), fakeDeriver{}, tc.claim, tc.pod)
			if tc.want == "" {
				if !errors.Is(err, ErrNotTheClaimsSandbox) {
					t.Fatalf("SandboxToken = %q, %v; want ErrNotTheClaimsSandbox", got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("SandboxToken = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}
