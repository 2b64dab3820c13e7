// Package inspector tests sandboxd with the MCP Inspector's CLI mode (npm
// @modelcontextprotocol/inspector), over both transports. It installs the
// pinned version with npm into bin/npm at the repository root (git-ignored),
// and is skipped, with the reason printed, only where npm is absent.
//
// It is the slowest of the interop tests: every call starts node.
package inspector

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/e2e/mcpclients/internal/harness"
)

// inspectorVersion is the pinned Inspector: the newest release whose CLI
// runs on the Node.js that Debian's nodejs package brings here (20.x); the
// 2.x line needs Node.js 22.19 or later.
const inspectorVersion = "1.0.3"

func TestMain(m *testing.M) { os.Exit(harness.Main(m)) }

// install installs the pinned Inspector unless it is there already, and
// returns the path of its CLI.
func install(t *testing.T) string {
	t.Helper()
	npm, err := harness.LookNPM()
	if err != nil {
		// CI (and .ci/run, which installs npm where it is missing) must run it: never a silent skip there.
		if os.Getenv("CI") != "" {
			t.Fatalf("the MCP Inspector test needs npm: %v (CI is set; .ci/run installs Node.js and npm)", err)
		}
		t.Skipf("skipping the MCP Inspector test: %v (install Node.js and npm to run it)", err)
	}
	prefix := filepath.Join(harness.RepoRoot(t), "bin", "npm")
	cli := filepath.Join(prefix, "node_modules", ".bin", "mcp-inspector")
	pkgJSON := filepath.Join(prefix, "node_modules", "@modelcontextprotocol", "inspector", "package.json")
	var pkg struct{ Version string }
	if data, err := os.ReadFile(pkgJSON); err == nil && json.Unmarshal(data, &pkg) == nil && pkg.Version == inspectorVersion {
		return cli
	}
	cmd := exec.Command(npm, "install", "--prefix", prefix, "--no-audit", "--no-fund", "--loglevel=error",
		"@modelcontextprotocol/inspector@"+inspectorVersion)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm install @modelcontextprotocol/inspector@%s: %v\n%s", inspectorVersion, err, out)
	}
	return cli
}

