package sandboxd

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	mcpgoclient "github.com/mark3labs/mcp-go/client"
	mcpgo "github.com/mark3labs/mcp-go/mcp"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/wire"
	"github.com/airlock-dev/airlock/pkg/toolnames"
)

// mcpgoRoundTrip runs the tools/list and Write → Read → Edit → Grep → Bash
// round trip through a started mark3labs/mcp-go client.
func mcpgoRoundTrip(t *testing.T, c *mcpgoclient.Client, ws, prefix string) {
	t.Helper()
	ctx := t.Context()
	init := mcpgo.InitializeRequest{}
	init.Params.ClientInfo = mcpgo.Implementation{Name: "mcp-go-test", Version: "v0"}
	res, err := c.Initialize(ctx, init)
	if err != nil {
		t.Fatalf("initialize: %v", err)
	}
	if !slices.Contains(wire.ProtocolVersions, res.ProtocolVersion) || res.ServerInfo.Name != wire.ServerName {
		t.Errorf("initialize result: version %q, server %q", res.ProtocolVersion, res.ServerInfo.Name)
	}
	if err := c.Ping(ctx); err != nil {
		t.Errorf("ping: %v", err)
	}
	tools, err := c.ListTools(ctx, mcpgo.ListToolsRequest{})
	if err != nil {
		t.Fatalf("tools/list: %v", err)
	}
	var names []string
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
	}
	if diff := cmp.Diff(sorted(toolnames.All()), sorted(names)); diff != "" {
		t.Errorf("tools/list (-want +got):\n%s", diff)
	}

	call := func(name string, args map[string]any) string {
		t.Helper()
		req := mcpgo.CallToolRequest{}
		req.Params.Name = name
		req.Params.Arguments = args
		res, err := c.CallTool(ctx, req)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var b strings.Builder
		for _, content := range res.Content {
			if tc, ok := mcpgo.AsTextContent(content); ok {
				b.WriteString(tc.Text)
			}
		}
		if res.IsError {
			t.Fatalf("%s(%v) failed: %s", name, args, b.String())
		}
		return b.String()
	}
	file := prefix + "/notes.md"
	call(toolnames.Write, map[string]any{"file_path": file, "content": "# Notes\nairlock mcp-go\n"})
	if got := call(toolnames.Read, map[string]any{"file_path": ws + "/" + file}); got != "     1\t# Notes\n     2\tairlock mcp-go\n" {
		t.Errorf("Read answered %q", got)
	}
	call(toolnames.Edit, map[string]any{"file_path": file, "old_string": "mcp-go", "new_string": "sandbox"})
	if got := call(toolnames.Grep, map[string]any{"pattern": "airlock", "path": prefix, "output_mode": "content"}); got != file+":2:airlock sandbox\n" {
		t.Errorf("Grep answered %q", got)
	}
	if got := call(toolnames.Bash, map[string]any{"command": "wc -l < " + file}); !strings.HasPrefix(got, "2\n") {
		t.Errorf("Bash answered %q", got)
	}
	// Issue 15's tools.
	call(toolnames.SnapshotCreate, map[string]any{"label": "mcp-go"})
	got := call(toolnames.MultiEdit, map[string]any{"file_path": file, "edits": []any{
		map[string]any{"old_string": "# Notes", "new_string": "# Log"},
		map[string]any{"old_string": "sandbox", "new_string": "mcp-go again", "replace_all": true},
	}})
	if !strings.Contains(got, "2 edit(s), 2 replacement(s)") {
		t.Errorf("MultiEdit answered %q", got)
	}
	if got := call(toolnames.LS, map[string]any{"path": prefix}); got != prefix+"/\n  - notes.md\n" {
		t.Errorf("LS answered %q", got)
	}
	if got := call(toolnames.SnapshotDiff, map[string]any{"id": "s1"}); !strings.Contains(got, "-# Notes\n-airlock sandbox\n+# Log\n+airlock mcp-go again") {
		t.Errorf("snapshot_diff answered %q", got)
	}
	call(toolnames.SnapshotRestore, map[string]any{"id": "s1"})
	if got := call(toolnames.Bash, map[string]any{"command": "cat " + file}); got != "# Notes\nairlock sandbox\n" {
		t.Errorf("after snapshot_restore the file is %q", got)
	}
	if got := call(toolnames.SnapshotList, map[string]any{}); !strings.Contains(got, `"before restoring s1"`) {
		t.Errorf("snapshot_list answered %q", got)
	}
}

// TestMCPGoSSEClient: mark3labs/mcp-go's SSE client, the strictest about the
// GET's status (exactly 200) and the endpoint (same host as the stream).
func TestMCPGoSSEClient(t *testing.T) {
	ts := startServer(t, Config{}, options{})
	c, err := mcpgoclient.NewSSEMCPClient(ts.url + "/sse")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() {
		c.Close()
		cancel()
	})
	if err := c.Start(ctx); err != nil {
		t.Fatalf("start: %v", err)
	}
	mcpgoRoundTrip(t, c, ts.ws, "sse")
}

func TestMCPGoStreamableClient(t *testing.T) {
	ts := startServer(t, Config{}, options{})
	c, err := mcpgoclient.NewStreamableHttpClient(ts.url + "/mcp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.Start(t.Context()); err != nil {
		t.Fatalf("start: %v", err)
	}
	mcpgoRoundTrip(t, c, ts.ws, "streamable")
}
