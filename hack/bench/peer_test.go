package main

import (
	"context"
	"errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
)

func withConditions(name string, conds ...map[string]any) *unstructured.Unstructured {
	u := peerClaim("ns", name)
	list := make([]any, 0, len(conds))
	for _, c := range conds {
		list = append(list, c)
	}
	_ = unstructured.SetNestedSlice(u.Object, list, "status", "conditions")
	return u
}

// TestConditionTrue: a claim is ready when its Ready condition is True, not False, not missing,
// and not another condition's True.
func TestConditionTrue(t *testing.T) {
	for _, tc := range []struct {
		claim *unstructured.Unstructured
		want  bool
	}{
		{withConditions("a", map[string]any{"type": "Ready", "status": "True"}), true},
		{withConditions("b", map[string]any{"type": "Finished", "status": "True"}, map[string]any{"type": "Ready", "status": "False"}), false},
		{withConditions("c", map[string]any{"type": "Finished", "status": "True"}), false},
		{peerClaim("ns", "d"), false},
	} {
		if got := conditionTrue(tc.claim, "Ready"); got != tc.want {
			t.Errorf("conditionTrue(%s) = %v, want %v", tc.claim.GetName(), got, tc.want)
		}
	}
}

// TestReadyWatch: a waiter learns of its claim's readiness whether it asked before or after the
// claim was seen Ready, and a second sighting does not close the channel twice.
func TestReadyWatch(t *testing.T) {
	w := newReadyWatch(func() {})
	before := w.expect("before")
	select {
	case <-before:
		t.Fatal("ready before the claim was seen Ready")
	default:
	}
	w.ready("before")
	w.ready("before")
	closed := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	if !closed(before) {
		t.Error("a waiter that asked before the claim was Ready was not told")
	}
	w.ready("after")
	if !closed(w.expect("after")) || !closed(w.expect("after")) {
		t.Error("a waiter that asked after the claim was Ready was not told")
	}
}

// TestPeerObjects: the template's pod passes Pod Security "restricted" (the bench namespaces
// enforce it) with airlock's image and requests; the pool names the template and has the warm
// members asked for (0: cold); a claim names the pool.
func TestPeerObjects(t *testing.T) {
	template, pool, err := peerObjects("ns", 250)
	if err != nil {
		t.Fatal(err)
	}
	c, _, _ := unstructured.NestedSlice(template.Object, "spec", "podTemplate", "spec", "containers")
	if len(c) != 1 {
		t.Fatalf("containers = %v, want one", c)
	}
	container := c[0].(map[string]any)
	if container["image"] != image {
		t.Errorf("image = %v, want %s", container["image"], image)
	}
	for path, want := range map[string]any{"allowPrivilegeEscalation": false} {
		if got, _, _ := unstructured.NestedFieldNoCopy(container, "securityContext", path); got != want {
			t.Errorf("container securityContext.%s = %v, want %v", path, got, want)
		}
	}
	if drop, _, _ := unstructured.NestedStringSlice(container, "securityContext", "capabilities", "drop"); len(drop) != 1 || drop[0] != "ALL" {
		t.Errorf("capabilities.drop = %v, want [ALL]", drop)
	}
	if cpu, _, _ := unstructured.NestedString(container, "resources", "requests", "cpu"); cpu != "100m" {
		t.Errorf("cpu request = %q, want 100m", cpu)
	}
	if nonRoot, _, _ := unstructured.NestedBool(template.Object, "spec", "podTemplate", "spec", "securityContext", "runAsNonRoot"); !nonRoot {
		t.Error("pod securityContext.runAsNonRoot is not true")
	}
	if seccomp, _, _ := unstructured.NestedString(template.Object, "spec", "podTemplate", "spec", "securityContext", "seccompProfile", "type"); seccomp != "RuntimeDefault" {
		t.Errorf("seccompProfile = %q, want RuntimeDefault", seccomp)
	}
	if n, _, _ := unstructured.NestedInt64(pool.Object, "spec", "replicas"); n != 250 {
		t.Errorf("pool replicas = %d, want 250", n)
	}
	if ref, _, _ := unstructured.NestedString(pool.Object, "spec", "sandboxTemplateRef", "name"); ref != template.GetName() {
		t.Errorf("pool template = %q, want %q", ref, template.GetName())
	}
	if _, cold, _ := peerObjects("ns", 0); cold.Object["spec"].(map[string]any)["replicas"] != int64(0) {
		t.Errorf("cold pool = %v, want replicas 0", cold.Object["spec"])
	}
	if ref, _, _ := unstructured.NestedString(peerClaim("ns", "s-1").Object, "spec", "warmPoolRef", "name"); ref != pool.GetName() {
		t.Errorf("claim's pool = %q, want %q", ref, pool.GetName())
	}
}

