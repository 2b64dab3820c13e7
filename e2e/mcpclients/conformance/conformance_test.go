// Package conformance runs the official MCP conformance suite
// (@modelcontextprotocol/conformance, pinned with the Node.js it needs in
// package.json and package-lock.json beside this file) against a real
// sandboxd, built from this repository, on every protocol revision the
// suite has server scenarios for. The suite and Node.js 22 (the npm package
// `node`, which brings its own binary: the system's Node.js is only used by
// npm to install it) are installed with `npm ci` into _output/conformance
// at the repository root (git-ignored), and reinstalled only when the lock
// file changes.
//
// expected-failures.yaml lists the scenarios that need the suite's
// reference fixtures, each with its reason; the suite fails the run on a
// failure not listed there and on a listed scenario that passes, and the
// tests fail a listed scenario's check that failed for another reason than
// its fixture (lacksFixture).
//
// The pinned release (0.1.16) has no scenarios for 2026-07-28; the suite's
// 0.2.0 alpha, pinned in 2026-07-28/ with its own expected failures and
// installed into _output/conformance-2026-07-28, runs that revision's
// (TestConformance20260728).
package conformance

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/e2e/mcpclients/internal/harness"
)

// nodeVersion is the Node.js that package.json pins (the suite needs 22 or later).
const nodeVersion = "v22.23.3"

// specVersions are the revisions the pinned suite has server scenarios for
// (`conformance list --server --spec-version V`: 2025-03-26 has none, draft
// and extension none). Its client negotiates its SDK's newest revision,
// 2025-11-25, in both: the version selects the scenarios.
var specVersions = []string{"2025-06-18", "2025-11-25"}

// mustPass are the scenarios that apply to a server with sandboxd's
// capabilities, by the revisions that have them; each must have run and
// passed every check (the suite's own baseline check would also pass if a
// scenario silently did not run).
var mustPass = map[string][]string{
	"2025-06-18": {"server-initialize", "ping", "logging-set-level", "tools-list", "resources-list", "prompts-list"},
	"2025-11-25": {"server-initialize", "ping", "logging-set-level", "tools-list", "resources-list", "prompts-list",
		"server-sse-multiple-streams", "dns-rebinding-protection"},
}

func TestMain(m *testing.M) { os.Exit(harness.Main(m)) }

// suite is the installed conformance suite.
type suite struct {
	node, cli, dir string
}

// install installs the suite and Node.js pinned in this directory into
// _output/conformance.
func install(t *testing.T) suite { return installFrom(t, ".", "conformance") }

// installFrom installs the suite and Node.js pinned in manifestDir (beside
// this file) into _output/<output> unless the same lock file is installed
// there already.
func installFrom(t *testing.T, manifestDir, output string) suite {
	t.Helper()
	npm, err := harness.LookNPM()
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("the conformance suite needs npm: %v (CI is set; .ci/run installs Node.js and npm)", err)
		}
		t.Skipf("skipping the MCP conformance suite: %v (install npm to run it)", err)
	}
	here, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	lock, err := os.ReadFile(filepath.Join(here, manifestDir, "package-lock.json"))
	if err != nil {
		t.Fatal(err)
	}
	manifest, err := os.ReadFile(filepath.Join(here, manifestDir, "package.json"))
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(harness.RepoRoot(t), "_output", output)
	s := suite{
		node: filepath.Join(dir, "node_modules", "node", "bin", "node"),
		cli:  filepath.Join(dir, "node_modules", "@modelcontextprotocol", "conformance", "dist", "index.js"),
		dir:  dir,
	}
	installed, _ := os.ReadFile(filepath.Join(dir, "package-lock.json"))
	if !bytes.Equal(installed, lock) || !s.nodeIs(nodeVersion) {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		// The lock file last: a failed install is retried on the next run.
		_ = os.Remove(filepath.Join(dir, "package-lock.json"))
		for name, data := range map[string][]byte{"package.json": manifest, "package-lock.json": lock} {
			if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		cmd := exec.Command(npm, "ci", "--no-audit", "--no-fund", "--loglevel=error")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			_ = os.Remove(filepath.Join(dir, "package-lock.json"))
			t.Fatalf("npm ci in %s: %v\n%s", dir, err, out)
		}
	}
	if !s.nodeIs(nodeVersion) {
		t.Fatalf("%s is not Node.js %s after npm ci", s.node, nodeVersion)
	}
	return s
}

