// Package manifests holds what `kubectl apply -k manifests/` installs; this test file checks the
// security properties of that install that a review could miss: least-privilege RBAC, the
// operator's PodDisruptionBudget and NetworkPolicy, and that the kustomization installs them.
package manifests

import (
	"bytes"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

// operatorLabels select the operator's pods.
var operatorLabels = map[string]string{"app.kubernetes.io/name": "airlock", "app.kubernetes.io/component": "operator"}

// document is one YAML document of a manifest file.
type document struct {
	file string
	kind string
	raw  []byte
}

// documents reads every YAML document under manifests/ that the base installs (the CRDs and the
// optional components and the Helm chart, whose templates are not YAML, excepted).
func documents(t *testing.T) []document {
	t.Helper()
	var docs []document
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (path == "crd" || path == "components" || path == "chart" || path == "records-webhook") {
			return filepath.SkipDir
		}
		if d.IsDir() || filepath.Ext(path) != ".yaml" || path == "kustomization.yaml" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, part := range bytes.Split(b, []byte("\n---\n")) {
			var meta struct {
				Kind string `json:"kind"`
			}
			if err := yaml.Unmarshal(part, &meta); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			if meta.Kind != "" {
				docs = append(docs, document{file: path, kind: meta.Kind, raw: part})
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return docs
}

func decodeAll[T any](t *testing.T, docs []document, kind string) map[string]*T {
	t.Helper()
	out := map[string]*T{}
	for _, d := range docs {
		if d.kind != kind {
			continue
		}
		obj := new(T)
		if err := yaml.UnmarshalStrict(d.raw, obj); err != nil {
			t.Fatalf("%s: %v", d.file, err)
		}
		out[d.file] = obj
	}
	return out
}

// caBundleConfigMap is the one ConfigMap name the operator may read and write in any namespace
// (the CA bundle for runtimes); servingSecret the Secret of its own CA and certificate.
const (
	caBundleConfigMap   = "airlock-ca"
	servingSecret       = "airlock-sandbox-api-tls"
	isolationKeysSecret = "airlock-isolation-signing-key"
)

// secretReads are the verbs on Secrets that no ClusterRole may grant.
var secretReads = []string{"get", "list", "watch", "update", "patch", "delete", "deletecollection", "*"}

// checkClusterRole returns what is wrong with a ClusterRole: any wildcard, any verb on Secrets
// but create, and any verb on ConfigMaps but create that is not limited to the CA bundle's name.
func checkClusterRole(role *rbacv1.ClusterRole) []string {
	var problems []string
	if role.AggregationRule != nil {
		problems = append(problems, "has an aggregationRule (its rules would be whatever other roles say)")
	}
	for i, r := range role.Rules {
		for field, values := range map[string][]string{"verbs": r.Verbs, "resources": r.Resources, "apiGroups": r.APIGroups, "nonResourceURLs": r.NonResourceURLs} {
			for _, v := range values {
				if strings.Contains(v, "*") {
					problems = append(problems, "rule "+strconv.Itoa(i)+" has the wildcard "+v+" in "+field)
				}
			}
		}
		if slices.Contains(r.APIGroups, "") && slices.Contains(r.Resources, "configmaps") && !slices.Equal(r.ResourceNames, []string{caBundleConfigMap}) {
			for _, v := range r.Verbs {
				if v != "create" {
					problems = append(problems, "rule "+strconv.Itoa(i)+" grants "+v+" on configmaps other than "+caBundleConfigMap)
				}
			}
		}
		if slices.Contains(r.APIGroups, "") && (slices.Contains(r.Resources, "secrets") || slices.Contains(r.Resources, "*")) {
			for _, v := range r.Verbs {
				if slices.Contains(secretReads, v) {
					problems = append(problems, "rule "+strconv.Itoa(i)+" grants "+v+" on secrets cluster-wide")
				}
			}
		}
	}
	return problems
}

// TestClusterRolesLeastPrivilege: no ClusterRole of the install has a wildcard verb, resource or
// API group, or lets the operator read, change or delete Secrets across the cluster.
func TestClusterRolesLeastPrivilege(t *testing.T) {
	roles := decodeAll[rbacv1.ClusterRole](t, documents(t), "ClusterRole")
	if len(roles) == 0 {
		t.Fatal("no ClusterRole found: the test reads nothing")
	}
	for file, role := range roles {
		for _, p := range checkClusterRole(role) {
			t.Errorf("%s: ClusterRole %s %s", file, role.Name, p)
		}
	}
}

// TestCheckClusterRoleCatches: the check above fails on what it must fail on (so that a passing
// TestClusterRolesLeastPrivilege means something).
func TestCheckClusterRoleCatches(t *testing.T) {
	tests := map[string]rbacv1.PolicyRule{
		"wildcard verb":      {APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"*"}},
		"wildcard resource":  {APIGroups: []string{"apps"}, Resources: []string{"*"}, Verbs: []string{"get"}},
		"wildcard group":     {APIGroups: []string{"*"}, Resources: []string{"deployments"}, Verbs: []string{"get"}},
		"get secrets":        {APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"create", "get"}},
		"list secrets":       {APIGroups: []string{""}, Resources: []string{"services", "secrets"}, Verbs: []string{"list"}},
		"watch secrets":      {APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"watch"}},
		"update secrets":     {APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"update"}},
		"patch secrets":      {APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"patch"}},
		"delete secrets":     {APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"delete"}},
		"wildcard subverbs":  {APIGroups: []string{"apps"}, Resources: []string{"deployments/*"}, Verbs: []string{"get"}},
		"nonResourceURLs  *": {NonResourceURLs: []string{"/metrics*"}, Verbs: []string{"get"}},
		"list configmaps":    {APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"list"}},
		"update configmaps of another name": {APIGroups: []string{""}, Resources: []string{"configmaps"},
			ResourceNames: []string{"kube-root-ca.crt"}, Verbs: []string{"update"}},
		"delete configmaps by two names": {APIGroups: []string{""}, Resources: []string{"configmaps"},
			ResourceNames: []string{caBundleConfigMap, "other"}, Verbs: []string{"delete"}},
	}
	for name, rule := range tests {
		t.Run(name, func(t *testing.T) {
			if p := checkClusterRole(&rbacv1.ClusterRole{Rules: []rbacv1.PolicyRule{rule}}); len(p) == 0 {
				t.Errorf("rule %+v passed the check", rule)
			}
		})
	}
	for name, ok := range map[string]rbacv1.PolicyRule{
		"create secrets":    {APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"create"}},
		"create configmaps": {APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create"}},
		"the CA bundle": {APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{caBundleConfigMap},
			Verbs: []string{"get", "list", "watch", "update", "delete"}},
	} {
		if p := checkClusterRole(&rbacv1.ClusterRole{Rules: []rbacv1.PolicyRule{ok}}); len(p) != 0 {
			t.Errorf("%s refused: %v", name, p)
		}
	}
}

