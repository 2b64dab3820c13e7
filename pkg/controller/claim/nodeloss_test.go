package claim

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	core "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
	"github.com/airlock-dev/airlock/pkg/workspace"
)

const testNode = "node-a"

// nodeState returns a Node named testNode whose Ready condition has the given status (empty: no
// Ready condition), since t0 minus an hour, with the given taints.
func nodeState(ready corev1.ConditionStatus, taints ...string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode, CreationTimestamp: metav1.NewTime(t0.Add(-24 * time.Hour))}}
	if ready != "" {
		cond := corev1.NodeCondition{Type: corev1.NodeReady, Status: ready, LastTransitionTime: metav1.NewTime(t0.Add(-time.Hour))}
		if ready == corev1.ConditionUnknown {
			cond.Reason, cond.Message = "NodeStatusUnknown", "Kubelet stopped posting node status."
		}
		n.Status.Conditions = []corev1.NodeCondition{cond}
	}
	for _, key := range taints {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: key, Effect: corev1.TaintEffectNoExecute})
	}
	return n
}

// onNode puts the pod on testNode; notReady makes it not ready, as the node lifecycle controller
// marks the pods of an unreachable Node; deleting sets its deletionTimestamp.
func onNode(notReady bool, deleting *time.Time) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		markReady(p)
		p.Spec.NodeName = testNode
		if notReady {
			for i := range p.Status.Conditions {
				if p.Status.Conditions[i].Type == corev1.PodReady {
					p.Status.Conditions[i].Status = corev1.ConditionFalse
				}
			}
		}
		if deleting != nil {
			p.DeletionTimestamp = ptr.To(metav1.NewTime(*deleting))
			p.Finalizers = []string{"test/keep"} // the fake tracker keeps it, as a kubelet that is gone does
		}
	}
}

// stripped is the pod as the operator's pod informer caches it (sandboxpod.StripPod): a pod lost
// to its Node must be told from what the cache keeps.
func stripped(t *testing.T, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	out, err := sandboxpod.StripPod(pod)
	if err != nil {
		t.Fatal(err)
	}
	return out.(*corev1.Pod)
}

// releasedWithGraceZero says whether the pod was deleted with a grace period of 0 and its UID.
func releasedWithGraceZero(f *fixture, pod *corev1.Pod) bool {
	for _, a := range f.log {
		d, ok := a.(core.DeleteActionImpl)
		if !ok || d.GetResource().Resource != "pods" || d.GetName() != pod.Name {
			continue
		}
		opts := d.GetDeleteOptions()
		if opts.GracePeriodSeconds != nil && *opts.GracePeriodSeconds == 0 && opts.Preconditions != nil && ptr.Deref(opts.Preconditions.UID, "") == pod.UID {
			return true
		}
	}
	return false
}

type lostCase struct {
	node        *corev1.Node // nil: the Node is gone
	deleting    *time.Time   // the pod's deletionTimestamp
	wantReason  string       // PodLost's reason; empty: no condition written
	wantRelease bool
	wantRequeue *time.Duration
}

func checkLost(t *testing.T, f *fixture, claim *airlockv1alpha1.SandboxClaim, pod *corev1.Pod, tc lostCase) {
	t.Helper()
	if got := releasedWithGraceZero(f, pod); got != tc.wantRelease {
		t.Errorf("pod released with grace 0: %v, want %v (actions %v)", got, tc.wantRelease, f.actions())
	}
	events := strings.Join(f.events(), "\n")
	if tc.wantReason == "" {
		for _, a := range f.actions() {
			if a == "update sandboxclaims/status "+claim.Name {
				t.Errorf("status written, want none: %v", f.writtenClaim().Status.Conditions)
			}
		}
		return
	}
	cond := findCondition(f.writtenClaimNamed(claim.Name), ConditionPodLost)
	if cond == nil || cond.Status != metav1.ConditionTrue || cond.Reason != tc.wantReason {
		t.Fatalf("PodLost %+v, want True/%s", cond, tc.wantReason)
	}
	if !strings.Contains(cond.Message, pod.Name) || !strings.Contains(cond.Message, testNode) {
		t.Errorf("PodLost message %q names neither the pod %s nor the node %s", cond.Message, pod.Name, testNode)
	}
	if !strings.Contains(events, "Warning "+tc.wantReason+" "+cond.Message) {
		t.Errorf("events %q, want a Warning %s with the condition's message", events, tc.wantReason)
	}
	if tc.wantRelease && !strings.Contains(events, "Normal "+ReasonPodReleased) {
		t.Errorf("events %q, want %s", events, ReasonPodReleased)
	}
}

