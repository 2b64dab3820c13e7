package claim

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	core "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/airlock-dev/airlock/pkg/admission"
	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
	"github.com/airlock-dev/airlock/pkg/sandboxpod/sandboxpodtest"
	"github.com/airlock-dev/airlock/pkg/workspace"
)

// warmRegistry is the fixture's registry with warm members wanted for its sandbox.
func warmRegistry(warm int32) *airlockv1alpha1.ToolRegistry { return sandboxpodtest.WarmRegistry(warm) }

// warmMember returns an idle member of reg's sandbox built from record, Ready at ip when ip is set.
func warmMember(reg *airlockv1alpha1.ToolRegistry, name string, record *airlockv1alpha1.FrozenSandbox, created time.Time, ip string) *corev1.Pod {
	entry := reg.Spec.Sandboxes[0].Name
	return sandboxpodtest.AsCached(sandboxpod.MemberPod(reg, entry, sandboxpod.PoolKey(reg.UID, entry, record), name, record), created, ip)
}

// warmFixture is a fixture whose registry wants warm members, with the given members cached.
func warmFixture(t *testing.T, maxConcurrent int32, members ...*corev1.Pod) *fixture {
	f := newFixture(t)
	f.runtimes = append(f.runtimes, newRuntime("agent", maxConcurrent, 3))
	f.registries = append(f.registries, warmRegistry(3))
	f.classes = append(f.classes, newClass("codegen"))
	f.pods = append(f.pods, members...)
	return f
}

// TestAdmittedClaimAdoptsWarmMember: an admitted claim adopts the oldest Ready member of its
// pool (one conditional patch of the pod), and its admission is written as Bound at the member's
// IP with its record and status.warm, in one status write; it builds nothing: no Secret, no
// policy, no pod.
func TestAdmittedClaimAdoptsWarmMember(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	reg := warmRegistry(3)
	older := warmMember(reg, "tools-codegen-aaaaaaaaaaaa", testRecord(), t0.Add(-time.Minute), "10.244.0.40")
	newer := warmMember(reg, "tools-codegen-bbbbbbbbbbbb", testRecord(), t0.Add(-time.Second), "10.244.0.41")
	f := warmFixture(t, 5, newer, older)
	f.claims = append(f.claims, newClaim("c1", "s1", "", t0))
	c := f.newController(ctx)
	if err := admitAndBuild(ctx, c); err != nil {
		t.Fatal(err)
	}
	checkActions(t, f, []string{
		"patch pods " + older.Name,
		"update sandboxclaims/status c1",
	})
	var patch core.PatchAction
	for _, a := range f.log {
		if p, ok := a.(core.PatchAction); ok {
			patch = p
		}
	}
	for _, want := range []string{`"resourceVersion":"7"`, `"uid":"uid-` + older.Name + `"`, `"kind":"SandboxClaim"`, `"name":"c1"`, `"airlock.dev/claim":"c1"`, `"airlock.dev/claim-uid":"uid-c1"`} {
		if !strings.Contains(string(patch.GetPatch()), want) {
			t.Errorf("adoption patch %s lacks %s", patch.GetPatch(), want)
		}
	}
	got := f.writtenClaim()
	if got.Status.Phase != airlockv1alpha1.ClaimBound || got.Status.Warm == nil || got.Status.Warm.Member != older.Name {
		t.Fatalf("claim phase %s warm %+v, want Bound to %s", got.Status.Phase, got.Status.Warm, older.Name)
	}
	if got.Status.Warm.WorkspaceDir != testNamespace+"/sandboxes/warm/"+older.Name {
		t.Errorf("workspaceDir %q", got.Status.Warm.WorkspaceDir)
	}
	if len(got.Status.Addresses) != 1 || got.Status.Addresses[0].URL != "http://10.244.0.40:8080" {
		t.Errorf("addresses %+v, want the member's IP", got.Status.Addresses)
	}
	if cond := findCondition(got, ConditionReady); cond == nil || cond.Status != metav1.ConditionTrue || cond.Reason != ReasonWarmMember {
		t.Errorf("Ready condition %+v", cond)
	}
	if cond := findCondition(got, ConditionAdmitted); cond == nil || cond.Status != metav1.ConditionTrue {
		t.Errorf("Admitted condition %+v", cond)
	}
	if got.Status.Frozen == nil || !slices.Equal(got.Status.Frozen.AllowedTools, testRecord().AllowedTools) {
		t.Errorf("record %+v, want the claim's frozen with its admission", got.Status.Frozen)
	}
	if !c.childExpect.satisfied(got.UID) {
		t.Error("the adopted claim's child expectations are held: its syncs would write nothing")
	}
}