// TestCountWarmClaims: a claim counts as warm when the Sandbox its status names came from the
// pool; cold claims, claims not yet given a Sandbox and the pool's unclaimed members do not count.
func TestCountWarmClaims(t *testing.T) {
	sandbox := func(name, launch string) unstructured.Unstructured {
		u := unstructured.Unstructured{Object: map[string]any{}}
		u.SetName(name)
		u.SetLabels(map[string]string{peerLaunchTypeLabel: launch})
		return u
	}
	claim := func(name, sandbox string) unstructured.Unstructured {
		u := *peerClaim("ns", name)
		if sandbox != "" {
			_ = unstructured.SetNestedField(u.Object, sandbox, "status", "sandbox", "name")
		}
		return u
	}
	sandboxes := []unstructured.Unstructured{sandbox("w1", "warm"), sandbox("w2", "warm"), sandbox("unclaimed", "warm"), sandbox("c1", "cold")}
	claims := []unstructured.Unstructured{claim("a", "w1"), claim("b", "w2"), claim("c", "c1"), claim("d", "")}
	if got := countWarmClaims(claims, sandboxes); got != 2 {
		t.Errorf("countWarmClaims = %d, want 2", got)
	}
}

// TestPeerAcquire: an acquire creates the claim naming the pool and returns once the claim is
// seen Ready, not before; with no wait it returns once the claim exists; a claim never Ready is
// a deadline error (counted as "timed out").
func TestPeerAcquire(t *testing.T) {
	scheme := runtime.NewScheme()
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(scheme, map[schema.GroupVersionResource]string{
		peerClaims: "SandboxClaimList", peerTemplates: "SandboxTemplateList", peerPools: "SandboxWarmPoolList", peerSandboxes: "SandboxList",
	})
	p := newPeer(kube{core: fake.NewClientset(), dynamic: dyn})
	ctx := context.Background()
	tg, err := p.setupNamespace(ctx, "ns", scenario{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.forget("ns")
	claims := dyn.Resource(peerClaims).Namespace("ns")

	watcher, err := claims.Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer watcher.Stop()
	done := make(chan error, 1)
	go func() { done <- tg.acquire(ctx, "s-1", 60) }()
	ev := <-watcher.ResultChan() // the acquire's create
	created, ok := ev.Object.(*unstructured.Unstructured)
	if ev.Type != watch.Added || !ok || created.GetName() != "s-1" {
		t.Fatalf("first event %s %v, want the claim s-1 added", ev.Type, ev.Object)
	}
	select {
	case err := <-done:
		t.Fatalf("acquire returned %v before the claim was Ready", err)
	default:
	}
	if ref, _, _ := unstructured.NestedString(created.Object, "spec", "warmPoolRef", "name"); ref != peerPool {
		t.Errorf("claim's pool = %q, want %q", ref, peerPool)
	}
	_ = unstructured.SetNestedSlice(created.Object, []any{map[string]any{"type": "Ready", "status": "True"}}, "status", "conditions")
	if _, err := claims.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Errorf("acquire = %v, want nil once Ready", err)
	}

	if err := tg.acquire(ctx, "s-2", 0); err != nil {
		t.Errorf("acquire without a wait = %v", err)
	}
	if _, err := claims.Get(ctx, "s-2", metav1.GetOptions{}); err != nil {
		t.Errorf("the claim of an acquire without a wait: %v", err)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := tg.acquire(short, "s-3", 60); !errors.Is(err, context.DeadlineExceeded) || classify(err) != "timed out" {
		t.Errorf("acquire of a claim never Ready = %v (%s), want a deadline, classified timed out", err, classify(err))
	}
}
