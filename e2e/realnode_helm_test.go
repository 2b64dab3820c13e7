//go:build e2e && realnode

package e2e

import (
	"context"
	"os"
	"strconv"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// helmRelease is the release hack/e2e-node.sh installs (docs/helm.md, "The real-node e2e
// installs with Helm").
const helmRelease = "airlock"

// TestRealNodeInstalledWithHelm: the airlock the real-node suite runs against is the one
// hack/e2e-node.sh says it installed (AIRLOCK_E2E_INSTALL, default helm). Installed with the
// chart: the release's latest revision is deployed; the operator's Deployment, the Sandbox API
// Service, the ClusterRole, the sample class and the namespace are the release's objects; and
// the namespace carries the chart's Pod Security labels (the chart's Namespace, applied onto the
// one --create-namespace made). Installed with `kubectl apply -k`: none of them is Helm's.
func TestRealNodeInstalledWithHelm(t *testing.T) {
	requireRealNode(t)
	ctx := context.Background()
	install := os.Getenv("AIRLOCK_E2E_INSTALL")
	if install == "" {
		install = "helm" // hack/e2e-node.sh's default
	}

	objects := map[string]func() (metav1.Object, error){
		"Deployment airlock-operator": func() (metav1.Object, error) {
			return kubeClient.AppsV1().Deployments(operatorNamespace).Get(ctx, "airlock-operator", metav1.GetOptions{})
		},
		"Service " + sandboxAPIService: func() (metav1.Object, error) {
			return kubeClient.CoreV1().Services(operatorNamespace).Get(ctx, sandboxAPIService, metav1.GetOptions{})
		},
		"ClusterRole airlock-operator": func() (metav1.Object, error) {
			return kubeClient.RbacV1().ClusterRoles().Get(ctx, "airlock-operator", metav1.GetOptions{})
		},
		"SandboxClass codegen": func() (metav1.Object, error) {
			return airlockClient.AirlockV1alpha1().SandboxClasses().Get(ctx, "codegen", metav1.GetOptions{})
		},
		"Namespace " + operatorNamespace: func() (metav1.Object, error) {
			return kubeClient.CoreV1().Namespaces().Get(ctx, operatorNamespace, metav1.GetOptions{})
		},
	}
	for what, get := range objects {
		obj, err := get()
		if err != nil {
			t.Errorf("%s: %v", what, err)
			continue
		}
		managedBy := obj.GetLabels()["app.kubernetes.io/managed-by"]
		release := obj.GetAnnotations()["meta.helm.sh/release-name"]
		releaseNS := obj.GetAnnotations()["meta.helm.sh/release-namespace"]
		switch install {
		case "helm":
			if managedBy != "Helm" || release != helmRelease || releaseNS != operatorNamespace {
				t.Errorf("%s: managed-by %q, release %q in %q; want Helm's release %s in %s", what, managedBy, release, releaseNS, helmRelease, operatorNamespace)
			}
		case "kustomize":
			if managedBy == "Helm" || release != "" {
				t.Errorf("%s: managed-by %q, release %q; AIRLOCK_E2E_INSTALL=kustomize installed it with kubectl apply -k", what, managedBy, release)
			}
		default:
			t.Fatalf("AIRLOCK_E2E_INSTALL=%q: want helm or kustomize", install)
		}
	}
	ns, err := kubeClient.CoreV1().Namespaces().Get(ctx, operatorNamespace, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []string{"pod-security.kubernetes.io/enforce", "pod-security.kubernetes.io/warn"} {
		if ns.Labels[l] != "restricted" {
			t.Errorf("namespace %s: %s=%q, want restricted", operatorNamespace, l, ns.Labels[l])
		}
	}

	// Helm keeps each revision in a Secret of the release's namespace labelled owner=helm.
	secrets, err := kubeClient.CoreV1().Secrets(operatorNamespace).List(ctx, metav1.ListOptions{LabelSelector: "owner=helm,name=" + helmRelease})
	if err != nil {
		t.Fatal(err)
	}
	latest, status := 0, ""
	for _, s := range secrets.Items {
		if v, err := strconv.Atoi(s.Labels["version"]); err == nil && v > latest {
			latest, status = v, s.Labels["status"]
		}
	}
	switch {
	case install == "helm" && (latest == 0 || status != "deployed"):
		t.Errorf("Helm release %s: latest revision %d is %q, want deployed", helmRelease, latest, status)
	case install == "kustomize" && latest != 0:
		t.Errorf("a Helm release %s (revision %d) exists, but the suite installed with kubectl apply -k", helmRelease, latest)
	}
	t.Logf("installed with %s (Helm release revision %d %s)", install, latest, status)
}
