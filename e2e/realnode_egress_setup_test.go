//go:build e2e && realnode

package e2e

// The egress suite's setup (issue 25, docs/egress.md "The real-node bypass suite"): a stand-in
// internet inside the node, the gateway installed by the Helm release with the suite's resolver,
// the internet's CA and credential (the terminating CA and the sandboxes' bundle are the
// operator's), and a namespace with a class that has egress.

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
)

const (
	// internetAddress is the stand-in internet's address as the test resolver answers it: a
	// public-looking address (not private, not the cluster's), which kube-proxy routes to the
	// internet's pod (an externalIP of its Service). Nothing outside the node is reached.
	internetAddress = "11.0.0.10"
	// The gateway's files, from the Secret and ConfigMap the suite makes in airlock-system; the
	// internet's CA is also the operator's public roots (--egress-ca-roots-file).
	egressTestCredSecret   = "airlock-e2e-egress-credential"
	egressTestUpstreamCA   = "airlock-e2e-egress-upstream-ca"
	egressTestCredFileName = "airlock-e2e-credential"
	// The operator's terminating CA and the sandboxes' bundle (the chart's egress.managedCA).
	egressCASecret = "airlock-egress-ca"
	egressBundle   = "airlock-egress-ca"
)

// egressFixture is what the suite set up.
type egressFixture struct {
	internetNS   string
	internetPod  string // its name
	internetIP   string // its pod IP
	resolverIP   string // the test resolver Service's cluster IP (the gateway's --dns-server)
	credential   string // the Authorization value the gateway injects for creds/git.internet.test
	internetCA   []byte // PEM: the stand-in internet's CA (a "public" root in this world)
	terminateCAs []byte // PEM: the operator's terminating CAs (its Secret's ca.crt) as installed
	apiServerIP  string // the kubernetes Service's cluster IP
	gatewayIP    string // the gateway Service's cluster IP
	gatewayPods  []corev1.Pod
	clusterCIDRs []string
}

// egressCA is a CA and its key, PEM-encoded.
type egressCA struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
	keyPEM  []byte
}

func newEgressCA(t *testing.T, name string) *egressCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return &egressCA{cert: cert, key: key,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})}
}

// leaf returns a serving certificate and key (PEM) for names, signed by the CA.
func (ca *egressCA) leaf(t *testing.T, names ...string) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: names[0]},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		DNSNames: names, KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}

// internetNames is the test resolver's table: the stand-in internet's names, and names that
// resolve where a sandbox must never get through an allowed name (rebinding).
func internetNames(apiServerIP string) map[string][]string {
	names := map[string][]string{}
	for _, n := range []string{"allowed", "plain", "goproxy", "creds", "git", "unlisted"} {
		names[n+".internet.test"] = []string{internetAddress}
	}
	names["loopback.internet.test"] = []string{"127.0.0.1"}
	names["private.internet.test"] = []string{"10.1.2.3"}
	names["metadata.internet.test"] = []string{"169.254.169.254"}
	names["apiserver.internet.test"] = []string{apiServerIP}
	names["mixed.internet.test"] = []string{internetAddress, "127.0.0.1"}
	return names
}

// egressClassSpec is the suite's class policy: what the techniques try to get around.
func egressClassSpec() *airlockv1alpha1.SandboxEgress {
	https := []airlockv1alpha1.EgressPort{443}
	e := &airlockv1alpha1.SandboxEgress{Hosts: []airlockv1alpha1.EgressHost{
		{Host: "allowed.internet.test", Ports: https},
		{Host: "plain.internet.test", Ports: []airlockv1alpha1.EgressPort{80}},
		{Host: "goproxy.internet.test", Ports: https},
	}}
	for _, n := range []string{"loopback", "private", "metadata", "apiserver", "mixed"} {
		e.Hosts = append(e.Hosts, airlockv1alpha1.EgressHost{Host: n + ".internet.test", Ports: []airlockv1alpha1.EgressPort{443, 80}})
	}
	e.Credentials = []airlockv1alpha1.EgressCredential{
		{Host: "creds.internet.test", Port: 443, Methods: []airlockv1alpha1.EgressMethod{"GET"}, PathPrefixes: []airlockv1alpha1.EgressPathPrefix{"/allowed"},
			Header: "Authorization", SecretName: egressTestCredFileName},
		{Host: "git.internet.test", Port: 443, Methods: []airlockv1alpha1.EgressMethod{"GET", "POST"}, PathPrefixes: []airlockv1alpha1.EgressPathPrefix{"/repo.git"},
			Header: "Authorization", SecretName: egressTestCredFileName},
	}
	return e
}

