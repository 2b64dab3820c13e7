package tools

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/procgroup"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/wsscan"
)

// run_script runs a script that the workspace declares, by name: a script
// of package.json (npm run, or pnpm/yarn run when their lock file is there),
// a target of the Makefile (make), or a recipe of the justfile (just). A
// name that the files at the top of the workspace do not declare is
// refused, so with run_script allowed and Bash not, an agent runs only
// what the project declares. No arguments are passed: the script runs as
// declared.

const (
	// scriptFileMaxBytes bounds a package.json, Makefile or justfile read.
	scriptFileMaxBytes = 1 << 20
)

// The kinds of script file run_script reads.
const (
	scriptNpm  = "npm"
	scriptMake = "make"
	scriptJust = "just"
)

// RunScriptInput is the input of the run_script tool.
type RunScriptInput struct {
	Name    string `json:"name" jsonschema:"the script to run, as the workspace declares it: a key of package.json's scripts, a Makefile target or a justfile recipe"`
	Source  string `json:"source,omitempty" jsonschema:"npm (package.json), make (Makefile) or just (justfile); needed only when several of them declare name"`
	Timeout int    `json:"timeout,omitempty" jsonschema:"timeout in milliseconds, or in seconds when 600 or less (CodeGen-Sandbox's unit); default 300000 (5 minutes), maximum 600000 (10 minutes)"`
}

// RunScriptOutput is the structured result of the run_script tool.
type RunScriptOutput struct {
	Source     string `json:"source" jsonschema:"where the script is declared: npm, make or just"`
	Name       string `json:"name" jsonschema:"the script run"`
	Command    string `json:"command" jsonschema:"the command that ran, with /bin/bash -c in the workspace"`
	Passed     bool   `json:"passed" jsonschema:"true when the command exited 0"`
	ExitCode   int    `json:"exit_code" jsonschema:"exit code of the command; 124 when it timed out"`
	TimedOut   bool   `json:"timed_out,omitempty" jsonschema:"true when the timeout killed the command's process group"`
	Output     string `json:"output,omitempty" jsonschema:"stdout and stderr, interleaved; capped at 100 KiB with the elision said"`
	DurationMs int64  `json:"duration_ms" jsonschema:"how long the command ran, in milliseconds"`
}

