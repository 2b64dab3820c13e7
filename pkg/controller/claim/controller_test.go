package claim

import (
	"context"
	"errors"
	"fmt"
	goruntime "runtime"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	kubeinformers "k8s.io/client-go/informers"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	kubescheme "k8s.io/client-go/kubernetes/scheme"
	core "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/airlock-dev/airlock/pkg/admission"
	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/claimtoken"
	airlockfake "github.com/airlock-dev/airlock/pkg/generated/clientset/versioned/fake"
	airlockinformers "github.com/airlock-dev/airlock/pkg/generated/informers/externalversions"
)

const (
	testNamespace = "team-a"
	testToken     = "test-token"
	testSyncImage = "ghcr.io/airlock-dev/airlock:test"
)

var (
	alwaysReady = func() bool { return true }
	// t0 is the fixed start of every test's fake clock.
	t0 = time.Date(2026, 11, 30, 7, 0, 0, 0, time.UTC)
)

// fixture holds the fake clients, the objects the caches and clients start with, and the clock.
type fixture struct {
	t *testing.T

	kubeClient    *k8sfake.Clientset
	airlockClient *airlockfake.Clientset
	clock         *clocktesting.FakeClock
	recorder      *record.FakeRecorder

	claims      []*airlockv1alpha1.SandboxClaim
	runtimes    []*airlockv1alpha1.AgentRuntime
	registries  []*airlockv1alpha1.ToolRegistry
	classes     []*airlockv1alpha1.SandboxClass
	deployments []*appsv1.Deployment
	services    []*corev1.Service
	netpols     []*networkingv1.NetworkPolicy
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

	// log is both clients' actions, in order.
	log []core.Action
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

func (f *fixture) newController(ctx context.Context) *Controller {
	f.t.Helper()
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
	for _, o := range f.deployments {
		kubeObjects = append(kubeObjects, o)
	}
	for _, o := range f.services {
		kubeObjects = append(kubeObjects, o)
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
	// Record the actions of both clients in one sequence.
	f.log = nil
	recordAction := func(a core.Action) (bool, runtime.Object, error) {
		f.log = append(f.log, a)
		return false, nil, nil
	}
	f.kubeClient.PrependReactor("*", "*", recordAction)
	f.airlockClient.PrependReactor("*", "*", recordAction)

	ai := airlockinformers.NewSharedInformerFactory(f.airlockClient, 0)
	ki := kubeinformers.NewSharedInformerFactory(f.kubeClient, 0)
	si := kubeinformers.NewSharedInformerFactoryWithOptions(f.kubeClient, 0, kubeinformers.WithTransform(StripService))
	f.allowedServiceInformer = si.Core().V1().Services().Informer()
	airlock := ai.Airlock().V1alpha1()
	c, err := newControllerWithClock(ctx, f.kubeClient, f.airlockClient, Informers{
		Claims:          airlock.SandboxClaims(),
		Runtimes:        airlock.AgentRuntimes(),
		Registries:      airlock.ToolRegistries(),
		Classes:         airlock.SandboxClasses(),
		Deployments:     ki.Apps().V1().Deployments(),
		Services:        ki.Core().V1().Services(),
		NetworkPolicies: ki.Networking().V1().NetworkPolicies(),
		Jobs:            ki.Batch().V1().Jobs(),
		Pods:            ki.Core().V1().Pods(),
		AllowedServices: si.Core().V1().Services(),
	}, testSyncImage, f.clock)
	if err != nil {
		f.t.Fatal(err)
	}
	c.claimsSynced, c.runtimesSynced, c.registriesSync, c.classesSynced = alwaysReady, alwaysReady, alwaysReady, alwaysReady
	c.deploymentsSynced, c.servicesSynced, c.networkPolicySynced = alwaysReady, alwaysReady, alwaysReady
	c.jobsSynced, c.podsSynced = alwaysReady, alwaysReady
	c.allowedServicesSynced = alwaysReady
	f.recorder = record.NewFakeRecorder(100)
	c.recorder = f.recorder
	c.newToken = func(_ context.Context, claim *airlockv1alpha1.SandboxClaim) (string, error) {
		if f.tokenErr != nil {
			return "", f.tokenErr
		}
		return testToken, nil
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
	for _, o := range f.deployments {
		add(ki.Apps().V1().Deployments().Informer(), o)
	}
	for _, o := range f.services {
		add(ki.Core().V1().Services().Informer(), o)
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
		stripped, _ := StripService(o)
		add(f.allowedServiceInformer, stripped)
	}
	return c
}

// actions returns the clients' actions, without list and watch, as "verb resource[/sub] name".
func (f *fixture) actions() []string {
	var out []string
	for _, a := range f.log {
		if a.GetVerb() == "list" || a.GetVerb() == "watch" {
			continue
		}
		res := a.GetResource().Resource
		if a.GetSubresource() != "" {
			res += "/" + a.GetSubresource()
		}
		name := ""
		switch a := a.(type) {
		case core.CreateAction:
			name = a.GetObject().(metav1.Object).GetName()
		case core.UpdateAction:
			name = a.GetObject().(metav1.Object).GetName()
		case core.GetAction:
			name = a.GetName()
		case core.DeleteAction:
			name = a.GetName()
		}
		out = append(out, a.GetVerb()+" "+res+" "+name)
	}
	// The children are written concurrently: order each run of child writes.
	child := func(s string) bool {
		for _, r := range []string{" secrets ", " deployments ", " services ", " networkpolicies "} {
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
	for i, r := range []string{" secrets ", " deployments ", " services ", " networkpolicies "} {
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
	return &airlockv1alpha1.ToolRegistry{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNamespace},
		Spec: airlockv1alpha1.ToolRegistrySpec{Sandboxes: []airlockv1alpha1.RegistrySandbox{{
			Name: "codegen", Class: "codegen", MaxInstances: 10, TargetPath: targetPath,
			AllowedTools: []airlockv1alpha1.ToolName{"Read", "Bash"},
		}}},
	}
}

func newClass(name string) *airlockv1alpha1.SandboxClass {
	size := resourceQuantity("4Gi")
	return &airlockv1alpha1.SandboxClass{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: airlockv1alpha1.SandboxClassSpec{
			Image: "ghcr.io/airlock-dev/airlock-sandbox:v0.1.0",
			Args:  []string{"sandboxd", "--listen=:8080", "--workspace=/workspace"},
			Ports: []airlockv1alpha1.SandboxPort{{Name: "mcp", Port: 8080}},
			Env:   []corev1.EnvVar{{Name: "HOME", Value: "/sandbox-cache/home"}},
			Volumes: []airlockv1alpha1.SandboxVolume{
				{Name: "workspace", MountPath: "/workspace", Workspace: &airlockv1alpha1.WorkspaceVolumeSource{}},
				{Name: "cache", MountPath: "/sandbox-cache", Scratch: &airlockv1alpha1.ScratchVolumeSource{SizeLimit: &size}},
			},
			WorkspaceClaimName: "workspace-content",
			StartupTimeout:     &metav1.Duration{Duration: 5 * time.Minute},
		},
	}
}

// newClaim returns a claim of runtime "agent" created at created.
func newClaim(name, session string, phase airlockv1alpha1.ClaimPhase, created time.Time) *airlockv1alpha1.SandboxClaim {
	return &airlockv1alpha1.SandboxClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: testNamespace, UID: types.UID("uid-" + name),
			CreationTimestamp: metav1.NewTime(created),
			Labels:            map[string]string{airlockv1alpha1.LabelRuntime: "agent", airlockv1alpha1.LabelSandbox: "codegen"},
		},
		Spec: airlockv1alpha1.SandboxClaimSpec{
			RuntimeName: "agent", Session: session, Handle: "codegen/default", Sandbox: "codegen",
			ClassName: "codegen", WorkspaceDir: testNamespace + "/sandboxes/" + name,
		},
		Status: airlockv1alpha1.SandboxClaimStatus{Phase: phase},
	}
}

// testRecord is what a claim admitted with the fixture's class and registry runs.
func testRecord() *airlockv1alpha1.FrozenSandbox {
	return freeze(newClass("codegen"), &newRegistry("tools", "").Spec.Sandboxes[0])
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
	setCondition(&c.Status, ConditionReady, metav1.ConditionTrue, ReasonPodReady, MessageBound, boundAt)
	return c
}

// withChildren adds the children a sync would have built for claim from its record (the
// fixture's record for a claim that has none).
func (f *fixture) withChildren(claim *airlockv1alpha1.SandboxClaim, replicas int32) *fixture {
	record := claim.Status.Frozen
	if record == nil {
		record = testRecord()
	}
	d := buildDeployment(claim, record, replicas)
	useTokenSecret(d, tokenSecretName(claim))
	f.deployments = append(f.deployments, d)
	svc := buildService(claim, record)
	svc.Spec.ClusterIP = testClusterIP // as the API server allocates it
	f.services = append(f.services, svc)
	f.netpols = append(f.netpols, buildNetworkPolicy(claim, record, nil))
	f.secrets = append(f.secrets, buildSecret(claim, tokenSecretName(claim), testToken))
	return f
}

// testClusterIP is the ClusterIP of the claims' Services in these tests.
const testClusterIP = "10.96.0.17"

// tokenSecretName is the name of the claim's token Secret in these tests (the token is testToken).
func tokenSecretName(claim *airlockv1alpha1.SandboxClaim) string {
	return claimtoken.ClaimSecretName(claim.Name, testToken)
}

func newPod(claim *airlockv1alpha1.SandboxClaim, mutate func(*corev1.Pod)) *corev1.Pod {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: claim.Name + "-abc12", Namespace: claim.Namespace, Labels: podLabels(claim)},
	}
	if mutate != nil {
		mutate(pod)
	}
	return pod
}

func readyPod(pod *corev1.Pod) {
	pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue})
}

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

