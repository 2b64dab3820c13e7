// Package tools is sandboxd's tools, one file per family: file.go (Read,
// Write), edit.go (Edit, MultiEdit), search.go (Glob, Grep), ls.go (LS),
// bash.go (Bash, BashOutput, KillShell), check.go, check_failures.go and
// tests.go (run_tests, run_lint, run_typecheck, run_failing_tests,
// last_test_failures), snapshot.go (snapshot_*), nav.go, rename.go and
// lsp_server.go (the language-server tools and the servers' manager),
// ast.go, coverage.go, script.go and searchcode.go (the code tools). The
// Toolbox is what they share (the workspace through internal/confine, read
// marks, process groups, background shells, the last test run, snapshots);
// toolSpecs lists them in canonical order (checked against pkg/toolnames);
// toolhandler.go and argscheck.go add a typed tool to a toolcall.Set as
// mcp.AddTool would, faster. The handlers are plain functions of their
// input, unit-tested as such. The package imports neither internal/wire nor
// pkg/sandboxd, which composes it with the wire.
package tools

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/confine"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/procgroup"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/snapshot"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/toolcall"
	"github.com/airlock-dev/airlock/pkg/toolnames"
)

// toolSpec describes one tool: its name (of pkg/toolnames, which says which
// tools are read-only, the only ones served with --readonly), and how it is
// added to an MCP server.
type toolSpec struct {
	name string
	add  func(s *toolcall.Set, tb *Toolbox)
}

