package warmpool

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	kubeinformers "k8s.io/client-go/informers"
	core "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/controller/controllertest"
	airlockinformers "github.com/airlock-dev/airlock/pkg/generated/informers/externalversions"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
	"github.com/airlock-dev/airlock/pkg/sandboxpod/sandboxpodtest"
)

// fakeMemberKeys derives a member's key text from its name.
type fakeMemberKeys struct{ err error }

func (k fakeMemberKeys) EncodedMemberKey(_ context.Context, namespace, member string) (string, error) {
	if k.err != nil {
		return "", k.err
	}
	return "key-of-" + namespace + "-" + member, nil
}

func (k fakeMemberKeys) EvidenceToken(_ context.Context, namespace, member string) (string, error) {
	if k.err != nil {
		return "", k.err
	}
	return "evidence-token-of-" + namespace + "-" + member, nil
}

// testSealKey is the fake key that seals members' evidence records.
var testSealKey = []byte("0123456789abcdef0123456789abcdef")

func (k fakeMemberKeys) MemberProxyCredential(_ context.Context, uid types.UID, namespace, member string) (string, error) {
	if k.err != nil {
		return "", k.err
	}
	return "proxy-of-" + namespace + "-" + member + "-" + string(uid), nil
}

func (k fakeMemberKeys) MemberEvidenceKey(context.Context) ([]byte, error) {
	if k.err != nil {
		return nil, k.err
	}
	return testSealKey, nil
}

// newPoolController builds a pool controller on the fixture's objects, creating at most rate
// members per second.
func (f *fixture) newController(ctx context.Context, rate float64) *Controller {
	f.t.Helper()
	f.newClients()
	ai := airlockinformers.NewSharedInformerFactory(f.airlockClient, 0)
	ki := kubeinformers.NewSharedInformerFactory(f.kubeClient, 0)
	c, err := newController(ctx, f.kubeClient, f.airlockClient, Informers{
		Registries:      ai.Airlock().V1alpha1().ToolRegistries(),
		Classes:         ai.Airlock().V1alpha1().SandboxClasses(),
		Claims:          ai.Airlock().V1alpha1().SandboxClaims(),
		Runtimes:        ai.Airlock().V1alpha1().AgentRuntimes(),
		Pods:            ki.Core().V1().Pods(),
		NetworkPolicies: ki.Networking().V1().NetworkPolicies(),
		AllowedServices: ki.Core().V1().Services(),
		Jobs:            ki.Batch().V1().Jobs(),
	}, fakeMemberKeys{}, rate, f.clock)
	if err != nil {
		f.t.Fatal(err)
	}
	f.defaultDeny = &controllertest.DefaultDeny{Err: f.defaultDenyErr}
	c.defaultDeny = f.defaultDeny
	add := func(informer cache.SharedIndexInformer, obj any) {
		if err := informer.GetIndexer().Add(obj); err != nil {
			f.t.Fatal(err)
		}
	}
	f.registryCache = ai.Airlock().V1alpha1().ToolRegistries().Informer().GetIndexer()
	for _, o := range f.registries {
		add(ai.Airlock().V1alpha1().ToolRegistries().Informer(), o)
	}
	for _, o := range f.classes {
		add(ai.Airlock().V1alpha1().SandboxClasses().Informer(), o)
	}
	for _, o := range f.runtimes {
		add(ai.Airlock().V1alpha1().AgentRuntimes().Informer(), o)
	}
	for _, o := range f.pods {
		add(ki.Core().V1().Pods().Informer(), o)
	}
	for _, o := range f.netpols {
		add(ki.Networking().V1().NetworkPolicies().Informer(), o)
	}
	for _, o := range f.allowedServices {
		add(ki.Core().V1().Services().Informer(), o)
	}
	for _, o := range f.jobs {
		add(ki.Batch().V1().Jobs().Informer(), o)
	}
	for _, o := range f.claims {
		add(ai.Airlock().V1alpha1().SandboxClaims().Informer(), o)
	}
	if !f.unrecorded {
		f.recordPools(c)
	}
	return c
}

// poolFixture is a fixture with a registry wanting warm members of the class, and the given
// pods and policies cached.
func poolFixture(t *testing.T, warm int32, pods []*corev1.Pod, policies ...*networkingv1.NetworkPolicy) *fixture {
	f := newFixture(t)
	f.registries = append(f.registries, warmRegistry(warm))
	f.classes = append(f.classes, newClass("codegen"))
	f.pods = append(f.pods, pods...)
	f.netpols = append(f.netpols, policies...)
	return f
}