func TestSyncAdmitsAndBuildsChildren(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t).withDefaults()
	claim := newClaim("c1", "s1", "", t0.Add(-time.Second))
	f.claims = append(f.claims, claim)
	c := f.newController(ctx)

	requeue, err := c.sync(ctx, keyOf(claim))
	if err != nil {
		t.Fatal(err)
	}
	checkRequeue(t, requeue, ptr.To(5*time.Minute))
	checkActions(t, f, []string{
		"update sandboxclaims/status c1",
		"create secrets " + tokenSecretName(claim),
		"create deployments c1",
		"create services c1",
		"create networkpolicies c1",
	})
	got := f.writtenClaim()
	if got.Status.Phase != airlockv1alpha1.ClaimBinding {
		t.Errorf("phase %q, want Binding", got.Status.Phase)
	}
	if cond := findCondition(got, ConditionReady); cond == nil || cond.Reason != ReasonBinding || !cond.LastTransitionTime.Time.Equal(t0) {
		t.Errorf("Ready condition %+v, want False/Binding at t0", cond)
	}
	secret := f.written("secrets", "").(*corev1.Secret)
	if string(secret.Data[TokenKey]) != testToken || secret.Type != corev1.SecretTypeOpaque || !metav1.IsControlledBy(secret, claim) {
		t.Errorf("secret %+v is not the claim's token", secret)
	}
	if d := f.written("deployments", "").(*appsv1.Deployment); tokenSecretOf(d) != secret.Name {
		t.Errorf("the Deployment mounts Secret %q, want the created %q", tokenSecretOf(d), secret.Name)
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
		"deployment scaled and image changed": {
			mutate: func(f *fixture) {
				f.deployments[0].Spec.Replicas = ptr.To[int32](3)
				f.deployments[0].Spec.Template.Spec.Containers[0].Image = "evil:latest"
			},
			wantActions: []string{"update deployments c1"},
		},
		"class changed since the pod was built: the template is kept": {
			mutate: func(f *fixture) {
				f.classes[0].Generation = 2
				f.classes[0].Spec.Image = "example.com/new:v2"
			},
			wantActions: nil,
		},
		"class changed and scaled: replicas repaired, template kept": {
			mutate: func(f *fixture) {
				f.classes[0].Generation = 2
				f.classes[0].Spec.Image = "example.com/new:v2"
				f.deployments[0].Spec.Replicas = ptr.To[int32](2)
			},
			wantActions: []string{"update deployments c1"},
		},
		"service port changed": {
			mutate:      func(f *fixture) { f.services[0].Spec.Ports[0].Port = 9999 },
			wantActions: []string{"update services c1"},
		},
		"network policy opened": {
			mutate: func(f *fixture) {
				f.netpols[0].Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
			},
			wantActions: []string{"update networkpolicies c1"},
		},
		"secret with another token is left alone (never read)": {
			mutate:      func(f *fixture) { f.secrets[0].Data[TokenKey] = []byte("other") },
			wantActions: nil,
		},
		"deployment gone: the secret is created again first, AlreadyExists is done": {
			mutate:      func(f *fixture) { f.deployments = nil },
			wantActions: []string{"create secrets " + claimtoken.ClaimSecretName("c1", testToken), "create deployments c1"},
		},
		"token volume pointed at a planted Secret: ours is ensured and the volume repaired": {
			mutate:      func(f *fixture) { useTokenSecret(f.deployments[0], "planted") },
			wantActions: []string{"create secrets " + claimtoken.ClaimSecretName("c1", testToken), "update deployments c1"},
		},
		"children gone are created again": {
			mutate:      func(f *fixture) { f.services, f.netpols = nil, nil },
			wantActions: []string{"create services c1", "create networkpolicies c1"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(t).withDefaults()
			claim := binding("c1", began)
			f.claims = append(f.claims, claim)
			f.withChildren(claim, 1)
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
			if len(tc.wantActions) == 1 && tc.wantActions[0] == "update deployments c1" {
				d := f.written("deployments", "").(*appsv1.Deployment)
				if *d.Spec.Replicas != 1 || d.Spec.Template.Spec.Containers[0].Image != newClass("codegen").Spec.Image {
					t.Errorf("repaired deployment: replicas %d image %s", *d.Spec.Replicas, d.Spec.Template.Spec.Containers[0].Image)
				}
			}
		})
	}
}