// toolSpecs lists every tool, in the canonical order.
var toolSpecs = []toolSpec{
	{name: toolnames.Read, add: func(s *toolcall.Set, tb *Toolbox) {
		AddTool(s, &mcp.Tool{
			Name:        toolnames.Read,
			Description: "Read a text file of the workspace. Returns numbered lines (cat -n style), up to 2000 lines from offset; long lines are cut at 2000 bytes. Reading a file marks it read, which Write (to overwrite) and Edit require.",
			Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: ptr(false)},
			InputSchema: schemaFor[ReadInput](func(s *jsonschema.Schema) {
				s.Properties["offset"].Minimum = ptr(0.0)
				s.Properties["limit"].Minimum = ptr(0.0)
			}),
		}, tb.read)
	}},
	{name: toolnames.Write, add: func(s *toolcall.Set, tb *Toolbox) {
		AddTool(s, &mcp.Tool{
			Name: toolnames.Write,
			Description: "Write a file of the workspace with the given content, atomically (temporary file, fsync, rename), creating parent directories. Overwriting an existing file needs a prior Read of it. " +
				"A .go file that does not parse or is not gofmt-clean is reported in the result (lint); it is written all the same.",
			Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true), IdempotentHint: true, OpenWorldHint: ptr(false)},
		}, tb.write)
	}},
	{name: toolnames.Edit, add: func(s *toolcall.Set, tb *Toolbox) {
		AddTool(s, &mcp.Tool{
			Name: toolnames.Edit,
			Description: "Replace old_string with new_string in a file of the workspace. The file must have been Read first. old_string must occur exactly once, unless replace_all is set; no match or an ambiguous match is an error. " +
				"A .go file that does not parse or is not gofmt-clean afterwards is reported in the result (lint); the edit is made all the same.",
			Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true), OpenWorldHint: ptr(false)},
		}, tb.edit)
	}},
	{name: toolnames.Glob, add: func(s *toolcall.Set, tb *Toolbox) {
		AddTool(s, &mcp.Tool{
			Name:        toolnames.Glob,
			Description: "Find files of the workspace whose path matches a glob pattern (** matches any number of directories, {a,b} alternatives). Returns workspace-relative paths, newest first. .git directories are skipped unless the pattern names them; symlinked directories are not followed.",
			Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: ptr(false)},
			InputSchema: schemaFor[GlobInput](func(s *jsonschema.Schema) {
				s.Properties["limit"].Minimum = ptr(0.0)
				s.Properties["limit"].Maximum = ptr(float64(globMaxLimit))
			}),
		}, tb.glob)
	}},
	{name: toolnames.Grep, add: func(s *toolcall.Set, tb *Toolbox) {
		AddTool(s, &mcp.Tool{
			Name:        toolnames.Grep,
			Description: "Search the contents of workspace files with an RE2 regular expression, line by line. Output modes: files_with_matches (default), content (path:line:text), count. Skips .git directories and binary files; symlinked directories are not followed.",
			Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: ptr(false)},
			InputSchema: schemaFor[GrepInput](func(s *jsonschema.Schema) {
				s.Properties["output_mode"].Enum = []any{grepContent, grepFilesWithMatches, grepCount}
				s.Properties["head_limit"].Minimum = ptr(0.0)
			}),
		}, tb.grep)
	}},
	{name: toolnames.Bash, add: func(s *toolcall.Set, tb *Toolbox) {
		AddTool(s, &mcp.Tool{
			Name: toolnames.Bash,
			Description: "Run a command with /bin/bash -c in the workspace (stdin is empty). The command runs in its own process group, which is killed whole on timeout (exit code 124), on cancellation, and when the command exits, so nothing it started outlives it: " +
				"use run_in_background for servers and watchers. Output (stdout and stderr) is capped at 100 KiB, first and last halves kept. Timeout in milliseconds: default 120000, maximum 600000.",
			Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true), OpenWorldHint: ptr(true)},
			InputSchema: schemaFor[BashInput](func(s *jsonschema.Schema) {
				s.Properties["timeout"].Minimum = ptr(0.0)
				s.Properties["timeout"].Maximum = ptr(float64(bashMaxTimeout.Milliseconds()))
			}),
		}, tb.bash)
	}},
	{name: toolnames.BashOutput, add: func(s *toolcall.Set, tb *Toolbox) {
		AddTool(s, &mcp.Tool{
			Name:        toolnames.BashOutput,
			Description: "Read what a background shell (Bash with run_in_background) wrote since the last read, and its status. At most 1 MiB of unread output is kept per stream; older unread output is dropped and counted.",
			Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: ptr(false)},
		}, tb.bashOutput)
	}},
	{name: toolnames.KillShell, add: func(s *toolcall.Set, tb *Toolbox) {
		AddTool(s, &mcp.Tool{
			Name:        toolnames.KillShell,
			Description: "Kill a background shell: its whole process group.",
			Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true), IdempotentHint: true, OpenWorldHint: ptr(false)},
		}, tb.killShell)
	}},
	{name: toolnames.RunTests, add: func(s *toolcall.Set, tb *Toolbox) {
		addCheckTool(s, toolnames.RunTests, "Run the workspace's tests with its usual command (go test ./..., cargo test, npm test, python3 -m pytest -q), detected from the workspace or chosen by language. "+
			"The failing tests (package, test, file, line, message) are parsed from the whole output for go, rust, python and node (node --test, TAP or spec reporter, and jest), returned as failures and kept for last_test_failures and run_failing_tests.", tb.runTests)
	}},
	{name: toolnames.RunLint, add: func(s *toolcall.Set, tb *Toolbox) {
		addCheckTool(s, toolnames.RunLint, "Run the workspace's linter with its usual command (golangci-lint or go vet, cargo clippy, eslint, ruff or flake8), detected from the workspace or chosen by language.", tb.runLint)
	}},
	{name: toolnames.RunTypecheck, add: func(s *toolcall.Set, tb *Toolbox) {
		addCheckTool(s, toolnames.RunTypecheck, "Type-check the workspace with its usual command (go build ./..., cargo check, tsc --noEmit, mypy), detected from the workspace or chosen by language.", tb.runTypecheck)
	}},

	{name: toolnames.MultiEdit, add: func(s *toolcall.Set, tb *Toolbox) {
		AddTool(s, &mcp.Tool{
			Name: toolnames.MultiEdit,
			Description: "Make several edits to one file of the workspace, all or nothing: the edits (each an old_string, new_string and optional replace_all, as in Edit) apply in order, each to the result of the ones before, to a copy in memory; " +
				"if any edit fails (no match, an ambiguous match) nothing is written and the error names the edit. The file must have been Read first. A .go file that does not parse or is not gofmt-clean afterwards is reported in the result (lint); the edit is made all the same.",
			Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true), OpenWorldHint: ptr(false)},
			InputSchema: schemaFor[MultiEditInput](func(s *jsonschema.Schema) {
				s.Properties["edits"].MinItems = ptr(1)
			}),
		}, tb.multiEdit)
	}},
	{name: toolnames.LS, add: func(s *toolcall.Set, tb *Toolbox) {
		AddTool(s, &mcp.Tool{
			Name: toolnames.LS,
			Description: "List the tree below a directory of the workspace (default the workspace itself): directories end in /, symlinks show their target and are not followed. Nearest levels first, at most 1000 entries. " +
				"ignore takes glob patterns of entries to leave out and not descend into (matched against the name, or with a slash, the path below path). .git directories are listed but not descended into. Prefer Glob and Grep when you know what you look for.",
			Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: ptr(false)},
		}, tb.ls)
	}},
	{name: toolnames.SnapshotCreate, add: func(s *toolcall.Set, tb *Toolbox) {
		AddTool(s, &mcp.Tool{
			Name: toolnames.SnapshotCreate,
			Description: "Take a snapshot (checkpoint) of the whole workspace, git repository or not, with an optional label; returns its id (s1, s2, ...). " +
				"It runs alone (it waits for the tool calls in flight, later calls wait for it), so it holds the workspace as it was between two calls. Snapshots are kept in a git store outside the workspace: the workspace's own .git (HEAD, index, branches) is never touched, and ignored files are included. Left out: .git directories and nested repositories (a subdirectory with its own .git). File modes other than executable are not kept. Snapshots last as long as the sandbox's state directory.",
			Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(false), OpenWorldHint: ptr(false)},
		}, tb.snapshotCreate)
	}},
	{name: toolnames.SnapshotList, add: func(s *toolcall.Set, tb *Toolbox) {
		AddTool(s, &mcp.Tool{
			Name:        toolnames.SnapshotList,
			Description: "List the snapshots of the workspace, oldest first: id, time taken, label.",
			Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: ptr(false)},
		}, tb.snapshotList)
	}},
	{name: toolnames.SnapshotRestore, add: func(s *toolcall.Set, tb *Toolbox) {
		AddTool(s, &mcp.Tool{
			Name: toolnames.SnapshotRestore,
			Description: "Restore the workspace to a snapshot: files created since are removed, modified and deleted ones come back as they were; nested repositories and the workspace's own .git are left alone. " +
				"It runs alone: it waits for the tool calls in flight, and later calls wait for it, so none sees a half-restored workspace (background shells are not stopped: KillShell them first). " +
				"The state just before is saved as a new snapshot, whose id the result gives, so a restore can be undone. Files must be Read again before Write or Edit.",
			Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true), IdempotentHint: true, OpenWorldHint: ptr(false)},
		}, tb.snapshotRestore)
	}},
	{name: toolnames.SnapshotDiff, add: func(s *toolcall.Set, tb *Toolbox) {
		AddTool(s, &mcp.Tool{
			Name:        toolnames.SnapshotDiff,
			Description: "Show what changed from a snapshot (id) to another (to_id) or, by default, to the workspace as it is now: the files (added, modified, deleted, type_changed) and a unified diff, capped at 100 KiB with the elision said.",
			Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: ptr(false)},
		}, tb.snapshotDiff)
	}},
	{name: toolnames.RunFailingTests, add: func(s *toolcall.Set, tb *Toolbox) {
		AddTool(s, &mcp.Tool{
			Name: toolnames.RunFailingTests,
			Description: "Run again only the tests that failed in the last run_tests (or run_failing_tests): go test -run '^(TestA|TestB)$' on their packages (a package that did not build: all of it), cargo test -- --exact names, python3 -m pytest -q node ids. " +
				"Not for node workspaces. It runs like run_tests (own process group, killed on timeout or cancellation, output capped at 100 KiB) and returns the same structure, failures included. Timeout in milliseconds: default 300000, maximum 600000.",
			Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(false), OpenWorldHint: ptr(true)},
			InputSchema: schemaFor[RunFailingTestsInput](func(s *jsonschema.Schema) {
				s.Properties["timeout"].Minimum = ptr(0.0)
				s.Properties["timeout"].Maximum = ptr(float64(checkMaxTimeout.Milliseconds()))
			}),
		}, tb.runFailingTests)
	}},
	{name: toolnames.LastTestFailures, add: func(s *toolcall.Set, tb *Toolbox) {
		AddTool(s, &mcp.Tool{
			Name: toolnames.LastTestFailures,
			Description: "The failures of the last run_tests or run_failing_tests, without running anything: for each, the package, the test, the file and line it points at, and the runner's message (parsed for go, rust, python, node --test and jest; at most 200). " +
				"An error before any test run.",
			Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: ptr(false)},
		}, tb.lastTestFailures)
	}},
	{name: toolnames.FindDefinition, add: func(s *toolcall.Set, tb *Toolbox) {
		AddTool(s, &mcp.Tool{
			Name: toolnames.FindDefinition,
			Description: "Find where a symbol is defined, through the language server (Go: gopls; started on first use, so the first call can take a while). " + navPositionHelp +
				" Definitions outside the workspace (the standard library, dependencies) are counted, not shown.",
			Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: ptr(false)},
			InputSchema: schemaFor[FindDefinitionInput](navSchema),
		}, tb.findDefinition)
	}},
	{name: toolnames.FindReferences, add: func(s *toolcall.Set, tb *Toolbox) {
		AddTool(s, &mcp.Tool{
			Name: toolnames.FindReferences,
			Description: "Find every use of a symbol in the workspace, through the language server (Go: gopls; started on first use). " + navPositionHelp +
				" Returns file:line:column and the line, at most 500; uses outside the workspace are counted, not shown. include_declaration (default true) lists the declaration too.",
			Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: ptr(false)},
			InputSchema: schemaFor[FindReferencesInput](navSchema),
		}, tb.findReferences)
	}},
	{name: toolnames.RenameSymbol, add: func(s *toolcall.Set, tb *Toolbox) {
		AddTool(s, &mcp.Tool{
			Name: toolnames.RenameSymbol,
			Description: "Rename a symbol everywhere it is used, through the language server (Go: gopls), as a refactoring that keeps the code compiling. " + navPositionHelp +
				" The edits are applied to every file or to none (written atomically like Edit, no prior Read needed); a rename that would change a file outside the workspace, follow a symbolic link out of it, or create, move or delete files is refused and nothing is written. Files that were Read stay read.",
			Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true), OpenWorldHint: ptr(false)},
			InputSchema: schemaFor[RenameSymbolInput](navSchema),
		}, tb.renameSymbol)
	}},
	{name: toolnames.ChangeFunctionSignature, add: func(s *toolcall.Set, tb *Toolbox) {
		AddTool(s, &mcp.Tool{
			Name: toolnames.ChangeFunctionSignature,
			Description: "Replace the signature of one Go function or method (everything from func up to the body's opening brace) and keep its doc comment and body as they are. " + astEditHelp +
				" new_signature is the new declaration without its body, e.g. func (s *Server) Start(ctx context.Context, addr string) error; it may rename the function, but a function stays a function and a method a method. Callers are not updated: run run_typecheck to find them.",
			Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true), OpenWorldHint: ptr(false)},
		}, tb.changeFunctionSignature)
	}},
	{name: toolnames.EditFunctionBody, add: func(s *toolcall.Set, tb *Toolbox) {
		AddTool(s, &mcp.Tool{
			Name: toolnames.EditFunctionBody,
			Description: "Replace the body of one Go function or method, keeping its doc comment and signature: safer than Edit for a whole body (it cannot eat a brace or a neighbour). " + astEditHelp +
				" new_body is the statements without the enclosing braces; it must parse as the body of one function (it cannot close it and declare more).",
			Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true), OpenWorldHint: ptr(false)},
		}, tb.editFunctionBody)
	}},
	{name: toolnames.InsertAfterMethod, add: func(s *toolcall.Set, tb *Toolbox) {
		AddTool(s, &mcp.Tool{
			Name: toolnames.InsertAfterMethod,
			Description: "Insert a new Go method right after an existing method of the same type (receiver_type, method_name), separated by a blank line. " + astEditHelp +
				" new_method is one complete method declaration (doc comment allowed) on that same type; a method of that name already on the type in the file is refused.",
			Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true), OpenWorldHint: ptr(false)},
		}, tb.insertAfterMethod)
	}},
	{name: toolnames.TestsCovering, add: func(s *toolcall.Set, tb *Toolbox) {
		AddTool(s, &mcp.Tool{
			Name: toolnames.TestsCovering,
			Description: "Find which tests execute a Go file, one function or method of it, or one line, by running them: the package's test binary is built once with coverage (go test -c -cover), then each test of the file's own package runs alone (-test.run '^TestX$') with a coverage profile, and a test covers the target when its profile shows a block of the target's lines executed. " +
				"Only the tests of the file's package run (not tests in other packages that use it); at most 200 tests, each in its own process group, killed on timeout or cancellation. Results list every test run, whether it covers the target and whether it passed. Go only. Timeout in milliseconds for the build and the runs together: default 300000, maximum 600000.",
			Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(false), OpenWorldHint: ptr(true)},
			InputSchema: schemaFor[TestsCoveringInput](func(s *jsonschema.Schema) {
				s.Properties["line"].Minimum = ptr(0.0)
				s.Properties["timeout"].Minimum = ptr(0.0)
				s.Properties["timeout"].Maximum = ptr(float64(checkMaxTimeout.Milliseconds()))
			}),
		}, tb.testsCovering)
	}},
	{name: toolnames.RunScript, add: func(s *toolcall.Set, tb *Toolbox) {
		AddTool(s, &mcp.Tool{
			Name: toolnames.RunScript,
			Description: "Run a script the workspace declares, by name, without arguments: a script of package.json (npm run name; pnpm or yarn when their lock file is at the top), a target of the Makefile (make name) or a recipe of the justfile (just name), read from the top of the workspace. " +
				"A name none of them declares is refused, and the error lists what they declare; a name several declare needs source. It runs like run_tests: /bin/bash -c in the workspace, own process group, killed whole on timeout or cancellation, output capped at 100 KiB. A runner (npm, pnpm, yarn, make, just) that is not installed is an error that says so. Timeout in milliseconds: default 300000, maximum 600000.",
			Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true), OpenWorldHint: ptr(true)},
			InputSchema: schemaFor[RunScriptInput](func(s *jsonschema.Schema) {
				s.Properties["source"].Enum = []any{scriptNpm, scriptMake, scriptJust}
				s.Properties["timeout"].Minimum = ptr(0.0)
				s.Properties["timeout"].Maximum = ptr(float64(checkMaxTimeout.Milliseconds()))
			}),
		}, tb.runScript)
	}},
	{name: toolnames.SearchCode, add: func(s *toolcall.Set, tb *Toolbox) {
		AddTool(s, &mcp.Tool{
			Name: toolnames.SearchCode,
			Description: "Find where things are declared, by name (case-insensitive; exact names first, then names starting with query, then names containing it): Go functions, methods, types, struct fields, interface methods, constants and variables through the Go parser, with their signature and doc line; " +
				"in Python, JavaScript/TypeScript and Rust files the lines that declare the name (def, class, function, const, fn, struct, ...), as Go files that do not parse. Query Type.Name for a method or field of a type. Unlike Grep, it finds declarations, not every use, and says what kind of thing each is. " +
				"Skips .git, node_modules, vendor and target directories and files over 2 MiB; at most 500 results (default 50).",
			Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: ptr(false)},
			InputSchema: schemaFor[SearchCodeInput](func(s *jsonschema.Schema) {
				s.Properties["kind"].Enum = []any{symFunc, symMethod, symType, symField, symConst, symVar, symClass}
				s.Properties["limit"].Minimum = ptr(0.0)
				s.Properties["limit"].Maximum = ptr(float64(searchCodeMaxLimit))
			}),
		}, tb.searchCode)
	}},
}

