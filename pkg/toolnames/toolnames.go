// Package toolnames is the one list of sandboxd's tool names (SPEC section 6). sandboxd serves
// these tools and validates --allowed-tools against them; the claim controller writes the full
// list into a claim's frozen record when its registry entry allows every tool, so that sandboxd
// is always started with an explicit list. The v1alpha1.ToolName enum must name the same tools
// (a test here checks the CRD against All).
//
// Every other list of the tools (sandboxd's tool specs, the read-only set,
// the package docs, docs/sandboxd-tools.md, the CRD enum marker and the CRD)
// is checked against All by a test.
//
// It imports nothing, so that the API-side code and sandboxd can both depend on it.
package toolnames

// The tool names, as agents already know them.
const (
	Read             = "Read"
	Write            = "Write"
	Edit             = "Edit"
	Glob             = "Glob"
	Grep             = "Grep"
	Bash             = "Bash"
	BashOutput       = "BashOutput"
	KillShell        = "KillShell"
	RunTests         = "run_tests"
	RunLint          = "run_lint"
	RunTypecheck     = "run_typecheck"
	MultiEdit        = "MultiEdit"
	LS               = "LS"
	SnapshotCreate   = "snapshot_create"
	SnapshotList     = "snapshot_list"
	SnapshotRestore  = "snapshot_restore"
	SnapshotDiff     = "snapshot_diff"
	RunFailingTests  = "run_failing_tests"
	LastTestFailures = "last_test_failures"
	FindDefinition   = "find_definition"
	FindReferences   = "find_references"
	RenameSymbol     = "rename_symbol"
	// The AST edit tools for Go.
	ChangeFunctionSignature = "change_function_signature"
	EditFunctionBody        = "edit_function_body"
	InsertAfterMethod       = "insert_after_method"
	TestsCovering           = "tests_covering"
	RunScript               = "run_script"
	SearchCode              = "search_code"
)

// readOnly are the tools that change nothing (no command runs, no file is
// written): the only ones sandboxd serves with --readonly.
var readOnly = map[string]bool{
	Read: true, Glob: true, Grep: true, LS: true, SnapshotList: true, SnapshotDiff: true, LastTestFailures: true,
	FindDefinition: true, FindReferences: true, SearchCode: true,
}

// All returns every tool name, in canonical order (a fresh slice each call).
func All() []string {
	return []string{Read, Write, Edit, Glob, Grep, Bash, BashOutput, KillShell, RunTests, RunLint, RunTypecheck,
		MultiEdit, LS, SnapshotCreate, SnapshotList, SnapshotRestore, SnapshotDiff, RunFailingTests, LastTestFailures,
		FindDefinition, FindReferences, RenameSymbol, ChangeFunctionSignature, EditFunctionBody, InsertAfterMethod,
		TestsCovering, RunScript, SearchCode}
}

// ReadOnly reports whether the tool changes nothing: it runs no command
// and writes no file (BashOutput only reads, but serves Bash's background
// shells, so it is not read-only).
func ReadOnly(name string) bool { return readOnly[name] }

// ReadOnlyNames returns the read-only tools, in canonical order.
func ReadOnlyNames() []string {
	var out []string
	for _, name := range All() {
		if readOnly[name] {
			out = append(out, name)
		}
	}
	return out
}