// currentPolicy is the pool policy of warmRegistry's sandbox for the fixture's class.
func currentPolicy() *networkingv1.NetworkPolicy {
	reg := warmRegistry(3)
	return sandboxpod.PoolNetworkPolicy(reg, "codegen", sandboxpod.PoolKey(reg.UID, "codegen", testRecord()), testRecord(), nil)
}

func registryKey() cache.ObjectName {
	return cache.ObjectName{Namespace: testNamespace, Name: "tools"}
}

// createdOf returns the objects of resource the clients created, in order.
func (f *fixture) createdOf(resource string) []metav1.Object {
	var out []metav1.Object
	for _, a := range f.log {
		if create, ok := a.(core.CreateAction); ok && create.GetResource().Resource == resource {
			out = append(out, create.GetObject().(metav1.Object))
		}
	}
	return out
}

// TestPoolFillsBehindItsPolicy: an empty pool gets its NetworkPolicy first, then its members,
// as many as the refill rate allows at once, each a restricted sandbox pod of the entry's record
// with its own fresh workspace, the member key in place of a token and no tool list; the rest
// are created when the rate limiter allows (the requeue), and the registry's status says so.
func TestPoolFillsBehindItsPolicy(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := poolFixture(t, 5, nil)
	c := f.newController(ctx, 2)
	requeue, err := c.sync(ctx, registryKey())
	if err != nil {
		t.Fatal(err)
	}
	acts := f.actions()
	if len(acts) < 3 || acts[0] != "create networkpolicies "+currentPolicy().Name {
		t.Fatalf("actions %v: want the pool's policy created first", acts)
	}
	pods := f.createdOf("pods")
	if len(pods) != 2 {
		t.Fatalf("created %d members, want 2 (the limiter's burst)", len(pods))
	}
	if requeue == nil || *requeue <= 0 || *requeue > time.Second {
		t.Errorf("requeue %v, want the limiter's wait for the next member", requeue)
	}
	seen := map[string]bool{}
	for _, o := range pods {
		pod := o.(*corev1.Pod)
		if seen[pod.Name] || len(pod.Name) > 63 || !strings.HasPrefix(pod.Name, "tools-codegen-") {
			t.Errorf("member name %q (unique, a label value, of the registry and entry)", pod.Name)
		}
		seen[pod.Name] = true
		if ref := metav1.GetControllerOf(pod); ref == nil || ref.Kind != "ToolRegistry" || ref.UID != "uid-reg-tools" {
			t.Errorf("member %s controller %+v, want the registry", pod.Name, ref)
		}
		if pod.Labels[airlockv1alpha1.LabelClaim] != "" || pod.Labels[airlockv1alpha1.LabelWarmPool] != currentPolicy().Labels[airlockv1alpha1.LabelWarmPool] {
			t.Errorf("member labels %v", pod.Labels)
		}
		if _, ok := pod.Labels[airlockv1alpha1.LabelClaim]; !ok {
			t.Error("a member lacks the claim label: the operator's filtered cache would not see it")
		}
		args := pod.Spec.Containers[0].Args
		if !slices.Contains(args, "--warm-key-file="+sandboxpod.MemberKeyFile) {
			t.Errorf("args %v lack the key file", args)
		}
		for _, a := range args {
			if strings.HasPrefix(a, "--allowed-tools") || strings.HasPrefix(a, "--auth-token-file") {
				t.Errorf("a member is started with %s: its tools and token come with the adoption", a)
			}
		}
		if sub := pod.Spec.Containers[0].VolumeMounts[0].SubPath; sub != testNamespace+"/sandboxes/warm/"+pod.Name {
			t.Errorf("workspace %q, want its own under warm/", sub)
		}
		sc := pod.Spec.SecurityContext
		if pod.Spec.AutomountServiceAccountToken == nil || *pod.Spec.AutomountServiceAccountToken || sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
			t.Errorf("member %s is not a restricted pod without a ServiceAccount token", pod.Name)
		}
	}
	written := f.written("toolregistries", "status").(*airlockv1alpha1.ToolRegistry)
	want := []airlockv1alpha1.WarmPoolStatus{{Name: "codegen", Wanted: 5, Ready: 0, Starting: 2,
		Key: currentPolicy().Labels[airlockv1alpha1.LabelWarmPool], Record: testRecord()}}
	if !apiequality.Semantic.DeepEqual(written.Status.Warm, want) || written.Status.WarmWanted != 5 || written.Status.WarmReady != 0 {
		t.Errorf("status %+v, want %+v", written.Status, want)
	}
}

