//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
)

// TestCRDsServed checks that discovery serves every kind with its short name, scope and status
// subresource.
func TestCRDsServed(t *testing.T) {
	list, err := kubeClient.Discovery().ServerResourcesForGroupVersion(airlockv1alpha1.SchemeGroupVersion.String())
	if err != nil {
		t.Fatalf("discovery of %s: %v", airlockv1alpha1.SchemeGroupVersion, err)
	}
	type want struct {
		kind       string
		shortName  string
		namespaced bool
	}
	wants := map[string]want{
		"sandboxclasses": {"SandboxClass", "sbc", false},
		"toolregistries": {"ToolRegistry", "tr", true},
		"agentruntimes":  {"AgentRuntime", "ar", true},
		"sandboxclaims":  {"SandboxClaim", "sbx", true},
	}
	served := map[string]metav1.APIResource{}
	for _, r := range list.APIResources {
		served[r.Name] = r
	}
	for plural, w := range wants {
		r, ok := served[plural]
		if !ok {
			t.Errorf("%s is not served", plural)
			continue
		}
		if r.Kind != w.kind || r.Namespaced != w.namespaced {
			t.Errorf("%s: kind %q namespaced %v, want %q %v", plural, r.Kind, r.Namespaced, w.kind, w.namespaced)
		}
		if len(r.ShortNames) != 1 || r.ShortNames[0] != w.shortName {
			t.Errorf("%s: short names %v, want [%s]", plural, r.ShortNames, w.shortName)
		}
		if _, ok := served[plural+"/status"]; !ok {
			t.Errorf("%s has no status subresource", plural)
		}
	}
}

func validClass(name string) *airlockv1alpha1.SandboxClass {
	return &airlockv1alpha1.SandboxClass{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"airlock.dev/e2e": "true"}},
		Spec: airlockv1alpha1.SandboxClassSpec{
			Image: "example.com/sandbox:v1",
			Volumes: []airlockv1alpha1.SandboxVolume{
				{Name: "workspace", MountPath: "/workspace", Workspace: &airlockv1alpha1.WorkspaceVolumeSource{}},
				{Name: "cache", MountPath: "/cache", Scratch: &airlockv1alpha1.ScratchVolumeSource{SizeLimit: ptr.To(resource.MustParse("1Gi"))}},
			},
		},
	}
}

func validRegistry(ns string) *airlockv1alpha1.ToolRegistry {
	return &airlockv1alpha1.ToolRegistry{
		ObjectMeta: metav1.ObjectMeta{Name: "tools", Namespace: ns},
		Spec: airlockv1alpha1.ToolRegistrySpec{Sandboxes: []airlockv1alpha1.RegistrySandbox{
			{Name: "codegen", Class: "codegen", TargetPath: "projects/demo", AllowedTools: []airlockv1alpha1.ToolName{"Read", "Bash"}},
		}},
	}
}

func validRuntime(ns string) *airlockv1alpha1.AgentRuntime {
	return &airlockv1alpha1.AgentRuntime{
		ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: ns},
		Spec: airlockv1alpha1.AgentRuntimeSpec{
			ServiceAccountName: "agent",
			ToolRegistryRef:    airlockv1alpha1.LocalObjectReference{Name: "tools"},
		},
	}
}

func validClaim(ns string) *airlockv1alpha1.SandboxClaim {
	return &airlockv1alpha1.SandboxClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "agent-0123456789", Namespace: ns},
		Spec: airlockv1alpha1.SandboxClaimSpec{
			RuntimeName:  "agent",
			Session:      "session-1",
			Handle:       "codegen/default",
			Sandbox:      "codegen",
			ClassName:    "codegen",
			WorkspaceDir: ns + "/sandboxes/agent-0123456789",
		},
	}
}

