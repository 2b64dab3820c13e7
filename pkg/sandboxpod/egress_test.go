package sandboxpod

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/sandboxpod/sandboxpodtest"
)

func gatewayService() *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "airlock-egress", Namespace: "airlock-system"},
		Spec: corev1.ServiceSpec{
			ClusterIP: "10.96.0.50",
			Selector:  map[string]string{"app.kubernetes.io/name": "airlock-egress"},
			Ports:     []corev1.ServicePort{{Name: "metrics", Port: 8080}, {Name: "proxy", Port: 3128, TargetPort: intstr.FromString("proxy"), Protocol: corev1.ProtocolTCP}},
		},
	}
}

func gatewayRef() *GatewayRef {
	return &GatewayRef{Namespace: "airlock-system", Name: "airlock-egress", Port: 3128, CABundleConfigMap: "airlock-egress-ca"}
}

func egressClass() *airlockv1alpha1.SandboxClass {
	class := sandboxpodtest.Class("codegen")
	class.Spec.Egress = &airlockv1alpha1.SandboxEgress{
		Hosts: []airlockv1alpha1.EgressHost{{Host: "proxy.golang.org", Ports: []airlockv1alpha1.EgressPort{443}}},
		Credentials: []airlockv1alpha1.EgressCredential{{
			Host: "github.com", Port: 443, Header: "Authorization", SecretName: "github-token",
		}},
	}
	return class
}

// egressRecord is the record of egressClass with the gateway frozen, as the claim controller
// writes it.
func egressRecord(t *testing.T) *airlockv1alpha1.FrozenSandbox {
	t.Helper()
	record := Freeze(egressClass(), &sandboxpodtest.Registry("tools", "").Spec.Sandboxes[0])
	gw, why := FreezeGateway(gatewayRef(), gatewayService())
	if why != "" {
		t.Fatal(why)
	}
	record.Egress.Gateway = *gw
	return record
}