// TestPoolMembersSorted: the pool counts Ready members, gives those whose key this process has not
// made their key Secret (owned by the pod), and deletes the idle members that are stale (another record), ended,
// failing to start, or starting past the startupTimeout; adopted members are never touched.
func TestPoolMembersSorted(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	reg := warmRegistry(3)
	record := testRecord()
	now := t0.Add(time.Minute)
	ready := warmMember(reg, "tools-codegen-readyreadyre", record, t0, "10.244.0.40")
	starting := warmMember(reg, "tools-codegen-startingstar", record, t0, "")
	oldClass := newClass("codegen")
	oldClass.Generation = 3
	stale := warmMember(reg, "tools-codegen-stalestalest", sandboxpod.Freeze(oldClass, &reg.Spec.Sandboxes[0]), t0, "10.244.0.41")
	ended := warmMember(reg, "tools-codegen-endedendede", record, t0, "10.244.0.42")
	ended.Status.Phase = corev1.PodFailed
	crashing := warmMember(reg, "tools-codegen-crashingcra", record, t0, "")
	crashing.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: sandboxpod.ContainerName, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}}}
	slow := warmMember(reg, "tools-codegen-slowslowslo", record, t0.Add(-10*time.Minute), "")
	// Adopted by c1, and of the old record: the claim's, never the pool's to replace.
	adoptedPod := warmMember(reg, "tools-codegen-adoptedadop", sandboxpod.Freeze(oldClass, &reg.Spec.Sandboxes[0]), t0, "10.244.0.43")
	adoptBy("c1", adoptedPod)
	f := poolFixture(t, 3, []*corev1.Pod{ready, starting, stale, ended, crashing, slow, adoptedPod}, currentPolicy())
	f.clock.SetTime(now)
	c := f.newController(ctx, 100)
	c.keysWritten.Store(ready.UID, struct{}{}) // this process made the Ready one's key
	if _, err := c.sync(ctx, registryKey()); err != nil {
		t.Fatal(err)
	}
	var deleted []string
	for _, a := range f.actions() {
		if name, ok := strings.CutPrefix(a, "delete pods "); ok {
			deleted = append(deleted, name)
		}
	}
	slices.Sort(deleted)
	want := []string{crashing.Name, ended.Name, slow.Name, stale.Name}
	slices.Sort(want)
	if !slices.Equal(deleted, want) {
		t.Errorf("deleted %v, want %v", deleted, want)
	}
	secrets := f.createdOf("secrets")
	if len(secrets) != 1 || secrets[0].GetName() != starting.Name+"-key" {
		t.Fatalf("key Secrets created %v, want only the starting member's", secrets)
	}
	if ref := metav1.GetControllerOf(secrets[0]); ref == nil || ref.Kind != "Pod" || ref.UID != starting.UID {
		t.Errorf("key Secret controller %+v, want its pod", ref)
	}
	if got := string(secrets[0].(*corev1.Secret).Data["key"]); got != "key-of-"+testNamespace+"-"+starting.Name {
		t.Errorf("key %q", got)
	}
	// Ready 1 + starting 1 of 3: one more created.
	if pods := f.createdOf("pods"); len(pods) != 1 {
		t.Errorf("created %d members, want 1", len(pods))
	}
	written := f.written("toolregistries", "status").(*airlockv1alpha1.ToolRegistry)
	if st := written.Status.Warm[0]; st.Ready != 1 || st.Starting != 2 || !strings.Contains(st.Message, "CrashLoopBackOff") {
		t.Errorf("status %+v, want 1 ready, 2 starting, and why a member failed", st)
	}
}

// TestMemberKeySecretTakenDeletesTheMember: a key Secret that exists already, not created by
// this process, may hold a key someone else knows: its member is deleted, never adopted.
func TestMemberKeySecretTakenDeletesTheMember(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	reg := warmRegistry(1)
	starting := warmMember(reg, "tools-codegen-startingstar", testRecord(), t0, "")
	f := poolFixture(t, 1, []*corev1.Pod{starting}, currentPolicy())
	f.secrets = append(f.secrets, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: starting.Name + "-key", Namespace: testNamespace}})
	c := f.newController(ctx, 100)
	f.kubeClient.PrependReactor("create", "secrets", func(a core.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewAlreadyExists(schema.GroupResource{Resource: "secrets"}, starting.Name+"-key")
	})
	if _, err := c.sync(ctx, registryKey()); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(f.actions(), "delete pods "+starting.Name) {
		t.Errorf("actions %v, want the member deleted", f.actions())
	}
}

