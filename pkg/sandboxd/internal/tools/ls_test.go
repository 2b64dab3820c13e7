package tools

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/sandboxdtest"
)

func TestLS(t *testing.T) {
	tb, ws := newTestToolbox(t)
	sandboxdtest.WriteFile(t, filepath.Join(ws, "README.md"), "hello\n")
	sandboxdtest.WriteFile(t, filepath.Join(ws, "src", "main.go"), "package main\n")
	sandboxdtest.WriteFile(t, filepath.Join(ws, "src", "util", "u.go"), "package util\n")
	sandboxdtest.WriteFile(t, filepath.Join(ws, "node_modules", "dep", "index.js"), "x\n")
	sandboxdtest.WriteFile(t, filepath.Join(ws, "build", "out.log"), "log\n")
	sandboxdtest.WriteFile(t, filepath.Join(ws, ".git", "HEAD"), "ref: refs/heads/main\n")
	sandboxdtest.MustSymlink(t, "src", filepath.Join(ws, "src-link"))

	tests := map[string]struct {
		in       LSInput
		want     []LSEntry
		wantText string
	}{
		"the workspace, tree order, .git and links not descended": {
			in: LSInput{},
			want: []LSEntry{
				{Path: ".git", Type: lsDir},
				{Path: "README.md", Type: lsFile, Size: 6},
				{Path: "build", Type: lsDir},
				{Path: "build/out.log", Type: lsFile, Size: 4},
				{Path: "node_modules", Type: lsDir},
				{Path: "node_modules/dep", Type: lsDir},
				{Path: "node_modules/dep/index.js", Type: lsFile, Size: 2},
				{Path: "src", Type: lsDir},
				{Path: "src/main.go", Type: lsFile, Size: 13},
				{Path: "src/util", Type: lsDir},
				{Path: "src/util/u.go", Type: lsFile, Size: 13},
				{Path: "src-link", Type: lsSymlink, Target: "src"},
			},
			wantText: "(workspace)/\n  - .git/\n  - README.md\n  - build/\n    - out.log\n",
		},
		"ignore by name and by path": {
			in: LSInput{Ignore: []string{"node_modules", "build/**", ".*", "*-link"}},
			want: []LSEntry{
				{Path: "README.md", Type: lsFile, Size: 6},
				{Path: "src", Type: lsDir},
				{Path: "src/main.go", Type: lsFile, Size: 13},
				{Path: "src/util", Type: lsDir},
				{Path: "src/util/u.go", Type: lsFile, Size: 13},
			},
		},
		"a subdirectory, by absolute path": {
			in:       LSInput{Path: filepath.Join(ws, "src"), Ignore: []string{"util/*.go"}},
			want:     []LSEntry{{Path: "src/main.go", Type: lsFile, Size: 13}, {Path: "src/util", Type: lsDir}},
			wantText: "src/\n  - main.go\n  - util/\n",
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			res, out, err := tb.ls(t.Context(), tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, out.Entries); diff != "" {
				t.Errorf("entries (-want +got):\n%s", diff)
			}
			if out.Truncated {
				t.Error("truncated")
			}
			if text := resultText(t, res); !strings.HasPrefix(text, tt.wantText) {
				t.Errorf("text %q does not start with %q", text, tt.wantText)
			}
		})
	}
}

func TestLSErrorsAndBound(t *testing.T) {
	tb, ws := newTestToolbox(t)
	sandboxdtest.WriteFile(t, filepath.Join(ws, "f.txt"), "x")
	for p, want := range map[string]string{
		"f.txt":   "not a directory",
		"missing": "no such file",
	} {
		_, _, err := tb.ls(t.Context(), LSInput{Path: p})
		sandboxdtest.WantErrContaining(t, err, want)
	}
	_, _, err := tb.ls(t.Context(), LSInput{Ignore: []string{"{a,b"}})
	sandboxdtest.WantErrContaining(t, err, "ignore")

	// More entries than the bound: the nearest level comes first, whole.
	for i := range 30 {
		sandboxdtest.WriteFile(t, filepath.Join(ws, fmt.Sprintf("d%02d", i), "deep", "f.txt"), "x")
	}
	for i := range lsMaxEntries {
		sandboxdtest.WriteFile(t, filepath.Join(ws, "d00", fmt.Sprintf("f%04d", i)), "x")
	}
	res, out, err := tb.ls(t.Context(), LSInput{})
	if err != nil {
		t.Fatal(err)
	}
	if !out.Truncated || len(out.Entries) != lsMaxEntries || !strings.Contains(resultText(t, res), "listing cut at 1000 entries") {
		t.Fatalf("truncated %v with %d entries", out.Truncated, len(out.Entries))
	}
	top := 0
	for _, e := range out.Entries {
		if !strings.Contains(e.Path, "/") {
			top++
		}
	}
	if top != 31 {
		t.Errorf("%d top-level entries listed, want all 31", top)
	}
}