// lostCases are the Node states a pod can be lost to; deleted is a deletionTimestamp past the
// pod's stuck grace.
func lostCases(deleted *time.Time) map[string]lostCase {
	return map[string]lostCase{
		"node unreachable: reported, never released": {
			node: nodeState(corev1.ConditionUnknown, "node.kubernetes.io/unreachable"), deleting: deleted,
			wantReason: ReasonNodeUnreachable, wantRequeue: ptr.To(lostPodRecheck),
		},
		"node not ready: reported, never released": {
			node: nodeState(corev1.ConditionFalse), deleting: deleted,
			wantReason: ReasonNodeNotReady, wantRequeue: ptr.To(lostPodRecheck),
		},
		"node without a Ready condition: unreachable": {
			node: nodeState(""), deleting: deleted,
			wantReason: ReasonNodeUnreachable, wantRequeue: ptr.To(lostPodRecheck),
		},
		"node gone: released": {
			deleting:   deleted,
			wantReason: ReasonNodeGone, wantRelease: true, wantRequeue: ptr.To(lostPodRecheck),
		},
		"node not ready and out of service: released": {
			node: nodeState(corev1.ConditionUnknown, "node.kubernetes.io/unreachable", TaintOutOfService), deleting: deleted,
			wantReason: ReasonNodeOutOfService, wantRelease: true, wantRequeue: ptr.To(lostPodRecheck),
		},
	}
}

// TestSyncReapingLostPod: a Reaping claim whose pod cannot go says why (PodLost naming the pod,
// its Node and the reason; an event), is looked at again, and releases the pod only when
// Kubernetes says it is dead. Before issue 24 it waited in silence, with no deadline.
func TestSyncReapingLostPod(t *testing.T) {
	stuck := t0.Add(-2 * podStuckGrace)
	fresh := t0.Add(-10 * time.Second)
	tests := lostCases(&stuck)
	tests["node ready, pod terminating within its grace: waits, looked at when it would be stuck"] = lostCase{
		node: nodeState(corev1.ConditionTrue), deleting: &fresh, wantRequeue: ptr.To(podStuckGrace - 10*time.Second),
	}
	tests["node ready, pod terminating past its grace: stuck, reported, not released"] = lostCase{
		node: nodeState(corev1.ConditionTrue), deleting: &stuck,
		wantReason: ReasonPodStuckTerminating, wantRequeue: ptr.To(lostPodRecheck),
	}
	tests["node ready and out of service (not dead for Kubernetes): stuck, not released"] = lostCase{
		node: nodeState(corev1.ConditionTrue, TaintOutOfService), deleting: &stuck,
		wantReason: ReasonPodStuckTerminating, wantRequeue: ptr.To(lostPodRecheck),
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(t).withDefaults()
			claim := reapingClaim("c1", t0.Add(-time.Hour), "projects/demo")
			f.claims = append(f.claims, claim)
			f.withChildren(claim)
			pod := stripped(t, newPod(claim, onNode(true, tc.deleting)))
			f.pods = append(f.pods, pod)
			c := f.newController(ctx)
			if tc.node != nil {
				if err := f.kubeClient.Tracker().Add(tc.node); err != nil {
					t.Fatal(err)
				}
			}
			requeue, err := syncClaim(ctx, c, keyOf(claim))
			if err != nil {
				t.Fatal(err)
			}
			checkRequeue(t, requeue, tc.wantRequeue)
			checkLost(t, f, claim, pod, tc)
			for _, a := range f.actions() {
				if strings.HasPrefix(a, "create jobs") {
					t.Errorf("a sync-back Job was created while the pod may still run: %v", f.actions())
				}
			}
		})
	}
}

