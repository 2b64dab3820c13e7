//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/util/retry"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/claimname"
	"github.com/airlock-dev/airlock/pkg/claimtoken"
	"github.com/airlock-dev/airlock/pkg/client"
	"github.com/airlock-dev/airlock/pkg/controller/cabundle"
	"github.com/airlock-dev/airlock/pkg/controller/isolationkey"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
	"github.com/airlock-dev/airlock/pkg/servingcert"
	"github.com/airlock-dev/airlock/pkg/workspace"
)

const (
	operatorNamespaceName  = "airlock-system"
	operatorServiceAccount = "airlock-operator"
)

// canI asks the API server, as kubectl auth can-i does, whether the operator's ServiceAccount
// may verb resource in ns, and returns kubectl's answer ("yes" or "no").
func canI(t *testing.T, ctx context.Context, verb, resource, ns string) string {
	t.Helper()
	out, err := kubectl(ctx, "auth", "can-i", verb, resource, "-n", ns,
		"--as=system:serviceaccount:"+operatorNamespaceName+":"+operatorServiceAccount)
	answer := strings.TrimSpace(out)
	// can-i exits 1 for "no".
	if err != nil && answer != "no" {
		t.Fatalf("kubectl auth can-i %s %s -n %s: %v", verb, resource, ns, err)
	}
	return answer
}

// TestOperatorCannotReadSecrets: as installed by the manifests, the operator's ServiceAccount can
// create Secrets in any namespace (each claim's token) but not get, list, watch, update, patch or
// delete them; in its own namespace it can get its key Secret, and no other.
func TestOperatorCannotReadSecrets(t *testing.T) {
	checkOperatorCannotReadSecrets(t)
}

// checkOperatorCannotReadSecrets is TestOperatorCannotReadSecrets, for the real node's suite too.
func checkOperatorCannotReadSecrets(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	other := newNamespace(t, "airlock-rbac")
	for _, verb := range []string{"get", "list", "watch", "update", "patch", "delete", "deletecollection"} {
		if got := canI(t, ctx, verb, "secrets", other); got != "no" {
			t.Errorf("can-i %s secrets -n %s: %q, want no", verb, other, got)
		}
	}
	if got := canI(t, ctx, "create", "secrets", other); got != "yes" {
		t.Errorf("can-i create secrets -n %s: %q, want yes", other, got)
	}
	if got := canI(t, ctx, "get", "secrets/"+claimtoken.SecretName, operatorNamespaceName); got != "yes" {
		t.Errorf("can-i get its key Secret: %q, want yes", got)
	}
	for _, res := range []string{"secrets/another-secret", "secrets"} {
		if got := canI(t, ctx, "get", res, operatorNamespaceName); got != "no" {
			t.Errorf("can-i get %s -n %s: %q, want no", res, operatorNamespaceName, got)
		}
	}
	if got := canI(t, ctx, "list", "secrets", operatorNamespaceName); got != "no" {
		t.Errorf("can-i list secrets -n %s: %q, want no", operatorNamespaceName, got)
	}
	// Its serving certificate's Secret, by name only (the informer's list and watch carry a
	// metadata.name field selector, which RBAC checks against the name); read from that cache
	// only, never got.
	for _, verb := range []string{"list", "watch", "update"} {
		if got := canI(t, ctx, verb, "secrets/"+servingcert.SecretName, operatorNamespaceName); got != "yes" {
			t.Errorf("can-i %s its serving certificate Secret: %q, want yes", verb, got)
		}
	}
	if got := canI(t, ctx, "get", "secrets/"+servingcert.SecretName, operatorNamespaceName); got != "no" {
		t.Errorf("can-i get its serving certificate Secret: %q, want no (nothing gets it)", got)
	}
	// The isolation signing keys' Secret likewise: the leader's informer, by name; never got.
	for _, verb := range []string{"list", "watch", "update"} {
		if got := canI(t, ctx, verb, "secrets/"+isolationkey.SecretName, operatorNamespaceName); got != "yes" {
			t.Errorf("can-i %s its isolation signing keys' Secret: %q, want yes", verb, got)
		}
	}
	for _, verb := range []string{"get", "delete", "patch"} {
		if got := canI(t, ctx, verb, "secrets/"+isolationkey.SecretName, operatorNamespaceName); got != "no" {
			t.Errorf("can-i %s its isolation signing keys' Secret: %q, want no", verb, got)
		}
	}
	// ConfigMaps: the CA bundle airlock-ca in any namespace, no other (session records are
	// SessionRecords, an RBAC of their own).
	for _, verb := range []string{"get", "list", "watch", "update", "delete"} {
		if got := canI(t, ctx, verb, "configmaps/"+cabundle.ConfigMapName, other); got != "yes" {
			t.Errorf("can-i %s configmaps/%s -n %s: %q, want yes", verb, cabundle.ConfigMapName, other, got)
		}
		for _, res := range []string{"configmaps", "configmaps/kube-root-ca.crt"} {
			if got := canI(t, ctx, verb, res, other); got != "no" {
				t.Errorf("can-i %s %s -n %s: %q, want no", verb, res, other, got)
			}
		}
	}
	// SessionRecords: created, read, listed and updated (appended: the CRD's rules); never
	// watched, patched or deleted (they go with their owner).
	for verb, want := range map[string]string{"create": "yes", "get": "yes", "list": "yes", "update": "yes",
		"watch": "no", "patch": "no", "delete": "no", "deletecollection": "no"} {
		if got := canI(t, ctx, verb, "sessionrecords.airlock.dev", other); got != want {
			t.Errorf("can-i %s sessionrecords -n %s: %q, want %s", verb, other, got, want)
		}
	}
}

