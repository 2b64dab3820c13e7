package claim

import (
	"context"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	kubeinformers "k8s.io/client-go/informers"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	core "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/claimtoken"
	"github.com/airlock-dev/airlock/pkg/controller/controllertest"
	airlockfake "github.com/airlock-dev/airlock/pkg/generated/clientset/versioned/fake"
	airlockinformers "github.com/airlock-dev/airlock/pkg/generated/informers/externalversions"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
	"github.com/airlock-dev/airlock/pkg/sandboxpod/sandboxpodtest"
	"github.com/airlock-dev/airlock/pkg/workspace"
)

const (
	testNamespace = sandboxpodtest.Namespace
	testToken     = "test-token"
	// testProxyCredential starts every claim's proxy credential (then its UID).
	testProxyCredential = "test-proxy-credential"
	testSyncImage       = "ghcr.io/airlock-dev/airlock:test"
)

var (
	alwaysReady = func() bool { return true }
	// t0 is the fixed start of every test's fake clock.
	t0 = sandboxpodtest.T0
)

// fixture holds the fake clients, the objects the caches and clients start with, and the clock.
type fixture struct {
	t *testing.T

	kubeClient    *k8sfake.Clientset
	airlockClient *airlockfake.Clientset
	clock         *clocktesting.FakeClock
	recorder      *record.FakeRecorder
	// defaultDeny is the controller's DefaultDenyEnsurer; defaultDenyErr its answer.
	defaultDeny    *controllertest.DefaultDeny
	defaultDenyErr error

	claims     []*airlockv1alpha1.SandboxClaim
	runtimes   []*airlockv1alpha1.AgentRuntime
	registries []*airlockv1alpha1.ToolRegistry
	classes    []*airlockv1alpha1.SandboxClass
	netpols    []*networkingv1.NetworkPolicy
	// secrets exist in the API server only: the controller has no Secret informer.
	secrets []*corev1.Secret
	// tokenErr, if set, is the error of the token source.
	tokenErr error
	jobs     []*batchv1.Job
	pods     []*corev1.Pod
	// allowedServices are Services of the cluster (not children): the kube client has them, and
	// the allowed-Service informer's cache, stripped.
	allowedServices []*corev1.Service
	// allowedServiceInformer is the controller's allowed-Service informer; the tests that start
	// it (startAllowedServices) see Services' events reach the controller.
	allowedServiceInformer cache.SharedIndexInformer

	// claimInformer is the controller's claim informer (cacheClaim updates its store); the
	// others are its child and pod informers, for tests that fill their stores as events would.
	claimInformer               cache.SharedIndexInformer
	netpolInformer, podInformer cache.SharedIndexInformer
	jobInformer                 cache.SharedIndexInformer

	// log is both clients' actions, in order; logMu guards it (the two fake clients each
	// serialise their own reactors, not each other's).
	log   []core.Action
	logMu sync.Mutex
}

// cacheClaim puts claim in the controller's claim cache, as a watch event would, and runs the
// controller's claim handler for it.
func (f *fixture) cacheClaim(t *testing.T, c *Controller, claim *airlockv1alpha1.SandboxClaim) {
	t.Helper()
	logger, _ := ktesting.NewTestContext(t)
	store := f.claimInformer.GetIndexer()
	old, exists, err := store.Get(claim)
	if err != nil {
		t.Fatal(err)
	}
	if exists {
		if err := store.Update(claim); err != nil {
			t.Fatal(err)
		}
		c.updateClaim(logger, old, claim)
		return
	}
	if err := store.Add(claim); err != nil {
		t.Fatal(err)
	}
	c.addClaim(logger, claim)
}

// createdChildren returns the pods and NetworkPolicies the controller created.
func (f *fixture) createdChildren(t *testing.T) []any {
	t.Helper()
	var out []any
	for _, a := range f.log {
		if create, ok := a.(core.CreateAction); ok {
			switch create.GetResource().Resource {
			case "pods", "networkpolicies":
				out = append(out, create.GetObject())
			}
		}
	}
	return out
}

func newFixture(t *testing.T) *fixture {
	return &fixture{t: t, clock: clocktesting.NewFakeClock(t0)}
}

// newFixtureWithLimits is a fixture whose runtime "agent" has the given limits, with its registry
// and the class.
func newFixtureWithLimits(t *testing.T, maxConcurrent, maxPerSession int32) *fixture {
	f := newFixture(t)
	f.runtimes = append(f.runtimes, newRuntime("agent", maxConcurrent, maxPerSession))
	f.registries = append(f.registries, newRegistry("tools", ""))
	f.classes = append(f.classes, newClass("codegen"))
	return f
}