// setUpEgress starts the stand-in internet and installs the gateway with the Helm release
// (egress.enabled, its managed CA by default, and the suite's flags: its resolver, cluster
// ranges, upstream CA and credential; the operator's public roots, the internet's CA). When the
// test ends the release's extra flags and volumes are taken out again (the gateway, and the
// operator's CA, stay).
func setUpEgress(t *testing.T) *egressFixture {
	t.Helper()
	ctx := context.Background()
	if install := os.Getenv("AIRLOCK_E2E_INSTALL"); install != "" && install != "helm" {
		t.Fatalf("AIRLOCK_E2E_INSTALL=%s: the egress suite installs the gateway with the Helm release (the default install)", install)
	}
	f := &egressFixture{apiServerIP: serviceIP(t, "default", "kubernetes")}
	f.clusterCIDRs = clusterCIDRs(t)
	f.resolverIP = resolverAddress(t)
	internetCA := newEgressCA(t, "airlock e2e internet CA")
	f.internetCA = internetCA.certPEM
	f.credential = "Bearer e2e-" + randomHex(t, 16)

	f.internetNS = newNamespace(t, "airlock-rn-internet")
	gitURL := startGitServer(t, f.internetNS)
	certPEM, keyPEM := internetCA.leaf(t, "*.internet.test", "internet.test")
	f.internetPod, f.internetIP = startInternet(t, f, string(certPEM), string(keyPEM), gitURL)

	// The gateway's files in its namespace.
	secrets := []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Name: egressTestCredSecret}, Data: map[string][]byte{"value": []byte(f.credential)}},
	}
	for _, s := range secrets {
		applySecret(t, operatorNamespace, s)
	}
	applyConfigMap(t, operatorNamespace, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: egressTestUpstreamCA}, Data: map[string]string{"ca.crt": string(internetCA.certPEM)}})
	t.Cleanup(func() {
		for _, s := range secrets {
			_ = kubeClient.CoreV1().Secrets(operatorNamespace).Delete(context.Background(), s.Name, metav1.DeleteOptions{})
		}
		_ = kubeClient.CoreV1().ConfigMaps(operatorNamespace).Delete(context.Background(), egressTestUpstreamCA, metav1.DeleteOptions{})
	})

	gatewayArgs := []string{
		"--dns-server=" + net.JoinHostPort(f.resolverIP, "53"),
		"--cluster-cidrs=" + strings.Join(f.clusterCIDRs, ","),
		"--upstream-ca-file=/etc/airlock-e2e/upstream/ca.crt",
		"--credentials-dir=/etc/airlock-e2e/credentials",
	}
	volumes := []corev1.Volume{
		{Name: "upstream-ca", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: egressTestUpstreamCA}}}},
		{Name: "credentials", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{{
			Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: egressTestCredSecret},
				Items: []corev1.KeyToPath{{Key: "value", Path: egressTestCredFileName}}},
		}}}}},
	}
	mounts := []corev1.VolumeMount{
		{Name: "upstream-ca", MountPath: "/etc/airlock-e2e/upstream", ReadOnly: true},
		{Name: "credentials", MountPath: "/etc/airlock-e2e/credentials", ReadOnly: true},
	}
	// The operator's public roots: the internet's CA, from the same ConfigMap.
	operator := egressOperatorValues{
		args:    []string{"--egress-ca-roots-file=/etc/airlock-e2e/roots/ca.crt"},
		volumes: []corev1.Volume{volumes[0]},
		mounts:  []corev1.VolumeMount{{Name: volumes[0].Name, MountPath: "/etc/airlock-e2e/roots", ReadOnly: true}},
	}
	helmEgress(t, true, gatewayArgs, volumes, mounts, operator)
	t.Cleanup(func() {
		if t.Failed() {
			logOperatorLines(t, "airlock-rn-egress", 300) // before the rollback replaces its pods
		}
		helmEgress(t, false, nil, nil, nil, egressOperatorValues{})
	})
	// The operator makes the terminating CA (nothing of the suite's); the gateway follows its
	// mounted files, but a Secret made after the gateway's pod started reaches the mount only at
	// the kubelet's next sync of the pod: restart the gateway once the CA is there, so that the
	// run does not wait on that.
	f.terminateCAs = waitEgressCA(t)
	restartDeployment(t, operatorNamespace, "airlock-egress")
	f.gatewayIP = serviceIP(t, operatorNamespace, "airlock-egress")
	pods, err := kubeClient.CoreV1().Pods(operatorNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=egress"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			f.gatewayPods = append(f.gatewayPods, p)
		}
	}
	if len(f.gatewayPods) == 0 {
		t.Fatal("no running gateway pod")
	}
	return f
}

