package claim

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	core "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/claimtoken"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
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
		f.withChildren(predecessorOf(claim))
		old := newPod(predecessorOf(claim), markReady)
		old.DeletionTimestamp = ptr.To(metav1.NewTime(t0)) // already being deleted
		old.Finalizers = []string{"foregroundDeletion"}
		f.pods = append(f.pods, old)
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
		// goes with the earlier claim by garbage collection. The pod waits for the policy.
		if diff := cmp.Diff([]string{"create secrets " + tokenSecretName(claim), "delete networkpolicies c1"}, got); diff != "" {
			t.Errorf("actions (-want +got):\n%s", diff)
		}
		if events := f.events(); len(events) != 0 {
			t.Errorf("events %v: an earlier claim's child is not foreign", events)
		}
	})

	t.Run("the earlier claim's pod is deleted, and the claim waits", func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		f := newFixture(t).withDefaults()
		claim := binding("c1", began)
		f.claims = append(f.claims, claim)
		f.withChildren(claim)
		f.pods = append(f.pods, newPod(predecessorOf(claim), markReady))
		c := f.newController(ctx)
		requeue, err := c.sync(ctx, keyOf(claim))
		if err != nil {
			t.Fatalf("sync: %v; want a quiet wait", err)
		}
		checkRequeue(t, requeue, ptr.To(4*time.Minute))
		checkActions(t, f, []string{"create secrets " + tokenSecretName(claim), "delete pods c1"})
		if events := f.events(); len(events) != 0 {
			t.Errorf("events %v: an earlier claim's pod is not foreign", events)
		}
	})

	t.Run("at the startupTimeout they are still there: Failed", func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		f := newFixture(t).withDefaults()
		claim := binding("c1", began)
		f.claims = append(f.claims, claim)
		f.withChildren(predecessorOf(claim))
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
		f.withChildren(claim)
		old := newPod(predecessorOf(claim), markReady)
		old.DeletionTimestamp = ptr.To(metav1.NewTime(t0)) // terminating, and Ready until it ends
		f.pods = append(f.pods, old)
		c := f.newController(ctx)
		requeue, err := c.sync(ctx, keyOf(claim))
		if err != nil {
			t.Fatal(err)
		}
		checkRequeue(t, requeue, ptr.To(4*time.Minute))
		checkActions(t, f, []string{"create secrets " + tokenSecretName(claim)})

		// Its own pod does.
		f.pods = []*corev1.Pod{newPod(claim, markReady)}
		c = f.newController(ctx)
		if _, err := c.sync(ctx, keyOf(claim)); err != nil {
			t.Fatal(err)
		}
		if got := f.writtenClaim(); got.Status.Phase != airlockv1alpha1.ClaimBound {
			t.Errorf("phase %s with its own Ready pod, want Bound", got.Status.Phase)
		}
	})
}

func TestSyncAdmitsAndBuildsChildren(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t).withDefaults()
	claim := newClaim("c1", "s1", "", t0.Add(-time.Second))
	f.claims = append(f.claims, claim)
	c := f.newController(ctx)

	if err := admitAndBuild(ctx, c); err != nil {
		t.Fatal(err)
	}
	checkActions(t, f, []string{
		"update sandboxclaims/status c1",
		"create secrets " + tokenSecretName(claim),
		"create networkpolicies c1",
		"create pods c1",
	})
	got := f.writtenClaim()
	if got.Status.Phase != airlockv1alpha1.ClaimBinding {
		t.Errorf("phase %q, want Binding", got.Status.Phase)
	}
	if cond := findCondition(got, ConditionReady); cond == nil || cond.Reason != ReasonBinding || !cond.LastTransitionTime.Time.Equal(t0) {
		t.Errorf("Ready condition %+v, want False/Binding at t0", cond)
	}
	secret := f.written("secrets", "").(*corev1.Secret)
	if string(secret.Data[sandboxpod.TokenKey]) != testToken || secret.Type != corev1.SecretTypeOpaque || !metav1.IsControlledBy(secret, claim) {
		t.Errorf("secret %+v is not the claim's token", secret)
	}
	if p := f.written("pods", "").(*corev1.Pod); sandboxpod.TokenSecretOf(p) != secret.Name {
		t.Errorf("the pod mounts Secret %q, want the created %q", sandboxpod.TokenSecretOf(p), secret.Name)
	}
	if diff := cmp.Diff([]string{"Normal Admitted " + MessageAdmitted}, f.events()); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