func TestParseGatewayRef(t *testing.T) {
	got, err := ParseGatewayRef("airlock-system/airlock-egress:3128")
	if err != nil || *got != (GatewayRef{Namespace: "airlock-system", Name: "airlock-egress", Port: 3128}) {
		t.Errorf("got %+v, %v", got, err)
	}
	for _, bad := range []string{"", "airlock-egress:3128", "airlock-system/airlock-egress", "/x:1", "ns/:1", "ns/x:0", "ns/x:65536", "ns/x:http", "ns/x:-1"} {
		if _, err := ParseGatewayRef(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestFreezeGateway: the gateway is frozen from its Service (cluster IP, selector, the target
// port of the named port); a missing gateway, or one a sandbox could not reach, refuses the class.
func TestFreezeGateway(t *testing.T) {
	got, why := FreezeGateway(gatewayRef(), gatewayService())
	want := &airlockv1alpha1.EgressGateway{
		Namespace: "airlock-system", Service: "airlock-egress", Address: "10.96.0.50", Port: 3128,
		TargetPort: intstr.FromString("proxy"), PodSelector: map[string]string{"app.kubernetes.io/name": "airlock-egress"},
		CABundleConfigMap: "airlock-egress-ca",
	}
	if why != "" {
		t.Fatal(why)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("gateway (-want +got):\n%s", diff)
	}
	unset := gatewayService()
	unset.Spec.Ports[1].TargetPort = intstr.IntOrString{}
	unset.Spec.ClusterIP = "fd00::50"
	if got, _ := FreezeGateway(gatewayRef(), unset); got == nil || got.TargetPort != intstr.FromInt32(3128) || got.Address != "fd00::50" {
		t.Errorf("an unset targetPort and an IPv6 cluster IP: %+v", got)
	}

	refused := map[string]struct {
		ref    *GatewayRef
		svc    func(*corev1.Service) *corev1.Service
		reason string
	}{
		"no flag":         {nil, func(s *corev1.Service) *corev1.Service { return s }, "--egress-gateway-service is not set"},
		"no Service":      {gatewayRef(), func(*corev1.Service) *corev1.Service { return nil }, "does not exist"},
		"headless":        {gatewayRef(), func(s *corev1.Service) *corev1.Service { s.Spec.ClusterIP = corev1.ClusterIPNone; return s }, "no cluster IP"},
		"no selector":     {gatewayRef(), func(s *corev1.Service) *corev1.Service { s.Spec.Selector = nil; return s }, "no selector"},
		"no such port":    {&GatewayRef{Namespace: "airlock-system", Name: "airlock-egress", Port: 3129}, func(s *corev1.Service) *corev1.Service { return s }, "no TCP port 3129"},
		"a UDP port only": {gatewayRef(), func(s *corev1.Service) *corev1.Service { s.Spec.Ports[1].Protocol = corev1.ProtocolUDP; return s }, "no TCP port 3128"},
	}
	for name, tc := range refused {
		t.Run(name, func(t *testing.T) {
			got, why := FreezeGateway(tc.ref, tc.svc(gatewayService()))
			if got != nil || !strings.Contains(why, tc.reason) {
				t.Errorf("got %+v, %q; want refused with %q", got, why, tc.reason)
			}
		})
	}
}

func envOf(pod *corev1.Pod) map[string][]corev1.EnvVar {
	out := map[string][]corev1.EnvVar{}
	for _, e := range pod.Spec.Containers[0].Env {
		out[e.Name] = append(out[e.Name], e)
	}
	return out
}

// TestEgressPod: a claim with egress gets the proxy variables (credential from its token Secret,
// never in the spec), NO_PROXY, the CA variables and the mounted bundle; its class's env stays.
func TestEgressPod(t *testing.T) {
	claim := bound("c1")
	record := egressRecord(t)
	pod := ClaimPod(claim, record)
	UseTokenSecret(pod, "c1-token-0123456789ab")
	env := envOf(pod)

	if diff := cmp.Diff([]corev1.EnvVar{{Name: ProxyCredentialEnv, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: "c1-token-0123456789ab"}, Key: ProxyKey,
	}}}}, env[ProxyCredentialEnv]); diff != "" {
		t.Errorf("credential variable (-want +got):\n%s", diff)
	}
	wantURL := "http://team-a.c1:$(AIRLOCK_EGRESS_CREDENTIAL)@10.96.0.50:3128"
	for _, name := range []string{"HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy"} {
		if got := env[name]; len(got) != 1 || got[0].Value != wantURL {
			t.Errorf("%s = %+v, want %s", name, got, wantURL)
		}
	}
	for _, name := range []string{"NO_PROXY", "no_proxy"} {
		if got := env[name]; len(got) != 1 || got[0].Value != NoProxy {
			t.Errorf("%s = %+v", name, got)
		}
	}
	for _, name := range []string{"SSL_CERT_FILE", "GIT_SSL_CAINFO", "NODE_EXTRA_CA_CERTS", "REQUESTS_CA_BUNDLE", "PIP_CERT", "CURL_CA_BUNDLE"} {
		if got := env[name]; len(got) != 1 || got[0].Value != EgressCAFile {
			t.Errorf("%s = %+v, want %s", name, got, EgressCAFile)
		}
	}
	// The credential variable comes before the URLs that refer to it (the kubelet expands only
	// variables defined earlier), and the class's own env is kept, before the operator's.
	names := make([]string, 0)
	for _, e := range pod.Spec.Containers[0].Env {
		names = append(names, e.Name)
	}
	if names[0] != "HOME" || names[1] != ProxyCredentialEnv {
		t.Errorf("env order %v: want the class's HOME, then %s, then the rest", names, ProxyCredentialEnv)
	}
	wantVolume := corev1.Volume{Name: EgressCAVolumeName, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: "airlock-egress-ca"},
		Items:                []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}},
		DefaultMode:          ptr.To[int32](0o644),
	}}}
	if diff := cmp.Diff(wantVolume, pod.Spec.Volumes[len(pod.Spec.Volumes)-1]); diff != "" {
		t.Errorf("CA volume (-want +got):\n%s", diff)
	}
	mounts := pod.Spec.Containers[0].VolumeMounts
	if got := mounts[len(mounts)-1]; got != (corev1.VolumeMount{Name: EgressCAVolumeName, MountPath: EgressCAMountPath, ReadOnly: true}) {
		t.Errorf("CA mount %+v", got)
	}

	// The credential is in the Secret, not in the pod.
	secret := TokenSecretWithProxy(claim, "c1-token-0123456789ab", "bearer-token-value", "proxy-credential-value-0123456789")
	if string(secret.Data[ProxyKey]) != "proxy-credential-value-0123456789" || string(secret.Data[TokenKey]) != "bearer-token-value" {
		t.Errorf("secret data %v", secret.Data)
	}
	spec, _ := json.Marshal(pod)
	if strings.Contains(string(spec), "proxy-credential-value") {
		t.Error("the pod spec holds the proxy credential")
	}
}

