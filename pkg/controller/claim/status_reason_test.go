package claim

import (
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
)

// checkWaitReason checks that a Binding claim's status.reason and message (what `kubectl get sbx`
// prints as REASON) are those of its Ready condition: why it waits.
func checkWaitReason(t *testing.T, got *airlockv1alpha1.SandboxClaim, want string) {
	t.Helper()
	ready := findCondition(got, ConditionReady)
	if got.Status.Phase != airlockv1alpha1.ClaimBinding || ready == nil || ready.Reason != want {
		t.Fatalf("phase %s, Ready %+v, want Binding with Ready's reason %s", got.Status.Phase, ready, want)
	}
	if got.Status.Reason != want || got.Status.Message != ready.Message {
		t.Errorf("status.reason %q message %q, want the Ready condition's %q %q", got.Status.Reason, got.Status.Message, want, ready.Message)
	}
}

// TestWaitingClaimReasonSaysWhy (issue 39, small 2): the REASON column of `kubectl get sbx`
// (status.reason) of a Binding claim says why it waits, not Binding for every wait.
func TestWaitingClaimReasonSaysWhy(t *testing.T) {
	t.Run("replacement waiting for its predecessor's pod", func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		f := newFixture(t).withDefaults()
		pred := failed("c1", t0.Add(-time.Hour), "c1-r1")
		pred.Spec.WorkspaceDir = testNamespace + "/sandboxes/sessions/abc"
		repl := binding("c1-r1", t0.Add(-time.Minute))
		repl.Spec.Replaces, repl.Spec.WorkspaceDir = "c1", pred.Spec.WorkspaceDir
		f.claims = append(f.claims, pred, repl)
		stuck := t0.Add(-time.Hour)
		f.pods = append(f.pods, newPod(pred, onNode(true, &stuck)))
		c := f.newController(ctx)
		if _, err := syncClaim(ctx, c, keyOf(repl)); err != nil {
			t.Fatal(err)
		}
		checkWaitReason(t, f.writtenClaimNamed("c1-r1"), ReasonWaitingForPredecessor)
	})
	t.Run("its predecessor's pod gone: Binding again", func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		f := newFixture(t).withDefaults()
		pred := failed("c1", t0.Add(-time.Hour), "c1-r1")
		repl := binding("c1-r1", t0.Add(-time.Minute))
		repl.Spec.Replaces = "c1"
		setCondition(&repl.Status, ConditionReady, metav1.ConditionFalse, ReasonWaitingForPredecessor, "waiting", t0.Add(-time.Minute))
		repl.Status.Reason, repl.Status.Message = ReasonWaitingForPredecessor, "waiting"
		f.claims = append(f.claims, pred, repl)
		c := f.newController(ctx)
		if _, err := syncClaim(ctx, c, keyOf(repl)); err != nil {
			t.Fatal(err)
		}
		checkWaitReason(t, f.writtenClaimNamed("c1-r1"), ReasonBinding)
	})
	t.Run("waiting for its workspace's collection", func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		f := newFixture(t).withDefaults()
		claim := binding("c1", t0.Add(-time.Second))
		var record *batchv1.Job = keptRecord(claim, "c1", "uid-rt-agent", t0.Add(-48*time.Hour))
		record.Spec.Suspend = ptr.To(false)
		f.claims = append(f.claims, claim)
		f.withChildren(claim)
		f.jobs = append(f.jobs, record)
		c := f.newController(ctx)
		if _, err := c.sync(ctx, keyOf(claim)); err != nil {
			t.Fatal(err)
		}
		checkWaitReason(t, f.writtenClaim(), ReasonWaitingForCollection)
	})
}