// TestSyncReapingPodLostThenGone: once the lost pod is gone, the condition says so and the
// sync-back starts.
func TestSyncReapingPodLostThenGone(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t).withDefaults()
	claim := reapingClaim("c1", t0.Add(-time.Hour), "projects/demo")
	setCondition(&claim.Status, ConditionPodLost, metav1.ConditionTrue, ReasonNodeUnreachable, "pod c1 is on node node-a", t0.Add(-time.Minute))
	f.claims = append(f.claims, claim)
	f.withChildren(claim)
	c := f.newController(ctx)
	if _, err := syncClaim(ctx, c, keyOf(claim)); err != nil {
		t.Fatal(err)
	}
	cond := findCondition(f.writtenClaim(), ConditionPodLost)
	if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != ReasonPodNotLost {
		t.Errorf("PodLost %+v, want False/%s", cond, ReasonPodNotLost)
	}
	if got := f.createdJob(); got.Name != workspace.SyncJobName(claim) {
		t.Errorf("created Job %s, want the sync-back Job", got.Name)
	}
}

// TestSyncBoundLostPod: a Bound claim whose pod is lost to its Node says why in Ready and PodLost
// (and an event), is not reaped for it however long it lasts (reaping could not go on while the
// pod may run; the idle timeout still reaps it), and a dead pod is released so that it is built
// again on the same workspace.
func TestSyncBoundLostPod(t *testing.T) {
	for name, tc := range lostCases(nil) {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(t).withDefaults()
			claim := bound("c1", t0.Add(-20*time.Minute))
			claim.Status.LastUsedAt = ptr.To(metav1.NewTime(t0.Add(-time.Minute)))
			// Not ready for longer than the startupTimeout already.
			setCondition(&claim.Status, ConditionReady, metav1.ConditionFalse, ReasonPodNotReady, messagePodNotReady, t0.Add(-10*time.Minute))
			f.claims = append(f.claims, claim)
			f.withChildren(claim)
			pod := stripped(t, newPod(claim, onNode(true, nil)))
			f.pods = append(f.pods, pod)
			c := f.newController(ctx)
			if tc.node != nil {
				if err := f.kubeClient.Tracker().Add(tc.node); err != nil {
					t.Fatal(err)
				}
			}
			requeue, err := syncClaim(ctx, c, keyOf(claim))
			if err != nil {
				t.Fatal(err)
			}
			checkRequeue(t, requeue, tc.wantRequeue)
			checkLost(t, f, claim, pod, tc)
			got := f.writtenClaim()
			if got.Status.Phase != airlockv1alpha1.ClaimBound {
				t.Errorf("phase %s, want Bound (not reaped for a lost pod)", got.Status.Phase)
			}
			if ready := findCondition(got, ConditionReady); ready == nil || ready.Reason != tc.wantReason {
				t.Errorf("Ready %+v, want reason %s", ready, tc.wantReason)
			}
		})
	}
}

// TestSyncBoundLostPodRecovers: the pod built again (on another Node, at another IP) is Ready:
// the claim is Ready again at the new address, and PodLost False.
func TestSyncBoundLostPodRecovers(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t).withDefaults()
	claim := bound("c1", t0.Add(-20*time.Minute))
	claim.Status.LastUsedAt = ptr.To(metav1.NewTime(t0.Add(-time.Minute)))
	setCondition(&claim.Status, ConditionReady, metav1.ConditionFalse, ReasonNodeGone, "pod c1 was on node node-a", t0.Add(-time.Minute))
	setCondition(&claim.Status, ConditionPodLost, metav1.ConditionTrue, ReasonNodeGone, "pod c1 was on node node-a", t0.Add(-time.Minute))
	f.claims = append(f.claims, claim)
	f.withChildren(claim)
	f.pods = append(f.pods, newPod(claim, func(p *corev1.Pod) {
		markReady(p)
		p.Spec.NodeName = "node-b"
		p.Status.PodIP = "10.0.0.99"
	}))
	c := f.newController(ctx)
	if _, err := syncClaim(ctx, c, keyOf(claim)); err != nil {
		t.Fatal(err)
	}
	got := f.writtenClaim()
	if ready := findCondition(got, ConditionReady); ready == nil || ready.Status != metav1.ConditionTrue {
		t.Errorf("Ready %+v, want True", ready)
	}
	if lost := findCondition(got, ConditionPodLost); lost == nil || lost.Status != metav1.ConditionFalse {
		t.Errorf("PodLost %+v, want False", lost)
	}
	want := sandboxpod.Addresses("10.0.0.99", got.Status.Frozen)
	if len(got.Status.Addresses) == 0 || got.Status.Addresses[0].URL != want[0].URL {
		t.Errorf("addresses %v, want the new pod's %v", got.Status.Addresses, want)
	}
}