// TestCreateAndReadBack creates each kind through the generated clientset and checks that the
// API server applied the schema's defaults.
func TestCreateAndReadBack(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "airlock-crud")

	className := "e2e-" + ns
	if _, err := airlockClient.AirlockV1alpha1().SandboxClasses().Create(ctx, validClass(className), metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating class: %v", err)
	}
	t.Cleanup(func() {
		_ = airlockClient.AirlockV1alpha1().SandboxClasses().Delete(context.Background(), className, metav1.DeleteOptions{})
	})
	class, err := airlockClient.AirlockV1alpha1().SandboxClasses().Get(ctx, className, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading class: %v", err)
	}
	if got := strings.Join(class.Spec.Args, " "); got != "sandboxd --listen=:8080 --workspace=/workspace" {
		t.Errorf("class args default: %q", got)
	}
	if len(class.Spec.Ports) != 1 || class.Spec.Ports[0].Name != "mcp" || class.Spec.Ports[0].Port != 8080 {
		t.Errorf("class ports default: %+v", class.Spec.Ports)
	}
	if class.Spec.WorkspaceClaimName != "workspace-content" {
		t.Errorf("class workspaceClaimName default: %q", class.Spec.WorkspaceClaimName)
	}
	if class.Spec.StartupTimeout == nil || class.Spec.StartupTimeout.Duration != 5*time.Minute {
		t.Errorf("class startupTimeout default: %v", class.Spec.StartupTimeout)
	}

	if _, err := airlockClient.AirlockV1alpha1().ToolRegistries(ns).Create(ctx, validRegistry(ns), metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating registry: %v", err)
	}
	reg, err := airlockClient.AirlockV1alpha1().ToolRegistries(ns).Get(ctx, "tools", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading registry: %v", err)
	}
	sb := reg.Spec.Sandboxes[0]
	if sb.MaxInstances != 10 || sb.Workspace != airlockv1alpha1.WorkspaceClaim || sb.Allocation != airlockv1alpha1.AllocationLazy {
		t.Errorf("registry sandbox defaults: maxInstances %d workspace %q allocation %q", sb.MaxInstances, sb.Workspace, sb.Allocation)
	}
	demand := validRegistry(ns)
	demand.Name = "tools-demand"
	demand.Spec.Sandboxes[0].WarmPolicy = &airlockv1alpha1.WarmPolicy{Max: 4}
	if demand, err = airlockClient.AirlockV1alpha1().ToolRegistries(ns).Create(ctx, demand, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating a registry with a warmPolicy: %v", err)
	}
	if wp := demand.Spec.Sandboxes[0].WarmPolicy; wp.Min != 0 || wp.Max != 4 || wp.HeadroomPercent == nil || *wp.HeadroomPercent != airlockv1alpha1.DefaultWarmHeadroomPercent {
		t.Errorf("warmPolicy read back %+v, want min 0, max 4, headroomPercent %d", wp, airlockv1alpha1.DefaultWarmHeadroomPercent)
	}

	if _, err := airlockClient.AirlockV1alpha1().AgentRuntimes(ns).Create(ctx, validRuntime(ns), metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating runtime: %v", err)
	}
	rt, err := airlockClient.AirlockV1alpha1().AgentRuntimes(ns).Get(ctx, "agent", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading runtime: %v", err)
	}
	p := rt.Spec.Sandbox
	if p.Enabled || p.MaxConcurrent != 5 || p.MaxPerSession != 3 || p.IdleTimeout == nil || p.IdleTimeout.Duration != 30*time.Minute {
		t.Errorf("runtime sandbox defaults: %+v", p)
	}

	if _, err := airlockClient.AirlockV1alpha1().SandboxClaims(ns).Create(ctx, validClaim(ns), metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating claim: %v", err)
	}
	claim, err := airlockClient.AirlockV1alpha1().SandboxClaims(ns).Get(ctx, "agent-0123456789", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading claim: %v", err)
	}
	if claim.Spec.Handle != "codegen/default" || claim.Spec.Session != "session-1" {
		t.Errorf("claim read back: %+v", claim.Spec)
	}

	// Status goes through the status subresource only.
	claim.Status.Phase = airlockv1alpha1.ClaimQueued
	updated, err := airlockClient.AirlockV1alpha1().SandboxClaims(ns).Update(ctx, claim, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("updating claim: %v", err)
	}
	if updated.Status.Phase != "" {
		t.Errorf("an update of the main resource changed status.phase to %q", updated.Status.Phase)
	}
	updated.Status.Phase = airlockv1alpha1.ClaimQueued
	updated, err = airlockClient.AirlockV1alpha1().SandboxClaims(ns).UpdateStatus(ctx, updated, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("updating claim status: %v", err)
	}
	if updated.Status.Phase != airlockv1alpha1.ClaimQueued {
		t.Errorf("status.phase after UpdateStatus: %q", updated.Status.Phase)
	}
	updated.Status.Phase = "Sleeping"
	if _, err := airlockClient.AirlockV1alpha1().SandboxClaims(ns).UpdateStatus(ctx, updated, metav1.UpdateOptions{}); err == nil || !strings.Contains(err.Error(), "Unsupported value") {
		t.Errorf("an unknown phase was not rejected: %v", err)
	}
}

