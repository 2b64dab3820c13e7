package tools

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/sandboxdtest"
)

// renameEdit is a TextEdit of the fake's rename answer, as JSON.
func renameEdit(line, start, end int, text string) string {
	return `{"range": {"start": {"line": ` + itoa(line) + `, "character": ` + itoa(start) + `}, "end": {"line": ` + itoa(line) + `, "character": ` + itoa(end) + `}}, "newText": "` + text + `"}`
}

func itoa(n int) string { return strconv.Itoa(n) }

func TestRenameSymbol(t *testing.T) {
	const other = "package main\n\n// 𝔸 helper\nvar y = helper()\n"
	// main.go: helper at line 2 (0-based) characters 5-11 and line 4 characters 18-24;
	// b.go: line 3 characters 8-14.
	ok := `{"documentChanges": [
		{"textDocument": {"uri": "$ROOT/main.go", "version": 1}, "edits": [` + renameEdit(2, 5, 11, "assist") + `, ` + renameEdit(4, 18, 24, "assist") + `]},
		{"textDocument": {"uri": "$ROOT/b.go", "version": null}, "edits": [` + renameEdit(3, 8, 14, "assist") + `]}]}`
	tests := map[string]struct {
		answer    string
		wantErr   string
		wantMain  string
		wantOther string
		wantOut   RenameSymbolOutput
	}{
		"applied to every file": {
			answer:    ok,
			wantMain:  "package main\n\nfunc assist() int { return 1 }\n\nfunc main() { _ = assist() }\n",
			wantOther: "package main\n\n// 𝔸 helper\nvar y = assist()\n",
			wantOut:   RenameSymbolOutput{NewName: "assist", Files: []RenamedFile{{FilePath: "b.go", Edits: 1}, {FilePath: "main.go", Edits: 2}}, Edits: 3},
		},
		"changes as a map, in UTF-16 columns": {
			answer:    `{"changes": {"$ROOT/b.go": [` + renameEdit(2, 3, 5, "B") + `]}}`,
			wantMain:  navMain,
			wantOther: "package main\n\n// B helper\nvar y = helper()\n",
			wantOut:   RenameSymbolOutput{NewName: "assist", Files: []RenamedFile{{FilePath: "b.go", Edits: 1}}, Edits: 1},
		},
		"an edit outside the workspace writes nothing": {
			answer:  `{"changes": {"$ROOT/main.go": [` + renameEdit(2, 5, 11, "assist") + `], "file:///tmp/elsewhere.go": [` + renameEdit(0, 0, 1, "x") + `]}}`,
			wantErr: "the rename would change 1 file(s) outside the workspace (the standard library or a dependency?): refused; nothing was written",
		},
		"an edit through .. writes nothing": {
			answer:  `{"changes": {"$ROOT/main.go": [` + renameEdit(2, 5, 11, "assist") + `], "$ROOT/../outside.go": [` + renameEdit(0, 0, 1, "x") + `]}}`,
			wantErr: "outside the workspace",
		},
		"an edit through a symbolic link out writes nothing": {
			answer:  `{"changes": {"$ROOT/main.go": [` + renameEdit(2, 5, 11, "assist") + `], "$ROOT/link.go": [` + renameEdit(0, 0, 1, "x") + `]}}`,
			wantErr: "link.go: refused: it is a symbolic link to the absolute path",
		},
		"an edit in a directory linked out writes nothing": {
			answer:  `{"changes": {"$ROOT/main.go": [` + renameEdit(2, 5, 11, "assist") + `], "$ROOT/out/target.go": [` + renameEdit(0, 0, 1, "x") + `]}}`,
			wantErr: "leads outside the workspace",
		},
		"one file named by two URIs: all edits apply to it as read": {
			answer:    `{"changes": {"$ROOT/./main.go": [` + renameEdit(4, 5, 9, "mainly") + `], "$ROOT/main.go": [` + renameEdit(4, 18, 24, "assistant") + `]}}`,
			wantMain:  "package main\n\nfunc helper() int { return 1 }\n\nfunc mainly() { _ = assistant() }\n",
			wantOther: other,
			wantOut:   RenameSymbolOutput{NewName: "assist", Files: []RenamedFile{{FilePath: "main.go", Edits: 2}}, Edits: 2},
		},
		"a file operation writes nothing": {
			answer:  `{"documentChanges": [{"textDocument": {"uri": "$ROOT/main.go", "version": 1}, "edits": [` + renameEdit(2, 5, 11, "assist") + `]}, {"kind": "rename", "oldUri": "$ROOT/b.go", "newUri": "$ROOT/c.go"}]}`,
			wantErr: "the rename would rename a file, which rename_symbol does not do",
		},
		"overlapping edits write nothing": {
			answer:  `{"changes": {"$ROOT/b.go": [` + renameEdit(3, 8, 14, "x") + `], "$ROOT/main.go": [` + renameEdit(2, 5, 11, "a") + `, ` + renameEdit(2, 6, 8, "b") + `]}}`,
			wantErr: "the language server's edits of main.go overlap; nothing was written",
		},
		"an edit past the end of a line writes nothing": {
			answer:  `{"changes": {"$ROOT/b.go": [` + renameEdit(3, 8, 14, "x") + `], "$ROOT/main.go": [` + renameEdit(0, 5, 40, "a") + `]}}`,
			wantErr: "the language server's edit of main.go is out of the file",
		},
		"no change proposed: nothing written": {
			answer:    `null`,
			wantMain:  navMain,
			wantOther: other,
			wantOut:   RenameSymbolOutput{NewName: "assist", Files: []RenamedFile{}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			tb, ws := navWorkspace(t, map[string]string{"main.go": navMain, "b.go": other})
			outside := t.TempDir()
			for _, f := range []string{"target.go", "outside.go"} {
				if err := os.WriteFile(filepath.Join(outside, f), []byte("package x\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.Symlink(filepath.Join(outside, "target.go"), filepath.Join(ws, "link.go")); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(outside, filepath.Join(ws, "out")); err != nil {
				t.Fatal(err)
			}
			useFakeLSP(t, tb, "ok", map[string]string{"textDocument/rename": tc.answer})
			_, out, err := tb.renameSymbol(t.Context(), RenameSymbolInput{NavPositionInput: at(3, 6), NewName: "assist"})
			if tc.wantErr != "" {
				sandboxdtest.WantErrContaining(t, err, tc.wantErr)
				tc.wantMain, tc.wantOther = navMain, other
			} else if err != nil {
				t.Fatal(err)
			} else if diff := cmp.Diff(tc.wantOut, out); diff != "" {
				t.Errorf("output (-want +got):\n%s", diff)
			}
			sandboxdtest.CheckFile(t, filepath.Join(ws, "main.go"), tc.wantMain)
			sandboxdtest.CheckFile(t, filepath.Join(ws, "b.go"), tc.wantOther)
			sandboxdtest.CheckFile(t, filepath.Join(outside, "target.go"), "package x\n")
			sandboxdtest.CheckFile(t, filepath.Join(outside, "outside.go"), "package x\n")
			if names, _ := filepath.Glob(filepath.Join(ws, ".*.tmp")); len(names) > 0 {
				t.Errorf("temporary files left: %v", names)
			}
		})
	}
}

// TestRenameSymbolReadMarks: a file that was Read stays read after a rename
// (the agent knows it and the rename it asked for); one that was not stays
// unread.
func TestRenameSymbolReadMarks(t *testing.T) {
	tb, _ := navWorkspace(t, map[string]string{"main.go": navMain, "b.go": "package main\n\nvar y = helper()\n"})
	useFakeLSP(t, tb, "ok", map[string]string{"textDocument/rename": `{"changes": {"$ROOT/main.go": [` + renameEdit(2, 5, 11, "assist") + `], "$ROOT/b.go": [` + renameEdit(2, 8, 14, "assist") + `]}}`})
	if _, _, err := tb.read(t.Context(), ReadInput{FilePath: "main.go"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := tb.renameSymbol(t.Context(), RenameSymbolInput{NavPositionInput: at(3, 6), NewName: "assist"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := tb.edit(t.Context(), EditInput{FilePath: "main.go", OldString: "return 1", NewString: "return 2"}); err != nil {
		t.Errorf("Edit of the file Read before the rename: %v", err)
	}
	_, _, err := tb.edit(t.Context(), EditInput{FilePath: "b.go", OldString: "assist()", NewString: "assist() + 1"})
	sandboxdtest.WantErrContaining(t, err, "has not been Read")
}

func TestRenameSymbolRefusesABadName(t *testing.T) {
	tb, _ := navWorkspace(t, map[string]string{"main.go": navMain})
	fake := useFakeLSP(t, tb, "ok", nil)
	_, _, err := tb.renameSymbol(t.Context(), RenameSymbolInput{NavPositionInput: at(3, 6), NewName: "a\nb"})
	sandboxdtest.WantErrContaining(t, err, "new_name must be one line")
	if m := fake.methods(); len(m) != 0 {
		t.Errorf("the server was asked %v", m)
	}
}
