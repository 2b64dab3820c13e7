package cabundle

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	airlockfake "github.com/airlock-dev/airlock/pkg/generated/clientset/versioned/fake"
	airlockinformers "github.com/airlock-dev/airlock/pkg/generated/informers/externalversions"
)

const egressCM = "airlock-egress-ca"

func egressClaim(ns, name, bundle string) *airlockv1alpha1.SandboxClaim {
	return &airlockv1alpha1.SandboxClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Status: airlockv1alpha1.SandboxClaimStatus{Frozen: &airlockv1alpha1.FrozenSandbox{
			Egress: &airlockv1alpha1.FrozenEgress{Gateway: airlockv1alpha1.EgressGateway{CABundleConfigMap: bundle}},
		}},
	}
}

type egressFixture struct {
	kube       *k8sfake.Clientset
	source     *fakeSource
	controller *Controller
	configMaps cache.Indexer
	claims     cache.Indexer
	registries cache.Indexer
	classes    cache.Indexer
}

// newEgressFixture builds a distributor of the egress bundle alone on fake clients; the test
// seeds the stores and calls sync itself.
func newEgressFixture(t *testing.T, claims ...*airlockv1alpha1.SandboxClaim) *egressFixture {
	t.Helper()
	f := &egressFixture{kube: k8sfake.NewClientset(), source: &fakeSource{}}
	cms := NewConfigMapInformerFactory(f.kube, egressCM, EgressLabelBundle).Core().V1().ConfigMaps()
	air := airlockinformers.NewSharedInformerFactory(airlockfake.NewClientset(), 0).Airlock().V1alpha1()
	claimInformer := air.SandboxClaims()
	c, err := newControllerWithClock(f.kube, clocktesting.NewFakeClock(t0),
		EgressBundle(egressCM, f.source, nil, claimInformer, air.ToolRegistries(), air.SandboxClasses(), cms, "airlock-egress-ca-controller"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.queue.ShutDown)
	f.controller, f.configMaps, f.claims = c, cms.Informer().GetIndexer(), claimInformer.Informer().GetIndexer()
	f.registries, f.classes = air.ToolRegistries().Informer().GetIndexer(), air.SandboxClasses().Informer().GetIndexer()
	for _, cl := range claims {
		if err := f.claims.Add(cl); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func (f *egressFixture) sync(t *testing.T, ctx context.Context, ns string) {
	t.Helper()
	if err := f.controller.sync(ctx, cache.ObjectName{Namespace: ns, Name: egressCM}); err != nil {
		t.Fatal(err)
	}
}

func (f *egressFixture) bundleIn(ns string) (string, bool) {
	cm, err := f.kube.CoreV1().ConfigMaps(ns).Get(context.Background(), egressCM, metav1.GetOptions{})
	if err != nil {
		return "", false
	}
	return cm.Data[EgressKey], true
}

// TestSyncEgressBundle: a namespace gets the egress bundle while a claim frozen with this
// ConfigMap is in it, nothing while there is no CA (fail closed: no bundle without the gateway's
// CA), and loses it when no claim needs it; a ConfigMap of that name that is not ours is left
// alone. Its writes carry the egress CA controller's field manager, as before the distributor
// published it.
func TestSyncEgressBundle(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newEgressFixture(t, egressClaim("team-a", "c1", egressCM), egressClaim("team-b", "c2", "their-own"), &airlockv1alpha1.SandboxClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "team-c", Name: "c3"}})
	// No CA yet: nothing written.
	f.sync(t, ctx, "team-a")
	if len(f.kube.Actions()) != 0 {
		t.Fatalf("without a CA: actions %v", f.kube.Actions())
	}
	f.source.set(bundleA)
	for _, ns := range []string{"team-a", "team-b", "team-c"} {
		f.sync(t, ctx, ns)
	}
	if got, ok := f.bundleIn("team-a"); !ok || got != bundleA {
		t.Fatalf("team-a: ConfigMap %v, bundle %q", ok, got)
	}
	cm, _ := f.kube.CoreV1().ConfigMaps("team-a").Get(ctx, egressCM, metav1.GetOptions{})
	if cm.Labels[EgressLabelBundle] != "true" || cm.Labels[LabelBundle] != "" {
		t.Errorf("labels %v", cm.Labels)
	}
	for _, ns := range []string{"team-b", "team-c"} {
		if _, ok := f.bundleIn(ns); ok {
			t.Errorf("%s got a bundle it does not need", ns)
		}
	}
	creates := 0
	for _, a := range f.kube.Actions() {
		if c, ok := a.(interface{ GetCreateOptions() metav1.CreateOptions }); ok && a.GetVerb() == "create" {
			creates++
			if c.GetCreateOptions().FieldManager != "airlock-egress-ca-controller" {
				t.Errorf("created with field manager %q", c.GetCreateOptions().FieldManager)
			}
		}
	}
	if creates != 1 {
		t.Errorf("%d creates, want team-a's", creates)
	}

	// Someone else's ConfigMap of the name is never overwritten.
	theirs := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "team-d", Name: egressCM}, Data: map[string]string{EgressKey: "mine"}}
	if _, err := f.kube.CoreV1().ConfigMaps("team-d").Create(ctx, theirs, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := f.claims.Add(egressClaim("team-d", "c4", egressCM)); err != nil {
		t.Fatal(err)
	}
	f.sync(t, ctx, "team-d")
	if got, _ := f.bundleIn("team-d"); got != "mine" {
		t.Errorf("someone else's ConfigMap overwritten: %q", got)
	}

	// A rotation: the cached ConfigMap is brought up to date.
	if err := f.configMaps.Add(cm); err != nil {
		t.Fatal(err)
	}
	f.source.set(bundleB)
	f.sync(t, ctx, "team-a")
	if got, _ := f.bundleIn("team-a"); got != bundleB {
		t.Errorf("after a rotation: %q, want bundle B", got)
	}

	// The claim gone: our ConfigMap deleted.
	if err := f.claims.Delete(egressClaim("team-a", "c1", egressCM)); err != nil {
		t.Fatal(err)
	}
	f.sync(t, ctx, "team-a")
	if _, ok := f.bundleIn("team-a"); ok {
		t.Error("the bundle of a namespace without claims that need it is kept")
	}
}

