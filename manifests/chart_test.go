package manifests

// The Helm chart (chart/airlock) and the kustomize tree are one install: rendered with its default
// values the chart must produce exactly the objects `kubectl kustomize manifests/` produces
// (ordering aside, and labels aside as long as the chart keeps every label of the kustomize
// tree), so that the two cannot drift. helm and kubectl are the pinned binaries that
// hack/build-cluster-bins.sh builds into bin/ (or AIRLOCK_BIN_DIR); `make test-unit` and `make
// verify-chart` build them first.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/toolnames"
)

const (
	chartDir         = "chart/airlock"
	releaseName      = "airlock"
	releaseNamespace = "airlock-system"
)

// binary returns the path of a pinned tool: $HELM / $KUBECTL when set, else AIRLOCK_BIN_DIR's or
// the repository's bin/. A missing tool fails the test under CI, or when AIRLOCK_BIN_DIR names
// where it should be; elsewhere (a plain `go test ./...` on a fresh clone) the test is skipped
// with the command that builds it.
func binary(t *testing.T, name string) string {
	t.Helper()
	env := strings.ToUpper(name)
	if p := os.Getenv(env); p != "" {
		return p
	}
	dir := os.Getenv("AIRLOCK_BIN_DIR")
	explicit := dir != ""
	if !explicit {
		dir = filepath.Join("..", "bin")
	}
	p, err := filepath.Abs(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	if info, err := os.Stat(p); err == nil && !info.IsDir() && info.Mode()&0o111 != 0 {
		return p
	}
	msg := fmt.Sprintf("%s not found at %s (or $%s): build it with `hack/build-cluster-bins.sh helm kubectl` (make test-unit and make verify-chart do)", name, p, env)
	if os.Getenv("CI") != "" || explicit {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// run runs a tool and returns its stdout; err carries its stderr.
func run(t *testing.T, name string, args ...string) ([]byte, error) {
	t.Helper()
	cmd := exec.Command(binary(t, name), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// helm keeps its caches and config out of the user's home; nothing here needs them.
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home, "HELM_CONFIG_HOME="+home, "HELM_DATA_HOME="+home)
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, stderr.String())
	}
	return stdout.Bytes(), nil
}

// helmTemplate renders the chart as `helm install airlock chart/airlock -n airlock-system` would,
// CRDs included, with the given --set / --set-json arguments.
func helmTemplate(t *testing.T, set ...string) ([]byte, error) {
	t.Helper()
	args := []string{"template", releaseName, chartDir, "--namespace", releaseNamespace, "--include-crds"}
	return run(t, "helm", append(args, set...)...)
}

// object is one decoded manifest.
type object = map[string]any

// decodeObjects splits a multi-document YAML stream into objects keyed by
// apiVersion/kind/namespace/name; a key seen twice fails the test.
func decodeObjects(t *testing.T, stream []byte) map[string]object {
	t.Helper()
	out := map[string]object{}
	for _, part := range bytes.Split(append([]byte("\n"), stream...), []byte("\n---")) {
		var obj object
		if err := yaml.Unmarshal(part, &obj); err != nil {
			t.Fatalf("decoding %q: %v", part, err)
		}
		if len(obj) == 0 {
			continue
		}
		namespace, _ := field(obj, "metadata", "namespace").(string) // "" for a cluster-scoped object
		key := fmt.Sprintf("%v/%v/%s/%v", obj["apiVersion"], obj["kind"], namespace, field(obj, "metadata", "name"))
		if _, dup := out[key]; dup {
			t.Fatalf("%s rendered twice", key)
		}
		out[key] = obj
	}
	if len(out) == 0 {
		t.Fatal("no objects rendered: the comparison would be empty")
	}
	return out
}

// field returns the value at a path of nested maps, nil if any step is missing.
func field(obj object, path ...string) any {
	var v any = obj
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[p]
	}
	return v
}

// labelPaths are where an object carries labels: its own and its pod template's.
var labelPaths = [][]string{{"metadata"}, {"spec", "template", "metadata"}}

// helmAnnotationPrefix marks the annotations that only tell Helm what to do (e.g. keep the
// Namespace on uninstall); they are not part of what is installed.
const helmAnnotationPrefix = "helm.sh/"