// TestNamespaceRoleReadsOnlyTheKey: in its own namespace the operator may get the claim token
// key Secret by name, list, watch and update the serving certificate and the isolation signing
// keys' Secrets by name, and touch no other Secret.
func TestNamespaceRoleReadsOnlyTheKey(t *testing.T) {
	roles := decodeAll[rbacv1.Role](t, documents(t), "Role")
	allowed := map[string][]string{
		"airlock-token-key": {"get"},
		servingSecret:       {"list", "watch", "update"},
		isolationKeysSecret: {"list", "watch", "update"},
	}
	granted := map[string][]string{}
	for file, role := range roles {
		if role.Namespace != "airlock-system" {
			t.Errorf("%s: Role %s in namespace %q, want airlock-system", file, role.Name, role.Namespace)
		}
		for _, r := range role.Rules {
			if !slices.Contains(r.Resources, "secrets") {
				continue
			}
			for _, v := range r.Verbs {
				if v == "create" {
					continue
				}
				if len(r.ResourceNames) != 1 || !slices.Contains(allowed[r.ResourceNames[0]], v) {
					t.Errorf("%s: Role %s grants %s on secrets %v", file, role.Name, v, r.ResourceNames)
					continue
				}
				granted[r.ResourceNames[0]] = append(granted[r.ResourceNames[0]], v)
			}
		}
	}
	for name, verbs := range allowed {
		for _, v := range verbs {
			if !slices.Contains(granted[name], v) {
				t.Errorf("no Role lets the operator %s its Secret %s", v, name)
			}
		}
	}
}

