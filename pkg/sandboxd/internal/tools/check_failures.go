package tools

import (
	"bufio"
	"path"
	"strings"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/testfailures"
)

// The files of parsed test failures, made relative to the workspace.

// goModulePath returns the module path of the go.mod at the top of the
// workspace, or "".
func (tb *Toolbox) goModulePath() string {
	f, err := tb.ws.Root().Open("go.mod")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`)
		}
	}
	return ""
}

// localizeGoFailures makes the files of go test failures relative to the
// workspace: a test's log line names its file within its package's
// directory, a panic's frame an absolute path.
func (tb *Toolbox) localizeGoFailures(failures []testfailures.Failure) {
	module := tb.goModulePath()
	for i := range failures {
		f := &failures[i]
		if f.File == "" {
			continue
		}
		if rel, err := tb.ws.Rel(f.File); err == nil && path.IsAbs(f.File) {
			f.File = rel
			continue
		}
		if strings.Contains(f.File, "/") || module == "" || f.Package == "" {
			continue
		}
		if f.Package == module {
			continue
		}
		if dir, ok := strings.CutPrefix(f.Package, module+"/"); ok {
			f.File = dir + "/" + f.File
		}
	}
}

// localizeNodeFailures makes the absolute paths node reports (files, and
// the names of test files that failed to load) relative to the workspace
// when they are in it.
func (tb *Toolbox) localizeNodeFailures(failures []testfailures.Failure) {
	rel := func(p string) string {
		if !path.IsAbs(p) {
			return p
		}
		if r, err := tb.ws.Rel(p); err == nil {
			return r
		}
		return p
	}
	for i := range failures {
		f := &failures[i]
		f.File, f.Test = rel(f.File), rel(f.Test)
		if f.File != "" {
			f.Package = path.Dir(f.File)
		}
	}
}
