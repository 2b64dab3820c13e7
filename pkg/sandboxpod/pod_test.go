package sandboxpod

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/sandboxpod/sandboxpodtest"
	"github.com/airlock-dev/airlock/pkg/workspace"
)

func TestBuildPod(t *testing.T) {
	claim := sandboxpodtest.Claim("c1", "s1", airlockv1alpha1.ClaimBinding, sandboxpodtest.T0)
	class := sandboxpodtest.Class("codegen")
	class.Spec.RuntimeClassName = ptr.To("gvisor")
	entry := &sandboxpodtest.Registry("tools", "").Spec.Sandboxes[0]
	p := ClaimPod(claim, Freeze(class, entry))

	// One pod of the claim's name, controlled by it: a name is one object, so two pods never
	// write one workspace.
	if !metav1.IsControlledBy(p, claim) || p.Name != "c1" || p.Namespace != sandboxpodtest.Namespace {
		t.Errorf("pod meta %+v", p.ObjectMeta)
	}
	// By UID too: a terminating pod of an earlier claim of the same name is never taken for it.
	// In its claim's shard, so that the claim-record admission policy weighs it.
	wantLabels := map[string]string{airlockv1alpha1.LabelClaim: "c1", LabelClaimUID: "uid-c1", airlockv1alpha1.LabelRuntime: claim.Spec.RuntimeName, airlockv1alpha1.LabelSandbox: claim.Spec.Sandbox,
		airlockv1alpha1.LabelClaimShard: "1"}
	if diff := cmp.Diff(wantLabels, p.Labels); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
	if !labels.SelectorFromSet(SelectorLabels(claim)).Matches(labels.Set(p.Labels)) || !labels.SelectorFromSet(PolicySelector(claim)).Matches(labels.Set(p.Labels)) {
		t.Error("the pod is not selected by its claim's selector or policy")
	}
	pod := p.Spec
	if pod.RestartPolicy != corev1.RestartPolicyAlways {
		t.Errorf("restartPolicy %s, want Always", pod.RestartPolicy)
	}
	wantPodSC := &corev1.PodSecurityContext{
		RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65532), RunAsGroup: ptr.To[int64](65532), FSGroup: ptr.To[int64](65532),
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	if diff := cmp.Diff(wantPodSC, pod.SecurityContext); diff != "" {
		t.Errorf("pod securityContext (-want +got):\n%s", diff)
	}
	if *pod.AutomountServiceAccountToken || *pod.EnableServiceLinks || *pod.RuntimeClassName != "gvisor" {
		t.Errorf("automount %v serviceLinks %v runtimeClass %v", *pod.AutomountServiceAccountToken, *pod.EnableServiceLinks, *pod.RuntimeClassName)
	}
	if pod.HostNetwork || pod.HostPID || pod.HostIPC || pod.ServiceAccountName != "" {
		t.Errorf("pod has host namespaces or a service account: %+v", pod)
	}
	ctr := pod.Containers[0]
	// The operator's flags right after the subcommand, then the class's (its --workspace left to the
	// operator).
	wantArgs := []string{"sandboxd", "--workspace=/workspace", "--allowed-tools=Read,Bash", "--readonly=false", "--auth-token-file=/var/run/airlock/auth/token", "--listen=:8080"}
	if diff := cmp.Diff(wantArgs, ctr.Args); diff != "" {
		t.Errorf("args (-want +got):\n%s", diff)
	}
	wantSC := &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}
	if diff := cmp.Diff(wantSC, ctr.SecurityContext); diff != "" {
		t.Errorf("container securityContext (-want +got):\n%s", diff)
	}
	if ctr.Name != ContainerName || ctr.Image != class.Spec.Image || ctr.ReadinessProbe.HTTPGet.Path != "/readyz" || ctr.ReadinessProbe.HTTPGet.Port != intstr.FromString("mcp") {
		t.Errorf("container %+v", ctr)
	}
	// A failed first probe (sandboxd not listening yet) is tried again within a second: the
	// claim's Bound waits for it.
	if p := ctr.ReadinessProbe; p.PeriodSeconds != 1 || p.InitialDelaySeconds != 0 || p.SuccessThreshold != 1 {
		t.Errorf("readiness probe period %d s, initial delay %d s, success threshold %d, want 1, 0, 1", p.PeriodSeconds, p.InitialDelaySeconds, p.SuccessThreshold)
	}
	wantMounts := []corev1.VolumeMount{
		{Name: "workspace", MountPath: "/workspace", SubPath: "team-a/sandboxes/" + workspace.ClaimDirName("c1", "uid-rt-agent")},
		{Name: "cache", MountPath: "/sandbox-cache"},
		{Name: TokenVolumeName, MountPath: TokenMountPath, ReadOnly: true},
	}
	if diff := cmp.Diff(wantMounts, ctr.VolumeMounts); diff != "" {
		t.Errorf("mounts (-want +got):\n%s", diff)
	}
	size := resource.MustParse("4Gi")
	wantVolumes := []corev1.Volume{
		{Name: "workspace", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "workspace-content"}}},
		{Name: "cache", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: &size}}},
		{Name: TokenVolumeName, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: "c1", Items: []corev1.KeyToPath{{Key: TokenKey, Path: TokenKey}}, DefaultMode: ptr.To[int32](0o440),
		}}},
	}
	if diff := cmp.Diff(wantVolumes, pod.Volumes); diff != "" {
		t.Errorf("volumes (-want +got):\n%s", diff)
	}

	// An entry that allows every tool: the full list, explicit (sandboxd reads no flag as "every
	// tool", so a missing flag would be a policy nobody wrote).
	entry.AllowedTools = nil
	p = ClaimPod(claim, Freeze(class, entry))
	wantArgs = []string{"sandboxd", "--workspace=/workspace",
		"--allowed-tools=Read,Write,Edit,Glob,Grep,Bash,BashOutput,KillShell,run_tests,run_lint,run_typecheck,MultiEdit,LS,snapshot_create,snapshot_list,snapshot_restore,snapshot_diff,run_failing_tests,last_test_failures,find_definition,find_references,rename_symbol,change_function_signature,edit_function_body,insert_after_method,tests_covering,run_script,search_code", "--readonly=false",
		"--auth-token-file=/var/run/airlock/auth/token", "--listen=:8080"}
	if diff := cmp.Diff(wantArgs, p.Spec.Containers[0].Args); diff != "" {
		t.Errorf("args of an entry that allows every tool (-want +got):\n%s", diff)
	}
}

