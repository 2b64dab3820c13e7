package toolnames

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"
)

// TestAllIsTheRegistryEnum: the allowedTools enum of the ToolRegistry CRD (v1alpha1.ToolName)
// names exactly the tools sandboxd serves, in the same order; a tool added to one and not the
// other would be either unservable or unnamable.
func TestAllIsTheRegistryEnum(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "manifests", "crd", "toolregistries.airlock.dev.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var crd struct {
		Spec struct {
			Versions []struct {
				Schema struct {
					OpenAPIV3Schema struct {
						Properties struct {
							Spec struct {
								Properties struct {
									Sandboxes struct {
										Items struct {
											Properties struct {
												AllowedTools struct {
													Items struct {
														Enum []string `json:"enum"`
													} `json:"items"`
												} `json:"allowedTools"`
											} `json:"properties"`
										} `json:"items"`
									} `json:"sandboxes"`
								} `json:"properties"`
							} `json:"spec"`
						} `json:"properties"`
					} `json:"openAPIV3Schema"`
				} `json:"schema"`
			} `json:"versions"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(b, &crd); err != nil {
		t.Fatal(err)
	}
	if len(crd.Spec.Versions) != 1 {
		t.Fatalf("%d versions in the CRD, want 1", len(crd.Spec.Versions))
	}
	got := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties.Spec.Properties.Sandboxes.Items.Properties.AllowedTools.Items.Enum
	if diff := cmp.Diff(All(), got); diff != "" {
		t.Errorf("allowedTools enum (-toolnames.All +CRD):\n%s", diff)
	}
}

func TestAllIsAFreshSlice(t *testing.T) {
	a := All()
	a[0] = "changed"
	if All()[0] != Read {
		t.Error("All returned a shared slice")
	}
}
