package v1alpha1

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// TestDefaultsAreTheCRDs: the Default* constants, which code uses for unset fields, are the
// defaults the CRD schema applies (from the +kubebuilder:default markers).
func TestDefaultsAreTheCRDs(t *testing.T) {
	tests := []struct {
		crd  string
		path []string // from the version's openAPIV3Schema; "[]" steps into a list's items
		want string
	}{
		{"agentruntimes", []string{"spec", "sandbox", "maxPerSession"}, fmt.Sprint(DefaultMaxPerSession)},
		{"agentruntimes", []string{"spec", "sandbox", "maxConcurrent"}, fmt.Sprint(DefaultMaxConcurrent)},
		{"agentruntimes", []string{"spec", "sandbox", "idleTimeout"}, durationText(DefaultIdleTimeout)},
		{"agentruntimes", []string{"spec", "sandbox", "workspaceRetention"}, durationText(DefaultWorkspaceRetention)},
		{"toolregistries", []string{"spec", "sandboxes", "[]", "maxInstances"}, fmt.Sprint(DefaultMaxInstances)},
		{"toolregistries", []string{"spec", "sandboxes", "[]", "resumeWindow"}, durationText(DefaultResumeWindow)},
		{"sandboxclasses", []string{"spec", "startupTimeout"}, durationText(DefaultStartupTimeout)},
		{"sandboxclasses", []string{"spec", "workspaceClaimName"}, DefaultWorkspaceClaimName},
	}
	for _, tc := range tests {
		t.Run(tc.crd+"."+fmt.Sprint(tc.path), func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "manifests", "crd", tc.crd+"."+GroupName+".yaml"))
			if err != nil {
				t.Fatal(err)
			}
			var crd map[string]any
			if err := yaml.Unmarshal(b, &crd); err != nil {
				t.Fatal(err)
			}
			node := crd["spec"].(map[string]any)["versions"].([]any)[0].(map[string]any)["schema"].(map[string]any)["openAPIV3Schema"].(map[string]any)
			for _, step := range tc.path {
				if step == "[]" {
					node = node["items"].(map[string]any)
					continue
				}
				next, ok := node["properties"].(map[string]any)[step].(map[string]any)
				if !ok {
					t.Fatalf("no property %q in the CRD", step)
				}
				node = next
			}
			if got := fmt.Sprint(node["default"]); got != tc.want {
				t.Errorf("CRD default %q, constant %q", got, tc.want)
			}
		})
	}
}

// durationText is a duration as the CRD markers write it ("30m", "5m").
func durationText(d time.Duration) string {
	if d%time.Hour == 0 {
		return fmt.Sprintf("%dh", d/time.Hour)
	}
	return fmt.Sprintf("%dm", d/time.Minute)
}