// listedClaims says whether the clients listed SandboxClaims (from the API server, not the cache).
func (f *fixture) listedClaims() bool {
	for _, a := range f.log {
		if a.GetVerb() == "list" && a.GetResource().Resource == "sandboxclaims" {
			return true
		}
	}
	return false
}

// withDefaults adds an enabled runtime, its registry and the class.
func (f *fixture) withDefaults() *fixture {
	f.runtimes = append(f.runtimes, newRuntime("agent", 5, 3))
	f.registries = append(f.registries, newRegistry("tools", ""))
	f.classes = append(f.classes, newClass("codegen"))
	return f
}

// newClients makes the fake clients, holding the fixture's objects, whose actions go to f.log.
func (f *fixture) newClients() {
	var kubeObjects, airlockObjects []runtime.Object
	for _, o := range f.claims {
		airlockObjects = append(airlockObjects, o)
	}
	for _, o := range f.runtimes {
		airlockObjects = append(airlockObjects, o)
	}
	for _, o := range f.registries {
		airlockObjects = append(airlockObjects, o)
	}
	for _, o := range f.classes {
		airlockObjects = append(airlockObjects, o)
	}
	for _, o := range f.netpols {
		kubeObjects = append(kubeObjects, o)
	}
	for _, o := range f.secrets {
		kubeObjects = append(kubeObjects, o)
	}
	for _, o := range f.jobs {
		kubeObjects = append(kubeObjects, o)
	}
	for _, o := range f.pods {
		kubeObjects = append(kubeObjects, o)
	}
	for _, o := range f.allowedServices {
		kubeObjects = append(kubeObjects, o)
	}
	f.kubeClient = k8sfake.NewClientset(kubeObjects...)
	f.airlockClient = airlockfake.NewClientset(airlockObjects...)
	f.log = nil
	controllertest.Record(&f.logMu, &f.log, f.kubeClient, f.airlockClient)
}

func (f *fixture) newController(ctx context.Context) *Controller {
	f.t.Helper()
	f.newClients()
	ai := airlockinformers.NewSharedInformerFactory(f.airlockClient, 0)
	ki := kubeinformers.NewSharedInformerFactory(f.kubeClient, 0)
	si := kubeinformers.NewSharedInformerFactoryWithOptions(f.kubeClient, 0, kubeinformers.WithTransform(sandboxpod.StripService))
	f.allowedServiceInformer = si.Core().V1().Services().Informer()
	airlock := ai.Airlock().V1alpha1()
	f.claimInformer = airlock.SandboxClaims().Informer()
	f.netpolInformer = ki.Networking().V1().NetworkPolicies().Informer()
	f.podInformer = ki.Core().V1().Pods().Informer()
	f.jobInformer = ki.Batch().V1().Jobs().Informer()
	c, err := newControllerWithClock(ctx, f.kubeClient, f.airlockClient, Informers{
		Claims:          airlock.SandboxClaims(),
		Runtimes:        airlock.AgentRuntimes(),
		Registries:      airlock.ToolRegistries(),
		Classes:         airlock.SandboxClasses(),
		NetworkPolicies: ki.Networking().V1().NetworkPolicies(),
		Jobs:            ki.Batch().V1().Jobs(),
		Pods:            ki.Core().V1().Pods(),
		AllowedServices: si.Core().V1().Services(),
	}, testSyncImage, f.clock)
	if err != nil {
		f.t.Fatal(err)
	}
	c.claimsSynced, c.runtimesSynced, c.registriesSync, c.classesSynced = alwaysReady, alwaysReady, alwaysReady, alwaysReady
	c.networkPolicySynced = alwaysReady
	c.jobsSynced, c.podsSynced = alwaysReady, alwaysReady
	c.allowedServicesSynced = alwaysReady
	f.recorder = record.NewFakeRecorder(100)
	c.recorder = f.recorder
	f.defaultDeny = &controllertest.DefaultDeny{Err: f.defaultDenyErr}
	c.defaultDeny = f.defaultDeny
	c.newToken = func(_ context.Context, claim *airlockv1alpha1.SandboxClaim) (string, error) {
		if f.tokenErr != nil {
			return "", f.tokenErr
		}
		return testToken, nil
	}
	c.newProxyCredential = func(_ context.Context, claim *airlockv1alpha1.SandboxClaim) (string, error) {
		return testProxyCredential + "-" + string(claim.UID), nil
	}

	add := func(informer cache.SharedIndexInformer, obj any) {
		if err := informer.GetIndexer().Add(obj); err != nil {
			f.t.Fatal(err)
		}
	}
	for _, o := range f.claims {
		add(airlock.SandboxClaims().Informer(), o)
	}
	for _, o := range f.runtimes {
		add(airlock.AgentRuntimes().Informer(), o)
	}
	for _, o := range f.registries {
		add(airlock.ToolRegistries().Informer(), o)
	}
	for _, o := range f.classes {
		add(airlock.SandboxClasses().Informer(), o)
	}
	for _, o := range f.netpols {
		add(ki.Networking().V1().NetworkPolicies().Informer(), o)
	}
	for _, o := range f.jobs {
		add(ki.Batch().V1().Jobs().Informer(), o)
	}
	for _, o := range f.pods {
		add(ki.Core().V1().Pods().Informer(), o)
	}
	for _, o := range f.allowedServices {
		stripped, _ := sandboxpod.StripService(o)
		add(f.allowedServiceInformer, stripped)
	}
	return c
}