// TestEgressBundleAudience: a claim's event enqueues its namespace when the claim comes to need
// the bundle or stops needing it, not otherwise; enqueueAll enqueues the namespaces of the
// claims that need it and of the bundle ConfigMaps.
func TestEgressBundleAudience(t *testing.T) {
	f := newEgressFixture(t, egressClaim("a", "x", egressCM), egressClaim("b", "y", "other"))
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "c", Name: egressCM}}
	if err := f.configMaps.Add(cm); err != nil {
		t.Fatal(err)
	}
	f.controller.enqueueAll(f.controller.bundles[egressCM])
	got := map[string]bool{}
	for f.controller.queue.Len() > 0 {
		key, _ := f.controller.queue.Get()
		if key.Name != egressCM {
			t.Errorf("key %v", key)
		}
		got[key.Namespace] = true
		f.controller.queue.Done(key)
	}
	if !got["a"] || got["b"] || !got["c"] || len(got) != 2 {
		t.Errorf("enqueued %v, want a and c", got)
	}
	claims := f.controller.bundles[egressCM].Audiences[0]
	plain := &airlockv1alpha1.SandboxClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "d", Name: "z"}}
	if claims.needs(plain) || !claims.needs(egressClaim("d", "z", egressCM)) || claims.needs(egressClaim("d", "z", "other")) {
		t.Error("needs: want only a claim frozen with this ConfigMap")
	}
}

// TestNewControllerRefusesOneNameTwice: two bundles in one ConfigMap would overwrite each other.
func TestNewControllerRefusesOneNameTwice(t *testing.T) {
	kube := k8sfake.NewClientset()
	air := airlockinformers.NewSharedInformerFactory(airlockfake.NewClientset(), 0).Airlock().V1alpha1()
	cms := NewConfigMapInformerFactory(kube, ConfigMapName, LabelBundle).Core().V1().ConfigMaps()
	src := &fakeSource{}
	if _, err := NewController(kube, SandboxAPIBundle(src, air.AgentRuntimes(), cms), EgressBundle(ConfigMapName, src, nil, air.SandboxClaims(), air.ToolRegistries(), air.SandboxClasses(), cms, "")); err == nil {
		t.Error("two bundles named airlock-ca: no error")
	}
}