// TestInvalidObjectsRejected checks that the API server refuses invalid objects with the
// schema's own message.
func TestInvalidObjectsRejected(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "airlock-invalid")
	c := airlockClient.AirlockV1alpha1()

	tests := []struct {
		name    string
		create  func() error
		wantMsg string
	}{
		{
			name: "class without image",
			create: func() error {
				cl := validClass("e2e-noimage-" + ns)
				cl.Spec.Image = ""
				_, err := c.SandboxClasses().Create(ctx, cl, metav1.CreateOptions{})
				return err
			},
			wantMsg: "spec.image",
		},
		{
			name: "class volume with workspace and scratch",
			create: func() error {
				cl := validClass("e2e-twovol-" + ns)
				cl.Spec.Volumes[1].Workspace = &airlockv1alpha1.WorkspaceVolumeSource{}
				_, err := c.SandboxClasses().Create(ctx, cl, metav1.CreateOptions{})
				return err
			},
			wantMsg: "exactly one of workspace or scratch must be set",
		},
		{
			name: "class with two workspace volumes",
			create: func() error {
				cl := validClass("e2e-twows-" + ns)
				cl.Spec.Volumes[1] = airlockv1alpha1.SandboxVolume{Name: "other", MountPath: "/other", Workspace: &airlockv1alpha1.WorkspaceVolumeSource{}}
				_, err := c.SandboxClasses().Create(ctx, cl, metav1.CreateOptions{})
				return err
			},
			wantMsg: "at most one volume may be the workspace",
		},
		{
			name: "class port out of range",
			create: func() error {
				cl := validClass("e2e-port-" + ns)
				cl.Spec.Ports = []airlockv1alpha1.SandboxPort{{Name: "mcp", Port: 70000}}
				_, err := c.SandboxClasses().Create(ctx, cl, metav1.CreateOptions{})
				return err
			},
			wantMsg: "should be less than or equal to 65535",
		},
		{
			name: "registry targetPath escaping the volume",
			create: func() error {
				r := validRegistry(ns)
				r.Name = "escape"
				r.Spec.Sandboxes[0].TargetPath = "projects/../../etc"
				_, err := c.ToolRegistries(ns).Create(ctx, r, metav1.CreateOptions{})
				return err
			},
			wantMsg: "must be a relative path without empty, '.' or '..' segments",
		},
		{
			name: "registry absolute targetPath",
			create: func() error {
				r := validRegistry(ns)
				r.Name = "absolute"
				r.Spec.Sandboxes[0].TargetPath = "/etc"
				_, err := c.ToolRegistries(ns).Create(ctx, r, metav1.CreateOptions{})
				return err
			},
			wantMsg: "must be a relative path",
		},
		{
			name: "registry unknown tool",
			create: func() error {
				r := validRegistry(ns)
				r.Name = "tools-unknown"
				r.Spec.Sandboxes[0].AllowedTools = []airlockv1alpha1.ToolName{"Teleport"}
				_, err := c.ToolRegistries(ns).Create(ctx, r, metav1.CreateOptions{})
				return err
			},
			wantMsg: "Unsupported value: \"Teleport\"",
		},
		{
			name: "registry with an empty tool list (it would read as every tool)",
			create: func() error {
				r := validRegistry(ns)
				r.Name = "tools-empty"
				raw, err := json.Marshal(r)
				if err != nil {
					return err
				}
				var obj map[string]any
				if err := json.Unmarshal(raw, &obj); err != nil {
					return err
				}
				obj["apiVersion"], obj["kind"] = airlockv1alpha1.SchemeGroupVersion.String(), "ToolRegistry"
				obj["spec"].(map[string]any)["sandboxes"].([]any)[0].(map[string]any)["allowedTools"] = []any{}
				if raw, err = json.Marshal(obj); err != nil {
					return err
				}
				return c.RESTClient().Post().Namespace(ns).Resource("toolregistries").Body(raw).Do(ctx).Error()
			},
			wantMsg: "spec.sandboxes[0].allowedTools",
		},
		{
			name: "registry unknown workspace mode",
			create: func() error {
				r := validRegistry(ns)
				r.Name = "mode"
				r.Spec.Sandboxes[0].Workspace = "shared"
				_, err := c.ToolRegistries(ns).Create(ctx, r, metav1.CreateOptions{})
				return err
			},
			wantMsg: "Unsupported value: \"shared\"",
		},
		{
			name: "registry warm members of a session's workspace",
			create: func() error {
				r := validRegistry(ns)
				r.Name = "warm-session"
				r.Spec.Sandboxes[0].Workspace = airlockv1alpha1.WorkspaceSession
				r.Spec.Sandboxes[0].Warm = 2
				_, err := c.ToolRegistries(ns).Create(ctx, r, metav1.CreateOptions{})
				return err
			},
			wantMsg: "warm members serve fresh workspaces only",
		},
		{
			name: "registry warm members of a mount role",
			create: func() error {
				r := validRegistry(ns)
				r.Name = "warm-role"
				r.Spec.Sandboxes[0].MountRole = "repo"
				r.Spec.Sandboxes[0].Warm = 1
				_, err := c.ToolRegistries(ns).Create(ctx, r, metav1.CreateOptions{})
				return err
			},
			wantMsg: "warm members serve fresh workspaces only",
		},
		{
			name: "registry warm and warmPolicy",
			create: func() error {
				r := validRegistry(ns)
				r.Name = "warm-both"
				r.Spec.Sandboxes[0].Warm = 2
				r.Spec.Sandboxes[0].WarmPolicy = &airlockv1alpha1.WarmPolicy{Min: 1, Max: 4}
				_, err := c.ToolRegistries(ns).Create(ctx, r, metav1.CreateOptions{})
				return err
			},
			wantMsg: "warm and warmPolicy are exclusive",
		},
		{
			name: "registry warmPolicy min above max",
			create: func() error {
				r := validRegistry(ns)
				r.Name = "warm-min-max"
				r.Spec.Sandboxes[0].WarmPolicy = &airlockv1alpha1.WarmPolicy{Min: 5, Max: 4}
				_, err := c.ToolRegistries(ns).Create(ctx, r, metav1.CreateOptions{})
				return err
			},
			wantMsg: "min may not exceed max",
		},
		{
			name: "registry warmPolicy max above maxInstances",
			create: func() error {
				r := validRegistry(ns)
				r.Name = "warm-max-instances"
				r.Spec.Sandboxes[0].WarmPolicy = &airlockv1alpha1.WarmPolicy{Max: 11} // maxInstances defaults to 10
				_, err := c.ToolRegistries(ns).Create(ctx, r, metav1.CreateOptions{})
				return err
			},
			wantMsg: "warmPolicy.max may not exceed maxInstances",
		},
		{
			name: "registry warmPolicy of a session's workspace",
			create: func() error {
				r := validRegistry(ns)
				r.Name = "warm-policy-session"
				r.Spec.Sandboxes[0].Workspace = airlockv1alpha1.WorkspaceSession
				r.Spec.Sandboxes[0].WarmPolicy = &airlockv1alpha1.WarmPolicy{Max: 4}
				_, err := c.ToolRegistries(ns).Create(ctx, r, metav1.CreateOptions{})
				return err
			},
			wantMsg: "no warmPolicy with workspace: session",
		},
		{
			name: "registry negative warm",
			create: func() error {
				r := validRegistry(ns)
				r.Name = "warm-negative"
				r.Spec.Sandboxes[0].Warm = -1
				_, err := c.ToolRegistries(ns).Create(ctx, r, metav1.CreateOptions{})
				return err
			},
			wantMsg: "should be greater than or equal to 0",
		},
		{
			name: "registry negative resumeWindow",
			create: func() error {
				r := validRegistry(ns)
				r.Name = "resume-negative"
				r.Spec.Sandboxes[0].Warm = 1
				r.Spec.Sandboxes[0].ResumeWindow = &metav1.Duration{Duration: -time.Second}
				_, err := c.ToolRegistries(ns).Create(ctx, r, metav1.CreateOptions{})
				return err
			},
			wantMsg: "must be between 0s and 24h",
		},
		{
			name: "registry resumeWindow above a day",
			create: func() error {
				r := validRegistry(ns)
				r.Name = "resume-long"
				r.Spec.Sandboxes[0].Warm = 1
				r.Spec.Sandboxes[0].ResumeWindow = &metav1.Duration{Duration: 25 * time.Hour}
				_, err := c.ToolRegistries(ns).Create(ctx, r, metav1.CreateOptions{})
				return err
			},
			wantMsg: "must be between 0s and 24h",
		},
		{
			name: "runtime maxConcurrent below one",
			create: func() error {
				rt := validRuntime(ns)
				rt.Name = "negative"
				rt.Spec.Sandbox.MaxConcurrent = -1
				_, err := c.AgentRuntimes(ns).Create(ctx, rt, metav1.CreateOptions{})
				return err
			},
			wantMsg: "should be greater than or equal to 1",
		},
		{
			name: "runtime without service account",
			create: func() error {
				rt := validRuntime(ns)
				rt.Name = "nosa"
				rt.Spec.ServiceAccountName = ""
				_, err := c.AgentRuntimes(ns).Create(ctx, rt, metav1.CreateOptions{})
				return err
			},
			wantMsg: "spec.serviceAccountName",
		},
		{
			name: "claim with a malformed handle",
			create: func() error {
				cl := validClaim(ns)
				cl.Name = "bad-handle"
				cl.Spec.Handle = "Codegen//x"
				_, err := c.SandboxClaims(ns).Create(ctx, cl, metav1.CreateOptions{})
				return err
			},
			wantMsg: "spec.handle",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.create()
			if err == nil {
				t.Fatalf("created; want a rejection mentioning %q", tc.wantMsg)
			}
			if !apierrors.IsInvalid(err) {
				t.Fatalf("want 422 Invalid, got %v", err)
			}
			if !strings.Contains(err.Error(), tc.wantMsg) {
				t.Errorf("rejection %q does not mention %q", err.Error(), tc.wantMsg)
			}
		})
	}
}