// TestEgressPodWithoutBundle: with no CA bundle named, no CA variable and no bundle volume: the
// sandbox keeps its image's roots (tunnels the gateway does not terminate need nothing else).
func TestEgressPodWithoutBundle(t *testing.T) {
	record := egressRecord(t)
	record.Egress.Gateway.CABundleConfigMap = ""
	pod := ClaimPod(bound("c1"), record)
	env := envOf(pod)
	if len(env["HTTPS_PROXY"]) != 1 {
		t.Error("no proxy variable")
	}
	for _, name := range caVars {
		if len(env[name]) != 0 {
			t.Errorf("%s set without a bundle", name)
		}
	}
	for _, v := range pod.Spec.Volumes {
		if v.Name == EgressCAVolumeName {
			t.Error("a bundle volume without a bundle")
		}
	}
}

// TestNoEgressNoProxy: a class without egress, or a record with egress whose gateway was never
// frozen, gets nothing of the gateway: no variable, no volume, no policy rule (fail closed).
func TestNoEgressNoProxy(t *testing.T) {
	plain := Freeze(sandboxpodtest.Class("codegen"), &sandboxpodtest.Registry("tools", "").Spec.Sandboxes[0])
	noGateway := Freeze(egressClass(), &sandboxpodtest.Registry("tools", "").Spec.Sandboxes[0])
	for name, record := range map[string]*airlockv1alpha1.FrozenSandbox{"no egress": plain, "no gateway": noGateway} {
		t.Run(name, func(t *testing.T) {
			pod := ClaimPod(bound("c1"), record)
			for _, n := range EgressEnvNames() {
				if len(envOf(pod)[n]) != 0 {
					t.Errorf("%s set", n)
				}
			}
			if len(pod.Spec.Volumes) != 3 {
				t.Errorf("volumes %+v", pod.Spec.Volumes)
			}
			if np := ClaimNetworkPolicy(bound("c1"), record, nil); len(np.Spec.Egress) != 0 {
				t.Errorf("egress rules %+v", np.Spec.Egress)
			}
		})
	}
}

// TestEgressNetworkPolicy: the gateway's pods on their port and nothing else new, no DNS; a warm
// pool's policy is built the same way.
func TestEgressNetworkPolicy(t *testing.T) {
	record := egressRecord(t)
	gatewayRule := networkingv1.NetworkPolicyEgressRule{
		To: []networkingv1.NetworkPolicyPeer{{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: "airlock-system"}},
			PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/name": "airlock-egress"}},
		}},
		Ports: []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromString("proxy"))}},
	}
	np := ClaimNetworkPolicy(bound("c1"), record, nil)
	if diff := cmp.Diff([]networkingv1.NetworkPolicyEgressRule{gatewayRule}, np.Spec.Egress); diff != "" {
		t.Errorf("claim egress (-want +got):\n%s", diff)
	}
	reg := sandboxpodtest.WarmRegistry(1)
	pool := PoolNetworkPolicy(reg, "codegen", PoolKey(reg.UID, "codegen", record), record, nil)
	if diff := cmp.Diff([]networkingv1.NetworkPolicyEgressRule{gatewayRule}, pool.Spec.Egress); diff != "" {
		t.Errorf("pool egress (-want +got):\n%s", diff)
	}
}