// poolRegistry is a registry in ns whose one sandbox, of class, wants warm members (warm) or not.
func poolRegistry(ns, class string, warm int32) *airlockv1alpha1.ToolRegistry {
	return &airlockv1alpha1.ToolRegistry{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tools"},
		Spec: airlockv1alpha1.ToolRegistrySpec{Sandboxes: []airlockv1alpha1.RegistrySandbox{{
			Name: "codegen", Class: class, Warm: warm,
		}}},
	}
}

func egressClass(name string, egress bool) *airlockv1alpha1.SandboxClass {
	c := &airlockv1alpha1.SandboxClass{ObjectMeta: metav1.ObjectMeta{Name: name, Generation: 1}}
	if egress {
		c.Spec.Egress = &airlockv1alpha1.SandboxEgress{Hosts: []airlockv1alpha1.EgressHost{{Host: "proxy.golang.org", Ports: []airlockv1alpha1.EgressPort{443}}}}
	}
	return c
}

// TestEgressBundleForWarmPools (docs/egress.md, "Warm members of a class with egress"): a
// namespace with no claim gets the egress bundle while a ToolRegistry there keeps warm members
// of a class with egress (they mount it before any claim adopts them), and not for a registry
// without warm members, or whose class has no egress or does not exist; when the class loses its
// egress the bundle goes, and a class change looks at every namespace again.
func TestEgressBundleForWarmPools(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newEgressFixture(t)
	f.source.set(bundleA)
	for _, o := range []struct {
		indexer cache.Indexer
		obj     any
	}{
		{f.classes, egressClass("online", true)},
		{f.classes, egressClass("offline", false)},
		{f.registries, poolRegistry("pool-only", "online", 2)},
		{f.registries, poolRegistry("cold-only", "online", 0)},
		{f.registries, poolRegistry("no-egress", "offline", 2)},
		{f.registries, poolRegistry("no-class", "missing", 2)},
	} {
		if err := o.indexer.Add(o.obj); err != nil {
			t.Fatal(err)
		}
	}
	withPolicy := poolRegistry("by-policy", "online", 0)
	withPolicy.Spec.Sandboxes[0].WarmPolicy = &airlockv1alpha1.WarmPolicy{Max: 4}
	if err := f.registries.Add(withPolicy); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"pool-only", "cold-only", "no-egress", "no-class", "by-policy"} {
		f.sync(t, ctx, ns)
	}
	for ns, want := range map[string]bool{"pool-only": true, "by-policy": true, "cold-only": false, "no-egress": false, "no-class": false} {
		if got, ok := f.bundleIn(ns); ok != want || (want && got != bundleA) {
			t.Errorf("%s: bundle published %v (%q), want %v", ns, ok, got, want)
		}
	}

	// The class loses its egress: enqueued again, the bundle goes from the pool's namespace.
	cm, _ := f.kube.CoreV1().ConfigMaps("pool-only").Get(ctx, egressCM, metav1.GetOptions{})
	if err := f.configMaps.Add(cm); err != nil {
		t.Fatal(err)
	}
	lost := egressClass("online", false)
	lost.Generation = 2
	if err := f.classes.Update(lost); err != nil {
		t.Fatal(err)
	}
	f.controller.enqueueAll(f.controller.bundles[egressCM])
	enqueued := map[string]bool{}
	for f.controller.queue.Len() > 0 {
		key, _ := f.controller.queue.Get()
		enqueued[key.Namespace] = true
		f.controller.queue.Done(key)
	}
	if !enqueued["pool-only"] {
		t.Errorf("enqueued %v: the namespace holding the bundle is not looked at again", enqueued)
	}
	f.sync(t, ctx, "pool-only")
	if _, ok := f.bundleIn("pool-only"); ok {
		t.Error("the bundle is kept for a pool whose class lost its egress")
	}
}
