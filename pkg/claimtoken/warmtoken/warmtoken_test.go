package warmtoken

import (
	"go/build"
	"strings"
	"testing"
)

// TestImportsNoClientGo: sandboxd imports this package, and the sandbox images' binary must not
// link client-go (see the package comment). The package may import the standard library and
// k8s.io/apimachinery/pkg/types only.
func TestImportsNoClientGo(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(pkg.Imports) == 0 {
		t.Fatal("no imports found: the test reads the wrong directory")
	}
	for _, imp := range pkg.Imports {
		if imp == "k8s.io/apimachinery/pkg/types" {
			continue
		}
		if first, _, _ := strings.Cut(imp, "/"); strings.Contains(first, ".") {
			t.Errorf("imports %s: only the standard library and k8s.io/apimachinery/pkg/types are allowed", imp)
		}
	}
}
