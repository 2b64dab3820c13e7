package manifests

// The writes issue 39 found the policy admitted although airlock never makes them, and the
// legitimate writes its new rules must still admit (Events, the deny-all written back). The
// writes that need another object (the claim's record, the namespace's runtimes) are the param
// policies' (rbac/admission_policy_params.yaml), which only the API server evaluates:
// e2e/admission_never_test.go.

import (
	"slices"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
	"github.com/airlock-dev/airlock/pkg/sandboxpod/sandboxpodtest"
)

// Messages of the rules issue 39 added (a prefix suffices).
const (
	msgAnnotation  = "a pod the airlock operator writes carries no AppArmor or seccomp annotation"
	msgShape       = "a pod the airlock operator writes runs one container with its image's entrypoint"
	msgConfigMaps  = "a pod the airlock operator writes mounts no ConfigMap but a claim's egress CA bundle"
	msgSpecChange  = "the airlock operator never changes the spec of a pod"
	msgNPEgress    = "a NetworkPolicy the airlock operator writes lets out to pods named by labels only"
	msgDefaultDeny = "the airlock operator never deletes a namespace's standing deny-all"
	msgEvent       = "an Event the airlock operator writes is about a SandboxClaim"
	msgNoClaim     = "a pod or NetworkPolicy of no claim the airlock operator writes is a warm member or a pool's policy"
)

// alsoBroken are the rules a hostile case breaks besides the one it is about: an envFrom and an
// init container are not airlock's shape whatever they read or run; a peer that is not a
// labelled namespace's pods breaks the ingress-and-egress rule and the egress one.
var alsoBroken = map[string][]string{
	"envFrom a Secret":            {msgShape},
	"a privileged init container": {msgShape},
	"egress to an ipBlock":        {msgNPEgress},
	"egress to everything":        {msgNPEgress},
	"egress to a whole namespace": {msgNPEgress},
	// A pod whose warm-member label is another's is no member: it mounts no member's workspace.
	"an unclaimed pod that is no member with the bundle": {msgMemberDir, msgNoClaim},
}

// in moves a copy of obj to namespace ns.
func in[T interface {
	runtime.Object
	metav1.Object
}](ns string, obj T) T {
	obj = obj.DeepCopyObject().(T)
	obj.SetNamespace(ns)
	return obj
}

// with returns a copy of pod changed by mutate.
func with[T runtime.Object](obj T, mutate func(T)) T {
	obj = obj.DeepCopyObject().(T)
	mutate(obj)
	return obj
}

// event is an Event the operator's recorder writes about the object ref, in namespace ns.
func event(ns string, ref corev1.ObjectReference) *corev1.Event {
	return &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: ref.Name + ".1", Namespace: ns}, InvolvedObject: ref,
		Reason: "Bound", Message: "bound", Type: corev1.EventTypeNormal}
}

func claimRef(claim *airlockv1alpha1.SandboxClaim, ns string) corev1.ObjectReference {
	return corev1.ObjectReference{APIVersion: airlockv1alpha1.SchemeGroupVersion.String(), Kind: "SandboxClaim", Namespace: ns, Name: claim.Name}
}

func TestPolicyAdmitsAirlocksEventsAndDenyAll(t *testing.T) {
	policy, _ := loadPolicy(t)
	p := compile(t, policy)
	claim := testClaim(testRecord())
	ns := sandboxpodtest.Namespace
	deny := sandboxpod.DefaultDenyPolicy(ns)
	edited := with(deny, func(n *networkingv1.NetworkPolicy) { n.Spec.PodSelector = metav1.LabelSelector{} })
	tests := map[string]request{
		"an Event about a claim":                create(event(ns, claimRef(claim, ns))),
		"an Event about a claim, repeated":      update(event(ns, claimRef(claim, ns)), event(ns, claimRef(claim, ns))),
		"an Event about a kept workspace's Job": create(event(ns, corev1.ObjectReference{APIVersion: "batch/v1", Kind: "Job", Namespace: ns, Name: "airlock-kept-0123"})),
		"an Event about its Lease": create(event("airlock-system", corev1.ObjectReference{APIVersion: "coordination.k8s.io/v1", Kind: "Lease",
			Namespace: "airlock-system", Name: "airlock-operator"})),
		"the deny-all":              create(deny),
		"the deny-all written back": update(edited, deny),
	}
	p.expectAdmitted(t, tests)
}