// TestSyncBoundPodReleasedResetsStartupTimeout: once a lost pod is released, the claim's Ready
// reason is PodNotReady from now, so the pod built again has the whole startupTimeout (not what
// was left of it when the Node was lost), and PodLost stays True until that pod is Ready (the
// acquire answers 202 with why, not the address of the pod that is gone; found by the e2e).
func TestSyncBoundPodReleasedResetsStartupTimeout(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t).withDefaults()
	claim := bound("c1", t0.Add(-20*time.Minute))
	claim.Status.LastUsedAt = ptr.To(metav1.NewTime(t0.Add(-time.Minute)))
	setCondition(&claim.Status, ConditionReady, metav1.ConditionFalse, ReasonNodeGone, "gone", t0.Add(-10*time.Minute))
	setCondition(&claim.Status, ConditionPodLost, metav1.ConditionTrue, ReasonNodeGone, "gone", t0.Add(-10*time.Minute))
	f.claims = append(f.claims, claim)
	f.withChildren(claim)
	c := f.newController(ctx)
	if _, err := syncClaim(ctx, c, keyOf(claim)); err != nil {
		t.Fatal(err)
	}
	got := f.writtenClaim()
	if got.Status.Phase != airlockv1alpha1.ClaimBound {
		t.Fatalf("phase %s, want Bound", got.Status.Phase)
	}
	ready := findCondition(got, ConditionReady)
	if ready == nil || ready.Reason != ReasonPodNotReady || !ready.LastTransitionTime.Time.Equal(t0) {
		t.Errorf("Ready %+v, want PodNotReady since now", ready)
	}
	if lost := findCondition(got, ConditionPodLost); lost == nil || lost.Status != metav1.ConditionTrue || lost.Reason != ReasonNodeGone {
		t.Errorf("PodLost %+v, want still True/%s", lost, ReasonNodeGone)
	}
}

// TestSyncBoundNodeBack: a pod lost to an unreachable Node whose Node is Ready again is no longer
// lost: PodLost False, and the startupTimeout starts now for the pod as it is.
func TestSyncBoundNodeBack(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t).withDefaults()
	claim := bound("c1", t0.Add(-20*time.Minute))
	claim.Status.LastUsedAt = ptr.To(metav1.NewTime(t0.Add(-time.Minute)))
	setCondition(&claim.Status, ConditionReady, metav1.ConditionFalse, ReasonNodeUnreachable, "unreachable", t0.Add(-10*time.Minute))
	setCondition(&claim.Status, ConditionPodLost, metav1.ConditionTrue, ReasonNodeUnreachable, "unreachable", t0.Add(-10*time.Minute))
	f.claims = append(f.claims, claim)
	f.withChildren(claim)
	f.pods = append(f.pods, stripped(t, newPod(claim, onNode(true, nil))))
	c := f.newController(ctx)
	if err := f.kubeClient.Tracker().Add(nodeState(corev1.ConditionTrue)); err != nil {
		t.Fatal(err)
	}
	if _, err := syncClaim(ctx, c, keyOf(claim)); err != nil {
		t.Fatal(err)
	}
	got := f.writtenClaim()
	if lost := findCondition(got, ConditionPodLost); lost == nil || lost.Status != metav1.ConditionFalse {
		t.Errorf("PodLost %+v, want False", lost)
	}
	if ready := findCondition(got, ConditionReady); ready == nil || ready.Reason != ReasonPodNotReady || !ready.LastTransitionTime.Time.Equal(t0) {
		t.Errorf("Ready %+v, want PodNotReady since now", ready)
	}
}

