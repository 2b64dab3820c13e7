package manifests

import (
	"fmt"
	"slices"
	"testing"
)

// TestEgressComponent: components/egress installs the gateway as docs/egress.md says (two
// restricted replicas under their own ServiceAccount, reading claims and pods and no Secret but
// the token key, never writing), and points the operator at its Service; it composes with
// components/cert-manager.
func TestEgressComponent(t *testing.T) {
	for name, components := range map[string][]string{
		"alone":             {"components/egress"},
		"with cert-manager": {"components/cert-manager", "components/egress"},
	} {
		t.Run(name, func(t *testing.T) {
			objs := overlayBuild(t, components...)
			dep := objs["apps/v1/Deployment/airlock-system/airlock-egress"]
			if dep == nil {
				t.Fatal("no gateway Deployment")
			}
			pod := field(dep, "spec", "template", "spec").(map[string]any)
			if fmt.Sprint(field(dep, "spec", "replicas")) != "2" || pod["serviceAccountName"] != "airlock-egress" {
				t.Errorf("replicas %v, serviceAccountName %v", field(dep, "spec", "replicas"), pod["serviceAccountName"])
			}
			if sc := pod["securityContext"].(map[string]any); sc["runAsNonRoot"] != true || field(sc, "seccompProfile", "type") != "RuntimeDefault" {
				t.Errorf("pod securityContext %v", sc)
			}
			c := pod["containers"].([]any)[0].(map[string]any)
			csc := c["securityContext"].(map[string]any)
			if csc["allowPrivilegeEscalation"] != false || csc["readOnlyRootFilesystem"] != true || fmt.Sprint(field(csc, "capabilities", "drop")) != "[ALL]" {
				t.Errorf("container securityContext %v", csc)
			}
			if args := c["args"].([]any); args[0] != "egress" {
				t.Errorf("args %v", args)
			}
			if objs["policy/v1/PodDisruptionBudget/airlock-system/airlock-egress"] == nil || objs["networking.k8s.io/v1/NetworkPolicy/airlock-system/airlock-egress"] == nil {
				t.Error("no PodDisruptionBudget or NetworkPolicy for the gateway")
			}

			// The Service the operator's flag names selects the gateway's pods on port 3128.
			op := objs["apps/v1/Deployment/airlock-system/airlock-operator"]
			args := field(op, "spec", "template", "spec").(map[string]any)["containers"].([]any)[0].(map[string]any)["args"].([]any)
			if !slices.Contains(args, any("--egress-gateway-service=airlock-system/airlock-egress:3128")) {
				t.Errorf("operator args %v lack --egress-gateway-service", args)
			}
			for _, want := range []string{"--egress-ca-bundle-configmap=airlock-egress-ca", "--manage-egress-ca"} {
				if !slices.Contains(args, any(want)) {
					t.Errorf("operator args %v lack %s", args, want)
				}
			}
			checkManagedCA(t, objs, c, pod)
			if len(components) == 2 && !slices.Contains(args, any("--tls-mode=files")) {
				t.Errorf("operator args %v lost cert-manager's", args)
			}
			svc := objs["v1/Service/airlock-system/airlock-egress"]
			port := field(svc, "spec").(map[string]any)["ports"].([]any)[0].(map[string]any)
			if fmt.Sprint(port["port"]) != "3128" || port["targetPort"] != "proxy" {
				t.Errorf("service port %v", port)
			}
			sel := field(svc, "spec", "selector").(map[string]any)
			labels := field(dep, "spec", "template", "metadata", "labels").(map[string]any)
			for k, v := range sel {
				if labels[k] != v {
					t.Errorf("the Service's selector %v does not select the gateway's pods %v", sel, labels)
				}
			}

			// RBAC: read only; Secrets only the proxy key (never the token key), in the gateway's namespace.
			cr := objs["rbac.authorization.k8s.io/v1/ClusterRole//airlock-egress"]
			if cr == nil || objs["rbac.authorization.k8s.io/v1/ClusterRoleBinding//airlock-egress"] == nil || objs["rbac.authorization.k8s.io/v1/RoleBinding/airlock-system/airlock-egress"] == nil {
				t.Fatal("no ClusterRole, ClusterRoleBinding or RoleBinding airlock-egress")
			}
			// Read only, but for the claims' Warning events (their first refused hosts).
			for _, r := range cr["rules"].([]any) {
				rule := r.(map[string]any)
				if fmt.Sprint(rule["resources"]) == "[events]" {
					if fmt.Sprint(rule["apiGroups"]) != "[]" || fmt.Sprint(rule["verbs"]) != "[create patch]" {
						t.Errorf("ClusterRole rule %v: want create and patch of core events only", rule)
					}
					continue
				}
				if fmt.Sprint(rule["verbs"]) != "[list watch]" || slices.Contains(rule["resources"].([]any), any("secrets")) {
					t.Errorf("ClusterRole rule %v: want list and watch of claims and pods only", rule)
				}
			}
			role := objs["rbac.authorization.k8s.io/v1/Role/airlock-system/airlock-egress"]
			if role == nil {
				t.Fatal("no Role airlock-egress")
			}
			rules := role["rules"].([]any)
			if len(rules) != 1 || fmt.Sprint(rules[0].(map[string]any)["resourceNames"]) != "[airlock-egress-proxy-key]" || fmt.Sprint(rules[0].(map[string]any)["verbs"]) != "[list watch]" {
				t.Errorf("Role rules %v: want list and watch of the proxy key only", rules)
			}
		})
	}
}