// TestWarmPolicyClaimAdopts: a sandbox whose pool follows demand (warmPolicy, no static warm)
// is one with warm members: its claims adopt them as any pool's.
func TestWarmPolicyClaimAdopts(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	reg := warmRegistry(0)
	reg.Spec.Sandboxes[0].WarmPolicy = &airlockv1alpha1.WarmPolicy{Min: 1, Max: 5}
	member := warmMember(reg, "tools-codegen-aaaaaaaaaaaa", testRecord(), t0.Add(-time.Minute), "10.244.0.40")
	f := warmFixture(t, 5, member)
	f.registries = []*airlockv1alpha1.ToolRegistry{reg}
	f.claims = append(f.claims, newClaim("c1", "s1", "", t0))
	c := f.newController(ctx)
	if err := admitAndBuild(ctx, c); err != nil {
		t.Fatal(err)
	}
	checkActions(t, f, []string{
		"patch pods " + member.Name,
		"update sandboxclaims/status c1",
	})
	if got := f.writtenClaim(); got.Status.Warm == nil || got.Status.Warm.Member != member.Name {
		t.Errorf("claim warm %+v, want Bound to %s", got.Status.Warm, member.Name)
	}
}

// TestNoMemberOfAnotherPool: a claim never adopts a member built from another record (an older
// class generation), of another entry, of another registry (by UID), not Ready, being deleted,
// or already adopted; it is built cold.
func TestNoMemberOfAnotherPool(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	reg := warmRegistry(3)
	oldClass := newClass("codegen")
	oldClass.Generation = 7 // the record has generation 0: another key
	old := warmMember(reg, "tools-codegen-oldoldoldold", sandboxpod.Freeze(oldClass, &reg.Spec.Sandboxes[0]), t0, "10.244.0.40")
	otherEntryReg := warmRegistry(3)
	otherEntryReg.Spec.Sandboxes[0].Name = "review"
	otherEntry := warmMember(otherEntryReg, "tools-review-cccccccccccc", testRecord(), t0, "10.244.0.41")
	otherReg := warmRegistry(3)
	otherReg.UID = "uid-reg-recreated"
	recreated := warmMember(otherReg, "tools-codegen-dddddddddddd", testRecord(), t0, "10.244.0.42")
	notReady := warmMember(reg, "tools-codegen-eeeeeeeeeeee", testRecord(), t0, "")
	deleting := warmMember(reg, "tools-codegen-ffffffffffff", testRecord(), t0, "10.244.0.43")
	deleting.DeletionTimestamp = ptr.To(metav1.NewTime(t0))
	taken := warmMember(reg, "tools-codegen-gggggggggggg", testRecord(), t0, "10.244.0.44")
	f := warmFixture(t, 5, old, otherEntry, recreated, notReady, deleting, taken)
	f.claims = append(f.claims, newClaim("c1", "s1", "", t0))
	c := f.newController(ctx)
	c.adopting.Store(taken.UID, types.UID("uid-other-claim"))
	if err := admitAndBuild(ctx, c); err != nil {
		t.Fatal(err)
	}
	for _, a := range f.actions() {
		if strings.HasPrefix(a, "patch pods") {
			t.Errorf("adopted a member it must not: %s", a)
		}
	}
	if got := f.writtenClaim(); got.Status.Warm != nil {
		t.Errorf("claim records warm member %+v", got.Status.Warm)
	}
	created := f.createdChildren(t)
	if len(created) != 2 {
		t.Fatalf("children created %d, want the cold policy and pod", len(created))
	}
}

