package tools

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/testfailures"
)

// maxFailuresShown bounds the failures a result's text lists.
const maxFailuresShown = 20

// RunFailingTestsInput is the input of the run_failing_tests tool.
type RunFailingTestsInput struct {
	Timeout int `json:"timeout,omitempty" jsonschema:"timeout in milliseconds, or in seconds when 600 or less (CodeGen-Sandbox's unit); default 300000 (5 minutes), maximum 600000 (10 minutes)"`
}

// LastTestFailuresInput is the input of the last_test_failures tool.
type LastTestFailuresInput struct{}

// LastTestFailuresOutput is the structured result of the last_test_failures
// tool.
type LastTestFailuresOutput struct {
	Language string                 `json:"language" jsonschema:"the language of the last test run"`
	Command  string                 `json:"command" jsonschema:"the command it ran"`
	Passed   bool                   `json:"passed" jsonschema:"true when it passed"`
	RanAt    string                 `json:"ran_at" jsonschema:"when it ended (RFC 3339)"`
	Failures []testfailures.Failure `json:"failures" jsonschema:"its failing tests and build errors"`
}

// testRecord keeps the last run of run_tests or run_failing_tests.
type testRecord struct {
	mu   sync.Mutex
	last *LastTestFailuresOutput
}

func (r *testRecord) record(out RunTestsOutput) {
	r.mu.Lock()
	defer r.mu.Unlock()
	failures := slices.Clone(out.Failures)
	if failures == nil {
		failures = []testfailures.Failure{}
	}
	r.last = &LastTestFailuresOutput{Language: out.Language, Command: out.Command, Passed: out.Passed,
		RanAt: time.Now().UTC().Format(time.RFC3339), Failures: failures}
}

func (r *testRecord) get() *LastTestFailuresOutput {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

// errNoTestRun is the error of the two tools below before any test run.
var errNoTestRun = errors.New("no test run yet: run run_tests first")

// lastTestFailures is the last_test_failures tool.
func (tb *Toolbox) lastTestFailures(_ context.Context, _ LastTestFailuresInput) (*mcp.CallToolResult, LastTestFailuresOutput, error) {
	last := tb.tests.get()
	if last == nil {
		return nil, LastTestFailuresOutput{}, errNoTestRun
	}
	verdict := "passed"
	if !last.Passed {
		verdict = "FAILED"
	}
	text := fmt.Sprintf("Last test run (%s, %s): $ %s: %s%s", last.Language, last.RanAt, last.Command, verdict, failureSummary(last.Failures))
	if !last.Passed && len(last.Failures) == 0 {
		text += "\n(no failure could be parsed from its output: run run_tests and read the output)"
	}
	return textResult(text), *last, nil
}

// runFailingTests is the run_failing_tests tool.
func (tb *Toolbox) runFailingTests(ctx context.Context, in RunFailingTestsInput) (*mcp.CallToolResult, RunTestsOutput, error) {
	timeout, err := timeoutFrom(in.Timeout, checkDefaultTimeout, checkMaxTimeout)
	if err != nil {
		return nil, RunTestsOutput{}, err
	}
	last := tb.tests.get()
	if last == nil {
		return nil, RunTestsOutput{}, errNoTestRun
	}
	if len(last.Failures) == 0 {
		if last.Passed {
			return nil, RunTestsOutput{}, errors.New("the last test run passed: there are no failing tests to run")
		}
		return nil, RunTestsOutput{}, errors.New("the last test run failed, but no failing test could be parsed from its output: run run_tests")
	}
	command, err := failingTestsCommand(last.Language, last.Failures)
	if err != nil {
		return nil, RunTestsOutput{}, err
	}
	return tb.runCommandCheck(ctx, checkTests, last.Language, command, timeout)
}

var (
	goTestName    = regexp.MustCompile(`^[\p{L}_][\p{L}\p{N}_]*$`)
	goPackageName = regexp.MustCompile(`^[A-Za-z0-9._~/+-]+$`)
	rustTestName  = regexp.MustCompile(`^[A-Za-z0-9_:]+$`)
)

// failingTestsCommand returns the command that runs only the failures of
// the last run (a build error: its whole package).
func failingTestsCommand(lang string, failures []testfailures.Failure) (string, error) {
	switch lang {
	case "go":
		var pkgs, tests []string
		wholePackages := false
		for _, f := range failures {
			if f.Package == "" || !goPackageName.MatchString(f.Package) || strings.HasPrefix(f.Package, "-") {
				return "", fmt.Errorf("cannot tell which package %q failed in: run run_tests", f.Test)
			}
			if !slices.Contains(pkgs, f.Package) {
				pkgs = append(pkgs, f.Package)
			}
			top, _, _ := strings.Cut(f.Test, "/")
			switch {
			case top == "":
				wholePackages = true
			case !goTestName.MatchString(top):
				return "", fmt.Errorf("%q is not a Go test name: run run_tests", f.Test)
			case !slices.Contains(tests, top):
				tests = append(tests, top)
			}
		}
		run := ""
		if !wholePackages {
			run = "-run " + shellQuote("^("+strings.Join(tests, "|")+")$") + " "
		}
		return "go test " + run + shellQuoteAll(pkgs), nil
	case "rust":
		var names []string
		for _, f := range failures {
			if !rustTestName.MatchString(f.Test) {
				return "", fmt.Errorf("%q is not a Rust test name: run run_tests", f.Test)
			}
			names = append(names, f.Test)
		}
		return "cargo test -- --exact " + shellQuoteAll(names), nil
	case "python":
		var ids []string
		for _, f := range failures {
			id := f.Test
			if id == "" {
				id = f.File // a collection error: the whole file
			}
			if id == "" || strings.HasPrefix(id, "-") || strings.ContainsAny(id, "\x00\n") {
				return "", fmt.Errorf("cannot run %q on its own: run run_tests", id)
			}
			if !slices.Contains(ids, id) {
				ids = append(ids, id)
			}
		}
		return "python3 -m pytest -q " + shellQuoteAll(ids), nil
	}
	return "", fmt.Errorf("run_failing_tests cannot run single tests of %s workspaces: run run_tests", lang)
}

// shellQuote quotes s for bash as one word.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func shellQuoteAll(words []string) string {
	quoted := make([]string, len(words))
	for i, w := range words {
		quoted[i] = shellQuote(w)
	}
	return strings.Join(quoted, " ")
}

// failureSummary lists failures for a result's text.
func failureSummary(failures []testfailures.Failure) string {
	if len(failures) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n%d failure(s):", len(failures))
	for i, f := range failures {
		if i == maxFailuresShown {
			fmt.Fprintf(&b, "\n  ... and %d more (last_test_failures lists them all)", len(failures)-i)
			break
		}
		b.WriteString("\n  ")
		if f.Package != "" {
			b.WriteString(f.Package + " ")
		}
		if f.Test != "" {
			b.WriteString(f.Test + " ")
		}
		if f.File != "" {
			fmt.Fprintf(&b, "(%s:%d) ", f.File, f.Line)
		}
		msg, _, _ := strings.Cut(f.Message, "\n")
		b.WriteString(msg)
	}
	return b.String()
}