// TestSyncBindingReplacementWaitsForPredecessorPod: a replacement on its predecessor's workspace
// (a session's, a mount role's) creates no pod while a pod of the claim it replaces exists,
// whatever its startupTimeout (one writer); it says why, and builds once that pod is gone.
func TestSyncBindingReplacementWaitsForPredecessorPod(t *testing.T) {
	workspace := testNamespace + "/sandboxes/sessions/abc"
	newPair := func() (*airlockv1alpha1.SandboxClaim, *airlockv1alpha1.SandboxClaim) {
		pred := failed("c1", t0.Add(-time.Hour), "c1-r1")
		pred.Spec.WorkspaceDir = workspace
		setCondition(&pred.Status, ConditionPodLost, metav1.ConditionTrue, ReasonNodeUnreachable, "pod c1 is on node node-a, which is unreachable", t0.Add(-time.Hour))
		repl := binding("c1-r1", t0.Add(-time.Hour)) // past its startupTimeout
		repl.Spec.Replaces, repl.Spec.WorkspaceDir = "c1", workspace
		return pred, repl
	}
	t.Run("predecessor's pod still there: waits", func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		f := newFixture(t).withDefaults()
		pred, repl := newPair()
		f.claims = append(f.claims, pred, repl)
		stuck := t0.Add(-time.Hour)
		f.pods = append(f.pods, newPod(pred, onNode(true, &stuck)))
		c := f.newController(ctx)
		requeue, err := syncClaim(ctx, c, keyOf(repl))
		if err != nil {
			t.Fatal(err)
		}
		checkRequeue(t, requeue, ptr.To(lostPodRecheck))
		checkActions(t, f, []string{"update sandboxclaims/status c1-r1"})
		got := f.writtenClaim()
		if got.Status.Phase != airlockv1alpha1.ClaimBinding {
			t.Errorf("phase %s, want Binding", got.Status.Phase)
		}
		lost := findCondition(got, ConditionPodLost)
		if lost == nil || lost.Status != metav1.ConditionTrue || lost.Reason != ReasonWaitingForPredecessor || !strings.Contains(lost.Message, "unreachable") {
			t.Errorf("PodLost %+v, want True/%s with the predecessor's reason", lost, ReasonWaitingForPredecessor)
		}
	})
	t.Run("predecessor's pod gone: builds, and the startupTimeout starts now", func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		f := newFixture(t).withDefaults()
		pred, repl := newPair()
		setCondition(&repl.Status, ConditionReady, metav1.ConditionFalse, ReasonWaitingForPredecessor, "waiting", t0.Add(-time.Hour))
		setCondition(&repl.Status, ConditionPodLost, metav1.ConditionTrue, ReasonWaitingForPredecessor, "waiting", t0.Add(-time.Hour))
		f.claims = append(f.claims, pred, repl)
		c := f.newController(ctx)
		requeue, err := syncClaim(ctx, c, keyOf(repl))
		if err != nil {
			t.Fatal(err)
		}
		checkRequeue(t, requeue, ptr.To(defaultStartupTimeout))
		var createdPod bool
		for _, a := range f.actions() {
			createdPod = createdPod || a == "create pods c1-r1"
		}
		if !createdPod {
			t.Errorf("actions %v, want the replacement's pod created", f.actions())
		}
		got := f.writtenClaimNamed("c1-r1")
		if ready := findCondition(got, ConditionReady); ready == nil || ready.Reason != ReasonBinding || !ready.LastTransitionTime.Time.Equal(t0) {
			t.Errorf("Ready %+v, want Binding since now", ready)
		}
		if lost := findCondition(got, ConditionPodLost); lost == nil || lost.Status != metav1.ConditionFalse {
			t.Errorf("PodLost %+v, want False", lost)
		}
	})
}

