package tools

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/sandboxdtest"
)

func TestMatchGlob(t *testing.T) {
	tests := []struct {
		pattern, name string
		want          bool
	}{
		{pattern: "*.go", name: "main.go", want: true},
		{pattern: "*.go", name: "a/main.go", want: false},
		{pattern: "**/*.go", name: "main.go", want: true},
		{pattern: "**/*.go", name: "a/b/c/main.go", want: true},
		{pattern: "**/*.go", name: "a/b/c/main.js", want: false},
		{pattern: "src/**", name: "src/a/b", want: true},
		{pattern: "src/**", name: "lib/a", want: false},
		{pattern: "src/**/test/*.py", name: "src/test/x.py", want: true},
		{pattern: "src/**/test/*.py", name: "src/a/b/test/x.py", want: true},
		{pattern: "src/**/test/*.py", name: "src/a/b/test/y/x.py", want: false},
		{pattern: "**/**/x", name: "a/x", want: true},
		{pattern: "**/*.{ts,tsx}", name: "ui/app.tsx", want: true},
		{pattern: "**/*.{ts,tsx}", name: "ui/app.ts", want: true},
		{pattern: "**/*.{ts,tsx}", name: "ui/app.js", want: false},
		{pattern: "{a,b/{c,d}}/*.txt", name: "b/d/x.txt", want: true},
		{pattern: "{a,b/{c,d}}/*.txt", name: "b/e/x.txt", want: false},
		{pattern: "./*.md", name: "README.md", want: true},
		{pattern: "[ab].txt", name: "b.txt", want: true},
		{pattern: "?.txt", name: "ab.txt", want: false},
	}
	for _, tt := range tests {
		m, err := newGlobMatcher(tt.pattern)
		if err != nil {
			t.Fatalf("newGlobMatcher(%q): %v", tt.pattern, err)
		}
		if got := m.match(tt.name); got != tt.want {
			t.Errorf("match(%q, %q) = %v, want %v", tt.pattern, tt.name, got, tt.want)
		}
	}
}

func TestGlobPatternErrors(t *testing.T) {
	for pattern, want := range map[string]string{
		"":        "empty",
		"[.go":    "malformed",
		"{a,b":    "unclosed",
		"../*.go": "..",
		"{a,b}{c,d}{e,f}{g,h}{i,j}{k,l}{m,n}{o,p}{q,r}": "expands to more than",
	} {
		_, err := newGlobMatcher(pattern)
		sandboxdtest.WantErrContaining(t, err, want)
	}
}

// TestMatchSegmentsManyStars checks that a pattern of many ** against a deep
// path is answered (the matcher is polynomial, not exponential).
func TestMatchSegmentsManyStars(t *testing.T) {
	pat := strings.Split(strings.Repeat("**/a/", 30)+"b", "/")
	parts := strings.Split(strings.Repeat("a/", 200)+"c", "/")
	if matchSegments(pat, parts) {
		t.Fatal("matched a path that ends in c against a pattern that ends in b")
	}
}

func TestGlob(t *testing.T) {
	tb, ws := newTestToolbox(t)
	files := []string{"main.go", "pkg/a/a.go", "pkg/a/a_test.go", "pkg/b/b.go", "README.md", ".git/config.go", "node/x.go"}
	base := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for i, f := range files {
		sandboxdtest.WriteFile(t, filepath.Join(ws, f), "x")
		mt := base.Add(time.Duration(i) * time.Hour) // later files are newer
		if err := os.Chtimes(filepath.Join(ws, f), mt, mt); err != nil {
			t.Fatal(err)
		}
	}
	outside := t.TempDir()
	sandboxdtest.WriteFile(t, filepath.Join(outside, "secret.go"), "x")
	sandboxdtest.MustSymlink(t, outside, filepath.Join(ws, "linked-out"))
	sandboxdtest.MustSymlink(t, "pkg", filepath.Join(ws, "linked-in"))

	tests := []struct {
		name    string
		in      GlobInput
		want    GlobOutput
		wantErr string
	}{
		{
			name: "all go files newest first, no .git, no symlinked dirs",
			in:   GlobInput{Pattern: "**/*.go"},
			want: GlobOutput{Files: []string{"node/x.go", "pkg/b/b.go", "pkg/a/a_test.go", "pkg/a/a.go", "main.go"}},
		},
		{
			name: "below a path",
			in:   GlobInput{Pattern: "*.go", Path: "pkg/a"},
			want: GlobOutput{Files: []string{"pkg/a/a_test.go", "pkg/a/a.go"}},
		},
		{
			name: "absolute path and pattern",
			in:   GlobInput{Pattern: filepath.Join(ws, "pkg/**/*_test.go"), Path: ws},
			want: GlobOutput{Files: []string{"pkg/a/a_test.go"}},
		},
		{
			name: "limit",
			in:   GlobInput{Pattern: "**/*.go", Limit: 2},
			want: GlobOutput{Files: []string{"node/x.go", "pkg/b/b.go"}, Truncated: true},
		},
		{
			name: ".git when named",
			in:   GlobInput{Pattern: ".git/*"},
			want: GlobOutput{Files: []string{".git/config.go"}},
		},
		{
			name: "no match",
			in:   GlobInput{Pattern: "*.rs"},
			want: GlobOutput{Files: []string{}},
		},
		{name: "path outside", in: GlobInput{Pattern: "*", Path: "/etc"}, wantErr: "outside the workspace"},
		{name: "path through symlink out", in: GlobInput{Pattern: "*", Path: "linked-out"}, wantErr: "refused"},
		{name: "path is a file", in: GlobInput{Pattern: "*", Path: "main.go"}, wantErr: "not a directory"},
		{name: "absolute pattern outside", in: GlobInput{Pattern: "/etc/*"}, wantErr: "outside the workspace"},
		{name: "negative limit", in: GlobInput{Pattern: "*", Limit: -1}, wantErr: "limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, got, err := tb.glob(t.Context(), tt.in)
			if tt.wantErr != "" {
				sandboxdtest.WantErrContaining(t, err, tt.wantErr)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("output (-want +got):\n%s", diff)
			}
			text := resultText(t, res)
			for _, f := range tt.want.Files {
				if !strings.Contains(text, f) {
					t.Errorf("text %q lacks %s", text, f)
				}
			}
		})
	}
}

