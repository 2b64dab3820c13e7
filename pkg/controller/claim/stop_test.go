package claim

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
	"github.com/airlock-dev/airlock/pkg/sandboxpod/sandboxpodtest"
	"github.com/airlock-dev/airlock/pkg/sandboxstop"
)

// fakeStopper records the stops asked and answers err (nil: stopped, 2 killed).
type fakeStopper struct {
	mu    sync.Mutex
	asked []string // base + " " + token
	err   error
}

func (f *fakeStopper) Stop(_ context.Context, base, token string) (sandboxstop.Response, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, base+" "+token)
	if f.err != nil {
		return sandboxstop.Response{Error: "not_init"}, f.err
	}
	return sandboxstop.Response{Stopped: true, Killed: 2}, nil
}

// recordingRelease records the pods released (deleted with a grace period of 0).
type recordingRelease struct {
	lostPodControl
	mu       sync.Mutex
	released []types.UID
}

func (r *recordingRelease) Release(ctx context.Context, pod *corev1.Pod) error {
	r.mu.Lock()
	r.released = append(r.released, pod.UID)
	r.mu.Unlock()
	return r.lostPodControl.Release(ctx, pod)
}

var testOperatorPeer = &sandboxpod.OperatorPeer{Namespace: "airlock-system", Labels: map[string]string{"app.kubernetes.io/component": "operator"}}

// terminatingPod is claim's pod, running at testPodIP and being deleted, changed by mutate, as
// the operator's cache holds it (sandboxpod.StripPod: of a container's state only Waiting).
func terminatingPod(claim *airlockv1alpha1.SandboxClaim, mutate func(*corev1.Pod)) *corev1.Pod {
	pod := sandboxpodtest.AsCached(newPod(claim, nil), t0.Add(-time.Hour), testPodIP)
	pod.DeletionTimestamp = &metav1.Time{Time: t0.Add(30 * time.Second)}
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: sandboxpod.ContainerName, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
	if mutate != nil {
		mutate(pod)
	}
	stripped, err := sandboxpod.StripPod(pod)
	if err != nil {
		panic(err)
	}
	return stripped.(*corev1.Pod)
}

