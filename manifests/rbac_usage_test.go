package manifests

// Every RBAC verb the operator holds is one its code calls (issue 39; docs/security.md, "RBAC:
// only the verbs the code calls"). rbacUses lists each verb of every Role and ClusterRole bound
// to the operator's ServiceAccount, with the code path that uses it: a file of the repository
// and what it says there. The test fails on a verb granted but not listed (a right nothing
// uses), on one listed but no longer granted, and on a code path that is gone.

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

// operatorRBACFiles are the files whose Roles and ClusterRoles the operator's ServiceAccount is
// bound to: the install's and the egress component's.
var operatorRBACFiles = []string{
	"rbac/cluster_role.yaml",
	"rbac/namespace_role.yaml",
	"components/egress/operator_rbac.yaml",
	"components/egress/operator_proxy_key_rbac.yaml",
}

// rbacUse is the code that uses a verb: a file (from the repository's root) and a line of it.
type rbacUse struct {
	file, says string
}

// rbacUses maps "group/resource[@name] verb" to the code that calls it.
var rbacUses = map[string]rbacUse{
	"airlock.dev/sandboxclasses list":  {"pkg/operator/operator.go", `airlock.SandboxClasses().Informer()`},
	"airlock.dev/sandboxclasses watch": {"pkg/operator/operator.go", `airlock.SandboxClasses().Informer()`},
	"airlock.dev/toolregistries list":  {"pkg/operator/operator.go", `airlock.ToolRegistries().Informer()`},
	"airlock.dev/toolregistries watch": {"pkg/operator/operator.go", `airlock.ToolRegistries().Informer()`},
	"airlock.dev/agentruntimes list":   {"pkg/operator/operator.go", `airlock.AgentRuntimes().Informer()`},
	"airlock.dev/agentruntimes watch":  {"pkg/operator/operator.go", `airlock.AgentRuntimes().Informer()`},

	"airlock.dev/agentruntimes patch":          {"pkg/controller/agentruntime/finalizer.go", `AgentRuntimes(rt.Namespace).Patch(`},
	"airlock.dev/agentruntimes/status update":  {"pkg/controller/agentruntime/sync.go", `AgentRuntimes(rt.Namespace).UpdateStatus(`},
	"airlock.dev/toolregistries/status update": {"pkg/controller/warmpool/control.go", `ToolRegistries(reg.Namespace).UpdateStatus(`},
	"airlock.dev/sandboxclasses/status update": {"pkg/controller/sandboxclass/control.go", `SandboxClasses().UpdateStatus(`},

	"airlock.dev/sandboxclaims get":           {"pkg/controller/claim/control.go", `SandboxClaims(namespace).Get(`},
	"airlock.dev/sandboxclaims list":          {"pkg/operator/operator.go", `airlock.SandboxClaims().Informer()`},
	"airlock.dev/sandboxclaims watch":         {"pkg/operator/operator.go", `airlock.SandboxClaims().Informer()`},
	"airlock.dev/sandboxclaims create":        {"pkg/sandboxapi/acquire.go", `SandboxClaims(c.Namespace).Create(`},
	"airlock.dev/sandboxclaims update":        {"pkg/controller/claim/control.go", `SandboxClaims(claim.Namespace).Update(`},
	"airlock.dev/sandboxclaims patch":         {"pkg/sandboxapi/sessions.go", `claims.Patch(`},
	"airlock.dev/sandboxclaims delete":        {"pkg/controller/claim/control.go", `SandboxClaims(namespace).Delete(`},
	"airlock.dev/sandboxclaims/status update": {"pkg/controller/claim/control.go", `SandboxClaims(claim.Namespace).UpdateStatus(`},
	"airlock.dev/sandboxclaims/status patch":  {"pkg/sandboxapi/renewal.go", `SandboxClaims(current.Namespace).Patch(`},
	// blockOwnerDeletion (metav1.NewControllerRef sets it) on an owner needs update of its
	// finalizers where OwnerReferencesPermissionEnforcement is on.
	"airlock.dev/sandboxclaims/finalizers update":  {"pkg/sandboxpod/pod.go", `metav1.NewControllerRef(claim,`},
	"airlock.dev/agentruntimes/finalizers update":  {"pkg/sandboxapi/acquire.go", `metav1.NewControllerRef(rt,`},
	"airlock.dev/toolregistries/finalizers update": {"pkg/sandboxpod/member.go", `metav1.NewControllerRef(reg,`},

	"airlock.dev/sessionrecords create": {"pkg/controller/record/control.go", `SessionRecords(sr.Namespace).Create(`},
	"airlock.dev/sessionrecords get":    {"pkg/controller/record/control.go", `SessionRecords(namespace).Get(`},
	"airlock.dev/sessionrecords list":   {"pkg/controller/record/control.go", `SessionRecords(namespace).List(`},
	"airlock.dev/sessionrecords update": {"pkg/controller/record/control.go", `SessionRecords(sr.Namespace).Update(`},

	"/pods list":   {"pkg/operator/controllers.go", `cc.KubeInformers.Core().V1().Pods()`},
	"/pods watch":  {"pkg/operator/controllers.go", `cc.KubeInformers.Core().V1().Pods()`},
	"/pods create": {"pkg/controller/claim/children.go", `c.children.pods.Create(`},
	"/pods patch":  {"pkg/controller/claim/control.go", `Pods(pod.Namespace).Patch(`},
	"/pods delete": {"pkg/controller/claim/children.go", `c.children.pods.Delete(`},

	"apps/deployments get":    {"pkg/controller/claim/control.go", `Deployments(namespace).Get(`},
	"apps/deployments delete": {"pkg/controller/claim/control.go", `Deployments(namespace).Delete(`},

	"networking.k8s.io/networkpolicies list":   {"pkg/operator/controllers.go", `cc.KubeInformers.Networking().V1().NetworkPolicies()`},
	"networking.k8s.io/networkpolicies watch":  {"pkg/operator/controllers.go", `cc.KubeInformers.Networking().V1().NetworkPolicies()`},
	"networking.k8s.io/networkpolicies create": {"pkg/controller/claim/children.go", `c.children.networkPolicies.Create(`},
	"networking.k8s.io/networkpolicies update": {"pkg/controller/claim/children.go", `c.children.networkPolicies.Update(`},
	"networking.k8s.io/networkpolicies delete": {"pkg/controller/warmpool/sync.go", `c.policies.Delete(`},

	"batch/jobs list":   {"pkg/operator/controllers.go", `cc.KubeInformers.Batch().V1().Jobs()`},
	"batch/jobs watch":  {"pkg/operator/controllers.go", `cc.KubeInformers.Batch().V1().Jobs()`},
	"batch/jobs create": {"pkg/controller/claim/syncturns.go", `c.children.jobs.Create(`},
	"batch/jobs update": {"pkg/controller/workspacegc/collect.go", `c.jobs.Update(`},
	"batch/jobs delete": {"pkg/controller/claim/syncback.go", `c.children.jobs.Delete(`},

	"/nodes get":      {"pkg/controller/claim/nodeloss.go", `Nodes().Get(`},
	"/services list":  {"pkg/operator/operator.go", `Services().Informer()`},
	"/services watch": {"pkg/operator/operator.go", `Services().Informer()`},
	"/secrets create": {"pkg/controller/claim/children.go", `c.children.secrets.Create(`},

	"/configmaps@airlock-ca get":    {"pkg/controller/cabundle/controller.go", `configMaps.Get(ctx, b.ConfigMapName`},
	"/configmaps@airlock-ca list":   {"pkg/controller/cabundle/controller.go", `fields.OneTermEqualSelector("metadata.name", name)`},
	"/configmaps@airlock-ca watch":  {"pkg/controller/cabundle/controller.go", `fields.OneTermEqualSelector("metadata.name", name)`},
	"/configmaps@airlock-ca update": {"pkg/controller/cabundle/controller.go", `ConfigMaps(ns).Update(`},
	"/configmaps@airlock-ca delete": {"pkg/controller/cabundle/controller.go", `ConfigMaps(cm.Namespace).Delete(`},
	"/configmaps create":            {"pkg/controller/cabundle/controller.go", `configMaps.Create(`},

	// client-go's core/v1 recorder creates an event, and patches it when it repeats.
	"/events create": {"pkg/controller/claim/controller.go", `StartRecordingToSink(`},
	"/events patch":  {"pkg/controller/claim/controller.go", `StartRecordingToSink(`},
	"/events list":   {"pkg/controller/claim/control.go", `Events(pod.Namespace).List(`},

	"authentication.k8s.io/tokenreviews create": {"pkg/sandboxapi/auth.go", `TokenReviews().Create(`},

	"coordination.k8s.io/leases get":    {"pkg/operator/leaderelection.go", `resourcelock.LeaseLock{`},
	"coordination.k8s.io/leases create": {"pkg/operator/leaderelection.go", `resourcelock.LeaseLock{`},
	"coordination.k8s.io/leases update": {"pkg/operator/leaderelection.go", `l.Interface.Update(ctx, ler)`},

	"/secrets@airlock-token-key get":          {"pkg/claimtoken/claimtoken.go", `secrets.Get(ctx, SecretName,`},
	"/secrets@airlock-sandbox-api-tls list":   {"pkg/servingcert/issuer.go", `NewNamedSecretInformerFactory(client, namespace, SecretName)`},
	"/secrets@airlock-sandbox-api-tls watch":  {"pkg/servingcert/issuer.go", `NewNamedSecretInformerFactory(client, namespace, SecretName)`},
	"/secrets@airlock-sandbox-api-tls update": {"pkg/servingcert/issuer.go", `secrets.Update(ctx, secret,`},

	"/secrets@airlock-isolation-signing-key list":   {"pkg/controller/isolationkey/keys.go", `fields.OneTermEqualSelector("metadata.name", SecretName)`},
	"/secrets@airlock-isolation-signing-key watch":  {"pkg/controller/isolationkey/keys.go", `fields.OneTermEqualSelector("metadata.name", SecretName)`},
	"/secrets@airlock-isolation-signing-key update": {"pkg/controller/isolationkey/controller.go", `secrets.Update(ctx, secret,`},

	"/secrets@airlock-egress-ca list":          {"pkg/controller/egressca/controller.go", `fields.OneTermEqualSelector("metadata.name", SecretName)`},
	"/secrets@airlock-egress-ca watch":         {"pkg/controller/egressca/controller.go", `fields.OneTermEqualSelector("metadata.name", SecretName)`},
	"/secrets@airlock-egress-ca update":        {"pkg/controller/egressca/controller.go", `secrets.Update(ctx, secret,`},
	"/configmaps@airlock-egress-ca get":        {"pkg/controller/cabundle/controller.go", `configMaps.Get(ctx, b.ConfigMapName`},
	"/configmaps@airlock-egress-ca list":       {"pkg/operator/controllers.go", `cabundle.EgressBundle(`},
	"/configmaps@airlock-egress-ca watch":      {"pkg/operator/controllers.go", `cabundle.EgressBundle(`},
	"/configmaps@airlock-egress-ca update":     {"pkg/controller/cabundle/controller.go", `ConfigMaps(ns).Update(`},
	"/configmaps@airlock-egress-ca delete":     {"pkg/controller/cabundle/controller.go", `ConfigMaps(cm.Namespace).Delete(`},
	"/secrets@airlock-egress-proxy-key get":    {"pkg/claimtoken/proxy.go", `secrets.Get(ctx, ProxySecretName,`},
	"/secrets@airlock-egress-proxy-key update": {"pkg/claimtoken/proxy.go", `secrets.Update(ctx, secret,`},
}