func TestPullPolicyAndResources(t *testing.T) {
	for image, want := range map[string]corev1.PullPolicy{
		"example.com/a:v1":         corev1.PullIfNotPresent,
		"example.com/a":            corev1.PullAlways,
		"example.com/a:latest":     corev1.PullAlways,
		"localhost:5000/a":         corev1.PullAlways,
		"localhost:5000/a:v2":      corev1.PullIfNotPresent,
		"example.com/a@sha256:abc": corev1.PullIfNotPresent,
	} {
		if got := pullPolicy(image); got != want {
			t.Errorf("pullPolicy(%q) = %s, want %s", image, got, want)
		}
	}
	in := corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}}
	got := defaultedResources(in)
	if q := got.Requests[corev1.ResourceCPU]; q.Cmp(resource.MustParse("2")) != 0 {
		t.Errorf("a limit without a request should request the limit, got %v", got.Requests)
	}
}

func TestAddresses(t *testing.T) {
	class := sandboxpodtest.Class("codegen")
	class.Spec.Ports = append(class.Spec.Ports, airlockv1alpha1.SandboxPort{Name: "preview", Port: 3000})
	record := Freeze(class, &sandboxpodtest.Registry("tools", "").Spec.Sandboxes[0])
	wantAddresses := []airlockv1alpha1.ClaimAddress{
		{Name: "mcp", URL: "http://10.244.0.17:8080"},
		{Name: "preview", URL: "http://10.244.0.17:3000"},
	}
	if diff := cmp.Diff(wantAddresses, Addresses("10.244.0.17", record)); diff != "" {
		t.Errorf("addresses (-want +got):\n%s", diff)
	}
	if got := Addresses("fd00:10:96::17", record)[0].URL; got != "http://[fd00:10:96::17]:8080" {
		t.Errorf("IPv6 address %q, want http://[fd00:10:96::17]:8080", got)
	}
}

