package monitoring

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The metrics airlock exports, read from the code that registers them: airlock's own packages
// (pkg/), and the client-go metrics the operator links in through
// k8s.io/component-base/metrics/prometheus/clientgo (workqueue, leader election, REST client),
// at the version airlock's go.mod pins. An options literal (CounterOpts, GaugeOpts,
// HistogramOpts, SummaryOpts) gives Namespace_Subsystem_Name; a NewDesc call gives its first
// argument. String constants of the same package are resolved, so `Subsystem: metricsSubsystem`
// and `Name: DepthKey` count.

// repoRoot is airlock's checkout, two levels up.
var repoRoot = filepath.Join("..", "..")

// metricKind is a metric family's type, as the exposition format's TYPE line names it; custom
// is a collector's NewDesc, whose type is decided when it is collected.
type metricKind string

const (
	counter   metricKind = "counter"
	gauge     metricKind = "gauge"
	histogram metricKind = "histogram"
	summary   metricKind = "summary"
	custom    metricKind = "custom"
)

// family is one metric family airlock registers: its type and the process that exports it
// (sandboxd for pkg/sandboxd, the operator for the rest).
type family struct {
	kind     metricKind
	exporter string
}

// prometheusSeries are series Prometheus makes itself for every target.
var prometheusSeries = []string{"up", "scrape_duration_seconds", "scrape_samples_scraped"}

// exportedSeries returns every series name airlock's operator and sandboxd export (histograms and
// summaries with their _bucket, _sum and _count series) plus Prometheus's own.
func exportedSeries(t *testing.T) map[string]bool {
	t.Helper()
	series := map[string]bool{}
	for s := range seriesFamilies(t) {
		series[s] = true
	}
	return series
}

// seriesFamilies maps every series name airlock's operator and sandboxd export to its family's
// name and family (histograms and summaries with their _bucket, _sum and _count series), plus
// Prometheus's own series (exporter "prometheus").
func seriesFamilies(t *testing.T) map[string]namedFamily {
	t.Helper()
	families := map[string]family{}
	walk := func(root string) {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if name := d.Name(); name == "generated" || name == "testdata" {
					return filepath.SkipDir
				}
				scanPackage(t, path, families)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	walk(filepath.Join(repoRoot, "pkg"))
	componentBase := moduleDir(t, "k8s.io/component-base")
	for _, dir := range []string{"clientgo", "workqueue", "restclient"} {
		walk(filepath.Join(componentBase, "metrics", "prometheus", dir))
	}
	series := map[string]namedFamily{}
	for name, f := range families {
		nf := namedFamily{name: name, family: f}
		series[name] = nf
		switch f.kind {
		case histogram:
			series[name+"_bucket"], series[name+"_sum"], series[name+"_count"] = nf, nf, nf
		case summary:
			series[name+"_sum"], series[name+"_count"] = nf, nf
		}
	}
	for _, s := range prometheusSeries {
		series[s] = namedFamily{name: s, family: family{kind: gauge, exporter: "prometheus"}}
	}
	return series
}

// namedFamily is a family with its name.
type namedFamily struct {
	name string
	family
}

// moduleDir is the directory of a module at the version airlock's go.mod requires, downloaded
// into the module cache if it is not there yet.
func moduleDir(t *testing.T, module string) string {
	t.Helper()
	cmd := exec.Command("go", "mod", "download", "-json", module)
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go mod download %s in airlock's module: %v", module, err)
	}
	var info struct{ Dir, Error string }
	if err := json.Unmarshal(out, &info); err != nil {
		t.Fatalf("go mod download -json %s: %v", module, err)
	}
	if info.Error != "" || info.Dir == "" {
		t.Fatalf("go mod download %s: no directory: %s", module, info.Error)
	}
	return info.Dir
}

// scanPackage adds the metric families registered by the non-test files of one directory.
func scanPackage(t *testing.T, dir string, families map[string]family) {
	t.Helper()
	exporter := "operator"
	for _, pkg := range []string{"sandboxd", "egress"} { // sandboxd's, the egress gateway's (airlock egress)
		if rel, err := filepath.Rel(filepath.Join(repoRoot, "pkg", pkg), dir); err == nil && !strings.HasPrefix(rel, "..") {
			exporter = pkg
		}
	}
	fset := token.NewFileSet()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	consts := stringConsts(files)
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CompositeLit:
				if kind, ok := optsKind(n.Type); ok {
					if name := optsName(n, consts); name != "" {
						families[name] = family{kind: kind, exporter: exporter}
					}
				}
			case *ast.CallExpr:
				if callName(n.Fun) == "NewDesc" && len(n.Args) > 0 {
					if name, ok := eval(n.Args[0], consts); ok {
						families[name] = family{kind: custom, exporter: exporter}
					}
				}
			}
			return true
		})
	}
}

