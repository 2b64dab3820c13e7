package v1alpha1

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

// crd is the part of a CustomResourceDefinition this test reads.
type crd struct {
	Spec struct {
		Group string `json:"group"`
		Names struct {
			Kind       string   `json:"kind"`
			ListKind   string   `json:"listKind"`
			Plural     string   `json:"plural"`
			ShortNames []string `json:"shortNames"`
		} `json:"names"`
		Scope    string `json:"scope"`
		Versions []struct {
			Name                     string           `json:"name"`
			Served                   bool             `json:"served"`
			Storage                  bool             `json:"storage"`
			Subresources             map[string]any   `json:"subresources"`
			AdditionalPrinterColumns []map[string]any `json:"additionalPrinterColumns"`
		} `json:"versions"`
	} `json:"spec"`
}

// TestCRDsMatchScheme checks that manifests/crd describes exactly the kinds this package
// registers, under the registered group and version, each with a status subresource (SessionRecord: none), printer
// columns and its kubectl short name, in a file named <plural>.<group>.yaml.
func TestCRDsMatchScheme(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	registered := map[string]bool{}
	for kind := range scheme.KnownTypes(SchemeGroupVersion) {
		if strings.HasSuffix(kind, "List") || !strings.HasPrefix(scheme.KnownTypes(SchemeGroupVersion)[kind].PkgPath(), "github.com/airlock-dev/") {
			continue
		}
		registered[kind] = true
	}
	wantShort := map[string]string{"SandboxClass": "sbc", "ToolRegistry": "tr", "AgentRuntime": "ar", "SandboxClaim": "sbx", "SessionRecord": "srec"}
	wantScope := map[string]string{"SandboxClass": "Cluster", "ToolRegistry": "Namespaced", "AgentRuntime": "Namespaced", "SandboxClaim": "Namespaced", "SessionRecord": "Namespaced"}
	// A session record's segment has no status: it is what it holds (docs/decisions.md).
	noStatus := map[string]bool{"SessionRecord": true}

	files, err := filepath.Glob(filepath.Join("..", "..", "..", "..", "manifests", "crd", "*."+GroupName+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var c crd
		if err := yaml.Unmarshal(b, &c); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		kind := c.Spec.Names.Kind
		found[kind] = true
		if want := c.Spec.Names.Plural + "." + c.Spec.Group + ".yaml"; filepath.Base(f) != want {
			t.Errorf("%s: want the file named %s", f, want)
		}
		if c.Spec.Group != SchemeGroupVersion.Group {
			t.Errorf("%s: group %q, registered %q", f, c.Spec.Group, SchemeGroupVersion.Group)
		}
		if !registered[kind] {
			t.Errorf("%s: kind %q is not registered in the scheme", f, kind)
		}
		if _, ok := scheme.KnownTypes(SchemeGroupVersion)[c.Spec.Names.ListKind]; !ok {
			t.Errorf("%s: list kind %q is not registered", f, c.Spec.Names.ListKind)
		}
		if got := Resource(c.Spec.Names.Plural); got.Group != c.Spec.Group {
			t.Errorf("%s: Resource(%q) = %v", f, c.Spec.Names.Plural, got)
		}
		if len(c.Spec.Names.ShortNames) != 1 || c.Spec.Names.ShortNames[0] != wantShort[kind] {
			t.Errorf("%s: short names %v, want [%s]", f, c.Spec.Names.ShortNames, wantShort[kind])
		}
		if c.Spec.Scope != wantScope[kind] {
			t.Errorf("%s: scope %q, want %q", f, c.Spec.Scope, wantScope[kind])
		}
		if len(c.Spec.Versions) != 1 {
			t.Fatalf("%s: %d versions, want 1", f, len(c.Spec.Versions))
		}
		v := c.Spec.Versions[0]
		if v.Name != SchemeGroupVersion.Version || !v.Served || !v.Storage {
			t.Errorf("%s: version %q served=%v storage=%v", f, v.Name, v.Served, v.Storage)
		}
		if _, ok := v.Subresources["status"]; ok == noStatus[kind] {
			t.Errorf("%s: status subresource %v, want %v", f, ok, !noStatus[kind])
		}
		if len(v.AdditionalPrinterColumns) == 0 {
			t.Errorf("%s: no printer columns", f)
		}
	}
	var missing []string
	for kind := range registered {
		if !found[kind] {
			missing = append(missing, kind)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("registered kinds without a CRD in manifests/crd: %v", missing)
	}
	if len(registered) != 5 {
		t.Errorf("registered kinds %v, want the 4 of SPEC section 2 and SessionRecord", registered)
	}
}

// TestClaimReasonColumnIsTheStatusReason (issue 39, small 2): `kubectl get sbx` prints REASON
// from status.reason, which the claim controller sets, while the claim is Binding, to its Ready
// condition's reason (why it waits: its TestWaitingClaimReasonSaysWhy); a column on a condition
// would print nothing for a Queued or Refused claim, which has no Ready condition.
func TestClaimReasonColumnIsTheStatusReason(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "manifests", "crd", "sandboxclaims."+GroupName+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var c crd
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, col := range c.Spec.Versions[0].AdditionalPrinterColumns {
		if col["name"] == "Reason" {
			paths = append(paths, col["jsonPath"].(string))
		}
	}
	if len(paths) != 1 || paths[0] != ".status.reason" {
		t.Errorf("SandboxClaim's Reason columns read %v, want [.status.reason]", paths)
	}
}
