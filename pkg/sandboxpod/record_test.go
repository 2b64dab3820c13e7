package sandboxpod

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/sandboxpod/sandboxpodtest"
	"github.com/airlock-dev/airlock/pkg/toolnames"
)

// TestFreeze: the record spells out every default of the class and the entry; an entry that
// allows every tool is written as the full list of sandboxd's tools.
func TestFreeze(t *testing.T) {
	class := &airlockv1alpha1.SandboxClass{
		ObjectMeta: metav1.ObjectMeta{Name: "bare", Generation: 7},
		Spec:       airlockv1alpha1.SandboxClassSpec{Image: "example.com/sandbox:v1"},
	}
	entry := &airlockv1alpha1.RegistrySandbox{Name: "codegen", Class: "bare"}
	got := Freeze(class, entry)
	var all []airlockv1alpha1.ToolName
	for _, name := range toolnames.All() {
		all = append(all, airlockv1alpha1.ToolName(name))
	}
	want := &airlockv1alpha1.FrozenSandbox{
		ClassGeneration:    7,
		Image:              "example.com/sandbox:v1",
		Args:               []string{"sandboxd", "--listen=:8080", "--workspace=/workspace"},
		Ports:              []airlockv1alpha1.SandboxPort{{Name: "mcp", Port: 8080}},
		WorkspaceClaimName: "workspace-content",
		AllowedTools:       all,
		StartupTimeout:     metav1.Duration{Duration: 5 * time.Minute},
		// A class without resources is bounded by the defaults (resources.go).
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{"cpu": resource.MustParse("100m"), "memory": resource.MustParse("256Mi"), "ephemeral-storage": resource.MustParse("512Mi")},
			Limits:   corev1.ResourceList{"cpu": resource.MustParse("2"), "memory": resource.MustParse("4Gi"), "ephemeral-storage": resource.MustParse("10Gi")},
		},
	}
	if diff := cmp.Diff(want, got, quantityEqual); diff != "" {
		t.Errorf("record of a bare class and an entry allowing every tool (-want +got):\n%s", diff)
	}

	// The record shares nothing with the class or the entry: editing them later changes nothing.
	full := sandboxpodtest.Class("codegen")
	full.Spec.AllowedServices = []airlockv1alpha1.ServiceReference{{Namespace: "infra", Name: "proxy"}}
	fullEntry := &sandboxpodtest.Registry("tools", "").Spec.Sandboxes[0]
	record := Freeze(full, fullEntry)
	before := record.DeepCopy()
	full.Spec.Args[0] = "edited"
	full.Spec.Env[0].Value = "edited"
	full.Spec.AllowedServices[0].Name = "edited"
	fullEntry.AllowedTools[0] = "Write"
	if diff := cmp.Diff(before, record); diff != "" {
		t.Errorf("record changed with its class and entry (-before +after):\n%s", diff)
	}
}