func TestBuildNetworkPolicy(t *testing.T) {
	claim := sandboxpodtest.Claim("c1", "s1", airlockv1alpha1.ClaimBinding, sandboxpodtest.T0)
	record := Freeze(sandboxpodtest.Class("codegen"), &sandboxpodtest.Registry("tools", "").Spec.Sandboxes[0])
	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
	port := func(p corev1.Protocol, v intstr.IntOrString) networkingv1.NetworkPolicyPort {
		return networkingv1.NetworkPolicyPort{Protocol: ptr.To(p), Port: ptr.To(v)}
	}
	wantIngress := []networkingv1.NetworkPolicyIngressRule{{
		From:  []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: "team-a"}}}},
		Ports: []networkingv1.NetworkPolicyPort{port(tcp, intstr.FromInt32(8080))},
	}}

	t.Run("no allowed Services reaches nothing, not even DNS", func(t *testing.T) {
		np := ClaimNetworkPolicy(claim, record, nil)
		if diff := cmp.Diff([]networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}, np.Spec.PolicyTypes); diff != "" {
			t.Errorf("policyTypes (-want +got):\n%s", diff)
		}
		if len(np.Spec.Egress) != 0 {
			t.Errorf("egress %+v, want none", np.Spec.Egress)
		}
		if diff := cmp.Diff(wantIngress, np.Spec.Ingress); diff != "" {
			t.Errorf("ingress (-want +got):\n%s", diff)
		}
		// By name only: every pod of the claim's name, an earlier claim's still terminating too.
		if diff := cmp.Diff(map[string]string{airlockv1alpha1.LabelClaim: "c1"}, np.Spec.PodSelector.MatchLabels); diff != "" {
			t.Errorf("podSelector (-want +got):\n%s", diff)
		}
	})

	dns := networkingv1.NetworkPolicyEgressRule{
		To: []networkingv1.NetworkPolicyPeer{{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: "kube-system"}},
			PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": "kube-dns"}},
		}},
		Ports: []networkingv1.NetworkPolicyPort{port(udp, intstr.FromInt32(53)), port(tcp, intstr.FromInt32(53))},
	}
	// SPEC section 5: DNS to kube-dns whenever some Service is allowed, even before it exists
	// (or when it names no pods).
	t.Run("an allowed Service that does not exist yet: DNS only", func(t *testing.T) {
		withServices := record.DeepCopy()
		withServices.AllowedServices = []airlockv1alpha1.ServiceReference{{Namespace: "infra", Name: "proxy"}}
		np := ClaimNetworkPolicy(claim, withServices, nil)
		if diff := cmp.Diff([]networkingv1.NetworkPolicyEgressRule{dns}, np.Spec.Egress); diff != "" {
			t.Errorf("egress (-want +got):\n%s", diff)
		}
	})

	t.Run("allowed Services and DNS", func(t *testing.T) {
		allowed := []*corev1.Service{
			{
				ObjectMeta: metav1.ObjectMeta{Name: "proxy", Namespace: "infra"},
				Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "proxy"}, Ports: []corev1.ServicePort{
					{Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: tcp},
					{Port: 81, TargetPort: intstr.FromString("admin")},
					{Port: 82},
				}},
			},
			{ObjectMeta: metav1.ObjectMeta{Name: "external", Namespace: "infra"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName}},
		}
		withServices := record.DeepCopy()
		withServices.AllowedServices = []airlockv1alpha1.ServiceReference{{Namespace: "infra", Name: "proxy"}, {Namespace: "infra", Name: "external"}}
		np := ClaimNetworkPolicy(claim, withServices, allowed)
		want := []networkingv1.NetworkPolicyEgressRule{
			{
				To: []networkingv1.NetworkPolicyPeer{{
					NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: "infra"}},
					PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": "proxy"}},
				}},
				Ports: []networkingv1.NetworkPolicyPort{
					port(tcp, intstr.FromInt32(8080)),
					port(tcp, intstr.FromString("admin")),
					port(tcp, intstr.FromInt32(82)),
				},
			},
			dns,
		}
		if diff := cmp.Diff(want, np.Spec.Egress); diff != "" {
			t.Errorf("egress (-want +got):\n%s", diff)
		}
	})
}

func TestUseTokenSecret(t *testing.T) {
	claim := sandboxpodtest.Claim("c1", "s1", airlockv1alpha1.ClaimBinding, sandboxpodtest.T0)
	d := ClaimPod(claim, testRecord())
	if got := TokenSecretOf(d); got != "c1" {
		t.Fatalf("token volume names %q before, want c1", got)
	}
	UseTokenSecret(d, "c1-token-0123456789ab")
	if got := TokenSecretOf(d); got != "c1-token-0123456789ab" {
		t.Errorf("token volume names %q, want c1-token-0123456789ab", got)
	}
}

func TestBuildSecret(t *testing.T) {
	a := "a-derived-token"
	claim := sandboxpodtest.Claim("c1", "s1", airlockv1alpha1.ClaimBinding, sandboxpodtest.T0)
	s := TokenSecret(claim, "c1-token-0123456789ab", a)
	if s.Name != "c1-token-0123456789ab" || s.Type != corev1.SecretTypeOpaque || string(s.Data[TokenKey]) != a || !metav1.IsControlledBy(s, claim) {
		t.Errorf("secret %+v", s)
	}
}