// TestPoolSurplusAndRemovedEntries: members beyond the warm count go, starting ones first; the
// idle members of an entry the registry no longer has go too; with warm 0 nothing is created.
func TestPoolSurplusAndRemovedEntries(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	reg := warmRegistry(1)
	var pods []*corev1.Pod
	for i := range 3 {
		pods = append(pods, warmMember(reg, fmt.Sprintf("tools-codegen-ready%07d", i), testRecord(), t0.Add(time.Duration(i)*time.Second), fmt.Sprintf("10.244.0.%d", 40+i)))
	}
	startingPod := warmMember(reg, "tools-codegen-startingstar", testRecord(), t0, "")
	gone := warmRegistry(1)
	gone.Spec.Sandboxes[0].Name = "review"
	orphan := warmMember(gone, "tools-review-orphanorphan", testRecord(), t0, "10.244.0.50")
	f := poolFixture(t, 1, append(pods, startingPod, orphan), currentPolicy())
	c := f.newController(ctx, 100)
	if _, err := c.sync(ctx, registryKey()); err != nil {
		t.Fatal(err)
	}
	var deleted []string
	for _, a := range f.actions() {
		if name, ok := strings.CutPrefix(a, "delete pods "); ok {
			deleted = append(deleted, name)
		}
	}
	slices.Sort(deleted)
	// Kept: the oldest Ready one.
	want := []string{pods[1].Name, pods[2].Name, startingPod.Name, orphan.Name}
	slices.Sort(want)
	if !slices.Equal(deleted, want) {
		t.Errorf("deleted %v, want %v", deleted, want)
	}
	if n := len(f.createdOf("pods")); n != 0 {
		t.Errorf("created %d members", n)
	}
}

// TestPoolPoliciesCollected: a pool policy no member uses (idle or adopted) and no current pool
// wants is deleted; one an adopted member still carries is kept; a pool that cannot be built (its
// class is gone) creates nothing and says why.
func TestPoolPoliciesCollected(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	reg := warmRegistry(2)
	oldClass := newClass("codegen")
	oldClass.Generation = 3
	oldRecord := sandboxpod.Freeze(oldClass, &reg.Spec.Sandboxes[0])
	oldKey := sandboxpod.PoolKey(reg.UID, "codegen", oldRecord)
	usedPolicy := sandboxpod.PoolNetworkPolicy(reg, "codegen", oldKey, oldRecord, nil)
	olderClass := newClass("codegen")
	olderClass.Generation = 2
	olderRecord := sandboxpod.Freeze(olderClass, &reg.Spec.Sandboxes[0])
	unused := sandboxpod.PoolNetworkPolicy(reg, "codegen", sandboxpod.PoolKey(reg.UID, "codegen", olderRecord), olderRecord, nil)
	adopted := warmMember(reg, "tools-codegen-adoptedadop", oldRecord, t0, "10.244.0.43")
	adoptBy("c1", adopted)
	f := poolFixture(t, 2, []*corev1.Pod{adopted}, usedPolicy, unused)
	f.classes = nil // the class is gone: the pool cannot be built
	c := f.newController(ctx, 100)
	if _, err := c.sync(ctx, registryKey()); err != nil {
		t.Fatal(err)
	}
	checkActionsSubset(t, f, []string{"delete networkpolicies " + unused.Name}, []string{"delete networkpolicies " + usedPolicy.Name, "delete pods " + adopted.Name, "create pods", "create networkpolicies"})
	written := f.written("toolregistries", "status").(*airlockv1alpha1.ToolRegistry)
	if st := written.Status.Warm[0]; st.Ready != 0 || !strings.Contains(st.Message, "not found") && !strings.Contains(st.Message, "codegen") {
		t.Errorf("status %+v, want why no member is built", st)
	}
}

// checkActionsSubset checks that every action of want was made and none starting with a prefix
// of never.
func checkActionsSubset(t *testing.T, f *fixture, want, never []string) {
	t.Helper()
	acts := f.actions()
	for _, w := range want {
		if !slices.Contains(acts, w) {
			t.Errorf("actions %v lack %q", acts, w)
		}
	}
	for _, a := range acts {
		for _, n := range never {
			if strings.HasPrefix(a, n) {
				t.Errorf("action %q must not happen", a)
			}
		}
	}
}

