// Package sandboxpodtest has the objects the tests of the packages that build sandboxes share: a
// class, a registry, a claim and the record they freeze to, in one namespace.
package sandboxpodtest

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/claimname"
	"github.com/airlock-dev/airlock/pkg/workspace"
)

const (
	// Namespace is the namespace of every namespaced object here.
	Namespace = "team-a"
	// PodIP is the IP of ready pods (MarkReady).
	PodIP = "10.244.0.17"
)

// T0 is the tests' reference time.
var T0 = time.Date(2026, 11, 30, 7, 0, 0, 0, time.UTC)

// Registry returns a registry with one sandbox, "codegen" of class "codegen", allowing Read and Bash.
func Registry(name, targetPath string) *airlockv1alpha1.ToolRegistry {
	return &airlockv1alpha1.ToolRegistry{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace},
		Spec: airlockv1alpha1.ToolRegistrySpec{Sandboxes: []airlockv1alpha1.RegistrySandbox{{
			Name: "codegen", Class: "codegen", MaxInstances: 10, TargetPath: targetPath,
			AllowedTools: []airlockv1alpha1.ToolName{"Read", "Bash"},
		}}},
	}
}

// Class returns a class with a workspace volume, a scratch volume and every field set that a
// sandbox pod is built from.
func Class(name string) *airlockv1alpha1.SandboxClass {
	size := resource.MustParse("4Gi")
	return &airlockv1alpha1.SandboxClass{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: airlockv1alpha1.SandboxClassSpec{
			Image: "ghcr.io/airlock-dev/airlock-sandbox:v0.1.0",
			Args:  []string{"sandboxd", "--listen=:8080", "--workspace=/workspace"},
			Ports: []airlockv1alpha1.SandboxPort{{Name: "mcp", Port: 8080}},
			Env:   []corev1.EnvVar{{Name: "HOME", Value: "/sandbox-cache/home"}},
			Volumes: []airlockv1alpha1.SandboxVolume{
				{Name: "workspace", MountPath: "/workspace", Workspace: &airlockv1alpha1.WorkspaceVolumeSource{}},
				{Name: "cache", MountPath: "/sandbox-cache", Scratch: &airlockv1alpha1.ScratchVolumeSource{SizeLimit: &size}},
			},
			WorkspaceClaimName: "workspace-content",
			StartupTimeout:     &metav1.Duration{Duration: 5 * time.Minute},
		},
	}
}

// Claim returns a claim of runtime "agent" (uid "uid-rt-agent", its controller, as the Sandbox API
// creates claims) for the sandbox "codegen", created at created, in its per-claim workspace
// (with the runtime's UID, as the Sandbox API names it: workspace.ClaimDirName).
func Claim(name, session string, phase airlockv1alpha1.ClaimPhase, created time.Time) *airlockv1alpha1.SandboxClaim {
	return &airlockv1alpha1.SandboxClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: Namespace, UID: types.UID("uid-" + name),
			CreationTimestamp: metav1.NewTime(created),
			Labels:            map[string]string{airlockv1alpha1.LabelRuntime: "agent", airlockv1alpha1.LabelSandbox: "codegen", airlockv1alpha1.LabelClaimShard: claimname.Shard(name)},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: airlockv1alpha1.SchemeGroupVersion.String(), Kind: "AgentRuntime", Name: "agent", UID: "uid-rt-agent",
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Spec: airlockv1alpha1.SandboxClaimSpec{
			RuntimeName: "agent", RuntimeUID: "uid-rt-agent", Session: session, Handle: "codegen/default", Sandbox: "codegen",
			ClassName: "codegen", WorkspaceDir: Namespace + "/sandboxes/" + workspace.ClaimDirName(name, "uid-rt-agent"),
		},
		Status: airlockv1alpha1.SandboxClaimStatus{Phase: phase},
	}
}

// MarkReady makes the pod Ready, at PodIP.
func MarkReady(pod *corev1.Pod) {
	pod.Status.PodIP = PodIP
	pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue})
}

// WarmRegistry is Registry("tools", "") with warm members wanted for its sandbox.
func WarmRegistry(warm int32) *airlockv1alpha1.ToolRegistry {
	reg := Registry("tools", "")
	reg.UID = "uid-reg-tools"
	reg.Spec.Sandboxes[0].Warm = warm
	return reg
}

// AsCached makes pod as the API server would return it, created at created, and Running and
// Ready at ip when ip is set.
func AsCached(pod *corev1.Pod, created time.Time, ip string) *corev1.Pod {
	pod.UID = types.UID("uid-" + pod.Name)
	pod.ResourceVersion = "7"
	pod.CreationTimestamp = metav1.NewTime(created)
	if ip != "" {
		pod.Status.Phase = corev1.PodRunning
		pod.Status.PodIP = ip
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	}
	return pod
}
