//go:build e2e && realnode

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/controller/sandboxclass"
)

// dnsLookup is a Bash command that asks the pod's resolver (busybox nslookup, which sends its own
// queries to the nameserver of /etc/resolv.conf) for name and prints RESOLVED, ANSWERED (an
// answer that the name does not exist: a DNS path all the same) or NO ANSWER.
func dnsLookup(name string) string {
	return fmt.Sprintf(`out=$(timeout 5 nslookup %s 2>&1); if [ $? -eq 0 ]; then echo RESOLVED; elif echo "$out" | grep -q NXDOMAIN; then echo ANSWERED; else echo NO ANSWER; fi`, name)
}

// addDNSClass creates a class of the egress env's image named for name, with egress (or none)
// and the allowed Services, and adds a registry entry name for it.
func addDNSClass(t *testing.T, e *realnodeEnv, name string, egress *airlockv1alpha1.SandboxEgress, allowed ...airlockv1alpha1.ServiceReference) string {
	t.Helper()
	ctx := context.Background()
	class := validClass("e2e-" + name + "-" + e.ns)
	class.Spec.Image = realnodeSandboxGoImage()
	class.Spec.Ports = []airlockv1alpha1.SandboxPort{{Name: "mcp", Port: 8080}}
	class.Spec.Env = []corev1.EnvVar{{Name: "HOME", Value: "/cache/home"}}
	class.Spec.Egress = egress
	class.Spec.AllowedServices = allowed
	if _, err := airlockClient.AirlockV1alpha1().SandboxClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating class %s: %v", class.Name, err)
	}
	t.Cleanup(func() {
		_ = airlockClient.AirlockV1alpha1().SandboxClasses().Delete(context.Background(), class.Name, metav1.DeleteOptions{})
	})
	e.classes = append(e.classes, class.Name)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		reg, err := airlockClient.AirlockV1alpha1().ToolRegistries(e.ns).Get(ctx, "tools", metav1.GetOptions{})
		if err != nil {
			return err
		}
		reg.Spec.Sandboxes = append(reg.Spec.Sandboxes, airlockv1alpha1.RegistrySandbox{Name: name, Class: class.Name, MaxInstances: 3})
		_, err = airlockClient.AirlockV1alpha1().ToolRegistries(e.ns).Update(ctx, reg, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("adding %s to the registry: %v", name, err)
	}
	return class.Name
}

// TestRealNodeEgressDNS (issue 39, docs/egress.md "DNS"): a sandbox with egress resolves only
// through the gateway. From its pod, kube-dns gives no answer for any name (an allowed one, a
// Service's, the API server's), a Service it does not allow is BLOCKED by address, and git
// reaches an allowed host by name all the same (CONNECT by name: the gateway resolves it). A class
// with egress and allowedServices is refused: its Valid condition says why, an acquire of it is
// 502 InvalidClass with that reason, and its claims have no pod and no NetworkPolicy. The control:
// a class with the same Service and no egress resolves and reaches it by name, so NO ANSWER above
// is the egress sandbox's policy, not a dead resolver.
func TestRealNodeEgressDNS(t *testing.T) {
	requireRealNode(t)
	ctx := context.Background()
	f := setUpEgress(t)
	e := newEgressEnv(t, f, "")
	e.startEcho(t, "svc")
	svc := airlockv1alpha1.ServiceReference{Namespace: e.ns, Name: "svc"}
	svcName := "svc." + e.ns + ".svc.cluster.local"
	svcIP := serviceIP(t, e.ns, "svc")
	both := addDNSClass(t, e, "both", egressClassSpec(), svc)
	addDNSClass(t, e, "services", nil, svc)

	checkRefusedClass(t, e, both)

	gitByName := `export GIT_TERMINAL_PROMPT=0 HOME=/cache/home; timeout 120 git ls-remote https://git.internet.test/repo.git >/tmp/refs 2>&1; echo "exit=$?"`
	egressChecks := []netCheck{
		{"an allowed name, from the pod's resolver", dnsLookup("git.internet.test"), "NO ANSWER"},
		{"the allowed Service's name", dnsLookup(svcName), "NO ANSWER"},
		{"the API server's name", dnsLookup("kubernetes.default.svc.cluster.local"), "NO ANSWER"},
		{"a tunnelling label under an allowed name", dnsLookup("c2VjcmV0.allowed.internet.test"), "NO ANSWER"},
		{"the Service by address (not allowed: a class with egress has none)", tcpProbe(svcIP, 8080), "BLOCKED"},
		{"git by name through the gateway (CONNECT by name)", gitByName, "exit=0"},
	}
	controlChecks := []netCheck{
		{"the allowed Service's name, without egress", dnsLookup(svcName), "RESOLVED"},
		{"the allowed Service by name, without egress", httpGet(svcName, 8080), "ok"},
	}
	sessionOf := func(name, session, handle string, checks []netCheck) {
		var steps []map[string]any
		for i, c := range checks {
			steps = append(steps, step(fmt.Sprintf("check-%d", i), "Bash", map[string]any{"command": c.command, "timeout": 180000}))
		}
		var res rnSession
		e.runClient(t, name, "session", map[string]any{"api": apiURL(), "namespace": e.ns, "runtime": "agent", "session": session, "handle": handle, "steps": steps, "close": true}, 10*time.Minute, &res)
		if res.Error != "" || res.Phase != "Bound" {
			t.Fatalf("%s: %s %s", handle, res.Phase, res.Error)
		}
		for i, c := range checks {
			// The answer is the output's last line (before it, the shell may report the probe
			// that timeout killed).
			call := res.call(t, fmt.Sprintf("check-%d", i))
			out := strings.TrimSpace(call.Text)
			got := out[strings.LastIndex(out, "\n")+1:]
			t.Logf("%s: %-60s want %-9s got %s", handle, c.name, c.want, got)
			if call.Err != "" || got != c.want {
				t.Errorf("%s: %s: %q (err %q), want %s", handle, c.name, call.Text, call.Err, c.want)
			}
		}
	}
	sessionOf("runtime-egress", "egress", "online/default", egressChecks)
	sessionOf("runtime-services", "services", "services/default", controlChecks)

	// git's name was resolved by the gateway, with its --dns-server (the test resolver's log).
	logs, err := kubeClient.CoreV1().Pods(f.internetNS).GetLogs(f.internetPod, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(logs), "DNS question git.internet.test") {
		t.Errorf("the gateway's resolver was never asked git.internet.test; its log:\n%s", logs)
	}
}

