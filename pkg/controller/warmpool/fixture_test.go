package warmpool

import (
	"slices"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	core "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/controller/controllertest"
	airlockfake "github.com/airlock-dev/airlock/pkg/generated/clientset/versioned/fake"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
	"github.com/airlock-dev/airlock/pkg/sandboxpod/sandboxpodtest"
)

const testNamespace = sandboxpodtest.Namespace

// t0 is the fixed start of every test's fake clock.
var t0 = sandboxpodtest.T0

// fixture holds the fake clients, the objects the caches and clients start with, and the clock.
type fixture struct {
	t *testing.T

	kubeClient    *k8sfake.Clientset
	airlockClient *airlockfake.Clientset
	clock         *clocktesting.FakeClock
	// defaultDeny is the controller's DefaultDenyEnsurer; defaultDenyErr its answer.
	defaultDeny    *controllertest.DefaultDeny
	defaultDenyErr error

	registries      []*airlockv1alpha1.ToolRegistry
	classes         []*airlockv1alpha1.SandboxClass
	runtimes        []*airlockv1alpha1.AgentRuntime
	netpols         []*networkingv1.NetworkPolicy
	secrets         []*corev1.Secret
	pods            []*corev1.Pod
	allowedServices []*corev1.Service
	jobs            []*batchv1.Job
	claims          []*airlockv1alpha1.SandboxClaim

	// registryCache is the controller's cache of registries (newController sets it).
	registryCache cache.Indexer
	// unrecorded leaves the registries' statuses without their pools' records (newController
	// puts them there otherwise: recordPools).
	unrecorded bool

	// log is both clients' actions, in order; logMu guards it.
	log   []core.Action
	logMu sync.Mutex
}

func newFixture(t *testing.T) *fixture {
	return &fixture{t: t, clock: clocktesting.NewFakeClock(t0)}
}

// newClients makes the fake clients, holding the fixture's objects, whose actions go to f.log.
func (f *fixture) newClients() {
	var kubeObjects, airlockObjects []runtime.Object
	for _, o := range f.registries {
		airlockObjects = append(airlockObjects, o)
	}
	for _, o := range f.classes {
		airlockObjects = append(airlockObjects, o)
	}
	for _, o := range f.runtimes {
		airlockObjects = append(airlockObjects, o)
	}
	for _, o := range f.netpols {
		kubeObjects = append(kubeObjects, o)
	}
	for _, o := range f.secrets {
		kubeObjects = append(kubeObjects, o)
	}
	for _, o := range f.pods {
		kubeObjects = append(kubeObjects, o)
	}
	for _, o := range f.allowedServices {
		kubeObjects = append(kubeObjects, o)
	}
	for _, o := range f.jobs {
		kubeObjects = append(kubeObjects, o)
	}
	for _, o := range f.claims {
		airlockObjects = append(airlockObjects, o)
	}
	f.kubeClient = k8sfake.NewClientset(kubeObjects...)
	f.airlockClient = airlockfake.NewClientset(airlockObjects...)
	f.log = nil
	controllertest.Record(&f.logMu, &f.log, f.kubeClient, f.airlockClient)
}

// actions returns the clients' actions, without list and watch, in the order they were made
// (the pool controller writes from one worker).
func (f *fixture) actions() []string { return controllertest.Actions(f.log) }

// written returns the last object the clients created or updated with the given resource.
func (f *fixture) written(resource, subresource string) runtime.Object {
	var obj runtime.Object
	for _, a := range f.log {
		if a.GetResource().Resource != resource || a.GetSubresource() != subresource {
			continue
		}
		switch a := a.(type) {
		case core.CreateAction:
			obj = a.GetObject()
		case core.UpdateAction:
			obj = a.GetObject()
		}
	}
	if obj == nil {
		f.t.Fatalf("no %s/%s was written", resource, subresource)
	}
	return obj
}

func newClass(name string) *airlockv1alpha1.SandboxClass { return sandboxpodtest.Class(name) }

func warmRegistry(warm int32) *airlockv1alpha1.ToolRegistry { return sandboxpodtest.WarmRegistry(warm) }

// testRecord is what a member of the fixtures' class and registry runs.
func testRecord() *airlockv1alpha1.FrozenSandbox {
	return sandboxpod.Freeze(newClass("codegen"), &warmRegistry(1).Spec.Sandboxes[0])
}

// warmMember returns an idle member of reg's sandbox built from record, Ready at ip when ip is set.
func warmMember(reg *airlockv1alpha1.ToolRegistry, name string, record *airlockv1alpha1.FrozenSandbox, created time.Time, ip string) *corev1.Pod {
	entry := reg.Spec.Sandboxes[0].Name
	return sandboxpodtest.AsCached(sandboxpod.MemberPod(reg, entry, sandboxpod.PoolKey(reg.UID, entry, record), name, record), created, ip)
}

// adoptBy makes member the pod of a Bound claim named name, as an adoption's patch does.
func adoptBy(name string, member *corev1.Pod) {
	claim := sandboxpodtest.Claim(name, "s-"+name, airlockv1alpha1.ClaimBound, t0)
	member.OwnerReferences = []metav1.OwnerReference{sandboxpod.OwnerReference(claim)}
	for k, v := range sandboxpod.PodLabels(claim) {
		member.Labels[k] = v
	}
}

// recordPools puts on each cached registry's status the key and record of each of its pools as
// c computes them now (the class, the entry, the egress gateway): what the controller's status
// write before a pool's first member leaves there (recordOnStatus). Call it once c is set up.
func (f *fixture) recordPools(c *Controller) {
	f.t.Helper()
	for _, obj := range f.registryCache.List() {
		reg := obj.(*airlockv1alpha1.ToolRegistry).DeepCopy()
		for i := range reg.Spec.Sandboxes {
			p := c.poolOf(reg, &reg.Spec.Sandboxes[i])
			if p.record == nil {
				continue
			}
			st := airlockv1alpha1.WarmPoolStatus{Name: p.entry.Name}
			at := slices.IndexFunc(reg.Status.Warm, func(w airlockv1alpha1.WarmPoolStatus) bool { return w.Name == p.entry.Name })
			if at >= 0 {
				st = reg.Status.Warm[at]
			}
			st.Key, st.Record = p.key, p.record
			if at >= 0 {
				reg.Status.Warm[at] = st
			} else {
				reg.Status.Warm = append(reg.Status.Warm, st)
			}
		}
		if err := f.registryCache.Update(reg); err != nil {
			f.t.Fatal(err)
		}
	}
}