// astEditHelp says what the AST edit tools share.
const astEditHelp = "Go only. function_name is Foo for a function, (*T).Foo, (T).Foo or T.Foo for a method (pointer or not does not matter); a plain name that several declarations share is ambiguous and refused. " +
	"The file must have been Read first, like Edit. The new code is parsed before anything is written; the file is then gofmt'ed and written atomically, and the result shows the declaration as written. " +
	"A file that is not Go, does not parse, lacks the symbol, or new code that does not parse is an error and nothing is written."

// navPositionHelp says how the navigation tools take a position.
const navPositionHelp = "The symbol is given by file_path and line (1-based, as Read numbers lines) and either column (1-based, in characters of the line; a tab is one) or symbol (its name as written on the line; with column too, the occurrence nearest it). " +
	"Without a language server for the file's language, or when it fails (crashes, does not answer within 60 s), the call is an error that says so; a failed server is started again on the next call."

// navSchema bounds the position fields of the navigation tools.
func navSchema(s *jsonschema.Schema) {
	s.Properties["line"].Minimum = ptr(1.0)
	s.Properties["column"].Minimum = ptr(0.0)
}

// addCheckTool adds one of run_tests, run_lint and run_typecheck.
func addCheckTool[In, Out any](s *toolcall.Set, name, description string, h toolcall.Handler[In, Out]) {
	AddTool(s, &mcp.Tool{
		Name:        name,
		Description: description + " It runs like Bash: own process group, killed whole on timeout or cancellation, output capped at 100 KiB. Timeout in milliseconds: default 300000, maximum 600000.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(false), OpenWorldHint: ptr(true)},
		InputSchema: schemaFor[In](func(s *jsonschema.Schema) {
			s.Properties["timeout"].Minimum = ptr(0.0)
			s.Properties["timeout"].Maximum = ptr(float64(checkMaxTimeout.Milliseconds()))
			s.Properties["language"].Enum = []any{"go", "node", "python", "rust"}
		}),
	}, h)
}