// egressOperatorValues are the operator's extra flags, volumes and mounts the suite installs.
type egressOperatorValues struct {
	args    []string
	volumes []corev1.Volume
	mounts  []corev1.VolumeMount
}

// waitEgressCA waits for the operator's terminating CA and returns its Secret's bundle.
func waitEgressCA(t *testing.T) []byte {
	t.Helper()
	var bundle []byte
	eventually(t, 2*time.Minute, "the operator's terminating CA", func(ctx context.Context) (bool, error) {
		s, err := kubeClient.CoreV1().Secrets(operatorNamespace).Get(ctx, egressCASecret, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		if s.Type != corev1.SecretTypeTLS || len(s.Data["tls.crt"]) == 0 || len(s.Data["tls.key"]) == 0 || len(s.Data["ca.crt"]) == 0 {
			return false, fmt.Errorf("the operator's CA Secret: type %s, keys %d", s.Type, len(s.Data))
		}
		bundle = s.Data["ca.crt"]
		return true, nil
	})
	return bundle
}

// checkEgressBundle: the operator published the bundle ConfigMap in the claims' namespace, with
// its label, holding its terminating CAs and then the public roots it was given (the internet's
// CA), as the claim's record names it.
func checkEgressBundle(t *testing.T, f *egressFixture, ns, claim string) {
	t.Helper()
	c, err := airlockClient.AirlockV1alpha1().SandboxClaims(ns).Get(context.Background(), claim, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Status.Frozen == nil || c.Status.Frozen.Egress == nil || c.Status.Frozen.Egress.Gateway.CABundleConfigMap != egressBundle {
		t.Fatalf("claim %s: not frozen with the bundle %s", claim, egressBundle)
	}
	eventually(t, time.Minute, "the operator's bundle in "+ns, func(ctx context.Context) (bool, error) {
		cm, err := kubeClient.CoreV1().ConfigMaps(ns).Get(ctx, egressBundle, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		if cm.Labels["airlock.dev/egress-ca-bundle"] != "true" {
			return false, fmt.Errorf("bundle labels %v", cm.Labels)
		}
		return cm.Data["ca.crt"] == string(f.terminateCAs)+string(f.internetCA), nil
	})
}

// helmEgress upgrades the release (its other values kept) with the gateway on and these flags,
// volumes and the operator's extra flags, volumes and mounts; with set false, the suite's are
// taken out again (egress stays enabled, with the operator's CA).
func helmEgress(t *testing.T, set bool, args []string, volumes []corev1.Volume, mounts []corev1.VolumeMount, operator egressOperatorValues) {
	t.Helper()
	js := func(v any) string { // a JSON list; a nil slice is the empty list
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) == "null" {
			return "[]"
		}
		return string(b)
	}
	// The operator logs at -v=2 while the suite's gateway is on: how its reads of the gateway's
	// decisions end and start again (pkg/controller/record, gateway.go) are then in its log,
	// which explainEgressRecord prints when the record misses them.
	verbosity := "2"
	if !set {
		args, volumes, mounts, operator, verbosity = nil, nil, nil, egressOperatorValues{}, "null"
	}
	cmdArgs := []string{"upgrade", helmRelease, filepath.Join(repoRoot, "manifests", "chart", "airlock"),
		"--namespace", operatorNamespace, "--reuse-values", "--wait", "--timeout", "4m",
		"--set", "egress.enabled=true",
		// Said, not left to the chart's default: --reuse-values keeps the installed chart's.
		"--set", "egress.managedCA=true",
		"--set-json", "egress.extraArgs=" + js(args),
		"--set-json", "egress.extraVolumes=" + js(volumes),
		"--set-json", "egress.extraVolumeMounts=" + js(mounts),
		"--set-json", "operator.extraArgs=" + js(operator.args),
		"--set-json", "operator.extraVolumes=" + js(operator.volumes),
		"--set-json", "operator.extraVolumeMounts=" + js(operator.mounts),
		"--set-json", "operator.logVerbosity=" + verbosity,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, helmPath(), cmdArgs...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+os.Getenv("KUBECONFIG"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(cmdArgs, " "), err, out)
	}
	waitRolledOut(t, operatorNamespace, "airlock-operator")
	waitRolledOut(t, operatorNamespace, "airlock-egress")
}

// helmPath is $HELM, else AIRLOCK_BIN_DIR's or the repository's bin/helm (as hack/e2e-node.sh).
func helmPath() string {
	if h := os.Getenv("HELM"); h != "" {
		return h
	}
	if d := os.Getenv("AIRLOCK_BIN_DIR"); d != "" {
		return filepath.Join(d, "helm")
	}
	return filepath.Join(repoRoot, "bin", "helm")
}

// restartDeployment rolls the Deployment's pods (as `kubectl rollout restart`) and waits.
func restartDeployment(t *testing.T, ns, name string) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"airlock.dev/e2e-restarted-at":%q}}}}}`, time.Now().Format(time.RFC3339Nano))
	if _, err := kubeClient.AppsV1().Deployments(ns).Patch(context.Background(), name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("restarting %s/%s: %v", ns, name, err)
	}
	waitRolledOut(t, ns, name)
}

// waitRolledOut waits until the Deployment's controller has seen its latest spec and every
// replica is updated and available, with no old pod left running.
func waitRolledOut(t *testing.T, ns, name string) {
	t.Helper()
	eventually(t, 4*time.Minute, "Deployment "+ns+"/"+name+" rolled out", func(ctx context.Context) (bool, error) {
		d, err := kubeClient.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		want := ptr.Deref(d.Spec.Replicas, 1)
		return d.Status.ObservedGeneration == d.Generation && d.Status.UpdatedReplicas == want &&
			d.Status.AvailableReplicas == want && d.Status.Replicas == want, nil
	})
}

// clusterCIDRs is the node's pod range and the cluster's Service range (the gateway's
// --cluster-cidrs).
func clusterCIDRs(t *testing.T) []string {
	t.Helper()
	ctx := context.Background()
	var out []string
	nodes, err := kubeClient.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		out = append(out, n.Spec.PodCIDRs...)
	}
	sc, err := kubeClient.NetworkingV1().ServiceCIDRs().Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the default ServiceCIDR: %v", err)
	}
	out = append(out, sc.Spec.CIDRs...)
	return out
}

// resolverAddress is the test resolver Service's cluster IP: fixed (the gateway is given it
// before the Service exists), 53.53 in the Service range's last two octets.
func resolverAddress(t *testing.T) string {
	t.Helper()
	sc, err := kubeClient.NetworkingV1().ServiceCIDRs().Get(context.Background(), "kubernetes", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range sc.Spec.CIDRs {
		p, err := netip.ParsePrefix(c)
		if err != nil || !p.Addr().Is4() || p.Bits() > 16 {
			continue
		}
		a := p.Masked().Addr().As4()
		a[2], a[3] = 53, 53
		return netip.AddrFrom4(a).String()
	}
	t.Fatalf("no IPv4 Service range of /16 or wider in %v", sc.Spec.CIDRs)
	return ""
}

func randomHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", b)
}

// startGitServer runs a git server (busybox httpd with git http-backend as CGI, in the sandbox
// image, which has both) with one bare repository repo.git holding one commit on main, pushes
// allowed; it returns its base URL (plain HTTP: the internet's TLS front is before it).
func startGitServer(t *testing.T, ns string) string {
	t.Helper()
	script := `set -e