// operatorKubeconfig writes a kubeconfig that authenticates as the operator's ServiceAccount
// (a token from the TokenRequest API), for the suite's cluster.
func operatorKubeconfig(t *testing.T) string {
	t.Helper()
	tr, err := kubeClient.CoreV1().ServiceAccounts(operatorNamespaceName).CreateToken(context.Background(), operatorServiceAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptrInt64(3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a token for the operator's ServiceAccount: %v", err)
	}
	cluster := &clientcmdapi.Cluster{Server: restConfig.Host, CertificateAuthority: restConfig.CAFile, CertificateAuthorityData: restConfig.CAData}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["e2e"] = cluster
	cfg.AuthInfos["operator"] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	cfg.Contexts["operator"] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: "operator"}
	cfg.CurrentContext = "operator"
	path := filepath.Join(t.TempDir(), "operator.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestOperatorRunsWithItsRBAC: an operator that runs as its ServiceAccount, with exactly the
// rights the manifests give it, serves a whole sandbox lifecycle: the key Secret, a claim, its
// children (the token Secret created, never read), Bound, the derived Authorization header (equal
// to what the sandbox mounts, whatever Secret somebody planted under the claim's name), renew,
// close, reaping with sync-back, deletion.
// checkRenewalWrites: a renewal that must write (the claim bound 20 minutes ago, as the suite's
// administrator says, of a runtime idle after 30) writes status.lastUsedAt, as the operator's
// ServiceAccount (a merge patch of sandboxclaims/status), and leaves the claim's record as it was.
// The Sandbox API reads the claim from its cache: renewed until the write shows.
func checkRenewalWrites(t *testing.T, ctx context.Context, c *client.Client, ns, name string) {
	t.Helper()
	claims := airlockClient.AirlockV1alpha1().SandboxClaims(ns)
	var frozen *airlockv1alpha1.FrozenSandbox
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cl, err := claims.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		frozen = cl.Status.Frozen
		cl.Status.BoundAt, cl.Status.LastUsedAt = &metav1.Time{Time: time.Now().Add(-20 * time.Minute)}, nil
		_, err = claims.UpdateStatus(ctx, cl, metav1.UpdateOptions{})
		return err
	})
	if err != nil || frozen == nil {
		t.Fatalf("backdating the claim's Bound: %v (record %v)", err, frozen)
	}
	eventually(t, time.Minute, "a renewal that writes status.lastUsedAt", func(ctx context.Context) (bool, error) {
		if err := c.Renew(ctx, client.RenewRequest{Namespace: ns, Runtime: "agent", Session: "session-1", Handle: "codegen/default"}); err != nil {
			return false, fmt.Errorf("renew: %w", err)
		}
		cl, err := claims.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if cl.Status.LastUsedAt == nil {
			return false, nil
		}
		if !apiequality.Semantic.DeepEqual(cl.Status.Frozen, frozen) {
			return false, fmt.Errorf("the renewal changed the claim's record: %+v, was %+v", cl.Status.Frozen, frozen)
		}
		return true, nil
	})
}