// TestStopSandboxes: a Reaping claim's pod that still runs, being deleted or not yet, is asked
// once, with the claim's token at its IP and sandboxd's port, to stop, and deleted at once (grace
// period 0, on its UID) only when sandboxd said it stopped; a running pod not yet deleted is
// deleted gracefully only when the stop failed. The warm member the claim adopted is asked with
// the claim's adoption token. Nothing is asked with the stop off, of a pod not running, or of a
// pod on another token (a warm member the claim did not adopt): those are deleted gracefully at
// once.
func TestStopSandboxes(t *testing.T) {
	port := strconv.Itoa(int(sandboxpod.Ports(testRecord())[0].Port))
	wantAsk := "http://" + testPodIP + ":" + port + " " + testToken
	running := func(p *corev1.Pod) { p.DeletionTimestamp = nil }
	tests := map[string]struct {
		off         bool
		pod         func(*corev1.Pod)
		stopErr     error
		claim       func(*airlockv1alpha1.SandboxClaim)
		wantToken   string // the token asked with (testToken when empty)
		wantAsked   int
		wantRelease bool
		// wantDelete: the pod deleted gracefully (the stop off, failed, or not asked).
		wantDelete bool
	}{
		"stopped before the deletion: deleted at once only":     {pod: running, wantAsked: 1, wantRelease: true},
		"refused before the deletion: deleted after the answer": {pod: running, stopErr: errors.New("409 not_init"), wantAsked: 1, wantDelete: true},
		"stopped while terminating: deleted at once":            {wantAsked: 1, wantRelease: true},
		"refused while terminating: left to the kubelet":        {stopErr: errors.New("409 not_init"), wantAsked: 1},
		"the stop off": {off: true, pod: running, wantDelete: true},
		"its container waits (restarting)": {wantDelete: true, pod: func(p *corev1.Pod) {
			running(p)
			p.Status.ContainerStatuses[0].State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}
		}},
		"no status of its container yet": {wantDelete: true, pod: func(p *corev1.Pod) { running(p); p.Status.ContainerStatuses = nil }},
		"ended (Failed)":                 {wantDelete: true, pod: func(p *corev1.Pod) { running(p); p.Status.Phase = corev1.PodFailed }},
		"no IP":                          {wantDelete: true, pod: func(p *corev1.Pod) { running(p); p.Status.PodIP = "" }},
		"another token (a warm member)": {wantDelete: true, pod: func(p *corev1.Pod) {
			running(p)
			sandboxpod.UseTokenSecret(p, "airlock-warm-x")
		}},
		"the warm member it adopted: asked with the adoption token": {wantAsked: 1, wantRelease: true, wantToken: "adopt-c1",
			pod: func(p *corev1.Pod) { running(p); sandboxpod.UseTokenSecret(p, "airlock-warm-x") },
			claim: func(c *airlockv1alpha1.SandboxClaim) {
				c.Status.Warm = &airlockv1alpha1.WarmAdoption{Member: "c1", WorkspaceDir: "ns/sandboxes/warm/c1"}
			}},
		"a warm member it did not adopt": {wantDelete: true,
			pod: func(p *corev1.Pod) { running(p); sandboxpod.UseTokenSecret(p, "airlock-warm-x") },
			claim: func(c *airlockv1alpha1.SandboxClaim) {
				c.Status.Warm = &airlockv1alpha1.WarmAdoption{Member: "another", WorkspaceDir: "ns/sandboxes/warm/another"}
			}},
		"not controlled by the claim": {pod: func(p *corev1.Pod) { p.OwnerReferences = nil }},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(t).withDefaults()
			claim := reapingClaim("c1", t0.Add(-time.Hour), "")
			if tc.claim != nil {
				tc.claim(claim)
			}
			f.claims = append(f.claims, claim)
			f.withChildren(claim)
			pod := terminatingPod(claim, tc.pod)
			f.pods = append(f.pods, pod)
			c := f.newController(ctx)
			c.newAdoptionToken = func(_ context.Context, claim *airlockv1alpha1.SandboxClaim, member string, _ *airlockv1alpha1.FrozenSandbox) (string, error) {
				return "adopt-" + member, nil
			}
			stopper := &fakeStopper{err: tc.stopErr}
			rel := &recordingRelease{lostPodControl: c.lostPods}
			c.lostPods = rel
			if !tc.off {
				c.SetOperatorPeer(testOperatorPeer)
				c.stops.client = stopper
			}
			for range 2 { // asked once, whatever the syncs
				if _, err := syncClaim(ctx, c, keyOf(claim)); err != nil {
					t.Fatal(err)
				}
				c.waitForStops()
			}
			if len(stopper.asked) != tc.wantAsked {
				t.Fatalf("asked %v, want %d stop(s)", stopper.asked, tc.wantAsked)
			}
			want := wantAsk
			if tc.wantToken != "" {
				want = "http://" + testPodIP + ":" + port + " " + tc.wantToken
			}
			if tc.wantAsked > 0 && stopper.asked[0] != want {
				t.Errorf("asked %q, want %q", stopper.asked[0], want)
			}
			if got := len(rel.released) == 1 && rel.released[0] == pod.UID; got != tc.wantRelease || len(rel.released) > 1 {
				t.Errorf("released %v, want the pod released: %v", rel.released, tc.wantRelease)
			}
			// The fixture's cache does not see a deletion: a graceful one is made at each sync.
			graceful := countActions(f, "delete pods c1") - len(rel.released)
			if (graceful > 0) != tc.wantDelete {
				t.Errorf("%d graceful deletions of the pod (actions %v), want them: %v", graceful, f.actions(), tc.wantDelete)
			}
			if tc.wantRelease {
				if got := f.events(); !containsPrefix(got, "Normal "+ReasonSandboxStopped) {
					t.Errorf("events %v, want a %s event", got, ReasonSandboxStopped)
				}
			}
		})
	}
}

// blockingStopper answers no stop until its context is done.
type blockingStopper struct{ asked chan struct{} }

func (b *blockingStopper) Stop(ctx context.Context, _, _ string) (sandboxstop.Response, error) {
	b.asked <- struct{}{}
	<-ctx.Done()
	return sandboxstop.Response{}, ctx.Err()
}

