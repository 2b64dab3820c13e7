package sandboxd

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/sandboxdtest"
	"github.com/airlock-dev/airlock/pkg/toolnames"
)

// roundTrip lists the tools and runs Write → Read → Edit → Grep (→ Bash
// where served) through a connected client, checking each answer.
func roundTrip(t *testing.T, cs *mcp.ClientSession, ws string) {
	t.Helper()
	got := toolNames(t, cs)
	want := toolnames.All()
	slices.Sort(got)
	slices.Sort(want)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("tools/list (-want +got):\n%s", diff)
	}

	if text := sandboxdtest.CallOK(t, cs, toolnames.Write, map[string]any{"file_path": "src/hello.txt", "content": "hello world\nsecond line\n"}); !strings.Contains(text, "Created src/hello.txt") {
		t.Errorf("Write answered %q", text)
	}
	if text := sandboxdtest.CallOK(t, cs, toolnames.Read, map[string]any{"file_path": ws + "/src/hello.txt"}); text != "     1\thello world\n     2\tsecond line\n" {
		t.Errorf("Read answered %q", text)
	}
	if text := sandboxdtest.CallOK(t, cs, toolnames.Edit, map[string]any{"file_path": "src/hello.txt", "old_string": "world", "new_string": "sandbox"}); !strings.Contains(text, "1 replacement") {
		t.Errorf("Edit answered %q", text)
	}
	if text := sandboxdtest.CallOK(t, cs, toolnames.Grep, map[string]any{"pattern": "hello s[a-z]+", "output_mode": "content"}); text != "src/hello.txt:1:hello sandbox\n" {
		t.Errorf("Grep answered %q", text)
	}
	if slices.Contains(got, toolnames.Bash) {
		if text := sandboxdtest.CallOK(t, cs, toolnames.Bash, map[string]any{"command": "cat src/hello.txt | tr a-z A-Z"}); !strings.Contains(text, "HELLO SANDBOX") {
			t.Errorf("Bash answered %q", text)
		}
	}
	// A structured result comes along with the text.
	res := sandboxdtest.CallTool(t, cs, toolnames.Glob, map[string]any{"pattern": "**/*.txt"})
	if res.IsError || res.StructuredContent == nil {
		t.Errorf("Glob result = %+v, want structured content", res)
	}
}

func TestGoSDKSSEClient(t *testing.T) {
	ts := startServer(t, Config{}, options{})
	// The newest SDK probes server/discover first, is refused, and falls back.
	cs := connectSSE(t, ts.url, nil)
	if v := cs.InitializeResult().ProtocolVersion; v != "2025-11-25" {
		t.Errorf("negotiated %q over SSE, want 2025-11-25", v)
	}
	roundTrip(t, cs, ts.ws)

	// An old client that asks for the SSE era's version gets it.
	old := connectSSE(t, ts.url, &mcp.ClientSessionOptions{ProtocolVersion: "2024-11-05"})
	if v := old.InitializeResult().ProtocolVersion; v != "2024-11-05" {
		t.Errorf("negotiated %q, want 2024-11-05", v)
	}
	sandboxdtest.CallOK(t, old, toolnames.Read, map[string]any{"file_path": "src/hello.txt"})
}

func TestGoSDKStreamableClient(t *testing.T) {
	ts := startServer(t, Config{}, options{})
	cs := connectStreamable(t, ts.url, nil)
	if v := cs.InitializeResult().ProtocolVersion; v != "2026-07-28" {
		t.Errorf("negotiated %q over Streamable HTTP, want 2026-07-28 (the SDK's newest, stateless)", v)
	}
	roundTrip(t, cs, ts.ws)
	for _, v := range []string{"2025-03-26", "2025-06-18"} {
		cs := connectStreamable(t, ts.url, &mcp.ClientSessionOptions{ProtocolVersion: v})
		if got := cs.InitializeResult().ProtocolVersion; got != v {
			t.Errorf("negotiated %q, want %q", got, v)
		}
		sandboxdtest.CallOK(t, cs, toolnames.Glob, map[string]any{"pattern": "**"})
	}
}

func TestReadOnlyOverHTTP(t *testing.T) {
	ts := startServer(t, Config{ReadOnly: true}, options{})
	for _, cs := range []*mcp.ClientSession{connectSSE(t, ts.url, nil), connectStreamable(t, ts.url, nil)} {
		got := toolNames(t, cs)
		if diff := cmp.Diff(sorted(toolnames.ReadOnlyNames()), sorted(got)); diff != "" {
			t.Errorf("tools/list with --readonly (-want +got):\n%s", diff)
		}
		if _, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: toolnames.Write, Arguments: map[string]any{"file_path": "x", "content": "y"}}); err == nil {
			t.Error("Write was callable with --readonly")
		}
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}