// TestPoolStatusWritesCoalesced: the registry's status is written at most once per
// poolStatusInterval; a change within it is written when it ends (the requeue).
func TestPoolStatusWritesCoalesced(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	reg := warmRegistry(1)
	member := warmMember(reg, "tools-codegen-readyreadyre", testRecord(), t0, "10.244.0.40")
	f := poolFixture(t, 1, []*corev1.Pod{member}, currentPolicy())
	c := f.newController(ctx, 100)
	if _, err := c.sync(ctx, registryKey()); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(f.actions(), "update toolregistries/status tools") {
		t.Fatal("no status written")
	}
	// The member is adopted: the ready count drops, within the interval.
	f.log = nil
	cached, err := c.registryList.ToolRegistries(testNamespace).Get("tools")
	if err != nil {
		t.Fatal(err)
	}
	requeue, err := c.writeStatus(ctx, cached, []*pool{{entry: &reg.Spec.Sandboxes[0], wanted: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if requeue <= 0 || requeue > poolStatusInterval {
		t.Errorf("requeue %v, want the rest of the interval", requeue)
	}
	if slices.Contains(f.actions(), "update toolregistries/status tools") {
		t.Error("a second status write within the interval")
	}
	f.clock.Step(poolStatusInterval)
	if _, err := c.writeStatus(ctx, cached, []*pool{{entry: &reg.Spec.Sandboxes[0], wanted: 1}}); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(f.actions(), "update toolregistries/status tools") {
		t.Error("the held-back status was not written once the interval passed")
	}
}

// TestPoolDeletesOnlyWhatItSaw: the pool deletes an idle member only as its cache showed it (UID
// and resourceVersion): a member the cache shows idle and stale, but that a claim adopted a moment
// ago (the API server has it at another resourceVersion), is not deleted.
func TestPoolDeletesOnlyWhatItSaw(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	reg := warmRegistry(1)
	oldClass := newClass("codegen")
	oldClass.Generation = 9
	// Cached: idle and of an older record, so stale: the pool deletes it.
	cached := warmMember(reg, "tools-codegen-adoptedjust", sandboxpod.Freeze(oldClass, &reg.Spec.Sandboxes[0]), t0, "10.244.0.60")
	f := poolFixture(t, 1, []*corev1.Pod{cached}, currentPolicy())
	c := f.newController(ctx, 100)
	// At the API server it was adopted since: another resourceVersion.
	adopted := cached.DeepCopy()
	adoptBy("c1", adopted)
	adopted.ResourceVersion = "8"
	if err := f.kubeClient.Tracker().Update(corev1.SchemeGroupVersion.WithResource("pods"), adopted, adopted.Namespace); err != nil {
		t.Fatal(err)
	}
	var tried []string
	f.kubeClient.PrependReactor("delete", "pods", func(action core.Action) (bool, runtime.Object, error) {
		del := action.(core.DeleteAction)
		tried = append(tried, del.GetName())
		live, err := f.kubeClient.Tracker().Get(corev1.SchemeGroupVersion.WithResource("pods"), del.GetNamespace(), del.GetName())
		if err != nil {
			return true, nil, err
		}
		pre := del.GetDeleteOptions().Preconditions
		// As the API server does: only a resourceVersion precondition that does not match refuses.
		if pre != nil && pre.ResourceVersion != nil && *pre.ResourceVersion != live.(metav1.Object).GetResourceVersion() {
			return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "pods"}, del.GetName(), fmt.Errorf("the object has been modified"))
		}
		return false, nil, nil
	})
	if _, err := c.sync(ctx, registryKey()); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(tried, cached.Name) {
		t.Fatalf("deletions tried %v: the stale member was not even tried", tried)
	}
	if _, err := f.kubeClient.CoreV1().Pods(testNamespace).Get(ctx, cached.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("the adopted member was deleted from a stale cache: %v", err)
	}
}

// egressGatewayRef and egressGatewayService are the operator's egress gateway and its Service.
func egressGatewayRef() *sandboxpod.GatewayRef {
	return &sandboxpod.GatewayRef{Namespace: "airlock-system", Name: "airlock-egress", Port: 3128, CABundleConfigMap: "airlock-egress-ca"}
}

func egressGatewayService(ip string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "airlock-egress", Namespace: "airlock-system", ResourceVersion: "1"},
		Spec: corev1.ServiceSpec{
			ClusterIP: ip,
			Selector:  map[string]string{"app.kubernetes.io/name": "airlock-egress"},
			Ports:     []corev1.ServicePort{{Name: "proxy", Port: 3128, TargetPort: intstr.FromString("proxy"), Protocol: corev1.ProtocolTCP}},
		},
	}
}

