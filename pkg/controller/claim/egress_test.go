package claim

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/klog/v2/ktesting"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
)

func egressGatewayService() *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "airlock-egress", Namespace: "airlock-system"},
		Spec: corev1.ServiceSpec{
			ClusterIP: "10.96.0.50",
			Selector:  map[string]string{"app.kubernetes.io/name": "airlock-egress"},
			Ports:     []corev1.ServicePort{{Name: "proxy", Port: 3128, TargetPort: intstr.FromInt32(3128)}},
		},
	}
}

func withEgress(class *airlockv1alpha1.SandboxClass) {
	class.Spec.Egress = &airlockv1alpha1.SandboxEgress{
		Hosts: []airlockv1alpha1.EgressHost{{Host: "proxy.golang.org", Ports: []airlockv1alpha1.EgressPort{443}}},
	}
}

// TestEgressWithoutGatewayFails: a class with egress on an operator without a gateway (no flag,
// or a flag whose Service does not exist) fails the claim with a reason, builds nothing.
func TestEgressWithoutGatewayFails(t *testing.T) {
	for name, setup := range map[string]func(*fixture, *Controller){
		"no flag": func(*fixture, *Controller) {},
		"no Service": func(_ *fixture, c *Controller) {
			c.SetEgressGateway(&sandboxpod.GatewayRef{Namespace: "airlock-system", Name: "airlock-egress", Port: 3128})
		},
	} {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(t).withDefaults()
			withEgress(f.classes[0])
			f.claims = append(f.claims, newClaim("c1", "s1", "", t0.Add(-time.Second)))
			c := f.newController(ctx)
			setup(f, c)
			if err := admitAndBuild(ctx, c); err != nil {
				t.Fatal(err)
			}
			got := f.writtenClaim()
			if got.Status.Phase != airlockv1alpha1.ClaimFailed || got.Status.Reason != ReasonEgressUnavailable || !strings.Contains(got.Status.Message, "egress gateway") {
				t.Errorf("phase %s reason %s message %q, want Failed %s", got.Status.Phase, got.Status.Reason, got.Status.Message, ReasonEgressUnavailable)
			}
			for _, a := range f.actions() {
				if strings.HasPrefix(a, "create ") {
					t.Errorf("created %s", a)
				}
			}
		})
	}
}

// TestEgressClaimChildren: with a gateway, the record freezes it, the token Secret gains the
// claim's proxy credential, and the pod reads it from that Secret (never in its spec).
func TestEgressClaimChildren(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t).withDefaults()
	withEgress(f.classes[0])
	f.allowedServices = append(f.allowedServices, egressGatewayService())
	claim := newClaim("c1", "s1", "", t0.Add(-time.Second))
	f.claims = append(f.claims, claim)
	c := f.newController(ctx)
	c.SetEgressGateway(&sandboxpod.GatewayRef{Namespace: "airlock-system", Name: "airlock-egress", Port: 3128})
	if err := admitAndBuild(ctx, c); err != nil {
		t.Fatal(err)
	}
	got := f.writtenClaim()
	if got.Status.Phase != airlockv1alpha1.ClaimBinding || got.Status.Frozen.Egress == nil {
		t.Fatalf("phase %s reason %s %s, want Binding with egress", got.Status.Phase, got.Status.Reason, got.Status.Message)
	}
	if gw := got.Status.Frozen.Egress.Gateway; gw.Address != "10.96.0.50" || gw.Port != 3128 || gw.PodSelector["app.kubernetes.io/name"] != "airlock-egress" {
		t.Errorf("frozen gateway %+v", gw)
	}
	secret := f.written("secrets", "").(*corev1.Secret)
	wantCredential := testProxyCredential + "-" + string(claim.UID)
	if string(secret.Data[sandboxpod.ProxyKey]) != wantCredential {
		t.Errorf("secret data %v: want the proxy credential", secret.Data)
	}
	pod := f.written("pods", "").(*corev1.Pod)
	found := false
	for _, e := range pod.Spec.Containers[0].Env {
		if e.Name == sandboxpod.ProxyCredentialEnv {
			found = e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Name == secret.Name && e.ValueFrom.SecretKeyRef.Key == sandboxpod.ProxyKey
		}
	}
	if !found {
		t.Errorf("pod env %+v: want the credential from Secret %s", pod.Spec.Containers[0].Env, secret.Name)
	}
	spec, _ := json.Marshal(pod)
	if strings.Contains(string(spec), wantCredential) {
		t.Error("the pod spec holds the proxy credential")
	}
}

// TestEgressClaimAdoptsWarmMember: a claim of a class with egress adopts a Ready member built
// from the record the pool controller freezes (the class, the entry and the same gateway from
// its Service), and builds nothing: the member keeps its own proxy credential, which the gateway
// takes as this claim's once adopted (docs/egress.md). A member built with the gateway at
// another address (its Service re-created) is of another pool key: not adopted, the claim is
// built cold.
func TestEgressClaimAdoptsWarmMember(t *testing.T) {
	ref := &sandboxpod.GatewayRef{Namespace: "airlock-system", Name: "airlock-egress", Port: 3128}
	memberRecord := func(t *testing.T, address string) *airlockv1alpha1.FrozenSandbox {
		class := newClass("codegen")
		withEgress(class)
		record := sandboxpod.Freeze(class, &warmRegistry(3).Spec.Sandboxes[0])
		svc := egressGatewayService()
		svc.Spec.ClusterIP = address
		gw, why := sandboxpod.FreezeGateway(ref, svc)
		if why != "" {
			t.Fatal(why)
		}
		record.Egress.Gateway = *gw
		return record
	}
	for name, tc := range map[string]struct {
		address   string
		wantAdopt bool
	}{
		"built with the claim's gateway":       {address: "10.96.0.50", wantAdopt: true},
		"built with the gateway's old address": {address: "10.96.0.99"},
	} {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			reg := warmRegistry(3)
			member := warmMember(reg, "tools-codegen-aaaaaaaaaaaa", memberRecord(t, tc.address), t0.Add(-time.Minute), "10.244.0.40")
			f := warmFixture(t, 5, member)
			withEgress(f.classes[0])
			f.allowedServices = append(f.allowedServices, egressGatewayService())
			f.claims = append(f.claims, newClaim("c1", "s1", "", t0))
			c := f.newController(ctx)
			c.SetEgressGateway(ref)
			if err := admitAndBuild(ctx, c); err != nil {
				t.Fatal(err)
			}
			got := f.writtenClaim()
			if !tc.wantAdopt {
				if got.Status.Warm != nil {
					t.Errorf("adopted %+v: a member of another gateway", got.Status.Warm)
				}
				return
			}
			checkActions(t, f, []string{"patch pods " + member.Name, "update sandboxclaims/status c1"})
			if got.Status.Warm == nil || got.Status.Warm.Member != member.Name || got.Status.Frozen.Egress == nil {
				t.Errorf("claim warm %+v record %+v, want Bound to %s with egress", got.Status.Warm, got.Status.Frozen, member.Name)
			}
		})
	}
}