// TestIneligibleClaimsBuiltCold: a claim of a session's workspace, of a mount role, or a
// replacement that keeps its predecessor's workspace never adopts a member (a member's
// workspace is a fresh one).
func TestIneligibleClaimsBuiltCold(t *testing.T) {
	for name, mutate := range map[string]func(*airlockv1alpha1.SandboxClaim){
		"session workspace": func(c *airlockv1alpha1.SandboxClaim) {
			c.Spec.WorkspaceDir = testNamespace + "/sandboxes/sessions/0123456789"
		},
		"mount role": func(c *airlockv1alpha1.SandboxClaim) {
			c.Spec.MountRole = "repo"
			c.Spec.WorkspaceDir = "projects/web"
		},
	} {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			reg := warmRegistry(3)
			f := warmFixture(t, 5, warmMember(reg, "tools-codegen-aaaaaaaaaaaa", testRecord(), t0, "10.244.0.40"))
			claim := newClaim("c1", "s1", "", t0)
			mutate(claim)
			f.claims = append(f.claims, claim)
			c := f.newController(ctx)
			if err := admitAndBuild(ctx, c); err != nil {
				t.Fatal(err)
			}
			for _, a := range f.actions() {
				if strings.HasPrefix(a, "patch pods") {
					t.Errorf("adopted a member: %s", a)
				}
			}
		})
	}
}

// TestDedicatedKernelClaimsBuiltCold: without reading evidence (no --operator-pod-labels, or
// --read-isolation-evidence=false), a claim whose class needs a kernel of its own never adopts a
// member, even one of its own pool: no member's evidence was read (docs/isolation.md; with
// reading, TestWarmAdoptionJudgesTheMembersEvidence).
func TestDedicatedKernelClaimsBuiltCold(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	class := newClass("codegen")
	class.Spec.Isolation = &airlockv1alpha1.SandboxIsolation{Kernel: airlockv1alpha1.KernelDedicated}
	record := sandboxpod.Freeze(class, &newRegistry("tools", "").Spec.Sandboxes[0])
	reg := warmRegistry(3)
	f := warmFixture(t, 5, warmMember(reg, "tools-codegen-aaaaaaaaaaaa", record, t0, "10.244.0.40"))
	f.classes = []*airlockv1alpha1.SandboxClass{class}
	f.claims = append(f.claims, newClaim("c1", "s1", "", t0))
	c := f.newController(ctx)
	if err := admitAndBuild(ctx, c); err != nil {
		t.Fatal(err)
	}
	built := false
	for _, a := range f.actions() {
		if strings.HasPrefix(a, "patch pods") {
			t.Errorf("adopted a member: %s", a)
		}
		built = built || a == "create pods c1"
	}
	if !built {
		t.Errorf("actions %v, want the claim's own pod", f.actions())
	}
}

// TestAdoptionConflictTriesTheNext: a member that changed since the cache showed it (the API
// server refuses the patch: another leader adopted it) is skipped for the next one.
func TestAdoptionConflictTriesTheNext(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	reg := warmRegistry(3)
	first := warmMember(reg, "tools-codegen-aaaaaaaaaaaa", testRecord(), t0.Add(-time.Minute), "10.244.0.40")
	second := warmMember(reg, "tools-codegen-bbbbbbbbbbbb", testRecord(), t0, "10.244.0.41")
	f := warmFixture(t, 5, first, second)
	f.claims = append(f.claims, newClaim("c1", "s1", "", t0))
	c := f.newController(ctx)
	f.kubeClient.PrependReactor("patch", "pods", func(a core.Action) (bool, runtime.Object, error) {
		if a.(core.PatchAction).GetName() == first.Name {
			return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "pods"}, first.Name, fmt.Errorf("the object has been modified"))
		}
		return false, nil, nil
	})
	if err := admitAndBuild(ctx, c); err != nil {
		t.Fatal(err)
	}
	if got := f.writtenClaim(); got.Status.Warm == nil || got.Status.Warm.Member != second.Name {
		t.Fatalf("warm %+v, want %s", got.Status.Warm, second.Name)
	}
}