// deploymentArgs returns the operator container's args of a Deployment manifest.
func deploymentArgs(t *testing.T, d *appsv1.Deployment) []string {
	t.Helper()
	for _, c := range d.Spec.Template.Spec.Containers {
		if c.Name == "operator" {
			return c.Args
		}
	}
	t.Fatalf("Deployment %s has no container operator", d.Name)
	return nil
}

// TestTLSOnByDefault: the base installs the operator with its own CA and serving certificate,
// never plain HTTP nor certificate files it does not mount.
func TestTLSOnByDefault(t *testing.T) {
	deployments := decodeAll[appsv1.Deployment](t, documents(t), "Deployment")
	if len(deployments) != 1 {
		t.Fatalf("%d Deployments, want 1", len(deployments))
	}
	for file, d := range deployments {
		args := deploymentArgs(t, d)
		if !slices.Contains(args, "--tls-mode=self-signed") {
			t.Errorf("%s: args %v, want --tls-mode=self-signed", file, args)
		}
		for _, a := range args {
			if strings.HasPrefix(a, "--tls-cert-file") || strings.HasPrefix(a, "--tls-key-file") || a == "--tls-mode=none" {
				t.Errorf("%s: %s in the base", file, a)
			}
		}
	}
}

// TestCertManagerComponent: the cert-manager component's Deployment patch serves the files of
// the Secret its serving Certificate fills, mounted where the flags say, for the Service's names.
func TestCertManagerComponent(t *testing.T) {
	dir := filepath.Join("components", "cert-manager")
	// certificate is what the test reads of a cert-manager Certificate.
	type certificate struct {
		Kind string `json:"kind"`
		Spec struct {
			IsCA       bool     `json:"isCA"`
			SecretName string   `json:"secretName"`
			DNSNames   []string `json:"dnsNames"`
		} `json:"spec"`
	}
	var certs []certificate
	b, err := os.ReadFile(filepath.Join(dir, "certificates.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, part := range bytes.Split(b, []byte("\n---\n")) {
		var doc certificate
		if err := yaml.Unmarshal(part, &doc); err != nil {
			t.Fatal(err)
		}
		if doc.Kind == "Certificate" && !doc.Spec.IsCA {
			certs = append(certs, doc)
		}
	}
	if len(certs) != 1 {
		t.Fatalf("%d serving Certificates, want 1", len(certs))
	}
	serving := certs[0].Spec
	want := []string{"airlock-sandbox-api.airlock-system.svc", "airlock-sandbox-api.airlock-system.svc.cluster.local", "airlock-sandbox-api.airlock-system"}
	if !slices.Equal(serving.DNSNames, want) {
		t.Errorf("serving Certificate for %v, want the Service's names %v (the defaults of --tls-sans)", serving.DNSNames, want)
	}

	b, err = os.ReadFile(filepath.Join(dir, "deployment_patch.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var patch appsv1.Deployment
	if err := yaml.UnmarshalStrict(b, &patch); err != nil {
		t.Fatal(err)
	}
	args := deploymentArgs(t, &patch)
	if !slices.Contains(args, "--tls-mode=files") {
		t.Fatalf("patch args %v, want --tls-mode=files", args)
	}
	mountOf := map[string]string{} // volume name -> mount path
	for _, c := range patch.Spec.Template.Spec.Containers {
		for _, m := range c.VolumeMounts {
			mountOf[m.Name] = m.MountPath
		}
	}
	mounted := ""
	for _, v := range patch.Spec.Template.Spec.Volumes {
		if v.Secret != nil && v.Secret.SecretName == serving.SecretName {
			mounted = mountOf[v.Name]
		}
	}
	if mounted == "" {
		t.Fatalf("the patch does not mount the Secret %s", serving.SecretName)
	}
	for flag, file := range map[string]string{"--tls-cert-file": "tls.crt", "--tls-key-file": "tls.key", "--tls-ca-file": "ca.crt"} {
		if want := flag + "=" + mounted + "/" + file; !slices.Contains(args, want) {
			t.Errorf("patch args %v, want %s", args, want)
		}
	}
	// The patch replaces the base's args whole: it must keep the base's other flags.
	base := decodeAll[appsv1.Deployment](t, documents(t), "Deployment")
	for _, d := range base {
		for _, a := range deploymentArgs(t, d) {
			if !strings.HasPrefix(a, "--tls-") && !slices.Contains(args, a) {
				t.Errorf("the patch drops the base's %s", a)
			}
		}
	}
}

// TestOperatorProtectsItself: a PodDisruptionBudget keeps one of the operator's replicas, and a
// NetworkPolicy admits the API port from any namespace, the metrics port from the monitoring
// namespace only, and nothing else.
func TestOperatorProtectsItself(t *testing.T) {
	docs := documents(t)
	pdbs := decodeAll[policyv1.PodDisruptionBudget](t, docs, "PodDisruptionBudget")
	if len(pdbs) != 1 {
		t.Fatalf("%d PodDisruptionBudgets, want 1", len(pdbs))
	}
	for file, pdb := range pdbs {
		if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() != 1 || pdb.Spec.MaxUnavailable != nil {
			t.Errorf("%s: minAvailable %v maxUnavailable %v, want minAvailable 1", file, pdb.Spec.MinAvailable, pdb.Spec.MaxUnavailable)
		}
		if pdb.Spec.Selector == nil || !maps.Equal(pdb.Spec.Selector.MatchLabels, operatorLabels) || pdb.Namespace != "airlock-system" {
			t.Errorf("%s: the budget does not select the operator's pods in airlock-system", file)
		}
	}

	policies := decodeAll[networkingv1.NetworkPolicy](t, docs, "NetworkPolicy")
	if len(policies) != 1 {
		t.Fatalf("%d NetworkPolicies, want 1", len(policies))
	}
	for file, np := range policies {
		if !maps.Equal(np.Spec.PodSelector.MatchLabels, operatorLabels) || np.Namespace != "airlock-system" {
			t.Errorf("%s: the policy does not select the operator's pods in airlock-system", file)
		}
		if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) {
			t.Errorf("%s: policyTypes %v, want [Ingress]", file, np.Spec.PolicyTypes)
		}
		opened := map[string]string{}
		for _, rule := range np.Spec.Ingress {
			if len(rule.Ports) == 0 || len(rule.From) == 0 {
				t.Errorf("%s: a rule without ports or peers admits everything: %+v", file, rule)
				continue
			}
			for _, port := range rule.Ports {
				if port.Port == nil {
					t.Errorf("%s: a rule opens every port", file)
					continue
				}
				for _, peer := range rule.From {
					switch {
					case peer.IPBlock != nil || peer.NamespaceSelector == nil:
						t.Errorf("%s: peer %+v on %s", file, peer, port.Port.String())
					case len(peer.NamespaceSelector.MatchLabels) == 0 && len(peer.NamespaceSelector.MatchExpressions) == 0:
						opened[port.Port.String()] = "any namespace"
					default:
						opened[port.Port.String()] = peer.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"]
					}
				}
			}
		}
		want := map[string]string{"api": "any namespace", "metrics": "monitoring"}
		if !maps.Equal(opened, want) {
			t.Errorf("%s: opens %v, want %v", file, opened, want)
		}
	}
}

// TestKustomizationInstallsEverything: every manifest file is in the kustomization (a new
// PodDisruptionBudget or Role that is not listed would never be installed).
func TestKustomizationInstallsEverything(t *testing.T) {
	b, err := os.ReadFile("kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Resources []string `json:"resources"`
	}
	if err := yaml.Unmarshal(b, &k); err != nil {
		t.Fatal(err)
	}
	for _, d := range documents(t) {
		if !slices.Contains(k.Resources, filepath.ToSlash(d.file)) {
			t.Errorf("%s (%s) is not a resource of manifests/kustomization.yaml", d.file, d.kind)
		}
	}
}