// egressFixtureClass gives the fixture's class egress.
func egressFixtureClass(f *fixture) {
	f.classes[0].Spec.Egress = &airlockv1alpha1.SandboxEgress{
		Hosts: []airlockv1alpha1.EgressHost{{Host: "proxy.golang.org", Ports: []airlockv1alpha1.EgressPort{443}}},
	}
}

// claimRecord is the record a claim of the fixture's class and entry is frozen with, as the claim
// controller freezes it (claim.freezeFrom): the class, the entry, and the gateway from its Service.
func claimRecord(t *testing.T, class *airlockv1alpha1.SandboxClass, svc *corev1.Service) *airlockv1alpha1.FrozenSandbox {
	t.Helper()
	record := sandboxpod.Freeze(class, &warmRegistry(1).Spec.Sandboxes[0])
	gw, why := sandboxpod.FreezeGateway(egressGatewayRef(), svc)
	if why != "" {
		t.Fatal(why)
	}
	record.Egress.Gateway = *gw
	return record
}

// TestWarmMembersWithEgress: a pool whose class has egress keeps members built as a claim of it
// would be (docs/egress.md, "Warm members of a class with egress"): with the gateway frozen from
// the operator's Service, so that the pool key is the one a claim's record gives (a claim adopts
// them); its policy lets the members reach the gateway; each member's environment names its own
// proxy credential (username <ns>.~<member>, password from its key Secret), which its key Secret,
// written once the pod's UID is known, holds under "proxy" beside the member key. A member built
// with a gateway at another address is stale: replaced.
func TestWarmMembersWithEgress(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	reg := warmRegistry(3)
	svc := egressGatewayService("10.96.0.50")
	f := poolFixture(t, 3, nil)
	egressFixtureClass(f)
	record := claimRecord(t, f.classes[0], svc)
	key := sandboxpod.PoolKey(reg.UID, "codegen", record)
	starting := warmMember(reg, "tools-codegen-startingstar", record, t0, "")
	moved := warmMember(reg, "tools-codegen-movedmovedmo", claimRecord(t, f.classes[0], egressGatewayService("10.96.0.99")), t0, "10.244.0.41")
	f.pods = append(f.pods, starting, moved)
	f.allowedServices = append(f.allowedServices, svc)
	c := f.newController(ctx, 100)
	c.SetEgressGateway(egressGatewayRef())
	f.recordPools(c) // with the gateway
	if _, err := c.sync(ctx, registryKey()); err != nil {
		t.Fatal(err)
	}

	np := f.createdOf("networkpolicies")
	if len(np) != 1 || np[0].GetLabels()[airlockv1alpha1.LabelWarmPool] != key {
		t.Fatalf("policies created %v, want the pool's of key %s", np, key)
	}
	if egress := np[0].(*networkingv1.NetworkPolicy).Spec.Egress; len(egress) != 1 || egress[0].To[0].NamespaceSelector.MatchLabels[corev1.LabelMetadataName] != "airlock-system" {
		t.Errorf("pool policy egress %+v, want the gateway's pods", egress)
	}
	pods := f.createdOf("pods")
	if len(pods) != 2 {
		t.Fatalf("created %d members, want 2 (3 wanted, 1 starting)", len(pods))
	}
	for _, o := range pods {
		pod := o.(*corev1.Pod)
		if pod.Labels[airlockv1alpha1.LabelWarmPool] != key {
			t.Errorf("member %s of pool %s, want %s (the key a claim's record gives)", pod.Name, pod.Labels[airlockv1alpha1.LabelWarmPool], key)
		}
		env := map[string]corev1.EnvVar{}
		for _, e := range pod.Spec.Containers[0].Env {
			env[e.Name] = e
		}
		wantURL := "http://" + testNamespace + ".~" + pod.Name + ":$(AIRLOCK_EGRESS_CREDENTIAL)@10.96.0.50:3128"
		if env["HTTPS_PROXY"].Value != wantURL || env["http_proxy"].Value != wantURL {
			t.Errorf("member %s HTTPS_PROXY %q, want %q", pod.Name, env["HTTPS_PROXY"].Value, wantURL)
		}
		ref := env[sandboxpod.ProxyCredentialEnv].ValueFrom
		if ref == nil || ref.SecretKeyRef == nil || ref.SecretKeyRef.Name != pod.Name+"-key" || ref.SecretKeyRef.Key != sandboxpod.ProxyKey {
			t.Errorf("member %s credential from %+v, want its key Secret's %q", pod.Name, ref, sandboxpod.ProxyKey)
		}
		if env["SSL_CERT_FILE"].Value != sandboxpod.EgressCAFile {
			t.Errorf("member %s without the CA variables", pod.Name)
		}
	}
	secrets := f.createdOf("secrets")
	if len(secrets) != 1 || secrets[0].GetName() != starting.Name+"-key" {
		t.Fatalf("key Secrets created %v, want the starting member's", secrets)
	}
	data := secrets[0].(*corev1.Secret).Data
	if got, want := string(data[sandboxpod.ProxyKey]), "proxy-of-"+testNamespace+"-"+starting.Name+"-"+string(starting.UID); got != want {
		t.Errorf("proxy credential %q, want %q (bound to the pod's UID)", got, want)
	}
	if string(data["key"]) != "key-of-"+testNamespace+"-"+starting.Name {
		t.Errorf("member key %q", data["key"])
	}
	if !slices.Contains(f.actions(), "delete pods "+moved.Name) {
		t.Errorf("actions %v: the member built with the gateway's old address is kept", f.actions())
	}
}

