//go:build e2e && realnode

package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
)

// clientExample is one client's example (docs/clients.md) in the image a runtime author would
// build for it (hack/imagebuild/build-images.sh).
type clientExample struct {
	lang    string
	image   string
	command []string // nil: the image's entrypoint
}

func clientExamples() []clientExample {
	image := func(env, def string) string {
		if v := os.Getenv(env); v != "" {
			return v
		}
		return def
	}
	return []clientExample{
		{lang: "go", image: image("AIRLOCK_E2E_GO_EXAMPLE_IMAGE", "localhost/airlock-e2e/go-example:v0.1.0")},
		// The e2e-python image holds clients/python/examples/agent_loop.py beside airlock_client.
		{lang: "python", image: realnodePythonImage(), command: []string{"/usr/bin/python3", "/agent_loop.py"}},
		{lang: "typescript", image: image("AIRLOCK_E2E_TYPESCRIPT_IMAGE", "localhost/airlock-e2e/typescript-example:v0.1.0")},
	}
}

// TestRealNodeClientExamples (issue 41, item 6): each client's example (Go, Python, TypeScript)
// runs as a runtime author deploys it: a pod of its own as the AgentRuntime's ServiceAccount,
// with a projected token of audience airlock and the airlock-ca bundle mounted, and only
// AIRLOCK_RUNTIME and AIRLOCK_NAMESPACE (the downward API) set. It acquires a sandbox, calls
// Write, Bash and Read through MCP at the claim pod's address, renews, closes its session, and
// exits 0 (a renewal that failed would end it with 1); the claim is then marked for reaping and
// goes.
func TestRealNodeClientExamples(t *testing.T) {
	requireRealNode(t)
	e := newRealnodeEnv(t, "airlock-rn-examples", realnodeOptions{maxConcurrent: 3, maxPerSession: 1, maxInstances: 3})
	podIPs := watchPodIPs(t, e.ns) // the claim pods' IPs, known after they are reaped
	for _, ex := range clientExamples() {
		t.Run(ex.lang, func(t *testing.T) { e.runClientExample(t, ex, podIPs) })
	}
}

