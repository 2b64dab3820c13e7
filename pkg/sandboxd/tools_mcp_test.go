package sandboxd

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/fakelsp"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/procgroup"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/sandboxdtest"
	"github.com/airlock-dev/airlock/pkg/toolnames"
)

// The tools' tests that need the whole protocol layer: the call gate, the
// scrubber and the metrics of the middleware (the others are with the tools,
// in internal/tools).

func TestSnapshotWithoutGit(t *testing.T) {
	t.Setenv("PATH", t.TempDir()) // no git on it
	cs, ws := newInMemory(t, false, nil, nil)
	sandboxdtest.WriteFile(t, filepath.Join(ws, "a.txt"), "a\n")
	for _, call := range []struct {
		tool string
		args map[string]any
	}{
		{toolnames.SnapshotCreate, map[string]any{}},
		{toolnames.SnapshotList, map[string]any{}},
		{toolnames.SnapshotRestore, map[string]any{"id": "s1"}},
		{toolnames.SnapshotDiff, map[string]any{"id": "s1"}},
	} {
		res := sandboxdtest.CallTool(t, cs, call.tool, call.args)
		if !res.IsError || !strings.Contains(sandboxdtest.ContentText(res), "git, which is not installed") {
			t.Errorf("%s without git: isError %v, %q", call.tool, res.IsError, sandboxdtest.ContentText(res))
		}
	}
	sandboxdtest.CheckFile(t, filepath.Join(ws, "a.txt"), "a\n")
}

// TestSnapshotRestoreIsAtomic races a restore with Bash calls through the
// protocol layer, many times: a command that rewrites every file runs
// wholly before or wholly after the restore (the files end all restored or
// all rewritten), and one that reads every file sees them all before or all
// after, never a mix.
func TestSnapshotRestoreIsAtomic(t *testing.T) {
	cs, ws := newInMemory(t, false, nil, nil)
	const files = 40
	setAll := func(v string) string {
		return fmt.Sprintf("for i in $(seq -w 1 %d); do echo %s > f$i.txt; done", files, v)
	}
	sandboxdtest.CallOK(t, cs, toolnames.Bash, map[string]any{"command": setAll("v1")})
	sandboxdtest.CallOK(t, cs, toolnames.SnapshotCreate, map[string]any{})
	uniform := func(what, text string) {
		t.Helper()
		vs := strings.Fields(text)
		if len(vs) != files {
			t.Fatalf("%s: %d values, want %d: %q", what, len(vs), files, text)
		}
		for _, v := range vs {
			if v != vs[0] {
				t.Fatalf("%s: a mix of states: %q", what, text)
			}
		}
	}
	for round := range 15 {
		sandboxdtest.CallOK(t, cs, toolnames.Bash, map[string]any{"command": setAll("v2")})
		var wg sync.WaitGroup
		var read string
		if round%2 == 0 {
			wg.Go(func() { sandboxdtest.CallOK(t, cs, toolnames.Bash, map[string]any{"command": setAll("v3")}) })
		} else {
			wg.Go(func() { read = sandboxdtest.CallOK(t, cs, toolnames.Bash, map[string]any{"command": "cat f*.txt"}) })
		}
		wg.Go(func() { sandboxdtest.CallOK(t, cs, toolnames.SnapshotRestore, map[string]any{"id": "s1"}) })
		wg.Wait()
		if round%2 == 1 {
			uniform("a read racing a restore", read)
		}
		var all strings.Builder
		for i := 1; i <= files; i++ {
			data, err := os.ReadFile(filepath.Join(ws, fmt.Sprintf("f%02d.txt", i)))
			if err != nil {
				t.Fatal(err)
			}
			all.Write(data)
		}
		uniform("the files after a write raced a restore", all.String())
	}
}

