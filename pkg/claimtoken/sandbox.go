package claimtoken

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
)

// Deriver derives the tokens a sandbox answers to (Source is one): a claim's bearer token, and a
// warm member's adoption token.
type Deriver interface {
	Token(ctx context.Context, uid types.UID, namespace, name string) (string, error)
	AdoptionToken(ctx context.Context, namespace, member string, claimUID types.UID, tools []string) (string, error)
}

// ErrNotTheClaimsSandbox says that a pod answers to no token of the claim: neither the claim's
// own (its token Secret) nor, for the warm member the claim adopted, the claim's adoption token.
var ErrNotTheClaimsSandbox = errors.New("the pod answers to no token of the claim")

// SandboxToken is the token the operator calls the claim's sandbox pod with (its stop, its
// session's log): the claim's bearer token for a pod that mounts the claim's token Secret; for
// the warm member the claim adopted (status.warm.member names the pod), the adoption token the
// runtime was given, carrying the claim's UID and its frozen tool list (the member accepts that
// exact token only, once adopted, and a first request with it adopts the member for this very
// claim, as the runtime's would). Any other pod: ErrNotTheClaimsSandbox.
func SandboxToken(ctx context.Context, d Deriver, claim *airlockv1alpha1.SandboxClaim, pod *corev1.Pod) (string, error) {
	if w := claim.Status.Warm; w != nil && w.Member == pod.Name {
		f := claim.Status.Frozen
		if f == nil || len(f.AllowedTools) == 0 {
			return "", fmt.Errorf("%w: claim %s adopted warm member %s but has no recorded tool list", ErrNotTheClaimsSandbox, claim.Name, w.Member)
		}
		tools := make([]string, len(f.AllowedTools))
		for i, t := range f.AllowedTools {
			tools[i] = string(t)
		}
		return d.AdoptionToken(ctx, claim.Namespace, w.Member, claim.UID, tools)
	}
	token, err := d.Token(ctx, claim.UID, claim.Namespace, claim.Name)
	if err != nil {
		return "", err
	}
	if sandboxpod.TokenSecretOf(pod) != ClaimSecretName(claim.Name, token) {
		return "", ErrNotTheClaimsSandbox
	}
	return token, nil
}