// TestSyncBindingLostPodFailsWithItsReason: a Binding claim whose pod is lost to its Node at the
// startupTimeout fails with the Node's reason, not a bare StartupTimeout.
func TestSyncBindingLostPodFailsWithItsReason(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t).withDefaults()
	claim := binding("c1", t0.Add(-time.Hour))
	f.claims = append(f.claims, claim)
	f.withChildren(claim)
	pod := newPod(claim, onNode(true, nil))
	f.pods = append(f.pods, pod)
	c := f.newController(ctx)
	if err := f.kubeClient.Tracker().Add(nodeState(corev1.ConditionUnknown, "node.kubernetes.io/unreachable")); err != nil {
		t.Fatal(err)
	}
	if _, err := syncClaim(ctx, c, keyOf(claim)); err != nil {
		t.Fatal(err)
	}
	got := f.writtenClaim()
	if got.Status.Phase != airlockv1alpha1.ClaimFailed || got.Status.Reason != ReasonNodeUnreachable || !strings.Contains(got.Status.Message, testNode) {
		t.Errorf("status %s/%s %q, want Failed/%s naming the node", got.Status.Phase, got.Status.Reason, got.Status.Message, ReasonNodeUnreachable)
	}
}

// TestSyncFailedKeptWhileItsPodGoes: a Failed claim with a lost pod is kept and reports it; once
// its pods are gone its replacement is enqueued (it may be waiting for them).
func TestSyncFailedKeptWhileItsPodGoes(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t).withDefaults()
	claim := failed("c1", t0.Add(-time.Hour), "")
	f.claims = append(f.claims, claim)
	stuck := t0.Add(-time.Hour)
	pod := newPod(claim, onNode(true, &stuck))
	f.pods = append(f.pods, pod)
	c := f.newController(ctx)
	if err := f.kubeClient.Tracker().Add(nodeState(corev1.ConditionUnknown)); err != nil {
		t.Fatal(err)
	}
	requeue, err := syncClaim(ctx, c, keyOf(claim))
	if err != nil {
		t.Fatal(err)
	}
	checkRequeue(t, requeue, ptr.To(lostPodRecheck))
	checkLost(t, f, claim, pod, lostCase{wantReason: ReasonNodeUnreachable})
	for _, a := range f.actions() {
		if a == "delete sandboxclaims c1" {
			t.Errorf("the Failed claim was deleted while its pod may run")
		}
	}
}

