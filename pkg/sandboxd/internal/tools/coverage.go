package tools

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/procgroup"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/wsscan"
)

// tests_covering answers which tests of a Go package execute a file, a
// function or a line of it, by running them: the package's test binary is
// built once with coverage (go test -c -cover), then run once per test
// (-test.run '^TestX$' -test.coverprofile), and a test covers the target
// when its profile has a block with a count above zero that overlaps the
// target's lines. Per-test runs give what neither a static look at the
// test code (it misses calls through interfaces and helpers) nor one
// coverage profile of the whole run (it credits every test with what any
// test ran) can: which test really runs the code.

const (
	// coveringMaxTests bounds the tests run, one process each.
	coveringMaxTests = 200
	// coveringMaxProfileBytes bounds one coverage profile read.
	coveringMaxProfileBytes = 64 << 20
)

// TestsCoveringInput is the input of the tests_covering tool.
type TestsCoveringInput struct {
	FilePath string `json:"file_path,omitempty" jsonschema:"the Go source file (not a _test.go file): relative to the workspace, or absolute inside it; give file_path or file"`
	File     string `json:"file,omitempty" jsonschema:"the same as file_path"`
	Function string `json:"function,omitempty" jsonschema:"only tests that run this function or method of the file: Foo, (*T).Foo, (T).Foo or T.Foo; default the whole file"`
	Line     int    `json:"line,omitempty" jsonschema:"only tests that run this line of the file (1-based, as Read numbers lines); default the whole file or function"`
	Timeout  int    `json:"timeout,omitempty" jsonschema:"timeout in milliseconds, or in seconds when 600 or less (CodeGen-Sandbox's unit), for the build and every test run together; default 300000 (5 minutes), maximum 600000 (10 minutes)"`
}

// CoveringTest is one test of the package and whether it covers the
// target.
type CoveringTest struct {
	Name    string `json:"name" jsonschema:"the test function"`
	Covers  bool   `json:"covers" jsonschema:"true when the test executed the target"`
	Passed  bool   `json:"passed" jsonschema:"true when the test passed"`
	Profile bool   `json:"profile" jsonschema:"false when the test wrote no coverage profile (it crashed or timed out): covers is then unknown"`
}

// TestsCoveringOutput is the structured result of the tests_covering
// tool.
type TestsCoveringOutput struct {
	FilePath   string         `json:"file_path" jsonschema:"the file, relative to the workspace"`
	Target     string         `json:"target" jsonschema:"what the tests were checked against: the file, a function, a line, with its lines"`
	Package    string         `json:"package" jsonschema:"the package directory whose tests ran, relative to the workspace"`
	Covering   []string       `json:"covering" jsonschema:"the tests that execute the target"`
	Tests      []CoveringTest `json:"tests" jsonschema:"every test run, in order"`
	NotRun     []string       `json:"not_run,omitempty" jsonschema:"tests left out: past the 200 that run, or after the timeout"`
	TimedOut   bool           `json:"timed_out,omitempty" jsonschema:"true when the timeout stopped the runs"`
	DurationMs int64          `json:"duration_ms" jsonschema:"how long the build and the runs took, in milliseconds"`
}

