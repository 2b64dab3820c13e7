// Package layout holds the test of which of airlock's packages may import which
// (docs/architecture.md, "Who may import whom"); it has no code of its own.
package layout

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/airlock-dev/airlock/"

// deps returns the packages pkg imports, directly or not (go list -deps), for the given build tags.
func deps(t *testing.T, pkg, tags string) []string {
	t.Helper()
	args := []string{"list", "-deps", "-f", "{{.ImportPath}}"}
	if tags != "" {
		args = append(args, "-tags", tags)
	}
	out, err := exec.Command("go", append(args, module+pkg)...).Output()
	if err != nil {
		t.Fatalf("go list %s: %v", pkg, err)
	}
	return strings.Fields(string(out))
}

// TestImports: the rules of docs/architecture.md hold over every package's whole import graph.
func TestImports(t *testing.T) {
	clientsets := []string{"k8s.io/client-go/kubernetes", module + "pkg/generated/clientset/"}
	rules := []struct {
		pkg, tags string
		why       string
		forbidden []string // import paths, or prefixes ending in "/"
	}{
		{pkg: "pkg/sandboxpod", why: "what a sandbox is: pure, no clients, no controller",
			forbidden: append([]string{module + "pkg/controller/", module + "pkg/operator"}, clientsets...)},
		{pkg: "pkg/admission", why: "the pure admission function",
			forbidden: append([]string{module + "pkg/controller/", "k8s.io/client-go/"}, clientsets...)},
		{pkg: "pkg/controller/warmpool", why: "the pool controller knows nothing of claims' controller",
			forbidden: []string{module + "pkg/controller/claim"}},
		{pkg: "pkg/controller/agentruntime", why: "one controller per package",
			forbidden: []string{module + "pkg/controller/claim", module + "pkg/controller/warmpool"}},
		{pkg: "pkg/controller/cabundle", why: "one controller per package",
			forbidden: []string{module + "pkg/controller/claim", module + "pkg/controller/warmpool"}},
		{pkg: "pkg/controller/sandboxclass", why: "one controller per package",
			forbidden: []string{module + "pkg/controller/claim", module + "pkg/controller/warmpool", module + "pkg/controller/agentruntime"}},
		{pkg: "pkg/controller/defaultdeny", why: "one controller per package",
			forbidden: []string{module + "pkg/controller/claim", module + "pkg/controller/warmpool", module + "pkg/controller/agentruntime"}},
		{pkg: "pkg/controller/claim", why: "one controller per package: the default-deny policy comes through an interface",
			forbidden: []string{module + "pkg/controller/defaultdeny"}},
		{pkg: "pkg/controller/expectations", why: "shared by every controller: depends on none",
			forbidden: []string{module + "pkg/"}},
		{pkg: "pkg/controller/objectcontrol", why: "shared by every controller: depends on none",
			forbidden: []string{module + "pkg/"}},
		{pkg: "pkg/sandboxapi", why: "the Sandbox API runs on every replica, the controllers on the leader",
			forbidden: []string{module + "pkg/controller/", module + "pkg/operator"}},
		{pkg: "pkg/sandboxd", tags: "sandboxd_only", why: "the sandbox image: no Kubernetes client, no operator",
			forbidden: []string{"k8s.io/client-go/", module + "pkg/controller/", module + "pkg/operator", module + "pkg/sandboxapi"}},
		{pkg: "pkg/client", why: "runtimes import it: standard library only",
			forbidden: []string{"k8s.io/", "github.com/", "golang.org/"}},
		{pkg: "pkg/egress", why: "the gateway serves claims; it does not run them",
			forbidden: []string{module + "pkg/controller/", module + "pkg/operator", module + "pkg/sandboxd"}},
	}
	for _, r := range rules {
		t.Run(r.pkg, func(t *testing.T) {
			for _, dep := range deps(t, r.pkg, r.tags) {
				if dep == module+r.pkg || strings.HasPrefix(dep, module+r.pkg+"/") {
					continue
				}
				for _, f := range r.forbidden {
					if dep == f || strings.HasSuffix(f, "/") && strings.HasPrefix(dep, f) {
						t.Errorf("%s imports %s (%s)", r.pkg, dep, r.why)
					}
				}
			}
		})
	}
}