// TestClaimSpecImmutable checks the CEL rule that freezes a claim's spec after creation.
func TestClaimSpecImmutable(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "airlock-immutable")
	c := airlockClient.AirlockV1alpha1().SandboxClaims(ns)
	claim, err := c.Create(ctx, validClaim(ns), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating claim: %v", err)
	}
	for name, mutate := range map[string]func(*airlockv1alpha1.SandboxClaimSpec){
		"session":    func(s *airlockv1alpha1.SandboxClaimSpec) { s.Session = "session-2" },
		"handle":     func(s *airlockv1alpha1.SandboxClaimSpec) { s.Handle = "codegen/other" },
		"targetPath": func(s *airlockv1alpha1.SandboxClaimSpec) { s.TargetPath = "projects/x" },
		"replaces":   func(s *airlockv1alpha1.SandboxClaimSpec) { s.Replaces = "agent-ffffffffff" },
	} {
		t.Run(name, func(t *testing.T) {
			changed := claim.DeepCopy()
			mutate(&changed.Spec)
			_, err := c.Update(ctx, changed, metav1.UpdateOptions{})
			if err == nil || !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec is immutable") {
				t.Fatalf("changing spec.%s: want Invalid 'spec is immutable', got %v", name, err)
			}
		})
	}
	// Metadata is not frozen: the operator labels and annotates its claims.
	claim.Labels = map[string]string{airlockv1alpha1.LabelRuntime: "agent"}
	if _, err := c.Update(ctx, claim, metav1.UpdateOptions{}); err != nil {
		t.Errorf("changing only labels was refused: %v", err)
	}
}