// TestStopHoldsTheDeletionForStopHoldOnly: a running pod whose sandboxd does not answer is held
// from deletion for stopHold after it was asked, and then deleted gracefully (left to the
// kubelet), the stop still in flight; the sync says when to look again.
func TestStopHoldsTheDeletionForStopHoldOnly(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	f := newFixture(t).withDefaults()
	claim := reapingClaim("c1", t0.Add(-time.Hour), "")
	f.claims = append(f.claims, claim)
	f.withChildren(claim)
	f.pods = append(f.pods, terminatingPod(claim, func(p *corev1.Pod) { p.DeletionTimestamp = nil }))
	c := f.newController(ctx)
	c.SetOperatorPeer(testOperatorPeer)
	stopper := &blockingStopper{asked: make(chan struct{}, 1)}
	c.stops.client = stopper
	defer func() { cancel(); c.waitForStops() }()
	requeue, err := syncClaim(ctx, c, keyOf(claim))
	if err != nil {
		t.Fatal(err)
	}
	<-stopper.asked
	if n := countActions(f, "delete pods c1"); n != 0 || requeue == nil || *requeue != stopHold {
		t.Fatalf("asked: %d deletions, requeue %v; want none, and a look again in %v", n, requeue, stopHold)
	}
	f.clock.Step(stopHold - time.Millisecond)
	if _, err := syncClaim(ctx, c, keyOf(claim)); err != nil {
		t.Fatal(err)
	}
	if n := countActions(f, "delete pods c1"); n != 0 {
		t.Fatalf("%d deletions before stopHold passed, want none", n)
	}
	f.clock.Step(time.Millisecond)
	if _, err := syncClaim(ctx, c, keyOf(claim)); err != nil {
		t.Fatal(err)
	}
	if n := countActions(f, "delete pods c1"); n != 1 {
		t.Fatalf("%d deletions once stopHold passed (actions %v), want the graceful one", n, f.actions())
	}
}

// TestStopSandboxAskedAgainAfterDeletion: a pod is forgotten once deleted, so that a pod of the
// same name created since (another UID) is asked in its turn.
func TestStopSandboxAskedAgainAfterDeletion(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t).withDefaults()
	claim := reapingClaim("c1", t0.Add(-time.Hour), "")
	f.claims = append(f.claims, claim)
	pod := terminatingPod(claim, nil)
	c := f.newController(ctx)
	stopper := &fakeStopper{}
	c.SetOperatorPeer(testOperatorPeer)
	c.stops.client = stopper
	c.stopSandboxes(ctx, claim, []*corev1.Pod{pod})
	c.stopSandboxes(ctx, claim, []*corev1.Pod{pod})
	c.waitForStops()
	c.forgetStop(pod.UID)
	c.stopSandboxes(ctx, claim, []*corev1.Pod{pod})
	c.waitForStops()
	if len(stopper.asked) != 2 {
		t.Fatalf("asked %v, want twice (once before and once after the pod was forgotten)", stopper.asked)
	}
}

// TestClaimNetworkPolicyLetsTheOperatorIn: with the stop on, the claim's policy lets the
// operator's pods (and only them) reach sandboxd's port; off, the policy is as before.
func TestClaimNetworkPolicyLetsTheOperatorIn(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t).withDefaults()
	c := f.newController(ctx)
	claim := bound("c1", t0)
	record := claim.Status.Frozen
	if got := c.claimNetworkPolicy(claim, record, nil); len(got.Spec.Ingress) != 1 {
		t.Fatalf("off: ingress %+v, want the namespace's rule only", got.Spec.Ingress)
	}
	c.SetOperatorPeer(testOperatorPeer)
	np := c.claimNetworkPolicy(claim, record, nil)
	if len(np.Spec.Ingress) != 2 {
		t.Fatalf("on: ingress %+v, want the namespace's rule and the operator's", np.Spec.Ingress)
	}
	rule := np.Spec.Ingress[1]
	from := rule.From[0]
	if from.NamespaceSelector.MatchLabels[corev1.LabelMetadataName] != "airlock-system" || from.PodSelector.MatchLabels["app.kubernetes.io/component"] != "operator" || len(rule.Ports) != 1 ||
		rule.Ports[0].Port.IntVal != sandboxpod.Ports(record)[0].Port {
		t.Errorf("the operator's rule %+v, want its pods to sandboxd's port", rule)
	}
}

func countActions(f *fixture, want string) int {
	n := 0
	for _, a := range f.actions() {
		if a == want {
			n++
		}
	}
	return n
}

func checkActionsContain(t *testing.T, f *fixture, want string) {
	t.Helper()
	for _, a := range f.actions() {
		if a == want {
			return
		}
	}
	t.Errorf("actions %v, want %q among them", f.actions(), want)
}

func containsPrefix(list []string, prefix string) bool {
	for _, s := range list {
		if len(s) >= len(prefix) && s[:len(prefix)] == prefix {
			return true
		}
	}
	return false
}