// testsCovering is the tests_covering tool.
func (tb *Toolbox) testsCovering(ctx context.Context, in TestsCoveringInput) (*mcp.CallToolResult, TestsCoveringOutput, error) {
	timeout, err := timeoutFrom(in.Timeout, checkDefaultTimeout, checkMaxTimeout)
	if err != nil {
		return nil, TestsCoveringOutput{}, err
	}
	if in.Line < 0 {
		return nil, TestsCoveringOutput{}, fmt.Errorf("line must be 1 or more, got %d", in.Line)
	}
	rel, src, fset, file, err := tb.coveringSource(in)
	if err != nil {
		return nil, TestsCoveringOutput{}, err
	}
	from, to := 1, fset.File(file.Pos()).LineCount()
	target := "the file " + rel
	if in.Function != "" {
		recv, name, err := parseFunctionName(in.Function)
		if err != nil {
			return nil, TestsCoveringOutput{}, err
		}
		g := &goFile{rel: rel, src: src, fset: fset, file: file}
		fd, _, err := g.findFunc(recv, name)
		if err != nil {
			return nil, TestsCoveringOutput{}, err
		}
		from, to = fset.Position(fd.Pos()).Line, fset.Position(fd.End()).Line
		target = fmt.Sprintf("%s in %s", qualifiedName(fd), rel)
	}
	if in.Line > 0 {
		if in.Line < from || in.Line > to {
			return nil, TestsCoveringOutput{}, fmt.Errorf("line %d is not in %s (lines %d-%d)", in.Line, target, from, to)
		}
		target = fmt.Sprintf("line %d of %s", in.Line, target)
		from, to = in.Line, in.Line
	}
	target += fmt.Sprintf(" (lines %d-%d)", from, to)

	dir := path.Dir(rel)
	tests, err := tb.packageTests(dir)
	if err != nil {
		return nil, TestsCoveringOutput{}, err
	}
	out := TestsCoveringOutput{FilePath: rel, Target: target, Package: dir, Covering: []string{}, Tests: []CoveringTest{}}
	if len(tests) == 0 {
		text := fmt.Sprintf("No tests in %s (no func TestX(t *testing.T) in its _test.go files): nothing covers %s", dir, target)
		return textResult(text), out, nil
	}
	if len(tests) > coveringMaxTests {
		out.NotRun = tests[coveringMaxTests:]
		tests = tests[:coveringMaxTests]
	}

	if _, err := exec.LookPath("go"); err != nil {
		return nil, TestsCoveringOutput{}, errors.New("go is not installed in this sandbox (not on PATH): tests_covering needs the Go toolchain (the -go sandbox image has it)")
	}
	start := time.Now()
	tmp, err := os.MkdirTemp("", "airlock-covering-")
	if err != nil {
		return nil, TestsCoveringOutput{}, fmt.Errorf("creating a temporary directory: %v", err)
	}
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, "pkg.test")
	if err := tb.buildCoverageTests(ctx, dir, bin, timeout); err != nil {
		return nil, TestsCoveringOutput{}, err
	}
	lines := coverTarget{base: path.Base(rel), from: from, to: to}
	if err := tb.runEachTest(ctx, dir, bin, tests, lines, start.Add(timeout), &out); err != nil {
		return nil, TestsCoveringOutput{}, err
	}
	out.DurationMs = time.Since(start).Milliseconds()
	return textResult(coveringText(out)), out, nil
}

// coveringSource finds, reads and parses the Go source file a
// tests_covering input names (file_path or file), inside the workspace.
func (tb *Toolbox) coveringSource(in TestsCoveringInput) (string, []byte, *token.FileSet, *ast.File, error) {
	filePath, err := oneOf("file_path", in.FilePath, "file", in.File)
	if err != nil {
		return "", nil, nil, nil, err
	}
	if filePath == "" {
		return "", nil, nil, nil, errors.New("file_path is required: the Go source file whose tests you want")
	}
	rel, err := tb.ws.Rel(filePath)
	if err != nil {
		return "", nil, nil, nil, err
	}
	if rel, err = tb.ws.ResolveFinal(rel); err != nil {
		return "", nil, nil, nil, err
	}
	if path.Ext(rel) != ".go" {
		return "", nil, nil, nil, fmt.Errorf("%s is not a Go file: tests_covering works for Go packages only", rel)
	}
	if strings.HasSuffix(rel, "_test.go") {
		return "", nil, nil, nil, fmt.Errorf("%s is a test file: give the source file whose code the tests should run", rel)
	}
	f, fi, err := tb.ws.OpenRegular(rel)
	if err != nil {
		return "", nil, nil, nil, err
	}
	src, err := io.ReadAll(io.LimitReader(f, editMaxFileBytes+1))
	f.Close()
	if err != nil {
		return "", nil, nil, nil, fmt.Errorf("reading %s: %v", rel, err)
	}
	if fi.Size() > editMaxFileBytes || len(src) > editMaxFileBytes {
		return "", nil, nil, nil, fmt.Errorf("%s is larger than %d bytes", rel, editMaxFileBytes)
	}
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, rel, src, parser.SkipObjectResolution)
	if err != nil {
		return "", nil, nil, nil, fmt.Errorf("%s does not parse as Go: %s", rel, firstParseError(err))
	}
	return rel, src, fset, file, nil
}