// TestNoWarmMembersWithoutGateway: a pool whose class has egress and no gateway to build its
// members with (the operator names none, or its Service is missing) creates no member and says
// why, as a claim of it fails EgressUnavailable.
func TestNoWarmMembersWithoutGateway(t *testing.T) {
	for name, tc := range map[string]struct {
		ref         *sandboxpod.GatewayRef
		svc         *corev1.Service
		wantMessage string
	}{
		"no gateway named":     {svc: egressGatewayService("10.96.0.50"), wantMessage: "--egress-gateway-service is not set"},
		"no Service":           {ref: egressGatewayRef(), wantMessage: "does not exist"},
		"a Service without ip": {ref: egressGatewayRef(), svc: egressGatewayService("None"), wantMessage: "no cluster IP"},
	} {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := poolFixture(t, 2, nil)
			egressFixtureClass(f)
			if tc.svc != nil {
				f.allowedServices = append(f.allowedServices, tc.svc)
			}
			c := f.newController(ctx, 100)
			c.SetEgressGateway(tc.ref)
			if _, err := c.sync(ctx, registryKey()); err != nil {
				t.Fatal(err)
			}
			if n := len(f.createdOf("pods")); n != 0 {
				t.Errorf("created %d members", n)
			}
			written := f.written("toolregistries", "status").(*airlockv1alpha1.ToolRegistry)
			if st := written.Status.Warm[0]; st.Ready != 0 || !strings.Contains(st.Message, tc.wantMessage) {
				t.Errorf("status %+v, want why no member is built (%q)", st, tc.wantMessage)
			}
		})
	}
}

// TestGatewayServiceEnqueuesEgressPools: an event of the gateway's Service brings back the
// registries with a sandbox of a class with egress (their members' records hold its address),
// and no other; another Service's event brings back none.
func TestGatewayServiceEnqueuesEgressPools(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := poolFixture(t, 2, nil)
	egressFixtureClass(f)
	plain := sandboxpodtest.Registry("plain", "")
	plain.Spec.Sandboxes[0].Class = "plain"
	f.registries = append(f.registries, plain)
	f.classes = append(f.classes, newClass("plain"))
	c := f.newController(ctx, 100)
	other := egressGatewayService("10.96.0.50")
	other.Name = "something-else"
	c.gatewayChanged(egressGatewayService("10.96.0.50"))
	if c.queue.Len() != 0 {
		t.Fatalf("%d registries enqueued without a gateway named", c.queue.Len())
	}
	c.SetEgressGateway(egressGatewayRef())
	c.gatewayChanged(other)
	if c.queue.Len() != 0 {
		t.Fatalf("another Service's event enqueued %d registries", c.queue.Len())
	}
	c.gatewayChanged(cache.DeletedFinalStateUnknown{Obj: egressGatewayService("10.96.0.50")})
	if c.queue.Len() != 1 {
		t.Fatalf("%d registries enqueued, want the one with an egress class", c.queue.Len())
	}
	if key, _ := c.queue.Get(); key != registryKey() {
		t.Errorf("enqueued %v, want %v", key, registryKey())
	}
}