// TestSnapshotCreateIsAtomic races snapshot_create with a Bash call that
// rewrites every file, many times: the snapshot holds the files all before
// or all after the command, never a mix.
func TestSnapshotCreateIsAtomic(t *testing.T) {
	cs, ws := newInMemory(t, false, nil, nil)
	const files = 40
	setAll := func(v string) string {
		return fmt.Sprintf("for i in $(seq -w 1 %d); do echo %s > f$i.txt; done", files, v)
	}
	for range 10 {
		sandboxdtest.CallOK(t, cs, toolnames.Bash, map[string]any{"command": setAll("v1")})
		var wg sync.WaitGroup
		var created *mcp.CallToolResult
		wg.Go(func() { sandboxdtest.CallOK(t, cs, toolnames.Bash, map[string]any{"command": setAll("v2")}) })
		wg.Go(func() { created = sandboxdtest.CallTool(t, cs, toolnames.SnapshotCreate, map[string]any{}) })
		wg.Wait()
		if created.IsError {
			t.Fatalf("snapshot_create: %s", sandboxdtest.ContentText(created))
		}
		id := strings.Fields(sandboxdtest.ContentText(created))[1] // "Snapshot <id> taken ..."
		sandboxdtest.CallOK(t, cs, toolnames.SnapshotRestore, map[string]any{"id": id})
		seen := map[string]bool{}
		for i := 1; i <= files; i++ {
			data, err := os.ReadFile(filepath.Join(ws, fmt.Sprintf("f%02d.txt", i)))
			if err != nil {
				t.Fatal(err)
			}
			seen[string(data)] = true
		}
		if len(seen) != 1 {
			t.Fatalf("snapshot %s holds a mix of states: %v", id, seen)
		}
	}
}

// TestSnapshotNamesOverMCP: the schemas take CodeGen-Sandbox's fields, as
// an agent's client sends them (no "unexpected additional properties").
func TestSnapshotNamesOverMCP(t *testing.T) {
	cs, ws := newInMemory(t, false, nil, nil)
	sandboxdtest.WriteFile(t, filepath.Join(ws, "a.txt"), "a\n")
	sandboxdtest.CallOK(t, cs, toolnames.SnapshotCreate, map[string]any{"name": "checkpoint", "description": "before the change"})
	sandboxdtest.WriteFile(t, filepath.Join(ws, "a.txt"), "b\n")
	if text := sandboxdtest.CallOK(t, cs, toolnames.SnapshotDiff, map[string]any{"name": "checkpoint"}); !strings.Contains(text, "+b") {
		t.Errorf("snapshot_diff {name} = %q, want the patch", text)
	}
	sandboxdtest.CallOK(t, cs, toolnames.SnapshotRestore, map[string]any{"name": "checkpoint"})
	sandboxdtest.CheckFile(t, filepath.Join(ws, "a.txt"), "a\n")
	if text := sandboxdtest.CallOK(t, cs, toolnames.SnapshotList, map[string]any{}); !strings.Contains(text, "checkpoint") || !strings.Contains(text, "before the change") {
		t.Errorf("snapshot_list = %q", text)
	}
	res := sandboxdtest.CallTool(t, cs, toolnames.SnapshotCreate, map[string]any{"name": "../../x"})
	if !res.IsError {
		t.Errorf("snapshot_create {name: ../../x} over MCP succeeded: %q", sandboxdtest.ContentText(res))
	}
}