func TestSyncIsIdempotentAndRepairsDrift(t *testing.T) {
	began := t0.Add(-time.Minute)
	tests := map[string]struct {
		mutate      func(f *fixture)
		wantActions []string
	}{
		"nothing to do": {
			wantActions: nil,
		},
		"pod image changed: deleted, to be created again from the record": {
			mutate:      func(f *fixture) { f.pods[0].Spec.Containers[0].Image = "evil:latest" },
			wantActions: []string{"delete pods c1"},
		},
		"pod args changed: deleted, to be created again from the record": {
			mutate:      func(f *fixture) { f.pods[0].Spec.Containers[0].Args = []string{"sandboxd"} },
			wantActions: []string{"delete pods c1"},
		},
		"pod labels changed: repaired": {
			mutate:      func(f *fixture) { f.pods[0].Labels[airlockv1alpha1.LabelRuntime] = "other" },
			wantActions: []string{"patch pods c1"},
		},
		"class changed since the pod was built: the template is kept": {
			mutate: func(f *fixture) {
				f.classes[0].Generation = 2
				f.classes[0].Spec.Image = "example.com/new:v2"
			},
			wantActions: nil,
		},

		"network policy opened": {
			mutate: func(f *fixture) {
				f.netpols[0].Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
			},
			wantActions: []string{"update networkpolicies c1"},
		},
		"secret with another token is left alone (never read)": {
			mutate:      func(f *fixture) { f.secrets[0].Data[sandboxpod.TokenKey] = []byte("other") },
			wantActions: nil,
		},
		"pod gone: the secret is created again first, AlreadyExists is done": {
			mutate:      func(f *fixture) { f.pods = nil },
			wantActions: []string{"create secrets " + claimtoken.ClaimSecretName("c1", testToken), "create pods c1"},
		},
		"pod mounting a planted Secret: ours is ensured and the pod deleted, to be created again": {
			mutate:      func(f *fixture) { sandboxpod.UseTokenSecret(f.pods[0], "planted") },
			wantActions: []string{"create secrets " + claimtoken.ClaimSecretName("c1", testToken), "delete pods c1"},
		},
		"children gone are created again, the policy before the pod": {
			mutate:      func(f *fixture) { f.pods, f.netpols = nil, nil },
			wantActions: []string{"create secrets " + claimtoken.ClaimSecretName("c1", testToken), "create networkpolicies c1", "create pods c1"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(t).withDefaults()
			claim := binding("c1", began)
			f.claims = append(f.claims, claim)
			f.withChildren(claim)
			f.pods = append(f.pods, newPod(claim, nil))
			if tc.mutate != nil {
				tc.mutate(f)
			}
			c := f.newController(ctx)
			requeue, err := c.sync(ctx, keyOf(claim))
			if err != nil {
				t.Fatal(err)
			}
			checkRequeue(t, requeue, ptr.To(4*time.Minute))
			checkActions(t, f, tc.wantActions)
			if slices.Contains(tc.wantActions, "create pods c1") {
				if p := f.written("pods", "").(*corev1.Pod); p.Spec.Containers[0].Image != newClass("codegen").Spec.Image {
					t.Errorf("created pod runs %s, want the record's image", p.Spec.Containers[0].Image)
				}
			}
		})
	}
}

// TestSyncSecretCreateOnly: the operator may not read Secrets outside its namespace, so the
// claim's Secret is only ever created: a Secret that exists already (an earlier sync's, whose
// pod create failed) is AlreadyExists and counts as done, and nothing reads or updates it.
func TestSyncSecretCreateOnly(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t).withDefaults()
	claim := binding("c1", t0)
	f.claims = append(f.claims, claim)
	f.secrets = append(f.secrets, sandboxpod.TokenSecret(claim, tokenSecretName(claim), testToken))
	c := f.newController(ctx)
	if _, err := c.sync(ctx, keyOf(claim)); err != nil {
		t.Fatal(err)
	}
	checkActions(t, f, []string{"create secrets " + tokenSecretName(claim), "create networkpolicies c1", "create pods c1"})
	for _, a := range f.log {
		if a.GetResource().Resource == "secrets" && a.GetVerb() != "create" {
			t.Errorf("%s secrets: the controller may only create Secrets", a.GetVerb())
		}
	}
}

// TestSyncWithoutTokenFailsClosed: without the key (no token), no Secret and no pod is
// created, and the sync fails so that it is retried.
func TestSyncWithoutTokenFailsClosed(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t).withDefaults()
	claim := binding("c1", t0)
	f.claims = append(f.claims, claim)
	f.tokenErr = errors.New("the claim token key is not available")
	c := f.newController(ctx)
	if _, err := c.sync(ctx, keyOf(claim)); err == nil || !strings.Contains(err.Error(), "key is not available") {
		t.Fatalf("sync error %v, want the key's error", err)
	}
	checkActions(t, f, nil)
}