// Select returns the names of the tools to serve: all of them, or those
// in allowed (when it is not empty), less the mutating ones when readOnly is
// set. A name in allowed that is not a tool is an error.
func Select(allowed []string, readOnly bool) ([]string, error) {
	all := toolnames.All()
	var unknown []string
	for _, name := range allowed {
		if !slices.Contains(all, name) {
			unknown = append(unknown, fmt.Sprintf("%q", name))
		}
	}
	if len(unknown) > 0 {
		return nil, fmt.Errorf("unknown tool name(s) %s in allowed tools; known tools: %s", strings.Join(unknown, ", "), strings.Join(all, ", "))
	}
	var out []string
	for _, name := range all {
		if len(allowed) > 0 && !slices.Contains(allowed, name) {
			continue
		}
		if readOnly && !slices.Contains(toolnames.ReadOnlyNames(), name) {
			continue
		}
		out = append(out, name)
	}
	return out, nil
}

func ptr[T any](v T) *T { return &v }

// schemaFor infers the JSON schema of T and lets tweak add the constraints
// that struct tags cannot express (enums, bounds). It panics on a type that
// has no schema: a programming error, found at startup.
func schemaFor[T any](tweak func(*jsonschema.Schema)) *jsonschema.Schema {
	s, err := jsonschema.For[T](nil)
	if err != nil {
		panic(fmt.Sprintf("schema of %T: %v", *new(T), err))
	}
	tweak(s)
	return s
}

