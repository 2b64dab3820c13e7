//go:build e2e && realnode

package e2e

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
)

// realnodePythonImage is the runtime in Python (e2e/realnode/python/runtime.py on this host's
// python3: hack/imagebuild/build-images.sh e2e-python).
func realnodePythonImage() string {
	if image := os.Getenv("AIRLOCK_E2E_PYTHON_IMAGE"); image != "" {
		return image
	}
	return "localhost/airlock-e2e/python-runtime:v0.1.0"
}

// watchPodIPs records the IP of every pod of namespace ns from now until the test ends; the
// function it returns gives them by pod name.
func watchPodIPs(t *testing.T, ns string) func() map[string]string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w, err := kubeClient.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		cancel()
		t.Fatalf("watching the pods of %s: %v", ns, err)
	}
	var mu sync.Mutex
	ips := map[string]string{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			if p, ok := ev.Object.(*corev1.Pod); ok && p.Status.PodIP != "" {
				mu.Lock()
				ips[p.Name] = p.Status.PodIP
				mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		w.Stop()
		cancel()
		<-done
	})
	return func() map[string]string {
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(ips)
	}
}

// pythonResult is runtime.py's RESULT document.
type pythonResult struct {
	Claim          string   `json:"claim"`
	Phase          string   `json:"phase"`
	URL            string   `json:"url"`
	NoHeaderStatus int      `json:"noHeaderStatus"`
	Protocol       string   `json:"protocol"`
	Server         string   `json:"server"`
	Tools          []string `json:"tools"`
	Calls          []struct {
		Tool    string `json:"tool"`
		IsError bool   `json:"isError"`
		Text    string `json:"text"`
	} `json:"calls"`
	RenewStatus int    `json:"renewStatus"`
	CloseStatus int    `json:"closeStatus"`
	Error       string `json:"error"`
}

// TestRealNodePythonRuntime (issue 27, item 3): a runtime written in Python with the standard
// library only, in a pod of its own as the AgentRuntime's ServiceAccount, acquires a sandbox
// through the Sandbox API Service (HTTPS verified with the ConfigMap airlock-ca, a projected
// token with audience airlock), speaks MCP over streamable HTTP to the sandbox's pod IP with the
// acquire answer's header (refused without it), writes, reads and runs a command in the
// sandbox, renews the claim and closes its session, which the operator then reaps.
func TestRealNodePythonRuntime(t *testing.T) {
	requireRealNode(t)
	ctx := context.Background()
	e := newRealnodeEnv(t, "airlock-rn-python", realnodeOptions{maxConcurrent: 2, maxPerSession: 2, maxInstances: 2})

	calls := []map[string]any{
		{"tool": "Write", "arguments": map[string]any{"file_path": "py/hello.txt", "content": "hello from python\n"}},
		{"tool": "Read", "arguments": map[string]any{"file_path": "py/hello.txt"}},
		{"tool": "Bash", "arguments": map[string]any{"command": "echo uid=$(id -u) && cat py/hello.txt | tr a-z A-Z"}},
	}
	args := []string{"--api", apiURL(), "--namespace", e.ns, "--runtime", "agent", "--session", "python-1", "--handle", "codegen/default"}
	for _, c := range calls {
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		args = append(args, "--call", string(b))
	}
	// sessions/close reaps the claim at once, its pod first: the pods' IPs are recorded while the
	// runtime runs, to know the claim pod's IP afterwards.
	podIPs := watchPodIPs(t, e.ns)
	pod := restrictedPod("runtime-python", map[string]string{"app": "runtime"}, realnodePythonImage(), args)
	pod.Spec.ServiceAccountName = "agent"
	withAirlockToken(pod) // the token at /var/run/secrets/airlock/token, airlock-ca at /var/run/airlock/ca
	phase, logs, err := runPodToEnd(ctx, e.ns, pod, 4*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var res pythonResult
	for _, line := range strings.Split(string(logs), "\n") {
		if s, ok := strings.CutPrefix(line, "RESULT "); ok {
			if err := json.Unmarshal([]byte(s), &res); err != nil {
				t.Fatalf("RESULT %q: %v", s, err)
			}
		}
	}
	if phase != corev1.PodSucceeded || res.Error != "" {
		t.Fatalf("the Python runtime ended %s, error %q; logs:\n%s", phase, res.Error, logs)
	}

	sandboxIP := podIPs()[res.Claim]
	if sandboxIP == "" || res.Phase != "Bound" || res.URL != "http://"+sandboxIP+":8080" {
		t.Errorf("acquire answered %s at %s, want Bound at the claim pod's IP %q", res.Phase, res.URL, sandboxIP)
	}
	if res.NoHeaderStatus != http.StatusUnauthorized {
		t.Errorf("MCP without the acquire answer's Authorization: %d, want 401", res.NoHeaderStatus)
	}
	if res.Server != "airlock-sandboxd" || !strings.Contains(","+strings.Join(res.Tools, ",")+",", ",Write,") {
		t.Errorf("MCP session: server %q (protocol %s), tools %v", res.Server, res.Protocol, res.Tools)
	}
	if len(res.Calls) != len(calls) {
		t.Fatalf("%d tool results, want %d: %+v", len(res.Calls), len(calls), res.Calls)
	}
	for i, c := range res.Calls {
		if c.IsError {
			t.Errorf("%s: isError: %s", calls[i]["tool"], c.Text)
		}
	}
	if got := res.Calls[1].Text; got != "     1\thello from python\n" {
		t.Errorf("Read answered %q", got)
	}
	if got := res.Calls[2].Text; !strings.Contains(got, "uid=65532") || !strings.Contains(got, "HELLO FROM PYTHON") {
		t.Errorf("Bash answered %q, want the sandbox's uid 65532 and the file", got)
	}
	if res.RenewStatus != http.StatusNoContent || res.CloseStatus != http.StatusAccepted {
		t.Errorf("renew %d, sessions/close %d; want 204 and 202", res.RenewStatus, res.CloseStatus)
	}
	// sessions/close asked the operator to reap the claim: it is marked, Reaping, or gone.
	c, err := airlockClient.AirlockV1alpha1().SandboxClaims(e.ns).Get(ctx, res.Claim, metav1.GetOptions{})
	if err == nil {
		if _, ok := c.Annotations[airlockv1alpha1.AnnotationReapRequested]; !ok {
			t.Errorf("claim %s after sessions/close: phase %s without the %s annotation", c.Name, c.Status.Phase, airlockv1alpha1.AnnotationReapRequested)
		}
	} else if !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	t.Logf("Python %s runtime: claim %s Bound at %s, MCP %s, %d tools listed, 3 calls", realnodePythonImage(), res.Claim, res.URL, res.Protocol, len(res.Tools))
}
