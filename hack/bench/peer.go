package main

// The peer (issue 40): kubernetes-sigs/agent-sandbox's controller (hack/tools/agent-sandbox pins
// it), measured on a plane of its own with the same scenarios. It has no API of its own: a client
// creates a SandboxClaim naming a SandboxWarmPool (v1beta1 requires one) and waits for the claim's
// Ready condition, which the controller sets True once the claim's Sandbox, and so its pod, is
// Ready. A cold scenario's pool has 0 replicas (the claim creates its Sandbox from the pool's
// template); warm20's has the scenario's warm members. Its objects are unstructured: the bench
// takes no dependency on the peer's module.

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

var (
	peerClaims    = schema.GroupVersionResource{Group: "extensions.agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxclaims"}
	peerTemplates = schema.GroupVersionResource{Group: "extensions.agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxtemplates"}
	peerPools     = schema.GroupVersionResource{Group: "extensions.agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxwarmpools"}
	peerSandboxes = schema.GroupVersionResource{Group: "agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxes"}
)

const (
	// peerPool and peerTemplate name each namespace's pool and template.
	peerPool     = "bench"
	peerTemplate = "bench"
	// peerLaunchTypeLabel marks the peer's Sandboxes "warm" (made by a pool) or "cold".
	peerLaunchTypeLabel = "agents.x-k8s.io/launch-type"
)

// peerProduct acquires by creating SandboxClaims and watching them until Ready.
type peerProduct struct {
	kube kube
	mu   sync.Mutex
	// watches are the running watches of each namespace's claims.
	watches map[string]*readyWatch
}

func newPeer(k kube) *peerProduct { return &peerProduct{kube: k, watches: map[string]*readyWatch{}} }

func (*peerProduct) readyAs() string                   { return "Ready" }
func (*peerProduct) process() string                   { return "agent-sandbox-controller" }
func (*peerProduct) prepare(ctx context.Context) error { return nil }

func (p *peerProduct) forget(ns string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if w := p.watches[ns]; w != nil {
		w.stop()
		delete(p.watches, ns)
	}
}

// peerPodSpec is the template's pod: the same image and requests as airlock's bench sandbox, and
// what Pod Security "restricted" asks of it (the namespaces are restricted, as airlock's are).
func peerPodSpec() corev1.PodSpec {
	return corev1.PodSpec{
		SecurityContext: &corev1.PodSecurityContext{
			RunAsNonRoot:   ptr.To(true),
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		Containers: []corev1.Container{{
			Name:  "sandbox",
			Image: image,
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("256Mi"),
			}},
			SecurityContext: &corev1.SecurityContext{
				AllowPrivilegeEscalation: ptr.To(false),
				Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			},
		}},
	}
}

// peerObjects are a namespace's template and pool (warm replicas).
func peerObjects(ns string, warm int32) (template, pool *unstructured.Unstructured, err error) {
	pod, err := runtime.DefaultUnstructuredConverter.ToUnstructured(ptr.To(peerPodSpec()))
	if err != nil {
		return nil, nil, err
	}
	template = &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxTemplate",
		"metadata": map[string]any{"name": peerTemplate, "namespace": ns},
		"spec": map[string]any{"podTemplate": map[string]any{
			"metadata": map[string]any{"labels": map[string]any{"app": "agent-sandbox-bench"}},
			"spec":     pod,
		}},
	}}
	pool = &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxWarmPool",
		"metadata": map[string]any{"name": peerPool, "namespace": ns},
		"spec": map[string]any{
			"replicas":           int64(warm),
			"sandboxTemplateRef": map[string]any{"name": peerTemplate},
		},
	}}
	return template, pool, nil
}

// peerClaim is the claim of one acquire.
func peerClaim(ns, name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxClaim",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec":     map[string]any{"warmPoolRef": map[string]any{"name": peerPool}},
	}}
}

func (p *peerProduct) setupNamespace(ctx context.Context, ns string, s scenario) (target, error) {
	if s.WarmPolicy != nil {
		return target{}, fmt.Errorf("scenario %s: the peer's pools do not follow demand by themselves", s.Name)
	}
	warm := s.Warm
	_, err := p.kube.core.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name:   ns,
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted", "airlock.dev/bench": "true"},
	}}, metav1.CreateOptions{})
	if err != nil {
		return target{}, fmt.Errorf("creating namespace %s: %w", ns, err)
	}
	template, pool, err := peerObjects(ns, warm)
	if err != nil {
		return target{}, err
	}
	if _, err := p.kube.dynamic.Resource(peerTemplates).Namespace(ns).Create(ctx, template, metav1.CreateOptions{}); err != nil {
		return target{}, fmt.Errorf("creating SandboxTemplate %s/%s: %w", ns, peerTemplate, err)
	}
	if _, err := p.kube.dynamic.Resource(peerPools).Namespace(ns).Create(ctx, pool, metav1.CreateOptions{}); err != nil {
		return target{}, fmt.Errorf("creating SandboxWarmPool %s/%s: %w", ns, peerPool, err)
	}
	w, err := p.watch(ns)
	if err != nil {
		return target{}, err
	}
	claims := p.kube.dynamic.Resource(peerClaims).Namespace(ns)
	return target{namespace: ns, acquire: func(ctx context.Context, session string, waitSeconds int) error {
		ready := w.expect(session)
		if _, err := claims.Create(ctx, peerClaim(ns, session), metav1.CreateOptions{}); err != nil {
			return err
		}
		if waitSeconds <= 0 {
			return nil
		}
		wctx, cancel := context.WithTimeout(ctx, time.Duration(waitSeconds)*time.Second)
		defer cancel()
		select {
		case <-ready:
			return nil
		case <-wctx.Done():
			return wctx.Err()
		}
	}}, nil
}

