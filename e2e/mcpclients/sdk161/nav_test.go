package sdk161

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-dev/airlock/e2e/mcpclients/internal/harness"
)

// callError calls a tool that must fail and returns the text of its tool
// error.
func callError(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), harness.Timeout)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: a protocol error, want a tool error: %v", name, err)
	}
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	if !res.IsError {
		t.Fatalf("%s(%v) succeeded, want a tool error: %s", name, args, b.String())
	}
	return b.String()
}

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// pathWithout returns PATH less the directories that hold gopls.
func pathWithout() string {
	var keep []string
	for _, d := range filepath.SplitList(os.Getenv("PATH")) {
		if _, err := os.Stat(filepath.Join(d, "gopls")); err != nil {
			keep = append(keep, d)
		}
	}
	return strings.Join(keep, string(filepath.ListSeparator))
}

// TestCodeNavigationWithGopls: find_definition, find_references and
// rename_symbol against the real gopls that the sandbox-go image has (built
// from its pin), through the Go SDK's SSE client.
func TestCodeNavigationWithGopls(t *testing.T) {
	gopls := harness.GoplsDir(t)
	sd := harness.StartEnv(t, []string{"PATH=" + gopls + string(filepath.ListSeparator) + os.Getenv("PATH"), "GOPROXY=off"})
	outside := t.TempDir()
	writeFiles(t, outside, map[string]string{"ext.go": "package main\n\nvar _ = helper()\n"})
	writeFiles(t, sd.Workspace, map[string]string{
		"go.mod":     "module example.com/nav\n\ngo 1.22\n",
		"main.go":    "package main\n\nimport (\n\t\"fmt\"\n\n\t\"example.com/nav/lib\"\n)\n\nfunc helper() int { return 1 }\n\nfunc main() { fmt.Println(lib.Greet(\"x\"), helper()) }\n",
		"lib/lib.go": "package lib\n\n// Greet greets.\nfunc Greet(name string) string { return \"hi \" + name }\n",
		"lib/use.go": "package lib\n\nvar _ = Greet(\"y\")\n",
	})
	cs := connect(t, &mcp.SSEClientTransport{Endpoint: sd.URL + "/sse"})

	if got := call(t, cs, "find_definition", map[string]any{"file_path": "main.go", "line": 11, "symbol": "Greet"}); got != "lib/lib.go:4:6: func Greet(name string) string { return \"hi \" + name }\n" {
		t.Errorf("find_definition answered %q", got)
	}
	// A definition in the standard library: counted, its path not shown.
	if got := call(t, cs, "find_definition", map[string]any{"file_path": "main.go", "line": 11, "symbol": "Println"}); !strings.Contains(got, "Defined outside the workspace") || strings.Contains(got, "/src/fmt") {
		t.Errorf("find_definition of fmt.Println answered %q", got)
	}
	wantRefs := "lib/lib.go:4:6: func Greet(name string) string { return \"hi \" + name }\n" +
		"lib/use.go:3:9: var _ = Greet(\"y\")\n" +
		"main.go:11:31: func main() { fmt.Println(lib.Greet(\"x\"), helper()) }\n"
	if got := call(t, cs, "find_references", map[string]any{"file_path": "lib/lib.go", "line": 4, "column": 6}); got != wantRefs {
		t.Errorf("find_references answered %q, want %q", got, wantRefs)
	}

	if got := call(t, cs, "rename_symbol", map[string]any{"file_path": "lib/lib.go", "line": 4, "symbol": "Greet", "new_name": "Hello"}); !strings.Contains(got, "Renamed to Hello: 4 edit(s) in 3 file(s)") {
		t.Errorf("rename_symbol answered %q", got)
	}
	for name, want := range map[string]string{
		"main.go":    "func main() { fmt.Println(lib.Hello(\"x\"), helper()) }",
		"lib/lib.go": "// Hello greets.\nfunc Hello(name string)",
		"lib/use.go": "var _ = Hello(\"y\")",
	} {
		if b, _ := os.ReadFile(filepath.Join(sd.Workspace, name)); !strings.Contains(string(b), want) {
			t.Errorf("after the rename %s is %q, want it to hold %q", name, b, want)
		}
	}
	// The server sees files changed on disk since (here by Bash).
	call(t, cs, "Bash", map[string]any{"command": "printf 'package lib\\n\\nvar _ = Hello(\"z\")\\n' > lib/new.go"})
	if got := call(t, cs, "find_references", map[string]any{"file_path": "lib/lib.go", "line": 4, "symbol": "Hello", "include_declaration": false}); !strings.Contains(got, "lib/new.go:3:9") || strings.Contains(got, "lib/lib.go") {
		t.Errorf("find_references after a new file answered %q", got)
	}

	// A file of the package linked from outside the workspace: its uses are
	// counted, not shown, and a rename that would edit it writes nothing.
	if err := os.Symlink(filepath.Join(outside, "ext.go"), filepath.Join(sd.Workspace, "ext.go")); err != nil {
		t.Fatal(err)
	}
	if got := call(t, cs, "find_references", map[string]any{"file_path": "main.go", "line": 9, "symbol": "helper"}); !strings.Contains(got, "(1 more outside the workspace, not shown)") || strings.Contains(got, outside) {
		t.Errorf("find_references with a linked file answered %q", got)
	}
	before, _ := os.ReadFile(filepath.Join(sd.Workspace, "main.go"))
	if got := callError(t, cs, "rename_symbol", map[string]any{"file_path": "main.go", "line": 9, "symbol": "helper", "new_name": "assist"}); !strings.Contains(got, "ext.go: refused") || !strings.Contains(got, "nothing was written") {
		t.Errorf("rename_symbol through a link out answered %q", got)
	}
	if after, _ := os.ReadFile(filepath.Join(sd.Workspace, "main.go")); string(after) != string(before) {
		t.Errorf("a refused rename changed main.go: %q", after)
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "ext.go")); string(b) != "package main\n\nvar _ = helper()\n" {
		t.Errorf("a refused rename changed the file outside: %q", b)
	}
	if got := callError(t, cs, "find_definition", map[string]any{"file_path": "../x.go", "line": 1, "column": 1}); !strings.Contains(got, "leaves the workspace") {
		t.Errorf("find_definition outside the workspace answered %q", got)
	}
}

// TestCodeNavigationWithoutGopls: in a sandbox without gopls (the plain
// image), the tools answer a tool error that names it, at once.
func TestCodeNavigationWithoutGopls(t *testing.T) {
	sd := harness.StartEnv(t, []string{"PATH=" + pathWithout()})
	writeFiles(t, sd.Workspace, map[string]string{"main.go": "package main\n\nfunc main() {}\n"})
	cs := connect(t, &mcp.StreamableClientTransport{Endpoint: sd.URL + "/mcp"})
	for _, tool := range []string{"find_definition", "find_references", "rename_symbol"} {
		args := map[string]any{"file_path": "main.go", "line": 3, "symbol": "main"}
		if tool == "rename_symbol" {
			args["new_name"] = "x"
		}
		got := callError(t, cs, tool, args)
		if !strings.Contains(got, "needs the language server gopls, which is not installed in this sandbox") {
			t.Errorf("%s without gopls answered %q", tool, got)
		}
	}
}