// nodeIs reports whether the installed Node.js binary runs and is version v.
func (s suite) nodeIs(v string) bool {
	out, err := exec.Command(s.node, "--version").Output()
	return err == nil && strings.TrimSpace(string(out)) == v
}

// run runs `conformance server` with args and returns its exit error and
// combined output. PATH starts with the pinned Node.js's directory, so that
// nothing the suite starts runs the system's.
func (s suite) run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(s.node, append([]string{s.cli, "server"}, args...)...)
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(s.node)+string(os.PathListSeparator)+os.Getenv("PATH"), "NO_COLOR=1")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func TestConformance(t *testing.T) {
	s := install(t)
	sd := harness.Start(t)
	expected, err := filepath.Abs("expected-failures.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, version := range specVersions {
		t.Run(version, func(t *testing.T) {
			results := t.TempDir()
			out, err := s.run(t, "--url", sd.URL+"/mcp", "--suite", "all", "--spec-version", version,
				"--expected-failures", expected, "-o", results)
			if err != nil {
				t.Fatalf("conformance suite (spec version %s) against sandboxd: %v\n%s", version, err, out)
			}
			checks := readChecks(t, results)
			requirePassed(t, checks, mustPass[version], func(check) bool { return false })
			requireFixtureFailures(t, checks, expected)
		})
	}
}

// mustPass20260728 are the scenarios of the 2026-07-28 suite
// (2026-07-28/package.json) that apply to a server with sandboxd's
// capabilities; each must have run and passed every check.
var mustPass20260728 = []string{"tools-list", "server-sse-multiple-streams", "resources-list", "sep-2164-resource-not-found",
	"prompts-list", "dns-rebinding-protection", "caching", "input-required-result-unsupported-methods",
	"input-required-result-validate-input", "http-header-validation"}

// fixtureName is a tool or prompt of the suite's reference server that
// sandboxd does not serve: its test_* fixtures (sandboxd has no tool of that
// prefix: tests_covering is not one) and the tasks extension's tools.
const fixtureName = `(?:test_[a-z0-9_]+|greet|slow_compute|failing_job|protocol_error_job|confirm_delete|multi_input)`

// fixtureErrors are what the suite says, in any expected failure, when a
// check could not run for want of a fixture it names: each matches the
// whole message (a fixture error followed by anything else is not one).
var fixtureErrors = regexp.MustCompile(`^(?:` + strings.Join([]string{
	`(?:Failed: (?:MCP error -32602: )?|JSON-RPC error: )?unknown (?:tool|prompt) "` + fixtureName + `"`,
	`Server returned JSON-RPC error when extra params were included: unknown tool "` + fixtureName + `"\. Servers SHOULD ignore unrecognized information\.`,
	`Not testable: server does not list the diagnostic tool '(?:test_missing_capability|test_streaming_elicitation|test_logging_tool)' in tools/list(?:, so [a-zA-Z0-9 ./-]+| and the probe call did not exercise it \(required for the undeclared-capability rejection\))`,
}, "|") + `)$`)