// TestEgressNeverGetsDNS (issue 39): a record with egress gets no DNS, whatever its
// allowedServices say: kube-dns forwards any name to the resolvers outside, a way out past the
// gateway. Such a record can only be one an earlier operator froze (a class with both is refused,
// TestEgressClassWithServicesRefused): it keeps its Services' pods and the gateway, nothing more.
// With its gateway never frozen it gets no gateway either. A warm pool's policy is the same.
func TestEgressNeverGetsDNS(t *testing.T) {
	proxy := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "proxy", Namespace: "infra"},
		Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": "proxy"}, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}
	serviceRule := networkingv1.NetworkPolicyEgressRule{
		To: []networkingv1.NetworkPolicyPeer{{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: "infra"}},
			PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": "proxy"}},
		}},
		Ports: []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromInt32(8080))}},
	}
	gatewayRule := networkingv1.NetworkPolicyEgressRule{
		To: []networkingv1.NetworkPolicyPeer{{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: "airlock-system"}},
			PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/name": "airlock-egress"}},
		}},
		Ports: []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromString("proxy"))}},
	}
	withGateway := egressRecord(t)
	noGateway := Freeze(egressClass(), &sandboxpodtest.Registry("tools", "").Spec.Sandboxes[0])
	reg := sandboxpodtest.WarmRegistry(1)
	tests := []struct {
		name    string
		record  *airlockv1alpha1.FrozenSandbox
		allowed []*corev1.Service
		want    []networkingv1.NetworkPolicyEgressRule
	}{
		{name: "gateway, an allowed Service that does not exist", record: withGateway, want: []networkingv1.NetworkPolicyEgressRule{gatewayRule}},
		{name: "gateway, an allowed Service that exists", record: withGateway, allowed: []*corev1.Service{proxy}, want: []networkingv1.NetworkPolicyEgressRule{serviceRule, gatewayRule}},
		{name: "no gateway frozen, an allowed Service that does not exist", record: noGateway},
		{name: "no gateway frozen, an allowed Service that exists", record: noGateway, allowed: []*corev1.Service{proxy}, want: []networkingv1.NetworkPolicyEgressRule{serviceRule}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			record := tc.record.DeepCopy()
			record.AllowedServices = []airlockv1alpha1.ServiceReference{{Namespace: "infra", Name: "proxy"}}
			policies := map[string]*networkingv1.NetworkPolicy{
				"claim": ClaimNetworkPolicy(bound("c1"), record, tc.allowed),
				"pool":  PoolNetworkPolicy(reg, "codegen", PoolKey(reg.UID, "codegen", record), record, tc.allowed),
			}
			for kind, np := range policies {
				if diff := cmp.Diff(tc.want, np.Spec.Egress); diff != "" {
					t.Errorf("%s egress (-want +got):\n%s", kind, diff)
				}
				for _, rule := range np.Spec.Egress {
					for _, p := range rule.Ports {
						if p.Port != nil && p.Port.IntValue() == 53 {
							t.Errorf("%s: a rule to port 53: %+v", kind, rule)
						}
					}
				}
			}
		})
	}
	// The control: without egress, an allowed Service still gets DNS (SPEC section 5).
	plain := Freeze(sandboxpodtest.Class("codegen"), &sandboxpodtest.Registry("tools", "").Spec.Sandboxes[0])
	plain.AllowedServices = []airlockv1alpha1.ServiceReference{{Namespace: "infra", Name: "proxy"}}
	np := ClaimNetworkPolicy(bound("c1"), plain, nil)
	if len(np.Spec.Egress) != 1 || np.Spec.Egress[0].To[0].PodSelector.MatchLabels["k8s-app"] != "kube-dns" {
		t.Errorf("without egress: egress %+v, want DNS", np.Spec.Egress)
	}
}

// TestEgressClassWithServicesRefused (issue 39): a class with egress and allowedServices is
// refused at admission with a reason that says why and what to do; either alone is valid.
func TestEgressClassWithServicesRefused(t *testing.T) {
	class := egressClass()
	class.Spec.AllowedServices = []airlockv1alpha1.ServiceReference{{Namespace: "infra", Name: "proxy"}}
	why := ClassConflict(class)
	for _, want := range []string{`SandboxClass "` + class.Name + `"`, "egress and allowedServices", "no DNS", "a class without egress"} {
		if !strings.Contains(why, want) {
			t.Errorf("ClassConflict = %q, want it to say %q", why, want)
		}
	}
	withoutEgress := class.DeepCopy()
	withoutEgress.Spec.Egress = nil
	if why := ClassConflict(withoutEgress); why != "" {
		t.Errorf("allowedServices without egress refused: %s", why)
	}
}

