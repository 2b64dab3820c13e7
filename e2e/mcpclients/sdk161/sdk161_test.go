// Package sdk161 tests sandboxd with the official MCP Go SDK v1.6.1, whose
// SSE client sends initialize straight away (newer ones probe first).
package sdk161

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-dev/airlock/e2e/mcpclients/internal/harness"
)

func TestMain(m *testing.M) { os.Exit(harness.Main(m)) }

var allTools = []string{"Bash", "BashOutput", "Edit", "Glob", "Grep", "KillShell", "LS", "MultiEdit", "Read", "Write", "change_function_signature", "edit_function_body",
	"find_definition", "find_references", "insert_after_method", "last_test_failures", "rename_symbol", "run_failing_tests", "run_lint", "run_script", "run_tests", "run_typecheck",
	"search_code", "snapshot_create", "snapshot_diff", "snapshot_list", "snapshot_restore", "tests_covering"}

func connect(t *testing.T, tr mcp.Transport) *mcp.ClientSession {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background()) // the SSE stream lives on it
	t.Cleanup(cancel)
	type result struct {
		cs  *mcp.ClientSession
		err error
	}
	ch := make(chan result, 1)
	go func() {
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "sdk-v1.6.1", Version: "v0"}, nil).Connect(ctx, tr, nil)
		ch <- result{cs, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("connect: %v", r.err)
		}
		t.Cleanup(func() { r.cs.Close() })
		return r.cs
	case <-t.Context().Done():
		t.Fatal("test ended")
	case <-time.After(harness.Timeout):
		t.Fatal("connect did not finish in time")
	}
	return nil
}

func call(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), harness.Timeout)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	if res.IsError {
		t.Fatalf("%s(%v) failed: %s", name, args, b.String())
	}
	return b.String()
}

