package tools

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/confine"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/procgroup"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/testfailures"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/wsscan"
)

const (
	// checkDefaultTimeout and checkMaxTimeout bound a run_* call.
	checkDefaultTimeout = 300 * time.Second
	checkMaxTimeout     = 600 * time.Second
)

// The kinds of check run_tests, run_lint and run_typecheck run.
const (
	checkTests     = "tests"
	checkLint      = "lint"
	checkTypecheck = "typecheck"
)

// language is a kind of workspace run_* knows: the files at its top that
// mark it, and its usual command for each kind of check.
type language struct {
	name     string
	markers  []string
	commands map[string]string
}

// languages are the languages run_* knows, in the order they are detected.
var languages = []language{
	{
		name:    "go",
		markers: []string{"go.mod", "go.work"},
		commands: map[string]string{
			checkTests:     "go test ./...",
			checkLint:      "if command -v golangci-lint >/dev/null 2>&1; then golangci-lint run ./...; else go vet ./...; fi",
			checkTypecheck: "go build ./...",
		},
	},
	{
		name:    "rust",
		markers: []string{"Cargo.toml"},
		commands: map[string]string{
			checkTests:     "cargo test",
			checkLint:      "cargo clippy --all-targets -- -D warnings",
			checkTypecheck: "cargo check --all-targets",
		},
	},
	{
		name:    "node",
		markers: []string{"package.json"},
		commands: map[string]string{
			checkTests:     "npm test",
			checkLint:      "npx --no-install eslint .",
			checkTypecheck: "npx --no-install tsc --noEmit",
		},
	},
	{
		name:    "python",
		markers: []string{"pyproject.toml", "setup.py", "setup.cfg", "requirements.txt", "tox.ini"},
		commands: map[string]string{
			checkTests:     "python3 -m pytest -q",
			checkLint:      "if command -v ruff >/dev/null 2>&1; then ruff check .; else python3 -m flake8 .; fi",
			checkTypecheck: "python3 -m mypy .",
		},
	},
}

func languageNames() []string {
	var names []string
	for _, l := range languages {
		names = append(names, l.name)
	}
	return names
}

// RunTestsInput is the input of the run_tests tool.
type RunTestsInput struct {
	Timeout  int    `json:"timeout,omitempty" jsonschema:"timeout in milliseconds, or in seconds when 600 or less (CodeGen-Sandbox's unit); default 300000 (5 minutes), maximum 600000 (10 minutes)"`
	Language string `json:"language,omitempty" jsonschema:"go, node, python or rust; default detected from the workspace (go.mod, Cargo.toml, package.json, pyproject.toml and the like)"`
}

// RunTestsOutput is the structured result of the run_tests tool.
type RunTestsOutput struct {
	Language   string `json:"language" jsonschema:"the language whose command ran"`
	Command    string `json:"command" jsonschema:"the command that ran, with /bin/bash -c in the workspace"`
	Passed     bool   `json:"passed" jsonschema:"true when the command exited 0"`
	ExitCode   int    `json:"exit_code" jsonschema:"exit code of the command; 124 when it timed out"`
	TimedOut   bool   `json:"timed_out,omitempty" jsonschema:"true when the timeout killed the command's process group"`
	Output     string `json:"output,omitempty" jsonschema:"stdout and stderr, interleaved; capped at 100 KiB with the elision said"`
	DurationMs int64  `json:"duration_ms" jsonschema:"how long the command ran, in milliseconds"`
	// Failures is set by run_tests and run_failing_tests only.
	Failures []testfailures.Failure `json:"failures,omitempty" jsonschema:"run_tests: the failing tests (and build errors) as the runner reported them, parsed from the whole output (go, rust, python, node --test, jest; at most 200)"`
}

// RunLintInput is the input of the run_lint tool.
type RunLintInput RunTestsInput

// RunLintOutput is the structured result of the run_lint tool.
type RunLintOutput RunTestsOutput

// RunTypecheckInput is the input of the run_typecheck tool.
type RunTypecheckInput RunTestsInput

// RunTypecheckOutput is the structured result of the run_typecheck tool.
type RunTypecheckOutput RunTestsOutput

func (tb *Toolbox) runTests(ctx context.Context, in RunTestsInput) (*mcp.CallToolResult, RunTestsOutput, error) {
	return tb.runCheck(ctx, checkTests, in)
}