// watch starts a watch of ns's claims that tells when each is Ready, and waits for its first
// list.
func (p *peerProduct) watch(ns string) (*readyWatch, error) {
	ctx, cancel := context.WithCancel(context.Background())
	w := newReadyWatch(cancel)
	inf := dynamicinformer.NewFilteredDynamicInformer(p.kube.dynamic, peerClaims, ns, 0, cache.Indexers{}, nil)
	observe := func(obj any) {
		if u, ok := obj.(*unstructured.Unstructured); ok && conditionTrue(u, "Ready") {
			w.ready(u.GetName())
		}
	}
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    observe,
		UpdateFunc: func(_, obj any) { observe(obj) },
	}); err != nil {
		cancel()
		return nil, err
	}
	go inf.Informer().RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), inf.Informer().HasSynced) {
		cancel()
		return nil, fmt.Errorf("the watch of %s's SandboxClaims did not sync", ns)
	}
	p.mu.Lock()
	p.watches[ns] = w
	p.mu.Unlock()
	return w, nil
}

// conditionTrue says whether u's status has condition typ with status True.
func conditionTrue(u *unstructured.Unstructured, typ string) bool {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, ok := c.(map[string]any)
		if ok && m["type"] == typ {
			return m["status"] == string(metav1.ConditionTrue)
		}
	}
	return false
}

// readyWatch tells waiters when a claim is first seen Ready.
type readyWatch struct {
	stop    context.CancelFunc
	mu      sync.Mutex
	waiters map[string]chan struct{}
	seen    map[string]bool
}

func newReadyWatch(stop context.CancelFunc) *readyWatch {
	return &readyWatch{stop: stop, waiters: map[string]chan struct{}{}, seen: map[string]bool{}}
}

// expect returns a channel closed once claim name is seen Ready (at once if it has been).
func (w *readyWatch) expect(name string) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	ch := w.waiters[name]
	if ch == nil {
		ch = make(chan struct{})
		w.waiters[name] = ch
		if w.seen[name] {
			close(ch)
		}
	}
	return ch
}

// ready records that claim name is Ready.
func (w *readyWatch) ready(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.seen[name] {
		return
	}
	w.seen[name] = true
	if ch := w.waiters[name]; ch != nil {
		close(ch)
	}
}

// waitWarmReady watches ns's pool until its status reports want ready replicas.
func (p *peerProduct) waitWarmReady(ctx context.Context, ns string, want int32) error {
	pools := p.kube.dynamic.Resource(peerPools).Namespace(ns)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			nameSelector(peerPool)(&o)
			return pools.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			nameSelector(peerPool)(&o)
			return pools.Watch(ctx, o)
		},
	}
	err := until(ctx, lw, &unstructured.Unstructured{}, func(ev watch.Event) (bool, error) {
		u, ok := ev.Object.(*unstructured.Unstructured)
		if !ok {
			return false, nil
		}
		n, _, _ := unstructured.NestedInt64(u.Object, "status", "readyReplicas")
		return n >= int64(want), nil
	})
	if err != nil {
		return fmt.Errorf("waiting for %d ready members of SandboxWarmPool %s/%s: %w", want, ns, peerPool, err)
	}
	return nil
}

// warmBound counts the claims of namespaces whose Sandbox came from the pool.
func (p *peerProduct) warmBound(ctx context.Context, namespaces []string) (int, error) {
	n := 0
	for _, ns := range namespaces {
		claims, err := p.kube.dynamic.Resource(peerClaims).Namespace(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return 0, fmt.Errorf("listing the SandboxClaims of %s: %w", ns, err)
		}
		sandboxes, err := p.kube.dynamic.Resource(peerSandboxes).Namespace(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return 0, fmt.Errorf("listing the Sandboxes of %s: %w", ns, err)
		}
		n += countWarmClaims(claims.Items, sandboxes.Items)
	}
	return n, nil
}

// countWarmClaims counts the claims whose status names a Sandbox that a pool made (launch type
// "warm"): the pool's own members, not yet claimed, are not counted.
func countWarmClaims(claims, sandboxes []unstructured.Unstructured) int {
	warm := map[string]bool{}
	for _, s := range sandboxes {
		if s.GetLabels()[peerLaunchTypeLabel] == "warm" {
			warm[s.GetName()] = true
		}
	}
	n := 0
	for _, c := range claims {
		name, _, _ := unstructured.NestedString(c.Object, "status", "sandbox", "name")
		if name != "" && warm[name] {
			n++
		}
	}
	return n
}