func roundTrip(t *testing.T, cs *mcp.ClientSession, ws, dir string) {
	t.Helper()
	res, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatalf("tools/list: %v", err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
	}
	slices.Sort(names)
	if !slices.Equal(names, allTools) {
		t.Errorf("tools/list = %v, want %v", names, allTools)
	}
	file := dir + "/main.go"
	call(t, cs, "Write", map[string]any{"file_path": file, "content": "package main\n\nfunc main() { println(\"v1.6.1\") }\n"})
	if got := call(t, cs, "Read", map[string]any{"file_path": ws + "/" + file}); !strings.Contains(got, "     3\tfunc main() { println(\"v1.6.1\") }") {
		t.Errorf("Read answered %q", got)
	}
	call(t, cs, "Edit", map[string]any{"file_path": file, "old_string": `"v1.6.1"`, "new_string": `"edited"`})
	if got := call(t, cs, "Grep", map[string]any{"pattern": "edited", "path": dir}); got != file+"\n" {
		t.Errorf("Grep answered %q", got)
	}
	if got := call(t, cs, "Bash", map[string]any{"command": "grep -c edited " + file}); got != "1\n" {
		t.Errorf("Bash answered %q", got)
	}

	// The tools of issue 15: a checkpoint, MultiEdit with gofmt feedback,
	// LS, the diff, a restore, and a secret scrubbed from a result.
	if got := call(t, cs, "snapshot_create", map[string]any{"label": "before MultiEdit"}); !strings.Contains(got, "Snapshot s1 taken") {
		t.Errorf("snapshot_create answered %q", got)
	}
	got := call(t, cs, "MultiEdit", map[string]any{"file_path": file, "edits": []map[string]any{
		{"old_string": "func main()", "new_string": "func  main()"},
		{"old_string": `"edited"`, "new_string": `"multi"`, "replace_all": true},
	}})
	if !strings.Contains(got, "2 edit(s), 2 replacement(s)") || !strings.Contains(got, "not gofmt-clean") {
		t.Errorf("MultiEdit answered %q", got)
	}
	if got := call(t, cs, "LS", map[string]any{"path": dir, "ignore": []string{"*.txt"}}); got != dir+"/\n  - main.go\n" {
		t.Errorf("LS answered %q", got)
	}
	if got := call(t, cs, "snapshot_diff", map[string]any{"id": "s1"}); !strings.Contains(got, "modified\t"+file) || !strings.Contains(got, `+func  main() { println("multi") }`) {
		t.Errorf("snapshot_diff answered %q", got)
	}
	if got := call(t, cs, "snapshot_restore", map[string]any{"id": "s1"}); !strings.Contains(got, "snapshot s2") {
		t.Errorf("snapshot_restore answered %q", got)
	}
	if got := call(t, cs, "Bash", map[string]any{"command": "cat " + file}); got != "package main\n\nfunc main() { println(\"edited\") }\n" {
		t.Errorf("after the restore the file is %q", got)
	}
	if got := call(t, cs, "snapshot_list", map[string]any{}); !strings.Contains(got, "s1\t") || !strings.Contains(got, `"before restoring s1"`) {
		t.Errorf("snapshot_list answered %q", got)
	}
	// The test loop: a failing Go test, its structured failure, and a run
	// of only the failing tests.
	call(t, cs, "Write", map[string]any{"file_path": "go.mod", "content": "module example.com/e2e\n\ngo 1.22\n"})
	call(t, cs, "Write", map[string]any{"file_path": dir + "/x_test.go", "content": "package main\n\nimport \"testing\"\n\nfunc TestFails(t *testing.T) { t.Error(\"on purpose\") }\n"})
	if got := call(t, cs, "run_tests", map[string]any{"timeout": 300000}); !strings.Contains(got, "go tests (FAILED)") {
		t.Errorf("run_tests answered %q", got)
	}
	wantFailure := "example.com/e2e/" + dir + " TestFails (" + dir + "/x_test.go:5) on purpose"
	if got := call(t, cs, "last_test_failures", map[string]any{}); !strings.Contains(got, wantFailure) {
		t.Errorf("last_test_failures answered %q, want it to list %q", got, wantFailure)
	}
	if got := call(t, cs, "run_failing_tests", map[string]any{}); !strings.Contains(got, "$ go test -run '^(TestFails)$' 'example.com/e2e/"+dir+"'") || !strings.Contains(got, wantFailure) {
		t.Errorf("run_failing_tests answered %q", got)
	}

	// The code tools: an AST edit, search_code, tests_covering, run_script.
	call(t, cs, "Read", map[string]any{"file_path": file})
	if got := call(t, cs, "edit_function_body", map[string]any{"file_path": file, "function_name": "main", "new_body": `println("ast")`}); !strings.Contains(got, "Replaced the body of main in "+file+" (lines 3-5, gofmt'ed)") {
		t.Errorf("edit_function_body answered %q", got)
	}
	if got := callError(t, cs, "edit_function_body", map[string]any{"file_path": file, "function_name": "nope", "new_body": ""}); !strings.Contains(got, "function nope not found in "+file) {
		t.Errorf("edit_function_body of a missing function answered %q", got)
	}
	if got := call(t, cs, "search_code", map[string]any{"query": "main", "kind": "func", "path": dir}); got != file+":3:6: func main: func main()" {
		t.Errorf("search_code answered %q", got)
	}
	if got := call(t, cs, "tests_covering", map[string]any{"file_path": file, "function": "main"}); !strings.HasPrefix(got, "None of the 1 tests run in "+dir+" executes main in "+file+" (lines 3-5)") {
		t.Errorf("tests_covering answered %q", got)
	}
	call(t, cs, "Write", map[string]any{"file_path": "Makefile", "content": "hello:\n\t@echo hello-from-make\n"})
	if got := call(t, cs, "run_script", map[string]any{"name": "hello"}); !strings.Contains(got, "hello-from-make") {
		t.Errorf("run_script answered %q", got)
	}
	if got := callError(t, cs, "run_script", map[string]any{"name": "deploy"}); !strings.Contains(got, `no script named "deploy" is declared; declared: make: hello`) {
		t.Errorf("run_script of an undeclared name answered %q", got)
	}

	const token = "ghp_R2d2C3poLuke0Leia1Han2Chewie3Yoda4xy" // fake
	if got := call(t, cs, "Bash", map[string]any{"command": "echo GH_TOKEN=" + token}); got != "GH_TOKEN=[REDACTED:github_token]\n" {
		t.Errorf("a secret in Bash's output came back as %q", got)
	}
}

func TestSDK161SSEClient(t *testing.T) {
	sd := harness.Start(t)
	cs := connect(t, &mcp.SSEClientTransport{Endpoint: sd.URL + "/sse"})
	if v := cs.InitializeResult().ProtocolVersion; v == "" {
		t.Error("no protocol version negotiated")
	}
	roundTrip(t, cs, sd.Workspace, "sse")
}

func TestSDK161StreamableClient(t *testing.T) {
	sd := harness.Start(t)
	cs := connect(t, &mcp.StreamableClientTransport{Endpoint: sd.URL + "/mcp"})
	roundTrip(t, cs, sd.Workspace, "streamable")
}
