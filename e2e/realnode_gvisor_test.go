//go:build e2e && realnode

package e2e

// gVisor on the real node (issue 38; docs/isolation.md): the codegen class under RuntimeClass
// gvisor (hack/local-node.sh registers it, handler runsc), its evidence read before Bound and
// verified by the runtime's pkg/client; a RuntimeClass named for gVisor whose handler is runc is
// refused for a class that needs a kernel of its own.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/claimname"
)

var dedicatedKernel = &airlockv1alpha1.SandboxIsolation{Kernel: airlockv1alpha1.KernelDedicated}

// TestRealNodeGVisor: the codegen surface under gVisor (files, Bash, a go build and go test with
// the cache in the scratch volume, a checkpoint over git, gopls), a kernel of its own shown by
// the evidence, signed and verified by the runtime, sync-back on close, and the operator's stop
// leaving no process behind (the pod released at once).
func TestRealNodeGVisor(t *testing.T) {
	requireRealNode(t)
	ctx := context.Background()
	if _, err := kubeClient.NodeV1().RuntimeClasses().Get(ctx, "gvisor", metav1.GetOptions{}); err != nil {
		t.Fatalf("RuntimeClass gvisor: %v (hack/local-node.sh registers it unless AIRLOCK_NODE_GVISOR=0)", err)
	}
	e := newRealnodeEnv(t, "airlock-rn-gvisor", realnodeOptions{
		maxConcurrent: 1, maxPerSession: 1, maxInstances: 1, codegenImage: realnodeSandboxGoImage(),
		codegenRuntimeClass: "gvisor", codegenIsolation: dedicatedKernel, targetPath: "out/gvisor",
		startupTimeout: 4 * time.Minute,
	})
	e.mkdirContent(t, "out")
	const mainGo = "package main\n\nimport \"fmt\"\n\nfunc greet(name string) string { return \"hello \" + name }\n\nfunc main() { fmt.Println(greet(\"agent\")) }\n"
	const testGo = "package main\n\nimport \"testing\"\n\nfunc TestGreet(t *testing.T) {\n\tif greet(\"x\") != \"hello x\" {\n\t\tt.Fatal(greet(\"x\"))\n\t}\n}\n"
	plan := map[string]any{"api": apiURL(), "namespace": e.ns, "runtime": "agent", "session": "gvisor", "handle": "codegen/default",
		"verifyIsolation": true, "requireDedicatedKernel": true, "close": true, "steps": []map[string]any{
			step("uname", "Bash", map[string]any{"command": "uname -r; id -u"}),
			step("gomod", "Write", map[string]any{"file_path": "go.mod", "content": "module example.com/hello\n\ngo 1.24\n"}),
			step("main", "Write", map[string]any{"file_path": "main.go", "content": mainGo}),
			step("test", "Write", map[string]any{"file_path": "main_test.go", "content": testGo}),
			step("edit", "Edit", map[string]any{"file_path": "main.go", "old_string": "\"agent\"", "new_string": "\"gvisor\""}),
			step("read", "Read", map[string]any{"file_path": "main.go"}),
			step("build", "Bash", map[string]any{"command": "go build -o /cache/hello . && /cache/hello && go test ./... 2>&1 | tail -1", "timeout": 240000}),
			step("snapshot", "snapshot_create", map[string]any{"label": "built"}),
			step("definition", "find_definition", map[string]any{"file_path": "main.go", "line": 7, "symbol": "greet"}),
			step("tests", "run_tests", map[string]any{"language": "go", "timeout": 240000}),
			step("timeout", "Bash", map[string]any{"command": "sleep 61; echo not-reached", "timeout": 2000}),
			cancelled(step("cancel", "Bash", map[string]any{"command": "sleep 62; echo not-reached"}), 2000),
			step("gone", "Bash", map[string]any{"command": leftProcesses}),
			step("background", "Bash", map[string]any{"command": "sleep 600 & echo started", "run_in_background": true}),
			step("escape", "Bash", map[string]any{"command": escapeSession}),
		}}
	var res rnSession
	e.runClient(t, "runtime-gvisor", "session", plan, 10*time.Minute, &res)
	if res.Error != "" || res.Phase != "Bound" {
		t.Fatalf("runtime: %s %s", res.Phase, res.Error)
	}
	if res.Kernel != "Dedicated" || res.Runtime != "gVisor" {
		t.Errorf("the verified statement says kernel %q, runtime %q; want Dedicated, gVisor", res.Kernel, res.Runtime)
	}
	for _, tc := range []struct{ name, want string }{
		{"uname", "gvisor\n65532"},
		{"gomod", ""}, {"main", ""}, {"test", ""}, {"edit", ""},
		{"read", "greet(\"gvisor\")"},
		{"build", "hello gvisor"},
		{"snapshot", "Snapshot s1 taken"},
		{"definition", "main.go:5:6"},
		{"tests", "ok"},
		{"timeout", "timed out after 2s"},
		{"gone", "left=0"},
		{"background", ""},
		{"escape", "escaped"},
	} {
		c := res.call(t, tc.name)
		t.Logf("%s (%s, %.0f ms): %q", tc.name, c.Tool, c.Millis, c.Text)
		if c.Err != "" || c.IsError || !strings.Contains(c.Text, tc.want) {
			t.Errorf("%s: err %q isError %v: %q, want %q in it", tc.name, c.Err, c.IsError, c.Text, tc.want)
		}
	}
	// Cancelled by the client (notifications/cancelled) after 2 s: the call ended with the
	// client's deadline, and its process group was killed ("gone" above found no sleep left).
	if c := res.call(t, "cancel"); c.Err == "" || strings.Contains(c.Text, "not-reached") {
		t.Errorf("the cancelled call: err %q, text %q; want it cancelled before its command ended", c.Err, c.Text)
	}
	if c := res.call(t, "build"); !strings.Contains(c.Text, "ok") {
		t.Errorf("go test under gVisor: %q, want ok", c.Text)
	}
	// Closed: synced back, and the operator's stop ended every process (the background sleep
	// among them) before the pod was released.
	claim := claimname.For("agent", "gvisor", "codegen/default")
	eventually(t, 3*time.Minute, "the closed claim to be gone", func(ctx context.Context) (bool, error) {
		_, err := airlockClient.AirlockV1alpha1().SandboxClaims(e.ns).Get(ctx, claim, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if got, err := e.readContent("out/gvisor/main.go"); err != nil || !strings.Contains(got, "\"gvisor\"") {
		t.Errorf("synced main.go: %q, %v", got, err)
	}
	// The operator's stop, asked before the pod's deletion: sandboxd (PID 1 of gVisor's
	// sandbox) ended the background shell with its group and killed every other process of its
	// container, the one that left its group (setsid) among them, and the pod was released at
	// once.
	events, err := kubeClient.CoreV1().Events(e.ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + claim + ",reason=SandboxStopped"})
	if err != nil {
		t.Fatal(err)
	}
	if len(events.Items) != 1 {
		t.Fatalf("%d SandboxStopped events of claim %s, want one: the operator's stop under gVisor", len(events.Items), claim)
	}
	var killed int
	msg := events.Items[0].Message
	if i := strings.Index(msg, "("); i < 0 {
		t.Fatalf("stop: %q names no count of killed processes", msg)
	} else if _, err := fmt.Sscanf(msg[i:], "(%d killed)", &killed); err != nil || killed < 1 {
		t.Errorf("stop: %q (%v); want at least the process that left its group killed", msg, err)
	}
	t.Logf("stop: %s", msg)
}

// leftProcesses is a Bash command that says left=<n>, the processes of the sandbox running
// `sleep 61` or `sleep 62` (the timed-out and the cancelled calls' commands), waiting up to 5 s
// for them to go.
const leftProcesses = `for i in $(seq 50); do n=0; for c in /proc/[0-9]*/cmdline; do case "$(tr '\0' ' ' <"$c" 2>/dev/null)" in "sleep 61 "|"sleep 62 ") n=$((n+1));; esac; done; [ $n = 0 ] && break; sleep 0.1; done; echo left=$n`

// escapeSession leaves a process behind in a session of its own, outside every tool call's
// process group, which only the stop's kill of every other process reaches (as runtimeclient's
// escapeCommand in TestRealNodeReacquire); the call returns once the process is in its session.
const escapeSession = `rm -f /tmp/escape && mkfifo /tmp/escape && ` +
	`(setsid sh -c 'echo escaped > /tmp/escape; exec sleep 100000' > /dev/null 2>&1 < /dev/null &) && read x < /tmp/escape && echo $x`

// cancelled is a step whose call the client cancels after ms milliseconds.
func cancelled(s map[string]any, ms int) map[string]any {
	s["cancelAfterMillis"] = ms
	return s
}

// TestRealNodeGVisorImpostorRefused: a RuntimeClass named for gVisor whose handler is runc
// gives the node's kernel; a class that needs a kernel of its own is never served by it: the
// claim fails IsolationNotMet naming the kernel, never Bound; a class that needs none is Bound
// on the same RuntimeClass, its statement saying Shared.
func TestRealNodeGVisorImpostorRefused(t *testing.T) {
	requireRealNode(t)
	ctx := context.Background()
	impostor := "gvisor-impostor"
	adminObject(t, ctx, func(ctx context.Context) (*nodev1.RuntimeClass, error) {
		return kubeClient.NodeV1().RuntimeClasses().Create(ctx, &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: impostor}, Handler: "runc"}, metav1.CreateOptions{})
	}, func(ctx context.Context) error {
		return kubeClient.NodeV1().RuntimeClasses().Delete(ctx, impostor, metav1.DeleteOptions{})
	})
	for _, tc := range []struct {
		name      string
		isolation *airlockv1alpha1.SandboxIsolation
	}{{"dedicated", dedicatedKernel}, {"any", nil}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newRealnodeEnv(t, "airlock-rn-impostor", realnodeOptions{
				maxConcurrent: 1, maxPerSession: 1, maxInstances: 1, codegenRuntimeClass: impostor, codegenIsolation: tc.isolation,
			})
			plan := map[string]any{"api": apiURL(), "namespace": e.ns, "runtime": "agent", "session": "s", "handle": "codegen/default",
				"verifyIsolation": true, "steps": []map[string]any{step("uname", "Bash", map[string]any{"command": "uname -r"})}}
			var res rnSession
			e.runClient(t, "runtime-impostor", "session", plan, 5*time.Minute, &res)
			claim, err := airlockClient.AirlockV1alpha1().SandboxClaims(e.ns).Get(ctx, claimname.For("agent", "s", "codegen/default"), metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if tc.isolation == nil {
				if res.Error != "" || res.Phase != "Bound" || res.Kernel != "Shared" || res.Runtime != "kernel" {
					t.Errorf("runtime: %s %q, kernel %q runtime %q; want Bound, a verified statement saying Shared", res.Phase, res.Error, res.Kernel, res.Runtime)
				}
				return
			}
			if res.Phase == "Bound" || res.Error == "" {
				t.Errorf("runtime: %s %q; want the acquire refused", res.Phase, res.Error)
			}
			if claim.Status.Phase != airlockv1alpha1.ClaimFailed || claim.Status.Reason != "IsolationNotMet" || !strings.Contains(claim.Status.Message, "is the node's") {
				t.Errorf("claim %s %s: %q; want Failed IsolationNotMet naming the node's kernel", claim.Status.Phase, claim.Status.Reason, claim.Status.Message)
			}
			if claim.Status.BoundAt != nil || claim.Status.Isolation != nil {
				t.Errorf("a refused claim was Bound at %v with isolation %+v", claim.Status.BoundAt, claim.Status.Isolation)
			}
		})
	}
}