// checkRefusedClass: the class with egress and allowedServices is Valid False saying why, an
// acquire of its entry "both" (through the Sandbox API, as a runtime does) is 502 InvalidClass
// with that reason, and its claims are Failed with nothing frozen, no pod and no NetworkPolicy.
func checkRefusedClass(t *testing.T, e *realnodeEnv, both string) {
	t.Helper()
	ctx := context.Background()
	eventually(t, time.Minute, "class "+both+" Valid False", func(ctx context.Context) (bool, error) {
		c, err := airlockClient.AirlockV1alpha1().SandboxClasses().Get(ctx, both, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		cond := meta.FindStatusCondition(c.Status.Conditions, sandboxclass.ConditionValid)
		return cond != nil && cond.Status == metav1.ConditionFalse && cond.Reason == sandboxclass.ReasonInvalidClass &&
			strings.Contains(cond.Message, "egress and allowedServices"), nil
	})

	// The refused class: acquired through the Sandbox API as a runtime does.
	var refused struct {
		Claim string `json:"claim"`
		Error string `json:"error"`
	}
	e.runClient(t, "runtime-both", "acquire", map[string]any{"api": apiURL(), "namespace": e.ns, "runtime": "agent", "session": "both", "handle": "both/default"}, 5*time.Minute, &refused)
	if !strings.Contains(refused.Error, "502") || !strings.Contains(refused.Error, "InvalidClass") || !strings.Contains(refused.Error, "egress and allowedServices") {
		t.Errorf("acquiring a class with egress and allowedServices: %q, want 502 InvalidClass saying why", refused.Error)
	}
	claims, err := airlockClient.AirlockV1alpha1().SandboxClaims(e.ns).List(ctx, metav1.ListOptions{LabelSelector: airlockv1alpha1.LabelSandbox + "=both"})
	if err != nil {
		t.Fatal(err)
	}
	if len(claims.Items) == 0 {
		t.Error("no claim of the refused class: the acquire did not reach the operator")
	}
	for _, c := range claims.Items {
		if c.Status.Phase != airlockv1alpha1.ClaimFailed || c.Status.Reason != sandboxclass.ReasonInvalidClass || c.Status.Frozen != nil {
			t.Errorf("claim %s: %s %s (frozen %v), want Failed InvalidClass with nothing frozen", c.Name, c.Status.Phase, c.Status.Reason, c.Status.Frozen != nil)
		}
		if _, err := kubeClient.CoreV1().Pods(e.ns).Get(ctx, c.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("claim %s of the refused class has a pod (%v)", c.Name, err)
		}
		if _, err := kubeClient.NetworkingV1().NetworkPolicies(e.ns).Get(ctx, c.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("claim %s of the refused class has a NetworkPolicy (%v)", c.Name, err)
		}
	}
}