// TestSyncSecretCreateOnly: the operator may not read Secrets outside its namespace, so the
// claim's Secret is only ever created: a Secret that exists already (an earlier sync's, whose
// Deployment create failed) is AlreadyExists and counts as done, and nothing reads or updates it.
func TestSyncSecretCreateOnly(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t).withDefaults()
	claim := binding("c1", t0)
	f.claims = append(f.claims, claim)
	f.secrets = append(f.secrets, buildSecret(claim, tokenSecretName(claim), testToken))
	c := f.newController(ctx)
	if _, err := c.sync(ctx, keyOf(claim)); err != nil {
		t.Fatal(err)
	}
	checkActions(t, f, []string{"create secrets " + tokenSecretName(claim), "create deployments c1", "create services c1", "create networkpolicies c1"})
	for _, a := range f.log {
		if a.GetResource().Resource == "secrets" && a.GetVerb() != "create" {
			t.Errorf("%s secrets: the controller may only create Secrets", a.GetVerb())
		}
	}
}

// TestSyncWithoutTokenFailsClosed: without the key (no token), no Secret and no Deployment is
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
	requeue, err := c.sync(ctx, keyOf(claim))
	if err != nil {
		t.Fatal(err)
	}
	checkRequeue(t, requeue, ptr.To(30*time.Minute))
	// Failed at admission, in one write: nothing is built without a record.
	checkActions(t, f, []string{"update sandboxclaims/status c1"})
	if got := f.writtenClaim(); got.Status.Phase != airlockv1alpha1.ClaimFailed || got.Status.Reason != ReasonClassNotFound || got.Status.Frozen != nil {
		t.Errorf("status %s/%s, want Failed/%s", got.Status.Phase, got.Status.Reason, ReasonClassNotFound)
	}
}