// stripLabels removes the labels of every object (after checking that the chart's keep all of
// the kustomize tree's) and Helm's own annotations, so that what remains is compared whole.
func stripLabels(t reporter, chart, kustomize map[string]object) {
	t.Helper()
	for key, k := range kustomize {
		c, ok := chart[key]
		for _, path := range labelPaths {
			kl, _ := field(k, append(path, "labels")...).(map[string]any)
			if ok {
				cl, _ := field(c, append(path, "labels")...).(map[string]any)
				for name, v := range kl {
					if cl[name] != v {
						t.Errorf("%s: %s.labels[%s] is %v in the chart, %v in the kustomize tree", key, strings.Join(path, "."), name, cl[name], v)
					}
				}
			}
		}
	}
	for _, objs := range []map[string]object{chart, kustomize} {
		for _, obj := range objs {
			for _, path := range labelPaths {
				if m, ok := field(obj, path...).(map[string]any); ok {
					delete(m, "labels")
					if ann, ok := m["annotations"].(map[string]any); ok {
						maps.DeleteFunc(ann, func(k string, _ any) bool { return strings.HasPrefix(k, helmAnnotationPrefix) })
						if len(ann) == 0 {
							delete(m, "annotations")
						}
					}
					if len(m) == 0 {
						delete(field(obj, path[:len(path)-1]...).(map[string]any), path[len(path)-1])
					}
				}
			}
		}
	}
}

// compareInstalls fails on every object one install has and the other has not, and on every
// difference in an object both have.
func compareInstalls(t reporter, chart, kustomize map[string]object) {
	t.Helper()
	stripLabels(t, chart, kustomize)
	keys := slices.Sorted(maps.Keys(kustomize))
	for _, key := range keys {
		c, ok := chart[key]
		if !ok {
			t.Errorf("%s is in the kustomize tree, not in the chart", key)
			continue
		}
		if diff := cmp.Diff(kustomize[key], c); diff != "" {
			t.Errorf("%s differs (-kustomize +chart):\n%s", key, diff)
		}
	}
	for _, key := range slices.Sorted(maps.Keys(chart)) {
		if _, ok := kustomize[key]; !ok {
			t.Errorf("%s is in the chart, not in the kustomize tree", key)
		}
	}
}

// kustomizeBuild renders a kustomization directory with kubectl's kustomize.
func kustomizeBuild(t *testing.T, dir string) map[string]object {
	t.Helper()
	out, err := run(t, "kubectl", "kustomize", dir)
	if err != nil {
		t.Fatal(err)
	}
	return decodeObjects(t, out)
}

// TestChartDefaultsEqualKustomize: `helm template` with the default values installs what
// `kubectl apply -k manifests/` installs.
func TestChartDefaultsEqualKustomize(t *testing.T) {
	out, err := helmTemplate(t)
	if err != nil {
		t.Fatal(err)
	}
	chart := decodeObjects(t, out)
	kustomize := kustomizeBuild(t, ".")
	if len(kustomize) < 10 {
		t.Fatalf("the kustomize tree rendered %d objects: %v", len(kustomize), slices.Sorted(maps.Keys(kustomize)))
	}
	compareInstalls(t, chart, kustomize)
}

// overlayBuild renders an overlay of the kustomize tree with the given components, as a user's
// overlay would use them.
func overlayBuild(t *testing.T, components ...string) map[string]object {
	t.Helper()
	root, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	overlay := t.TempDir()
	rel := func(p string) string {
		r, err := filepath.Rel(overlay, filepath.Join(root, p))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	kustomization := fmt.Sprintf("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- %s\ncomponents:\n", rel("."))
	for _, c := range components {
		kustomization += "- " + rel(c) + "\n"
	}
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(kustomization), 0o644); err != nil {
		t.Fatal(err)
	}
	return kustomizeBuild(t, overlay)
}

// TestChartComponentsEqualKustomize: the chart's optional parts install what an overlay with the
// matching kustomize component installs: certManager.enabled and components/cert-manager, the
// monitoring values and components/monitoring, egress.enabled and components/egress.
func TestChartComponentsEqualKustomize(t *testing.T) {
	tests := map[string]struct {
		set       []string
		component string
		wantKey   string // an object only the component adds
	}{
		"cert-manager": {set: []string{"--set", "certManager.enabled=true"}, component: "components/cert-manager",
			wantKey: "cert-manager.io/v1/Certificate/airlock-system/airlock-sandbox-api"},
		"monitoring": {set: []string{"--set", "monitoring.serviceMonitor.enabled=true,monitoring.prometheusRule.enabled=true,monitoring.dashboard.enabled=true"},
			component: "components/monitoring", wantKey: "monitoring.coreos.com/v1/PrometheusRule/airlock-system/airlock"},
		"egress": {set: []string{"--set", "egress.enabled=true"}, component: "components/egress",
			wantKey: "apps/v1/Deployment/airlock-system/airlock-egress"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			out, err := helmTemplate(t, tc.set...)
			if err != nil {
				t.Fatal(err)
			}
			chart := decodeObjects(t, out)
			kustomize := overlayBuild(t, tc.component)
			if _, ok := kustomize[tc.wantKey]; !ok {
				t.Fatalf("the overlay has no %s: %v", tc.wantKey, slices.Sorted(maps.Keys(kustomize)))
			}
			compareInstalls(t, chart, kustomize)
		})
	}
}

