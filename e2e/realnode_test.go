//go:build e2e && realnode

// The real-node e2e tests: they need a cluster whose pods really run (hack/local-node.sh, or
// kind), with NetworkPolicy enforced, airlock installed in-cluster from its images (`helm
// install` of manifests/chart/airlock, or `kubectl apply -k manifests/`: AIRLOCK_E2E_INSTALL),
// and the runtime stand-in images (hack/imagebuild/build-images.sh e2e-client e2e-python)
// present on the node. hack/e2e-node.sh sets all of that up and runs
// `go test -tags 'e2e realnode' -run TestRealNode ./e2e/`.
package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/claimname"
	"github.com/airlock-dev/airlock/pkg/client"
	"github.com/airlock-dev/airlock/pkg/controller/cabundle"
	"github.com/airlock-dev/airlock/pkg/workspace"
)

const (
	operatorNamespace = "airlock-system"
	sandboxAPIService = "airlock-sandbox-api"
	sandboxUID        = 65532
)

// realnodeClientImage is the runtime stand-in (e2e/realnode/runtimeclient).
func realnodeClientImage() string {
	if image := os.Getenv("AIRLOCK_E2E_CLIENT_IMAGE"); image != "" {
		return image
	}
	return "localhost/airlock-e2e/runtimeclient:v0.1.0"
}

// realnodeSandboxImage is the image of the test's sandbox classes.
func realnodeSandboxImage() string {
	if image := os.Getenv("AIRLOCK_E2E_SANDBOX_IMAGE"); image != "" {
		return image
	}
	return "ghcr.io/airlock-dev/airlock-sandbox:v0.1.0"
}

// realnodeEnv is one restricted namespace with a hostPath content volume, an agent
// ServiceAccount, classes, a registry and a runtime.
type realnodeEnv struct {
	ns      string
	hostDir string // the content volume's directory on the node
	classes []string
}

type realnodeOptions struct {
	maxConcurrent, maxPerSession, maxInstances int32
	idleTimeout                                time.Duration
	targetPath                                 string
	codegenArgs                                []string                           // the codegen class's args (default: the class default)
	startupTimeout                             time.Duration                      // the classes' startupTimeout (default: the class default)
	allowedServices                            []airlockv1alpha1.ServiceReference // of the "net" sandbox
	codegenResources                           *corev1.ResourceRequirements       // the codegen class's resources (default: none, so the operator's defaults)
	codegenImage                               string                             // the codegen class's image (default: realnodeSandboxImage)
	warm                                       int32                              // the codegen sandbox's warm members
	resumeWindow                               *time.Duration                     // the codegen sandbox's resumeWindow (default: the CRD's, 10m)
	workspaceRetention                         *time.Duration                     // the runtime's workspaceRetention (default: the CRD's, 24h)
	codegenRuntimeClass                        string                             // the codegen class's runtimeClassName (default: none, runc)
	codegenIsolation                           *airlockv1alpha1.SandboxIsolation  // the codegen class's isolation (default: none, Any)
}

func requireRealNode(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	nodes, err := kubeClient.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range nodes.Items {
		if n := &nodes.Items[i]; kwokNode(n) {
			t.Fatalf("node %s is a kwok node: these tests need real pods (hack/e2e-node.sh)", n.Name)
		}
	}
	eventually(t, 2*time.Minute, "the in-cluster operator Deployment to be available", func(ctx context.Context) (bool, error) {
		d, err := kubeClient.AppsV1().Deployments(operatorNamespace).Get(ctx, "airlock-operator", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		return d.Status.AvailableReplicas == 2 && d.Status.UpdatedReplicas == 2, nil
	})
}

func newRealnodeEnv(t *testing.T, prefix string, o realnodeOptions) *realnodeEnv {
	t.Helper()
	ctx := context.Background()
	ns := newNamespace(t, prefix)
	e := &realnodeEnv{ns: ns}

	// The content volume: a static hostPath PV, pre-bound to the namespace's workspace-content
	// PVC. Its root is world-writable (0777), so that the subPath directories the kubelet creates
	// for the sandboxes (with the root's mode, owned by root) are writable by uid 65532, and the
	// sync-back Job (also 65532) can create the target and remove the workspaces: not sticky, or
	// 65532 could not remove the directories the kubelet made (docs/decisions.md, "Real node").
	e.hostDir = prepareNodeDir(t, ns)
	createContentVolume(t, ns, e.hostDir, ptr.To(corev1.HostPathDirectory))
	if _, err := kubeClient.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "agent"}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating ServiceAccount: %v", err)
	}

	newClass := func(name string, allowed []airlockv1alpha1.ServiceReference) string {
		class := validClass("e2e-" + name + "-" + ns)
		class.Spec.Image = realnodeSandboxImage()
		class.Spec.Ports = []airlockv1alpha1.SandboxPort{{Name: "mcp", Port: 8080}}
		class.Spec.Env = []corev1.EnvVar{{Name: "HOME", Value: "/cache/home"}}
		if name == "codegen" {
			class.Spec.Args = o.codegenArgs
			if o.codegenImage != "" {
				class.Spec.Image = o.codegenImage
			}
			if o.codegenResources != nil {
				class.Spec.Resources = *o.codegenResources
			}
			if o.codegenRuntimeClass != "" {
				class.Spec.RuntimeClassName = ptr.To(o.codegenRuntimeClass)
			}
			class.Spec.Isolation = o.codegenIsolation
		}
		if o.startupTimeout > 0 {
			class.Spec.StartupTimeout = &metav1.Duration{Duration: o.startupTimeout}
		}
		for _, ref := range allowed {
			if ref.Namespace == "" { // the test's namespace, known only here
				ref.Namespace = ns
			}
			class.Spec.AllowedServices = append(class.Spec.AllowedServices, ref)
		}
		if _, err := airlockClient.AirlockV1alpha1().SandboxClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating class: %v", err)
		}
		t.Cleanup(func() {
			_ = airlockClient.AirlockV1alpha1().SandboxClasses().Delete(context.Background(), class.Name, metav1.DeleteOptions{})
		})
		e.classes = append(e.classes, class.Name)
		return class.Name
	}
	sandboxes := []airlockv1alpha1.RegistrySandbox{{
		Name: "codegen", Class: newClass("codegen", nil), TargetPath: o.targetPath, MaxInstances: o.maxInstances, Warm: o.warm,
	}}
	if o.resumeWindow != nil {
		sandboxes[0].ResumeWindow = &metav1.Duration{Duration: *o.resumeWindow}
	}
	if o.allowedServices != nil {
		sandboxes = append(sandboxes, airlockv1alpha1.RegistrySandbox{
			Name: "net", Class: newClass("net", o.allowedServices), MaxInstances: o.maxInstances,
		})
	}
	registry := &airlockv1alpha1.ToolRegistry{
		ObjectMeta: metav1.ObjectMeta{Name: "tools", Namespace: ns},
		Spec:       airlockv1alpha1.ToolRegistrySpec{Sandboxes: sandboxes},
	}
	if _, err := airlockClient.AirlockV1alpha1().ToolRegistries(ns).Create(ctx, registry, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating registry: %v", err)
	}
	rt := &airlockv1alpha1.AgentRuntime{
		ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: ns},
		Spec: airlockv1alpha1.AgentRuntimeSpec{
			ServiceAccountName: "agent",
			ToolRegistryRef:    airlockv1alpha1.LocalObjectReference{Name: "tools"},
			Sandbox: airlockv1alpha1.SandboxPolicy{
				Enabled:       true,
				MaxConcurrent: o.maxConcurrent,
				MaxPerSession: o.maxPerSession,
			},
		},
	}
	if o.idleTimeout > 0 {
		rt.Spec.Sandbox.IdleTimeout = &metav1.Duration{Duration: o.idleTimeout}
	}
	if o.workspaceRetention != nil {
		rt.Spec.Sandbox.WorkspaceRetention = &metav1.Duration{Duration: *o.workspaceRetention}
	}
	if _, err := airlockClient.AirlockV1alpha1().AgentRuntimes(ns).Create(ctx, rt, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating runtime: %v", err)
	}
	return e
}