func TestSyncAdmission(t *testing.T) {
	tests := map[string]struct {
		maxConcurrent, maxPerSession int32
		disabled                     bool
		others                       []*airlockv1alpha1.SandboxClaim
		claim                        *airlockv1alpha1.SandboxClaim
		wantPhase                    airlockv1alpha1.ClaimPhase
		wantReason                   string
		wantRequeue                  *time.Duration
		wantEvent                    string
		otherEvents                  []string // events of other claims decided in the same pass, first
	}{
		"over maxConcurrent is queued": {
			maxConcurrent: 1, maxPerSession: 3,
			others:      []*airlockv1alpha1.SandboxClaim{bound("old", t0.Add(-time.Minute))},
			claim:       newClaim("c1", "s1", airlockv1alpha1.ClaimPending, t0),
			wantPhase:   airlockv1alpha1.ClaimQueued,
			wantReason:  ReasonMaxConcurrent,
			wantRequeue: ptr.To(30 * time.Minute),
			wantEvent:   "Normal Queued " + MessageQueued,
		},
		"over maxPerSession is refused": {
			maxConcurrent: 5, maxPerSession: 1,
			others: []*airlockv1alpha1.SandboxClaim{func() *airlockv1alpha1.SandboxClaim {
				c := bound("old", t0.Add(-time.Minute))
				c.Spec.Session = "s1"
				return c
			}()},
			claim:       newClaim("c1", "s1", airlockv1alpha1.ClaimPending, t0),
			wantPhase:   airlockv1alpha1.ClaimRefused,
			wantReason:  "MaxPerSession",
			wantRequeue: ptr.To(refusedTTL),
			wantEvent:   `Warning Refused Refused (MaxPerSession): session "s1" of runtime "agent" already holds maxPerSession (1) live claims`,
		},
		"a disabled runtime refuses": {
			maxConcurrent: 5, maxPerSession: 3, disabled: true,
			claim:       newClaim("c1", "s1", airlockv1alpha1.ClaimPending, t0),
			wantPhase:   airlockv1alpha1.ClaimRefused,
			wantReason:  "Disabled",
			wantRequeue: ptr.To(refusedTTL),
			wantEvent:   `Warning Refused Refused (Disabled): AgentRuntime "agent" may hold no sandbox (spec.sandbox.enabled is false)`,
		},
		"the oldest undecided claim wins, whatever the sync order": {
			maxConcurrent: 1, maxPerSession: 3,
			others:      []*airlockv1alpha1.SandboxClaim{newClaim("older", "s0", airlockv1alpha1.ClaimPending, t0.Add(-time.Second))},
			claim:       newClaim("c1", "s1", airlockv1alpha1.ClaimPending, t0),
			wantPhase:   airlockv1alpha1.ClaimQueued,
			wantReason:  ReasonMaxConcurrent,
			wantRequeue: ptr.To(30 * time.Minute),
			// The older claim is decided in the same pass (one list for the namespace).
			otherEvents: []string{"Normal Admitted " + MessageAdmitted},
			wantEvent:   "Normal Queued " + MessageQueued,
		},
		"a Reaping claim whose pods are gone frees its slot": {
			maxConcurrent: 1, maxPerSession: 3,
			others: []*airlockv1alpha1.SandboxClaim{func() *airlockv1alpha1.SandboxClaim {
				c := bound("old", t0.Add(-time.Hour))
				c.Status.Phase = airlockv1alpha1.ClaimReaping
				return c
			}()},
			claim:       newClaim("c1", "s1", airlockv1alpha1.ClaimQueued, t0),
			wantPhase:   airlockv1alpha1.ClaimBinding,
			wantReason:  ReasonBinding,
			wantRequeue: ptr.To(5 * time.Minute),
			wantEvent:   "Normal Admitted " + MessageAdmitted,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(t)
			rt := newRuntime("agent", tc.maxConcurrent, tc.maxPerSession)
			rt.Spec.Sandbox.Enabled = !tc.disabled
			f.runtimes = append(f.runtimes, rt)
			f.registries = append(f.registries, newRegistry("tools", ""))
			f.classes = append(f.classes, newClass("codegen"))
			f.claims = append(append(f.claims, tc.others...), tc.claim)
			c := f.newController(ctx)
			requeue, err := c.sync(ctx, keyOf(tc.claim))
			if err != nil {
				t.Fatal(err)
			}
			checkRequeue(t, requeue, tc.wantRequeue)
			got := f.writtenClaimNamed(tc.claim.Name)
			if got.Status.Phase != tc.wantPhase || got.Status.Reason != tc.wantReason {
				t.Errorf("status %s/%s, want %s/%s", got.Status.Phase, got.Status.Reason, tc.wantPhase, tc.wantReason)
			}
			if tc.wantPhase == airlockv1alpha1.ClaimQueued && (got.Status.QueuedAt == nil || !got.Status.QueuedAt.Time.Equal(t0)) {
				t.Errorf("queuedAt %v, want %v", got.Status.QueuedAt, t0)
			}
			// Decisions of one pass are written concurrently: their events come in any order.
			if diff := cmp.Diff(append(tc.otherEvents, tc.wantEvent), f.events(), cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSyncExpiry(t *testing.T) {
	refused := func() *airlockv1alpha1.SandboxClaim {
		c := newClaim("c1", "s1", airlockv1alpha1.ClaimRefused, t0)
		c.Status.Reason = "MaxPerSession"
		setCondition(&c.Status, ConditionAdmitted, metav1.ConditionFalse, "MaxPerSession", messageRefusedDetail, t0)
		return c
	}
	queued := func() *airlockv1alpha1.SandboxClaim {
		c := newClaim("c1", "s1", airlockv1alpha1.ClaimQueued, t0)
		setPhase(c, airlockv1alpha1.ClaimQueued, ReasonMaxConcurrent, MessageQueued)
		c.Status.QueuedAt = ptr.To(metav1.NewTime(t0))
		setCondition(&c.Status, ConditionAdmitted, metav1.ConditionFalse, ReasonQueued, MessageQueued, t0)
		return c
	}
	failed := func(replacedBy string) *airlockv1alpha1.SandboxClaim {
		c := binding("c1", t0.Add(-time.Minute))
		c.Status.Phase = airlockv1alpha1.ClaimFailed
		c.Status.ReplacedBy = replacedBy
		setCondition(&c.Status, ConditionReady, metav1.ConditionFalse, ReasonStartupTimeout, "", t0)
		return c
	}
	tests := map[string]struct {
		claim       *airlockv1alpha1.SandboxClaim
		others      []*airlockv1alpha1.SandboxClaim
		blocker     bool // a Bound claim holds the runtime's only slot
		step        time.Duration
		wantRequeue *time.Duration
		wantActions []string
	}{
		"refused is kept for a few seconds": {
			claim: refused(), step: 2 * time.Second,
			wantRequeue: ptr.To(3 * time.Second),
		},
		"refused is deleted after a few seconds": {
			claim: refused(), step: refusedTTL,
			wantActions: []string{"get sandboxclaims c1", "delete sandboxclaims c1"},
		},
		"queued waits max(idleTimeout, 10m)": {
			claim: queued(), blocker: true, step: 29 * time.Minute,
			wantRequeue: ptr.To(time.Minute),
		},
		"queued past max(idleTimeout, 10m) is deleted": {
			claim: queued(), blocker: true, step: 30 * time.Minute,
			wantActions: []string{"get sandboxclaims c1", "delete sandboxclaims c1"},
		},
		"failed is kept max(idleTimeout, 10m)": {
			claim: failed(""), step: 10 * time.Minute,
			wantRequeue: ptr.To(20 * time.Minute),
		},
		"failed past max(idleTimeout, 10m) is deleted": {
			claim: failed(""), step: 30 * time.Minute,
			wantActions: []string{"get sandboxclaims c1", "delete sandboxclaims c1"},
		},
		"failed and replaced is kept while its replacement lives": {
			claim:  failed("c1-r1"),
			others: []*airlockv1alpha1.SandboxClaim{replacementOf("c1", bound("c1-r1", t0))},
			step:   time.Hour,
		},
		"failed and replaced is deleted when its replacement is gone (asked of the API server)": {
			claim:       failed("c1-r1"),
			wantActions: []string{"get sandboxclaims c1-r1", "get sandboxclaims c1", "delete sandboxclaims c1"},
		},
		"failed, replaced by a claim not linked yet: the leader links them, and keeps it": {
			claim:       failed(""),
			others:      []*airlockv1alpha1.SandboxClaim{replacementOf("c1", newClaim("c1-r1", "s-c1", airlockv1alpha1.ClaimPending, t0))},
			step:        time.Hour,
			wantActions: []string{"update sandboxclaims/status c1"},
		},
		"failed, its replacement refused: not replaced, expires": {
			claim:       failed(""),
			others:      []*airlockv1alpha1.SandboxClaim{replacementOf("c1", newClaim("c1-r1", "s-c1", airlockv1alpha1.ClaimRefused, t0))},
			step:        30 * time.Minute,
			wantActions: []string{"get sandboxclaims c1", "delete sandboxclaims c1"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixtureWithLimits(t, 1, 3)
			f.claims = append(append(f.claims, tc.others...), tc.claim)
			if tc.blocker {
				b := bound("blocker", t0.Add(-time.Hour))
				b.Status.LastUsedAt = ptr.To(metav1.NewTime(t0.Add(time.Hour))) // never idle here
				f.claims = append(f.claims, b)
			}
			c := f.newController(ctx)
			f.clock.Step(tc.step)
			requeue, err := c.sync(ctx, keyOf(tc.claim))
			if err != nil {
				t.Fatal(err)
			}
			checkRequeue(t, requeue, tc.wantRequeue)
			checkActions(t, f, tc.wantActions)
			if slices.Contains(tc.wantActions, "update sandboxclaims/status c1") {
				if got := f.writtenClaim(); got.Status.ReplacedBy != "c1-r1" || got.Status.Phase != airlockv1alpha1.ClaimFailed {
					t.Errorf("status %s replacedBy %q, want Failed replacedBy c1-r1", got.Status.Phase, got.Status.ReplacedBy)
				}
			}
		})
	}
}

func TestSyncGoneOrDeleting(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t).withDefaults()
	deleting := bound("c1", t0.Add(-time.Hour))
	deleting.DeletionTimestamp = ptr.To(metav1.NewTime(t0))
	f.claims = append(f.claims, deleting)
	c := f.newController(ctx)
	for _, key := range []cache.ObjectName{keyOf(deleting), {Namespace: testNamespace, Name: "gone"}} {
		requeue, err := c.sync(ctx, key)
		if err != nil || requeue != nil {
			t.Errorf("sync(%s) = %v, %v; want nil, nil", key, requeue, err)
		}
	}
	checkActions(t, f, nil)
}

func TestHandlers(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t).withDefaults()
	waiting := newClaim("waiting", "s1", airlockv1alpha1.ClaimQueued, t0)
	boundClaim := bound("c1", t0)
	f.claims = append(f.claims, waiting, boundClaim)
	c := f.newController(ctx)
	logger, _ := ktesting.NewTestContext(t)

	// A claim leaving Bound frees a slot: the waiting claims are enqueued.
	failed := boundClaim.DeepCopy()
	failed.ResourceVersion = "2"
	failed.Status.Phase = airlockv1alpha1.ClaimFailed
	c.updateClaim(logger, boundClaim, failed)
	if got, want := c.queue.Len(), 2; got != want {
		t.Errorf("queue length %d after a claim left Bound, want %d", got, want)
	}
	// A resync (same resourceVersion) enqueues nothing.
	for c.queue.Len() > 0 {
		key, _ := c.queue.Get()
		c.queue.Done(key)
		c.queue.Forget(key)
	}
	c.updateClaim(logger, failed, failed)
	if c.queue.Len() != 0 {
		t.Errorf("a resync enqueued %d keys", c.queue.Len())
	}
	// A sandbox pod enqueues its claim by label; a Job its controller.
	c.handleObject(newPod(boundClaim, nil))
	c.handleObject(cache.DeletedFinalStateUnknown{Key: "x", Obj: buildSyncJob(waiting, "workspace-content", testSyncImage, 1)})
	var keys []string
	for c.queue.Len() > 0 {
		key, _ := c.queue.Get()
		keys = append(keys, key.String())
		c.queue.Done(key)
	}
	if diff := cmp.Diff([]string{"team-a/c1", "team-a/waiting"}, keys); diff != "" {
		t.Errorf("enqueued keys (-want +got):\n%s", diff)
	}
}

// afterRecordingQueue records the delays of AddAfter.
type afterRecordingQueue struct {
	workqueue.TypedRateLimitingInterface[cache.ObjectName]
	after []time.Duration
}

func (q *afterRecordingQueue) AddAfter(key cache.ObjectName, d time.Duration) {
	q.after = append(q.after, d)
	q.TypedRateLimitingInterface.AddAfter(key, d)
}

func TestProcessNextWorkItem(t *testing.T) {
	tests := map[string]struct {
		requeue      *time.Duration
		err          error
		wantRequeues int
		wantAfter    []time.Duration
	}{
		"success forgets":               {},
		"requeueAfter forgets":          {requeue: ptr.To(time.Minute), wantAfter: []time.Duration{time.Minute}},
		"error is retried rate-limited": {err: fmt.Errorf("boom"), wantRequeues: 1},
		"conflict is retried rate-limited": {
			err:          apierrors.NewConflict(schema.GroupResource{Group: "airlock.dev", Resource: "sandboxclaims"}, "c1", fmt.Errorf("modified")),
			wantRequeues: 1,
		},
		// A Binding claim whose children cannot be written: retried with backoff, and looked at
		// again at its startupTimeout however long the backoff has grown.
		"error with requeueAfter is retried and kept for the deadline": {
			err: fmt.Errorf("boom"), requeue: ptr.To(4 * time.Minute), wantRequeues: 1, wantAfter: []time.Duration{4 * time.Minute},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(t)
			c := f.newController(ctx)
			q := &afterRecordingQueue{TypedRateLimitingInterface: c.queue}
			c.queue = q
			defer c.queue.ShutDown()
			key := cache.ObjectName{Namespace: testNamespace, Name: "c1"}
			c.syncHandler = func(ctx context.Context, k cache.ObjectName) (*time.Duration, error) {
				return tc.requeue, tc.err
			}
			c.queue.Add(key)
			if !c.processNextWorkItem(ctx) {
				t.Fatal("processNextWorkItem returned false")
			}
			if got := c.queue.NumRequeues(key); got != tc.wantRequeues {
				t.Errorf("NumRequeues = %d, want %d", got, tc.wantRequeues)
			}
			if c.queue.Len() != 0 {
				t.Errorf("key requeued at once")
			}
			if diff := cmp.Diff(tc.wantAfter, q.after); diff != "" {
				t.Errorf("AddAfter delays (-want +got):\n%s", diff)
			}
		})
	}
}

func resourceQuantity(s string) resource.Quantity { return resource.MustParse(s) }

// TestSyncReapRequested covers sessions/close: the reap-requested annotation reaps a Binding or
// Bound claim now, with sync-back, and deletes one that never ran.
func TestSyncReapRequested(t *testing.T) {
	tests := map[string]struct {
		claim       *airlockv1alpha1.SandboxClaim
		others      []*airlockv1alpha1.SandboxClaim
		runtimeGone bool
		wantActions []string
		wantPhase   airlockv1alpha1.ClaimPhase
	}{
		"bound and in use: reaped now": {
			claim:       bound("c1", t0.Add(-time.Minute)),
			wantActions: []string{"get sandboxclaims c1", "update sandboxclaims/status c1", "update deployments c1"},
			wantPhase:   airlockv1alpha1.ClaimReaping,
		},
		"binding: reaped now": {
			claim:       binding("c1", t0.Add(-time.Second)),
			wantActions: []string{"get sandboxclaims c1", "update sandboxclaims/status c1", "update deployments c1"},
			wantPhase:   airlockv1alpha1.ClaimReaping,
		},
		"queued: deleted, nothing to save": {
			claim:       newClaim("c1", "s1", airlockv1alpha1.ClaimQueued, t0.Add(-time.Minute)),
			wantActions: []string{"get sandboxclaims c1", "delete sandboxclaims c1"},
		},
		"pending: deleted, nothing to save": {
			claim:       newClaim("c1", "s1", "", t0.Add(-time.Second)),
			wantActions: []string{"get sandboxclaims c1", "delete sandboxclaims c1"},
		},
		// sessions/close ends a Failed claim too: a re-acquire of its handle would otherwise
		// wait on it (202s) until it expires.
		"failed: deleted, nothing ran to save": {
			claim:       failed("c1", t0.Add(-time.Minute), ""),
			wantActions: []string{"update deployments c1", "get sandboxclaims c1", "delete sandboxclaims c1"},
		},
		"failed and replaced, its replacement still there: deleted": {
			claim:       failed("c1", t0.Add(-time.Minute), "c1-r1"),
			others:      []*airlockv1alpha1.SandboxClaim{bound("c1-r1", t0.Add(-time.Second))},
			wantActions: []string{"update deployments c1", "get sandboxclaims c1", "delete sandboxclaims c1"},
		},
		"runtime gone: garbage collection's, no reaping": {
			claim:       bound("c1", t0.Add(-time.Minute)),
			runtimeGone: true,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(t).withDefaults()
			if tc.runtimeGone {
				f.runtimes = nil
			}
			claim := tc.claim
			claim.Annotations = map[string]string{airlockv1alpha1.AnnotationReapRequested: t0.Format(time.RFC3339)}
			f.claims = append(append(f.claims, claim), tc.others...)
			switch claim.Status.Phase {
			case airlockv1alpha1.ClaimBound, airlockv1alpha1.ClaimBinding:
				f.withChildren(claim, 1)
				f.pods = append(f.pods, newPod(claim, readyPod))
			case airlockv1alpha1.ClaimFailed:
				f.withChildren(claim, 1) // a Failed claim's Deployment, not yet at zero
			}
			c := f.newController(ctx)
			requeue, err := c.sync(ctx, keyOf(claim))
			if err != nil {
				t.Fatal(err)
			}
			checkRequeue(t, requeue, nil)
			checkActions(t, f, tc.wantActions)
			if tc.wantPhase != "" {
				got := f.writtenClaim()
				if got.Status.Phase != tc.wantPhase || got.Status.Reason != ReasonSessionClosed {
					t.Errorf("status %s/%s, want %s/%s", got.Status.Phase, got.Status.Reason, tc.wantPhase, ReasonSessionClosed)
				}
				if len(got.Status.Addresses) != 0 {
					t.Errorf("a Reaping claim still has addresses %v", got.Status.Addresses)
				}
			}
		})
	}
}