// TestCompareInstallsCatches: the comparison fails on what it must fail on, so that a passing
// TestChartDefaultsEqualKustomize means something.
func TestCompareInstallsCatches(t *testing.T) {
	base := func() map[string]object {
		return map[string]object{"apps/v1/Deployment/ns/op": {
			"apiVersion": "apps/v1", "kind": "Deployment",
			"metadata": map[string]any{"name": "op", "namespace": "ns", "labels": map[string]any{"app.kubernetes.io/name": "airlock"}},
			"spec": map[string]any{"replicas": float64(2), "template": map[string]any{
				"metadata": map[string]any{"labels": map[string]any{"app.kubernetes.io/name": "airlock"}}}},
		}}
	}
	tests := map[string]struct {
		change   func(chart map[string]object)
		wantFail bool
	}{
		"identical":         {change: func(map[string]object) {}},
		"a label added":     {change: func(c map[string]object) { setField(c, "helm.sh/chart", "airlock-0.1.0", "metadata", "labels") }},
		"a pod label added": {change: func(c map[string]object) { setField(c, "instance", "x", "spec", "template", "metadata", "labels") }},
		"a helm annotation": {change: func(c map[string]object) { setField(c, "helm.sh/resource-policy", "keep", "metadata", "annotations") }},
		"a label changed":   {change: func(c map[string]object) { setField(c, "app.kubernetes.io/name", "other", "metadata", "labels") }, wantFail: true},
		"a pod label dropped": {change: func(c map[string]object) {
			delete(field(c["apps/v1/Deployment/ns/op"], "spec", "template", "metadata", "labels").(map[string]any), "app.kubernetes.io/name")
		}, wantFail: true},
		"another annotation":        {change: func(c map[string]object) { setField(c, "example.com/x", "y", "metadata", "annotations") }, wantFail: true},
		"a field changed":           {change: func(c map[string]object) { setField(c, "replicas", float64(3), "spec") }, wantFail: true},
		"an object missing":         {change: func(c map[string]object) { delete(c, "apps/v1/Deployment/ns/op") }, wantFail: true},
		"an object only in a chart": {change: func(c map[string]object) { c["v1/Service/ns/x"] = object{"kind": "Service"} }, wantFail: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			chart := base()
			tc.change(chart)
			rec := &recorder{}
			compareInstalls(rec, chart, base())
			if rec.failed != tc.wantFail {
				t.Errorf("failed = %v, want %v (%s)", rec.failed, tc.wantFail, strings.Join(rec.msgs, "; "))
			}
		})
	}
}

// setField sets key in the map at path of the one Deployment of TestCompareInstallsCatches.
func setField(objs map[string]object, key string, value any, path ...string) {
	obj := objs["apps/v1/Deployment/ns/op"]
	m := obj
	for _, p := range path {
		next, ok := m[p].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[p] = next
		}
		m = next
	}
	m[key] = value
}