// TestHostileEgressClass: a class with egress may not set, repeat or shadow anything the operator
// sets: its env of the operator's names and its volumes of the bundle's name or path are refused
// at admission, and a record that has them anyway builds a pod with the operator's values only.
func TestHostileEgressClass(t *testing.T) {
	hostileEnv := []string{"HTTPS_PROXY", "http_proxy", "NO_PROXY", "no_proxy", "SSL_CERT_FILE", "NODE_EXTRA_CA_CERTS", ProxyCredentialEnv}
	for _, name := range hostileEnv {
		t.Run("env "+name, func(t *testing.T) {
			class := egressClass()
			class.Spec.Env = append(class.Spec.Env, corev1.EnvVar{Name: name, Value: "http://evil.example:1"})
			if why := ClassConflict(class); !strings.Contains(why, name) {
				t.Errorf("ClassConflict = %q, want a refusal naming %s", why, name)
			}
			// Without egress the variable is the class's business: nothing to override.
			class.Spec.Egress = nil
			if why := ClassConflict(class); why != "" {
				t.Errorf("without egress: %q", why)
			}
		})
	}
	for name, v := range map[string]airlockv1alpha1.SandboxVolume{
		"the bundle's name":        {Name: EgressCAVolumeName, MountPath: "/elsewhere", Scratch: &airlockv1alpha1.ScratchVolumeSource{}},
		"the bundle's path":        {Name: "ca", MountPath: EgressCAMountPath, Scratch: &airlockv1alpha1.ScratchVolumeSource{}},
		"a parent of the bundle":   {Name: "ca", MountPath: "/var/run/airlock", Scratch: &airlockv1alpha1.ScratchVolumeSource{}},
		"a path inside the bundle": {Name: "ca", MountPath: EgressCAMountPath + "/ca.crt", Scratch: &airlockv1alpha1.ScratchVolumeSource{}},
	} {
		t.Run("volume at "+name, func(t *testing.T) {
			class := egressClass()
			class.Spec.Volumes = append(class.Spec.Volumes, v)
			if why := ClassConflict(class); why == "" {
				t.Error("accepted")
			}
		})
	}
	if why := ClassConflict(egressClass()); why != "" {
		t.Errorf("a plain egress class refused: %s", why)
	}

	// A record past the check: the operator's variables once each, with the operator's values.
	record := egressRecord(t)
	for _, name := range hostileEnv {
		record.Env = append(record.Env, corev1.EnvVar{Name: name, Value: "http://evil.example:1"})
	}
	env := envOf(ClaimPod(bound("c1"), record))
	for _, name := range hostileEnv {
		if len(env[name]) != 1 || env[name][0].Value == "http://evil.example:1" {
			t.Errorf("%s = %+v: the class's value survived or repeated", name, env[name])
		}
	}
}

// TestInvalidEgressClass: a class whose egress lists nothing is refused here; whether the gateway
// compiles a host list is policy.CheckClass's (pkg/egress/policy, TestCheckClass).
func TestInvalidEgressClass(t *testing.T) {
	class := egressClass()
	class.Spec.Egress = &airlockv1alpha1.SandboxEgress{}
	if why := ClassConflict(class); !strings.Contains(why, "egress") {
		t.Errorf("ClassConflict = %q", why)
	}
}

// TestEgressMember: a warm member of a record with egress gets a claim's environment and bundle,
// with its own proxy credential: the username <namespace>.~<member> (no claim's name has "~"),
// the password from its own key Secret (never in the spec); the Secret holds it under "proxy"
// beside the member key, and one without egress holds the key alone. The member's pod is the
// cold claim's in everything else of egress: the same variables, values but the username, and
// the same CA volume and mount.
func TestEgressMember(t *testing.T) {
	record := egressRecord(t)
	reg := sandboxpodtest.WarmRegistry(1)
	const member = "tools-codegen-abcdefabcdef"
	pod := MemberPod(reg, "codegen", PoolKey(reg.UID, "codegen", record), member, record)
	env := envOf(pod)
	if diff := cmp.Diff([]corev1.EnvVar{{Name: ProxyCredentialEnv, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: MemberSecretName(member)}, Key: ProxyKey,
	}}}}, env[ProxyCredentialEnv]); diff != "" {
		t.Errorf("credential variable (-want +got):\n%s", diff)
	}
	if got := MemberProxyUsername(reg.Namespace, member); got != "team-a.~"+member {
		t.Errorf("username %q", got)
	}
	wantURL := "http://team-a.~" + member + ":$(AIRLOCK_EGRESS_CREDENTIAL)@10.96.0.50:3128"
	for _, name := range proxyVars {
		if got := env[name]; len(got) != 1 || got[0].Value != wantURL {
			t.Errorf("%s = %+v, want %s", name, got, wantURL)
		}
	}

	// Everything else of egress is the cold claim's.
	claimPod := ClaimPod(bound("c1"), record)
	claimEnv := envOf(claimPod)
	for _, name := range EgressEnvNames() {
		if name == ProxyCredentialEnv || slices.Contains(proxyVars, name) {
			continue
		}
		if diff := cmp.Diff(claimEnv[name], env[name]); diff != "" || len(env[name]) != 1 {
			t.Errorf("%s differs from a claim's (-claim +member):\n%s", name, diff)
		}
	}
	last := func(p *corev1.Pod) (corev1.Volume, corev1.VolumeMount) {
		m := p.Spec.Containers[0].VolumeMounts
		return p.Spec.Volumes[len(p.Spec.Volumes)-1], m[len(m)-1]
	}
	mv, mm := last(pod)
	cv, cm := last(claimPod)
	if mv.Name != EgressCAVolumeName || !cmp.Equal(mv, cv) || mm != cm {
		t.Errorf("member's CA volume %+v %+v, want the claim's %+v %+v", mv, mm, cv, cm)
	}

	withProxy := MemberSecret(pod, "member-key", "member-proxy-credential-0123456789")
	if string(withProxy.Data[ProxyKey]) != "member-proxy-credential-0123456789" || string(withProxy.Data[memberKeyField]) != "member-key" || len(withProxy.Data) != 2 {
		t.Errorf("secret data %v", withProxy.Data)
	}
	if plain := MemberSecret(pod, "member-key", ""); len(plain.Data) != 1 {
		t.Errorf("a member without egress: secret data %v", plain.Data)
	}
	spec, _ := json.Marshal(pod)
	if strings.Contains(string(spec), "member-proxy-credential") {
		t.Error("the pod spec holds the proxy credential")
	}

	// A member without egress gets nothing of it.
	plain := testRecord()
	plainPod := MemberPod(reg, "codegen", PoolKey(reg.UID, "codegen", plain), member, plain)
	for _, n := range EgressEnvNames() {
		if len(envOf(plainPod)[n]) != 0 {
			t.Errorf("%s set in a member without egress", n)
		}
	}
}