// TestSyncDecidesOverAPIServerState: a claim that the cache would admit is queued instead when
// the API server has an older claim, already Binding, that the cache has not seen yet (one a
// previous leader admitted just before it died): admitting on the cache would run one claim too
// many. Once the older claim is gone, the claim is admitted.
func TestSyncDecidesOverAPIServerState(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixtureWithLimits(t, 1, 3)
	younger := newClaim("c2", "s2", "", t0.Add(-time.Second))
	f.claims = append(f.claims, younger)
	c := f.newController(ctx)

	syncWithAPIOnly(ctx, t, f, c, younger, binding("c1", t0.Add(-time.Minute)))
	checkActions(t, f, []string{"update sandboxclaims/status c2"})
	if got := f.writtenClaim(); got.Status.Phase != airlockv1alpha1.ClaimQueued {
		t.Errorf("phase %q with an older Binding claim on the API server, want Queued", got.Status.Phase)
	}

	if err := f.airlockClient.AirlockV1alpha1().SandboxClaims(testNamespace).Delete(ctx, "c1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.log = nil
	if _, err := c.sync(ctx, keyOf(younger)); err != nil {
		t.Fatal(err)
	}
	if got := f.writtenClaim(); got.Status.Phase != airlockv1alpha1.ClaimBinding {
		t.Errorf("phase %q once the older claim is gone, want Binding", got.Status.Phase)
	}
}

// TestSyncQueueDecidedOverAPIServerState: a claim that the cache would queue is refused instead
// when the API server has an older live claim of its session that the cache has not seen yet (one
// a previous leader queued just before it died): queuing it would make one live claim too many.
func TestSyncQueueDecidedOverAPIServerState(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixtureWithLimits(t, 1, 1)
	running := bound("c0", t0.Add(-time.Hour))
	running.Spec.Session = "s0"
	younger := newClaim("c2", "s1", airlockv1alpha1.ClaimPending, t0.Add(-time.Second))
	f.claims = append(f.claims, running, younger)
	c := f.newController(ctx)

	requeue := syncWithAPIOnly(ctx, t, f, c, younger, newClaim("c1", "s1", airlockv1alpha1.ClaimQueued, t0.Add(-time.Minute)))
	checkRequeue(t, requeue, ptr.To(refusedTTL))
	checkActions(t, f, []string{"update sandboxclaims/status c2"})
	if got := f.writtenClaim(); got.Status.Phase != airlockv1alpha1.ClaimRefused || got.Status.Reason != admission.ReasonMaxPerSession {
		t.Errorf("younger claim %s/%s, want Refused/MaxPerSession", got.Status.Phase, got.Status.Reason)
	}
}

// syncWithAPIOnly puts apiOnly into the API server only (the cache has not caught up with it),
// syncs claim and returns when to look at it again, checking that the claims were listed from the
// API server for the decision.
func syncWithAPIOnly(ctx context.Context, t *testing.T, f *fixture, c *Controller, claim, apiOnly *airlockv1alpha1.SandboxClaim) *time.Duration {
	t.Helper()
	if err := f.airlockClient.Tracker().Add(apiOnly); err != nil {
		t.Fatal(err)
	}
	f.log = nil
	requeue, err := c.sync(ctx, keyOf(claim))
	if err != nil {
		t.Fatal(err)
	}
	if !f.listedClaims() {
		t.Error("the decision was not made over a list from the API server")
	}
	return requeue
}

// TestSyncRefusalsFirst: when the walk gives a claim the place of a Queued claim that it now
// refuses (both created in the same second, sorted by name), the refusal is written before the
// decision that takes the place, so that there is never one live claim too many.
func TestSyncRefusalsFirst(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixtureWithLimits(t, 5, 1)
	queued := newClaim("zzz", "s1", airlockv1alpha1.ClaimQueued, t0)
	pending := newClaim("aaa", "s1", airlockv1alpha1.ClaimPending, t0)
	running := newClaim("run", "s0", airlockv1alpha1.ClaimBound, t0.Add(-time.Hour))
	f.claims = append(f.claims, queued, pending, running)
	c := f.newController(ctx)
	// Make aaa wait (Queue, not Admit): the runtime's one slot is taken.
	c.decide = func(in admission.Input) map[string]admission.Decision {
		d := admission.Decide(in)
		if d["aaa"].Action == admission.Admit {
			d["aaa"] = admission.Decision{Action: admission.Queue}
		}
		return d
	}

	if _, err := c.sync(ctx, keyOf(pending)); err != nil {
		t.Fatal(err)
	}
	checkActions(t, f, []string{"update sandboxclaims/status zzz", "update sandboxclaims/status aaa"})
	var phases []string
	for _, a := range f.log {
		if u, ok := a.(core.UpdateAction); ok {
			got := u.GetObject().(*airlockv1alpha1.SandboxClaim)
			phases = append(phases, got.Name+":"+string(got.Status.Phase)+"/"+got.Status.Reason)
		}
	}
	if diff := cmp.Diff([]string{"zzz:Refused/MaxPerSession", "aaa:Queued/MaxConcurrent"}, phases); diff != "" {
		t.Errorf("writes (-want +got):\n%s", diff)
	}
}

// TestSyncPlaceDecisionsSerialisedPerNamespace: a decision that takes a place is confirmed and
// written under the namespace's decision lock, so that two workers never confirm two decisions
// of one namespace over the same list. While the lock is held elsewhere, the sync writes nothing;
// once it is released, the claim is queued.
func TestSyncPlaceDecisionsSerialisedPerNamespace(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixtureWithLimits(t, 1, 3)
	running := bound("c0", t0.Add(-time.Hour))
	pending := newClaim("c1", "s1", airlockv1alpha1.ClaimPending, t0.Add(-time.Second))
	f.claims = append(f.claims, running, pending)
	c := f.newController(ctx)

	unlock := c.decisionLocks.lock(testNamespace)
	done := make(chan error)
	go func() {
		_, err := c.sync(ctx, keyOf(pending))
		done <- err
	}()
	// Wait until the sync waits for the lock: it then has the cache's decision in hand.
	for c.decisionLocks.users(testNamespace) < 2 {
		select {
		case err := <-done:
			t.Fatalf("the sync finished while another worker held the namespace's decision lock (err %v)", err)
		default:
			goruntime.Gosched()
		}
	}
	checkActions(t, f, nil)
	for _, a := range f.log {
		if a.GetVerb() == "list" {
			t.Errorf("the sync listed claims while another worker held the decision lock: %v", a)
		}
	}
	unlock()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := f.writtenClaim(); got.Status.Phase != airlockv1alpha1.ClaimQueued {
		t.Errorf("phase %q after the lock was released, want Queued", got.Status.Phase)
	}
	if n := c.decisionLocks.len(); n != 0 {
		t.Errorf("%d decision locks left after the sync", n)
	}
}

// TestNewControllerLeavesGlobalSchemeAlone: building the controller (which happens once the lease
// is held, while lease renewals decode with client-go's global scheme) does not write to that
// scheme: a write there raced with the renewals and crashed the operator.
func TestNewControllerLeavesGlobalSchemeAlone(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	newFixture(t).withDefaults().newController(ctx)
	if kubescheme.Scheme.Recognizes(airlockv1alpha1.SchemeGroupVersion.WithKind("SandboxClaim")) {
		t.Error("client-go's global scheme knows SandboxClaim: something added the airlock kinds to it")
	}
}