func restrictedPod(name string, labels map[string]string, image string, args []string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   ptr.To(true),
				RunAsUser:      ptr.To[int64](sandboxUID),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name:            "main",
				Image:           image,
				ImagePullPolicy: corev1.PullIfNotPresent,
				Args:            args,
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr.To(false),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
			}},
		},
	}
}

// startEcho runs a pod answering HTTP on 8080 and a Service named name in front of it; it returns
// the pod's IP.
func (e *realnodeEnv) startEcho(t *testing.T, name string) string {
	t.Helper()
	ctx := context.Background()
	labels := map[string]string{"app": name}
	pod := restrictedPod(name, labels, realnodeClientImage(), []string{"serve", "-listen=:8080"})
	pod.Spec.RestartPolicy = corev1.RestartPolicyAlways
	pod.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}
	pod.Spec.Containers[0].ReadinessProbe = &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(8080)}},
		PeriodSeconds: 1,
	}
	if _, err := kubeClient.CoreV1().Pods(e.ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod %s: %v", name, err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{
			Selector: labels,
			Ports:    []corev1.ServicePort{{Name: "http", Port: 8080, TargetPort: intstr.FromString("http")}},
		},
	}
	if _, err := kubeClient.CoreV1().Services(e.ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating Service %s: %v", name, err)
	}
	var ip string
	eventually(t, 60*time.Second, "pod "+name+" Ready", func(ctx context.Context) (bool, error) {
		p, err := kubeClient.CoreV1().Pods(e.ns).Get(ctx, name, metav1.GetOptions{})
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

// runClient runs the runtime stand-in in a pod of the namespace as the ServiceAccount "agent"
// and unmarshals the JSON document it printed into out.
func (e *realnodeEnv) runClient(t *testing.T, name, mode string, plan map[string]any, timeout time.Duration, out any) {
	t.Helper()
	if err := e.runClientErr(name, mode, plan, timeout, out); err != nil {
		t.Fatal(err)
	}
}

// runClientErr is runClient for goroutines other than the test's: it returns the error.
func (e *realnodeEnv) runClientErr(name, mode string, plan map[string]any, timeout time.Duration, out any) error {
	return e.runClientWith(name, mode, plan, timeout, out, nil)
}

// runClientWith is runClientErr with a last change to the pod (mutate, if not nil).
func (e *realnodeEnv) runClientWith(name, mode string, plan map[string]any, timeout time.Duration, out any, mutate func(*corev1.Pod)) error {
	ctx := context.Background()
	withToken := map[string]any{"tokenFile": airlockTokenFile}
	for k, v := range plan { // a copy: callers may share a plan between goroutines
		withToken[k] = v
	}
	b, err := json.Marshal(withToken)
	if err != nil {
		return err
	}
	pod := restrictedPod(name, map[string]string{"app": "runtime"}, realnodeClientImage(), []string{mode, "-plan", string(b)})
	pod.Spec.ServiceAccountName = "agent"
	withAirlockToken(pod)
	if mutate != nil {
		mutate(pod)
	}
	phase, logs, err := runPodToEnd(ctx, e.ns, pod, timeout)
	if err != nil {
		return err
	}
	var result string
	for _, line := range strings.Split(string(logs), "\n") {
		if strings.HasPrefix(line, "RESULT ") {
			result = strings.TrimPrefix(line, "RESULT ")
		}
	}
	if phase != corev1.PodSucceeded || result == "" {
		return fmt.Errorf("runtime pod %s ended %s; logs:\n%s", name, phase, logs)
	}
	if err := json.Unmarshal([]byte(result), out); err != nil {
		return fmt.Errorf("runtime pod %s printed %q: %w", name, result, err)
	}
	return nil
}

// airlockTokenDir and airlockTokenFile are where a runtime pod mounts its projected ServiceAccount
// token for airlock's audience (README, "Calling the Sandbox API").
const (
	airlockTokenDir  = "/var/run/secrets/airlock"
	airlockTokenFile = airlockTokenDir + "/token"
)

// airlockCADir is where a runtime pod mounts the ConfigMap airlock-ca, the CA bundle that verifies
// the Sandbox API (client.DefaultCAFile is its ca.crt).
const airlockCADir = "/var/run/airlock/ca"

// withAirlockToken gives the pod's first container what a runtime needs to call the Sandbox API:
// a projected ServiceAccount token with audience airlock (the kubelet rotates it), no token for
// the API server (the runtime stand-in never calls it), and the CA bundle that verifies the API
// (the ConfigMap airlock-ca the operator keeps in the namespace).
func withAirlockToken(pod *corev1.Pod) {
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "airlock-ca", VolumeSource: corev1.VolumeSource{
		ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: cabundle.ConfigMapName}},
	}})
	pod.Spec.Containers[0].VolumeMounts = append(pod.Spec.Containers[0].VolumeMounts,
		corev1.VolumeMount{Name: "airlock-ca", MountPath: airlockCADir, ReadOnly: true})
	pod.Spec.AutomountServiceAccountToken = ptr.To(false)
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "airlock-token", VolumeSource: corev1.VolumeSource{
		Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{{
			ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Audience: airlockAudience, ExpirationSeconds: ptr.To[int64](3600), Path: "token"},
		}}},
	}})
	c := &pod.Spec.Containers[0]
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "airlock-token", MountPath: airlockTokenDir, ReadOnly: true})
}

// runPodToEnd creates pod in namespace ns, waits until it has Succeeded or Failed, and returns its
// phase and logs.
func runPodToEnd(ctx context.Context, ns string, pod *corev1.Pod, timeout time.Duration) (corev1.PodPhase, []byte, error) {
	name := pod.Name
	if _, err := kubeClient.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return "", nil, fmt.Errorf("creating pod %s: %w", name, err)
	}
	var phase corev1.PodPhase
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		p, err := kubeClient.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		phase = p.Status.Phase
		return phase == corev1.PodSucceeded || phase == corev1.PodFailed, nil
	})
	if err != nil {
		return phase, nil, fmt.Errorf("waiting for pod %s to finish (phase %q): %w", name, phase, err)
	}
	logs, err := kubeClient.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		return phase, nil, fmt.Errorf("logs of %s: %w", name, err)
	}
	return phase, logs, nil
}

// nodeDirRoot is where the tests' content volumes live on the node.
const nodeDirRoot = "/tmp/airlock-e2e-realnode"

// prepareNodeDir makes the directory nodeDirRoot/name on the node, world-writable (not sticky), and
// removes it when the test ends. It works through a root pod in a privileged namespace of its
// own, never through this machine's filesystem, so that the suite runs the same where the node is
// not this machine (kind: the node is a container). The suite assumes one node.
func prepareNodeDir(t *testing.T, name string) string {
	t.Helper()
	ctx := context.Background()
	run := nodeShell(t)
	dir := path.Join(nodeDirRoot, name)
	// mode 0777: the subPath directories the kubelet creates for the sandboxes (with the root's
	// mode, owned by root) are then writable by uid 65532, and so is the sync-back Job's target;
	// not sticky, so that the sync-back Job (65532) may remove a workspace directory the kubelet
	// made (docs/decisions.md, "Real node").
	if err := run(ctx, "mkdir", "mkdir -p /node/"+name+" && chmod 0777 /node/"+name); err != nil {
		t.Fatalf("preparing %s on the node: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := run(context.Background(), "rmdir", "rm -rf /node/"+name); err != nil {
			t.Errorf("removing %s from the node: %v", dir, err)
		}
	})
	return dir
}

// mkdirContent makes the directory rel (slash-separated, below the content volume's root) on the
// node, and every directory on the way, mode 0777 as the volume's root (the mode the kubelet gives
// the subPath directories it creates), so that the sandboxes' uid can write in each, and the
// sync-back Job remove a workspace among them; the last one is the sandboxes' uid's own.
func (e *realnodeEnv) mkdirContent(t *testing.T, rel string) {
	t.Helper()
	script := "set -e; cd /node/" + path.Base(e.hostDir)
	for _, elem := range strings.Split(rel, "/") {
		script += " && mkdir -p " + elem + " && chmod 0777 " + elem + " && cd " + elem
	}
	script += fmt.Sprintf(" && chown %d:%d .", sandboxUID, sandboxUID)
	if err := nodeShell(t)(context.Background(), "mkdir-content", script); err != nil {
		t.Fatalf("making %s on the node: %v", rel, err)
	}
}