// TestConcurrentAdoptionsNeverShareAMember: a burst admitted in one pass, built concurrently,
// adopts distinct members while they last, oldest claim first; the rest are built cold.
func TestConcurrentAdoptionsNeverShareAMember(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	reg := warmRegistry(3)
	var members []*corev1.Pod
	for i := range 3 {
		members = append(members, warmMember(reg, fmt.Sprintf("tools-codegen-%012d", i), testRecord(), t0.Add(time.Duration(i)*time.Second), fmt.Sprintf("10.244.0.%d", 40+i)))
	}
	f := warmFixture(t, 8, members...)
	for i := range 8 {
		f.claims = append(f.claims, newClaim(fmt.Sprintf("c%d", i), fmt.Sprintf("s%d", i), "", t0.Add(time.Duration(i)*time.Millisecond)))
	}
	c := f.newController(ctx)
	// The fake API server applies a patch whatever its resourceVersion: make it refuse a second
	// adoption of one pod, as the real one does.
	var mu sync.Mutex
	adopted := map[string]int{}
	f.kubeClient.PrependReactor("patch", "pods", func(a core.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		name := a.(core.PatchAction).GetName()
		adopted[name]++
		if adopted[name] > 1 {
			return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "pods"}, name, fmt.Errorf("the object has been modified"))
		}
		return false, nil, nil
	})
	if err := admitAndBuild(ctx, c); err != nil {
		t.Fatal(err)
	}
	for name, n := range adopted {
		if n > 1 {
			t.Errorf("member %s: %d adoption attempts, want 1 (the in-process guard let two workers try)", name, n)
		}
	}
	owners := map[string]string{}
	warm, cold := 0, 0
	for i := range 8 {
		got := f.writtenClaimNamed(fmt.Sprintf("c%d", i))
		switch {
		case got == nil:
			t.Fatalf("c%d: no status written", i)
		case got.Status.Warm != nil:
			warm++
			if prev, ok := owners[got.Status.Warm.Member]; ok {
				t.Errorf("member %s given to %s and %s", got.Status.Warm.Member, prev, got.Name)
			}
			owners[got.Status.Warm.Member] = got.Name
		default:
			cold++
		}
	}
	if warm != 3 || cold != 5 {
		t.Errorf("warm %d cold %d, want 3 and 5", warm, cold)
	}
	// In order: the oldest claims get the members, the oldest claim the oldest member.
	for i := range 3 {
		if owner := owners[members[i].Name]; owner != fmt.Sprintf("c%d", i) {
			t.Errorf("member %s went to %q, want c%d (a burst's oldest claims are bound warm)", members[i].Name, owner, i)
		}
	}
}

// TestBindingClaimFinishesItsAdoption: a Binding claim that controls a Ready member (its
// adoption was written, its Bound was not) is written Bound to it, and builds nothing; one whose
// member is not Ready any more deletes it and is built cold.
func TestBindingClaimFinishesItsAdoption(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	reg := warmRegistry(3)
	claim := binding("c1", t0)
	adoptedBy := func(pod *corev1.Pod) *corev1.Pod {
		pod.OwnerReferences = []metav1.OwnerReference{sandboxpod.OwnerReference(claim)}
		for k, v := range sandboxpod.PodLabels(claim) {
			pod.Labels[k] = v
		}
		return pod
	}
	ready := adoptedBy(warmMember(reg, "tools-codegen-aaaaaaaaaaaa", testRecord(), t0, "10.244.0.40"))
	f := warmFixture(t, 5, ready)
	f.claims = append(f.claims, claim)
	c := f.newController(ctx)
	if _, err := c.sync(ctx, keyOf(claim)); err != nil {
		t.Fatal(err)
	}
	checkActions(t, f, []string{"update sandboxclaims/status c1"})
	if got := f.writtenClaim(); got.Status.Phase != airlockv1alpha1.ClaimBound || got.Status.Warm == nil || got.Status.Warm.Member != ready.Name {
		t.Errorf("phase %s warm %+v", got.Status.Phase, got.Status.Warm)
	}

	// While the admission pass that adopted it is at work, the claim's sync writes nothing: not
	// a second Bound (a conflict), never a cold Bound without status.warm.
	f = warmFixture(t, 5, ready)
	f.claims = append(f.claims, binding("c1", t0))
	c = f.newController(ctx)
	c.childExpect.raise(claim.UID, 1)
	if _, err := c.sync(ctx, keyOf(claim)); err != nil {
		t.Fatal(err)
	}
	checkActions(t, f, nil)

	notReady := adoptedBy(warmMember(reg, "tools-codegen-bbbbbbbbbbbb", testRecord(), t0, ""))
	f = warmFixture(t, 5, notReady)
	f.claims = append(f.claims, binding("c1", t0))
	c = f.newController(ctx)
	if _, err := c.sync(ctx, keyOf(claim)); err != nil {
		t.Fatal(err)
	}
	acts := f.actions()
	if len(acts) == 0 || acts[0] != "delete pods "+notReady.Name {
		t.Fatalf("actions %v, want the member deleted first", acts)
	}
	if !slices.Contains(acts, "create pods c1") {
		t.Errorf("actions %v, want the claim built cold", acts)
	}
}

