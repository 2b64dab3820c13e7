package toolnames

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
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

// TestEveryListIsAll: the lists of the tools written outside this package
// (they cannot import it: a kubebuilder marker, documentation) name exactly
// the tools of All. sandboxd's own (its tool specs, what it lists) are
// checked against All in pkg/sandboxd (TestToolSpecsAgree).
func TestEveryListIsAll(t *testing.T) {
	read := func(parts ...string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(append([]string{"..", ".."}, parts...)...))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	// The enum marker of v1alpha1.ToolName, in All's order.
	types := read("pkg", "apis", "airlock", "v1alpha1", "types.go")
	marker, _, ok := strings.Cut(types, "\ntype ToolName string")
	if !ok {
		t.Fatal("no type ToolName in types.go")
	}
	marker = marker[strings.LastIndex(marker, "\n")+1:]
	enum, ok := strings.CutPrefix(marker, "// +kubebuilder:validation:Enum=")
	if !ok {
		t.Fatalf("the line above type ToolName is %q, not its enum marker", marker)
	}
	if diff := cmp.Diff(All(), strings.Split(enum, ";")); diff != "" {
		t.Errorf("the ToolName enum marker (-All +marker):\n%s", diff)
	}

	// The package doc of sandboxd, in All's order.
	doc := read("pkg", "sandboxd", "doc.go")
	_, list, _ := strings.Cut(doc, "the codegen tools (")
	list, _, _ = strings.Cut(list, ")")
	list = strings.NewReplacer("//", "", "\n", " ").Replace(list)
	var inDoc []string
	for _, name := range strings.Split(list, ",") {
		inDoc = append(inDoc, strings.TrimSpace(name))
	}
	if diff := cmp.Diff(All(), inDoc); diff != "" {
		t.Errorf("the tools doc.go names (-All +doc.go):\n%s", diff)
	}

	// The table of docs/sandboxd-tools.md: every tool once, in any order.
	table := read("docs", "sandboxd-tools.md")
	table, _, _ = strings.Cut(table, "\n## ")
	var inTable []string
	for _, line := range strings.Split(table, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		first := strings.Split(line, "|")[1]
		for _, name := range strings.Split(first, ",") {
			inTable = append(inTable, strings.Trim(strings.TrimSpace(name), "`"))
		}
	}
	slices.Sort(inTable)
	all := All()
	slices.Sort(all)
	if diff := cmp.Diff(all, inTable); diff != "" {
		t.Errorf("the tools of docs/sandboxd-tools.md's table (-All +table):\n%s", diff)
	}
}

func TestReadOnly(t *testing.T) {
	want := []string{Read, Glob, Grep, LS, SnapshotList, SnapshotDiff, LastTestFailures, FindDefinition, FindReferences, SearchCode}
	if diff := cmp.Diff(want, ReadOnlyNames()); diff != "" {
		t.Errorf("ReadOnlyNames (-want +got):\n%s", diff)
	}
	for _, name := range []string{Write, Edit, MultiEdit, Bash, BashOutput, KillShell, SnapshotRestore, SnapshotCreate, RenameSymbol, RunTests, RunScript, "", "read", "unknown"} {
		if ReadOnly(name) {
			t.Errorf("ReadOnly(%q) = true", name)
		}
	}
	for name := range readOnly {
		if !slices.Contains(All(), name) {
			t.Errorf("read-only %q is not a tool", name)
		}
	}
}