// actions returns the clients' actions, without list and watch, as "verb resource[/sub] name".
func (f *fixture) actions() []string {
	out := controllertest.Actions(f.log)
	// The children are written concurrently: order each run of child writes.
	child := func(s string) bool {
		for _, r := range []string{" secrets ", " networkpolicies ", " pods "} {
			if strings.Contains(s, r) && !strings.HasPrefix(s, "delete") {
				return true
			}
		}
		return false
	}
	for i := 0; i < len(out); {
		j := i
		for j < len(out) && child(out[j]) {
			j++
		}
		if j > i {
			sort.Slice(out[i:j], func(a, b int) bool { return childOrder(out[i+a]) < childOrder(out[i+b]) })
			i = j
		} else {
			i++
		}
	}
	return out
}

// childOrder orders child writes as ensureChildren lists them.
func childOrder(s string) int {
	for i, r := range []string{" secrets ", " networkpolicies ", " pods "} {
		if strings.Contains(s, r) {
			return i
		}
	}
	return 99
}

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

func (f *fixture) writtenClaim() *airlockv1alpha1.SandboxClaim {
	return f.written("sandboxclaims", "status").(*airlockv1alpha1.SandboxClaim)
}

// writtenClaimNamed returns the last status written for the claim named name.
func (f *fixture) writtenClaimNamed(name string) *airlockv1alpha1.SandboxClaim {
	var got *airlockv1alpha1.SandboxClaim
	for _, a := range f.log {
		if u, ok := a.(core.UpdateAction); ok && a.GetResource().Resource == "sandboxclaims" && a.GetSubresource() == "status" {
			if c := u.GetObject().(*airlockv1alpha1.SandboxClaim); c.Name == name {
				got = c
			}
		}
	}
	if got == nil {
		f.t.Fatalf("no status of claim %s was written", name)
	}
	return got
}