func TestGrep(t *testing.T) {
	tb, ws := newTestToolbox(t)
	sandboxdtest.WriteFile(t, filepath.Join(ws, "a.go"), "package a\n// TODO fix\nfunc A() {}\n// todo later\n")
	sandboxdtest.WriteFile(t, filepath.Join(ws, "sub/b.go"), "package b\n// TODO b\n")
	sandboxdtest.WriteFile(t, filepath.Join(ws, "sub/c.txt"), "TODO text\n")
	sandboxdtest.WriteFile(t, filepath.Join(ws, ".git/HEAD"), "TODO in git\n")
	sandboxdtest.WriteFile(t, filepath.Join(ws, "bin.dat"), "TODO\x00binary")
	outside := t.TempDir()
	sandboxdtest.WriteFile(t, filepath.Join(outside, "secret.go"), "TODO secret\n")
	sandboxdtest.MustSymlink(t, outside, filepath.Join(ws, "linked-out"))

	tests := []struct {
		name    string
		in      GrepInput
		want    GrepOutput
		wantErr string
	}{
		{
			name: "files with matches (default)",
			in:   GrepInput{Pattern: "TODO"},
			want: GrepOutput{OutputMode: "files_with_matches", Files: []string{"a.go", "sub/b.go", "sub/c.txt"}, NumFiles: 3, NumLines: 3},
		},
		{
			name: "case insensitive content",
			in:   GrepInput{Pattern: "todo", CaseInsensitive: true, OutputMode: "content", Path: "a.go"},
			want: GrepOutput{OutputMode: "content", Matches: []GrepMatch{{File: "a.go", Line: 2, Text: "// TODO fix"}, {File: "a.go", Line: 4, Text: "// todo later"}}, NumFiles: 1, NumLines: 2},
		},
		{
			name: "count with a glob on names",
			in:   GrepInput{Pattern: "(?i)todo", OutputMode: "count", Glob: "*.go"},
			want: GrepOutput{OutputMode: "count", Counts: []GrepCount{{File: "a.go", Count: 2}, {File: "sub/b.go", Count: 1}}, NumFiles: 2, NumLines: 3},
		},
		{
			name: "glob with a slash matches paths",
			in:   GrepInput{Pattern: "TODO", Glob: "sub/*.{txt,md}"},
			want: GrepOutput{OutputMode: "files_with_matches", Files: []string{"sub/c.txt"}, NumFiles: 1, NumLines: 1},
		},
		{
			name: "head limit",
			in:   GrepInput{Pattern: "TODO", HeadLimit: 1},
			want: GrepOutput{OutputMode: "files_with_matches", Files: []string{"a.go"}, NumFiles: 3, NumLines: 3, Truncated: true},
		},
		{
			name: "no match",
			in:   GrepInput{Pattern: "FIXME"},
			want: GrepOutput{OutputMode: "files_with_matches"},
		},
		{name: "bad regexp", in: GrepInput{Pattern: "(unclosed"}, wantErr: "RE2"},
		{name: "bad mode", in: GrepInput{Pattern: "x", OutputMode: "lines"}, wantErr: "output_mode"},
		{name: "empty pattern", in: GrepInput{Pattern: ""}, wantErr: "empty"},
		{name: "path outside", in: GrepInput{Pattern: "x", Path: "../"}, wantErr: "leaves the workspace"},
		{name: "path through symlink out", in: GrepInput{Pattern: "x", Path: "linked-out/secret.go"}, wantErr: "refused"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, got, err := tb.grep(t.Context(), tt.in)
			if tt.wantErr != "" {
				sandboxdtest.WantErrContaining(t, err, tt.wantErr)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("output (-want +got):\n%s", diff)
			}
			if text := resultText(t, res); got.NumLines == 0 && !strings.Contains(text, "No matches") {
				t.Errorf("text = %q", text)
			}
		})
	}
}

func TestGrepContentText(t *testing.T) {
	tb, ws := newTestToolbox(t)
	sandboxdtest.WriteFile(t, filepath.Join(ws, "f.txt"), "one\ntwo\nthree two\n")
	res, _, err := tb.grep(t.Context(), GrepInput{Pattern: "two", OutputMode: "content"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := resultText(t, res), "f.txt:2:two\nf.txt:3:three two\n"; got != want {
		t.Fatalf("text = %q, want %q", got, want)
	}
}