// nodeShell returns a function that runs a shell script as root in a pod that mounts nodeDirRoot
// at /node, in a privileged namespace of its own (removed when the test ends), and waits for it.
func nodeShell(t *testing.T) func(ctx context.Context, podName, script string) error {
	t.Helper()
	ns := newNamespaceAt(t, "airlock-rn-nodedir", "privileged")
	return func(ctx context.Context, podName, script string) error {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: podName},
			Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{
					Name:            "main",
					Image:           realnodeSandboxImage(),
					ImagePullPolicy: corev1.PullIfNotPresent,
					Command:         []string{"sh", "-c", script},
					SecurityContext: &corev1.SecurityContext{RunAsUser: ptr.To[int64](0), RunAsNonRoot: ptr.To(false)},
					VolumeMounts:    []corev1.VolumeMount{{Name: "root", MountPath: "/node"}},
				}},
				Volumes: []corev1.Volume{{Name: "root", VolumeSource: corev1.VolumeSource{
					HostPath: &corev1.HostPathVolumeSource{Path: nodeDirRoot, Type: ptr.To(corev1.HostPathDirectoryOrCreate)},
				}}},
			},
		}
		phase, logs, err := runPodToEnd(ctx, ns, pod, 2*time.Minute)
		if err == nil && phase != corev1.PodSucceeded {
			err = fmt.Errorf("pod %s ended %s: %s", podName, phase, logs)
		}
		return err
	}
}

// claimWorkspace is the per-claim workspace directory of the runtime "agent"'s claim named
// claim, for a test that needs it before the claim exists or after it went (otherwise read the
// claim's spec.workspaceDir).
func (e *realnodeEnv) claimWorkspace(t *testing.T, claim string) string {
	t.Helper()
	rt, err := airlockClient.AirlockV1alpha1().AgentRuntimes(e.ns).Get(context.Background(), "agent", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return path.Join(e.ns, "sandboxes", workspace.ClaimDirName(claim, rt.UID))
}

// readContent returns the file at rel (slash-separated, below the content volume's root) as a pod
// of the namespace that mounts the workspace-content PVC read-only reads it.
func (e *realnodeEnv) readContent(rel string) (string, error) {
	ctx := context.Background()
	name := fmt.Sprintf("read-%d", time.Now().UnixNano())
	pod := restrictedPod(name, map[string]string{"app": "reader"}, realnodeSandboxImage(), nil)
	pod.Spec.Containers[0].Command = []string{"cat", path.Join("/content", rel)}
	pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "content", MountPath: "/content", ReadOnly: true}}
	pod.Spec.Volumes = []corev1.Volume{{Name: "content", VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "workspace-content", ReadOnly: true},
	}}}
	phase, logs, err := runPodToEnd(ctx, e.ns, pod, 2*time.Minute)
	if err != nil {
		return "", err
	}
	if phase != corev1.PodSucceeded {
		return "", fmt.Errorf("reading %s: pod %s ended %s: %s", rel, name, phase, logs)
	}
	return string(logs), nil
}

// listContent returns the names in the directory rel (slash-separated, below the content volume's
// root), as a pod that mounts the PVC read-only sees them.
func (e *realnodeEnv) listContent(rel string) ([]string, error) {
	ctx := context.Background()
	name := fmt.Sprintf("ls-%d", time.Now().UnixNano())
	pod := restrictedPod(name, map[string]string{"app": "reader"}, realnodeSandboxImage(), nil)
	pod.Spec.Containers[0].Command = []string{"ls", "-A1", path.Join("/content", rel)}
	pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "content", MountPath: "/content", ReadOnly: true}}
	pod.Spec.Volumes = []corev1.Volume{{Name: "content", VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "workspace-content", ReadOnly: true},
	}}}
	phase, logs, err := runPodToEnd(ctx, e.ns, pod, 2*time.Minute)
	if err != nil {
		return nil, err
	}
	if phase != corev1.PodSucceeded {
		return nil, fmt.Errorf("listing %s: pod %s ended %s: %s", rel, name, phase, logs)
	}
	return strings.Fields(string(logs)), nil
}

type rnCall struct {
	Name    string  `json:"name"`
	Tool    string  `json:"tool"`
	IsError bool    `json:"isError"`
	Text    string  `json:"text"`
	Millis  float64 `json:"millis"`
	Err     string  `json:"err"`
}

type rnSession struct {
	Claim         string            `json:"claim"`
	Phase         string            `json:"phase"`
	URL           string            `json:"url"`
	AcquireMillis float64           `json:"acquireMillis"`
	Reachable     float64           `json:"reachableMillis"`
	NoHeader      int               `json:"noHeaderStatus"`
	BadHeader     int               `json:"badHeaderStatus"`
	Protocol      string            `json:"protocol"`
	Calls         []rnCall          `json:"calls"`
	Probes        map[string]string `json:"probes"`
	Kernel        string            `json:"kernel"`  // the verified isolation statement's (verifyIsolation)
	Runtime       string            `json:"runtime"` // what sandboxd saw it ran under
	Error         string            `json:"error"`
}

