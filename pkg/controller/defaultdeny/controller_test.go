package defaultdeny

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubeinformers "k8s.io/client-go/informers"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	airlockfake "github.com/airlock-dev/airlock/pkg/generated/clientset/versioned/fake"
	airlockinformers "github.com/airlock-dev/airlock/pkg/generated/informers/externalversions"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
)

const ns = "team-a"

// fixture is a controller over caches holding objects, on fake clients.
type fixture struct {
	kube *k8sfake.Clientset
	c    *Controller
}

func newFixture(t *testing.T, objects ...runtime.Object) *fixture {
	t.Helper()
	var kubeObjs, airlockObjs []runtime.Object
	for _, o := range objects {
		if _, ok := o.(*networkingv1.NetworkPolicy); ok {
			kubeObjs = append(kubeObjs, o)
		} else {
			airlockObjs = append(airlockObjs, o)
		}
	}
	kube := k8sfake.NewClientset(kubeObjs...)
	ki := kubeinformers.NewSharedInformerFactory(kube, 0)
	ai := airlockinformers.NewSharedInformerFactory(airlockfake.NewSimpleClientset(airlockObjs...), 0)
	inf := Informers{
		NetworkPolicies: ki.Networking().V1().NetworkPolicies(),
		Runtimes:        ai.Airlock().V1alpha1().AgentRuntimes(),
		Registries:      ai.Airlock().V1alpha1().ToolRegistries(),
	}
	_, ctx := ktesting.NewTestContext(t)
	c, err := NewController(ctx, kube, inf)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range kubeObjs {
		if err := inf.NetworkPolicies.Informer().GetIndexer().Add(o); err != nil {
			t.Fatal(err)
		}
	}
	for _, o := range airlockObjs {
		var idx cache.Indexer
		switch o.(type) {
		case *airlockv1alpha1.AgentRuntime:
			idx = inf.Runtimes.Informer().GetIndexer()
		case *airlockv1alpha1.ToolRegistry:
			idx = inf.Registries.Informer().GetIndexer()
		}
		if err := idx.Add(o); err != nil {
			t.Fatal(err)
		}
	}
	kube.ClearActions()
	return &fixture{kube: kube, c: c}
}

func key() cache.ObjectName {
	return cache.ObjectName{Namespace: ns, Name: sandboxpod.DefaultDenyPolicyName}
}

func runtimeIn(namespace string) *airlockv1alpha1.AgentRuntime {
	return &airlockv1alpha1.AgentRuntime{ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: namespace}}
}

func writes(kube *k8sfake.Clientset) []k8stesting.Action {
	var out []k8stesting.Action
	for _, a := range kube.Actions() {
		if a.GetVerb() != "list" && a.GetVerb() != "watch" && a.GetVerb() != "get" {
			out = append(out, a)
		}
	}
	return out
}

// TestDefaultDenyPolicy: the policy selects every pod carrying LabelClaim (a claim's and a warm
// member's) and allows nothing either way: no ingress and no egress rule, both types listed.
func TestDefaultDenyPolicy(t *testing.T) {
	p := sandboxpod.DefaultDenyPolicy(ns)
	want := networkingv1.NetworkPolicySpec{
		PodSelector: metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: airlockv1alpha1.LabelClaim, Operator: metav1.LabelSelectorOpExists}}},
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
	}
	if diff := cmp.Diff(want, p.Spec); diff != "" {
		t.Errorf("spec (-want +got):\n%s", diff)
	}
	if len(p.OwnerReferences) != 0 {
		t.Errorf("owned by %v: it would go with its owner", p.OwnerReferences)
	}
	if _, ok := p.Labels[airlockv1alpha1.LabelClaim]; !ok {
		t.Error("no LabelClaim: the operator's filtered cache would never see it")
	}
}