// scenarioFixtureErrors are the fixture errors that do not name their
// fixture, each allowed only in the scenario whose fixture it stands for
// (there, sandboxd lacks the fixture; anywhere else it may be a real fault).
var scenarioFixtureErrors = map[string]*regexp.Regexp{
	"completion-complete":      regexp.MustCompile(`^Failed: (?:MCP error -32601: )?method not found: "completion/complete"$`),
	"resources-read-text":      regexp.MustCompile(`^Failed: (?:MCP error -32602: )?Resource not found$`),
	"resources-read-binary":    regexp.MustCompile(`^Failed: (?:MCP error -32602: )?Resource not found$`),
	"resources-templates-read": regexp.MustCompile(`^Failed: (?:MCP error -32602: )?Resource not found$`),
	"resources-subscribe":      regexp.MustCompile(`^Failed: MCP error -32601: method not found: "resources/subscribe"$`),
	"resources-unsubscribe":    regexp.MustCompile(`^Failed: MCP error -32601: method not found: "resources/subscribe"$`),
	// Not a fixture: the two SHOULDs of SEP-1699 that sandboxd does not meet, on purpose
	// (expected-failures.yaml says why); any other failure of the scenario is a real one.
	"server-sse-polling": regexp.MustCompile(`^(?:Server did not send priming event with id and empty data on POST SSE stream\. This is recommended for resumability\.|` +
		`Server did not send retry field\. This is recommended for controlling client reconnection timing\.)$`),
	"json-schema-2020-12": regexp.MustCompile(`^Tool 'json_schema_2020_12_tool' not found\. Available tools: [A-Za-z_, ]+$`),
	"http-custom-header-server-validation": regexp.MustCompile(
		`^Not testable: server exposes no tool with x-mcp-header annotations(?:, so none of the custom-header validation requirements could be exercised)?$`),
	"input-required-result-multi-round":    regexp.MustCompile(`^Expected InputRequiredResult with inputRequests and requestState$`),
	"input-required-result-tampered-state": regexp.MustCompile(`^Prerequisite failed: could not get initial InputRequiredResult with requestState$`),
	"input-required-result-missing-input-response": regexp.MustCompile(
		`^Server returned JSON-RPC error instead of re-requesting via InputRequiredResult\. SEP-2322 recommends servers re-request missing information\.$`),
	// The tasks checks chained to a step that needed slow_compute or greet.
	"tasks-lifecycle":           regexp.MustCompile(`^Not testable: no task was created by the preceding step, so this check could not be exercised$`),
	"tasks-wire-fields":         regexp.MustCompile(`^Not testable: no task was created by the preceding step, so this check could not be exercised$`),
	"tasks-request-headers":     regexp.MustCompile(`^routing-task fixture from Check 2 unavailable; cannot drive negative-path probe$`),
	"tasks-required-task-error": regexp.MustCompile(`^tools/call for failing_job returned error code -32602; spec requires -32021\.$`),
}

// lacksFixture reports whether message, of a failed or warned check of the
// expected failure scenario, is what the suite says when a check could not
// run for want of its reference fixture: an unknown tool or prompt of its
// own, a resource it did not find, a diagnostic tool or annotation sandboxd
// does not have, completions sandboxd does not declare, or a step that
// needed one of those. A check of an expected failure that fails or warns
// for any other reason fails TestConformance and TestConformance20260728
// (TestLacksFixtureHidesNoRealFailure holds the filter to that). The one
// exception is server-sse-polling's two SHOULD warnings, which sandboxd
// does not meet on purpose (expected-failures.yaml).
func lacksFixture(scenario, message string) bool {
	if fixtureErrors.MatchString(message) {
		return true
	}
	re, ok := scenarioFixtureErrors[scenario]
	return ok && re.MatchString(message)
}