func (s *rnSession) call(t *testing.T, name string) rnCall {
	t.Helper()
	for _, c := range s.Calls {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no call %q in the runtime's result", name)
	return rnCall{}
}

func apiURL() string {
	return fmt.Sprintf("https://%s.%s.svc:8443", sandboxAPIService, operatorNamespace)
}

func step(name, tool string, args map[string]any) map[string]any {
	return map[string]any{"name": name, "tool": tool, "args": args}
}

// tcpProbe is a Bash command that says OPEN when a TCP connection to host:port is established
// within 3 s, BLOCKED otherwise.
func tcpProbe(host string, port int) string {
	return fmt.Sprintf(`if timeout 3 bash -c 'exec 3<>/dev/tcp/%s/%d' 2>/dev/null; then echo OPEN; else echo BLOCKED; fi`, host, port)
}

// httpGet is a Bash command that prints the first word of the answer's body to GET / on
// host:port (name resolved by the shell's resolver), or FAILED. (The image's busybox is static
// and resolves no names; bash uses glibc's resolver.)
func httpGet(host string, port int) string {
	return fmt.Sprintf(`timeout 5 bash -c 'exec 3<>/dev/tcp/%s/%d && printf "GET / HTTP/1.0\r\n\r\n" >&3 && tail -n 1 <&3 | cut -d" " -f1' 2>/dev/null || echo FAILED`, host, port)
}

func serviceIP(t *testing.T, ns, name string) string {
	t.Helper()
	svc, err := kubeClient.CoreV1().Services(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("Service %s/%s: %v", ns, name, err)
	}
	return svc.Spec.ClusterIP
}

// netCheck is one NetworkPolicy check: a Bash step and the answer it must give.
type netCheck struct {
	name, command, want string
}

// realNodeDefaultProtocol is the MCP revision the Go SDK v1.8.0's client
// asks for by default (2026-07-28, stateless), which sandboxd serves on /mcp.
const realNodeDefaultProtocol = "2026-07-28"

// TestRealNodeSandbox: a runtime pod with its own ServiceAccount acquires a sandbox through the
// Sandbox API Service, talks MCP to it from inside the cluster (Write, Read, Edit, Bash) at the
// Go SDK v1.8.0 client's default revision (2026-07-28, asserted), a
// request without the header is refused; the sandbox pod runs as 65532 without capabilities in a
// restricted namespace and reaches nothing (another pod, the API server, CoreDNS), while a
// sandbox whose class allows a Service reaches it; after the idle timeout the sync-back Job
// copies the workspace into targetPath on the volume and the claim is gone.
func TestRealNodeSandbox(t *testing.T) {
	requireRealNode(t)
	ctx := context.Background()
	e := newRealnodeEnv(t, "airlock-rn", realnodeOptions{
		maxConcurrent: 5, maxPerSession: 3, maxInstances: 5,
		idleTimeout: 30 * time.Second, targetPath: "results/run1",
		allowedServices: []airlockv1alpha1.ServiceReference{{Name: "allowed"}}, // in the test's namespace
	})
	allowedIP := e.startEcho(t, "allowed")
	otherIP := e.startEcho(t, "other")
	kubernetesIP := serviceIP(t, "default", "kubernetes")
	dnsIP := serviceIP(t, "kube-system", "kube-dns")
	apiIP := serviceIP(t, operatorNamespace, sandboxAPIService)
	var corednsIP string
	if pods, err := kubeClient.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=kube-dns"}); err == nil && len(pods.Items) > 0 {
		corednsIP = pods.Items[0].Status.PodIP
	}
	nodeIP := ""
	if nodes, err := kubeClient.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err == nil && len(nodes.Items) > 0 {
		for _, a := range nodes.Items[0].Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				nodeIP = a.Address
			}
		}
	}
	apiserverPort := 6443
	if u := restConfig.Host; strings.Contains(u, ":") {
		_, _ = fmt.Sscanf(u[strings.LastIndex(u, ":")+1:], "%d", &apiserverPort)
	}

	denyChecks := []netCheck{
		{"another pod (direct pod IP)", tcpProbe(otherIP, 8080), "BLOCKED"},
		{"a Service not allowed (ClusterIP)", tcpProbe(serviceIP(t, e.ns, "other"), 8080), "BLOCKED"},
		{"the API server (kubernetes Service)", tcpProbe(kubernetesIP, 443), "BLOCKED"},
		{"the API server (node IP)", tcpProbe(nodeIP, apiserverPort), "BLOCKED"},
		{"the kubelet (node IP)", tcpProbe(nodeIP, 10250), "BLOCKED"},
		{"CoreDNS over TCP (kube-dns Service)", tcpProbe(dnsIP, 53), "BLOCKED"},
		{"CoreDNS over UDP (name lookup)", `if timeout 5 nslookup kubernetes.default.svc.cluster.local >/dev/null 2>&1; then echo RESOLVED; else echo BLOCKED; fi`, "BLOCKED"},
		{"the Sandbox API (operator pods)", tcpProbe(apiIP, 8443), "BLOCKED"},
	}
	if corednsIP != "" {
		denyChecks = append(denyChecks, netCheck{"CoreDNS pod (direct pod IP)", tcpProbe(corednsIP, 53), "BLOCKED"})
	}
	allowChecks := []netCheck{
		{"allowed Service by name (DNS + connect)", httpGet(fmt.Sprintf("allowed.%s.svc.cluster.local", e.ns), 8080), "ok"},
		{"DNS lookup of the allowed Service (kube-dns)", fmt.Sprintf(`if timeout 5 nslookup allowed.%s.svc.cluster.local >/dev/null 2>&1; then echo RESOLVED; else echo BLOCKED; fi`, e.ns), "RESOLVED"},
		{"allowed Service (ClusterIP)", tcpProbe(serviceIP(t, e.ns, "allowed"), 8080), "OPEN"},
		{"allowed Service's pod (direct pod IP)", tcpProbe(allowedIP, 8080), "OPEN"},
		{"a Service not allowed, from the net sandbox", tcpProbe(otherIP, 8080), "BLOCKED"},
		{"the API server, from the net sandbox", tcpProbe(kubernetesIP, 443), "BLOCKED"},
	}

	// Controls: from the runtime pod, which no NetworkPolicy selects, the targets the sandbox
	// must not reach do answer (so BLOCKED means the policy, not a dead target).
	controls := map[string]string{
		"another pod (direct pod IP)":         net.JoinHostPort(otherIP, "8080"),
		"a Service not allowed (ClusterIP)":   net.JoinHostPort(serviceIP(t, e.ns, "other"), "8080"),
		"the API server (kubernetes Service)": net.JoinHostPort(kubernetesIP, "443"),
		"CoreDNS over TCP (kube-dns Service)": net.JoinHostPort(dnsIP, "53"),
		"the Sandbox API (operator pods)":     net.JoinHostPort(apiIP, "8443"),
	}
	var probes []string
	for _, addr := range controls {
		probes = append(probes, addr)
	}

	content := "hello world\nsecond line\n"
	steps := []map[string]any{
		step("write", "Write", map[string]any{"file_path": "src/hello.txt", "content": content}),
		step("read", "Read", map[string]any{"file_path": "src/hello.txt"}),
		step("edit", "Edit", map[string]any{"file_path": "src/hello.txt", "old_string": "world", "new_string": "sandbox"}),
		step("bash", "Bash", map[string]any{"command": "cat src/hello.txt | tr a-z A-Z && echo made-by-bash > src/bash.txt"}),
		step("identity", "Bash", map[string]any{"command": `echo "uid=$(id -u) gid=$(id -g)"; grep -E '^(Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs)' /proc/self/status`}),
	}
	for i, c := range denyChecks {
		steps = append(steps, step(fmt.Sprintf("deny-%d", i), "Bash", map[string]any{"command": c.command}))
	}
	var netSteps []map[string]any
	for i, c := range allowChecks {
		netSteps = append(netSteps, step(fmt.Sprintf("allow-%d", i), "Bash", map[string]any{"command": c.command}))
	}
	// idleSeconds: the runtime's idleTimeout, which the client's renewal throttle follows.
	plan := map[string]any{"api": apiURL(), "namespace": e.ns, "runtime": "agent", "session": "session-1", "handle": "codegen/default", "steps": steps, "probes": probes, "idleSeconds": 30}
	netPlan := map[string]any{"api": apiURL(), "namespace": e.ns, "runtime": "agent", "session": "session-net", "handle": "net/default", "steps": netSteps, "transport": "sse", "close": true, "idleSeconds": 30}

	var res, netRes rnSession
	var netErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		netErr = e.runClientErr("runtime-net", "session", netPlan, 4*time.Minute, &netRes)
	}()
	err := e.runClientErr("runtime", "session", plan, 4*time.Minute, &res)
	wg.Wait()
	if err != nil || netErr != nil {
		t.Fatalf("runtime pods: %v / %v", err, netErr)
	}
	if res.Error != "" || netRes.Error != "" {
		t.Fatalf("runtime errors: %q / %q", res.Error, netRes.Error)
	}
	t.Logf("acquire to Bound (first acquire, from the runtime pod): %.0f ms; Bound to first MCP session at the pod's IP: %.0f ms; MCP protocol %s (over SSE %s)", res.AcquireMillis, res.Reachable, res.Protocol, netRes.Protocol)
	// The runtime client is the Go SDK's v1.8.0 with its default revision on
	// Streamable HTTP: the stateless one, which sandboxd serves on /mcp.
	if res.Protocol != realNodeDefaultProtocol {
		t.Errorf("the runtime client negotiated MCP %q on /mcp, want the Go SDK v1.8.0's default %q", res.Protocol, realNodeDefaultProtocol)
	}

	// MCP at the pod's IP (the claim has no Service: docs/decisions.md), with and without the header.
	sandboxPod, err := kubeClient.CoreV1().Pods(e.ns).Get(context.Background(), res.Claim, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the claim's pod: %v", err)
	}
	if res.Phase != "Bound" || res.URL != "http://"+sandboxPod.Status.PodIP+":8080" {
		t.Errorf("acquire answered %s at %s", res.Phase, res.URL)
	}
	if res.NoHeader != http.StatusUnauthorized || res.BadHeader != http.StatusUnauthorized {
		t.Errorf("MCP requests without / with a wrong Authorization: %d / %d, want 401 / 401", res.NoHeader, res.BadHeader)
	}
	for _, n := range []string{"write", "read", "edit", "bash", "identity"} {
		if c := res.call(t, n); c.Err != "" || c.IsError {
			t.Errorf("%s: err %q isError %v: %s", n, c.Err, c.IsError, c.Text)
		}
	}
	if got := res.call(t, "read").Text; got != "     1\thello world\n     2\tsecond line\n" {
		t.Errorf("Read answered %q", got)
	}
	if got := res.call(t, "bash").Text; !strings.Contains(got, "HELLO SANDBOX") {
		t.Errorf("Bash answered %q", got)
	}
	var rt []string
	for _, c := range res.Calls {
		rt = append(rt, fmt.Sprintf("%s %.1fms", c.Tool, c.Millis))
	}
	t.Logf("tool calls from the runtime pod through the sandbox's Service: %s", strings.Join(rt[:4], ", "))

	// uid 65532, no capabilities, in a namespace enforcing restricted.
	id := res.call(t, "identity").Text
	if !strings.Contains(id, fmt.Sprintf("uid=%d gid=%d", sandboxUID, sandboxUID)) {
		t.Errorf("identity: %q, want uid and gid %d", id, sandboxUID)
	}
	for _, capLine := range []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"} {
		if !strings.Contains(id, capLine+":\t0000000000000000") {
			t.Errorf("%s is not empty: %q", capLine, id)
		}
	}
	if !strings.Contains(id, "NoNewPrivs:\t1") {
		t.Errorf("no_new_privs is not set: %q", id)
	}
	nsObj, err := kubeClient.CoreV1().Namespaces().Get(ctx, e.ns, metav1.GetOptions{})
	if err != nil || nsObj.Labels["pod-security.kubernetes.io/enforce"] != "restricted" {
		t.Errorf("namespace %s does not enforce restricted: %v %v", e.ns, nsObj.Labels, err)
	}

	// NetworkPolicy checks.
	var report []string
	check := func(r *rnSession, prefix string, checks []netCheck) {
		for i, c := range checks {
			// The answer is the output's last line (before it, the shell may report the
			// probe that timeout killed).
			out := strings.TrimSpace(r.call(t, fmt.Sprintf("%s-%d", prefix, i)).Text)
			got := out[strings.LastIndex(out, "\n")+1:]
			ok := got == c.want
			report = append(report, fmt.Sprintf("  %-50s want %-8s got %-8s %s", c.name, c.want, got, map[bool]string{true: "ok", false: "FAIL"}[ok]))
			if !ok {
				t.Errorf("network check %q: got %q, want %q", c.name, got, c.want)
			}
		}
	}
	for name, addr := range controls {
		got := res.Probes[addr]
		report = append(report, fmt.Sprintf("  control from the runtime pod: %-27s want OPEN     got %-8s %s", name, got, map[bool]string{true: "ok", false: "FAIL"}[got == "OPEN"]))
		if got != "OPEN" {
			t.Errorf("control %q (%s) from the runtime pod: %q, want OPEN", name, addr, got)
		}
	}
	sort.Strings(report)
	check(&res, "deny", denyChecks)
	check(&netRes, "allow", allowChecks)
	t.Logf("NetworkPolicy checks (from sandbox pods):\n%s", strings.Join(report, "\n"))

	// Idle timeout → Reaping → sync-back Job → claim gone; the files are in targetPath.
	eventually(t, 3*time.Minute, "claim "+res.Claim+" to be reaped and deleted", func(ctx context.Context) (bool, error) {
		_, err := airlockClient.AirlockV1alpha1().SandboxClaims(e.ns).Get(ctx, res.Claim, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
	for file, want := range map[string]string{"src/hello.txt": "hello sandbox\nsecond line\n", "src/bash.txt": "made-by-bash\n"} {
		got, err := e.readContent(path.Join("results/run1", file))
		if err != nil || got != want {
			t.Errorf("synced-back %s: %q %v, want %q", file, got, err, want)
		}
	}
	// The claim's children (the sync-back Job among them) go with it, by garbage collection.
	eventually(t, time.Minute, "the sync-back Job to go with its claim", func(ctx context.Context) (bool, error) {
		_, err := kubeClient.BatchV1().Jobs(e.ns).Get(ctx, res.Claim+"-sync", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
}

// TestRealNodeWorkspaceCollected: once a reaped claim's work is saved and its kept workspace's
// retention is over (0 here: at once), its workspace directory is gone from the content volume: a
// claim with a targetPath (its sync-back Job copies; the record's cleanup Job removes the
// workspace) and one without; nothing half-removed is left in <ns>/sandboxes, and the saved copy
// is in the target.
func TestRealNodeWorkspaceCollected(t *testing.T) {
	requireRealNode(t)
	e := newRealnodeEnv(t, "airlock-rn-ws", realnodeOptions{
		maxConcurrent: 2, maxPerSession: 2, maxInstances: 2, targetPath: "results/ws",
		allowedServices:    []airlockv1alpha1.ServiceReference{}, // a "net" sandbox, without targetPath
		workspaceRetention: ptr.To(time.Duration(0)),
	})
	work := func(handle string) map[string]any {
		session := "collected-" + strings.SplitN(handle, "/", 2)[0]
		return map[string]any{"api": apiURL(), "namespace": e.ns, "runtime": "agent", "session": session, "handle": handle, "close": true,
			"steps": []map[string]any{step("write", "Write", map[string]any{"file_path": "src/out.txt", "content": "saved by " + handle + "\n"})}}
	}
	var saved, nothing rnSession
	e.runClient(t, "runtime-saved", "session", work("codegen/default"), 4*time.Minute, &saved)
	e.runClient(t, "runtime-nothing", "session", work("net/default"), 4*time.Minute, &nothing)
	for _, r := range []*rnSession{&saved, &nothing} {
		if r.Error != "" || r.Phase != "Bound" {
			t.Fatalf("runtime: %s %s", r.Phase, r.Error)
		}
		if c := r.call(t, "write"); c.Err != "" || c.IsError {
			t.Fatalf("%s: write: err %q isError %v: %s", r.Claim, c.Err, c.IsError, c.Text)
		}
	}
	// Closed: each is reaped, its Job runs, and it is deleted once the Job has succeeded.
	for _, claim := range []string{saved.Claim, nothing.Claim} {
		eventually(t, 3*time.Minute, "claim "+claim+" to be reaped and deleted", func(ctx context.Context) (bool, error) {
			_, err := airlockClient.AirlockV1alpha1().SandboxClaims(e.ns).Get(ctx, claim, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return true, nil
			}
			return false, err
		})
	}
	if got, err := e.readContent("results/ws/src/out.txt"); err != nil || got != "saved by codegen/default\n" {
		t.Errorf("synced-back src/out.txt: %q %v, want the agent's work", got, err)
	}
	// Kept for a retention of 0: collected at once, by the record's cleanup Job, which then goes.
	dirs := map[string]string{e.claimWorkspace(t, saved.Claim): "sync-back", e.claimWorkspace(t, nothing.Claim): "no targetPath"}
	for dir := range dirs {
		record := workspace.RecordName(dir)
		eventually(t, 3*time.Minute, "the kept workspace "+dir+" to be collected", func(ctx context.Context) (bool, error) {
			_, err := kubeClient.BatchV1().Jobs(e.ns).Get(ctx, record, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return true, nil
			}
			return false, err
		})
	}
	entries, err := e.listContent(path.Join(e.ns, "sandboxes"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s/sandboxes after both claims went: %q", e.ns, entries)
	for _, name := range entries {
		switch what, kept := dirs[path.Join(e.ns, "sandboxes", name)]; {
		case kept:
			t.Errorf("the workspace %s (%s) is still there", name, what)
		case strings.Contains(name, ".airlock-"):
			t.Errorf("left behind in %s/sandboxes: %s", e.ns, name)
		}
	}
}

// TestRealNodeAPIServerAudienceRefused: a runtime pod that sends its default ServiceAccount
// token, whose audience is the API server (what a sniffer of the pod network would capture, and
// could replay against the API server), is refused with 401, told how to mount a projected
// token, and creates nothing.
func TestRealNodeAPIServerAudienceRefused(t *testing.T) {
	requireRealNode(t)
	e := newRealnodeEnv(t, "airlock-rn-aud", realnodeOptions{maxConcurrent: 1, maxPerSession: 1, maxInstances: 1})
	var res struct {
		Error string `json:"error"`
	}
	plan := map[string]any{"api": apiURL(), "tokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token",
		"namespace": e.ns, "runtime": "agent", "session": "sniffed", "handle": "codegen/default", "waitSeconds": 5}
	withDefaultToken := func(pod *corev1.Pod) { pod.Spec.AutomountServiceAccountToken = ptr.To(true) }
	if err := e.runClientWith("sniffed", "session", plan, 3*time.Minute, &res, withDefaultToken); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"401", "projected", "audience: airlock"} {
		if !strings.Contains(res.Error, want) {
			t.Errorf("the runtime's error %q does not say %q", res.Error, want)
		}
	}
	claims, err := airlockClient.AirlockV1alpha1().SandboxClaims(e.ns).List(context.Background(), metav1.ListOptions{})
	if err != nil || len(claims.Items) != 0 {
		t.Errorf("claims after a refused token: %v %v, want none", claims, err)
	}
}

// TestRealNodeOperatorCannotReadSecrets: on the real node too, the installed operator's
// ServiceAccount can create Secrets in a namespace of the cluster but not read them.
func TestRealNodeOperatorCannotReadSecrets(t *testing.T) {
	requireRealNode(t)
	checkOperatorCannotReadSecrets(t)
}

func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	sort.Float64s(s)
	i := int(p * float64(len(s)-1))
	return s[i]
}

// TestRealNodeAcquireLatency: 20 sessions one after another from the runtime pod, each acquired
// (to Bound), used once and closed; and tool-call round trips through the sandbox's Service.
func TestRealNodeAcquireLatency(t *testing.T) {
	requireRealNode(t)
	n := 20
	e := newRealnodeEnv(t, "airlock-rn-lat", realnodeOptions{maxConcurrent: 5, maxPerSession: 3, maxInstances: 10})
	var res struct {
		AcquireMillis     []float64 `json:"acquireMillis"`
		FirstCallMillis   []float64 `json:"firstCallMillis"`
		ReachableMillis   []float64 `json:"reachableMillis"`
		FirstResultMillis []float64 `json:"firstResultMillis"`
		RoundTripMillis   []float64 `json:"roundTripMillis"`
		Error             string    `json:"error"`
	}
	plan := map[string]any{"api": apiURL(), "namespace": e.ns, "runtime": "agent", "session": "bench", "handle": "codegen/default", "sessions": n, "roundTrips": 200}
	e.runClient(t, "bench", "bench", plan, 10*time.Minute, &res)
	if res.Error != "" {
		t.Fatalf("bench: %s", res.Error)
	}
	if len(res.AcquireMillis) != n {
		t.Fatalf("%d acquires measured, want %d", len(res.AcquireMillis), n)
	}
	t.Logf("acquire to Bound over %d sessions (runtime pod → Sandbox API Service, real pods): p50 %.0f ms, p90 %.0f ms, max %.0f ms",
		n, percentile(res.AcquireMillis, 0.5), percentile(res.AcquireMillis, 0.9), percentile(res.AcquireMillis, 1))
	t.Logf("Bound to first MCP session at the pod's IP (ready before Bound): p50 %.0f ms, max %.0f ms",
		percentile(res.ReachableMillis, 0.5), percentile(res.ReachableMillis, 1))
	t.Logf("first tool call (Bash echo) after connecting: p50 %.1f ms", percentile(res.FirstCallMillis, 0.5))
	t.Logf("cold: acquire → first tool result: p50 %.0f ms, p90 %.0f ms, max %.0f ms",
		percentile(res.FirstResultMillis, 0.5), percentile(res.FirstResultMillis, 0.9), percentile(res.FirstResultMillis, 1))
	t.Logf("tool-call round trip (Read, streamable HTTP to the sandbox pod) over %d calls: p50 %.2f ms, p90 %.2f ms, p99 %.2f ms",
		len(res.RoundTripMillis), percentile(res.RoundTripMillis, 0.5), percentile(res.RoundTripMillis, 0.9), percentile(res.RoundTripMillis, 0.99))
}

// TestRealNodeLeaderKill: while a burst of acquires runs through the Sandbox API Service, the
// leader operator pod is killed; a watch on the claims sees the limits hold throughout, and the
// new leader settles the burst.
func TestRealNodeLeaderKill(t *testing.T) {
	requireRealNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const maxConcurrent, maxInstances, burst = 3, 10, 20
	e := newRealnodeEnv(t, "airlock-rn-kill", realnodeOptions{maxConcurrent: maxConcurrent, maxPerSession: 1, maxInstances: maxInstances})

	// The watch: admitted live claims (Queued, Binding, Bound, Reaping, not being deleted) and
	// Binding+Bound, after every event.
	w, err := airlockClient.AirlockV1alpha1().SandboxClaims(e.ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu                  sync.Mutex
		claims              = map[string]*airlockv1alpha1.SandboxClaim{}
		maxAdmitted, maxRun int
		events              int
		history             = map[string][]string{} // claim -> phase changes seen
		worst               []string                // the claims admitted when maxAdmitted was seen
	)
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		for ev := range w.ResultChan() {
			c, ok := ev.Object.(*airlockv1alpha1.SandboxClaim)
			if !ok {
				continue
			}
			mu.Lock()
			events++
			if prev, ok := claims[c.Name]; !ok || prev.Status.Phase != c.Status.Phase || ev.Type == watch.Deleted {
				history[c.Name] = append(history[c.Name], fmt.Sprintf("%s:%s%s", time.Now().Format("05.000"), c.Status.Phase, map[bool]string{true: "(deleted)"}[ev.Type == watch.Deleted]))
			}
			if ev.Type == watch.Deleted {
				delete(claims, c.Name)
			} else {
				claims[c.Name] = c
			}
			admitted, running := 0, 0
			for _, c := range claims {
				if c.DeletionTimestamp != nil {
					continue
				}
				switch c.Status.Phase {
				case airlockv1alpha1.ClaimQueued, airlockv1alpha1.ClaimReaping:
					admitted++
				case airlockv1alpha1.ClaimBinding, airlockv1alpha1.ClaimBound:
					admitted++
					running++
				}
			}
			if admitted > maxAdmitted {
				worst = worst[:0]
				for _, c := range claims {
					if c.DeletionTimestamp == nil {
						worst = append(worst, fmt.Sprintf("%s(%s, created %s)", c.Name, c.Status.Phase, c.CreationTimestamp.Format("04:05")))
					}
				}
				sort.Strings(worst)
			}
			maxAdmitted, maxRun = max(maxAdmitted, admitted), max(maxRun, running)
			mu.Unlock()
		}
	}()

	leader, err := leaseHolder(ctx, operatorNamespace, "airlock-operator")
	if err != nil || leader == "" {
		t.Fatalf("no leader: %q %v", leader, err)
	}
	leaderPod := strings.SplitN(leader, "_", 2)[0]
	token := serviceAccountToken(t, e.ns, "agent")
	// From the node, by the Service's IP: the certificate is verified for the Service's name.
	c := client.New(fmt.Sprintf("https://%s:8443", serviceIP(t, operatorNamespace, sandboxAPIService)), staticToken(token), apiHTTPClient(t, e.ns))

	var wg sync.WaitGroup
	results := make([]string, burst)
	acquire := func(i int) {
		defer wg.Done()
		got, status, err := c.AcquireOnce(ctx, client.AcquireRequest{Namespace: e.ns, Runtime: "agent", Session: fmt.Sprintf("s-%02d", i), Handle: "codegen/default", WaitSeconds: waitSeconds(0)})
		switch {
		case err != nil:
			results[i] = fmt.Sprintf("%d %v", status, err)
		default:
			results[i] = fmt.Sprintf("%d %s", status, got.Phase)
		}
	}
	// The first wave fills part of maxInstances before the kill; the second, sent at once after
	// it, races for the rest (more acquires than slots) while the lease changes hands.
	const firstWave = 6
	for i := 0; i < firstWave; i++ {
		wg.Add(1)
		go acquire(i)
	}
	if _, err := kubectl(ctx, "-n", operatorNamespace, "delete", "pod", leaderPod, "--grace-period=0", "--force", "--wait=false"); err != nil {
		t.Fatal(err)
	}
	for i := firstWave; i < burst; i++ {
		wg.Add(1)
		go acquire(i)
	}
	wg.Wait()
	t.Logf("burst answers (leader %s killed mid-burst): %v", leaderPod, results)
	// A replica that dies mid-request answers (if at all) with the retryable 503, never 500.
	for i, r := range results {
		if strings.HasPrefix(r, "500 ") {
			t.Errorf("acquire %d answered %s; a request cut short by a dying replica must be a retryable 503", i, r)
		}
	}

	eventually(t, 2*time.Minute, "a new leader", func(ctx context.Context) (bool, error) {
		h, err := leaseHolder(ctx, operatorNamespace, "airlock-operator")
		return err == nil && h != "" && !strings.HasPrefix(h, leaderPod+"_"), nil
	})
	// The new leader settles the burst: maxInstances admitted, maxConcurrent of them Bound, the
	// rest Queued; refused claims are deleted.
	var unsettled []string // the claims' phases and reasons at the last look
	defer func() {
		if t.Failed() {
			t.Logf("the burst's claims at the last look: %v", unsettled)
		}
	}()
	eventually(t, 3*time.Minute, "the burst to settle", func(ctx context.Context) (bool, error) {
		list, err := airlockClient.AirlockV1alpha1().SandboxClaims(e.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		by := map[airlockv1alpha1.ClaimPhase]int{}
		unsettled = unsettled[:0]
		for _, c := range list.Items {
			by[c.Status.Phase]++
			unsettled = append(unsettled, c.Name+" "+string(c.Status.Phase)+"/"+c.Status.Reason+": "+c.Status.Message)
		}
		return by[airlockv1alpha1.ClaimBound] == maxConcurrent && by[airlockv1alpha1.ClaimQueued] == maxInstances-maxConcurrent && len(list.Items) == maxInstances, nil
	})
	w.Stop()
	<-watchDone
	mu.Lock()
	defer mu.Unlock()
	t.Logf("watch: %d events; at most %d admitted live claims (limit %d), at most %d Binding+Bound (limit %d)", events, maxAdmitted, maxInstances, maxRun, maxConcurrent)
	if maxRun > maxConcurrent {
		t.Errorf("%d claims Binding or Bound at once, limit maxConcurrent %d", maxRun, maxConcurrent)
	}
	// Binding, Bound and Reaping claims are never taken back: once seen, none is refused.
	var demoted []string
	for name, changes := range history {
		seenRunning := false
		for _, ch := range changes {
			if strings.Contains(ch, ":Binding") || strings.Contains(ch, ":Bound") {
				seenRunning = true
			}
			if seenRunning && strings.Contains(ch, ":Refused") {
				t.Errorf("claim %s was Binding or Bound, then Refused: %v", name, changes)
			}
			if strings.Contains(ch, ":Refused") && slices.ContainsFunc(changes, func(c string) bool { return strings.Contains(c, ":Queued") }) {
				demoted = append(demoted, name)
				break
			}
		}
	}
	// Queued claims count toward maxInstances. A leader that walks again may refuse a Queued claim
	// in favour of one that sorts before it (claims created within the same second sort by name),
	// but it writes the refusal before the decision that takes the place, and confirms every
	// decision that takes a place over a fresh list (pkg/controller/claim, syncUndecided): a watch
	// must never see more than maxInstances Queued+Binding+Bound+Reaping claims.
	if maxAdmitted > maxInstances {
		var h []string
		for name, changes := range history {
			h = append(h, name+": "+strings.Join(changes, " → "))
		}
		sort.Strings(h)
		t.Errorf("%d Queued+Binding+Bound+Reaping claims at once, limit maxInstances %d; Queued claims later refused: %v\nat that moment: %v\nphase changes seen:\n%s",
			maxAdmitted, maxInstances, demoted, worst, strings.Join(h, "\n"))
	} else if len(demoted) > 0 {
		t.Logf("Queued claims later refused (walked again oldest first by the new leader): %v", demoted)
	}
	eventually(t, 2*time.Minute, "the operator Deployment back at 2 available replicas", func(ctx context.Context) (bool, error) {
		d, err := kubeClient.AppsV1().Deployments(operatorNamespace).Get(ctx, "airlock-operator", metav1.GetOptions{})
		return err == nil && d.Status.AvailableReplicas == 2, nil
	})
}

// TestRealNodeCrashLoop: a Bound claim whose sandbox then crash-loops is reaped with sync-back,
// reason PodFailed, once its pod has not been ready for the class's startupTimeout: its work is
// saved and its slot freed, where it used to stay Bound until the idle timeout. The agent makes
// the crash loop itself: it turns the class's --state-dir (on the scratch volume) into a link into
// the workspace and stops sandboxd, so every restart fails on the state directory.
func TestRealNodeCrashLoop(t *testing.T) {
	requireRealNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const session, handle = "crash", "codegen/default"
	e := newRealnodeEnv(t, "airlock-rn-crash", realnodeOptions{
		maxConcurrent: 1, maxPerSession: 1, maxInstances: 1,
		targetPath: "results/crash", startupTimeout: 30 * time.Second,
		// The state directory is the class's to set, on the scratch volume (it outlives the
		// container): the agent replaces it with a link into the workspace, which sandboxd
		// refuses at every start (the snapshot store must be out of the file tools' reach).
		// (--workspace is the operator's: always the workspace volume's mountPath.)
		codegenArgs: []string{"sandboxd", "--listen=:8080", "--state-dir=/cache/sandboxd-state"},
	})
	claim := claimname.For("agent", session, handle)

	// Every phase and reason the claim goes through, until it is deleted.
	w, err := airlockClient.AirlockV1alpha1().SandboxClaims(e.ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + claim})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	seen := make(chan []string, 1)
	go func() {
		var phases []string
		defer func() { seen <- phases }()
		for ev := range w.ResultChan() {
			c, ok := ev.Object.(*airlockv1alpha1.SandboxClaim)
			if !ok {
				continue
			}
			if ev.Type == watch.Deleted {
				phases = append(phases, "deleted")
				return
			}
			p := string(c.Status.Phase) + "/" + c.Status.Reason
			if len(phases) == 0 || phases[len(phases)-1] != p {
				phases = append(phases, p)
			}
		}
	}()

	plan := map[string]any{"api": apiURL(), "namespace": e.ns, "runtime": "agent", "session": session, "handle": handle, "steps": []map[string]any{
		step("save", "Bash", map[string]any{"command": "echo the agents work > saved.txt && cat saved.txt"}),
		step("crash", "Bash", map[string]any{"command": "rm -rf /cache/sandboxd-state && ln -s /workspace /cache/sandboxd-state && kill 1"}),
	}}
	var res rnSession
	e.runClient(t, "runtime-crash", "session", plan, 4*time.Minute, &res)
	if res.Error != "" || res.Phase != "Bound" {
		t.Fatalf("runtime: %s %s", res.Phase, res.Error)
	}
	if c := res.call(t, "save"); c.Err != "" || c.IsError || strings.TrimSpace(c.Text) != "the agents work" {
		t.Fatalf("save: err %q isError %v: %q", c.Err, c.IsError, c.Text)
	}

	var phases []string
	select {
	case phases = <-seen:
	case <-ctx.Done():
		t.Fatalf("the crash-looping claim %s was not reaped and deleted", claim)
	}
	t.Logf("claim %s: %s", claim, strings.Join(phases, " → "))
	if !slices.Contains(phases, string(airlockv1alpha1.ClaimReaping)+"/PodFailed") {
		t.Errorf("phases %v: the claim was never Reaping with reason PodFailed", phases)
	}
	if got, err := e.readContent("results/crash/saved.txt"); err != nil || got != "the agents work\n" {
		t.Errorf("synced-back saved.txt: %q %v, want the agent's work", got, err)
	}
}

// TestRealNodeEphemeralEviction: a sandbox that writes past its ephemeral-storage limit is evicted
// by the kubelet, alone, and its claim says why (the Evicted condition names the pod and the
// kubelet's message, a Warning event): a runaway build does not fill the node's disk. The class
// limits ephemeral storage to 64Mi; the agent writes 256 MiB into the container's writable layer.
// The operator then starts another pod on the same workspace, and the claim stays usable.
func TestRealNodeEphemeralEviction(t *testing.T) {
	requireRealNode(t)
	const session, handle = "evict", "codegen/default"
	e := newRealnodeEnv(t, "airlock-rn-evict", realnodeOptions{
		maxConcurrent: 1, maxPerSession: 1, maxInstances: 1,
		codegenResources: &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceEphemeralStorage: resource.MustParse("64Mi")}},
	})
	claim := claimname.For("agent", session, handle)

	plan := map[string]any{"api": apiURL(), "namespace": e.ns, "runtime": "agent", "session": session, "handle": handle, "steps": []map[string]any{
		step("keep", "Write", map[string]any{"file_path": "kept.txt", "content": "on the workspace volume\n"}),
		step("fill", "Bash", map[string]any{"command": "dd if=/dev/zero of=/tmp/fill bs=1M count=256 2>&1 | tail -1"}),
	}}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		pods, _ := kubeClient.CoreV1().Pods(e.ns).List(context.Background(), metav1.ListOptions{})
		for _, p := range pods.Items {
			t.Logf("pod %s: %s %s %q", p.Name, p.Status.Phase, p.Status.Reason, p.Status.Message)
		}
		if c, err := airlockClient.AirlockV1alpha1().SandboxClaims(e.ns).Get(context.Background(), claim, metav1.GetOptions{}); err == nil {
			t.Logf("claim %s: %s %s; conditions %+v", claim, c.Status.Phase, c.Status.Reason, c.Status.Conditions)
		}
	})
	var res rnSession
	e.runClient(t, "runtime-evict", "session", plan, 4*time.Minute, &res)
	if res.Error != "" || res.Phase != "Bound" {
		t.Fatalf("runtime: %s %s", res.Phase, res.Error)
	}
	fill := res.call(t, "fill")
	t.Logf("fill: err %q isError %v: %q", fill.Err, fill.IsError, fill.Text)
	c, err := airlockClient.AirlockV1alpha1().SandboxClaims(e.ns).Get(context.Background(), claim, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Status.Frozen.Resources.Limits[corev1.ResourceEphemeralStorage]; got.Cmp(resource.MustParse("64Mi")) != 0 {
		t.Fatalf("frozen ephemeral-storage limit %s, want the class's 64Mi", got.String())
	}
	if got := c.Status.Frozen.Resources.Limits[corev1.ResourceMemory]; got.Cmp(resource.MustParse("4Gi")) != 0 {
		t.Errorf("frozen memory limit %s, want the default 4Gi (the class sets none)", got.String())
	}

	var evicted *metav1.Condition
	eventually(t, 3*time.Minute, "the claim to report its pod's eviction", func(ctx context.Context) (bool, error) {
		c, err := airlockClient.AirlockV1alpha1().SandboxClaims(e.ns).Get(ctx, claim, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for i := range c.Status.Conditions {
			if c.Status.Conditions[i].Type == "Evicted" && c.Status.Conditions[i].Status == metav1.ConditionTrue {
				evicted = &c.Status.Conditions[i]
				return true, nil
			}
		}
		return false, nil
	})
	t.Logf("claim %s: Evicted condition: %s", claim, evicted.Message)
	if !strings.Contains(evicted.Message, "ephemeral") {
		t.Errorf("Evicted message %q does not say the ephemeral-storage limit passed", evicted.Message)
	}
	events, err := kubeClient.CoreV1().Events(e.ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + claim + ",reason=Evicted"})
	if err != nil || len(events.Items) == 0 || events.Items[0].Type != corev1.EventTypeWarning {
		t.Errorf("Warning Evicted events of the claim: %v %v", events, err)
	}
	// The next pod serves the same workspace: the claim becomes Ready again.
	var workspaceDir string
	eventually(t, 3*time.Minute, "the claim's next pod to be ready", func(ctx context.Context) (bool, error) {
		c, err := airlockClient.AirlockV1alpha1().SandboxClaims(e.ns).Get(ctx, claim, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		workspaceDir = c.Spec.WorkspaceDir
		for _, cond := range c.Status.Conditions {
			if cond.Type == "Ready" {
				return c.Status.Phase == airlockv1alpha1.ClaimBound && cond.Status == metav1.ConditionTrue, nil
			}
		}
		return false, nil
	})
	if got, err := e.readContent(path.Join(workspaceDir, "kept.txt")); err != nil || got != "on the workspace volume\n" {
		t.Errorf("the workspace after the eviction: kept.txt %q %v", got, err)
	}
}

// realnodeSandboxGoImage is the -go sandbox image (the Go toolchain and gopls).
func realnodeSandboxGoImage() string {
	if image := os.Getenv("AIRLOCK_E2E_SANDBOX_GO_IMAGE"); image != "" {
		return image
	}
	return realnodeSandboxImage() + "-go"
}

// TestRealNodeSandboxTools: the tools beyond SPEC section 6 work in the images as they run on a
// node, as uid 65532 under the restricted pod baseline (issue 15): checkpoints through the git
// store outside the workspace (the image's git), and code navigation through the -go image's
// gopls. The workspace is not a git repository and stays one that is not.
func TestRealNodeSandboxTools(t *testing.T) {
	requireRealNode(t)
	e := newRealnodeEnv(t, "airlock-rn-tools", realnodeOptions{
		maxConcurrent: 1, maxPerSession: 1, maxInstances: 1, codegenImage: realnodeSandboxGoImage(),
	})
	const mainGo = "package main\n\nimport \"fmt\"\n\nfunc greet(name string) string { return \"hello \" + name }\n\nfunc main() { fmt.Println(greet(\"agent\")) }\n"
	plan := map[string]any{"api": apiURL(), "namespace": e.ns, "runtime": "agent", "session": "tools", "handle": "codegen/default", "steps": []map[string]any{
		step("gomod", "Write", map[string]any{"file_path": "go.mod", "content": "module example.com/hello\n\ngo 1.24\n"}),
		step("main", "Write", map[string]any{"file_path": "main.go", "content": mainGo}),
		step("snapshot", "snapshot_create", map[string]any{"label": "before"}),
		step("change", "Bash", map[string]any{"command": "sed -i 's/hello /bye /' main.go && grep -c bye main.go"}),
		step("diff", "snapshot_diff", map[string]any{"id": "s1"}),
		step("restore", "snapshot_restore", map[string]any{"id": "s1"}),
		step("restored", "Bash", map[string]any{"command": "grep -c 'hello ' main.go; test -e .git && echo git || echo no-git; id -u"}),
		step("definition", "find_definition", map[string]any{"file_path": "main.go", "line": 7, "symbol": "greet"}),
		step("references", "find_references", map[string]any{"file_path": "main.go", "line": 5, "symbol": "greet", "include_declaration": true}),
	}}
	var res rnSession
	e.runClient(t, "runtime-tools", "session", plan, 6*time.Minute, &res)
	if res.Error != "" || res.Phase != "Bound" {
		t.Fatalf("runtime: %s %s", res.Phase, res.Error)
	}
	for _, tc := range []struct{ name, want string }{
		{"gomod", ""}, {"main", ""},
		{"snapshot", "Snapshot s1 taken"},
		{"change", "1"},
		{"diff", "bye"},
		{"restore", "s1"},
		{"restored", "1\nno-git\n65532"},
		{"definition", "main.go:5:6"},
		{"references", "main.go:7:"},
	} {
		c := res.call(t, tc.name)
		t.Logf("%s (%s, %.0f ms): %q", tc.name, c.Tool, c.Millis, c.Text)
		if c.Err != "" || c.IsError || !strings.Contains(c.Text, tc.want) {
			t.Errorf("%s: err %q isError %v: %q, want %q in it", tc.name, c.Err, c.IsError, c.Text, tc.want)
		}
	}
}