func TestSyncClassNotFound(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t).withDefaults()
	f.classes = nil
	claim := newClaim("c1", "s1", airlockv1alpha1.ClaimPending, t0)
	f.claims = append(f.claims, claim)
	c := f.newController(ctx)
	if err := admitAndBuild(ctx, c); err != nil {
		t.Fatal(err)
	}
	// Failed at admission, in one write: nothing is built without a record.
	checkActions(t, f, []string{"update sandboxclaims/status c1"})
	if got := f.writtenClaim(); got.Status.Phase != airlockv1alpha1.ClaimFailed || got.Status.Reason != ReasonClassNotFound || got.Status.Frozen != nil {
		t.Errorf("status %s/%s, want Failed/%s", got.Status.Phase, got.Status.Reason, ReasonClassNotFound)
	}
}

// TestLegacyDeploymentPod: a claim whose pod a Deployment of an earlier version of the operator
// runs (its ReplicaSet controls the pod, which carries the claim's labels) gets no pod of its
// own, since two pods would write one workspace; it stays Bound on that pod, and when it is
// reaped its Deployment is deleted, by its UID.
func TestLegacyDeploymentPod(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t).withDefaults()
	claim := bound("c1", t0.Add(-time.Minute))
	f.claims = append(f.claims, claim)
	f.withChildren(claim)
	legacy := newPod(claim, markReady)
	legacy.Name = "c1-7d9f8-abc12"
	legacy.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "c1-7d9f8", UID: "uid-rs", Controller: ptr.To(true)}}
	f.pods = append(f.pods, legacy)
	c := f.newController(ctx)
	deployment := &appsv1.Deployment{ObjectMeta: sandboxpod.ChildMeta(claim, claim.Name)}
	deployment.UID = "uid-deployment"
	if err := f.kubeClient.Tracker().Add(deployment); err != nil {
		t.Fatal(err)
	}
	if _, err := c.sync(ctx, keyOf(claim)); err != nil {
		t.Fatal(err)
	}
	checkActions(t, f, nil)

	// Idle: reaped, and the Deployment deleted by its UID (its pod goes with it).
	f.clock.Step(time.Hour)
	f.log = nil
	if _, err := c.sync(ctx, keyOf(claim)); err != nil {
		t.Fatal(err)
	}
	checkActions(t, f, []string{"get sandboxclaims c1", "update sandboxclaims/status c1", "get deployments c1", "delete deployments c1"})
	for _, a := range f.log {
		if d, ok := a.(core.DeleteAction); ok && d.GetResource().Resource == "deployments" {
			if p := d.GetDeleteOptions().Preconditions; p == nil || p.UID == nil || *p.UID != "uid-deployment" {
				t.Errorf("Deployment deleted with preconditions %+v, want its UID", p)
			}
		}
	}
}

// TestPodAfterItsPolicy: the pod is created only once its Secret and its default-deny
// NetworkPolicy have been: a sandbox never runs a moment unconfined, nor without its token.
// (f.actions sorts concurrent child writes; the raw log keeps their order.)
func TestPodAfterItsPolicy(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t).withDefaults()
	claim := binding("c1", t0)
	f.claims = append(f.claims, claim)
	c := f.newController(ctx)
	if _, err := c.sync(ctx, keyOf(claim)); err != nil {
		t.Fatal(err)
	}
	at := map[string]int{}
	for i, a := range f.log {
		if a.GetVerb() == "create" {
			at[a.GetResource().Resource] = i + 1
		}
	}
	if at["pods"] == 0 || at["networkpolicies"] == 0 || at["secrets"] == 0 {
		t.Fatalf("creates %v, want a pod, a NetworkPolicy and a Secret", at)
	}
	if at["pods"] < at["networkpolicies"] || at["pods"] < at["secrets"] {
		t.Errorf("create order %v: the pod was created before its policy or its Secret", at)
	}
}

// TestSyncOverStrippedPods: a Bound claim whose cached pod is stripped, with drifted labels, is
// repaired with a label patch (a stripped pod is never written back whole), and nothing else.
func TestSyncOverStrippedPods(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t).withDefaults()
	claim := bound("c1", t0.Add(-time.Minute))
	f.claims = append(f.claims, claim)
	f.withChildren(claim)
	whole := newPod(claim, markReady)
	whole.Labels[airlockv1alpha1.LabelRuntime] = "other"
	stripped, _ := sandboxpod.StripPod(whole)
	f.pods = append(f.pods, stripped.(*corev1.Pod))
	c := f.newController(ctx)
	if _, err := c.sync(ctx, keyOf(claim)); err != nil {
		t.Fatal(err)
	}
	checkActions(t, f, []string{"patch pods c1"})
	p, err := f.kubeClient.CoreV1().Pods(testNamespace).Get(ctx, "c1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Labels[airlockv1alpha1.LabelRuntime] != claim.Spec.RuntimeName {
		t.Errorf("pod labels %v after the repair, want the runtime label %q", p.Labels, claim.Spec.RuntimeName)
	}
}
