package claim

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	core "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
)

// proxyService is an allowed Service of namespace infra selecting app=<app>.
func proxyService(app string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "proxy", Namespace: "infra", ResourceVersion: "1"},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": app},
			Ports:    []corev1.ServicePort{{Port: 80}},
		},
	}
}

// boundAllowingProxy is a Bound claim whose record allows infra/proxy, with its children as
// they were built while no Service existed, and its ready pod.
func boundAllowingProxy(f *fixture, existing *corev1.Service) *airlockv1alpha1.SandboxClaim {
	claim := bound("c1", t0.Add(-time.Minute))
	claim.Status.Frozen.AllowedServices = []airlockv1alpha1.ServiceReference{{Namespace: "infra", Name: "proxy"}}
	f.claims = append(f.claims, claim)
	f.withChildren(claim)
	var allowed []*corev1.Service
	if existing != nil {
		f.allowedServices = append(f.allowedServices, existing)
		allowed = append(allowed, existing)
	}
	f.netpols[0] = sandboxpod.ClaimNetworkPolicy(claim, claim.Status.Frozen, allowed)
	f.pods = append(f.pods, newPod(claim, markReady))
	return claim
}

// startAllowedServices runs the controller's allowed-Service informer on the fake client and
// waits until it has listed and its watch is open, so that no later write is missed.
func (f *fixture) startAllowedServices(ctx context.Context) {
	f.t.Helper()
	watching := make(chan struct{})
	f.kubeClient.PrependWatchReactor("services", func(action core.Action) (bool, watch.Interface, error) {
		w, err := f.kubeClient.Tracker().Watch(action.GetResource(), action.GetNamespace())
		if err != nil {
			return false, nil, err
		}
		close(watching)
		return true, w, nil
	})
	go f.allowedServiceInformer.Run(ctx.Done())
	select {
	case <-watching:
	case <-time.After(wait.ForeverTestTimeout):
		f.t.Fatal("the allowed-Service informer did not watch")
	}
	if !cache.WaitForCacheSync(ctx.Done(), f.allowedServiceInformer.HasSynced) {
		f.t.Fatal("the allowed-Service informer did not sync")
	}
}

// processServiceEvent waits until a Service event has enqueued the claim, then runs one worker
// step (the sync of what the event enqueued).
func processServiceEvent(t *testing.T, ctx context.Context, c *Controller, claim *airlockv1alpha1.SandboxClaim) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, wait.ForeverTestTimeout, true, func(context.Context) (bool, error) {
		return c.queue.Len() > 0, nil
	})
	if err != nil {
		t.Fatalf("the Service's event enqueued nothing: %v", err)
	}
	if got := c.queue.Len(); got != 1 {
		t.Fatalf("%d keys queued, want the one claim", got)
	}
	c.syncHandler = func(ctx context.Context, key cache.ObjectName) (*time.Duration, error) {
		if key != keyOf(claim) {
			t.Errorf("queued %v, want %v", key, keyOf(claim))
		}
		return c.sync(ctx, key)
	}
	c.processNextWorkItem(ctx)
}

// egressTo returns the pod selectors of the policy's egress rules, without DNS's.
func egressTo(np *networkingv1.NetworkPolicy) []string {
	var out []string
	for _, r := range np.Spec.Egress {
		for _, p := range r.To {
			if p.PodSelector != nil && p.PodSelector.MatchLabels["k8s-app"] != "kube-dns" {
				out = append(out, p.NamespaceSelector.MatchLabels[corev1.LabelMetadataName]+"/"+metav1.FormatLabelSelector(p.PodSelector))
			}
		}
	}
	return out
}

// noServiceGET fails if the controller read a Service from the API server.
func noServiceGET(t *testing.T, f *fixture) {
	t.Helper()
	for _, a := range f.actions() {
		if strings.HasPrefix(a, "get services") {
			t.Errorf("the controller read a Service from the API server (%s): allowed Services come from the cache", a)
		}
	}
}