// events drains the recorded events.
func (f *fixture) events() []string {
	var out []string
	for {
		select {
		case e := <-f.recorder.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func newRuntime(name string, maxConcurrent, maxPerSession int32) *airlockv1alpha1.AgentRuntime {
	return &airlockv1alpha1.AgentRuntime{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNamespace, UID: types.UID("uid-rt-" + name)},
		Spec: airlockv1alpha1.AgentRuntimeSpec{
			ServiceAccountName: name,
			ToolRegistryRef:    airlockv1alpha1.LocalObjectReference{Name: "tools"},
			Sandbox: airlockv1alpha1.SandboxPolicy{
				Enabled:       true,
				MaxConcurrent: maxConcurrent,
				MaxPerSession: maxPerSession,
				IdleTimeout:   &metav1.Duration{Duration: 30 * time.Minute},
			},
		},
	}
}

func newRegistry(name, targetPath string) *airlockv1alpha1.ToolRegistry {
	return sandboxpodtest.Registry(name, targetPath)
}

func newClass(name string) *airlockv1alpha1.SandboxClass { return sandboxpodtest.Class(name) }

// newClaim returns a claim of runtime "agent" created at created.
func newClaim(name, session string, phase airlockv1alpha1.ClaimPhase, created time.Time) *airlockv1alpha1.SandboxClaim {
	return sandboxpodtest.Claim(name, session, phase, created)
}

// testRecord is what a claim admitted with the fixture's class and registry runs.
func testRecord() *airlockv1alpha1.FrozenSandbox {
	return sandboxpod.Freeze(newClass("codegen"), &newRegistry("tools", "").Spec.Sandboxes[0])
}

// binding returns a claim that began Binding at began, with the fixture's record.
func binding(name string, began time.Time) *airlockv1alpha1.SandboxClaim {
	c := newClaim(name, "s-"+name, airlockv1alpha1.ClaimBinding, began.Add(-time.Second))
	c.Status.Frozen = testRecord()
	setCondition(&c.Status, ConditionAdmitted, metav1.ConditionTrue, ReasonAdmitted, MessageAdmitted, began)
	setCondition(&c.Status, ConditionReady, metav1.ConditionFalse, ReasonBinding, messageBinding, began)
	return c
}

// bound returns a claim Bound at boundAt.
func bound(name string, boundAt time.Time) *airlockv1alpha1.SandboxClaim {
	c := binding(name, boundAt.Add(-time.Second))
	c.Status.Phase = airlockv1alpha1.ClaimBound
	c.Status.BoundAt = ptr.To(metav1.NewTime(boundAt))
	if c.Status.Frozen != nil {
		c.Status.Addresses = sandboxpod.Addresses(testPodIP, c.Status.Frozen)
	}
	setCondition(&c.Status, ConditionReady, metav1.ConditionTrue, ReasonPodReady, MessageBound, boundAt)
	return c
}

// withChildren adds the children a sync would have built for claim from its record (the
// fixture's record for a claim that has none), but its pod (newPod).
func (f *fixture) withChildren(claim *airlockv1alpha1.SandboxClaim) *fixture {
	record := claim.Status.Frozen
	if record == nil {
		record = testRecord()
	}
	f.netpols = append(f.netpols, sandboxpod.ClaimNetworkPolicy(claim, record, nil))
	f.secrets = append(f.secrets, sandboxpod.TokenSecret(claim, tokenSecretName(claim), testToken))
	return f
}

// testPodIP is the IP of the claims' ready pods in these tests.
const testPodIP = sandboxpodtest.PodIP

// tokenSecretName is the name of the claim's token Secret in these tests (the token is testToken).
func tokenSecretName(claim *airlockv1alpha1.SandboxClaim) string {
	return claimtoken.ClaimSecretName(claim.Name, testToken)
}

// newPod returns the pod a sync would have built for claim from its record (the fixture's record
// for a claim that has none), changed by mutate.
func newPod(claim *airlockv1alpha1.SandboxClaim, mutate func(*corev1.Pod)) *corev1.Pod {
	record := claim.Status.Frozen
	if record == nil {
		record = testRecord()
	}
	pod := sandboxpod.ClaimPod(claim, record)
	sandboxpod.UseTokenSecret(pod, tokenSecretName(claim))
	if mutate != nil {
		mutate(pod)
	}
	return pod
}

// markReady makes the pod Ready, at testPodIP.
func markReady(pod *corev1.Pod) { sandboxpodtest.MarkReady(pod) }

func keyOf(claim *airlockv1alpha1.SandboxClaim) cache.ObjectName {
	return cache.MetaObjectToName(claim)
}

func checkRequeue(t *testing.T, got *time.Duration, want *time.Duration) {
	t.Helper()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("requeueAfter (-want +got):\n%s", diff)
	}
}

func checkActions(t *testing.T, f *fixture, want []string) {
	t.Helper()
	if diff := cmp.Diff(want, f.actions()); diff != "" {
		t.Errorf("actions (-want +got):\n%s", diff)
	}
}

// admitAndBuild runs one admission pass over the test namespace and waits for the children builds
// it started.
func admitAndBuild(ctx context.Context, c *Controller) error {
	err := c.admitNamespace(ctx, testNamespace)
	c.builds.Wait()
	return err
}

// syncClaim syncs the claim, then takes the sync-back turns its sync asked for, as the turn
// workers would.
func syncClaim(ctx context.Context, c *Controller, key cache.ObjectName) (*time.Duration, error) {
	requeue, err := c.sync(ctx, key)
	if err != nil {
		return requeue, err
	}
	for c.turnQueue.Len() > 0 {
		namespace, _ := c.turnQueue.Get()
		err := c.takeSyncTurns(ctx, namespace)
		c.turnQueue.Done(namespace)
		if err != nil {
			return requeue, err
		}
	}
	return requeue, nil
}

// claimDir is the per-claim workspace of the runtime "agent"'s claim named name, as the Sandbox API
// names it (with the runtime's UID) and as the fixture's claims have it.
func claimDir(name string) string {
	return testNamespace + "/sandboxes/" + workspace.ClaimDirName(name, "uid-rt-agent")
}