func TestOperatorRunsWithItsRBAC(t *testing.T) {
	e := newClaimEnv(t, "airlock-rbac-run", claimEnvOptions{maxConcurrent: 5, maxPerSession: 3, targetPath: "projects/rbac"})
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	// The Lease in the operator's namespace (its Role grants Leases there only), under a name of
	// this test's own; the last --kubeconfig wins.
	kubeconfig := operatorKubeconfig(t)
	op := startOperator(t, operatorNamespaceName, "airlock-e2e-"+e.ns,
		"--sync-image="+e2eImage(), "--api-bind-address="+addr, "--kubeconfig="+kubeconfig)
	op.waitReady(t)
	// The CA bundle in the runtime's namespace: the operator, as its ServiceAccount, made its CA
	// and published it.
	c := client.New("https://"+addr, staticToken(serviceAccountToken(t, e.ns, "agent")), apiHTTPClient(t, e.ns))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// Somebody who can create Secrets in the namespace plants one under the claim's predictable
	// name, with a token they know. The operator, which cannot read it, must not use it.
	name := claimname.For("agent", "session-1", "codegen/default")
	planted := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, StringData: map[string]string{sandboxpod.TokenKey: "planted-token"}}
	if _, err := kubeClient.CoreV1().Secrets(e.ns).Create(ctx, planted, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	req := client.AcquireRequest{Namespace: e.ns, Runtime: "agent", Session: "session-1", Handle: "codegen/default", WaitSeconds: waitSeconds(90)}
	got, err := c.Acquire(ctx, req)
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	secret := claimSecret(t, ctx, e.ns, name)
	if want := "Bearer " + string(secret.Data[sandboxpod.TokenKey]); got.Claim != name || got.Headers["Authorization"] != want || len(want) < 40 {
		t.Errorf("acquire answer %+v: want claim %s with the token its sandbox mounts", got, name)
	}
	d, err := kubeClient.CoreV1().Pods(e.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if mounted := tokenVolumeSecret(d); mounted != secret.Name || mounted == planted.Name {
		t.Errorf("the sandbox mounts Secret %q, want the operator's %q (not the planted %q)", mounted, secret.Name, planted.Name)
	}
	if _, err := kubeClient.CoreV1().Secrets(operatorNamespaceName).Get(ctx, claimtoken.SecretName, metav1.GetOptions{}); err != nil {
		t.Errorf("the key Secret: %v", err)
	}
	if err := c.Renew(ctx, client.RenewRequest{Namespace: e.ns, Runtime: "agent", Session: "session-1", Handle: "codegen/default"}); err != nil {
		t.Fatalf("renew: %v", err)
	}
	checkRenewalWrites(t, ctx, c, e.ns, name)
	if _, err := c.CloseSession(ctx, client.SessionRequest{Namespace: e.ns, Runtime: "agent", Session: "session-1"}); err != nil {
		t.Fatalf("close: %v", err)
	}
	e.waitGone(t, name, 120*time.Second)

	// It ran as its ServiceAccount (the last --kubeconfig won), and nothing it did was refused.
	b, err := os.ReadFile(op.log)
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("FLAG: --kubeconfig=%q", kubeconfig); !strings.Contains(string(b), want) {
		t.Errorf("the operator's log has no %s: it did not run with the ServiceAccount's kubeconfig", want)
	}
	// An RBAC denial names the user and what it cannot do ("... is forbidden: User \"system:
	// serviceaccount:...\" cannot create resource ..."). Other 403s are not RBAC's: the operator
	// sees every namespace, and another test's namespace being deleted refuses new objects with
	// "forbidden: unable to create new content in namespace ... because it is being terminated".
	if denied := grepLines(string(b), `forbidden: User `); denied != "" {
		t.Errorf("the operator's log shows a request RBAC refused:\n%s", denied)
	}
	// Nor did the admission policies refuse any of its writes (manifests/rbac/admission_policy*.yaml:
	// the claim's pod, token Secret, NetworkPolicy, the deny-all, the sync-back Job, the CA bundle,
	// its events): airlock's own writes are what they admit.
	if denied := grepLines(string(b), `ValidatingAdmissionPolicy`); denied != "" {
		t.Errorf("the operator's log shows a write its admission policies refused:\n%s", denied)
	}
	// Nor did the records webhook refuse any, and it was asked about them.
	checkRecordsWebhookAllowed(t, string(b), e.ns, "Pod", "Secret", "NetworkPolicy", "Job")
	// The acquire, renew and close were audited, without the session.
	audit := grepLines(string(b), `"Sandbox API audit"`)
	for _, endpoint := range []string{"acquire", "renew", "closeSession"} {
		want := fmt.Sprintf(`endpoint="%s" serviceAccount="%s/agent" namespace="%s" runtime="agent" sessionHash="%s"`,
			endpoint, e.ns, e.ns, claimname.SessionHash("session-1"))
		if !strings.Contains(audit, want) {
			t.Errorf("no audit line with %s in the operator's log; audit lines:\n%s", want, audit)
		}
	}
	if strings.Contains(string(b), "session-1") {
		t.Errorf("the operator logged the session:\n%s", grepLines(string(b), "session-1"))
	}
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestWarmPoolRunsWithItsRBAC: the operator as its ServiceAccount fills a warm pool (members,
// their key Secrets, the pool's NetworkPolicy, the namespace's deny-all) and a claim adopts a
// member (a patch of its owner and labels); closed, its kept workspace gets a resume member (the
// record annotated, the member created on the kept directory) that the next claim of the handle
// adopts (the record taken); and nothing it writes is refused by RBAC or by its admission
// policies (issue 39: the warm paths' writes are what the policies admit).
func TestWarmPoolRunsWithItsRBAC(t *testing.T) {
	e := newClaimEnv(t, "airlock-rbac-warm", claimEnvOptions{maxConcurrent: 5, maxPerSession: 3, maxInstances: 5})
	e.updateRegistry(t, func(r *airlockv1alpha1.ToolRegistry) { r.Spec.Sandboxes[0].Warm = 1 })
	kubeconfig := operatorKubeconfig(t)
	op := startOperator(t, operatorNamespaceName, "airlock-e2e-"+e.ns,
		"--sync-image="+e2eImage(), "--kubeconfig="+kubeconfig)
	op.waitReady(t)
	e.waitWarm(t, 1, 60*time.Second)
	c := e.waitPhase(t, e.createClaim(t, "session-1", "codegen/default", "").Name, airlockv1alpha1.ClaimBound, 60*time.Second)
	if c.Status.Warm == nil {
		t.Errorf("the claim was bound cold: %+v", c.Status)
	}
	e.waitWarm(t, 1, 60*time.Second) // refilled
	// A resume member (issue 39 item 5): the session closed, the pool names a member on the kept
	// workspace's record and starts it there, and the next claim of the handle adopts it and
	// takes the record: writes the policies must admit too.
	e.closeClaim(t, c.Name)
	e.waitGone(t, c.Name, 60*time.Second)
	member := e.waitResumeMember(t, waitKeptRecord(t, e.ns, workspace.DirOf(c), 30*time.Second), 60*time.Second)
	again := e.waitPhase(t, e.createClaim(t, "session-1", "codegen/default", "").Name, airlockv1alpha1.ClaimBound, 60*time.Second)
	if again.Status.Warm == nil || again.Status.Warm.Member != member.Name {
		t.Errorf("the next claim of the handle: warm %+v, want the resume member %s", again.Status.Warm, member.Name)
	}

	b, err := os.ReadFile(op.log)
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("FLAG: --kubeconfig=%q", kubeconfig); !strings.Contains(string(b), want) {
		t.Errorf("the operator's log has no %s: it did not run with the ServiceAccount's kubeconfig", want)
	}
	for _, refused := range []string{`forbidden: User `, `ValidatingAdmissionPolicy`} {
		if lines := grepLines(string(b), refused); lines != "" {
			t.Errorf("the operator's log shows a write refused:\n%s", lines)
		}
	}
	checkRecordsWebhookAllowed(t, string(b), e.ns, "Pod", "Secret", "NetworkPolicy", "Job")
}
