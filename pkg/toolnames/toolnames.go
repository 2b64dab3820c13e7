// Package toolnames is the one list of sandboxd's tool names (SPEC section 6). sandboxd serves
// these tools and validates --allowed-tools against them; the claim controller writes the full
// list into a claim's frozen record when its registry entry allows every tool, so that sandboxd
// is always started with an explicit list. The v1alpha1.ToolName enum must name the same tools
// (a test here checks the CRD against All).
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

// All returns every tool name, in canonical order (a fresh slice each call).
func All() []string {
	return []string{Read, Write, Edit, Glob, Grep, Bash, BashOutput, KillShell, RunTests, RunLint, RunTypecheck,
		MultiEdit, LS, SnapshotCreate, SnapshotList, SnapshotRestore, SnapshotDiff, RunFailingTests, LastTestFailures,
		FindDefinition, FindReferences, RenameSymbol, ChangeFunctionSignature, EditFunctionBody, InsertAfterMethod,
		TestsCovering, RunScript, SearchCode}
}