// TestWhatAClaimThatCannotBeServedCounts (docs/nothing-lost.md): a claim whose pod is lost keeps
// what it holds, since its sandbox may still run; a claim whose sync-back gave up frees its
// maxConcurrent slot but counts for maxPerSession until it is replaced or expires.
func TestWhatAClaimThatCannotBeServedCounts(t *testing.T) {
	stuck := t0.Add(-time.Hour)
	lostPodOf := func(c *airlockv1alpha1.SandboxClaim) *corev1.Pod { return newPod(c, onNode(true, &stuck)) }
	reapingLost := func() *airlockv1alpha1.SandboxClaim {
		c := reapingClaim("old", t0.Add(-time.Hour), "projects/demo")
		setCondition(&c.Status, ConditionPodLost, metav1.ConditionTrue, ReasonNodeUnreachable, "pod old is on node node-a", t0.Add(-time.Hour))
		return c
	}
	boundLost := func() *airlockv1alpha1.SandboxClaim {
		c := bound("old", t0.Add(-time.Hour))
		c.Spec.Session = "s1"
		setCondition(&c.Status, ConditionPodLost, metav1.ConditionTrue, ReasonNodeUnreachable, "pod old is on node node-a", t0.Add(-time.Hour))
		return c
	}
	gaveUp := func() *airlockv1alpha1.SandboxClaim {
		c := reapingClaim("old", t0.Add(-time.Hour), "projects/demo")
		c.Spec.Session = "s1"
		setPhase(c, airlockv1alpha1.ClaimFailed, ReasonSyncBackFailed, "gave up")
		setCondition(&c.Status, ConditionReady, metav1.ConditionFalse, ReasonSyncBackFailed, "gave up", t0.Add(-time.Minute))
		return c
	}
	tests := map[string]struct {
		maxConcurrent, maxPerSession int32
		old                          *airlockv1alpha1.SandboxClaim
		withPod                      bool
		wantPhase                    airlockv1alpha1.ClaimPhase
	}{
		"Reaping, pod lost: holds its maxConcurrent slot": {maxConcurrent: 1, maxPerSession: 3, old: reapingLost(), withPod: true, wantPhase: airlockv1alpha1.ClaimQueued},
		"Reaping, lost pod released: frees it":            {maxConcurrent: 1, maxPerSession: 3, old: reapingLost(), wantPhase: airlockv1alpha1.ClaimBinding},
		"Bound, pod lost: counts for maxPerSession":       {maxConcurrent: 5, maxPerSession: 1, old: boundLost(), withPod: true, wantPhase: airlockv1alpha1.ClaimRefused},
		"Bound, pod lost: counts for maxConcurrent":       {maxConcurrent: 1, maxPerSession: 3, old: boundLost(), withPod: true, wantPhase: airlockv1alpha1.ClaimQueued},
		"sync-back gave up: frees maxConcurrent":          {maxConcurrent: 1, maxPerSession: 3, old: gaveUp(), wantPhase: airlockv1alpha1.ClaimBinding},
		"sync-back gave up: counts for maxPerSession":     {maxConcurrent: 5, maxPerSession: 1, old: gaveUp(), wantPhase: airlockv1alpha1.ClaimRefused},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixtureWithLimits(t, tc.maxConcurrent, tc.maxPerSession)
			f.claims = append(f.claims, tc.old, newClaim("c1", "s1", airlockv1alpha1.ClaimPending, t0))
			if tc.withPod {
				f.pods = append(f.pods, lostPodOf(tc.old))
			}
			c := f.newController(ctx)
			if err := admitAndBuild(ctx, c); err != nil {
				t.Fatal(err)
			}
			if got := f.writtenClaimNamed("c1"); got.Status.Phase != tc.wantPhase {
				t.Errorf("the new claim is %s (%s), want %s", got.Status.Phase, got.Status.Reason, tc.wantPhase)
			}
		})
	}
}

// TestSyncBoundDeadPodReleasedOnlyOnceSaid: a Bound claim's pod on a Node declared dead (not
// ready and out of service) is released only after the claim's PodLost condition saying so is
// written. Were the write refused (a conflict) after the release, the next look would find no pod
// and the PodLost of an earlier reason, clear it as a Node come back, and the acquire would answer
// 200 with the released pod's address until a new pod was Ready (seen in
// TestClaimSurvivesLostNode on the API-only plane).
func TestSyncBoundDeadPodReleasedOnlyOnceSaid(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t).withDefaults()
	claim := bound("c1", t0.Add(-20*time.Minute))
	claim.Status.LastUsedAt = ptr.To(metav1.NewTime(t0.Add(-time.Minute)))
	// Lost already: its Node was unreachable (the reason before the out-of-service taint).
	setCondition(&claim.Status, ConditionReady, metav1.ConditionFalse, ReasonNodeUnreachable, "unreachable", t0.Add(-time.Minute))
	setCondition(&claim.Status, ConditionPodLost, metav1.ConditionTrue, ReasonNodeUnreachable, "unreachable", t0.Add(-time.Minute))
	f.claims = append(f.claims, claim)
	f.withChildren(claim)
	pod := stripped(t, newPod(claim, onNode(true, nil)))
	f.pods = append(f.pods, pod)
	c := f.newController(ctx)
	if err := f.kubeClient.Tracker().Add(nodeState(corev1.ConditionUnknown, "node.kubernetes.io/unreachable", TaintOutOfService)); err != nil {
		t.Fatal(err)
	}
	f.airlockClient.PrependReactor("update", "sandboxclaims", func(a core.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "status" {
			return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "sandboxclaims"}, "c1", fmt.Errorf("the object has been modified"))
		}
		return false, nil, nil
	})
	if _, err := syncClaim(ctx, c, keyOf(claim)); err == nil {
		t.Fatal("the sync reported no error for a refused status write")
	}
	if releasedWithGraceZero(f, pod) {
		t.Errorf("the pod was released before the claim said why (actions %v)", f.actions())
	}
}
