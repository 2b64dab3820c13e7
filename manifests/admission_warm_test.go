package manifests

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
)

// poolRegistry is the warm registry as the API server shows it once the warm pool controller
// wrote its pools' keys and records on its status (status.warm[].key, .record).
func poolRegistry(records ...*airlockv1alpha1.FrozenSandbox) *airlockv1alpha1.ToolRegistry {
	reg := warmRegistry()
	for _, r := range records {
		reg.Status.Warm = append(reg.Status.Warm, airlockv1alpha1.WarmPoolStatus{Name: "codegen", Key: sandboxpod.PoolKey(reg.UID, "codegen", r), Record: r})
	}
	return reg
}

// TestWarmRecordPolicy (issue 39 item 4): a warm member is held to the record its registry's
// status names for its pool key, as a claim's pod to its claim's record: what the warm pool
// controller builds is admitted, a member of another image, argument, runtime class, PVC or
// ConfigMap is refused, and so is a member whose pool the status does not name.
func TestWarmRecordPolicy(t *testing.T) {
	policies, _ := paramPolicies(t)
	p := compile(t, policies["airlock-operator-warm-record"])
	record, egress := testRecord(), egressRecord(t)
	record.AllowedServices = []airlockv1alpha1.ServiceReference{{Namespace: "mirrors", Name: "goproxy"}}
	reg := poolRegistry(record)
	member, egressMember := memberPod(record), memberPod(egress)
	resume := sandboxpod.ResumeMemberPod(reg, "codegen", sandboxpod.PoolKey(reg.UID, "codegen", record), sandboxpod.MemberName(reg.Name, "codegen"), record,
		keptRecord(boundClaim(record), true))
	other := poolRegistry(record)
	other.Name = "other-tools"
	stale := poolRegistry(egress) // the status names another pool of the entry (the class changed)
	bare := warmRegistry()        // a status without records (written by an earlier operator)
	withPod := func(mutate func(p *corev1.Pod, s *corev1.PodSpec, c *corev1.Container)) *corev1.Pod {
		m := member.DeepCopy()
		mutate(m, &m.Spec, &m.Spec.Containers[0])
		return m
	}
	tests := map[string]struct {
		pod   *corev1.Pod
		np    *networkingv1.NetworkPolicy // a pool's policy instead of a member
		param *airlockv1alpha1.ToolRegistry
		want  string // "" admitted
	}{
		"a warm member":                       {pod: member, param: reg},
		"a warm member with egress":           {pod: egressMember, param: poolRegistry(egress)},
		"a resume member":                     {pod: resume, param: reg},
		"a warm member, another registry":     {pod: member, param: other},
		"a warm member, its pool not written": {pod: member, param: stale, want: "a warm member or a pool's policy is written only while its registry's status holds"},
		"a warm member, no record written":    {pod: member, param: bare, want: "a warm member or a pool's policy is written only while its registry's status holds"},
		"another image": {pod: withPod(func(_ *corev1.Pod, _ *corev1.PodSpec, c *corev1.Container) { c.Image = "example.com/other:v1" }), param: reg,
			want: "a warm member runs its pool's record"},
		"another argument": {pod: withPod(func(_ *corev1.Pod, _ *corev1.PodSpec, c *corev1.Container) { c.Args = append(c.Args, "--listen=:9090") }), param: reg,
			want: "a warm member runs its pool's record"},
		"a token file of its own": {pod: withPod(func(_ *corev1.Pod, _ *corev1.PodSpec, c *corev1.Container) {
			c.Args = append(c.Args, "--auth-token-file=/tmp/known")
		}), param: reg, want: "a warm member runs its pool's record"},
		"another PVC": {pod: withPod(func(_ *corev1.Pod, s *corev1.PodSpec, _ *corev1.Container) {
			for i := range s.Volumes {
				if s.Volumes[i].PersistentVolumeClaim != nil {
					s.Volumes[i].PersistentVolumeClaim.ClaimName = "database-data"
				}
			}
		}), param: reg, want: "a warm member has its pool record's runtime class"},
		"a RuntimeClass the record lacks": {pod: withPod(func(_ *corev1.Pod, s *corev1.PodSpec, _ *corev1.Container) {
			s.RuntimeClassName = ptr.To("runc-unconfined")
		}),
			param: reg, want: "a warm member has its pool record's runtime class"},
		"a ConfigMap mounted": {pod: withPod(func(_ *corev1.Pod, s *corev1.PodSpec, _ *corev1.Container) {
			s.Volumes = append(s.Volumes, corev1.Volume{Name: "x", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}}}})
		}), param: reg, want: "a warm member has its pool record's runtime class"},
		"a ConfigMap the record's env lacks": {pod: withPod(func(_ *corev1.Pod, _ *corev1.PodSpec, c *corev1.Container) {
			c.Env = append(c.Env, corev1.EnvVar{Name: "X", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}, Key: "x"}}})
		}), param: reg, want: "a warm member reads in its environment no ConfigMap"},
		"a pool's policy":             {np: poolPolicy(reg, record), param: reg},
		"a pool's policy with egress": {np: poolPolicy(reg, egress), param: poolRegistry(egress)},
		"a pool's policy, its pool not written": {np: poolPolicy(reg, record), param: stale,
			want: "a warm member or a pool's policy is written only while its registry's status holds"},
		"a pool's policy to another namespace": {np: with(poolPolicy(reg, record), func(n *networkingv1.NetworkPolicy) {
			n.Spec.Egress = append(n.Spec.Egress, networkingv1.NetworkPolicyEgressRule{To: []networkingv1.NetworkPolicyPeer{{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: "payments"}},
				PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}}}})
		}), param: reg, want: "a pool's NetworkPolicy lets out only to the namespaces"},
		"a pool's policy to other pods of the gateway's namespace": {np: with(poolPolicy(reg, egress), func(n *networkingv1.NetworkPolicy) {
			n.Spec.Egress[0].To[0].PodSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/component": "operator"}}
		}), param: poolRegistry(egress), want: "a pool's NetworkPolicy lets out in its egress gateway's namespace only"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var r request
			if tc.np != nil {
				r = create(tc.np)
			} else {
				r = create(tc.pod)
			}
			applies, refused := p.admitWith(t, r, asParam(t, tc.param))
			if !applies {
				t.Fatal("the policy does not apply")
			}
			switch {
			case tc.want == "" && len(refused) > 0:
				t.Errorf("refused:\n%s", strings.Join(refused, "\n"))
			case tc.want != "" && !slices.ContainsFunc(refused, func(r string) bool { return strings.HasPrefix(r, tc.want) }):
				t.Errorf("refused by:\n%s\nwant %q among them", strings.Join(refused, "\n"), tc.want)
			}
		})
	}
	// The member's own flag is the one the policy names.
	if args := sandboxpod.MemberArgs(record); !strings.Contains(strings.Join(args, " "), "--warm-key-file=/var/run/airlock/warm/key") {
		t.Errorf("MemberArgs %q: the policy admits --warm-key-file=/var/run/airlock/warm/key only", args)
	}
}

// poolPolicy is the pool's NetworkPolicy of record, as the warm pool controller builds it.
func poolPolicy(reg *airlockv1alpha1.ToolRegistry, record *airlockv1alpha1.FrozenSandbox) *networkingv1.NetworkPolicy {
	var services []*corev1.Service
	if len(record.AllowedServices) > 0 {
		services = allowedServices()
	}
	return sandboxpod.PoolNetworkPolicy(reg, "codegen", sandboxpod.PoolKey(reg.UID, "codegen", record), record, services)
}