export HOME=/tmp
mkdir -p /tmp/www/cgi-bin /tmp/repos
git init -q --bare /tmp/repos/repo.git
git -C /tmp/repos/repo.git config http.receivepack true
git init -q /tmp/seed
cd /tmp/seed
echo "hello from the stand-in git server" > README
git add README
git -c user.email=e2e@internet.test -c user.name=e2e commit -qm seed
git push -q /tmp/repos/repo.git HEAD:refs/heads/main
git -C /tmp/repos/repo.git symbolic-ref HEAD refs/heads/main
printf '#!/bin/sh\nexport GIT_PROJECT_ROOT=/tmp/repos GIT_HTTP_EXPORT_ALL=1 REMOTE_USER=e2e HOME=/tmp\nexec git http-backend\n' > /tmp/www/cgi-bin/git
chmod +x /tmp/www/cgi-bin/git
exec busybox httpd -f -p 8080 -h /tmp/www`
	pod := restrictedPod("git", map[string]string{"app": "git"}, realnodeSandboxImage(), nil)
	pod.Spec.RestartPolicy = corev1.RestartPolicyAlways
	pod.Spec.Containers[0].Command = []string{"bash", "-c", script}
	pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](1) // busybox httpd as PID 1 ignores SIGTERM
	pod.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}
	pod.Spec.Containers[0].ReadinessProbe = &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/cgi-bin/git/repo.git/info/refs", Port: intstr.FromInt32(8080)}},
		PeriodSeconds: 1,
	}
	ip := startReadyPod(t, ns, pod)
	return "http://" + net.JoinHostPort(ip, "8080")
}

// startInternet runs the stand-in internet (runtimeclient internet) with its Services: one with
// internetAddress as external IP (443 and 80), and the test resolver at the fixed address.
func startInternet(t *testing.T, f *egressFixture, certPEM, keyPEM, gitURL string) (string, string) {
	t.Helper()
	plan, err := json.Marshal(map[string]any{"certPEM": certPEM, "keyPEM": keyPEM, "credential": f.credential,
		"names": internetNames(f.apiServerIP), "gitBackend": gitURL})
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "internet"}
	pod := restrictedPod("internet", labels, realnodeClientImage(), []string{"internet", "-plan", string(plan)})
	pod.Spec.RestartPolicy = corev1.RestartPolicyAlways
	pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](1)
	pod.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "https", ContainerPort: 8443}, {Name: "http", ContainerPort: 8080}, {Name: "dns", ContainerPort: 5353, Protocol: corev1.ProtocolUDP}}
	pod.Spec.Containers[0].ReadinessProbe = &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(8080)}},
		PeriodSeconds: 1,
	}
	ip := startReadyPod(t, f.internetNS, pod)
	svcs := []*corev1.Service{
		{ObjectMeta: metav1.ObjectMeta{Name: "internet"}, Spec: corev1.ServiceSpec{Selector: labels, ExternalIPs: []string{internetAddress},
			Ports: []corev1.ServicePort{{Name: "https", Port: 443, TargetPort: intstr.FromString("https")}, {Name: "http", Port: 80, TargetPort: intstr.FromString("http")}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "resolver"}, Spec: corev1.ServiceSpec{Selector: labels, ClusterIP: f.resolverIP,
			Ports: []corev1.ServicePort{{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromString("dns")}}}},
	}
	for _, svc := range svcs {
		// A previous run's resolver Service may still hold the fixed address while its namespace
		// goes (this test deletes its own first, when it ends).
		logged := false
		eventually(t, 3*time.Minute, "Service "+svc.Name+" created", func(ctx context.Context) (bool, error) {
			_, err := kubeClient.CoreV1().Services(f.internetNS).Create(ctx, svc, metav1.CreateOptions{})
			if err != nil && !logged {
				t.Logf("creating Service %s: %v (retrying)", svc.Name, err)
				logged = true
			}
			return err == nil, nil
		})
		t.Cleanup(func() {
			_ = kubeClient.CoreV1().Services(f.internetNS).Delete(context.Background(), svc.Name, metav1.DeleteOptions{})
		})
	}
	return pod.Name, ip
}

// startReadyPod creates pod in ns and waits until it is Ready; it returns its IP.
func startReadyPod(t *testing.T, ns string, pod *corev1.Pod) string {
	t.Helper()
	if _, err := kubeClient.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod %s/%s: %v", ns, pod.Name, err)
	}
	var ip string
	eventually(t, 2*time.Minute, "pod "+ns+"/"+pod.Name+" Ready", func(ctx context.Context) (bool, error) {
		p, err := kubeClient.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				ip = p.Status.PodIP
				return true, nil
			}
		}
		return false, nil
	})
	return ip
}

func applySecret(t *testing.T, ns string, s *corev1.Secret) {
	t.Helper()
	ctx := context.Background()
	_, err := kubeClient.CoreV1().Secrets(ns).Create(ctx, s, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		_, err = kubeClient.CoreV1().Secrets(ns).Update(ctx, s, metav1.UpdateOptions{})
	}
	if err != nil {
		t.Fatalf("Secret %s/%s: %v", ns, s.Name, err)
	}
}

func applyConfigMap(t *testing.T, ns string, cm *corev1.ConfigMap) {
	t.Helper()
	ctx := context.Background()
	_, err := kubeClient.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		_, err = kubeClient.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{})
	}
	if err != nil {
		t.Fatalf("ConfigMap %s/%s: %v", ns, cm.Name, err)
	}
}

// egressEnv is the sandboxes' namespace: a content volume, the agent ServiceAccount, a class with
// the suite's egress in the -go image (under runtimeClass when set, then needing a kernel of its
// own), a registry and a runtime (the CA bundle ConfigMap is the operator's, checkEgressBundle).
func newEgressEnv(t *testing.T, f *egressFixture, runtimeClass string) *realnodeEnv {
	t.Helper()
	ctx := context.Background()
	ns := newNamespace(t, "airlock-rn-egress")
	e := &realnodeEnv{ns: ns}
	e.hostDir = prepareNodeDir(t, ns)
	createContentVolume(t, ns, e.hostDir, ptr.To(corev1.HostPathDirectory))
	if _, err := kubeClient.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "agent"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	class := validClass("e2e-egress-" + ns)
	class.Spec.Image = realnodeSandboxGoImage()
	class.Spec.Ports = []airlockv1alpha1.SandboxPort{{Name: "mcp", Port: 8080}}
	class.Spec.Env = []corev1.EnvVar{{Name: "HOME", Value: "/cache/home"}}
	class.Spec.Egress = egressClassSpec()
	if runtimeClass != "" {
		class.Spec.RuntimeClassName = ptr.To(runtimeClass)
		class.Spec.Isolation = dedicatedKernel
		class.Spec.StartupTimeout = &metav1.Duration{Duration: 4 * time.Minute}
	}
	if _, err := airlockClient.AirlockV1alpha1().SandboxClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating class: %v", err)
	}
	t.Cleanup(func() {
		_ = airlockClient.AirlockV1alpha1().SandboxClasses().Delete(context.Background(), class.Name, metav1.DeleteOptions{})
	})
	e.classes = []string{class.Name}
	registry := &airlockv1alpha1.ToolRegistry{
		ObjectMeta: metav1.ObjectMeta{Name: "tools", Namespace: ns},
		Spec:       airlockv1alpha1.ToolRegistrySpec{Sandboxes: []airlockv1alpha1.RegistrySandbox{{Name: "online", Class: class.Name, MaxInstances: 3}}},
	}
	if _, err := airlockClient.AirlockV1alpha1().ToolRegistries(ns).Create(ctx, registry, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rt := &airlockv1alpha1.AgentRuntime{
		ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: ns},
		Spec: airlockv1alpha1.AgentRuntimeSpec{
			ServiceAccountName: "agent",
			ToolRegistryRef:    airlockv1alpha1.LocalObjectReference{Name: "tools"},
			Sandbox:            airlockv1alpha1.SandboxPolicy{Enabled: true, MaxConcurrent: 3, MaxPerSession: 1},
		},
	}
	if _, err := airlockClient.AirlockV1alpha1().AgentRuntimes(ns).Create(ctx, rt, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return e
}

// logOperatorLines logs, of each operator pod's log, the last n lines that name something of
// the prefix (the suite's namespaces), the gateway's decisions, warm members, or are errors: a
// failed test says what the operator did before the pods that wrote it are replaced.
func logOperatorLines(t *testing.T, prefix string, n int) {
	t.Helper()
	ctx := context.Background()
	pods, err := kubeClient.CoreV1().Pods(operatorNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=operator"})
	if err != nil {
		t.Logf("the operator's pods: %v", err)
		return
	}
	for _, p := range pods.Items {
		logs, err := kubeClient.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
		if err != nil {
			t.Logf("operator pod %s: %v", p.Name, err)
			continue
		}
		var lines []string
		for _, line := range strings.Split(string(logs), "\n") {
			if strings.Contains(line, prefix) || strings.Contains(line, "decisions") || strings.Contains(line, "warm member") || strings.HasPrefix(line, "E") {
				lines = append(lines, line)
			}
		}
		t.Logf("operator pod %s: the last %d of %d lines of note:\n%s", p.Name, min(n, len(lines)), len(lines), strings.Join(lines[max(0, len(lines)-n):], "\n"))
	}
}