// warmBound returns a claim Bound to member (adopted at boundAt).
func warmBound(name string, member *corev1.Pod, boundAt time.Time) *airlockv1alpha1.SandboxClaim {
	c := bound(name, boundAt)
	c.Status.Warm = &airlockv1alpha1.WarmAdoption{Member: member.Name, WorkspaceDir: workspace.MemberDir(testNamespace, member.Name), AdoptedAt: metav1.NewTime(boundAt)}
	member.OwnerReferences = []metav1.OwnerReference{sandboxpod.OwnerReference(c)}
	for k, v := range sandboxpod.PodLabels(c) {
		member.Labels[k] = v
	}
	return c
}

// TestBoundWarmClaimMember: a Bound warm claim keeps its own policy, then takes its pod out of the
// pool's, and never builds a pod of its own; it is reaped at once when its member's pod ended or
// is gone, and left alone while the cache shows the member as it was before the adoption.
func TestBoundWarmClaimMember(t *testing.T) {
	reg := warmRegistry(3)
	now := t0.Add(time.Minute)
	// syncBound syncs the Bound claim once, with the policies and pods given in the cache.
	syncBound := func(t *testing.T, claim *airlockv1alpha1.SandboxClaim, netpols []*networkingv1.NetworkPolicy, pods ...*corev1.Pod) *fixture {
		t.Helper()
		_, ctx := ktesting.NewTestContext(t)
		f := warmFixture(t, 5, pods...)
		f.claims = append(f.claims, claim)
		f.netpols = append(f.netpols, netpols...)
		f.clock.SetTime(now)
		c := f.newController(ctx)
		if _, err := c.sync(ctx, keyOf(claim)); err != nil {
			t.Fatal(err)
		}
		return f
	}
	t.Run("running", func(t *testing.T) {
		member := warmMember(reg, "tools-codegen-aaaaaaaaaaaa", testRecord(), t0, testPodIP)
		claim := warmBound("c1", member, t0)
		f := syncBound(t, claim, nil, member)
		checkActions(t, f, []string{"create networkpolicies c1"})
	})
	t.Run("its own policy in the cache", func(t *testing.T) {
		// The pod leaves the pool's policy: its pool label goes, in one patch.
		member := warmMember(reg, "tools-codegen-aaaaaaaaaaaa", testRecord(), t0, testPodIP)
		claim := warmBound("c1", member, t0)
		f := syncBound(t, claim, []*networkingv1.NetworkPolicy{sandboxpod.ClaimNetworkPolicy(claim, claim.Status.Frozen, nil)}, member)
		checkActions(t, f, []string{"patch pods " + member.Name})
		for _, a := range f.log {
			if p, ok := a.(core.PatchAction); ok && !strings.Contains(string(p.GetPatch()), `"airlock.dev/warm-pool":null`) {
				t.Errorf("patch %s does not drop the pool label", p.GetPatch())
			}
		}

		// A policy the cache shows otherwise than the record says is repaired first.
		stale := sandboxpod.ClaimNetworkPolicy(claim, claim.Status.Frozen, nil)
		stale.Spec.Ingress = nil
		f = syncBound(t, claim, []*networkingv1.NetworkPolicy{stale}, member)
		checkActions(t, f, []string{"update networkpolicies c1"})
	})
	t.Run("ended", func(t *testing.T) {
		member := warmMember(reg, "tools-codegen-aaaaaaaaaaaa", testRecord(), t0, testPodIP)
		claim := warmBound("c1", member, t0)
		member.Status.Phase = corev1.PodFailed
		member.Status.Reason = "Evicted"
		f := syncBound(t, claim, nil, member)
		if got := f.writtenClaim(); got == nil || got.Status.Phase != airlockv1alpha1.ClaimReaping || got.Status.Reason != ReasonPodFailed {
			t.Fatalf("claim %+v, want Reaping (PodFailed)", got)
		}
		for _, a := range f.actions() {
			if strings.HasPrefix(a, "create pods") {
				t.Errorf("built a pod for a warm claim: %s", a)
			}
		}
	})
	t.Run("gone", func(t *testing.T) {
		member := warmMember(reg, "tools-codegen-aaaaaaaaaaaa", testRecord(), t0, testPodIP)
		claim := warmBound("c1", member, t0)
		f := syncBound(t, claim, nil)
		if got := f.writtenClaim(); got == nil || got.Status.Phase != airlockv1alpha1.ClaimReaping {
			t.Fatalf("claim %+v, want Reaping", got)
		}
	})
	t.Run("cache before the adoption", func(t *testing.T) {
		member := warmMember(reg, "tools-codegen-aaaaaaaaaaaa", testRecord(), t0, testPodIP)
		claim := warmBound("c1", member.DeepCopy(), t0) // the cached member stays idle
		f := syncBound(t, claim, nil, member)
		checkActions(t, f, nil)
	})
}