// TestChartRefusesBadValues: a bad value fails the render with a message that names it.
func TestChartRefusesBadValues(t *testing.T) {
	tests := map[string]struct {
		set  []string
		want []string // each must appear in helm's error
	}{
		"no replicas":              {set: []string{"--set", "operator.replicas=0"}, want: []string{"/operator/replicas", "minimum"}},
		"replicas not a number":    {set: []string{"--set", "operator.replicas=two"}, want: []string{"/operator/replicas"}},
		"a misspelt value":         {set: []string{"--set", "operator.replica=3"}, want: []string{"at '/operator': additional properties 'replica' not allowed"}},
		"unknown TLS mode":         {set: []string{"--set", "operator.tls.mode=plain"}, want: []string{"/operator/tls/mode", "self-signed"}},
		"no token audience":        {set: []string{"--set-json", "operator.tokenAudiences=[]"}, want: []string{"/operator/tokenAudiences"}},
		"audience with a comma":    {set: []string{"--set-json", `operator.tokenAudiences=["a,b"]`}, want: []string{"/operator/tokenAudiences/0"}},
		"zero QPS":                 {set: []string{"--set", "operator.kubeAPIQPS=0"}, want: []string{"/operator/kubeAPIQPS"}},
		"bad pull policy":          {set: []string{"--set", "image.pullPolicy=Sometimes"}, want: []string{"/image/pullPolicy"}},
		"an unknown tool":          {set: []string{"--set", "sandbox.toolRegistry.enabled=true,sandbox.toolRegistry.namespace=agents", "--set-json", `sandbox.allowedTools=["Read","curl"]`}, want: []string{"/sandbox/allowedTools/1"}},
		"a tool twice":             {set: []string{"--set", "sandbox.toolRegistry.enabled=true,sandbox.toolRegistry.namespace=agents", "--set-json", `sandbox.allowedTools=["Read","Read"]`}, want: []string{"/sandbox/allowedTools"}},
		"startup timeout in words": {set: []string{"--set", "sandbox.codegenClass.startupTimeout=five minutes"}, want: []string{"/sandbox/codegenClass/startupTimeout"}},
		"port out of range":        {set: []string{"--set-json", `sandbox.codegenClass.ports=[{"name":"mcp","port":70000}]`}, want: []string{"/sandbox/codegenClass/ports/0/port"}},
		"no class port":            {set: []string{"--set-json", "sandbox.codegenClass.ports=[]"}, want: []string{"/sandbox/codegenClass/ports"}},
		"target path escapes":      {set: []string{"--set", "sandbox.toolRegistry.targetPath=../etc"}, want: []string{"/sandbox/toolRegistry/targetPath"}},
		"bad metrics namespace":    {set: []string{"--set-json", `networkPolicy.metricsNamespaces=["Monitoring"]`}, want: []string{"/networkPolicy/metricsNamespaces/0"}},
		"replicas without a leader": {set: []string{"--set", "operator.leaderElection.enabled=false"},
			want: []string{"operator.replicas is 2 with operator.leaderElection.enabled false"}},
		"files without a Secret": {set: []string{"--set", "operator.tls.mode=files"},
			want: []string{"operator.tls.existingSecret is empty"}},
		"cert-manager and no TLS": {set: []string{"--set", "certManager.enabled=true,operator.tls.mode=none"},
			want: []string{`certManager.enabled is true with operator.tls.mode "none"`}},
		"a budget that blocks drains": {set: []string{"--set", "operator.replicas=1"},
			want: []string{"podDisruptionBudget.minAvailable (1) must be less than operator.replicas (1)"}},
		"a managed flag in extraArgs": {set: []string{"--set-json", `operator.extraArgs=["--tls-mode=none"]`},
			want: []string{`operator.extraArgs has "--tls-mode=none"`}},
		"a single-dash managed flag": {set: []string{"--set-json", `operator.extraArgs=["-v=9"]`},
			want: []string{`operator.extraArgs has "-v=9"`}},
		"not a flag in extraArgs": {set: []string{"--set-json", `operator.extraArgs=["rm -rf"]`},
			want: []string{"/operator/extraArgs/0"}},
		"the gateway's port in egress.extraArgs": {set: []string{"--set", "egress.enabled=true", "--set-json", `egress.extraArgs=["--proxy-bind-address=:8888"]`},
			want: []string{`egress.extraArgs has "--proxy-bind-address=:8888"`}},
		"not a flag in egress.extraArgs": {set: []string{"--set-json", `egress.extraArgs=["-v=9"]`},
			want: []string{"/egress/extraArgs/0"}},
		"a volume without a name": {set: []string{"--set-json", `egress.extraVolumes=[{"emptyDir":{}}]`},
			want: []string{"/egress/extraVolumes/0"}},
		"the gateway named twice": {set: []string{"--set", "egress.enabled=true", "--set-json", `operator.extraArgs=["--egress-gateway-service=x/y:1"]`},
			want: []string{`operator.extraArgs has "--egress-gateway-service=x/y:1"`}},
		"the egress CA's flags twice": {set: []string{"--set", "egress.enabled=true", "--set-json", `operator.extraArgs=["--manage-egress-ca"]`},
			want: []string{`operator.extraArgs has "--manage-egress-ca"`}},
		"a CA of one's own with the managed CA": {set: []string{"--set", "egress.enabled=true", "--set-json", `egress.extraArgs=["--terminate-ca-cert-file=/x/tls.crt"]`},
			want: []string{`egress.extraArgs has "--terminate-ca-cert-file=/x/tls.crt"`}},
		"an operator volume without a name": {set: []string{"--set-json", `operator.extraVolumes=[{"emptyDir":{}}]`},
			want: []string{"/operator/extraVolumes/0"}},
		"a registry without a namespace": {set: []string{"--set", "sandbox.toolRegistry.enabled=true"},
			want: []string{"sandbox.toolRegistry.namespace is empty"}},
		"a registry without its class": {set: []string{"--set", "sandbox.toolRegistry.enabled=true,sandbox.toolRegistry.namespace=agents,sandbox.codegenClass.enabled=false"},
			want: []string{"sandbox.codegenClass.enabled is false"}},
		"warm members of a session workspace": {set: []string{"--set", "sandbox.toolRegistry.enabled=true,sandbox.toolRegistry.namespace=agents,sandbox.toolRegistry.workspace=session,sandbox.toolRegistry.warm=2"},
			want: []string{"sandbox.toolRegistry.warm must be 0"}},
		"a fixed warm count and a warmPolicy": {set: []string{"--set", "sandbox.toolRegistry.enabled=true,sandbox.toolRegistry.namespace=agents,sandbox.toolRegistry.warm=2", "--set-json", `sandbox.toolRegistry.warmPolicy={"max":5}`},
			want: []string{"sandbox.toolRegistry.warm and sandbox.toolRegistry.warmPolicy are both set"}},
		"a warmPolicy of a session workspace": {set: []string{"--set", "sandbox.toolRegistry.enabled=true,sandbox.toolRegistry.namespace=agents,sandbox.toolRegistry.workspace=session", "--set-json", `sandbox.toolRegistry.warmPolicy={"max":5}`},
			want: []string{"sandbox.toolRegistry.warmPolicy is set with sandbox.toolRegistry.workspace session"}},
		"a warmPolicy without its max": {set: []string{"--set-json", `sandbox.toolRegistry.warmPolicy={"min":1}`},
			want: []string{"/sandbox/toolRegistry/warmPolicy", "max"}},
		"a warmPolicy with a misspelt key": {set: []string{"--set-json", `sandbox.toolRegistry.warmPolicy={"max":3,"headroom":50}`},
			want: []string{"/sandbox/toolRegistry/warmPolicy", "headroom"}},
		"a resumeWindow that is no duration": {set: []string{"--set", "sandbox.toolRegistry.resumeWindow=ten minutes"},
			want: []string{"/sandbox/toolRegistry/resumeWindow"}},
		"a scrape interval in words": {set: []string{"--set", "monitoring.serviceMonitor.interval=often"},
			want: []string{"/monitoring/serviceMonitor/interval"}},
		"tools without the registry": {set: []string{"--set-json", `sandbox.allowedTools=["Read"]`},
			want: []string{"sandbox.toolRegistry.enabled is false"}},
		"a tracing ratio above one": {set: []string{"--set", "tracing.endpoint=collector:4317,tracing.sampleRatio=2"},
			want: []string{"/tracing/sampleRatio"}},
		"a tracing endpoint with a path": {set: []string{"--set", "tracing.endpoint=http://collector:4318/v1/traces"},
			want: []string{"/tracing/endpoint"}},
		"an unknown tracing protocol": {set: []string{"--set", "tracing.protocol=thrift"},
			want: []string{"/tracing/protocol"}},
		"a tracing flag in extraArgs": {set: []string{"--set-json", `operator.extraArgs=["--tracing-endpoint=x:1"]`},
			want: []string{`operator.extraArgs has "--tracing-endpoint=x:1"`}},
		"a tracing flag in egress.extraArgs": {set: []string{"--set-json", `egress.extraArgs=["--tracing-sample-ratio=1"]`},
			want: []string{`egress.extraArgs has "--tracing-sample-ratio=1"`}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			out, err := helmTemplate(t, tc.set...)
			if err == nil {
				t.Fatalf("helm template %v rendered (%d bytes), want an error", tc.set, len(out))
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the error does not say %q:\n%v", w, err)
				}
			}
		})
	}
}

