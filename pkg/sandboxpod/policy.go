package sandboxpod

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/utils/ptr"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
)

// ClaimNetworkPolicy returns the claim's NetworkPolicy. Egress reaches nothing but the pods of
// the allowed Services that exist (allowed), on their target ports, DNS when the record allows
// any Service and has no egress, and the egress gateway when it has; ingress is the recorded
// ports from pods in the claim's namespace.
func ClaimNetworkPolicy(claim *airlockv1alpha1.SandboxClaim, record *airlockv1alpha1.FrozenSandbox, allowed []*corev1.Service) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{
		ObjectMeta: ChildMeta(claim, claim.Name),
		Spec:       policySpec(claim.Namespace, PolicySelector(claim), record, allowed),
	}
}

// policySpec is the policy of the sandbox pods selected by selector in namespace, built
// from record: default deny, the recorded ports open to the namespace's pods, egress only to the
// allowed Services' pods (and DNS when the record allows any Service and has no egress) and to
// the egress gateway.
func policySpec(namespace string, selector map[string]string, record *airlockv1alpha1.FrozenSandbox, allowed []*corev1.Service) networkingv1.NetworkPolicySpec {
	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
	var egress []networkingv1.NetworkPolicyEgressRule
	for _, svc := range allowed {
		if len(svc.Spec.Selector) == 0 {
			continue // no selector: no pods to name (ExternalName, manual endpoints)
		}
		rule := networkingv1.NetworkPolicyEgressRule{To: []networkingv1.NetworkPolicyPeer{{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: svc.Namespace}},
			PodSelector:       &metav1.LabelSelector{MatchLabels: svc.Spec.Selector},
		}}}
		for _, p := range svc.Spec.Ports {
			protocol := p.Protocol
			if protocol == "" {
				protocol = corev1.ProtocolTCP
			}
			target := p.TargetPort
			if target.Type == intstr.Int && target.IntVal == 0 || target.Type == intstr.String && target.StrVal == "" {
				target = intstr.FromInt32(p.Port) // an unset targetPort is the port
			}
			rule.Ports = append(rule.Ports, networkingv1.NetworkPolicyPort{Protocol: ptr.To(protocol), Port: ptr.To(target)})
		}
		egress = append(egress, rule)
	}
	if egressReady(record) {
		// The egress gateway's pods on their port (egress.go), and nothing else new: no DNS, the
		// gateway resolves the names.
		gw := record.Egress.Gateway
		egress = append(egress, networkingv1.NetworkPolicyEgressRule{
			To: []networkingv1.NetworkPolicyPeer{{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: gw.Namespace}},
				PodSelector:       &metav1.LabelSelector{MatchLabels: maps(gw.PodSelector)},
			}},
			Ports: []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(tcp), Port: ptr.To(gw.TargetPort)}},
		})
	}
	if DNSAllowed(record) {
		// DNS whenever the record allows some Service (SPEC section 5), whether or not the
		// Service exists yet or names pods: the sandbox reaches it by name. Never with egress,
		// gateway or not (docs/egress.md, "DNS"): kube-dns forwards any name to the resolvers
		// outside, a channel past the gateway. A class with both is refused (egressConflict); a
		// record frozen with both by an earlier operator keeps its Services' pods and loses DNS.
		egress = append(egress, networkingv1.NetworkPolicyEgressRule{
			To: []networkingv1.NetworkPolicyPeer{{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: metav1.NamespaceSystem}},
				PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": "kube-dns"}},
			}},
			Ports: []networkingv1.NetworkPolicyPort{
				{Protocol: ptr.To(udp), Port: ptr.To(intstr.FromInt32(53))},
				{Protocol: ptr.To(tcp), Port: ptr.To(intstr.FromInt32(53))},
			},
		})
	}
	var ingressPorts []networkingv1.NetworkPolicyPort
	for _, p := range Ports(record) {
		ingressPorts = append(ingressPorts, networkingv1.NetworkPolicyPort{Protocol: ptr.To(tcp), Port: ptr.To(intstr.FromInt32(p.Port))})
	}
	return networkingv1.NetworkPolicySpec{
		PodSelector: metav1.LabelSelector{MatchLabels: selector},
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
		Ingress: []networkingv1.NetworkPolicyIngressRule{{
			From: []networkingv1.NetworkPolicyPeer{{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: namespace}},
			}},
			Ports: ingressPorts,
		}},
		Egress: egress,
	}
}

// ExistingServices returns the Services of refs that lister has (a policy names the pods of
// those that exist).
func ExistingServices(lister corelisters.ServiceLister, refs []airlockv1alpha1.ServiceReference) ([]*corev1.Service, error) {
	var out []*corev1.Service
	for _, ref := range refs {
		svc, err := lister.Services(ref.Namespace).Get(ref.Name)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading allowed Service %s/%s: %w", ref.Namespace, ref.Name, err)
		}
		out = append(out, svc)
	}
	return out, nil
}

// DefaultDenyPolicyName is the name of a namespace's standing default-deny NetworkPolicy.
const DefaultDenyPolicyName = "airlock-default-deny"

// DefaultDenyPolicy is the namespace's standing default-deny NetworkPolicy (docs/decisions.md,
// "No sandbox pod without a deny-all"): it selects every airlock sandbox pod, a claim's and a
// warm member's alike (both carry LabelClaim, a member's empty), and allows nothing in or out.
// NetworkPolicies are additive, so a claim's or a pool's own policy only adds what it allows;
// when that policy is deleted before its pod (garbage collection deletes a claim's children in
// any order), this one still confines the pod. It is owned by nothing and never deleted by the
// operator: the safe state is the standing one, not a consequence of deletion order. It carries
// LabelClaim, empty, so that the operator's filtered cache of children holds it.
func DefaultDenyPolicy(namespace string) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{
			Name:      DefaultDenyPolicyName,
			Namespace: namespace,
			Labels:    map[string]string{airlockv1alpha1.LabelClaim: ""},
		},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
				Key: airlockv1alpha1.LabelClaim, Operator: metav1.LabelSelectorOpExists,
			}}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
		},
	}
}

// OperatorPeer is the operator's own pods (--operator-pod-labels, in the operator's namespace):
// with one, a sandbox's NetworkPolicy lets them reach sandboxd's port, for the operator's stop
// (pkg/sandboxstop).
type OperatorPeer struct {
	Namespace string
	Labels    map[string]string
}

// WithOperatorIngress adds to np, a sandbox's policy built from record, ingress from peer's pods
// to sandboxd's port (the record's first); a nil peer adds nothing.
func WithOperatorIngress(np *networkingv1.NetworkPolicy, record *airlockv1alpha1.FrozenSandbox, peer *OperatorPeer) *networkingv1.NetworkPolicy {
	if peer == nil || len(peer.Labels) == 0 {
		return np
	}
	np.Spec.Ingress = append(np.Spec.Ingress, networkingv1.NetworkPolicyIngressRule{
		From: []networkingv1.NetworkPolicyPeer{{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: peer.Namespace}},
			PodSelector:       &metav1.LabelSelector{MatchLabels: maps(peer.Labels)},
		}},
		Ports: []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromInt32(Ports(record)[0].Port))}},
	})
	return np
}

// DNSAllowed says whether the record's sandboxes may reach kube-dns: when it allows some Service
// (they reach it by name), never with egress (docs/egress.md, "DNS").
func DNSAllowed(record *airlockv1alpha1.FrozenSandbox) bool {
	return len(record.AllowedServices) > 0 && record.Egress == nil
}