// TestAllowedServiceCreatedAfterBound: a Service the record allows, created after the claim is
// Bound, opens the claim's NetworkPolicy on the Service's own event (nothing else enqueues the
// claim), read from the cache, not with a GET.
func TestAllowedServiceCreatedAfterBound(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	f := newFixture(t).withDefaults()
	claim := boundAllowingProxy(f, nil)
	c := f.newController(ctx)
	f.startAllowedServices(ctx)

	if _, err := f.kubeClient.CoreV1().Services("infra").Create(ctx, proxyService("proxy"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.log = nil
	processServiceEvent(t, ctx, c, claim)

	checkActions(t, f, []string{"update networkpolicies c1"})
	np := f.written("networkpolicies", "").(*networkingv1.NetworkPolicy)
	if got, want := egressTo(np), []string{"infra/app=proxy"}; !slices.Equal(got, want) {
		t.Errorf("egress to %v, want %v", got, want)
	}
	noServiceGET(t, f)
}

// TestAllowedServiceSelectorChanged: a change of an allowed Service's selector moves the
// NetworkPolicy's egress to the new pods.
func TestAllowedServiceSelectorChanged(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	f := newFixture(t).withDefaults()
	claim := boundAllowingProxy(f, proxyService("proxy"))
	c := f.newController(ctx)
	f.startAllowedServices(ctx)

	changed := proxyService("proxy-v2")
	changed.ResourceVersion = "2"
	if _, err := f.kubeClient.CoreV1().Services("infra").Update(ctx, changed, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.log = nil
	processServiceEvent(t, ctx, c, claim)

	checkActions(t, f, []string{"update networkpolicies c1"})
	np := f.written("networkpolicies", "").(*networkingv1.NetworkPolicy)
	if got, want := egressTo(np), []string{"infra/app=proxy-v2"}; !slices.Equal(got, want) {
		t.Errorf("egress to %v, want %v", got, want)
	}
	noServiceGET(t, f)
}

// TestAllowedServiceDeleted: deleting an allowed Service closes the egress to its pods (DNS
// stays: the record still allows a Service).
func TestAllowedServiceDeleted(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	f := newFixture(t).withDefaults()
	claim := boundAllowingProxy(f, proxyService("proxy"))
	c := f.newController(ctx)
	f.startAllowedServices(ctx)

	if err := f.kubeClient.CoreV1().Services("infra").Delete(ctx, "proxy", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.log = nil
	processServiceEvent(t, ctx, c, claim)

	checkActions(t, f, []string{"update networkpolicies c1"})
	np := f.written("networkpolicies", "").(*networkingv1.NetworkPolicy)
	if got := egressTo(np); len(got) != 0 {
		t.Errorf("egress to %v after the Service was deleted, want none", got)
	}
	if len(np.Spec.Egress) != 1 {
		t.Errorf("egress %+v, want DNS alone", np.Spec.Egress)
	}
	noServiceGET(t, f)
}

// TestAllowedServiceOfNoClaim: a Service no record allows enqueues nothing, and a change that
// leaves selector and ports as they were (a label, an annotation) does not either.
func TestAllowedServiceOfNoClaim(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t).withDefaults()
	boundAllowingProxy(f, nil)
	c := f.newController(ctx)

	other := proxyService("other")
	other.Name = "other"
	c.addAllowedService(other)
	old, cur := proxyService("proxy"), proxyService("proxy")
	cur.ResourceVersion = "2"
	c.updateAllowedService(old, cur)
	if got := c.queue.Len(); got != 0 {
		t.Errorf("%d keys queued, want none", got)
	}
	c.deleteAllowedService(cache.DeletedFinalStateUnknown{Key: "infra/proxy", Obj: old})
	if got := c.queue.Len(); got != 1 {
		t.Errorf("a tombstone of an allowed Service queued %d keys, want its claim", got)
	}
}

// TestStripService keeps what a NetworkPolicy is built from, and the cluster IP (the egress
// gateway's address), and drops the rest.
func TestStripService(t *testing.T) {
	svc := proxyService("proxy")
	svc.UID = "u1"
	svc.Labels = map[string]string{"a": "b"}
	svc.Annotations = map[string]string{"kubectl.kubernetes.io/last-applied-configuration": strings.Repeat("x", 1000)}
	svc.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}
	svc.Spec.ClusterIP = "10.0.0.1"
	got, err := sandboxpod.StripService(svc)
	if err != nil {
		t.Fatal(err)
	}
	want := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "proxy", Namespace: "infra", UID: "u1", ResourceVersion: "1"},
		Spec:       corev1.ServiceSpec{Selector: svc.Spec.Selector, Ports: svc.Spec.Ports, ClusterIP: "10.0.0.1"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("StripService (-want +got):\n%s", diff)
	}
	tombstone := cache.DeletedFinalStateUnknown{Key: "infra/proxy"}
	if got, _ := sandboxpod.StripService(tombstone); got != tombstone {
		t.Errorf("a tombstone was changed: %+v", got)
	}
}
