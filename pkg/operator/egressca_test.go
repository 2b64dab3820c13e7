package operator

import (
	"bytes"
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2/ktesting"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/claimtoken"
	"github.com/airlock-dev/airlock/pkg/controller/cabundle"
	"github.com/airlock-dev/airlock/pkg/controller/egressca"
	airlockfake "github.com/airlock-dev/airlock/pkg/generated/clientset/versioned/fake"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
)

// TestEgressCAControllerWired: with Config.EgressCA the leader runs the egress CA controller in
// the operator's namespace, which makes the Secret there, and the CA bundle distributor, which
// publishes its bundle in a claim's namespace; stopping the operator stops them (and their
// informers).
func TestEgressCAControllerWired(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	kube, _ := newFakes()
	claim := &airlockv1alpha1.SandboxClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "c1"},
		Status: airlockv1alpha1.SandboxClaimStatus{Frozen: &airlockv1alpha1.FrozenSandbox{
			Egress: &airlockv1alpha1.FrozenEgress{Gateway: airlockv1alpha1.EgressGateway{CABundleConfigMap: egressca.DefaultConfigMapName}},
		}},
	}
	air := airlockfake.NewSimpleClientset(claim)
	cfg := newTestConfig(kube, air)
	cfg.EgressCA = &egressca.Config{ConfigMapName: egressca.DefaultConfigMapName, Policy: egressca.DefaultPolicy()}
	_, done := startOperator(t, ctx, cfg, controllerDescriptor{name: egressca.ControllerName, init: startEgressCAController},
		controllerDescriptor{name: cabundle.ControllerName, init: startCABundleController})

	wctx, wcancel := context.WithTimeout(ctx, wait.ForeverTestTimeout)
	defer wcancel()
	err := wait.PollUntilContextCancel(wctx, 10*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		s, err := kube.CoreV1().Secrets(testLeaseNamespace).Get(ctx, egressca.SecretName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		cm, err := kube.CoreV1().ConfigMaps("team-a").Get(ctx, egressca.DefaultConfigMapName, metav1.GetOptions{})
		return err == nil && cm.Data[egressca.BundleKey] == string(s.Data[egressca.BundleKey]), nil
	})
	if err != nil {
		t.Fatalf("waiting for the Secret in %s and the bundle in team-a: %v", testLeaseNamespace, err)
	}
	cancel()
	if err := waitForResult(t, done); err != nil {
		t.Errorf("run after cancel: %v, want nil", err)
	}
}

// TestProxyKeyWritten: with an egress gateway (--egress-gateway-service) the operator writes the
// gateway's proxy key Secret, derived from its token key and not that key; stopping the operator
// stops the writer.
func TestProxyKeyWritten(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	kube, air := newFakes()
	cfg := newTestConfig(kube, air)
	cfg.EgressGateway = &sandboxpod.GatewayRef{Namespace: testLeaseNamespace, Name: "airlock-egress", Port: 3128}
	_, done := startOperator(t, ctx, cfg)

	wctx, wcancel := context.WithTimeout(ctx, wait.ForeverTestTimeout)
	defer wcancel()
	var proxyKey, key []byte
	err := wait.PollUntilContextCancel(wctx, 10*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		p, err := kube.CoreV1().Secrets(testLeaseNamespace).Get(ctx, claimtoken.ProxySecretName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		k, err := kube.CoreV1().Secrets(testLeaseNamespace).Get(ctx, claimtoken.SecretName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		proxyKey, key = p.Data[claimtoken.KeyField], k.Data[claimtoken.KeyField]
		return true, nil
	})
	if err != nil {
		t.Fatalf("waiting for the proxy key Secret: %v", err)
	}
	want, err := claimtoken.ProxyKey(key)
	if err != nil || !bytes.Equal(proxyKey, want) || bytes.Equal(proxyKey, key) {
		t.Errorf("proxy key %x, want ProxyKey of the token key %x (%v)", proxyKey, want, err)
	}
	cancel()
	if err := waitForResult(t, done); err != nil {
		t.Errorf("run after cancel: %v, want nil", err)
	}
}