func (tb *Toolbox) runLint(ctx context.Context, in RunLintInput) (*mcp.CallToolResult, RunLintOutput, error) {
	res, out, err := tb.runCheck(ctx, checkLint, RunTestsInput(in))
	return res, RunLintOutput(out), err
}

func (tb *Toolbox) runTypecheck(ctx context.Context, in RunTypecheckInput) (*mcp.CallToolResult, RunTypecheckOutput, error) {
	res, out, err := tb.runCheck(ctx, checkTypecheck, RunTestsInput(in))
	return res, RunTypecheckOutput(out), err
}

// runCheck runs the workspace language's command for kind.
func (tb *Toolbox) runCheck(ctx context.Context, kind string, in RunTestsInput) (*mcp.CallToolResult, RunTestsOutput, error) {
	timeout, err := timeoutFrom(in.Timeout, checkDefaultTimeout, checkMaxTimeout)
	if err != nil {
		return nil, RunTestsOutput{}, err
	}
	lang := in.Language
	if lang == "" {
		if lang, err = tb.detectLanguage(); err != nil {
			return nil, RunTestsOutput{}, err
		}
	}
	i := slices.IndexFunc(languages, func(l language) bool { return l.name == lang })
	if i < 0 {
		return nil, RunTestsOutput{}, fmt.Errorf("language must be one of %s, got %q", strings.Join(languageNames(), ", "), lang)
	}
	return tb.runCommandCheck(ctx, kind, lang, languages[i].commands[kind], timeout)
}

// runCommandCheck runs command as the check kind of lang; a test run's
// failures are parsed and kept for last_test_failures.
func (tb *Toolbox) runCommandCheck(ctx context.Context, kind, lang, command string, timeout time.Duration) (*mcp.CallToolResult, RunTestsOutput, error) {
	var parser *testfailures.Parser
	if kind == checkTests {
		parser = testfailures.NewParser(lang)
	}
	var tee io.Writer
	if parser != nil {
		tee = parser
	}
	since := wsscan.Now()
	res, err := procgroup.RunForegroundTee(ctx, tb.procs, tb.ws.Dir(), command, timeout, tee)
	if err != nil {
		return nil, RunTestsOutput{}, err
	}
	recordProcess(ctx, command, since, res)
	if res.Canceled {
		return nil, RunTestsOutput{}, fmt.Errorf("cancelled after %v: the command's process group was killed", res.Elapsed.Round(time.Millisecond))
	}
	out := RunTestsOutput{
		Language:   lang,
		Command:    command,
		Passed:     res.ExitCode == 0 && !res.TimedOut,
		ExitCode:   res.ExitCode,
		TimedOut:   res.TimedOut,
		Output:     res.Output,
		DurationMs: res.Elapsed.Milliseconds(),
	}
	if parser != nil {
		out.Failures = parser.Result()
		switch lang {
		case "go":
			tb.localizeGoFailures(out.Failures)
		case "node":
			tb.localizeNodeFailures(out.Failures)
		}
	}
	if kind == checkTests {
		tb.tests.record(out)
	}
	verdict := "passed"
	if !out.Passed {
		verdict = "FAILED"
	}
	result := commandResult(res, timeout)
	text := fmt.Sprintf("$ %s\n%s\n%s %s (%s)%s", command, contentTextOf(result), lang, kind, verdict, failureSummary(out.Failures))
	return textResult(text), out, nil
}

// detectLanguage finds the workspace's language from its marker files at
// the top of the workspace.
func (tb *Toolbox) detectLanguage() (string, error) {
	for _, l := range languages {
		for _, m := range l.markers {
			fi, err := tb.ws.Root().Stat(m)
			if err == nil && fi.Mode().IsRegular() {
				return l.name, nil
			}
			if err != nil && !errors.Is(err, fs.ErrNotExist) && !confine.IsEscape(err) {
				return "", tb.ws.Explain(m, err)
			}
		}
	}
	return "", fmt.Errorf("no known project at the top of the workspace (looked for go.mod, Cargo.toml, package.json, pyproject.toml, setup.py, requirements.txt): pass language (%s), or run the command with Bash", strings.Join(languageNames(), ", "))
}

func contentTextOf(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}
