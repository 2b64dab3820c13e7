package sandboxd

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"k8s.io/klog/v2/ktesting"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/sandboxdtest"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/toolcall"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/tools"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/wire"
	"github.com/airlock-dev/airlock/pkg/toolnames"
)

// newInMemory connects an SDK client to a fresh protocol layer over the
// SDK's in-memory transports.
func newInMemory(t *testing.T, readOnly bool, allowed []string, opts *mcp.ClientSessionOptions) (*mcp.ClientSession, string) {
	t.Helper()
	tb, ws := newTestToolbox(t)
	cs, _ := connectInMemory(t, tb, readOnly, allowed, opts)
	return cs, ws
}

// newInMemoryWithMetrics is newInMemory that also returns the metrics.
func newInMemoryWithMetrics(t *testing.T, readOnly bool, allowed []string) (*mcp.ClientSession, string, *metrics) {
	t.Helper()
	tb, ws := newTestToolbox(t)
	cs, m := connectInMemory(t, tb, readOnly, allowed, nil)
	return cs, ws, m
}

// connectInMemory serves tb's tools over the SDK's in-memory transports and
// connects a client.
func connectInMemory(t *testing.T, tb *tools.Toolbox, readOnly bool, allowed []string, opts *mcp.ClientSessionOptions) (*mcp.ClientSession, *metrics) {
	t.Helper()
	logger, ctx := ktesting.NewTestContext(t)
	served, err := tools.Select(allowed, readOnly)
	if err != nil {
		t.Fatal(err)
	}
	m := newMetrics(served, func() float64 { return 0 }, func() float64 { return 0 }, func() float64 { return 0 })
	server, _ := newMCPServer(tb, wire.NewGate(), served, m, callRecording{}, logger)
	return sandboxdtest.ConnectInMemory(ctx, t, server, opts), m
}

func TestProtocolVersionNegotiation(t *testing.T) {
	tests := map[string]string{
		"2024-11-05": "2024-11-05",
		"2025-03-26": "2025-03-26",
		"2025-06-18": "2025-06-18",
		"2025-11-25": "2025-11-25",
		"2026-07-28": "2026-07-28", // server/discover, no initialize
		"":           "2026-07-28", // the SDK's newest: the same
	}
	for asked, want := range tests {
		t.Run(asked, func(t *testing.T) {
			cs, _ := newInMemory(t, false, nil, &mcp.ClientSessionOptions{ProtocolVersion: asked})
			res := cs.InitializeResult()
			if res.ProtocolVersion != want {
				t.Errorf("negotiated %q, want %q", res.ProtocolVersion, want)
			}
			if res.ServerInfo == nil || res.ServerInfo.Name != wire.ServerName {
				t.Errorf("serverInfo = %+v", res.ServerInfo)
			}
			if res.Capabilities == nil || res.Capabilities.Tools == nil {
				t.Errorf("capabilities = %+v, want tools", res.Capabilities)
			}
			if err := cs.Ping(t.Context(), nil); err != nil {
				t.Errorf("ping: %v", err)
			}
		})
	}
}

func TestToolSelection(t *testing.T) {
	tests := map[string]struct {
		readOnly bool
		allowed  []string
		want     []string
	}{
		"all":                                   {want: toolnames.All()},
		"readonly":                              {readOnly: true, want: []string{toolnames.Read, toolnames.Glob, toolnames.Grep, toolnames.LS, toolnames.SnapshotList, toolnames.SnapshotDiff, toolnames.LastTestFailures, toolnames.FindDefinition, toolnames.FindReferences, toolnames.SearchCode}},
		"the code tools are allowed one by one": {allowed: []string{toolnames.SearchCode, toolnames.EditFunctionBody}, want: []string{toolnames.SearchCode, toolnames.EditFunctionBody}},
		"search_code is not mutating, the AST edits, tests_covering and run_script are": {readOnly: true,
			allowed: []string{toolnames.SearchCode, toolnames.EditFunctionBody, toolnames.ChangeFunctionSignature, toolnames.InsertAfterMethod, toolnames.TestsCovering, toolnames.RunScript}, want: []string{toolnames.SearchCode}},
		"MultiEdit is mutating, LS is not": {readOnly: true, allowed: []string{toolnames.MultiEdit, toolnames.LS}, want: []string{toolnames.LS}},
		"allowed new tools":                {allowed: []string{toolnames.MultiEdit, toolnames.LS}, want: []string{toolnames.MultiEdit, toolnames.LS}},
		"allowed":                          {allowed: []string{toolnames.Grep, toolnames.Read}, want: []string{toolnames.Read, toolnames.Grep}},
		"allowed + readonly":               {readOnly: true, allowed: []string{toolnames.Write, toolnames.Read, toolnames.Bash}, want: []string{toolnames.Read}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			cs, _ := newInMemory(t, tt.readOnly, tt.allowed, nil)
			got := toolNames(t, cs)
			slices.Sort(got)
			want := slices.Clone(tt.want)
			slices.Sort(want)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("tools/list (-want +got):\n%s", diff)
			}
			// A tool that is not listed cannot be called either.
			for _, name := range toolnames.All() {
				if slices.Contains(tt.want, name) {
					continue
				}
				_, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: name, Arguments: map[string]any{}})
				var werr *jsonrpc.Error
				if !errors.As(err, &werr) || werr.Code != jsonrpc.CodeInvalidParams {
					t.Errorf("calling unlisted %s: %v, want an invalid-params protocol error", name, err)
				}
			}
		})
	}
}