// TestWarmClaimSyncsBackTheMemberWorkspace: sync-back and removal of a warm claim copy and
// remove the member's workspace, not the one its spec names.
func TestWarmClaimSyncsBackTheMemberWorkspace(t *testing.T) {
	member := warmMember(warmRegistry(3), "tools-codegen-aaaaaaaaaaaa", testRecord(), t0, testPodIP)
	claim := warmBound("c1", member, t0)
	claim.Spec.TargetPath = "projects/web"
	args := workspace.SyncJobArgs(claim, true, 3)
	want := "--from=" + testNamespace + "/sandboxes/warm/" + member.Name
	if !slices.Contains(args, want) {
		t.Errorf("sync args %v lack %s", args, want)
	}
	if !workspace.Removable(claim) {
		t.Error("a warm member's workspace is not removable")
	}
}

// TestAdoptedClaimNeverBuiltCold: when the write of a claim's warm admission is refused after its
// member was adopted, the claim gets no pod, Secret or policy of its own beside the member and
// stays undecided; the next pass takes the same member up again (no second adoption), or, when it
// does not admit the claim, deletes the member.
func TestAdoptedClaimNeverBuiltCold(t *testing.T) {
	for _, admitAgain := range []bool{true, false} {
		t.Run(map[bool]string{true: "admitted again", false: "queued instead"}[admitAgain], func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			reg := warmRegistry(3)
			member := warmMember(reg, "tools-codegen-aaaaaaaaaaaa", testRecord(), t0, "10.244.0.40")
			f := warmFixture(t, 5, member)
			claim := newClaim("c1", "s1", "", t0)
			f.claims = append(f.claims, claim)
			c := f.newController(ctx)
			refuse := true
			f.airlockClient.PrependReactor("update", "sandboxclaims", func(a core.Action) (bool, runtime.Object, error) {
				if refuse && a.GetSubresource() == "status" {
					return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "sandboxclaims"}, "c1", fmt.Errorf("the object has been modified"))
				}
				return false, nil, nil
			})
			if err := admitAndBuild(ctx, c); err == nil {
				t.Fatal("the pass reported no error for a refused write")
			}
			for _, a := range f.actions() {
				if strings.HasPrefix(a, "create ") {
					t.Errorf("built cold beside the adopted member: %s", a)
				}
			}
			if !slices.Contains(f.actions(), "patch pods "+member.Name) {
				t.Fatalf("actions %v: the member was not adopted", f.actions())
			}

			// The cache shows the adoption; the next pass decides again.
			adopted := member.DeepCopy()
			adopted.OwnerReferences = []metav1.OwnerReference{sandboxpod.OwnerReference(claim)}
			for k, v := range sandboxpod.PodLabels(claim) {
				adopted.Labels[k] = v
			}
			if err := f.podInformer.GetIndexer().Update(adopted); err != nil {
				t.Fatal(err)
			}
			refuse = false
			f.log = nil
			if !admitAgain {
				// (Another claim of the runtime took the only slot meanwhile.)
				c.decide = func(in admission.Input) map[string]admission.Decision {
					return map[string]admission.Decision{"c1": {Action: admission.Queue, Reason: "MaxConcurrent"}}
				}
			}
			if err := admitAndBuild(ctx, c); err != nil {
				t.Fatal(err)
			}
			acts := f.actions()
			if admitAgain {
				if slices.Contains(acts, "patch pods "+member.Name) || len(acts) != 1 || acts[0] != "update sandboxclaims/status c1" {
					t.Errorf("actions %v, want only the Bound write, with the member adopted before", acts)
				}
				if got := f.writtenClaim(); got.Status.Phase != airlockv1alpha1.ClaimBound || got.Status.Warm == nil || got.Status.Warm.Member != member.Name {
					t.Errorf("claim %s warm %+v", got.Status.Phase, got.Status.Warm)
				}
				return
			}
			if !slices.Contains(acts, "delete pods "+member.Name) {
				t.Errorf("actions %v, want the member of a claim not admitted deleted", acts)
			}
		})
	}
}

