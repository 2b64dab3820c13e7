package warmpool

import (
	"strings"
	"testing"

	"k8s.io/klog/v2/ktesting"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
)

// TestRegistrySandboxesReady: the registry's status says, per sandbox, whether it can be built:
// a sandbox of an existing, valid class is ready; one whose class is missing, or cannot be built
// (a volume over the claim's token), is not, and says why; the count is the ready ones.
func TestRegistrySandboxesReady(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	reg := warmRegistry(0)
	reg.Spec.Sandboxes = append(reg.Spec.Sandboxes,
		airlockv1alpha1.RegistrySandbox{Name: "missing", Class: "nowhere", MaxInstances: 1},
		airlockv1alpha1.RegistrySandbox{Name: "broken", Class: "broken", MaxInstances: 1})
	broken := newClass("broken")
	broken.Spec.Volumes = append(broken.Spec.Volumes, airlockv1alpha1.SandboxVolume{Name: "x", MountPath: sandboxpod.TokenMountPath,
		Scratch: &airlockv1alpha1.ScratchVolumeSource{}})
	f := newFixture(t)
	f.registries = append(f.registries, reg)
	f.classes = append(f.classes, newClass("codegen"), broken)
	c := f.newController(ctx, 100)
	if _, err := c.sync(ctx, registryKey()); err != nil {
		t.Fatal(err)
	}
	written := f.written("toolregistries", "status").(*airlockv1alpha1.ToolRegistry)
	if written.Status.ReadySandboxes != 1 || len(written.Status.Sandboxes) != 3 {
		t.Fatalf("status %+v, want 1 of 3 ready", written.Status)
	}
	want := map[string]string{"codegen": "", "missing": "not found", "broken": "token"}
	for _, st := range written.Status.Sandboxes {
		w := want[st.Name]
		if st.Ready != (w == "") || !strings.Contains(st.Message, w) {
			t.Errorf("sandbox %s: ready %v %q, want ready %v mentioning %q", st.Name, st.Ready, st.Message, w == "", w)
		}
	}
}
