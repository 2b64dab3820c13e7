package tools

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/sandboxdtest"
	"github.com/airlock-dev/airlock/pkg/toolnames"
)

func TestOneOf(t *testing.T) {
	tests := map[string]struct {
		value, alias string
		want         string
		wantErr      string
	}{
		"neither":        {},
		"the field":      {value: "a", want: "a"},
		"the alias":      {alias: "a", want: "a"},
		"both alike":     {value: "a", alias: "a", want: "a"},
		"both differing": {value: "a", alias: "b", wantErr: `id "a" and name "b" differ`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := oneOf("id", tc.value, "name", tc.alias)
			if tc.wantErr != "" {
				sandboxdtest.WantErrContaining(t, err, tc.wantErr)
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("oneOf = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
	if _, err := oneOf("column", 3, "col", 4); err == nil || !strings.Contains(err.Error(), "column 3 and col 4 differ") {
		t.Errorf("oneOf(3, 4) = %v", err)
	}
}

// TestAliasFieldsInSchemas: the input schemas tools/list gives name the
// fields of CodeGen-Sandbox and Claude Code that sandboxd takes beside its
// own, so that a client that validates against the schema sends them.
func TestAliasFieldsInSchemas(t *testing.T) {
	cs, _ := newInMemory(t)
	res, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		toolnames.SnapshotCreate:  {"name", "description", "label"},
		toolnames.SnapshotRestore: {"name", "id"},
		toolnames.SnapshotDiff:    {"name", "id", "to_id"},
		toolnames.FindDefinition:  {"col", "column"},
		toolnames.FindReferences:  {"col", "column"},
		toolnames.RenameSymbol:    {"col", "column"},
		toolnames.TestsCovering:   {"file", "file_path"},
		toolnames.BashOutput:      {"bash_id", "shell_id"},
		toolnames.Grep:            {"-i", "case_insensitive"},
	}
	seen := 0
	for _, tool := range res.Tools {
		fields, ok := want[tool.Name]
		if !ok {
			continue
		}
		seen++
		m, _ := tool.InputSchema.(map[string]any)
		props, _ := m["properties"].(map[string]any)
		required, _ := m["required"].([]any)
		for _, f := range fields {
			if _, ok := props[f]; !ok {
				t.Errorf("%s's input schema lacks %s", tool.Name, f)
			}
			if slices.Contains(required, any(f)) {
				t.Errorf("%s's input schema requires %s: either name must do", tool.Name, f)
			}
		}
	}
	if seen != len(want) {
		t.Errorf("found %d of the %d tools", seen, len(want))
	}
}

// TestAliasFieldsOverMCP calls the tools with the other projects' field
// names and checks each reaches what airlock's own name does.
func TestAliasFieldsOverMCP(t *testing.T) {
	tb, ws := newTestToolbox(t)
	t.Cleanup(func() { tb.Stop(context.Background()) })
	cs := connectTools(t, tb)
	sandboxdtest.WriteFile(t, filepath.Join(ws, "a.txt"), "Hello\n")

	// Grep: Claude Code's -i is case_insensitive.
	for _, args := range []map[string]any{{"-i": true}, {"case_insensitive": true}} {
		args["pattern"], args["output_mode"] = "hello", "content"
		if got := sandboxdtest.CallOK(t, cs, toolnames.Grep, args); !strings.Contains(got, "a.txt:1:Hello") {
			t.Errorf("Grep %v = %q, want the match", args, got)
		}
	}
	if got := sandboxdtest.CallOK(t, cs, toolnames.Grep, map[string]any{"pattern": "hello", "output_mode": "content"}); strings.Contains(got, "Hello") {
		t.Errorf("Grep without -i matched across case: %q", got)
	}

	// BashOutput: Claude Code's bash_id is shell_id.
	_, out, err := tb.bash(t.Context(), BashInput{Command: "echo started", RunInBackground: true})
	if err != nil {
		t.Fatal(err)
	}
	sandboxdtest.CallOK(t, cs, toolnames.BashOutput, map[string]any{"bash_id": out.ShellID})
	for _, tc := range []struct {
		args    map[string]any
		wantErr string
	}{
		{map[string]any{"bash_id": out.ShellID, "shell_id": "shell-other"}, "differ"},
		{map[string]any{}, "shell_id is required"},
		{map[string]any{"bash_id": "shell-nope"}, "no background shell"},
	} {
		res := sandboxdtest.CallTool(t, cs, toolnames.BashOutput, tc.args)
		if !res.IsError || !strings.Contains(sandboxdtest.ContentText(res), tc.wantErr) {
			t.Errorf("BashOutput %v = %v %q, want a tool error with %q", tc.args, res.IsError, sandboxdtest.ContentText(res), tc.wantErr)
		}
	}

	// tests_covering: CodeGen-Sandbox's file is file_path (resolved and
	// confined the same way: a non-Go file and a path out of the
	// workspace are refused by name).
	for _, tc := range []struct {
		args    map[string]any
		wantErr string
	}{
		{map[string]any{"file": "a.txt"}, "a.txt is not a Go file"},
		{map[string]any{"file": "../x.go"}, "leaves the workspace"},
		{map[string]any{"file": "a.go", "file_path": "b.go"}, "differ"},
		{map[string]any{}, "file_path is required"},
	} {
		res := sandboxdtest.CallTool(t, cs, toolnames.TestsCovering, tc.args)
		if !res.IsError || !strings.Contains(sandboxdtest.ContentText(res), tc.wantErr) {
			t.Errorf("tests_covering %v = %v %q, want a tool error with %q", tc.args, res.IsError, sandboxdtest.ContentText(res), tc.wantErr)
		}
	}
}
