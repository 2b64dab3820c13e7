//go:build e2e && realnode

package e2e

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/cert"

	"github.com/airlock-dev/airlock/pkg/controller/cabundle"
	"github.com/airlock-dev/airlock/pkg/servingcert"
)

// operatorPods returns the running operator pods, by name.
func operatorPods(t *testing.T, ctx context.Context) map[string]corev1.Pod {
	t.Helper()
	list, err := kubeClient.CoreV1().Pods(operatorNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=airlock,app.kubernetes.io/component=operator"})
	if err != nil {
		t.Fatal(err)
	}
	pods := map[string]corev1.Pod{}
	for _, p := range list.Items {
		if p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" && p.DeletionTimestamp == nil {
			pods[p.Name] = p
		}
	}
	if len(pods) < 2 {
		t.Fatalf("%d running operator pods, want the manifests' 2", len(pods))
	}
	return pods
}

// certSerial is the serial of the first certificate of a PEM field.
func certSerial(t *testing.T, pemData []byte) string {
	t.Helper()
	block, _ := pem.Decode(pemData)
	if block == nil {
		t.Fatal("no PEM block")
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c.SerialNumber.String()
}

func restarts(p corev1.Pod) int32 {
	var n int32
	for _, s := range p.Status.ContainerStatuses {
		n += s.RestartCount
	}
	return n
}

// TestRealNodeTLS: installed by hack/e2e-node.sh (the chart, or manifests/), both operator replicas serve the
// certificate of the operator's Secret, and the operator publishes its CA in the runtime's
// namespace. A runtime pod that trusts another CA, or speaks plain HTTP, is refused before any
// claim exists. When the Secret is replaced, both replicas serve the new certificate without a
// restart, the published bundle follows, and a runtime pod started then acquires a sandbox and
// calls a tool through it.
func TestRealNodeTLS(t *testing.T) {
	requireRealNode(t)
	e := newRealnodeEnv(t, "airlock-rn-tls", realnodeOptions{maxConcurrent: 1, maxPerSession: 1, maxInstances: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	bundle := []byte(publishedBundle(t, e.ns).Data[cabundle.Key])
	secret := servingSecret(t, ctx)
	if string(bundle) != string(secret.Data[servingcert.BundleKey]) {
		t.Fatal("the published bundle is not the Secret's")
	}
	pods := operatorPods(t, ctx)
	want := certSerial(t, secret.Data["tls.crt"])
	for name, p := range pods {
		got, err := servedSerial(net.JoinHostPort(p.Status.PodIP, "8443"), bundle)
		if err != nil || got != want {
			t.Errorf("replica %s serves %s (%v), want the Secret's certificate %s", name, got, err, want)
		}
	}

	// Refused before any claim: another CA, plain HTTP.
	otherCA, _, err := cert.GenerateSelfSignedCertKey("another-ca", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kubeClient.CoreV1().ConfigMaps(e.ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "another-ca"}, Data: map[string]string{"ca.crt": string(otherCA)},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	trustAnotherCA := func(pod *corev1.Pod) {
		for i, v := range pod.Spec.Volumes {
			if v.ConfigMap != nil && v.ConfigMap.Name == cabundle.ConfigMapName {
				pod.Spec.Volumes[i].ConfigMap.Name = "another-ca"
			}
		}
	}
	base := map[string]any{"namespace": e.ns, "runtime": "agent", "handle": "codegen/default", "waitSeconds": 5}
	with := func(kv ...any) map[string]any {
		plan := map[string]any{}
		for k, v := range base {
			plan[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			plan[kv[i].(string)] = kv[i+1]
		}
		return plan
	}
	var res rnSession
	if err := e.runClientWith("wrong-ca", "session", with("api", apiURL(), "session", "wrong-ca"), 3*time.Minute, &res, trustAnotherCA); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.Error, "unknown authority") {
		t.Errorf("a runtime trusting another CA: %q, want an unknown authority error", res.Error)
	}
	plain := strings.Replace(apiURL(), "https://", "http://", 1)
	res = rnSession{}
	if err := e.runClientWith("plain-refused", "session", with("api", plain, "session", "plain"), 3*time.Minute, &res, nil); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.Error, "plain HTTP") || res.Claim != "" {
		t.Errorf("an http:// URL: claim %q error %q, want pkg/client's refusal", res.Claim, res.Error)
	}
	res = rnSession{}
	if err := e.runClientWith("plain-http", "session", with("api", plain, "session", "plain", "plainHTTP", true), 3*time.Minute, &res, nil); err != nil {
		t.Fatal(err)
	}
	if res.Error == "" || res.Claim != "" {
		t.Errorf("a runtime speaking plain HTTP to the TLS port: claim %q error %q, want an error and no claim", res.Claim, res.Error)
	}
	if claims, err := airlockClient.AirlockV1alpha1().SandboxClaims(e.ns).List(ctx, metav1.ListOptions{}); err != nil || len(claims.Items) != 0 {
		t.Errorf("claims after the refused calls: %d %v, want none", len(claims.Items), err)
	}

	// Replace the Secret: both replicas serve the new certificate without a restart.
	before := map[string]int32{}
	for name, p := range pods {
		before[name] = restarts(p)
	}
	renewed := replaceServingSecret(t, ctx, secret)
	newBundle := renewed.Data[servingcert.BundleKey]
	want = certSerial(t, renewed.Data["tls.crt"])
	for name, p := range pods {
		addr := net.JoinHostPort(p.Status.PodIP, "8443")
		eventually(t, 60*time.Second, fmt.Sprintf("replica %s serving the new certificate", name), func(ctx context.Context) (bool, error) {
			got, err := servedSerial(addr, newBundle)
			return err == nil && got == want, nil
		})
	}
	for name, p := range operatorPods(t, ctx) {
		if restarts(p) != before[name] {
			t.Errorf("replica %s restarted (%d, was %d)", name, restarts(p), before[name])
		}
	}
	eventually(t, 60*time.Second, "the published bundle following the new CA", func(ctx context.Context) (bool, error) {
		cm, err := kubeClient.CoreV1().ConfigMaps(e.ns).Get(ctx, cabundle.ConfigMapName, metav1.GetOptions{})
		return err == nil && cm.Data[cabundle.Key] == string(newBundle), nil
	})

	// A runtime started now mounts the new bundle and works end to end.
	res = rnSession{}
	plan := with("api", apiURL(), "session", "after-rotation", "waitSeconds", 120, "close", true,
		"steps", []map[string]any{step("bash", "Bash", map[string]any{"command": "echo over-tls"})})
	e.runClient(t, "after-rotation", "session", plan, 5*time.Minute, &res)
	if res.Error != "" || res.Phase != "Bound" || !strings.Contains(res.call(t, "bash").Text, "over-tls") {
		t.Errorf("after the rotation: phase %q error %q calls %+v", res.Phase, res.Error, res.Calls)
	}
}