// scriptName is what a script's name may be: npm's names (test:unit,
// build-prod, @scope/x is not one), make's targets and just's recipes,
// never an option.
var scriptName = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.:/+@-]*$`)

// scriptFiles are the files run_script reads, per source, in the order
// each tool looks for them.
var scriptFiles = map[string][]string{
	scriptNpm:  {"package.json"},
	scriptMake: {"GNUmakefile", "makefile", "Makefile"},
	scriptJust: {"justfile", "Justfile", ".justfile"},
}

var scriptSources = []string{scriptNpm, scriptMake, scriptJust}

// runScript is the run_script tool.
func (tb *Toolbox) runScript(ctx context.Context, in RunScriptInput) (*mcp.CallToolResult, RunScriptOutput, error) {
	timeout, err := timeoutFrom(in.Timeout, checkDefaultTimeout, checkMaxTimeout)
	if err != nil {
		return nil, RunScriptOutput{}, err
	}
	if in.Source != "" && !slices.Contains(scriptSources, in.Source) {
		return nil, RunScriptOutput{}, fmt.Errorf("source must be one of %s; got %q", strings.Join(scriptSources, ", "), in.Source)
	}
	if in.Name == "" {
		return nil, RunScriptOutput{}, errors.New("name is empty: give the name of a script the workspace declares")
	}
	if !scriptName.MatchString(in.Name) {
		return nil, RunScriptOutput{}, fmt.Errorf("name %q is not a script name (letters, digits and _ . : / + @ -, not starting with -): run_script runs declared scripts only, without arguments", in.Name)
	}
	declared := map[string][]string{} // source → names
	var found []string                // sources that declare the name
	var readErrs []string
	for _, src := range scriptSources {
		if in.Source != "" && src != in.Source {
			continue
		}
		names, file, err := tb.declaredScripts(src)
		if err != nil {
			readErrs = append(readErrs, err.Error())
			continue
		}
		if file == "" {
			continue
		}
		declared[src] = names
		if slices.Contains(names, in.Name) {
			found = append(found, src)
		}
	}
	switch {
	case len(found) > 1:
		return nil, RunScriptOutput{}, fmt.Errorf("%q is declared by several script files (%s): say which with source", in.Name, strings.Join(found, ", "))
	case len(found) == 0:
		return nil, RunScriptOutput{}, notDeclared(in.Name, in.Source, declared, readErrs)
	}
	src := found[0]
	command, runner, err := tb.scriptCommand(src, in.Name)
	if err != nil {
		return nil, RunScriptOutput{}, err
	}
	if _, err := exec.LookPath(runner); err != nil {
		return nil, RunScriptOutput{}, fmt.Errorf("%s is not installed in this sandbox (not on PATH), so %q (%s) cannot run: use an image that has it", runner, in.Name, src)
	}
	since := wsscan.Now()
	res, err := procgroup.RunForeground(ctx, tb.procs, tb.ws.Dir(), command, timeout)
	if err != nil {
		return nil, RunScriptOutput{}, err
	}
	recordProcess(ctx, command, since, res)
	if res.Canceled {
		return nil, RunScriptOutput{}, fmt.Errorf("cancelled after %v: the command's process group was killed", res.Elapsed.Round(time.Millisecond))
	}
	out := RunScriptOutput{Source: src, Name: in.Name, Command: command, Passed: res.ExitCode == 0 && !res.TimedOut,
		ExitCode: res.ExitCode, TimedOut: res.TimedOut, Output: res.Output, DurationMs: res.Elapsed.Milliseconds()}
	verdict := "passed"
	if !out.Passed {
		verdict = "FAILED"
	}
	text := fmt.Sprintf("$ %s\n%s\n%s script %s: %s", command, contentTextOf(commandResult(res, timeout)), src, in.Name, verdict)
	return textResult(text), out, nil
}

// notDeclared is the error for a name no script file declares: it lists
// what is declared.
func notDeclared(name, source string, declared map[string][]string, readErrs []string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "no script named %q is declared", name)
	if source != "" {
		fmt.Fprintf(&b, " by %s", source)
	}
	if len(declared) == 0 {
		b.WriteString(": the workspace has no package.json, Makefile or justfile at its top")
		if source != "" {
			fmt.Fprintf(&b, " for %s", source)
		}
	} else {
		b.WriteString("; declared:")
		for _, src := range scriptSources {
			names, ok := declared[src]
			if !ok {
				continue
			}
			shown := names
			if len(shown) > 50 {
				shown = append(slices.Clone(shown[:50]), fmt.Sprintf("... %d more", len(names)-50))
			}
			if len(shown) == 0 {
				shown = []string{"(none)"}
			}
			fmt.Fprintf(&b, " %s: %s;", src, strings.Join(shown, ", "))
		}
	}
	for _, e := range readErrs {
		b.WriteString(" " + e + ";")
	}
	return errors.New(strings.TrimSuffix(b.String(), ";"))
}

// declaredScripts reads the script file of src at the top of the
// workspace and returns the names it declares, sorted, and the file read
// ("" when there is none).
func (tb *Toolbox) declaredScripts(src string) ([]string, string, error) {
	for _, file := range scriptFiles[src] {
		data, err := tb.readTopFile(file)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, "", err
		}
		var names []string
		switch src {
		case scriptNpm:
			var pkg struct {
				Scripts map[string]json.RawMessage `json:"scripts"`
			}
			if err := json.Unmarshal(data, &pkg); err != nil {
				return nil, "", fmt.Errorf("%s does not parse as JSON: %v", file, err)
			}
			for n := range pkg.Scripts {
				names = append(names, n)
			}
		case scriptMake:
			names = makeTargets(data)
		case scriptJust:
			names = justRecipes(data)
		}
		slices.Sort(names)
		return slices.Compact(names), file, nil
	}
	return nil, "", nil
}

// readTopFile reads a regular file at the top of the workspace, through the
// root (a link out of the workspace is refused), at most scriptFileMaxBytes.
func (tb *Toolbox) readTopFile(name string) ([]byte, error) {
	if _, err := tb.ws.Root().Lstat(name); err != nil {
		return nil, err
	}
	rel, err := tb.ws.ResolveFinal(name)
	if err != nil {
		return nil, err
	}
	f, fi, err := tb.ws.OpenRegular(rel)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi.Size() > scriptFileMaxBytes {
		return nil, fmt.Errorf("%s is %d bytes, more than run_script reads (%d)", name, fi.Size(), scriptFileMaxBytes)
	}
	return io.ReadAll(io.LimitReader(f, scriptFileMaxBytes))
}

var (
	// makeRule is a rule line: targets, then a colon that is not part of
	// an assignment (:=, ::=, :::=).
	makeRule = regexp.MustCompile(`^([^\s:#=][^:#=]*?)\s*::?(?:[^:=]|$)`)
	// justRecipe is a recipe line: an optional @, the name, parameters,
	// a colon that is not :=.
	justRecipe = regexp.MustCompile(`^@?([A-Za-z_][A-Za-z0-9_-]*)(?:\s+[^:]*)?\s*:(?:[^=]|$)`)
)

// makeTargets returns the explicit targets of a Makefile's rules: not
// pattern rules (%), special targets (.PHONY) or variable references.
// Included makefiles are not read.
func makeTargets(data []byte) []string {
	var names []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), scriptFileMaxBytes)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "\t") {
			continue // a recipe line
		}
		m := makeRule.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		for _, t := range strings.Fields(m[1]) {
			if strings.ContainsAny(t, "%$()") || strings.HasPrefix(t, ".") || !scriptName.MatchString(t) {
				continue
			}
			names = append(names, t)
		}
	}
	return names
}

// justRecipes returns the recipes of a justfile.
func justRecipes(data []byte) []string {
	var names []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), scriptFileMaxBytes)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, " ") || strings.HasPrefix(line, "\t") || strings.HasPrefix(line, "#") {
			continue
		}
		if m := justRecipe.FindStringSubmatch(line); m != nil {
			switch m[1] {
			case "set", "export", "alias", "import", "mod":
				continue
			}
			names = append(names, m[1])
		}
	}
	return names
}

// scriptCommand is the command that runs the script name of src, name
// quoted, and the program it runs.
func (tb *Toolbox) scriptCommand(src, name string) (command, runner string, err error) {
	switch src {
	case scriptNpm:
		runner = "npm"
		for _, lock := range []struct{ file, runner string }{{"pnpm-lock.yaml", "pnpm"}, {"yarn.lock", "yarn"}} {
			if fi, err := tb.ws.Root().Lstat(lock.file); err == nil && fi.Mode().IsRegular() {
				runner = lock.runner
				break
			}
		}
		return runner + " run " + shellQuote(name), runner, nil
	case scriptMake:
		return "make " + shellQuote(name), "make", nil
	case scriptJust:
		return "just " + shellQuote(name), "just", nil
	}
	return "", "", fmt.Errorf("unknown script source %q", src)
}