// TestSync: a namespace with a runtime (or a registry) gets the policy; one whose policy was
// changed gets it written back; a namespace with neither gets nothing, and a policy it has is
// kept (nothing ever deletes it).
func TestSync(t *testing.T) {
	drifted := sandboxpod.DefaultDenyPolicy(ns)
	drifted.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress} // egress opened
	drifted.Spec.PodSelector = metav1.LabelSelector{MatchLabels: map[string]string{"nothing": "here"}}
	registry := &airlockv1alpha1.ToolRegistry{ObjectMeta: metav1.ObjectMeta{Name: "tools", Namespace: ns}}
	for name, tc := range map[string]struct {
		objects []runtime.Object
		want    []string
	}{
		"a runtime, no policy":        {objects: []runtime.Object{runtimeIn(ns)}, want: []string{"create"}},
		"a registry, no policy":       {objects: []runtime.Object{registry}, want: []string{"create"}},
		"a runtime, a policy changed": {objects: []runtime.Object{runtimeIn(ns), drifted}, want: []string{"update"}},
		"a runtime, the policy":       {objects: []runtime.Object{runtimeIn(ns), sandboxpod.DefaultDenyPolicy(ns)}},
		"neither, a policy":           {objects: []runtime.Object{sandboxpod.DefaultDenyPolicy(ns), runtimeIn("elsewhere")}},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, tc.objects...)
			_, ctx := ktesting.NewTestContext(t)
			if err := f.c.sync(ctx, key()); err != nil {
				t.Fatal(err)
			}
			var verbs []string
			for _, a := range writes(f.kube) {
				verbs = append(verbs, a.GetVerb())
			}
			if diff := cmp.Diff(tc.want, verbs); diff != "" {
				t.Fatalf("writes (-want +got):\n%s", diff)
			}
			if len(tc.want) == 0 {
				return
			}
			got, err := f.kube.NetworkingV1().NetworkPolicies(ns).Get(ctx, sandboxpod.DefaultDenyPolicyName, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(sandboxpod.DefaultDenyPolicy(ns).Spec, got.Spec); diff != "" {
				t.Errorf("policy (-want +got):\n%s", diff)
			}
		})
	}
}

// TestEnsure: the claim and pool controllers' check writes nothing when the cache shows the
// policy, creates it when not (a policy created meanwhile by another writer is fine), and
// returns any other error, so that no pod is created.
func TestEnsure(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t, sandboxpod.DefaultDenyPolicy(ns))
	e := &Ensurer{lister: f.c.npLister, writer: f.c.policies}
	if err := e.Ensure(ctx, ns); err != nil || len(writes(f.kube)) != 0 {
		t.Errorf("with the policy cached: err %v, writes %v", err, writes(f.kube))
	}
	if err := e.Ensure(ctx, "team-b"); err != nil || len(writes(f.kube)) != 1 || writes(f.kube)[0].GetVerb() != "create" {
		t.Errorf("without: err %v, writes %v, want one create", err, writes(f.kube))
	}
	f.kube.PrependReactor("create", "networkpolicies", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewAlreadyExists(networkingv1.Resource("networkpolicies"), sandboxpod.DefaultDenyPolicyName)
	})
	if err := e.Ensure(ctx, "team-c"); err != nil {
		t.Errorf("created meanwhile: %v", err)
	}
	forbidden := errors.New("forbidden")
	f.kube.PrependReactor("create", "networkpolicies", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, forbidden
	})
	if err := e.Ensure(ctx, "team-d"); !errors.Is(err, forbidden) {
		t.Errorf("a refused create: %v, want the error", err)
	}
}

// TestPolicyEventsEnqueue: the policy's change or deletion (a tombstone too) brings its namespace
// back; another policy's does not.
func TestPolicyEventsEnqueue(t *testing.T) {
	f := newFixture(t)
	other := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "c1", Namespace: ns}}
	if isDefaultDeny(other) || !isDefaultDeny(sandboxpod.DefaultDenyPolicy(ns)) ||
		!isDefaultDeny(cache.DeletedFinalStateUnknown{Obj: sandboxpod.DefaultDenyPolicy(ns)}) {
		t.Fatal("isDefaultDeny")
	}
	f.c.enqueueNamespaceOf(cache.DeletedFinalStateUnknown{Key: ns + "/" + sandboxpod.DefaultDenyPolicyName, Obj: sandboxpod.DefaultDenyPolicy(ns)})
	if f.c.queue.Len() != 1 {
		t.Fatalf("queue length %d after the policy's deletion, want 1", f.c.queue.Len())
	}
	got, _ := f.c.queue.Get()
	if got != key() {
		t.Errorf("key %v, want %v", got, key())
	}
}

// TestSyncNamespaceTerminating: a namespace being deleted refuses new content; the sync ends
// there without an error (nothing to retry: its deletion ends the work), and any other refusal
// is still an error.
func TestSyncNamespaceTerminating(t *testing.T) {
	f := newFixture(t, runtimeIn(ns))
	_, ctx := ktesting.NewTestContext(t)
	terminating := &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: 403, Reason: metav1.StatusReasonForbidden,
		Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{Type: corev1.NamespaceTerminatingCause}}},
	}}
	refusal := error(terminating)
	f.kube.PrependReactor("create", "networkpolicies", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, refusal
	})
	if err := f.c.sync(ctx, key()); err != nil {
		t.Errorf("a terminating namespace: %v, want nil", err)
	}
	refusal = apierrors.NewForbidden(networkingv1.Resource("networkpolicies"), sandboxpod.DefaultDenyPolicyName, errors.New("no"))
	if err := f.c.sync(ctx, key()); err == nil {
		t.Error("another refusal: nil, want the error")
	}
}