// TestConformance20260728 runs the suite's 0.2.0 alpha, its only release
// with 2026-07-28 server scenarios (pinned in 2026-07-28/), with exactly
// the scenarios that revision requires, at its wire (`--requirements
// 2026-07-28`), against a real sandboxd.
func TestConformance20260728(t *testing.T) {
	s := installFrom(t, "2026-07-28", "conformance-2026-07-28")
	sd := harness.Start(t)
	expectedFile, err := filepath.Abs(filepath.Join("2026-07-28", "expected-failures.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	results := t.TempDir()
	out, err := s.run(t, "--url", sd.URL+"/mcp", "--requirements", "2026-07-28", "--expected-failures", expectedFile, "-o", results)
	if err != nil {
		t.Fatalf("conformance suite (2026-07-28) against sandboxd: %v\n%s", err, out)
	}
	checks := readChecks(t, results)
	// A check of a thing sandboxd has none of (resources) is skipped.
	requirePassed(t, checks, mustPass20260728, func(c check) bool { return strings.Contains(c.ErrorMessage, "returned no resources") })
	requireFixtureFailures(t, checks, expectedFile)
}

// requireFixtureFailures checks that every failed or warned check of a
// scenario the expected-failures file lists failed for want of its fixture
// (lacksFixture), so that a listed scenario cannot hide a real failure.
func requireFixtureFailures(t *testing.T, checks map[string][]check, expectedFile string) {
	t.Helper()
	expected, err := readExpected(expectedFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, scenario := range expected {
		for _, c := range checks[scenario] {
			if (c.Status == "FAILURE" || c.Status == "WARNING") && !lacksFixture(scenario, c.ErrorMessage) {
				t.Errorf("expected failure %s: check %s is %s for a reason other than a missing fixture: %s", scenario, c.ID, c.Status, c.ErrorMessage)
			}
		}
	}
}

// requirePassed checks that each of scenarios ran and passed every check
// (a skipped check only where skipOK says so): the suite's own baseline
// check would also pass if a scenario silently did not run.
func requirePassed(t *testing.T, checks map[string][]check, scenarios []string, skipOK func(check) bool) {
	t.Helper()
	for _, scenario := range scenarios {
		got, ok := checks[scenario]
		if !ok {
			t.Errorf("scenario %s did not run (results in %v)", scenario, keys(checks))
			continue
		}
		if len(got) == 0 {
			t.Errorf("scenario %s ran no checks", scenario)
		}
		for _, c := range got {
			if c.Status != "SUCCESS" && c.Status != "INFO" && !(c.Status == "SKIPPED" && skipOK(c)) {
				t.Errorf("scenario %s: check %s is %s: %s", scenario, c.ID, c.Status, c.ErrorMessage)
			}
		}
	}
}

// readExpected reads the scenario names of an expected-failures file (the
// suite's format: a list under "server:").
func readExpected(path string) ([]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, line := range strings.Split(string(data), "\n") {
		if name, ok := strings.CutPrefix(strings.TrimSpace(line), "- "); ok {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return nil, errors.New(path + " lists no scenario")
	}
	return names, nil
}

// TestConformanceBaselineEnforced checks that the baseline is enforced both
// ways: a failing scenario left out of the expected failures fails the run,
// and so does a listed scenario that passes.
func TestConformanceBaselineEnforced(t *testing.T) {
	s := install(t)
	sd := harness.Start(t)
	tests := map[string]struct {
		scenario, baseline, wantOutput string
	}{
		"new failure":    {scenario: "tools-call-simple-text", baseline: "server:\n  - tools-call-image\n", wantOutput: "Unexpected failures"},
		"stale baseline": {scenario: "ping", baseline: "server:\n  - ping\n", wantOutput: "Stale baseline"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			baseline := filepath.Join(t.TempDir(), "expected-failures.yaml")
			if err := os.WriteFile(baseline, []byte(tc.baseline), 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := s.run(t, "--url", sd.URL+"/mcp", "--scenario", tc.scenario, "--expected-failures", baseline)
			var exit *exec.ExitError
			if !errors.As(err, &exit) {
				t.Fatalf("the suite exited with %v on scenario %s with baseline %q, want a failure:\n%s", err, tc.scenario, tc.baseline, out)
			}
			if !strings.Contains(out, tc.wantOutput) || !strings.Contains(out, tc.scenario) {
				t.Errorf("the suite's output does not say %q about %s:\n%s", tc.wantOutput, tc.scenario, out)
			}
		})
	}
}

// check is one entry of a scenario's checks.json.
type check struct {
	ID           string `json:"id"`
	Status       string `json:"status"`
	ErrorMessage string `json:"errorMessage"`
}

// resultDir is the name of a scenario's results directory.
var resultDir = regexp.MustCompile(`^server-(.+)-\d{4}-\d{2}-\d{2}T[0-9-]+Z$`)

// readChecks reads the suite's results directory: one directory per
// scenario, named server-<scenario>-<timestamp>, holding checks.json.
func readChecks(t *testing.T, dir string) map[string][]check {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	checks := map[string][]check{}
	for _, e := range entries {
		m := resultDir.FindStringSubmatch(e.Name())
		if !e.IsDir() || m == nil {
			continue
		}
		name := m[1]
		data, err := os.ReadFile(filepath.Join(dir, e.Name(), "checks.json"))
		if err != nil {
			t.Fatal(err)
		}
		var cs []check
		if err := json.Unmarshal(data, &cs); err != nil {
			t.Fatalf("%s: %v", e.Name(), err)
		}
		checks[name] = append(checks[name], cs...)
	}
	return checks
}

func keys(m map[string][]check) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
