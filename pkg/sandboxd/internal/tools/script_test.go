package tools

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	gocmp "github.com/google/go-cmp/cmp"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/procgroup"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/sandboxdtest"
)

func TestScriptFileParsing(t *testing.T) {
	makefile := `# A makefile.
VAR := x
OTHER ::= y
export PATH := $(PATH)
.PHONY: build test
.DEFAULT_GOAL := build

build: deps ## Build it.
	go build ./...
test unit-test: build
	go test ./...
%.o: %.c
	cc -c $<
$(OUT)/bin: build
	cp x $@
docs/site.html:
	true
lint:: ; echo lint
	: not a target: inside a recipe
`
	if d := gocmp.Diff([]string{"build", "test", "unit-test", "docs/site.html", "lint"}, makeTargets([]byte(makefile))); d != "" {
		t.Errorf("make targets (-want +got):\n%s", d)
	}
	justfile := `set shell := ["bash", "-c"]
alias b := build
version := "1"

# Build it.
build:
    go build ./...

@test target='./...': build
    go test {{target}}

deploy env *flags:
    echo {{env}}
`
	if d := gocmp.Diff([]string{"build", "test", "deploy"}, justRecipes([]byte(justfile))); d != "" {
		t.Errorf("just recipes (-want +got):\n%s", d)
	}
}

// newScriptWorkspace writes a package.json and a Makefile that both
// declare "both".
func newScriptWorkspace(t *testing.T) (*Toolbox, string) {
	t.Helper()
	tb, ws := newTestToolbox(t)
	sandboxdtest.WriteFile(t, filepath.Join(ws, "package.json"), `{"name":"x","version":"1.0.0","scripts":{"hello":"echo hello-from-npm","fail":"exit 3","both":"echo npm-both","test:unit":"echo unit"}}`+"\n")
	sandboxdtest.WriteFile(t, filepath.Join(ws, "Makefile"), "greet:\n\t@echo hello-from-make in $$PWD\nboth:\n\t@echo make-both\nslow:\n\t@sleep 60\n")
	return tb, ws
}

func TestRunScript(t *testing.T) {
	tb, ws := newScriptWorkspace(t)
	_, out, err := tb.runScript(t.Context(), RunScriptInput{Name: "greet"})
	if err != nil {
		t.Fatal(err)
	}
	// (Under make, as make test-unit runs it, the output also says which directory make entered.)
	if out.Source != "make" || out.Command != "make 'greet'" || !out.Passed || !strings.Contains(out.Output, "hello-from-make in "+ws+"\n") {
		t.Errorf("make greet: %+v", out)
	}
	_, out, err = tb.runScript(t.Context(), RunScriptInput{Name: "both", Source: "make"})
	if err != nil || !strings.Contains(out.Output, "make-both\n") || strings.Contains(out.Output, "npm-both") {
		t.Errorf("make both: %+v, %v", out, err)
	}
	if _, err := exec.LookPath("npm"); err != nil {
		t.Logf("npm is not installed (%v): its scripts were not run", err)
		return
	}
	res, out, err := tb.runScript(t.Context(), RunScriptInput{Name: "hello"})
	if err != nil {
		t.Fatal(err)
	}
	if out.Source != "npm" || out.Command != "npm run 'hello'" || !out.Passed || !strings.Contains(out.Output, "hello-from-npm") {
		t.Errorf("npm hello: %+v", out)
	}
	if text := resultText(t, res); !strings.HasPrefix(text, "$ npm run 'hello'\n") || !strings.HasSuffix(text, "npm script hello: passed") {
		t.Errorf("text %q", text)
	}
	_, out, err = tb.runScript(t.Context(), RunScriptInput{Name: "fail"})
	if err != nil || out.Passed || out.ExitCode != 3 {
		t.Errorf("npm fail: %+v, %v", out, err)
	}
	_, out, err = tb.runScript(t.Context(), RunScriptInput{Name: "test:unit"})
	if err != nil || !out.Passed || !strings.Contains(out.Output, "unit") {
		t.Errorf("npm test:unit: %+v, %v", out, err)
	}
}