// inspect runs one Inspector CLI command and decodes its JSON answer.
func inspect(t *testing.T, cli, url, transport string, args ...string) map[string]any {
	t.Helper()
	cmd := exec.Command(cli, append([]string{"--cli", url, "--transport", transport}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("mcp-inspector %v: %v\nstdout:\n%s\nstderr:\n%s", args, err, stdout.String(), stderr.String())
	}
	var out map[string]any
	if err := json.Unmarshal([]byte(harness.TrimBanner(stdout.String())), &out); err != nil {
		t.Fatalf("mcp-inspector %v printed no JSON (%v):\n%s\nstderr:\n%s", args, err, stdout.String(), stderr.String())
	}
	return out
}

// callTool runs tools/call through the Inspector and returns the text of a
// successful result.
func callTool(t *testing.T, cli, url, transport, tool string, args map[string]string) string {
	t.Helper()
	cmdArgs := []string{"--method", "tools/call", "--tool-name", tool}
	keys := make([]string, 0, len(args))
	for k := range args {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		cmdArgs = append(cmdArgs, "--tool-arg", k+"="+args[k])
	}
	out := inspect(t, cli, url, transport, cmdArgs...)
	var text strings.Builder
	content, _ := out["content"].([]any)
	for _, c := range content {
		if m, ok := c.(map[string]any); ok && m["type"] == "text" {
			text.WriteString(fmt.Sprint(m["text"]))
		}
	}
	if isErr, _ := out["isError"].(bool); isErr {
		t.Fatalf("%s(%v) failed: %s", tool, args, text.String())
	}
	return text.String()
}

func TestInspectorCLI(t *testing.T) {
	cli := install(t)
	sd := harness.Start(t)
	for _, tc := range []struct{ transport, path string }{{"sse", "/sse"}, {"http", "/mcp"}} {
		t.Run(tc.transport, func(t *testing.T) {
			url := sd.URL + tc.path
			list := inspect(t, cli, url, tc.transport, "--method", "tools/list")
			tools, _ := list["tools"].([]any)
			var names []string
			for _, tool := range tools {
				if m, ok := tool.(map[string]any); ok {
					names = append(names, fmt.Sprint(m["name"]))
				}
			}
			slices.Sort(names)
			want := []string{"Bash", "BashOutput", "Edit", "Glob", "Grep", "KillShell", "LS", "MultiEdit", "Read", "Write", "change_function_signature", "edit_function_body",
				"find_definition", "find_references", "insert_after_method", "last_test_failures", "rename_symbol", "run_failing_tests", "run_lint", "run_script", "run_tests", "run_typecheck",
				"search_code", "snapshot_create", "snapshot_diff", "snapshot_list", "snapshot_restore", "tests_covering"}
			if !slices.Equal(names, want) {
				t.Errorf("tools/list = %v, want %v", names, want)
			}

			file := tc.transport + "/greeting.txt"
			callTool(t, cli, url, tc.transport, "Write", map[string]string{"file_path": file, "content": "hello from the inspector"})
			if got := callTool(t, cli, url, tc.transport, "Read", map[string]string{"file_path": sd.Workspace + "/" + file}); got != "     1\thello from the inspector\n" {
				t.Errorf("Read answered %q", got)
			}
			callTool(t, cli, url, tc.transport, "Edit", map[string]string{"file_path": file, "old_string": "inspector", "new_string": "sandbox"})
			if got := callTool(t, cli, url, tc.transport, "Grep", map[string]string{"pattern": "from the sandbox", "path": tc.transport, "output_mode": "count"}); got != file+":1\n" {
				t.Errorf("Grep answered %q", got)
			}
			if got := callTool(t, cli, url, tc.transport, "Bash", map[string]string{"command": "tr a-z A-Z < " + file, "timeout": "10000"}); got != "HELLO FROM THE SANDBOX\n" {
				t.Errorf("Bash answered %q", got)
			}

			// The tools of issue 15. The Inspector passes an argument that
			// is JSON (edits, ignore) as JSON.
			if got := callTool(t, cli, url, tc.transport, "snapshot_create", map[string]string{"label": "inspector"}); !strings.Contains(got, "taken") {
				t.Errorf("snapshot_create answered %q", got)
			}
			got := callTool(t, cli, url, tc.transport, "MultiEdit", map[string]string{"file_path": file,
				"edits": `[{"old_string":"hello","new_string":"goodbye"},{"old_string":"goodbye from","new_string":"bye from"}]`})
			if !strings.Contains(got, "2 edit(s)") {
				t.Errorf("MultiEdit answered %q", got)
			}
			if got := callTool(t, cli, url, tc.transport, "LS", map[string]string{"path": tc.transport, "ignore": `["*.md"]`}); got != tc.transport+"/\n  - greeting.txt\n" {
				t.Errorf("LS answered %q", got)
			}
			snaps := strings.Split(strings.TrimSpace(callTool(t, cli, url, tc.transport, "snapshot_list", nil)), "\n")
			id := strings.Fields(snaps[len(snaps)-1])[0] // the newest, just taken
			if got := callTool(t, cli, url, tc.transport, "snapshot_diff", map[string]string{"id": id}); !strings.Contains(got, "+bye from the sandbox") {
				t.Errorf("snapshot_diff answered %q", got)
			}
			callTool(t, cli, url, tc.transport, "snapshot_restore", map[string]string{"id": id})
			if got := callTool(t, cli, url, tc.transport, "Read", map[string]string{"file_path": file}); got != "     1\thello from the sandbox\n" {
				t.Errorf("after snapshot_restore, Read answered %q", got)
			}

			// The code tools: an AST edit, search_code, run_script.
			goFile := tc.transport + "/shape.go"
			callTool(t, cli, url, tc.transport, "Write", map[string]string{"file_path": goFile, "content": "package shape\n\nfunc Area(w, h int) int { return 0 }\n"})
			if got := callTool(t, cli, url, tc.transport, "edit_function_body", map[string]string{"file_path": goFile, "function_name": "Area", "new_body": "return w * h"}); !strings.Contains(got, "\treturn w * h") {
				t.Errorf("edit_function_body answered %q", got)
			}
			if got := callTool(t, cli, url, tc.transport, "search_code", map[string]string{"query": "area", "path": tc.transport}); got != goFile+":3:6: func Area: func Area(w, h int) int" {
				t.Errorf("search_code answered %q", got)
			}
			callTool(t, cli, url, tc.transport, "Bash", map[string]string{"command": "printf 'hello-" + tc.transport + ":\\n\\t@echo hi from " + tc.transport + "\\n' >> Makefile"})
			if got := callTool(t, cli, url, tc.transport, "run_script", map[string]string{"name": "hello-" + tc.transport}); !strings.Contains(got, "hi from "+tc.transport) {
				t.Errorf("run_script answered %q", got)
			}
		})
	}
}
