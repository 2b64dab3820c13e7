// Package layout holds the test of which of airlock's packages may import which
// (docs/architecture.md, "Who may import whom"); it has no code of its own.
package layout

import (
	"os/exec"
	"slices"
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

// rule: pkg, built with tags, may not import (directly or not) any of forbidden.
type rule struct {
	pkg, tags string
	why       string
	forbidden []string // import paths, or prefixes ending in "/"
	allowed   []string // import paths the forbidden prefixes do not cover
}

// programs are the packages of airlock's programs (the gateway, the copier, sandboxd, the command
// tree): a controller or a pure package imports what they share (pkg/egress/policy,
// pkg/workspace, ...), never them.
var programs = []string{module + "pkg/egress", module + "pkg/syncback", module + "pkg/sandboxd", module + "pkg/sandboxd/",
	module + "pkg/cmd"}

// shared are the packages under pkg/controller that every controller may import: they are no
// controller.
var shared = map[string]bool{"expectations": true, "objectcontrol": true, "handlers": true, "workers": true, "controllertest": true,
	"evidence": true, "evidence/evidencetest": true}

// mayImport are the exceptions to "one controller per package": the claim controller finds a
// warm pool's idle members through warmpool.Members, the implementation of a small interface it
// owns (adopt.go).
var mayImport = map[string][]string{"claim": {"warmpool"}}

// controllerRules: every controller under pkg/controller imports no program, no operator and no
// other controller (but mayImport); workspacegc and claim in particular know nothing of each
// other. The list of controllers is read from the tree, so a new one is held to the rules too.
func controllerRules(t *testing.T) []rule {
	out, err := exec.Command("go", "list", module+"pkg/controller/...").Output()
	if err != nil {
		t.Fatalf("go list pkg/controller/...: %v", err)
	}
	var controllers []string
	for _, p := range strings.Fields(string(out)) {
		if name := strings.TrimPrefix(p, module+"pkg/controller/"); !shared[name] {
			controllers = append(controllers, name)
		}
	}
	if !slices.Contains(controllers, "workspacegc") || !slices.Contains(controllers, "claim") {
		t.Fatalf("pkg/controller/... lists %v: no claim or workspacegc controller", controllers)
	}
	var rules []rule
	for _, c := range controllers {
		forbidden := append([]string{module + "pkg/operator"}, programs...)
		for _, other := range controllers {
			if other != c && !slices.Contains(mayImport[c], other) {
				forbidden = append(forbidden, module+"pkg/controller/"+other)
			}
		}
		rules = append(rules, rule{pkg: "pkg/controller/" + c, why: "one controller per package, and no program", forbidden: forbidden})
	}
	return rules
}

// TestImports: the rules of docs/architecture.md hold over every package's whole import graph.
func TestImports(t *testing.T) {
	clientsets := []string{"k8s.io/client-go/kubernetes", module + "pkg/generated/clientset/"}
	rules := []rule{
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
		{pkg: "pkg/controller/evidence", why: "shared by the claim and warm pool controllers: depends on none, nor on a program",
			forbidden: append([]string{module + "pkg/controller/", module + "pkg/operator", module + "pkg/generated/"}, programs...)},
		{pkg: "pkg/sandboxapi", why: "the Sandbox API runs on every replica, the controllers on the leader",
			forbidden: []string{module + "pkg/controller/", module + "pkg/operator"}},
		{pkg: "pkg/sandboxd", tags: "sandboxd_only", why: "the sandbox image: no Kubernetes client, no operator",
			forbidden: []string{"k8s.io/client-go/", module + "pkg/controller/", module + "pkg/operator", module + "pkg/sandboxapi"}},
		{pkg: "pkg/client", why: "runtimes import it: standard library only (and pkg/attestation, standard library only itself)",
			forbidden: []string{"k8s.io/", "github.com/", "golang.org/"}, allowed: []string{module + "pkg/attestation"}},
		{pkg: "pkg/attestation", why: "what the operator signs and runtimes verify: standard library only",
			forbidden: []string{"k8s.io/", "github.com/", "golang.org/"}},
		{pkg: "pkg/cmd", why: "the OTLP exporter's wire is pkg/tracing's own: gRPC's library and x/net/trace's html/template took the binary from 38.6 to 62.1 MB",
			forbidden: []string{"google.golang.org/grpc", "golang.org/x/net/trace", "html/template"}},
		{pkg: "pkg/traceparent", why: "the W3C traceparent sandboxd and the gateway read: pure, standard library only (sandboxd never exports)",
			forbidden: []string{"k8s.io/", "github.com/", "golang.org/", "go.opentelemetry.io/"}},
		{pkg: "pkg/record", why: "what a session record is: pure, standard library only (sandboxd, the operator and the CLI import it)",
			forbidden: []string{"k8s.io/", "github.com/", "golang.org/"}},
		{pkg: "pkg/warmsize", why: "what size a warm pool should be: pure, standard library only (the time is given, not read)",
			forbidden: []string{"k8s.io/", "github.com/", "golang.org/"}},
		{pkg: "pkg/sandboxrecord", why: "the wire of sandboxd's GET /record and its client: standard library only (sandboxd imports it)",
			forbidden: []string{"k8s.io/", "github.com/", "golang.org/"}},
		{pkg: "pkg/gatewayrecord", why: "the wire of the gateway's GET /decisions and its client: standard library only (the gateway and the leader import it)",
			forbidden: []string{"k8s.io/", "github.com/", "golang.org/"}},
		{pkg: "pkg/isolation", why: "what isolation evidence is and how it is judged: pure, standard library only (sandboxd, the operator and runtimes import it)",
			forbidden: []string{"k8s.io/", "github.com/", "golang.org/"}},
		{pkg: "pkg/egress", why: "the gateway serves claims; it does not run them",
			forbidden: []string{module + "pkg/controller/", module + "pkg/operator", module + "pkg/sandboxd"}},
		{pkg: "pkg/egress", why: "test support (a naive upstream) is imported by tests only",
			forbidden: []string{module + "pkg/egress/egresstest"}},
		{pkg: "pkg/egress/egresstest", why: "the tests' naive upstream knows nothing of airlock",
			forbidden: []string{module + "pkg/"}},
	}
	pure := append([]string{"k8s.io/client-go/", module + "pkg/generated/", module + "pkg/controller/", module + "pkg/operator"}, programs...)
	rules = append(rules,
		rule{pkg: "pkg/workspace", why: "what a workspace is: pure, no clients, no controller, no program",
			forbidden: append([]string{module + "pkg/sandboxpod"}, pure...)},
		rule{pkg: "pkg/egress/policy", why: "the gateway's policy compiler: pure and apart from the gateway",
			forbidden: pure},
		rule{pkg: "pkg/recordstore", why: "what a stored session record is: pure, no clients, no controller, no program",
			forbidden: pure},
		rule{pkg: "pkg/usage", why: "what a session used and a runtime's sums: pure, no clients, no controller, no program",
			forbidden: pure},
		rule{pkg: "pkg/syncback", why: "the copier: the workspace's rules come from pkg/workspace, nothing of the operator",
			forbidden: append([]string{module + "pkg/controller/", module + "pkg/operator"}, clientsets...)},
	)
	for _, pkg := range []string{"pkg/sandboxpod", "pkg/admission", "pkg/sandboxapi", "pkg/claimname", "pkg/claimtoken"} {
		rules = append(rules, rule{pkg: pkg, why: "imports the pure packages, never a program", forbidden: programs})
	}
	rules = append(rules, controllerRules(t)...)
	rules = append(rules, sandboxdLayers()...)
	for _, r := range rules {
		name := r.pkg
		if r.tags != "" {
			name += "[" + r.tags + "]"
		}
		t.Run(name, func(t *testing.T) {
			for _, dep := range deps(t, r.pkg, r.tags) {
				if slices.Contains(r.allowed, dep) {
					continue
				}
				// A package's own subpackages are its own, unless a rule names one exactly.
				own := dep == module+r.pkg || strings.HasPrefix(dep, module+r.pkg+"/")
				for _, f := range r.forbidden {
					if dep == f && dep != module+r.pkg || !own && strings.HasSuffix(f, "/") && strings.HasPrefix(dep, f) {
						t.Errorf("%s imports %s (%s)", r.pkg, dep, r.why)
					}
				}
			}
		})
	}
}

// sandboxdLayers: pkg/sandboxd in layers (its doc.go, "Layers"). The public package composes the
// server from internal packages that import downward only: the wire and the tools know nothing of
// each other or of the composition, both share internal/toolcall, which imports nothing of
// airlock, and the helpers beneath know none of the three. Checked with and without the sandbox
// image's build tag.
func sandboxdLayers() []rule {
	const sd = module + "pkg/sandboxd"
	const internal = sd + "/internal/"
	helpers := []string{"confine", "evidence", "lsp", "outcap", "meter", "procgroup", "recordlog", "scrub", "snapshot", "testfailures", "wsscan"}
	var rules []rule
	for _, tags := range []string{"", "sandboxd_only"} {
		rules = append(rules,
			rule{pkg: "pkg/sandboxd/internal/wire", tags: tags, why: "the wire: transports and checks, no tools",
				forbidden: append([]string{sd, internal + "tools"}, prefixed(internal, helpers)...)},
			rule{pkg: "pkg/sandboxd/internal/tools", tags: tags, why: "the tools: no wire, no composition",
				forbidden: []string{sd, internal + "wire"}},
			rule{pkg: "pkg/sandboxd/internal/toolcall", tags: tags, why: "the types the wire and the tools share: nothing of airlock",
				forbidden: []string{module + "pkg/"}},
		)
		rules = append(rules,
			rule{pkg: "pkg/sandboxd", tags: tags, why: "test support is imported by tests only",
				forbidden: []string{internal + "sandboxdtest", internal + "fakelsp"}},
			rule{pkg: "pkg/sandboxd/internal/sandboxdtest", tags: tags, why: "the tests' raw clients know no sandboxd package",
				forbidden: []string{sd, internal}},
		)
		for _, h := range helpers {
			rules = append(rules, rule{pkg: "pkg/sandboxd/internal/" + h, tags: tags,
				why:       "a helper beneath the wire and the tools",
				forbidden: []string{sd, internal + "wire", internal + "tools", internal + "toolcall"}})
		}
	}
	return rules
}

func prefixed(prefix string, names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = prefix + n
	}
	return out
}