// TestRunScriptTimeout: a script past its timeout is killed with its
// process group, and says so.
func TestRunScriptTimeout(t *testing.T) {
	tb, _ := newScriptWorkspace(t)
	res, out, err := tb.runScript(t.Context(), RunScriptInput{Name: "slow", Timeout: 1000}) // ms: 300 would be seconds (timeoutFrom)
	if err != nil {
		t.Fatal(err)
	}
	if !out.TimedOut || out.ExitCode != procgroup.ExitTimedOut || out.Passed {
		t.Errorf("slow: %+v", out)
	}
	if !strings.Contains(resultText(t, res), "timed out after 1s") {
		t.Errorf("text %q", resultText(t, res))
	}
	if n := tb.procs.Count(); n != 0 {
		t.Errorf("%d process groups still run", n)
	}
}

func TestRunScriptErrors(t *testing.T) {
	tb, ws := newScriptWorkspace(t)
	for in, want := range map[RunScriptInput]string{
		{Name: ""}:                           "name is empty",
		{Name: "greet; rm -rf /"}:            "is not a script name",
		{Name: "-f"}:                         "is not a script name",
		{Name: "$(id)"}:                      "is not a script name",
		{Name: "greet", Source: "cargo"}:     "source must be one of npm, make, just",
		{Name: "greet", Timeout: 10_000_000}: "above the maximum",
		{Name: "both"}:                       `"both" is declared by several script files (npm, make): say which with source`,
		{Name: "deploy"}:                     `no script named "deploy" is declared; declared: npm: both, fail, hello, test:unit; make: both, greet, slow`,
		{Name: "greet", Source: "just"}:      `no script named "greet" is declared by just: the workspace has no package.json, Makefile or justfile at its top for just`,
	} {
		_, _, err := tb.runScript(t.Context(), in)
		sandboxdtest.WantErrContaining(t, err, want)
	}
	sandboxdtest.WriteFile(t, filepath.Join(ws, "package.json"), "{not json")
	_, _, err := tb.runScript(t.Context(), RunScriptInput{Name: "hello"})
	sandboxdtest.WantErrContaining(t, err, "package.json does not parse as JSON")
}

// TestConfinementOfRunScript: script files that are links out of the
// workspace are not read, so what they declare cannot be run.
func TestConfinementOfRunScript(t *testing.T) {
	f := newEscapeFixture(t)
	sandboxdtest.WriteFile(t, filepath.Join(f.outside, "Makefile"), "pwn:\n\techo "+secret+" > pwned\n")
	sandboxdtest.WriteFile(t, filepath.Join(f.outside, "package.json"), `{"scripts":{"pwn":"echo `+secret+` > pwned"}}`)
	sandboxdtest.MustSymlink(t, "../outside/Makefile", filepath.Join(f.ws, "Makefile"))
	sandboxdtest.MustSymlink(t, filepath.Join(f.outside, "package.json"), filepath.Join(f.ws, "package.json"))
	_, out, err := f.tb.runScript(t.Context(), RunScriptInput{Name: "pwn"})
	if err == nil {
		t.Fatalf("run_script ran a script declared outside the workspace: %+v", out)
	}
	if strings.Contains(err.Error(), secret) {
		t.Errorf("error leaks the secret: %v", err)
	}
	if !strings.Contains(err.Error(), "refused") {
		t.Errorf("error %q does not say the links were refused", err)
	}
	if _, err := os.Stat(filepath.Join(f.ws, "pwned")); err == nil {
		t.Error("the script ran")
	}
	f.checkOutsideUntouched2(t, "Makefile", "package.json")
}

// TestRunScriptWithoutItsRunner: a script whose runner the image lacks is
// a tool error that names it, not an exit code 127 to puzzle over.
func TestRunScriptWithoutItsRunner(t *testing.T) {
	tb, ws := newScriptWorkspace(t)
	sandboxdtest.WriteFile(t, filepath.Join(ws, "justfile"), "deploy:\n    echo deploying\n")
	t.Setenv("PATH", t.TempDir()) // nothing on it
	_, _, err := tb.runScript(t.Context(), RunScriptInput{Name: "deploy"})
	sandboxdtest.WantErrContaining(t, err, `just is not installed in this sandbox (not on PATH), so "deploy" (just) cannot run`)
	_, _, err = tb.runScript(t.Context(), RunScriptInput{Name: "greet"})
	sandboxdtest.WantErrContaining(t, err, "make is not installed in this sandbox")
}
