package tools

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/airlock-dev/airlock/pkg/toolnames"
)

// TestToolSpecsAgree checks that the tool table, the canonical names and the
// read-only list agree, and that every tool has described, typed schemas.
func TestToolSpecsAgree(t *testing.T) {
	var names []string
	for _, spec := range toolSpecs {
		names = append(names, spec.name)
	}
	if diff := cmp.Diff(toolnames.All(), names); diff != "" {
		t.Errorf("toolSpecs order/names (-toolnames.All +toolSpecs):\n%s", diff)
	}
	cs, _ := newInMemory(t)
	res, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, tool := range res.Tools {
		listed = append(listed, tool.Name)
		if tool.Description == "" {
			t.Errorf("%s has no description", tool.Name)
		}
		if toolnames.ReadOnly(tool.Name) && (tool.Annotations == nil || !tool.Annotations.ReadOnlyHint) {
			t.Errorf("%s is read-only (pkg/toolnames) but not annotated readOnlyHint", tool.Name)
		}
		for kind, schema := range map[string]any{"input": tool.InputSchema, "output": tool.OutputSchema} {
			m, ok := schema.(map[string]any)
			if !ok || m["type"] != "object" {
				t.Errorf("%s %s schema = %v, want an object schema", tool.Name, kind, schema)
				continue
			}
			props, _ := m["properties"].(map[string]any)
			for field, p := range props {
				if d, _ := p.(map[string]any)["description"].(string); d == "" {
					t.Errorf("%s %s field %s has no description", tool.Name, kind, field)
				}
			}
		}
	}
	if diff := cmp.Diff(sorted(toolnames.All()), sorted(listed)); diff != "" {
		t.Errorf("tools/list (-toolnames.All +listed):\n%s", diff)
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}