// renderOne renders the chart with the given values and returns the one object of a kind and
// name, decoded strictly into T (so that a field the API does not know fails).
func renderOne[T any](t *testing.T, kind, name string, set ...string) *T {
	t.Helper()
	out, err := helmTemplate(t, set...)
	if err != nil {
		t.Fatal(err)
	}
	for key, obj := range decodeObjects(t, out) {
		if obj["kind"] != kind || field(obj, "metadata", "name") != name {
			continue
		}
		b, err := json.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		v := new(T)
		if err := yaml.UnmarshalStrict(b, v); err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		return v
	}
	t.Fatalf("no %s %s rendered", kind, name)
	return nil
}

// TestChartValuesReachTheOperator: the operator's values become its flags, and nothing else.
func TestChartValuesReachTheOperator(t *testing.T) {
	tests := map[string]struct {
		set          []string
		wantArgs     []string
		wantReplicas int32
		wantVolume   string // the Secret mounted for --tls-mode=files; "" for none
	}{
		"defaults": {
			wantArgs:     []string{"operator", "--leader-elect=true", "--api-bind-address=:8443", "--tls-mode=self-signed", "--token-audiences=airlock", "--metrics-bind-address=:8080", "--health-probe-bind-address=:8081", "--operator-pod-labels=app.kubernetes.io/name=airlock,app.kubernetes.io/component=operator"},
			wantReplicas: 2,
		},
		"no operator's stop": {
			set:          []string{"--set", "operator.stopSandboxes=false"},
			wantArgs:     []string{"operator", "--leader-elect=true", "--api-bind-address=:8443", "--tls-mode=self-signed", "--token-audiences=airlock", "--metrics-bind-address=:8080", "--health-probe-bind-address=:8081"},
			wantReplicas: 2,
		},
		"one replica, no leader election, client limits": {
			set: []string{"--set", "operator.replicas=1,operator.leaderElection.enabled=false,podDisruptionBudget.enabled=false,operator.kubeAPIQPS=50,operator.kubeAPIBurst=100,operator.workers=8,operator.logVerbosity=4",
				"--set-json", `operator.tokenAudiences=["airlock","airlock.example.com"]`, "--set-json", `operator.extraArgs=["--profiling"]`},
			wantArgs: []string{"operator", "--leader-elect=false", "--api-bind-address=:8443", "--tls-mode=self-signed", "--token-audiences=airlock,airlock.example.com", "--metrics-bind-address=:8080", "--health-probe-bind-address=:8081",
				"--kube-api-qps=50", "--kube-api-burst=100", "--workers=8", "--operator-pod-labels=app.kubernetes.io/name=airlock,app.kubernetes.io/component=operator", "-v=4", "--profiling"},
			wantReplicas: 1,
		},
		"tracing on": {
			set: []string{"--set", "tracing.endpoint=otel-collector.observability:4317,tracing.sampleRatio=0"},
			wantArgs: []string{"operator", "--leader-elect=true", "--api-bind-address=:8443", "--tls-mode=self-signed", "--token-audiences=airlock", "--metrics-bind-address=:8080", "--health-probe-bind-address=:8081", "--operator-pod-labels=app.kubernetes.io/name=airlock,app.kubernetes.io/component=operator",
				"--tracing-endpoint=otel-collector.observability:4317", "--tracing-protocol=grpc", "--tracing-sample-ratio=0"},
			wantReplicas: 2,
		},
		"leader election durations, plain HTTP": {
			set: []string{"--set", "operator.leaderElection.leaseDuration=30s,operator.leaderElection.renewDeadline=20s,operator.leaderElection.retryPeriod=4s,operator.tls.mode=none"},
			wantArgs: []string{"operator", "--leader-elect=true", "--leader-elect-lease-duration=30s", "--leader-elect-renew-deadline=20s", "--leader-elect-retry-period=4s",
				"--api-bind-address=:8443", "--tls-mode=none", "--token-audiences=airlock", "--metrics-bind-address=:8080", "--health-probe-bind-address=:8081", "--operator-pod-labels=app.kubernetes.io/name=airlock,app.kubernetes.io/component=operator"},
			wantReplicas: 2,
		},
		"a certificate of the user's, without a CA": {
			set: []string{"--set", "operator.tls.mode=files,operator.tls.existingSecret=my-cert,operator.tls.existingSecretHasCA=false"},
			wantArgs: []string{"operator", "--leader-elect=true", "--api-bind-address=:8443", "--tls-mode=files", "--tls-cert-file=/var/run/airlock/tls/tls.crt", "--tls-key-file=/var/run/airlock/tls/tls.key",
				"--token-audiences=airlock", "--metrics-bind-address=:8080", "--health-probe-bind-address=:8081", "--operator-pod-labels=app.kubernetes.io/name=airlock,app.kubernetes.io/component=operator"},
			wantReplicas: 2,
			wantVolume:   "my-cert",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			d := renderOne[appsv1.Deployment](t, "Deployment", "airlock-operator", tc.set...)
			if got := *d.Spec.Replicas; got != tc.wantReplicas {
				t.Errorf("replicas = %d, want %d", got, tc.wantReplicas)
			}
			pod := d.Spec.Template.Spec
			if diff := cmp.Diff(tc.wantArgs, pod.Containers[0].Args); diff != "" {
				t.Errorf("args (-want +got):\n%s", diff)
			}
			var volume string
			for _, v := range pod.Volumes {
				if v.Secret != nil {
					volume = v.Secret.SecretName
				}
			}
			if volume != tc.wantVolume {
				t.Errorf("serving Secret mounted = %q, want %q", volume, tc.wantVolume)
			}
		})
	}
}