// checkManagedCA: the gateway takes the operator's CA from the Secret airlock-egress-ca, mounted
// read-only and optional (the gateway starts before the CA exists), its signing files only; the
// operator may list, watch and update that one Secret and keep the bundle ConfigMaps of that one
// name, nothing more.
func checkManagedCA(t *testing.T, objs map[string]map[string]any, gateway map[string]any, pod map[string]any) {
	t.Helper()
	if !slices.Contains(gateway["args"].([]any), any("--terminate-ca-dir=/var/run/airlock/egress-ca")) {
		t.Errorf("gateway args %v lack --terminate-ca-dir", gateway["args"])
	}
	mounts := fmt.Sprint(gateway["volumeMounts"])
	if mounts != "[map[mountPath:/var/run/airlock/egress-ca name:terminate-ca readOnly:true]]" {
		t.Errorf("gateway mounts %s", mounts)
	}
	vols := fmt.Sprint(pod["volumes"])
	if vols != "[map[name:terminate-ca secret:map[items:[map[key:tls.crt path:tls.crt] map[key:tls.key path:tls.key]] optional:true secretName:airlock-egress-ca]]]" {
		t.Errorf("gateway volumes %s", vols)
	}
	role := objs["rbac.authorization.k8s.io/v1/Role/airlock-system/airlock-operator-egress"]
	cr := objs["rbac.authorization.k8s.io/v1/ClusterRole//airlock-operator-egress"]
	if role == nil || cr == nil || objs["rbac.authorization.k8s.io/v1/RoleBinding/airlock-system/airlock-operator-egress"] == nil || objs["rbac.authorization.k8s.io/v1/ClusterRoleBinding//airlock-operator-egress"] == nil {
		t.Fatal("no RBAC airlock-operator-egress")
	}
	if got := fmt.Sprint(role["rules"]); got != "[map[apiGroups:[] resourceNames:[airlock-egress-ca] resources:[secrets] verbs:[list watch update]]]" {
		t.Errorf("the operator's egress Role %s", got)
	}
	if got := fmt.Sprint(cr["rules"]); got != "[map[apiGroups:[] resourceNames:[airlock-egress-ca] resources:[configmaps] verbs:[get list watch update delete]]]" {
		t.Errorf("the operator's egress ClusterRole %s", got)
	}
}