func TestPolicyRefusesWhatIssue39Found(t *testing.T) {
	policy, _ := loadPolicy(t)
	p := compile(t, policy)
	claim := testClaim(testRecord())
	ns := sandboxpodtest.Namespace
	pod := claimPod(claim)
	live := admitted(pod)
	job := syncJob(claim)
	deny := sandboxpod.DefaultDenyPolicy(ns)
	tests := map[string]struct {
		r    request
		want string
	}{
		"fsGroup and runAsUser 999": {create(hostilePod(func(_ *corev1.Pod, s *corev1.PodSpec, _ *corev1.Container) {
			s.SecurityContext.FSGroup, s.SecurityContext.RunAsUser = ptr.To[int64](999), ptr.To[int64](999)
		})), msgPodSC},
		"AppArmor Unconfined": {create(hostilePod(func(_ *corev1.Pod, s *corev1.PodSpec, _ *corev1.Container) {
			s.SecurityContext.AppArmorProfile = &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined}
		})), msgPodSC},
		"a container's AppArmor Unconfined": {create(hostilePod(func(_ *corev1.Pod, _ *corev1.PodSpec, c *corev1.Container) {
			c.SecurityContext.AppArmorProfile = &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined}
		})), msgContainerSC},
		"an AppArmor annotation": {create(hostilePod(func(p *corev1.Pod, _ *corev1.PodSpec, _ *corev1.Container) {
			p.Annotations["container.apparmor.security.beta.kubernetes.io/sandbox"] = "unconfined"
		})), msgAnnotation},
		"SELinux spc_t": {create(hostilePod(func(_ *corev1.Pod, s *corev1.PodSpec, _ *corev1.Container) {
			s.SecurityContext.SELinuxOptions = &corev1.SELinuxOptions{Type: "spc_t"}
		})), msgPodSC},
		"supplemental groups": {create(hostilePod(func(_ *corev1.Pod, s *corev1.PodSpec, _ *corev1.Container) {
			s.SecurityContext.SupplementalGroups = []int64{0}
		})), msgPodSC},
		"another command": {create(hostilePod(func(_ *corev1.Pod, _ *corev1.PodSpec, c *corev1.Container) {
			c.Command = []string{"/bin/sh", "-c", "cat /workspace/* > /dev/termination-log"}
		})), msgShape},
		"a second container": {create(hostilePod(func(_ *corev1.Pod, s *corev1.PodSpec, c *corev1.Container) {
			s.Containers = append(s.Containers, *c.DeepCopy())
			s.Containers[1].Name = "second"
		})), msgShape},
		"a device claim": {create(hostilePod(func(_ *corev1.Pod, s *corev1.PodSpec, _ *corev1.Container) {
			s.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To("gpu")}}
		})), msgShape},
		"a ConfigMap volume of its own": {create(hostilePod(func(_ *corev1.Pod, s *corev1.PodSpec, _ *corev1.Container) {
			s.Volumes = append(s.Volumes, corev1.Volume{Name: "settings", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}}}})
		})), msgConfigMaps},
		// A warm member with egress mounts the bundle airlock-egress-ca and no other ConfigMap,
		// and only as a member (its own name in airlock.dev/warm-member).
		"a warm member mounting another ConfigMap as its bundle": {create(with(memberPod(egressRecord(t)), func(p *corev1.Pod) {
			for i := range p.Spec.Volumes {
				if cm := p.Spec.Volumes[i].ConfigMap; cm != nil {
					cm.Name = "settings"
				}
			}
		})), msgConfigMaps},
		"a warm member mounting a ConfigMap under another volume name": {create(with(memberPod(egressRecord(t)), func(p *corev1.Pod) {
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "settings", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: "airlock-egress-ca"}}}})
		})), msgConfigMaps},
		"an unclaimed pod that is no member with the bundle": {create(with(memberPod(egressRecord(t)), func(p *corev1.Pod) {
			p.Labels[airlockv1alpha1.LabelWarmMember] = "someone-else"
		})), msgConfigMaps},
		// An object of no claim is a member or a pool's policy (so that the warm-record policy,
		// which matches them by their pool label, weighs it against its pool's record).
		"an unclaimed pod that names no pool": {create(with(memberPod(testRecord()), func(p *corev1.Pod) {
			delete(p.Labels, airlockv1alpha1.LabelWarmPool)
		})), msgNoClaim},
		// ... and the controller child of the registry it names: one of a registry that does not
		// exist is garbage collected.
		"a warm member of no registry's": {create(with(memberPod(testRecord()), func(p *corev1.Pod) { p.OwnerReferences = nil })), msgNoClaim},
		"a warm member of another registry's": {create(with(memberPod(testRecord()), func(p *corev1.Pod) {
			p.OwnerReferences[0].Name = "other-registry"
		})), msgNoClaim},
		"a pool's NetworkPolicy not its registry's controlled child": {create(with(sandboxpod.PoolNetworkPolicy(warmRegistry(), "codegen", "0123456789abcdef0123", testRecord(), nil),
			func(n *networkingv1.NetworkPolicy) { n.OwnerReferences[0].Controller = nil })), msgNoClaim},
		"an unclaimed NetworkPolicy that names no pool": {create(with(sandboxpod.PoolNetworkPolicy(warmRegistry(), "codegen", "0123456789abcdef0123", testRecord(), nil),
			func(n *networkingv1.NetworkPolicy) { delete(n.Labels, airlockv1alpha1.LabelWarmPool) })), msgNoClaim},
		"a second PVC": {create(hostilePod(func(_ *corev1.Pod, s *corev1.PodSpec, _ *corev1.Container) {
			s.Volumes = append(s.Volumes, corev1.Volume{Name: "db", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "database-data"}}})
		})), msgConfigMaps},
		"a Job pulling with a Secret": {create(with(job, func(j *batchv1.Job) {
			j.Spec.Template.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "registry"}}
		})), msgShape},
		"an image patch of a running pod": {update(live, with(live, func(p *corev1.Pod) { p.Spec.Containers[0].Image = "example.com/other:v1" })), msgSpecChange},
		"a Job's template changed": {update(job, with(job, func(j *batchv1.Job) { j.Spec.Template.Spec.Containers[0].Args = []string{"sync", "--from=/"} })),
			msgSpecChange},
		"the deny-all deleted": {remove(deny), msgDefaultDeny},
		"the deny-all opened": {update(deny, with(deny, func(n *networkingv1.NetworkPolicy) {
			n.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}}}}}}
		})), msgDefaultDeny},
		"egress to a namespace's DNS server": {create(with(sandboxpod.ClaimNetworkPolicy(claim, testRecord(), nil), func(n *networkingv1.NetworkPolicy) {
			n.Spec.Egress = []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: "kube-system"}},
				PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"component": "kube-apiserver"}}}}}}
		})), msgNPEgress},
		"an Event in kube-system":                  {create(event("kube-system", claimRef(claim, "kube-system"))), msgSystemNS},
		"an Event about a pod":                     {create(event(ns, corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: ns, Name: "web"})), msgEvent},
		"an Event about another namespace's claim": {create(event(ns, claimRef(claim, "elsewhere"))), msgEvent},
		"an Event deleted":                         {remove(event(ns, claimRef(claim, ns))), msgEvent},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			applies, refused := p.admit(t, tc.r)
			if !applies {
				t.Fatal("the policy does not apply")
			}
			if len(refused) == 0 || !strings.HasPrefix(refused[0], tc.want) {
				t.Fatalf("refused by:\n%s\nwant %q", strings.Join(refused, "\n"), tc.want)
			}
			if extra := slices.DeleteFunc(slices.Clone(refused[1:]), func(m string) bool {
				return strings.HasPrefix(m, msgSpecChange) || slices.ContainsFunc(alsoBroken[name], func(also string) bool { return strings.HasPrefix(m, also) })
			}); len(extra) > 0 {
				t.Errorf("refused by more than the rule broken:\n%s", strings.Join(refused, "\n"))
			}
		})
	}
}