// buildCoverageTests builds the test binary of the package in dir, with
// coverage, into bin. It builds in the package's directory, so that a
// package of a module nested in the workspace builds in its own module.
func (tb *Toolbox) buildCoverageTests(ctx context.Context, dir, bin string, timeout time.Duration) error {
	build := fmt.Sprintf("cd %s && go test -c -cover -covermode=set -o %s .", shellQuote(dir), shellQuote(bin))
	since := wsscan.Now()
	res, err := procgroup.RunForeground(ctx, tb.procs, tb.ws.Dir(), build, timeout)
	if err != nil {
		return err
	}
	recordProcess(ctx, build, since, res)
	switch {
	case res.Canceled:
		return fmt.Errorf("cancelled after %v: the build's process group was killed", res.Elapsed.Round(time.Millisecond))
	case res.TimedOut:
		return fmt.Errorf("the test build (%s) did not finish within the timeout of %v", build, timeout)
	case res.ExitCode != 0:
		return fmt.Errorf("the tests of %s do not build (%s, exit code %d):\n%s", dir, build, res.ExitCode, res.Output)
	}
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("the test build (%s) wrote no test binary:\n%s", build, res.Output)
	}
	return nil
}

// coverTarget is what a test must execute to cover it: lines from..to of
// the package's file named base.
type coverTarget struct {
	base     string
	from, to int
}

// runEachTest runs each test of the binary bin alone, in the package's
// directory dir, with a coverage profile, until deadline, and records in
// out whether it covers the target. A test still running at the deadline
// is killed (its process group) and the tests after it are listed as not
// run.
func (tb *Toolbox) runEachTest(ctx context.Context, dir, bin string, tests []string, target coverTarget, deadline time.Time, out *TestsCoveringOutput) error {
	start := time.Now()
	profile := filepath.Join(filepath.Dir(bin), "cover.out")
	for i, name := range tests {
		left := time.Until(deadline)
		if left <= 0 {
			out.TimedOut = true
			out.NotRun = append(slices.Clone(tests[i:]), out.NotRun...)
			return nil
		}
		_ = os.Remove(profile)
		run := fmt.Sprintf("cd %s && exec %s -test.run %s -test.count=1 -test.coverprofile=%s",
			shellQuote(dir), shellQuote(bin), shellQuote("^"+name+"$"), shellQuote(profile))
		since := wsscan.Now()
		res, err := procgroup.RunForeground(ctx, tb.procs, tb.ws.Dir(), run, left)
		if err != nil {
			return err
		}
		recordProcess(ctx, run, since, res)
		if res.Canceled {
			return fmt.Errorf("cancelled after %v, in %s: its process group was killed", time.Since(start).Round(time.Millisecond), name)
		}
		t := CoveringTest{Name: name, Passed: res.ExitCode == 0 && !res.TimedOut}
		if !res.TimedOut { // a killed test's profile, if any, is not its whole run
			t.Covers, t.Profile = profileCovers(profile, target.base, target.from, target.to)
		}
		out.Tests = append(out.Tests, t)
		if t.Covers {
			out.Covering = append(out.Covering, name)
		}
		if res.TimedOut {
			out.TimedOut = true
			out.NotRun = append(slices.Clone(tests[i+1:]), out.NotRun...)
			return nil
		}
	}
	return nil
}

// coveringText is the text of a tests_covering result.
func coveringText(out TestsCoveringOutput) string {
	var b strings.Builder
	if len(out.Covering) == 0 {
		fmt.Fprintf(&b, "None of the %d tests run in %s executes %s", len(out.Tests), out.Package, out.Target)
	} else {
		fmt.Fprintf(&b, "%d of the %d tests run in %s execute %s:", len(out.Covering), len(out.Tests), out.Package, out.Target)
		for _, t := range out.Tests {
			if !t.Covers {
				continue
			}
			b.WriteString("\n  " + t.Name)
			if !t.Passed {
				b.WriteString(" (FAILED)")
			}
		}
	}
	var unknown []string
	for _, t := range out.Tests {
		if !t.Profile {
			unknown = append(unknown, t.Name)
		}
	}
	if len(unknown) > 0 {
		fmt.Fprintf(&b, "\n%d test(s) wrote no coverage profile (crashed or timed out), so whether they cover it is unknown: %s", len(unknown), strings.Join(unknown, ", "))
	}
	if out.TimedOut {
		b.WriteString("\nThe timeout stopped the runs.")
	}
	if len(out.NotRun) > 0 {
		fmt.Fprintf(&b, "\n%d test(s) not run (at most %d run, within the timeout): %s", len(out.NotRun), coveringMaxTests, strings.Join(out.NotRun[:min(len(out.NotRun), 20)], ", "))
		if len(out.NotRun) > 20 {
			b.WriteString(", ...")
		}
	}
	b.WriteString("\n(Only the tests of the file's own package are run; tests in other packages that use it are not.)")
	return b.String()
}