// grantedVerbs expands the rules of every Role and ClusterRole in files into rbacUses' keys.
func grantedVerbs(t *testing.T, files []string) []string {
	t.Helper()
	var out []string
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, part := range strings.Split(string(b), "\n---\n") {
			var role struct {
				Kind  string              `json:"kind"`
				Rules []rbacv1.PolicyRule `json:"rules"`
			}
			if err := yaml.Unmarshal([]byte(part), &role); err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			if role.Kind != "Role" && role.Kind != "ClusterRole" {
				continue
			}
			for _, r := range role.Rules {
				out = append(out, ruleKeys(r)...)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// ruleKeys are a rule's "group/resource[@name] verb" keys.
func ruleKeys(r rbacv1.PolicyRule) []string {
	names := r.ResourceNames
	if len(names) == 0 {
		names = []string{""}
	}
	var out []string
	for _, g := range r.APIGroups {
		for _, res := range r.Resources {
			for _, n := range names {
				for _, v := range r.Verbs {
					key := g + "/" + res
					if n != "" {
						key += "@" + n
					}
					out = append(out, key+" "+v)
				}
			}
		}
	}
	return out
}

func TestEveryOperatorVerbIsUsed(t *testing.T) {
	granted := grantedVerbs(t, operatorRBACFiles)
	for _, key := range granted {
		if _, ok := rbacUses[key]; !ok {
			t.Errorf("the operator holds %q, which no code path listed here uses: drop the verb, or list its caller", key)
		}
	}
	for key, use := range rbacUses {
		if !slices.Contains(granted, key) {
			t.Errorf("%q is listed as used (%s) but no longer granted: drop it from rbacUses", key, use.file)
			continue
		}
		b, err := os.ReadFile(filepath.Join("..", use.file))
		if err != nil {
			t.Errorf("%q: %v", key, err)
			continue
		}
		if !strings.Contains(string(b), use.says) {
			t.Errorf("%q: %s no longer says %q: find the code that uses it, or drop the verb", key, use.file, use.says)
		}
	}
	if len(granted) < 40 {
		t.Errorf("read only %d verbs from %v: the files moved?", len(granted), operatorRBACFiles)
	}
}
