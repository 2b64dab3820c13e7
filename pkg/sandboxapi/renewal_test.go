package sandboxapi

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	core "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	airlockfake "github.com/airlock-dev/airlock/pkg/generated/clientset/versioned/fake"
)

func TestNeedsRenewal(t *testing.T) {
	const idle = 30 * time.Minute
	tests := map[string]struct {
		lastUsed *time.Time
		boundAt  *time.Time // default: an hour before t0
		now      time.Time
		want     bool
	}{
		"never renewed, bound long ago":         {now: t0, want: true},
		"never renewed, just bound":             {boundAt: ptr.To(t0), now: t0.Add(time.Second), want: false},
		"never renewed, bound half an idle ago": {boundAt: ptr.To(t0), now: t0.Add(idle / 2), want: true},
		"just renewed":                          {lastUsed: ptr.To(t0), now: t0.Add(time.Second), want: false},
		"just under half":                       {lastUsed: ptr.To(t0), now: t0.Add(idle/2 - time.Second), want: false},
		"half the idle timeout":                 {lastUsed: ptr.To(t0), now: t0.Add(idle / 2), want: true},
		"older than idle timeout":               {lastUsed: ptr.To(t0), now: t0.Add(idle), want: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c := boundClaim(t0.Add(-time.Hour))
			if tc.boundAt != nil {
				c.Status.BoundAt = ptr.To(metav1.NewTime(*tc.boundAt))
			}
			if tc.lastUsed != nil {
				c.Status.LastUsedAt = ptr.To(metav1.NewTime(*tc.lastUsed))
			}
			if got := needsRenewal(c, idle, tc.now); got != tc.want {
				t.Errorf("needsRenewal = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestRenewLastUsed renews on every "tool call" of a fake clock and checks that lastUsedAt is
// written only once per half idle timeout, counted from boundAt until the first write (the first
// renewals after Bound cost no write).
func TestRenewLastUsed(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	const idle = 10 * time.Minute
	clock := clocktesting.NewFakeClock(t0)
	claim := boundClaim(t0.Add(-time.Minute))
	client := airlockfake.NewClientset(claim)

	var writes []time.Time
	for range 12 { // one renewal a minute for 12 minutes
		current, err := client.AirlockV1alpha1().SandboxClaims(testNS).Get(ctx, claim.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		written, err := renewLastUsed(ctx, client, current, idle, clock.Now())
		if err != nil {
			t.Fatal(err)
		}
		if written {
			writes = append(writes, clock.Now())
		}
		clock.Step(time.Minute)
	}
	// Bound a minute before t0: half the idle timeout has passed at t0+4m, then at t0+9m.
	want := []time.Time{t0.Add(4 * time.Minute), t0.Add(9 * time.Minute)}
	if diff := cmp.Diff(want, writes); diff != "" {
		t.Errorf("lastUsedAt writes (-want +got):\n%s", diff)
	}
	got, _ := client.AirlockV1alpha1().SandboxClaims(testNS).Get(ctx, claim.Name, metav1.GetOptions{})
	if !got.Status.LastUsedAt.Time.Equal(t0.Add(9 * time.Minute)) {
		t.Errorf("lastUsedAt %v, want %v", got.Status.LastUsedAt, t0.Add(9*time.Minute))
	}
}

func TestRenewLastUsedNotBound(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	claim := boundClaim(t0)
	claim.Status.Phase = airlockv1alpha1.ClaimReaping
	client := airlockfake.NewClientset(claim)
	client.ClearActions()
	written, err := renewLastUsed(ctx, client, claim, time.Minute, t0.Add(time.Hour))
	if !errors.Is(err, errNotBound) || written {
		t.Errorf("renewLastUsed on a Reaping claim = %v, %v; want false, errNotBound", written, err)
	}
	if len(client.Actions()) != 0 {
		t.Errorf("actions %v, want none", client.Actions())
	}
}

func TestRenewLastUsedConflict(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	claim := boundClaim(t0)
	client := airlockfake.NewClientset(claim)
	// Another replica renewed first: the first write conflicts, the fresh claim needs no write.
	renewedElsewhere := claim.DeepCopy()
	renewedElsewhere.Status.LastUsedAt = ptr.To(metav1.NewTime(t0.Add(time.Hour)))
	if _, err := client.AirlockV1alpha1().SandboxClaims(testNS).UpdateStatus(ctx, renewedElsewhere, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	conflicts := 0
	client.PrependReactor("patch", "sandboxclaims", func(a core.Action) (bool, runtime.Object, error) {
		if conflicts == 0 {
			conflicts++
			return true, nil, conflictError()
		}
		return false, nil, nil
	})
	written, err := renewLastUsed(ctx, client, claim, time.Hour, t0.Add(time.Hour+time.Minute))
	if err != nil || written {
		t.Errorf("renewLastUsed = %v, %v; want false, nil (the fresh claim was renewed a minute ago)", written, err)
	}
}

// TestRenewalWritesLastUsedOnly: a renewal's write is a merge patch of the status subresource
// holding status.lastUsedAt alone, with the claim's UID and resourceVersion as preconditions:
// never the whole status, so that a replica of another version cannot write the claim's record
// back without a field it does not know (nor the phase or conditions the leader wrote since).
func TestRenewalWritesLastUsedOnly(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	claim := boundClaim(t0.Add(-time.Hour))
	claim.UID, claim.ResourceVersion = "uid-c1", "41"
	client := airlockfake.NewClientset(claim)
	client.ClearActions()
	var patches []core.PatchAction
	client.PrependReactor("*", "sandboxclaims", func(a core.Action) (bool, runtime.Object, error) {
		if p, ok := a.(core.PatchAction); ok {
			patches = append(patches, p)
			return true, claim, nil
		}
		if a.GetVerb() != "get" {
			t.Errorf("renewal wrote %s %s/%s, want only a patch", a.GetVerb(), a.GetResource().Resource, a.GetSubresource())
		}
		return false, nil, nil
	})
	if written, err := renewLastUsed(ctx, client, claim, time.Minute, t0); err != nil || !written {
		t.Fatalf("renewLastUsed = %v, %v; want a write", written, err)
	}
	if len(patches) != 1 || patches[0].GetSubresource() != "status" || patches[0].GetPatchType() != types.MergePatchType {
		t.Fatalf("patches %v, want one merge patch of the status", patches)
	}
	var got map[string]any
	if err := json.Unmarshal(patches[0].GetPatch(), &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"metadata": map[string]any{"uid": "uid-c1", "resourceVersion": "41"},
		"status":   map[string]any{"lastUsedAt": t0.UTC().Format(time.RFC3339)},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("renewal patch (-want +got):\n%s", diff)
	}
}

func conflictError() error {
	return apierrors.NewConflict(schema.GroupResource{Group: "airlock.dev", Resource: "sandboxclaims"}, "c1", errors.New("modified"))
}

// boundClaim is the test session's claim, Bound at boundAt.
func boundClaim(boundAt time.Time) *airlockv1alpha1.SandboxClaim {
	c := existingClaim(testSession, testHandle, airlockv1alpha1.ClaimBound)
	c.Status.BoundAt = ptr.To(metav1.NewTime(boundAt))
	return c
}
