//go:build e2e

// Package e2e runs airlock's end-to-end suite against whatever cluster KUBECONFIG names: the
// local control plane of hack/local-cluster.sh here, a kind cluster in users' CI. It installs
// manifests/ with kubectl, as a user would, and talks to the API server through the generated
// clientset.
package e2e

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	airlockclientset "github.com/airlock-dev/airlock/pkg/generated/clientset/versioned"
)

var (
	kubeClient    kubernetes.Interface
	airlockClient airlockclientset.Interface
	restConfig    *rest.Config
	repoRoot      string
	kubectlPath   string
)

func TestMain(m *testing.M) {
	flag.Parse()
	if err := setup(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e setup:", err)
		os.Exit(1)
	}
	code := reportOpenAPIViolations(m.Run())
	stopSuiteRecordsWebhook()
	// The airlock binary the run built (airlockBinary) goes with the run: each run used to leave
	// its ~40 MB copy in the temp dir.
	if airlockBin != "" {
		_ = os.RemoveAll(filepath.Dir(airlockBin))
	}
	os.Exit(code)
}

func setup() error {
	kubeconfig := os.Getenv("KUBECONFIG")
	if kubeconfig == "" {
		return fmt.Errorf("KUBECONFIG is not set: point it at a cluster (hack/local-cluster.sh up; eval $(hack/local-cluster.sh env))")
	}
	_, file, _, _ := runtime.Caller(0)
	repoRoot = filepath.Dir(filepath.Dir(file))
	if err := setupOpenAPICheck(); err != nil {
		return err
	}

	var err error
	restConfig, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("loading %s: %w", kubeconfig, err)
	}
	restConfig.QPS, restConfig.Burst = 100, 200
	if kubeClient, err = kubernetes.NewForConfig(restConfig); err != nil {
		return err
	}
	if airlockClient, err = airlockclientset.NewForConfig(restConfig); err != nil {
		return err
	}
	if kubectlPath, err = findKubectl(); err != nil {
		return err
	}
	if os.Getenv("AIRLOCK_E2E_INSTALL") == "helm" {
		// hack/e2e-node.sh installed the chart (helm install): applying the kustomize tree over
		// the release would make kubectl co-owner of its objects.
		fmt.Fprintln(os.Stderr, "e2e setup: airlock was installed with helm (AIRLOCK_E2E_INSTALL=helm); not applying manifests/")
		return nil
	}
	if err := installManifests(); err != nil {
		return err
	}
	return startSuiteRecordsWebhook()
}

// findKubectl prefers $KUBECTL, then the one hack/ builds into bin/, then PATH.
func findKubectl() (string, error) {
	if p := os.Getenv("KUBECTL"); p != "" {
		return p, nil
	}
	if p := filepath.Join(repoRoot, "bin", "kubectl"); isExecutable(p) {
		return p, nil
	}
	p, err := exec.LookPath("kubectl")
	if err != nil {
		return "", fmt.Errorf("no kubectl: set KUBECTL, build bin/kubectl (hack/build-cluster-bins.sh kubectl) or put one on PATH")
	}
	return p, nil
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}

// kubectl runs kubectl against the suite's cluster and returns its combined output.
func kubectl(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, kubectlPath, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+os.Getenv("KUBECONFIG"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// installManifests installs airlock as the README tells users to: the CRDs first (so that the
// sample class in the same kustomization has its kind served), then everything.
func installManifests() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := kubectl(ctx, "apply", "--server-side", "--force-conflicts", "-k", filepath.Join(repoRoot, "manifests", "crd")); err != nil {
		return err
	}
	if _, err := kubectl(ctx, "wait", "--for=condition=Established", "--timeout=60s",
		"crd/sandboxclasses.airlock.dev", "crd/toolregistries.airlock.dev",
		"crd/agentruntimes.airlock.dev", "crd/sandboxclaims.airlock.dev", "crd/sessionrecords.airlock.dev"); err != nil {
		return err
	}
	_, err := kubectl(ctx, "apply", "--server-side", "--force-conflicts", "-k", filepath.Join(repoRoot, "manifests"))
	return err
}

// newNamespace creates a namespace that enforces the restricted Pod Security level, as sandbox
// namespaces should, and deletes it when the test ends.
func newNamespace(t *testing.T, prefix string) string {
	t.Helper()
	return newNamespaceAt(t, prefix, "restricted")
}

// newNamespaceAt creates a namespace that enforces the Pod Security level given, and deletes it
// when the test ends.
func newNamespaceAt(t *testing.T, prefix, level string) string {
	t.Helper()
	ctx := context.Background()
	ns, err := kubeClient.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: prefix + "-",
			Labels: map[string]string{
				"pod-security.kubernetes.io/enforce": level,
				"airlock.dev/e2e":                    "true",
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	t.Cleanup(func() {
		err := kubeClient.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting namespace %s: %v", ns.Name, err)
		}
	})
	return ns.Name
}

// eventually polls cond until it returns true, an error, or the timeout passes.
// kwokNode says whether n is one of kwok's fake Nodes (the API-only plane's), not a real one.
func kwokNode(n *corev1.Node) bool {
	return n.Annotations["kwok.x-k8s.io/node"] != "" || n.Labels["type"] == "kwok"
}

func eventually(t *testing.T, timeout time.Duration, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, timeout, true, cond)
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// createContentVolume gives namespace ns its workspace-content PVC, pre-bound to a static hostPath
// PersistentVolume at dir on the node (hostPath type typ; nil for none), waits until the two are
// bound, and deletes the PV when the test ends (the PVC goes with the namespace).
func createContentVolume(t *testing.T, ns, dir string, typ *corev1.HostPathType) {
	t.Helper()
	ctx := context.Background()
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "content-" + ns, Labels: map[string]string{"airlock.dev/e2e": "true"}},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir, Type: typ}},
			ClaimRef:                      &corev1.ObjectReference{Namespace: ns, Name: "workspace-content"},
		},
	}
	if _, err := kubeClient.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating PV: %v", err)
	}
	t.Cleanup(func() {
		_ = kubeClient.CoreV1().PersistentVolumes().Delete(context.Background(), pv.Name, metav1.DeleteOptions{})
	})
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "workspace-content", Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
			StorageClassName: ptr.To(""),
			VolumeName:       pv.Name,
		},
	}
	if _, err := kubeClient.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating PVC: %v", err)
	}
	// The PV controller binds the pair a moment later; until then the scheduler reports
	// "unbound immediate PersistentVolumeClaims" for the sandboxes' pods, not their own reason.
	eventually(t, time.Minute, "PVC "+ns+"/workspace-content to be Bound", func(ctx context.Context) (bool, error) {
		got, err := kubeClient.CoreV1().PersistentVolumeClaims(ns).Get(ctx, pvc.Name, metav1.GetOptions{})
		return err == nil && got.Status.Phase == corev1.ClaimBound, err
	})
}
