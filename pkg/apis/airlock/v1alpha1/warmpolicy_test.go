package v1alpha1

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/cel-go/cel"
	"sigs.k8s.io/yaml"
)

// celRule is one x-kubernetes-validations rule of a CRD schema node.
type celRule struct {
	Rule    string `json:"rule"`
	Message string `json:"message"`
}

// registrySchema returns the schema of a ToolRegistry's spec.sandboxes[] items as the CRD has it.
func registrySchema(t *testing.T) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "manifests", "crd", "toolregistries."+GroupName+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var crd map[string]any
	if err := yaml.Unmarshal(b, &crd); err != nil {
		t.Fatal(err)
	}
	node := crd["spec"].(map[string]any)["versions"].([]any)[0].(map[string]any)["schema"].(map[string]any)["openAPIV3Schema"].(map[string]any)
	for _, step := range []string{"spec", "sandboxes"} {
		node = node["properties"].(map[string]any)[step].(map[string]any)
	}
	return node["items"].(map[string]any)
}

// rulesOf returns the CEL rules of a schema node.
func rulesOf(t *testing.T, node map[string]any) []celRule {
	t.Helper()
	b, err := yaml.Marshal(node["x-kubernetes-validations"])
	if err != nil {
		t.Fatal(err)
	}
	var rules []celRule
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatal(err)
	}
	return rules
}

// refusals evaluates rules against self (an object as the API server has it after defaulting)
// and returns the messages of those that refuse it.
func refusals(t *testing.T, rules []celRule, self any) []string {
	t.Helper()
	env, err := cel.NewEnv(cel.Variable("self", cel.DynType))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range rules {
		ast, iss := env.Compile(r.Rule)
		if iss.Err() != nil {
			t.Fatalf("rule %q: %v", r.Rule, iss.Err())
		}
		prg, err := env.Program(ast)
		if err != nil {
			t.Fatal(err)
		}
		val, _, err := prg.Eval(map[string]any{"self": self})
		if err != nil {
			t.Fatalf("rule %q on %v: %v", r.Rule, self, err)
		}
		if val.Value() != true {
			out = append(out, r.Message)
		}
	}
	return out
}

// TestWarmPolicyValidation: the CRD's rules on a sandbox's warmPolicy, evaluated as the API
// server would on an entry after defaulting: min ≤ max (each ≤ 1000 by the schema),
// max ≤ maxInstances, exclusive with a static warm, and fresh workspaces only.
func TestWarmPolicyValidation(t *testing.T) {
	items := registrySchema(t)
	policySchema := items["properties"].(map[string]any)["warmPolicy"].(map[string]any)
	for _, field := range []string{"min", "max", "headroomPercent"} {
		if got := fmt.Sprint(policySchema["properties"].(map[string]any)[field].(map[string]any)["maximum"]); got != "1000" {
			t.Errorf("warmPolicy.%s maximum %s, want 1000", field, got)
		}
	}
	if got := fmt.Sprint(policySchema["properties"].(map[string]any)["headroomPercent"].(map[string]any)["default"]); got != fmt.Sprint(DefaultWarmHeadroomPercent) {
		t.Errorf("warmPolicy.headroomPercent default %s, constant %d", got, DefaultWarmHeadroomPercent)
	}
	entryRules, policyRules := rulesOf(t, items), rulesOf(t, policySchema)

	entry := func(mutate func(e map[string]any)) map[string]any {
		e := map[string]any{
			"name": "codegen", "class": "codegen", "maxInstances": int64(10), "workspace": "claim",
			"allocation": "lazy", "warm": int64(0),
			"warmPolicy": map[string]any{"min": int64(2), "max": int64(8), "headroomPercent": int64(50)},
		}
		if mutate != nil {
			mutate(e)
		}
		return e
	}
	policy := func(e map[string]any) map[string]any { return e["warmPolicy"].(map[string]any) }
	tests := []struct {
		name string
		e    map[string]any
		want string // a part of the one refusal's message; "" for none
	}{
		{name: "min and max within maxInstances", e: entry(nil)},
		{name: "min equal to max", e: entry(func(e map[string]any) { policy(e)["min"] = int64(8) })},
		{name: "max equal to maxInstances", e: entry(func(e map[string]any) { policy(e)["max"] = int64(10) })},
		{name: "static warm, no policy", e: entry(func(e map[string]any) { delete(e, "warmPolicy"); e["warm"] = int64(3) })},
		{name: "min above max", e: entry(func(e map[string]any) { policy(e)["min"] = int64(9) }), want: "min may not exceed max"},
		{name: "max above maxInstances", e: entry(func(e map[string]any) { policy(e)["max"] = int64(11) }), want: "may not exceed maxInstances"},
		{name: "warm and warmPolicy", e: entry(func(e map[string]any) { e["warm"] = int64(3) }), want: "exclusive"},
		{name: "a session's workspace", e: entry(func(e map[string]any) { e["workspace"] = "session" }), want: "fresh workspaces only"},
		{name: "a mount role", e: entry(func(e map[string]any) { e["mountRole"] = "repo" }), want: "fresh workspaces only"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := refusals(t, entryRules, tc.e)
			if p, ok := tc.e["warmPolicy"].(map[string]any); ok {
				got = append(got, refusals(t, policyRules, p)...)
			}
			switch {
			case tc.want == "" && len(got) > 0:
				t.Errorf("refused: %q", got)
			case tc.want != "" && (len(got) != 1 || !strings.Contains(got[0], tc.want)):
				t.Errorf("refusals %q, want one saying %q", got, tc.want)
			}
		})
	}
}

// TestResumeWindowValidation: the CRD's rule on a sandbox's resumeWindow (docs/nothing-lost.md,
// "Resume members"): 0 (none) to a day.
func TestResumeWindowValidation(t *testing.T) {
	node := registrySchema(t)["properties"].(map[string]any)["resumeWindow"].(map[string]any)
	rules := rulesOf(t, node)
	if len(rules) != 1 {
		t.Fatalf("resumeWindow has rules %v, want one", rules)
	}
	for value, ok := range map[string]bool{"0s": true, "10m": true, "24h": true, "-1s": false, "24h0m1s": false, "48h": false} {
		t.Run(value, func(t *testing.T) {
			if got := refusals(t, rules, value); (len(got) == 0) != ok {
				t.Errorf("refusals %q, want admitted %v", got, ok)
			}
		})
	}
}