// TestKubectlShortNamesAndColumns checks what a user sees: short names resolve and the printer
// columns are there.
func TestKubectlShortNamesAndColumns(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "airlock-kubectl")
	if _, err := airlockClient.AirlockV1alpha1().SandboxClaims(ns).Create(ctx, validClaim(ns), metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating claim: %v", err)
	}
	if _, err := kubectl(ctx, "get", "sbc,tr,ar,sbx", "-A"); err != nil {
		t.Fatalf("kubectl get by short names: %v", err)
	}
	out, err := kubectl(ctx, "get", "sbx", "-n", ns)
	if err != nil {
		t.Fatal(err)
	}
	header := strings.Fields(strings.SplitN(out, "\n", 2)[0])
	want := []string{"NAME", "RUNTIME", "HANDLE", "PHASE", "READY", "REASON", "WARM", "LAST-USED", "RESUMED", "ISOLATION", "AGE"}
	if strings.Join(header, " ") != strings.Join(want, " ") {
		t.Errorf("kubectl get sbx columns %v, want %v", header, want)
	}
	if _, err := airlockClient.AirlockV1alpha1().ToolRegistries(ns).Create(ctx, validRegistry(ns), metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating registry: %v", err)
	}
	trOut, err := kubectl(ctx, "get", "tr", "-n", ns)
	if err != nil {
		t.Fatal(err)
	}
	header = strings.Fields(strings.SplitN(trOut, "\n", 2)[0])
	if want := []string{"NAME", "SANDBOXES", "READY", "WARM-READY", "WARM-WANTED", "AGE"}; strings.Join(header, " ") != strings.Join(want, " ") {
		t.Errorf("kubectl get tr columns %v, want %v", header, want)
	}
	if !strings.Contains(out, "codegen/default") {
		t.Errorf("kubectl get sbx does not show the handle:\n%s", out)
	}
	out, err = kubectl(ctx, "get", "sbc", "codegen")
	if err != nil {
		t.Fatalf("the sample class from manifests/classes is not installed: %v", err)
	}
	if !strings.Contains(out, "airlock-sandbox") {
		t.Errorf("kubectl get sbc codegen:\n%s", out)
	}
}

// TestNamespaceEnforcesRestricted checks that the API server enforces the restricted Pod Security
// level in the suite's namespaces, so that later tests of the sandbox pod baseline prove something.
func TestNamespaceEnforcesRestricted(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "airlock-pss")
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "rooty", Namespace: ns},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name:            "c",
			Image:           "example.com/x:v1",
			SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)},
		}}},
	}
	_, err := kubeClient.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err == nil || !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "violates PodSecurity \"restricted") {
		t.Fatalf("a privileged pod in a restricted namespace: want Forbidden by PodSecurity, got %v", err)
	}
}
