package operator

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2/ktesting"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/attestation"
	"github.com/airlock-dev/airlock/pkg/controller/cabundle"
	"github.com/airlock-dev/airlock/pkg/controller/isolationkey"
	airlockfake "github.com/airlock-dev/airlock/pkg/generated/clientset/versioned/fake"
)

// TestIsolationKeysWired: the leader runs the isolation key controller, which makes its Secret
// in the operator's namespace, and the CA bundle distributor publishes the Secret's public key
// (and nothing private) beside the Sandbox API's CA in a runtime's namespace.
func TestIsolationKeysWired(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	kube, _ := newFakes()
	air := airlockfake.NewSimpleClientset(&airlockv1alpha1.AgentRuntime{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "agent"}})
	cfg := newTestConfig(kube, air)
	cfg.TLSMode, cfg.TLSSANs = TLSModeSelfSigned, []string{"airlock-sandbox-api.airlock-system.svc"}
	_, done := startOperator(t, ctx, cfg, controllerDescriptor{name: isolationkey.ControllerName, init: startIsolationKeyController},
		controllerDescriptor{name: cabundle.ControllerName, init: startCABundleController})

	var published string
	var secret *corev1.Secret
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, wait.ForeverTestTimeout, true, func(ctx context.Context) (bool, error) {
		var err error
		if secret, err = kube.CoreV1().Secrets(cfg.Namespace).Get(ctx, isolationkey.SecretName, metav1.GetOptions{}); err != nil {
			return false, nil
		}
		cm, err := kube.CoreV1().ConfigMaps("team-a").Get(ctx, cabundle.ConfigMapName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		published = cm.Data[cabundle.IsolationKeysKey]
		return published != "", nil
	})
	if err != nil {
		t.Fatalf("waiting for the isolation keys' Secret in %s and their bundle in team-a: %v", cfg.Namespace, err)
	}
	var doc struct{ Signing struct{ Seed []byte } }
	if err := json.Unmarshal(secret.Data[isolationkey.KeysKey], &doc); err != nil {
		t.Fatal(err)
	}
	signing := ed25519.NewKeyFromSeed(doc.Signing.Seed).Public().(ed25519.PublicKey)
	keys, err := attestation.ParsePublicKeys([]byte(published))
	if err != nil || len(keys) != 1 || keys[attestation.KeyID(signing)] == nil || strings.Contains(published, "PRIVATE") {
		t.Fatalf("published isolation keys: %d keys, %v, want the Secret's signing key's alone:\n%s", len(keys), err, published)
	}
	cancel()
	if err := waitForResult(t, done); err != nil {
		t.Errorf("run after cancel: %v, want nil", err)
	}
}
