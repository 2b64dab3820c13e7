//go:build e2e

package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/cert"
	"sigs.k8s.io/yaml"

	"github.com/airlock-dev/airlock/pkg/attestation"
	"github.com/airlock-dev/airlock/pkg/client"
	"github.com/airlock-dev/airlock/pkg/controller/cabundle"
	"github.com/airlock-dev/airlock/pkg/controller/isolationkey"
	"github.com/airlock-dev/airlock/pkg/servingcert"
)

// apiServerName is the Sandbox API Service's name in the operator's namespace: what the operator's
// own certificate is for by default (--tls-sans). The suite's operators run out of cluster on a
// loopback port, so their clients name the Service explicitly (client.TLSOptions.ServerName).
const apiServerName = "airlock-sandbox-api.airlock-system.svc"

// publishedBundle waits until the operator has published the CA bundle in ns (the ConfigMap
// airlock-ca a runtime's pod mounts) and returns it.
func publishedBundle(t *testing.T, ns string) *corev1.ConfigMap {
	t.Helper()
	var cm *corev1.ConfigMap
	eventually(t, 60*time.Second, "the CA bundle ConfigMap in "+ns, func(ctx context.Context) (bool, error) {
		got, err := kubeClient.CoreV1().ConfigMaps(ns).Get(ctx, cabundle.ConfigMapName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		cm = got
		return err == nil && got.Data[cabundle.Key] != "", err
	})
	return cm
}

// apiHTTPClient is an http.Client that verifies the Sandbox API as a runtime in ns does: with the
// CA bundle published there. Every exchange through it is checked against the OpenAPI document
// (apiSpec).
func apiHTTPClient(t *testing.T, ns string) *http.Client {
	t.Helper()
	hc, err := client.NewHTTPClient(client.TLSOptions{CAData: []byte(publishedBundle(t, ns).Data[cabundle.Key]), ServerName: apiServerName})
	if err != nil {
		t.Fatal(err)
	}
	hc.Transport = apiSpec.Wrap(hc.Transport)
	return hc
}

// servingSecret returns the operator's CA and certificate Secret.
func servingSecret(t *testing.T, ctx context.Context) *corev1.Secret {
	t.Helper()
	s, err := kubeClient.CoreV1().Secrets(operatorNamespaceName).Get(ctx, servingcert.SecretName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the serving certificate Secret: %v", err)
	}
	return s
}

// checkIsolationKeysPublished: beside the CA, airlock-ca of ns carries the public key of the
// isolation signing keys' Secret's signing key (the leader publishes it once it made the key),
// and nothing private.
func checkIsolationKeysPublished(t *testing.T, ctx context.Context, ns string) {
	t.Helper()
	var published string
	var signing ed25519.PublicKey
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		s, err := kubeClient.CoreV1().Secrets(operatorNamespaceName).Get(ctx, isolationkey.SecretName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		var doc struct{ Signing struct{ Seed []byte } }
		if err := json.Unmarshal(s.Data[isolationkey.KeysKey], &doc); err != nil || len(doc.Signing.Seed) != ed25519.SeedSize {
			return false, fmt.Errorf("the isolation signing keys' Secret: %v", err)
		}
		signing = ed25519.NewKeyFromSeed(doc.Signing.Seed).Public().(ed25519.PublicKey)
		cm, err := kubeClient.CoreV1().ConfigMaps(ns).Get(ctx, cabundle.ConfigMapName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		published = cm.Data[cabundle.IsolationKeysKey]
		return published != "", nil
	})
	if err != nil {
		t.Fatalf("the isolation keys in airlock-ca of %s: %v", ns, err)
	}
	keys, err := attestation.ParsePublicKeys([]byte(published))
	if err != nil || keys[attestation.KeyID(signing)] == nil || strings.Contains(published, "PRIVATE") {
		t.Errorf("airlock-ca's isolation keys (%d, %v) do not hold the Secret's signing key alone and public:\n%s", len(keys), err, published)
	}
}

// replaceServingSecret deletes the serving certificate Secret old and waits for the operator to
// create another, which it returns.
func replaceServingSecret(t *testing.T, ctx context.Context, old *corev1.Secret) *corev1.Secret {
	t.Helper()
	if err := kubeClient.CoreV1().Secrets(operatorNamespaceName).Delete(ctx, servingcert.SecretName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var renewed *corev1.Secret
	eventually(t, 60*time.Second, "a new serving certificate Secret", func(ctx context.Context) (bool, error) {
		s, err := kubeClient.CoreV1().Secrets(operatorNamespaceName).Get(ctx, servingcert.SecretName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		renewed = s
		return err == nil && s.UID != old.UID, err
	})
	return renewed
}

// servedSerial opens a TLS connection to addr that trusts bundle and returns the serial of the
// certificate the server showed.
func servedSerial(addr string, bundle []byte) (string, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(bundle) {
		return "", errors.New("no certificate in the bundle")
	}
	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, ServerName: apiServerName, MinVersion: tls.VersionTLS12})
	if err != nil {
		return "", err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.String(), nil
}

// TestSandboxAPIOverTLS: installed as by default, the operator serves the Sandbox API over TLS
// with a CA of its own, in the Secret of its namespace, and publishes that CA in the runtime's
// namespace. A client with the published bundle reaches the API; one without it (the system's
// roots), one that trusts another CA, and one that names another host fail verification and send
// nothing; plain HTTP to the TLS port is answered 400.
func TestSandboxAPIOverTLS(t *testing.T) {
	e := newClaimEnv(t, "airlock-tls", claimEnvOptions{maxConcurrent: 5, maxPerSession: 3})
	op := startAPIOperator(t, e.ns)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	token := serviceAccountToken(t, e.ns, "agent")

	cm := publishedBundle(t, e.ns)
	secret := servingSecret(t, ctx)
	if cm.Data[cabundle.Key] != string(secret.Data[servingcert.BundleKey]) || cm.Labels[cabundle.LabelBundle] != "true" {
		t.Errorf("the published ConfigMap (labels %v) does not hold the Secret's CA bundle", cm.Labels)
	}
	if secret.Type != corev1.SecretTypeTLS {
		t.Errorf("Secret type %q, want %q", secret.Type, corev1.SecretTypeTLS)
	}
	checkIsolationKeysPublished(t, ctx, e.ns)

	req := client.AcquireRequest{Namespace: e.ns, Runtime: "agent", Session: "tls", Handle: "codegen/default", WaitSeconds: waitSeconds(0)}
	if _, status, err := op.client(token).AcquireOnce(ctx, req); err != nil || (status != http.StatusOK && status != http.StatusAccepted) {
		t.Fatalf("acquire with the published bundle: %d %v", status, err)
	}
	// /metrics says when the served certificate expires.
	block, _ := pem.Decode(secret.Data[corev1.TLSCertKey])
	if block == nil {
		t.Fatal("the Secret's tls.crt is not PEM")
	}
	served, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + op.metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	wantMetric := fmt.Sprintf("airlock_sandbox_api_certificate_expiration_timestamp_seconds %g", float64(served.NotAfter.Unix()))
	if !strings.Contains(string(body), wantMetric) {
		t.Errorf("/metrics has no %q", wantMetric)
	}

	otherCA, _, err := cert.GenerateSelfSignedCertKey("another-ca", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The machine's roots, for the right name.
	systemRoots := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{ServerName: apiServerName, MinVersion: tls.VersionTLS12}}}
	withOtherCA, err := client.NewHTTPClient(client.TLSOptions{CAData: otherCA, ServerName: apiServerName})
	if err != nil {
		t.Fatal(err)
	}
	wrongName, err := client.NewHTTPClient(client.TLSOptions{CAData: []byte(cm.Data[cabundle.Key]), ServerName: "airlock-sandbox-api.evil.svc"})
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		hc      *http.Client
		session string
		wantErr string
	}{
		"no bundle (system roots)": {hc: systemRoots, session: "refused-system-roots", wantErr: "certificate signed by unknown authority"},
		"another CA":               {hc: withOtherCA, session: "refused-other-ca", wantErr: "certificate signed by unknown authority"},
		"another host name":        {hc: wrongName, session: "refused-other-name", wantErr: "not airlock-sandbox-api.evil.svc"},
	} {
		other := req
		other.Session = tc.session
		_, _, err := client.New(op.apiURL, staticToken(token), tc.hc).AcquireOnce(ctx, other)
		var apiErr *client.APIError
		if err == nil || errors.As(err, &apiErr) || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%s: %v, want a verification error containing %q before any answer", name, err, tc.wantErr)
		}
		// Nothing reached the API: no claim for that session.
		claims, err := airlockClient.AirlockV1alpha1().SandboxClaims(e.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range claims.Items {
			if c.Spec.Session == other.Session {
				t.Errorf("%s: the request was served (claim %s)", name, c.Name)
			}
		}
	}

	// Plain HTTP: pkg/client refuses it unless asked (client.PlainHTTP); asked, the TLS port
	// answers 400 and closes, and a client still sending its body may see the close (a reset)
	// before the 400. Either way, no answer of the API.
	plain := strings.Replace(op.apiURL, "https://", "http://", 1)
	plainReq := req
	plainReq.Session = "plain-http"
	if _, _, err := client.New(plain, staticToken(token), nil).AcquireOnce(ctx, plainReq); err == nil || !strings.Contains(err.Error(), "plain HTTP") {
		t.Errorf("an http:// URL without client.PlainHTTP: %v, want a refusal", err)
	}
	_, _, err = client.New(plain, staticToken(token), nil, client.PlainHTTP()).AcquireOnce(ctx, plainReq)
	var apiErr *client.APIError
	switch {
	case err == nil:
		t.Error("plain HTTP to the TLS port succeeded")
	case errors.As(err, &apiErr) && (apiErr.Status != http.StatusBadRequest || apiErr.Code != ""):
		t.Errorf("plain HTTP to the TLS port: %v, want the TLS server's 400, not an answer of the API", err)
	}
	claims, err := airlockClient.AirlockV1alpha1().SandboxClaims(e.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range claims.Items {
		if c.Spec.Session == plainReq.Session {
			t.Errorf("plain HTTP was served (claim %s)", c.Name)
		}
	}
}

// TestCABundleFollowsRuntimes: the CA bundle ConfigMap appears in a namespace when its first
// AgentRuntime does, is put back when deleted, is repaired when edited, and goes away with the
// namespace's last runtime.
func TestCABundleFollowsRuntimes(t *testing.T) {
	e := newClaimEnv(t, "airlock-tls-ns", claimEnvOptions{maxConcurrent: 5, maxPerSession: 3})
	startAPIOperator(t, e.ns)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bundle := publishedBundle(t, e.ns).Data[cabundle.Key]

	other := newNamespace(t, "airlock-tls-other")
	if _, err := kubeClient.CoreV1().ConfigMaps(other).Get(ctx, cabundle.ConfigMapName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a namespace without runtimes has the bundle: %v", err)
	}
	rt := e.runtime.DeepCopy()
	rt.ObjectMeta = metav1.ObjectMeta{Name: "agent", Namespace: other}
	if _, err := airlockClient.AirlockV1alpha1().AgentRuntimes(other).Create(ctx, rt, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := publishedBundle(t, other).Data[cabundle.Key]; got != bundle {
		t.Error("the new runtime's namespace got another bundle")
	}

	// Deleted: put back.
	if err := kubeClient.CoreV1().ConfigMaps(other).Delete(ctx, cabundle.ConfigMapName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	publishedBundle(t, other)
	// Edited: repaired.
	cm := publishedBundle(t, other)
	cm.Data[cabundle.Key] = "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n"
	if _, err := kubeClient.CoreV1().ConfigMaps(other).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "the edited bundle repaired", func(ctx context.Context) (bool, error) {
		got, err := kubeClient.CoreV1().ConfigMaps(other).Get(ctx, cabundle.ConfigMapName, metav1.GetOptions{})
		return err == nil && got.Data[cabundle.Key] == bundle, nil
	})

	// The last runtime goes: so does the bundle.
	if err := airlockClient.AirlockV1alpha1().AgentRuntimes(other).Delete(ctx, "agent", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "the bundle of a namespace without runtimes deleted", func(ctx context.Context) (bool, error) {
		_, err := kubeClient.CoreV1().ConfigMaps(other).Get(ctx, cabundle.ConfigMapName, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}

// TestServingCertificateReloads: two replicas serve the same certificate; when the Secret is
// replaced (deleted here, so that the operator makes a new CA at once rather than in 16 months)
// both replicas serve the new certificate without a restart, the published bundle follows, and a
// client holding only the old bundle no longer verifies the API.
func TestServingCertificateReloads(t *testing.T) {
	e := newClaimEnv(t, "airlock-tls-reload", claimEnvOptions{maxConcurrent: 5, maxPerSession: 3})
	ops := []*apiOperator{startAPIOperator(t, e.ns), startAPIOperator(t, e.ns)}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	oldBundle := []byte(publishedBundle(t, e.ns).Data[cabundle.Key])
	var before []string
	for _, op := range ops {
		serial, err := servedSerial(strings.TrimPrefix(op.apiURL, "https://"), oldBundle)
		if err != nil {
			t.Fatalf("before: %v", err)
		}
		before = append(before, serial)
	}
	if before[0] != before[1] {
		t.Errorf("the replicas serve different certificates: %v", before)
	}
	renewed := replaceServingSecret(t, ctx, servingSecret(t, ctx))
	newBundle := renewed.Data[servingcert.BundleKey]
	for i, op := range ops {
		addr := strings.TrimPrefix(op.apiURL, "https://")
		eventually(t, 60*time.Second, fmt.Sprintf("replica %d serving the new certificate", i), func(ctx context.Context) (bool, error) {
			serial, err := servedSerial(addr, newBundle)
			return err == nil && serial != before[i], nil
		})
		if _, err := servedSerial(addr, oldBundle); err == nil {
			t.Errorf("replica %d: the old bundle still verifies after the CA changed", i)
		}
		select {
		case <-op.done:
			t.Errorf("replica %d exited: %v", i, op.exitErr)
		default:
		}
	}
	eventually(t, 60*time.Second, "the published bundle following the new CA", func(ctx context.Context) (bool, error) {
		cm, err := kubeClient.CoreV1().ConfigMaps(e.ns).Get(ctx, cabundle.ConfigMapName, metav1.GetOptions{})
		return err == nil && cm.Data[cabundle.Key] == string(newBundle), nil
	})
	// The replicas' clients of before the change are rebuilt from the new bundle.
	hc := apiHTTPClient(t, e.ns)
	req := client.AcquireRequest{Namespace: e.ns, Runtime: "agent", Session: "after", Handle: "codegen/default", WaitSeconds: waitSeconds(0)}
	for i, op := range ops {
		if _, _, err := client.New(op.apiURL, staticToken(serviceAccountToken(t, e.ns, "agent")), hc).AcquireOnce(ctx, req); err != nil {
			t.Errorf("replica %d with the new bundle: %v", i, err)
		}
	}
}

// TestCertManagerComponentRenders: an overlay of the manifests with the cert-manager component
// renders (kubectl kustomize): the operator serves the mounted cert-manager Secret in files mode,
// the Issuers and Certificates are there, and nothing else of the base changed kind or count.
func TestCertManagerComponentRenders(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	rel, err := filepath.Rel(dir, filepath.Join(repoRoot, "manifests"))
	if err != nil {
		t.Fatal(err)
	}
	overlay := fmt.Sprintf("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- %s\ncomponents:\n- %s\n",
		rel, filepath.Join(rel, "components", "cert-manager"))
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(overlay), 0o600); err != nil {
		t.Fatal(err)
	}
	render := func(path string) map[string]int {
		t.Helper()
		out, err := exec.CommandContext(ctx, kubectlPath, "kustomize", path).Output()
		if err != nil {
			t.Fatalf("kubectl kustomize %s: %v", path, err)
		}
		kinds := map[string]int{}
		for _, doc := range strings.Split(string(out), "\n---\n") {
			var obj struct {
				Kind string `json:"kind"`
			}
			if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
				t.Fatal(err)
			}
			kinds[obj.Kind]++
			if obj.Kind == "Deployment" {
				var d struct {
					Spec struct {
						Template struct {
							Spec corev1.PodSpec `json:"spec"`
						} `json:"template"`
					} `json:"spec"`
				}
				if err := yaml.Unmarshal([]byte(doc), &d); err != nil {
					t.Fatal(err)
				}
				args := d.Spec.Template.Spec.Containers[0].Args
				kinds["tls-mode="+strings.Join(slices.DeleteFunc(slices.Clone(args), func(a string) bool { return !strings.HasPrefix(a, "--tls-mode=") }), ",")]++
				for _, v := range d.Spec.Template.Spec.Volumes {
					if v.Secret != nil {
						kinds["secret volume "+v.Secret.SecretName]++
					}
				}
			}
		}
		return kinds
	}
	base := render(filepath.Join(repoRoot, "manifests"))
	with := render(dir)
	if base["tls-mode=--tls-mode=self-signed"] != 1 || with["tls-mode=--tls-mode=files"] != 1 {
		t.Errorf("TLS modes: base %v, with the component %v", base, with)
	}
	if with["Certificate"] != 2 || with["Issuer"] != 2 || with["secret volume airlock-sandbox-api-cert"] != 1 {
		t.Errorf("with the component: %v, want 2 Certificates, 2 Issuers and the serving Secret mounted", with)
	}
	for kind, n := range base {
		if strings.HasPrefix(kind, "tls-mode=") {
			continue
		}
		if with[kind] != n {
			t.Errorf("%s: %d in the base, %d with the component", kind, n, with[kind])
		}
	}
}

// buildRuntimeClient builds the demo's runtime stand-in (e2e/realnode/runtimeclient) for this
// machine.
func buildRuntimeClient(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "runtimeclient")
	cmd := exec.Command("go", "build", "-o", bin, "./e2e/realnode/runtimeclient")
	cmd.Dir = repoRoot
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build runtimeclient: %v\n%s", err, out)
	}
	return bin
}

// TestDemoRuntimeVerifiesAPI runs the demo's runtime stand-in (what `make run` puts in the runtime
// pod) as a process: with the CA bundle published in its namespace it acquires a sandbox over
// TLS; trusting another CA, or with no bundle where it looks, it fails verification and creates
// nothing; only its explicit insecureSkipVerify gets through without a bundle.
func TestDemoRuntimeVerifiesAPI(t *testing.T) {
	e := newClaimEnv(t, "airlock-tls-demo", claimEnvOptions{maxConcurrent: 5, maxPerSession: 3})
	op := startAPIOperator(t, e.ns)
	bin := buildRuntimeClient(t)
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tokenFile := write("token", serviceAccountToken(t, e.ns, "agent"))
	caFile := write("ca.crt", publishedBundle(t, e.ns).Data[cabundle.Key])
	otherCA, _, err := cert.GenerateSelfSignedCertKey("another-ca", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	otherFile := write("other.crt", string(otherCA))

	type result struct {
		Claim  string `json:"claim"`
		Phase  string `json:"phase"`
		Closed bool   `json:"closed"`
		Error  string `json:"error"`
	}
	run := func(session string, tlsPlan map[string]any) result {
		t.Helper()
		plan := map[string]any{"api": op.apiURL, "tokenFile": tokenFile, "namespace": e.ns, "runtime": "agent",
			"session": session, "handle": "codegen/default", "waitSeconds": 60, "serverName": apiServerName}
		for k, v := range tlsPlan {
			plan[k] = v
		}
		b, err := json.Marshal(plan)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, bin, "acquire", "-plan", string(b)).Output()
		if err != nil {
			t.Fatalf("runtimeclient %s: %v", session, err)
		}
		var res result
		for _, line := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(line, "RESULT ") {
				if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "RESULT ")), &res); err != nil {
					t.Fatal(err)
				}
				return res
			}
		}
		t.Fatalf("runtimeclient %s printed no RESULT: %s", session, out)
		return res
	}

	if res := run("published-ca", map[string]any{"caFile": caFile}); res.Error != "" || res.Phase != "Bound" || !res.Closed {
		t.Errorf("with the published bundle: %+v, want Bound and closed", res)
	}
	for session, tc := range map[string]struct {
		plan    map[string]any
		wantErr string
	}{
		"other-ca":  {plan: map[string]any{"caFile": otherFile}, wantErr: "certificate signed by unknown authority"},
		"no-bundle": {plan: map[string]any{"caFile": filepath.Join(dir, "not-mounted", "ca.crt")}, wantErr: "mount the ConfigMap airlock-ca"},
	} {
		if res := run(session, tc.plan); res.Claim != "" || !strings.Contains(res.Error, tc.wantErr) {
			t.Errorf("%s: %+v, want no claim and an error containing %q", session, res, tc.wantErr)
		}
	}
	if res := run("insecure", map[string]any{"caFile": filepath.Join(dir, "not-mounted", "ca.crt"), "insecureSkipVerify": true}); res.Error != "" || res.Phase != "Bound" {
		t.Errorf("with insecureSkipVerify: %+v, want Bound", res)
	}
	claims, err := airlockClient.AirlockV1alpha1().SandboxClaims(e.ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range claims.Items {
		if c.Spec.Session == "other-ca" || c.Spec.Session == "no-bundle" {
			t.Errorf("a refused runtime's request was served: claim %s", c.Name)
		}
	}
}

