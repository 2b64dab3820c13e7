package claim

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
)

// TestSyncPredecessorChildrenNeverAdopted: a claim closed and acquired again gets the same name;
// garbage collection deletes the old claim's children in the background, so the new claim can
// meet them. They are never adopted nor reported as foreign: they are deleted (unless already
// being deleted) and the claim waits for them to go, its startupTimeout still running. A pod of
// the old claim, Ready and labelled with the claim's name, never makes the new claim Bound.
func TestSyncPredecessorChildrenNeverAdopted(t *testing.T) {
	began := t0.Add(-time.Minute)
	predecessorOf := func(claim *airlockv1alpha1.SandboxClaim) *airlockv1alpha1.SandboxClaim {
		old := claim.DeepCopy()
		old.UID = types.UID("uid-earlier-" + claim.Name)
		return old
	}

	t.Run("children of the earlier claim are deleted, and the claim waits", func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		f := newFixture(t).withDefaults()
		claim := binding("c1", began)
		f.claims = append(f.claims, claim)
		f.withChildren(predecessorOf(claim), 1)
		f.deployments[0].DeletionTimestamp = ptr.To(metav1.NewTime(t0)) // already being deleted
		f.deployments[0].Finalizers = []string{"foregroundDeletion"}
		c := f.newController(ctx)
		requeue, err := c.sync(ctx, keyOf(claim))
		if err != nil {
			t.Fatalf("sync: %v; want a quiet wait", err)
		}
		checkRequeue(t, requeue, ptr.To(4*time.Minute))
		got := f.actions()
		slices.Sort(got)
		// The token Secret is created, never read (the operator cannot read Secrets outside its
		// namespace); an earlier claim's token Secret has another name (its token is another), and
		// goes with the earlier claim by garbage collection.
		if diff := cmp.Diff([]string{"create secrets " + tokenSecretName(claim), "delete networkpolicies c1", "delete services c1"}, got); diff != "" {
			t.Errorf("actions (-want +got):\n%s", diff)
		}
		if events := f.events(); len(events) != 0 {
			t.Errorf("events %v: an earlier claim's child is not foreign", events)
		}
	})

	t.Run("at the startupTimeout they are still there: Failed", func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		f := newFixture(t).withDefaults()
		claim := binding("c1", began)
		f.claims = append(f.claims, claim)
		f.withChildren(predecessorOf(claim), 1)
		c := f.newController(ctx)
		f.clock.Step(4 * time.Minute)
		if _, err := c.sync(ctx, keyOf(claim)); err != nil {
			t.Fatal(err)
		}
		if got := f.writtenClaim(); got.Status.Phase != airlockv1alpha1.ClaimFailed || got.Status.Reason != ReasonStartupTimeout ||
			!strings.Contains(got.Status.Message, "earlier claim") {
			t.Errorf("status %s/%s/%q, want Failed/%s naming the earlier claim's children", got.Status.Phase, got.Status.Reason, got.Status.Message, ReasonStartupTimeout)
		}
	})

	t.Run("a Ready pod of the earlier claim does not bind the claim", func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		f := newFixture(t).withDefaults()
		claim := binding("c1", began)
		f.claims = append(f.claims, claim)
		f.withChildren(claim, 1)
		old := newPod(predecessorOf(claim), readyPod)
		old.Name = "c1-old12"
		f.pods = append(f.pods, old)
		c := f.newController(ctx)
		requeue, err := c.sync(ctx, keyOf(claim))
		if err != nil {
			t.Fatal(err)
		}
		checkRequeue(t, requeue, ptr.To(4*time.Minute))
		checkActions(t, f, nil)

		// Its own pod does.
		f.pods = append(f.pods, newPod(claim, readyPod))
		c = f.newController(ctx)
		if _, err := c.sync(ctx, keyOf(claim)); err != nil {
			t.Fatal(err)
		}
		if got := f.writtenClaim(); got.Status.Phase != airlockv1alpha1.ClaimBound {
			t.Errorf("phase %s with its own Ready pod, want Bound", got.Status.Phase)
		}
	})
}