// TestQueuedClaimLetsItsMemberGo: a Queued claim that a pass decides Queued again is not written;
// a member an earlier pass adopted for it (and could not write) is deleted all the same.
func TestQueuedClaimLetsItsMemberGo(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	reg := warmRegistry(3)
	claim := newClaim("c1", "s1", airlockv1alpha1.ClaimQueued, t0)
	member := warmMember(reg, "tools-codegen-aaaaaaaaaaaa", testRecord(), t0, "10.244.0.40")
	member.OwnerReferences = []metav1.OwnerReference{sandboxpod.OwnerReference(claim)}
	for k, v := range sandboxpod.PodLabels(claim) {
		member.Labels[k] = v
	}
	f := warmFixture(t, 5, member)
	f.claims = append(f.claims, claim)
	c := f.newController(ctx)
	c.decide = func(admission.Input) map[string]admission.Decision {
		return map[string]admission.Decision{"c1": {Action: admission.Queue, Reason: "MaxConcurrent"}}
	}
	if err := admitAndBuild(ctx, c); err != nil {
		t.Fatal(err)
	}
	checkActions(t, f, []string{"delete pods " + member.Name})
}

// TestUnbuildableClaimLetsItsMemberGo: a claim admitted when its class is gone is written Failed;
// a member an earlier pass adopted for it (and could not write) is deleted.
func TestUnbuildableClaimLetsItsMemberGo(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	reg := warmRegistry(3)
	claim := newClaim("c1", "s1", "", t0)
	member := warmMember(reg, "tools-codegen-aaaaaaaaaaaa", testRecord(), t0, "10.244.0.40")
	member.OwnerReferences = []metav1.OwnerReference{sandboxpod.OwnerReference(claim)}
	for k, v := range sandboxpod.PodLabels(claim) {
		member.Labels[k] = v
	}
	f := warmFixture(t, 5, member)
	f.classes = nil
	f.claims = append(f.claims, claim)
	c := f.newController(ctx)
	if err := admitAndBuild(ctx, c); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(f.actions(), "delete pods "+member.Name) {
		t.Errorf("actions %v, want the member deleted", f.actions())
	}
	if got := f.writtenClaim(); got.Status.Phase != airlockv1alpha1.ClaimFailed {
		t.Errorf("claim %s, want Failed", got.Status.Phase)
	}
}
