package sandboxapi

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	airlockclientset "github.com/airlock-dev/airlock/pkg/generated/clientset/versioned"
)

// errNotBound is returned by renewLastUsed for a claim that is not Bound: only a Bound claim's
// idle timer can be pushed back (a Reaping claim is not revived).
var errNotBound = errors.New("the claim is not Bound")

// needsRenewal says whether a renewal at now must write status.lastUsedAt: when the claim's last
// use (lastUsedAt, else boundAt: the idle timer starts at Bound) is at least half the idle timeout
// old (SPEC section 3: at most one write per half idle timeout). The first renewals after Bound
// cost no write.
func needsRenewal(claim *airlockv1alpha1.SandboxClaim, idleTimeout time.Duration, now time.Time) bool {
	last := claim.Status.LastUsedAt
	if last == nil {
		last = claim.Status.BoundAt
	}
	return last == nil || now.Sub(last.Time) >= idleTimeout/2
}

// renewLastUsed renews a Bound claim at now: it writes status.lastUsedAt = now when needsRenewal
// says so, and otherwise costs no API call. written says whether it wrote. On a conflict it reads
// the claim again and decides again. The write is a merge patch of status.lastUsedAt alone (the
// claim's UID and resourceVersion as preconditions), never the whole status: a replica of
// another version, which does not know every field of the claim's record, must not write the
// record back without them (the operator's admission policy refuses a changed record, and the
// record is what the claim runs). idleTimeout is the claim's runtime's
// spec.sandbox.idleTimeout. (The claim controller only reads lastUsedAt: the API and the
// controller meet in the claim's status, pkg/admission and pkg/operator, not in each other's code.)
func renewLastUsed(ctx context.Context, client airlockclientset.Interface, claim *airlockv1alpha1.SandboxClaim, idleTimeout time.Duration, now time.Time) (written bool, err error) {
	current := claim
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if current == nil {
			fresh, err := client.AirlockV1alpha1().SandboxClaims(claim.Namespace).Get(ctx, claim.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if fresh.UID != claim.UID {
				// Deleted and created again since: another claim, which this renewal is not for.
				return apierrors.NewNotFound(airlockv1alpha1.Resource("sandboxclaims"), claim.Name)
			}
			current = fresh
		}
		if current.Status.Phase != airlockv1alpha1.ClaimBound {
			return errNotBound
		}
		if !needsRenewal(current, idleTimeout, now) {
			return nil
		}
		patch, err := lastUsedPatch(current, now)
		if err != nil {
			return err
		}
		_, err = client.AirlockV1alpha1().SandboxClaims(current.Namespace).Patch(ctx, current.Name, types.MergePatchType, patch,
			metav1.PatchOptions{FieldManager: FieldManager}, "status")
		if apierrors.IsConflict(err) {
			current = nil // read it again
			return err
		}
		if err == nil {
			written = true
		}
		return err
	})
	if err == nil {
		lastUsedWrites.WithLabelValues(boolLabel(written)).Inc()
	}
	return written, err
}

// lastUsedPatch is the merge patch that sets the claim's status.lastUsedAt to now, only if the
// claim is still the one read (its UID and resourceVersion).
func lastUsedPatch(claim *airlockv1alpha1.SandboxClaim, now time.Time) ([]byte, error) {
	return json.Marshal(map[string]any{
		"metadata": map[string]any{"uid": claim.UID, "resourceVersion": claim.ResourceVersion},
		"status":   map[string]any{"lastUsedAt": metav1.NewTime(now)},
	})
}

func boolLabel(b bool) string {
	if b {
		return "true"
	}
	return "false"
}