// TestNoMemberWithoutDefaultDeny: a pool's members are created only once the namespace's standing
// default-deny NetworkPolicy is in place (asked before the first member); when it cannot be, no
// member is created and the registry's status says why; without an ensurer, none either.
func TestNoMemberWithoutDefaultDeny(t *testing.T) {
	for name, tc := range map[string]struct {
		err         error
		none        bool
		wantMembers int
	}{
		"in place":            {wantMembers: 2},
		"cannot be put there": {err: errors.New("forbidden")},
		"no ensurer":          {none: true},
	} {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := poolFixture(t, 5, nil)
			f.defaultDenyErr = tc.err
			c := f.newController(ctx, 2)
			if tc.none {
				c.defaultDeny = nil
			}
			if _, err := c.sync(ctx, registryKey()); err != nil {
				t.Fatal(err)
			}
			if got := len(f.createdOf("pods")); got != tc.wantMembers {
				t.Errorf("created %d members, want %d (actions %v)", got, tc.wantMembers, f.actions())
			}
			if !tc.none && !slices.Equal(f.defaultDeny.Asked(), []string{testNamespace}) {
				t.Errorf("default-deny asked for %v, want [%s]", f.defaultDeny.Asked(), testNamespace)
			}
			if tc.wantMembers == 0 {
				written := f.written("toolregistries", "status").(*airlockv1alpha1.ToolRegistry)
				if len(written.Status.Warm) != 1 || !strings.Contains(written.Status.Warm[0].Message, "default-deny") {
					t.Errorf("status %+v, want the pool's message to say the default-deny policy is missing", written.Status.Warm)
				}
			}
		})
	}
}

// TestMembersWaitForTheirRecordOnStatus (issue 39 item 4, docs/security.md "Warm members are tied
// to their pool's record"): the admission policy holds a member to the record its registry's
// status names for its pool key, so a pool whose record is not on the status yet gets it there
// first, written at once (not held back by the status interval), and neither its policy nor a
// member; once the cache shows the status, the policy and the members come. A status that names another key (the class changed) is a
// pool whose record is not written.
func TestMembersWaitForTheirRecordOnStatus(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := poolFixture(t, 2, nil)
	f.unrecorded = true
	c := f.newController(ctx, 100)
	key := cache.MetaObjectToName(f.registries[0])
	c.lastStatus.Store(key, t0) // a status was written a moment ago: the record's write is not held back
	if _, err := c.sync(ctx, registryKey()); err != nil {
		t.Fatal(err)
	}
	if pods, nps := f.createdOf("pods"), f.createdOf("networkpolicies"); len(pods) != 0 || len(nps) != 0 {
		t.Fatalf("created %d members and %d policies before the pool's record was on the registry's status", len(pods), len(nps))
	}
	written := f.written("toolregistries", "status").(*airlockv1alpha1.ToolRegistry)
	wantKey := currentPolicy().Labels[airlockv1alpha1.LabelWarmPool]
	if len(written.Status.Warm) != 1 || written.Status.Warm[0].Key != wantKey || !apiequality.Semantic.DeepEqual(written.Status.Warm[0].Record, testRecord()) {
		t.Fatalf("status.warm %+v, want the pool's key %s and record", written.Status.Warm, wantKey)
	}
	if written.Status.Warm[0].Message != messageRecordNotOnStatus {
		t.Errorf("the pool's message %q, want it to say that its members wait for its record", written.Status.Warm[0].Message)
	}
	if !registryChanged(f.registries[0], written) {
		t.Error("the status write of the pool's record does not bring the registry back")
	}

	// The cache shows the status: the members come (and, past the status interval, the message
	// goes).
	f.clock.Step(poolStatusInterval)
	if err := f.registryCache.Update(written); err != nil {
		t.Fatal(err)
	}
	if _, err := c.sync(ctx, registryKey()); err != nil {
		t.Fatal(err)
	}
	pods := f.createdOf("pods")
	if nps := f.createdOf("networkpolicies"); len(pods) != 2 || len(nps) != 1 {
		t.Fatalf("created %d members and %d policies once the record was on the status, want 2 and the pool's", len(pods), len(nps))
	}
	if msg := f.written("toolregistries", "status").(*airlockv1alpha1.ToolRegistry).Status.Warm[0].Message; msg != "" {
		t.Errorf("the pool's message %q once its members come, want none", msg)
	}
	for _, p := range pods {
		if p.GetLabels()[airlockv1alpha1.LabelWarmPool] != wantKey {
			t.Errorf("member %s of pool %s, want %s", p.GetName(), p.GetLabels()[airlockv1alpha1.LabelWarmPool], wantKey)
		}
	}

	// The status names another key: no member until the status is written again.
	stale := written.DeepCopy()
	stale.Status.Warm[0].Key = "0123456789abcdef0123"
	if err := f.registryCache.Update(stale); err != nil {
		t.Fatal(err)
	}
	p := c.poolOf(stale, &stale.Spec.Sandboxes[0])
	if p.recordOnStatus {
		t.Error("a status of another key counts as the pool's record")
	}
}