// TestPoolKeyCoversEgress: the pool key is over the whole record, its egress included: another
// host, credential, gateway Service, address, port, selector or CA bundle gives another key, so
// that a claim adopts only a member built with its own gateway and policy (and an operator whose
// gateway moved builds new members).
func TestPoolKeyCoversEgress(t *testing.T) {
	reg := sandboxpodtest.WarmRegistry(1)
	base := PoolKey(reg.UID, "codegen", egressRecord(t))
	if again := PoolKey(reg.UID, "codegen", egressRecord(t)); again != base {
		t.Fatal("the pool key is not deterministic")
	}
	if plain := PoolKey(reg.UID, "codegen", testRecord()); plain == base {
		t.Error("a record without egress has the key of one with egress")
	}
	for name, change := range map[string]func(e *airlockv1alpha1.FrozenEgress){
		"another host":          func(e *airlockv1alpha1.FrozenEgress) { e.Hosts[0].Host = "sum.golang.org" },
		"another port":          func(e *airlockv1alpha1.FrozenEgress) { e.Hosts[0].Ports = []airlockv1alpha1.EgressPort{8443} },
		"one more host":         func(e *airlockv1alpha1.FrozenEgress) { e.Hosts = append(e.Hosts, e.Hosts[0]) },
		"no credential":         func(e *airlockv1alpha1.FrozenEgress) { e.Credentials = nil },
		"another credential":    func(e *airlockv1alpha1.FrozenEgress) { e.Credentials[0].SecretName = "other-token" },
		"another gateway":       func(e *airlockv1alpha1.FrozenEgress) { e.Gateway.Service = "other-egress" },
		"another gateway ns":    func(e *airlockv1alpha1.FrozenEgress) { e.Gateway.Namespace = "other-system" },
		"another address":       func(e *airlockv1alpha1.FrozenEgress) { e.Gateway.Address = "10.96.0.51" },
		"another gateway port":  func(e *airlockv1alpha1.FrozenEgress) { e.Gateway.Port = 3129 },
		"another target port":   func(e *airlockv1alpha1.FrozenEgress) { e.Gateway.TargetPort = intstr.FromInt32(8080) },
		"another selector":      func(e *airlockv1alpha1.FrozenEgress) { e.Gateway.PodSelector = map[string]string{"app": "x"} },
		"another CA bundle":     func(e *airlockv1alpha1.FrozenEgress) { e.Gateway.CABundleConfigMap = "trust-bundle" },
		"no CA bundle":          func(e *airlockv1alpha1.FrozenEgress) { e.Gateway.CABundleConfigMap = "" },
		"the gateway not found": func(e *airlockv1alpha1.FrozenEgress) { e.Gateway = airlockv1alpha1.EgressGateway{} },
	} {
		record := egressRecord(t)
		change(record.Egress)
		if got := PoolKey(reg.UID, "codegen", record); got == base {
			t.Errorf("%s: the same pool key", name)
		}
	}
}
