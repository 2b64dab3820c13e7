package claim

import (
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/google/go-cmp/cmp"
)

// failed returns a claim that failed at failedAt, replaced by replacedBy if set.
func failed(name string, failedAt time.Time, replacedBy string) *airlockv1alpha1.SandboxClaim {
	c := binding(name, failedAt.Add(-time.Minute))
	setPhase(c, airlockv1alpha1.ClaimFailed, "ImagePullBackOff", "the detail")
	setCondition(&c.Status, ConditionReady, metav1.ConditionFalse, "ImagePullBackOff", "the detail", failedAt)
	c.Status.ReplacedBy = replacedBy
	return c
}

// replacementOf makes c the replacement of the claim named original.
func replacementOf(original string, c *airlockv1alpha1.SandboxClaim) *airlockv1alpha1.SandboxClaim {
	c.Spec.Replaces = original
	return c
}

// TestSyncFailedReplacementNotCachedYet: the leader never deletes a Failed claim as
// ReplacementGone while its replacement exists on the API server but not yet in its cache (the
// Sandbox API marked it replaced and created the replacement a moment ago). Deleting it there
// let an acquire that found neither claim in its cache create the handle's base claim again,
// next to the replacement: two claims, two sandboxes, for one handle.
func TestSyncFailedReplacementNotCachedYet(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixtureWithLimits(t, 1, 3)
	original := failed("c1", t0.Add(-time.Minute), "c1-r1")
	f.claims = append(f.claims, original)
	c := f.newController(ctx)
	if err := f.airlockClient.Tracker().Add(replacementOf("c1", newClaim("c1-r1", original.Spec.Session, "", t0))); err != nil {
		t.Fatal(err)
	}
	f.log = nil
	requeue, err := c.sync(ctx, keyOf(original))
	if err != nil {
		t.Fatal(err)
	}
	checkRequeue(t, requeue, nil)
	checkActions(t, f, []string{"get sandboxclaims c1-r1"})

	// The replacement's add event brings the original back (and the replacement itself).
	c.addClaim(klog.FromContext(ctx), replacementOf("c1", newClaim("c1-r1", original.Spec.Session, "", t0)))
	var keys []string
	for c.queue.Len() > 0 {
		key, _ := c.queue.Get()
		keys = append(keys, key.Name)
		c.queue.Done(key)
	}
	slices.Sort(keys)
	if diff := cmp.Diff([]string{"c1", "c1-r1"}, keys); diff != "" {
		t.Errorf("enqueued after the replacement's add event (-want +got):\n%s", diff)
	}
}