// TestSecretsScrubbedThroughMCP runs Bash through the protocol layer: the
// model reads no secret, in the text nor in the structured result, a
// secret cut by the cap is not half shown, and the secrets are counted.
func TestSecretsScrubbedThroughMCP(t *testing.T) {
	cs, _, m := newInMemoryWithMetrics(t, false, nil)
	cmd := fmt.Sprintf("echo %s; echo 'Authorization: Bearer %s'", sandboxdtest.GitHubPAT, sandboxdtest.Bearer)
	res := sandboxdtest.CallTool(t, cs, toolnames.Bash, map[string]any{"command": cmd})
	text := sandboxdtest.ContentText(res)
	for _, s := range []string{sandboxdtest.GitHubPAT, sandboxdtest.Bearer} {
		sandboxdtest.NoFragment(t, text, s)
	}
	structured, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	sandboxdtest.NoFragment(t, string(structured), sandboxdtest.GitHubPAT)
	if !strings.Contains(text, "[REDACTED:github_token]") || !strings.Contains(string(structured), "[REDACTED:github_token]") {
		t.Errorf("no redaction marker in %q / %s", text, structured)
	}

	// A token right across the first half's end of 100 KiB of output.
	head := procgroup.ForegroundOutputBytes / 2
	cmd = fmt.Sprintf("head -c %d /dev/zero | tr '\\0' 'a'; echo; printf '%%s' %q; head -c 200000 /dev/zero | tr '\\0' '\\n'",
		head-10-1, sandboxdtest.GitHubPAT)
	text = sandboxdtest.ContentText(sandboxdtest.CallTool(t, cs, toolnames.Bash, map[string]any{"command": cmd}))
	if !strings.Contains(text, "bytes of output elided") {
		t.Fatalf("the output was not cut")
	}
	sandboxdtest.NoFragment(t, text, sandboxdtest.GitHubPAT)

	if got := counterValue(t, m.secretsScrubbed.WithLabelValues("github_token")); got != 1 {
		t.Errorf("github tokens scrubbed = %v, want 1 (the same token in text and structured result counts once)", got)
	}
	if got := counterValue(t, m.secretsScrubbed.WithLabelValues("bearer_token")); got != 1 {
		t.Errorf("bearer tokens scrubbed = %v, want 1", got)
	}
}

// counterValue reads a counter.
func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// TestNavToolsOverMCP: through the protocol layer, a failing server is a
// tool error the model reads (never a protocol error), bad positions are
// refused by the schema as tool errors, and the lines shown pass the
// secret scrubber.
func TestNavToolsOverMCP(t *testing.T) {
	const token = "ghp_R2d2C3poLuke0Leia1Han2Chewie3Yoda4xy" // fake
	useFakeGopls(t, "ok", `{"textDocument/references": [{"uri": "$ROOT/main.go", "range": {"start": {"line": 2, "character": 4}, "end": {"line": 2, "character": 7}}}]}`)
	tb, ws := newTestToolbox(t)
	sandboxdtest.WriteFile(t, filepath.Join(ws, "main.go"), "package main\n\nvar key = \""+token+"\"\n")
	cs, _ := connectInMemory(t, tb, false, nil, nil)

	got := sandboxdtest.CallOK(t, cs, toolnames.FindReferences, map[string]any{"file_path": "main.go", "line": 3, "symbol": "key"})
	if want := "main.go:3:5: var key = \"[REDACTED:github_token]\"\n"; got != want {
		t.Errorf("find_references answered %q, want %q", got, want)
	}
	res := sandboxdtest.CallTool(t, cs, toolnames.FindDefinition, map[string]any{"file_path": "main.go", "line": 0, "column": 1})
	if !res.IsError || !strings.Contains(sandboxdtest.ContentText(res), "line") {
		t.Errorf("line 0: %v %q, want a tool error", res.IsError, sandboxdtest.ContentText(res))
	}
	// The next server started crashes: a second sandbox's first call starts one.
	t.Setenv(fakelsp.ModeEnv, "crash")
	tb, ws = newTestToolbox(t)
	sandboxdtest.WriteFile(t, filepath.Join(ws, "main.go"), "package main\n\nvar key = \""+token+"\"\n")
	cs, _ = connectInMemory(t, tb, false, nil, nil)
	res = sandboxdtest.CallTool(t, cs, toolnames.RenameSymbol, map[string]any{"file_path": "main.go", "line": 3, "symbol": "key", "new_name": "k"})
	if text := sandboxdtest.ContentText(res); !res.IsError || !strings.Contains(text, "gopls exited unexpectedly") || !strings.Contains(text, "nothing was written") {
		t.Errorf("rename with a crashing server: %v %q, want a tool error", res.IsError, text)
	}
}

// useFakeGopls puts the fake language server (internal/fakelsp) on PATH as
// gopls, in mode, answering as answers (a JSON object of method to result)
// says: the toolbox starts it as it would start gopls.
func useFakeGopls(t *testing.T, mode, answers string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	sandboxdtest.MustSymlink(t, exe, filepath.Join(bin, "gopls"))
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv(fakelsp.ModeEnv, mode)
	t.Setenv("AIRLOCK_FAKE_LSP_ANSWERS", answers)
}