// TestChartToolRegistry: sandbox.toolRegistry installs a registry whose codegen sandbox names
// the chart's class and carries sandbox.allowedTools; left off, no registry is installed.
func TestChartToolRegistry(t *testing.T) {
	reg := renderOne[airlockv1alpha1.ToolRegistry](t, "ToolRegistry", "codegen",
		"--set", "sandbox.toolRegistry.enabled=true,sandbox.toolRegistry.namespace=agents,sandbox.toolRegistry.targetPath=results/codegen,sandbox.toolRegistry.warm=3,sandbox.codegenClass.name=codegen-go",
		"--set-json", `sandbox.allowedTools=["Read","Grep","Glob"]`)
	if reg.Namespace != "agents" {
		t.Errorf("namespace = %q, want agents", reg.Namespace)
	}
	want := []airlockv1alpha1.RegistrySandbox{{Name: "codegen", Class: "codegen-go", MaxInstances: 10, Workspace: "claim", Allocation: "lazy",
		TargetPath: "results/codegen", AllowedTools: []airlockv1alpha1.ToolName{"Read", "Grep", "Glob"}, Warm: 3}}
	if diff := cmp.Diff(want, reg.Spec.Sandboxes); diff != "" {
		t.Errorf("sandboxes (-want +got):\n%s", diff)
	}
	policy := renderOne[airlockv1alpha1.ToolRegistry](t, "ToolRegistry", "codegen",
		"--set", "sandbox.toolRegistry.enabled=true,sandbox.toolRegistry.namespace=agents",
		"--set-json", `sandbox.toolRegistry.warmPolicy={"min":1,"max":8,"headroomPercent":25}`)
	wantPolicy := &airlockv1alpha1.WarmPolicy{Min: 1, Max: 8, HeadroomPercent: ptr.To[int32](25)}
	if got := policy.Spec.Sandboxes[0]; got.Warm != 0 || !cmp.Equal(got.WarmPolicy, wantPolicy) {
		t.Errorf("with a warmPolicy: warm %d, warmPolicy %+v; want 0 and %+v", got.Warm, got.WarmPolicy, wantPolicy)
	}
	resume := renderOne[airlockv1alpha1.ToolRegistry](t, "ToolRegistry", "codegen",
		"--set", "sandbox.toolRegistry.enabled=true,sandbox.toolRegistry.namespace=agents,sandbox.toolRegistry.warm=1,sandbox.toolRegistry.resumeWindow=0s")
	if got := resume.Spec.Sandboxes[0].ResumeWindow; got == nil || got.Duration != 0 {
		t.Errorf("with resumeWindow 0s: %v, want 0 (resume members off)", got)
	}
	if got := reg.Spec.Sandboxes[0].ResumeWindow; got != nil {
		t.Errorf("resumeWindow %v by default, want none rendered (the CRD's default)", got)
	}
	class := renderOne[airlockv1alpha1.SandboxClass](t, "SandboxClass", "codegen-go", "--set", "sandbox.codegenClass.name=codegen-go,sandbox.codegenClass.image.tag=v0.1.0-go,sandbox.codegenClass.runtimeClassName=gvisor")
	if class.Spec.Image != "ghcr.io/airlock-dev/airlock-sandbox:v0.1.0-go" || class.Spec.RuntimeClassName == nil || *class.Spec.RuntimeClassName != "gvisor" {
		t.Errorf("class image %q, runtimeClassName %v; want the -go image and gvisor", class.Spec.Image, class.Spec.RuntimeClassName)
	}

	out, err := helmTemplate(t)
	if err != nil {
		t.Fatal(err)
	}
	for key := range decodeObjects(t, out) {
		if strings.Contains(key, "/ToolRegistry/") {
			t.Errorf("the defaults install %s", key)
		}
	}
}