// testCA is a CA of the test's own, for --tls-mode=files (what cert-manager would issue).
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return &testCA{cert: c, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// writeServing writes a serving certificate for apiServerName signed by ca, its key and ca's
// certificate into dir, each by a rename, as the kubelet updates a mounted Secret.
func (ca *testCA) writeServing(t *testing.T, dir string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: apiServerName},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), DNSNames: []string{apiServerName},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{
		"tls.key": pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
		"tls.crt": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		"ca.crt":  ca.pem,
	} {
		tmp := filepath.Join(dir, "."+name)
		if err := os.WriteFile(tmp, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestFilesModeReloadsAndPublishes: with --tls-mode=files (what the cert-manager component
// runs), the operator serves the files' certificate, publishes --tls-ca-file in the runtime's
// namespace, and when the files change (a renewal under a new CA) serves the new certificate
// from the next handshake, without a restart, and publishes the new CA.
func TestFilesModeReloadsAndPublishes(t *testing.T) {
	e := newClaimEnv(t, "airlock-tls-files", claimEnvOptions{maxConcurrent: 5, maxPerSession: 3})
	dir := t.TempDir()
	first := newTestCA(t, "first-ca")
	first.writeServing(t, dir)
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	op := startClaimOperatorWithArgs(t, e.ns, "--api-bind-address="+addr, "--tls-mode=files",
		"--tls-cert-file="+filepath.Join(dir, "tls.crt"), "--tls-key-file="+filepath.Join(dir, "tls.key"), "--tls-ca-file="+filepath.Join(dir, "ca.crt"))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	eventually(t, 60*time.Second, "the files' CA published", func(ctx context.Context) (bool, error) {
		cm, err := kubeClient.CoreV1().ConfigMaps(e.ns).Get(ctx, cabundle.ConfigMapName, metav1.GetOptions{})
		return err == nil && cm.Data[cabundle.Key] == string(first.pem), nil
	})
	token := serviceAccountToken(t, e.ns, "agent")
	req := client.AcquireRequest{Namespace: e.ns, Runtime: "agent", Session: "files", Handle: "codegen/default", WaitSeconds: waitSeconds(0)}
	if _, _, err := client.New("https://"+addr, staticToken(token), apiHTTPClient(t, e.ns)).AcquireOnce(ctx, req); err != nil {
		t.Fatalf("with the published bundle: %v", err)
	}

	second := newTestCA(t, "second-ca")
	second.writeServing(t, dir)
	if _, err := servedSerial(addr, second.pem); err != nil {
		t.Fatalf("the first handshake after the files changed: %v, want the new certificate", err)
	}
	if _, err := servedSerial(addr, first.pem); err == nil {
		t.Error("the old CA still verifies the API after the files changed")
	}
	eventually(t, 60*time.Second, "the new CA published", func(ctx context.Context) (bool, error) {
		cm, err := kubeClient.CoreV1().ConfigMaps(e.ns).Get(ctx, cabundle.ConfigMapName, metav1.GetOptions{})
		return err == nil && cm.Data[cabundle.Key] == string(second.pem), nil
	})
	select {
	case <-op.done:
		t.Fatalf("the operator exited: %v", op.exitErr)
	default:
	}
	if b, err := os.ReadFile(op.log); err != nil || !strings.Contains(string(b), "Reloaded the serving certificate") {
		t.Errorf("the operator's log does not say it reloaded the certificate (%v)", err)
	}
}
