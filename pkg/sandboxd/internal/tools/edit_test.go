package tools

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/sandboxdtest"
)

func TestMultiEdit(t *testing.T) {
	const orig = "alpha beta\ngamma beta\ndelta\n"
	tests := map[string]struct {
		edits    []EditOperation
		want     string // the file afterwards
		wantRepl int
		wantErr  string
	}{
		"edits apply in order, each to the result of the ones before": {
			edits: []EditOperation{
				{OldString: "alpha", NewString: "ALPHA"},
				{OldString: "ALPHA beta", NewString: "one"}, // matches only after the first edit
				{OldString: "beta", NewString: "B", ReplaceAll: true},
			},
			want:     "one\ngamma B\ndelta\n",
			wantRepl: 3,
		},
		"replace_all counts every occurrence": {
			edits:    []EditOperation{{OldString: "beta", NewString: "x", ReplaceAll: true}, {OldString: "delta", NewString: "d"}},
			want:     "alpha x\ngamma x\nd\n",
			wantRepl: 3,
		},
		"a later edit that does not match writes nothing": {
			edits:   []EditOperation{{OldString: "alpha", NewString: "A"}, {OldString: "nowhere", NewString: "x"}},
			want:    orig,
			wantErr: "edit 2 of 2: old_string was not found",
		},
		"an edit that the ones before made ambiguous writes nothing": {
			edits:   []EditOperation{{OldString: "delta", NewString: "gamma"}, {OldString: "gamma", NewString: "x"}},
			want:    orig,
			wantErr: "edit 2 of 2: old_string occurs 2 times",
		},
		"an ambiguous first edit writes nothing": {
			edits:   []EditOperation{{OldString: "beta", NewString: "x"}},
			want:    orig,
			wantErr: "edit 1 of 1: old_string occurs 2 times",
		},
		"an empty old_string is refused before anything": {
			edits:   []EditOperation{{OldString: "alpha", NewString: "A"}, {OldString: "", NewString: "x"}},
			want:    orig,
			wantErr: "edit 2 of 2: old_string is empty",
		},
		"no edits": {want: orig, wantErr: "edits is empty"},
		"growth past the size bound writes nothing": {
			edits: []EditOperation{
				{OldString: "a", NewString: strings.Repeat("a", 4096), ReplaceAll: true},
				{OldString: "a", NewString: strings.Repeat("a", 4096), ReplaceAll: true},
			},
			want:    orig,
			wantErr: "more than Edit handles",
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			tb, ws := newTestToolbox(t)
			file := filepath.Join(ws, "f.txt")
			sandboxdtest.WriteFile(t, file, orig)
			if _, _, err := tb.read(t.Context(), ReadInput{FilePath: "f.txt"}); err != nil {
				t.Fatal(err)
			}
			before, _ := os.Stat(file)
			_, out, err := tb.multiEdit(t.Context(), MultiEditInput{FilePath: "f.txt", Edits: tt.edits})
			if tt.wantErr != "" {
				sandboxdtest.WantErrContaining(t, err, tt.wantErr)
				if err != nil && !strings.Contains(err.Error(), "nothing was written") && len(tt.edits) > 0 {
					t.Errorf("error %q does not say that nothing was written", err)
				}
				after, _ := os.Stat(file)
				if !after.ModTime().Equal(before.ModTime()) {
					t.Errorf("the file was rewritten")
				}
			} else if err != nil {
				t.Fatal(err)
			} else if out.Replacements != tt.wantRepl || out.Edits != len(tt.edits) {
				t.Errorf("output %+v, want %d replacements in %d edits", out, tt.wantRepl, len(tt.edits))
			}
			sandboxdtest.CheckFile(t, file, tt.want)
		})
	}
}

func TestMultiEditNeedsARead(t *testing.T) {
	tb, ws := newTestToolbox(t)
	file := filepath.Join(ws, "f.txt")
	sandboxdtest.WriteFile(t, file, "a\n")
	edits := []EditOperation{{OldString: "a", NewString: "b"}}
	_, _, err := tb.multiEdit(t.Context(), MultiEditInput{FilePath: "f.txt", Edits: edits})
	sandboxdtest.WantErrContaining(t, err, "has not been Read")
	if _, _, err := tb.read(t.Context(), ReadInput{FilePath: "f.txt"}); err != nil {
		t.Fatal(err)
	}
	sandboxdtest.WriteFile(t, file, "a changed behind the agent's back\n")
	_, _, err = tb.multiEdit(t.Context(), MultiEditInput{FilePath: "f.txt", Edits: edits})
	sandboxdtest.WantErrContaining(t, err, "has changed since it was last Read")
	sandboxdtest.CheckFile(t, file, "a changed behind the agent's back\n")
	_, _, err = tb.multiEdit(t.Context(), MultiEditInput{FilePath: "missing.txt", Edits: edits})
	sandboxdtest.WantErrContaining(t, err, "no such file")
}

// TestLintFeedback checks the gofmt check after Write, Edit and MultiEdit:
// reported in the result, never blocking the change.
func TestLintFeedback(t *testing.T) {
	tb, ws := newTestToolbox(t)
	ctx := t.Context()
	const clean = "package p\n\nfunc F() int {\n\treturn 1\n}\n"

	_, w, err := tb.write(ctx, WriteInput{FilePath: "p.go", Content: clean})
	if err != nil || w.Lint != "" {
		t.Fatalf("Write of a clean file: lint %q, err %v", w.Lint, err)
	}
	// Unformatted: reported with its first line, and written.
	res, e, err := tb.edit(ctx, EditInput{FilePath: "p.go", OldString: "\treturn 1", NewString: "  return 1"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(e.Lint, "not gofmt-clean (first difference at line 4)") || !strings.Contains(resultText(t, res), "Lint: p.go is not gofmt-clean") {
		t.Errorf("Edit lint %q, text %q", e.Lint, resultText(t, res))
	}
	sandboxdtest.CheckFile(t, filepath.Join(ws, "p.go"), strings.Replace(clean, "\treturn 1", "  return 1", 1))
	// Not Go any more: reported, and written.
	_, m, err := tb.multiEdit(ctx, MultiEditInput{FilePath: "p.go", Edits: []EditOperation{
		{OldString: "  return 1", NewString: "\treturn 1"},
		{OldString: "func F() int {", NewString: "func F( int {"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(m.Lint, "does not parse as Go") {
		t.Errorf("MultiEdit lint %q", m.Lint)
	}
	sandboxdtest.CheckFile(t, filepath.Join(ws, "p.go"), strings.Replace(clean, "func F() int {", "func F( int {", 1))
	// Clean again: no lint.
	_, e, err = tb.edit(ctx, EditInput{FilePath: "p.go", OldString: "func F( int {", NewString: "func F() int {"})
	if err != nil || e.Lint != "" {
		t.Errorf("Edit back to clean: lint %q, err %v", e.Lint, err)
	}
	// Only Go files are checked.
	_, w, err = tb.write(ctx, WriteInput{FilePath: "notes.txt", Content: "func F( {"})
	if err != nil || w.Lint != "" {
		t.Errorf("Write of a text file: lint %q, err %v", w.Lint, err)
	}
}