func TestSelectToolsRefusesUnknownNames(t *testing.T) {
	_, err := tools.Select([]string{"Read", "rm_rf", "bash"}, false)
	sandboxdtest.WantErrContaining(t, err, `"rm_rf", "bash"`)
}

func TestToolErrorsAreResults(t *testing.T) {
	cs, ws := newInMemory(t, false, nil, nil)
	if err := os.WriteFile(filepath.Join(ws, "f.txt"), []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		tool string
		args map[string]any
		want string
	}{
		{name: "outside", tool: toolnames.Read, args: map[string]any{"file_path": "/etc/passwd"}, want: "outside the workspace"},
		{name: "missing", tool: toolnames.Read, args: map[string]any{"file_path": "nope"}, want: "no such file"},
		{name: "missing required field", tool: toolnames.Read, args: map[string]any{}, want: "file_path"},
		{name: "wrong type", tool: toolnames.Read, args: map[string]any{"file_path": 3}, want: "file_path"},
		{name: "unknown field", tool: toolnames.Read, args: map[string]any{"file_path": "f.txt", "bogus": 1}, want: "bogus"},
		{name: "enum", tool: toolnames.Grep, args: map[string]any{"pattern": "x", "output_mode": "lines"}, want: "output_mode"},
		{name: "overwrite unread", tool: toolnames.Write, args: map[string]any{"file_path": "f.txt", "content": "y"}, want: "has not been Read"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := sandboxdtest.CallTool(t, cs, tt.tool, tt.args)
			if !res.IsError {
				t.Fatalf("%s(%v) succeeded: %s", tt.tool, tt.args, sandboxdtest.ContentText(res))
			}
			if text := sandboxdtest.ContentText(res); !strings.Contains(text, tt.want) {
				t.Errorf("error text %q does not contain %q", text, tt.want)
			}
		})
	}
}

func TestToolPanicIsAToolError(t *testing.T) {
	logger, ctx := ktesting.NewTestContext(t)
	m := newMetrics([]string{"boom"}, func() float64 { return 0 }, func() float64 { return 0 }, func() float64 { return 0 })
	server := mcp.NewServer(&mcp.Implementation{Name: "t"}, nil)
	server.AddReceivingMiddleware(toolCallMiddleware(wire.NewGate(), []string{"boom"}, m, callRecording{}, logger, true))
	tools.AddTool(toolcall.NewSet(server), &mcp.Tool{Name: "boom"}, func(context.Context, tools.ReadInput) (*mcp.CallToolResult, tools.ReadOutput, error) {
		panic("kaboom")
	})
	ct, st := mcp.NewInMemoryTransports()
	ss, err := server.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "c"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res := sandboxdtest.CallTool(t, cs, "boom", map[string]any{"file_path": "x"})
	if !res.IsError || !strings.Contains(sandboxdtest.ContentText(res), "kaboom") {
		t.Fatalf("result = %+v, want a tool error naming the panic", res)
	}
	if err := cs.Ping(ctx, nil); err != nil {
		t.Fatalf("the session died with the panic: %v", err)
	}
}

// TestToolNamesMatchTheAPIEnum checks ToolNames against the enum of
// v1alpha1.ToolName, which the CRD validates allowedTools with.
func TestToolNamesMatchTheAPIEnum(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "apis", "airlock", "v1alpha1", "types.go"))
	if err != nil {
		t.Fatal(err)
	}
	const marker = "// +kubebuilder:validation:Enum="
	lines := strings.Split(string(src), "\n")
	for i, line := range lines {
		if strings.HasPrefix(line, "type ToolName string") {
			for j := i - 1; j >= 0 && strings.HasPrefix(lines[j], "//"); j-- {
				if enum, ok := strings.CutPrefix(lines[j], marker); ok {
					if diff := cmp.Diff(toolnames.All(), strings.Split(enum, ";")); diff != "" {
						t.Errorf("toolnames.All and the v1alpha1.ToolName enum differ (-toolnames.All +enum):\n%s", diff)
					}
					return
				}
			}
		}
	}
	t.Fatal("no enum marker on type ToolName in pkg/apis/airlock/v1alpha1/types.go")
}