// AddTool adds a typed tool to s; its input and output schemas are inferred
// from In and Out. It behaves as mcp.AddTool, faster (addTypedTool).
func AddTool[In, Out any](s *toolcall.Set, t *mcp.Tool, h toolcall.Handler[In, Out]) {
	addTypedTool(s, t, h)
}

// Toolbox holds what the tool handlers share: the workspace, the read marks,
// the process groups and background shells they run.
type Toolbox struct {
	ws     *confine.Resolver
	reads  *readMarks
	procs  *procgroup.Groups
	shells *shellTable
	snaps  *snapshot.Store // nil: no snapshots
	tests  *testRecord
	nav    *langServers
}

// NewToolbox opens the workspace dir for the tools.
func NewToolbox(dir string) (*Toolbox, error) {
	ws, err := confine.NewResolver(dir)
	if err != nil {
		return nil, err
	}
	return &Toolbox{ws: ws, reads: newReadMarks(), procs: procgroup.NewGroups(), shells: newShellTable(), tests: &testRecord{}, nav: newLangServers(ws)}, nil
}

// Stop kills every process group (foreground calls and background shells)
// and refuses new ones, then waits, until ctx is done, for the background
// shells to be reaped.
func (tb *Toolbox) Stop(ctx context.Context) error {
	tb.procs.KillAll()
	return errors.Join(tb.nav.close(ctx), tb.shells.waitAll(ctx))
}

// Close kills what still runs and releases the workspace.
func (tb *Toolbox) Close() error {
	tb.procs.KillAll()
	ctx, cancel := context.WithTimeout(context.Background(), lspStopGrace)
	defer cancel()
	return errors.Join(tb.nav.close(ctx), tb.ws.Close())
}

// Add adds the tools named in served to set, in the canonical order, with
// their handlers on tb.
func Add(set *toolcall.Set, tb *Toolbox, served []string) {
	for _, spec := range toolSpecs {
		if slices.Contains(served, spec.name) {
			spec.add(set, tb)
		}
	}
}

// Workspace is the workspace the tools reach.
func (tb *Toolbox) Workspace() *confine.Resolver { return tb.ws }

// SetSnapshots gives the snapshot tools their store (nil: none); it is
// called once, before any tool call.
func (tb *Toolbox) SetSnapshots(store *snapshot.Store) { tb.snaps = store }

// RunningShells counts the background shells that run.
func (tb *Toolbox) RunningShells() int { return tb.shells.running() }

// ProcessGroups counts the process groups that run (foreground calls and
// background shells).
func (tb *Toolbox) ProcessGroups() int { return tb.procs.Count() }