// packageTests lists the test functions of the package in dir: func
// TestX(t *testing.T) in its _test.go files (the package's own and its
// external _test package), sorted.
func (tb *Toolbox) packageTests(dir string) ([]string, error) {
	entries, err := fs.ReadDir(tb.ws.Root().FS(), dir)
	if err != nil {
		return nil, tb.ws.Explain(dir, err)
	}
	var tests []string
	for _, e := range entries {
		if !e.Type().IsRegular() || !strings.HasSuffix(e.Name(), "_test.go") || strings.HasPrefix(e.Name(), ".") || strings.HasPrefix(e.Name(), "_") {
			continue
		}
		rel := path.Join(dir, e.Name())
		f, fi, err := tb.ws.OpenRegular(rel)
		if err != nil {
			continue
		}
		src, err := io.ReadAll(io.LimitReader(f, editMaxFileBytes+1))
		f.Close()
		if err != nil || fi.Size() > editMaxFileBytes {
			continue
		}
		file, err := parser.ParseFile(token.NewFileSet(), rel, src, parser.SkipObjectResolution)
		if err != nil {
			return nil, fmt.Errorf("%s does not parse as Go: %s", rel, firstParseError(err))
		}
		for _, d := range file.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && isTestFunc(fd) {
				tests = append(tests, fd.Name.Name)
			}
		}
	}
	slices.Sort(tests)
	return slices.Compact(tests), nil
}

// isTestFunc reports whether fd is a test as go test finds one: func
// TestX(t *testing.T), X not starting with a lower-case letter.
func isTestFunc(fd *ast.FuncDecl) bool {
	if fd.Recv != nil || fd.Type.TypeParams != nil || !strings.HasPrefix(fd.Name.Name, "Test") {
		return false
	}
	if rest := fd.Name.Name[len("Test"):]; rest != "" {
		if r, _ := utf8.DecodeRuneInString(rest); unicode.IsLower(r) {
			return false
		}
	}
	params := fd.Type.Params.List
	if len(params) != 1 || len(params[0].Names) > 1 {
		return false
	}
	star, ok := params[0].Type.(*ast.StarExpr)
	if !ok {
		return false
	}
	sel, ok := star.X.(*ast.SelectorExpr)
	return ok && sel.Sel.Name == "T"
}

// profileCovers reads a coverage profile and reports whether a block of
// the file named base (in the package the profile is of) with a count
// above zero overlaps lines from..to; ok is false when there is no
// profile.
func profileCovers(profile, base string, from, to int) (covers, ok bool) {
	f, err := os.Open(profile)
	if err != nil {
		return false, false
	}
	defer f.Close()
	sc := bufio.NewScanner(io.LimitReader(f, coveringMaxProfileBytes))
	for sc.Scan() {
		line := sc.Text()
		// import/path/file.go:L1.C1,L2.C2 statements count
		colon := strings.LastIndexByte(line, ':')
		if colon < 0 || path.Base(line[:colon]) != base {
			continue
		}
		fields := strings.Fields(line[colon+1:])
		if len(fields) != 3 || fields[2] == "0" {
			continue
		}
		startS, endS, ok := strings.Cut(fields[0], ",")
		if !ok {
			continue
		}
		l1, err1 := strconv.Atoi(strings.Split(startS, ".")[0])
		l2, err2 := strconv.Atoi(strings.Split(endS, ".")[0])
		if err1 != nil || err2 != nil {
			continue
		}
		if l1 <= to && l2 >= from {
			return true, true
		}
	}
	return false, true
}