// TestSchemaToolsAreSandboxdTools: the schema's allowedTools enum is sandboxd's tool list.
func TestSchemaToolsAreSandboxdTools(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(chartDir, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Properties struct {
			Sandbox struct {
				Properties struct {
					AllowedTools struct {
						Items struct {
							Enum []string `json:"enum"`
						} `json:"items"`
					} `json:"allowedTools"`
				} `json:"properties"`
			} `json:"sandbox"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(b, &schema); err != nil {
		t.Fatal(err)
	}
	got := schema.Properties.Sandbox.Properties.AllowedTools.Items.Enum
	want := toolnames.All()
	sort.Strings(got)
	sort.Strings(want)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("values.schema.json sandbox.allowedTools enum (-toolnames.All +schema):\n%s", diff)
	}
}

// TestChartLints: `helm lint --strict` passes with the default values and with every optional
// part on.
func TestChartLints(t *testing.T) {
	for name, set := range map[string][]string{
		"defaults":      nil,
		"everything on": {"--set", "certManager.enabled=true,sandbox.toolRegistry.enabled=true,sandbox.toolRegistry.namespace=agents,monitoring.serviceMonitor.enabled=true,monitoring.prometheusRule.enabled=true,monitoring.dashboard.enabled=true"},
	} {
		t.Run(name, func(t *testing.T) {
			if out, err := run(t, "helm", append([]string{"lint", "--strict", chartDir}, set...)...); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
		})
	}
}

// reporter is what the comparison reports failures to: a *testing.T, or a recorder in the test
// of the comparison itself.
type reporter interface {
	Helper()
	Errorf(format string, args ...any)
}

// recorder records the failures it is told of instead of failing a test.
type recorder struct {
	failed bool
	msgs   []string
}

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.failed = true
	r.msgs = append(r.msgs, fmt.Sprintf(format, args...))
}

// TestChartMonitoring: the monitoring values install a ServiceMonitor of the metrics Service,
// a PrometheusRule whose spec is files/prometheus-rules.yaml as it is (the file e2e/monitoring
// tests), and the dashboard of files/grafana-dashboard.json in a ConfigMap for Grafana's sidecar.
func TestChartMonitoring(t *testing.T) {
	out, err := helmTemplate(t, "--set", "monitoring.serviceMonitor.enabled=true,monitoring.prometheusRule.enabled=true,monitoring.dashboard.enabled=true,monitoring.dashboard.namespace=grafana",
		"--set-json", `monitoring.serviceMonitor.labels={"release":"prom"}`)
	if err != nil {
		t.Fatal(err)
	}
	objs := decodeObjects(t, out)

	sm := objs["monitoring.coreos.com/v1/ServiceMonitor/airlock-system/airlock-operator"]
	if sm == nil {
		t.Fatalf("no ServiceMonitor: %v", slices.Sorted(maps.Keys(objs)))
	}
	svc := objs["v1/Service/airlock-system/airlock-operator-metrics"]
	selector, _ := field(sm, "spec", "selector", "matchLabels").(map[string]any)
	svcLabels, _ := field(svc, "metadata", "labels").(map[string]any)
	for k, v := range selector {
		if svcLabels[k] != v {
			t.Errorf("the ServiceMonitor selects %s=%v, the metrics Service has %v", k, v, svcLabels[k])
		}
	}
	if len(selector) == 0 || field(sm, "metadata", "labels", "release") != "prom" {
		t.Errorf("ServiceMonitor selector %v, labels %v", selector, field(sm, "metadata", "labels"))
	}
	endpoints, _ := field(sm, "spec", "endpoints").([]any)
	if len(endpoints) != 1 || endpoints[0].(map[string]any)["port"] != "metrics" {
		t.Errorf("ServiceMonitor endpoints %v, want the port metrics", endpoints)
	}

	rule := objs["monitoring.coreos.com/v1/PrometheusRule/airlock-system/airlock"]
	b, err := os.ReadFile(filepath.Join(chartDir, "files", "prometheus-rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var want any
	if err := yaml.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, rule["spec"]); diff != "" {
		t.Errorf("PrometheusRule spec is not files/prometheus-rules.yaml (-file +rendered):\n%s", diff)
	}

	cm := objs["v1/ConfigMap/grafana/airlock-dashboard"]
	if cm == nil {
		t.Fatalf("no dashboard ConfigMap in grafana: %v", slices.Sorted(maps.Keys(objs)))
	}
	if field(cm, "metadata", "labels", "grafana_dashboard") != "1" {
		t.Errorf("dashboard labels %v, want grafana_dashboard: \"1\"", field(cm, "metadata", "labels"))
	}
	dashboard, err := os.ReadFile(filepath.Join(chartDir, "files", "grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	if got := field(cm, "data", "airlock.json"); got != string(dashboard) {
		t.Errorf("the ConfigMap's airlock.json is not files/grafana-dashboard.json")
	}
}