// stringConsts are a package's string constants by name.
func stringConsts(files []*ast.File) map[string]string {
	consts := map[string]string{}
	for range 2 { // twice, so that a constant defined from a later one resolves
		for _, f := range files {
			for _, decl := range f.Decls {
				gd, ok := decl.(*ast.GenDecl)
				if !ok || gd.Tok != token.CONST {
					continue
				}
				for _, spec := range gd.Specs {
					vs := spec.(*ast.ValueSpec)
					for i, name := range vs.Names {
						if i < len(vs.Values) {
							if v, ok := eval(vs.Values[i], consts); ok {
								consts[name.Name] = v
							}
						}
					}
				}
			}
		}
	}
	return consts
}

// eval evaluates a string literal, a constant or a sum of them.
func eval(e ast.Expr, consts map[string]string) (string, bool) {
	switch e := e.(type) {
	case *ast.BasicLit:
		if e.Kind != token.STRING {
			return "", false
		}
		s, err := strconv.Unquote(e.Value)
		return s, err == nil
	case *ast.Ident:
		s, ok := consts[e.Name]
		return s, ok
	case *ast.SelectorExpr:
		s, ok := consts[e.Sel.Name]
		return s, ok
	case *ast.BinaryExpr:
		if e.Op != token.ADD {
			return "", false
		}
		x, okx := eval(e.X, consts)
		y, oky := eval(e.Y, consts)
		return x + y, okx && oky
	case *ast.ParenExpr:
		return eval(e.X, consts)
	}
	return "", false
}

// optsKind says whether a literal's type is a metric options struct, and of which kind.
func optsKind(typ ast.Expr) (metricKind, bool) {
	if u, ok := typ.(*ast.UnaryExpr); ok {
		typ = u.X
	}
	switch callName(typ) {
	case "CounterOpts":
		return counter, true
	case "GaugeOpts":
		return gauge, true
	case "HistogramOpts":
		return histogram, true
	case "SummaryOpts":
		return summary, true
	}
	return "", false
}

// callName is the last name of an identifier or selector (metrics.NewDesc -> NewDesc).
func callName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.SelectorExpr:
		return e.Sel.Name
	}
	return ""
}

// optsName joins an options literal's Namespace, Subsystem and Name as Prometheus does.
func optsName(lit *ast.CompositeLit, consts map[string]string) string {
	parts := map[string]string{}
	for _, elt := range lit.Elts {
		kv, ok := elt.(*ast.KeyValueExpr)
		if !ok {
			continue
		}
		key, ok := kv.Key.(*ast.Ident)
		if !ok {
			continue
		}
		if v, ok := eval(kv.Value, consts); ok {
			parts[key.Name] = v
		}
	}
	if parts["Name"] == "" {
		return ""
	}
	var name []string
	for _, k := range []string{"Namespace", "Subsystem", "Name"} {
		if parts[k] != "" {
			name = append(name, parts[k])
		}
	}
	return strings.Join(name, "_")
}

// TestScannerFindsKnownMetrics: the scan finds metrics of each way they are registered, so that
// a metric missing from its result is missing from airlock.
func TestScannerFindsKnownMetrics(t *testing.T) {
	series := exportedSeries(t)
	for _, name := range []string{
		"airlock_claims", // NewDesc(metricsSubsystem + "_claims")
		"airlock_claim_bind_duration_seconds_bucket",        // a component-base histogram
		"airlock_operator_leadership_lost_total",            // a component-base counter
		"airlock_sandboxd_tool_calls_total",                 // client_golang, Namespace and Subsystem
		"airlock_sandboxd_tool_call_duration_seconds_count", // a client_golang histogram
		"workqueue_depth",                                   // constants of component-base
		"leader_election_master_status",
	} {
		if !series[name] {
			t.Errorf("the scan did not find %s", name)
		}
	}
	for _, name := range []string{"airlock_claims_bucket", "airlock_nonexistent_total"} {
		if series[name] {
			t.Errorf("the scan found %s, which airlock does not export", name)
		}
	}
}

// dashboardExprs returns every PromQL expression of the dashboard, by panel title.
func dashboardExprs(t *testing.T) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, dashboardFile))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if len(d.Panels) == 0 {
		t.Fatalf("%s has no panels", dashboardFile)
	}
	out := map[string][]string{}
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			out[p.Title] = append(out[p.Title], tg.Expr)
		}
	}
	return out
}