func (e *realnodeEnv) runClientExample(t *testing.T, ex clientExample, podIPs func() map[string]string) {
	ctx := context.Background()
	session := "example-" + ex.lang
	pod := restrictedPod("example-"+ex.lang, map[string]string{"app": "runtime"}, ex.image, []string{session})
	pod.Spec.ServiceAccountName = "agent"
	withAirlockToken(pod) // the token at /var/run/secrets/airlock/token, airlock-ca at /var/run/airlock/ca
	c := &pod.Spec.Containers[0]
	c.Command = ex.command
	c.Env = []corev1.EnvVar{
		{Name: "AIRLOCK_RUNTIME", Value: "agent"},
		{Name: "AIRLOCK_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
	}
	done, logs, err := runPodWatched(ctx, e.ns, pod, 4*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if code := exitCode(done); done.Status.Phase != corev1.PodSucceeded || code != 0 {
		t.Fatalf("the %s example ended %s, exit code %d; logs:\n%s", ex.lang, done.Status.Phase, code, logs)
	}
	out := parseExampleOutput(string(logs))
	t.Logf("%s example (%s):\n%s", ex.lang, ex.image, logs)

	if ip := podIPs()[out.claim]; out.claim == "" || ip == "" || out.url != "http://"+ip+":8080/mcp" {
		t.Errorf("sandbox %q at %q, want the claim pod's address http://%s:8080/mcp", out.claim, out.url, ip)
	}
	for _, tool := range []string{"Write", "Bash", "Read"} {
		if text, ok := out.steps[tool]; !ok || strings.HasPrefix(text, "ERROR ") {
			t.Errorf("%s: %q (printed %v)", tool, text, ok)
		}
	}
	// The sandbox image has no python3: the command's fallback ran, in the sandbox's bash.
	if bash := out.steps["Bash"]; !strings.Contains(bash, "no python3 in this sandbox") && !strings.Contains(bash, "hello from the sandbox") {
		t.Errorf("Bash answered %q, want the script's output or its fallback's", bash)
	}
	if read := out.steps["Read"]; !strings.Contains(read, "print('hello from the sandbox')") {
		t.Errorf("Read answered %q, want the file Write wrote", read)
	}
	if want := "session " + session + " (1 sandbox(es))"; out.closed != want {
		t.Errorf("close printed %q, want %q", out.closed, want)
	}
	if out.claim != "" {
		waitClaimClosed(t, e.ns, out.claim)
	}
}

// exampleOutput is what an example printed: "sandbox <claim> at <url> (...)", one
// "<tool> -> <result>" per call (a result may go on over several lines), "closed session ...".
type exampleOutput struct {
	claim, url, closed string
	steps              map[string]string
}

func parseExampleOutput(logs string) exampleOutput {
	out := exampleOutput{steps: map[string]string{}}
	step := ""
	for _, line := range strings.Split(logs, "\n") {
		tool, text, isStep := strings.Cut(line, " -> ")
		switch {
		case strings.HasPrefix(line, "sandbox "):
			if f := strings.Fields(line); len(f) >= 4 && f[2] == "at" {
				out.claim, out.url = f[1], f[3]
			}
			step = ""
		case strings.HasPrefix(line, "closed "):
			out.closed = strings.TrimPrefix(line, "closed ")
			step = ""
		case isStep && (tool == "Write" || tool == "Bash" || tool == "Read"):
			step = tool
			out.steps[tool] = text
		case step != "":
			out.steps[step] += "\n" + line
		}
	}
	return out
}

// exitCode is the exit code of the pod's first container, or -1 when it has not terminated.
func exitCode(p *corev1.Pod) int32 {
	for _, s := range p.Status.ContainerStatuses {
		if s.State.Terminated != nil {
			return s.State.Terminated.ExitCode
		}
	}
	return -1
}

// runPodWatched creates pod in namespace ns, watches it until it has Succeeded or Failed (an
// error if it is deleted first or timeout passes), and returns it as it ended, and its logs.
func runPodWatched(ctx context.Context, ns string, pod *corev1.Pod, timeout time.Duration) (*corev1.Pod, []byte, error) {
	if _, err := kubeClient.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return nil, nil, fmt.Errorf("creating pod %s: %w", pod.Name, err)
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	pods := kubeClient.CoreV1().Pods(ns)
	ev, err := watchtools.UntilWithSync(wctx, byName(pod.Name,
		func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return pods.List(ctx, o) },
		pods.Watch), &corev1.Pod{}, nil, func(ev watch.Event) (bool, error) {
		p, ok := ev.Object.(*corev1.Pod)
		if ev.Type == watch.Deleted || !ok {
			return false, fmt.Errorf("pod %s: %s before it ended", pod.Name, ev.Type)
		}
		return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed, nil
	})
	if err != nil {
		logs, _ := pods.GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(ctx) // what it printed, if anything
		return nil, nil, fmt.Errorf("waiting for pod %s to end: %w; logs:\n%s", pod.Name, err, logs)
	}
	done := ev.Object.(*corev1.Pod)
	logs, err := pods.GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		return done, nil, fmt.Errorf("logs of %s: %w", pod.Name, err)
	}
	return done, logs, nil
}

// waitClaimClosed checks that the claim a session/close answered for is marked for reaping (or
// already gone), then watches it until it is deleted: reaped, with its sync-back.
func waitClaimClosed(t *testing.T, ns, name string) {
	t.Helper()
	ctx := context.Background()
	claims := airlockClient.AirlockV1alpha1().SandboxClaims(ns)
	c, err := claims.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Annotations[airlockv1alpha1.AnnotationReapRequested]; !ok {
		t.Errorf("claim %s after sessions/close: phase %s without the %s annotation", name, c.Status.Phase, airlockv1alpha1.AnnotationReapRequested)
	}
	wctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	gone := func(store cache.Store) (bool, error) {
		_, exists, err := store.GetByKey(ns + "/" + name)
		return !exists, err
	}
	_, err = watchtools.UntilWithSync(wctx, byName(name,
		func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return claims.List(ctx, o) },
		claims.Watch), &airlockv1alpha1.SandboxClaim{}, gone, func(ev watch.Event) (bool, error) {
		return ev.Type == watch.Deleted, nil
	})
	if err != nil {
		t.Fatalf("waiting for claim %s to be reaped and deleted after sessions/close: %v", name, err)
	}
}

// byName is a ListWatch of the one object named name (list and watch of its namespace's client).
func byName(name string, list func(context.Context, metav1.ListOptions) (runtime.Object, error),
	watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error)) *cache.ListWatch {
	sel := fields.OneTermEqualSelector("metadata.name", name).String()
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = sel
			return list(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return watchFn(ctx, o)
		},
	}
}
