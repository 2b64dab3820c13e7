package tools

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/sandboxdtest"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/toolcall"
	"github.com/airlock-dev/airlock/pkg/toolnames"
)

// pairedServers are two MCP servers with the same tools, added with
// addTypedTool to one and with the SDK's mcp.AddTool to the other.
type pairedServers struct {
	fast, sdk *mcp.Server
}

func addPaired[In, Out any](p pairedServers, tool *mcp.Tool, h toolcall.Handler[In, Out]) {
	t1, t2 := *tool, *tool
	addTypedTool(toolcall.NewSet(p.fast), &t1, h)
	mcp.AddTool(p.sdk, &t2, func(ctx context.Context, _ *mcp.CallToolRequest, in In) (*mcp.CallToolResult, Out, error) {
		return h(ctx, in)
	})
}

func connectServer(t *testing.T, s *mcp.Server) *mcp.ClientSession {
	t.Helper()
	ctx := t.Context()
	ct, st := mcp.NewInMemoryTransports()
	ss, err := s.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "v0"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// TestTypedToolMatchesSDK checks that a tool added with addTypedTool is
// listed with the same schemas and answers every call as the same tool added
// with mcp.AddTool: valid arguments, arguments the schema refuses (wrong
// type, missing, unknown, a name in another case, out of bounds, not in the
// enum), numbers written as 1.0 or 1e2 for an integer, absent and null
// arguments, and a tool that fails.
func TestTypedToolMatchesSDK(t *testing.T) {
	tb, ws := newTestToolbox(t)
	if err := os.WriteFile(filepath.Join(ws, "a.txt"), []byte("one\ntwo\nthree\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := pairedServers{
		fast: mcp.NewServer(&mcp.Implementation{Name: "fast", Version: "v0"}, nil),
		sdk:  mcp.NewServer(&mcp.Implementation{Name: "sdk", Version: "v0"}, nil),
	}
	addPaired(p, &mcp.Tool{Name: toolnames.Read, InputSchema: schemaFor[ReadInput](func(s *jsonschema.Schema) {
		s.Properties["offset"].Minimum = ptr(0.0)
	})}, tb.read)
	addPaired(p, &mcp.Tool{Name: toolnames.Grep, InputSchema: schemaFor[GrepInput](func(s *jsonschema.Schema) {
		s.Properties["output_mode"].Enum = []any{grepContent, grepFilesWithMatches, grepCount}
	})}, tb.grep)
	addPaired(p, &mcp.Tool{Name: toolnames.MultiEdit}, tb.multiEdit)
	addPaired(p, &mcp.Tool{Name: toolnames.LS}, tb.ls)
	fast, sdk := connectServer(t, p.fast), connectServer(t, p.sdk)

	list := func(cs *mcp.ClientSession) []*mcp.Tool {
		res, err := cs.ListTools(t.Context(), nil)
		if err != nil {
			t.Fatal(err)
		}
		return res.Tools
	}
	if diff := cmp.Diff(list(sdk), list(fast)); diff != "" {
		t.Errorf("tools/list (-sdk +fast):\n%s", diff)
	}

	for _, c := range []struct{ tool, args string }{
		{toolnames.Read, `{"file_path":"a.txt"}`},
		{toolnames.Read, `{"file_path":"a.txt","offset":2,"limit":1}`},
		{toolnames.Read, `{"file_path":"a.txt","offset":2.0,"limit":1e0}`},
		{toolnames.Read, `{"file_path":"a.txt","offset":1.5}`},
		{toolnames.Read, `{"file_path":"a.txt","offset":-1}`},
		{toolnames.Read, `{"file_path":"a.txt","offset":"2"}`},
		{toolnames.Read, `{"File_Path":"a.txt"}`},
		{toolnames.Read, `{"file_path":"a.txt","FILE_PATH":"b.txt"}`},
		{toolnames.Read, `{"file_path":"a.txt","extra":1}`},
		{toolnames.Read, `{"file_path":"missing.txt"}`},
		{toolnames.Read, `{"file_path":"../outside"}`},
		{toolnames.Read, `{}`},
		{toolnames.Read, `null`},
		{toolnames.Read, `[]`},
		{toolnames.Read, `"a.txt"`},
		{toolnames.Read, `{"file_path":null}`},
		{toolnames.Grep, `{"pattern":"t","output_mode":"content"}`},
		{toolnames.Grep, `{"pattern":"t","output_mode":"lines"}`},
		{toolnames.Grep, `{"pattern":"(","output_mode":"count"}`},
		{toolnames.Grep, `{"pattern":"t","head_limit":1e2}`},
		{toolnames.MultiEdit, `{"file_path":"a.txt","edits":[{"old_string":"zzz","new_string":"y"}]}`},
		{toolnames.MultiEdit, `{"file_path":"a.txt","edits":[{"old_string":"one","new_string":"1","Replace_All":true}]}`},
		{toolnames.MultiEdit, `{"file_path":"a.txt","edits":[{"old_string":"one"}]}`},
		{toolnames.MultiEdit, `{"file_path":"a.txt","edits":null}`},
		{toolnames.LS, ``},
		{toolnames.LS, `{"ignore":["*.txt"]}`},
		{toolnames.LS, `{"ignore":"*.txt"}`},
	} {
		call := func(cs *mcp.ClientSession) any {
			params := &mcp.CallToolParams{Name: c.tool}
			if c.args != "" {
				params.Arguments = json.RawMessage(c.args)
			}
			res, err := cs.CallTool(t.Context(), params)
			if err != nil {
				return map[string]any{"protocol error": err.Error()}
			}
			return map[string]any{"isError": res.IsError, "content": sandboxdtest.ContentText(res), "structured": res.StructuredContent}
		}
		// Read marks are shared: the SDK's server answers first, so that
		// both see the same marks.
		want := call(sdk)
		got := call(fast)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s(%s) (-sdk +fast):\n%s", c.tool, c.args, diff)
		}
	}
}

// TestEveryToolTakesTheFastPath checks that every tool's schemas let
// addTypedTool decode with encoding/json, so that none falls back to the
// SDK's slower path unnoticed.
func TestEveryToolTakesTheFastPath(t *testing.T) {
	tb, _ := newTestToolbox(t)
	cs := connectTools(t, tb)
	res, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Tools) != len(toolnames.All()) {
		t.Fatalf("%d tools listed, want %d", len(res.Tools), len(toolnames.All()))
	}
	for _, tool := range res.Tools {
		for what, schema := range map[string]any{"input": tool.InputSchema, "output": tool.OutputSchema} {
			data, err := json.Marshal(schema)
			if err != nil {
				t.Fatal(err)
			}
			var doc any
			if err := json.Unmarshal(data, &doc); err != nil {
				t.Fatal(err)
			}
			if !schemaDecodesExactly(doc) {
				t.Errorf("%s: the %s schema has a default or an open object: addTypedTool falls back to mcp.AddTool", tool.Name, what)
			}
		}
	}
}

// TestSchemaDecodesExactly checks the schemas that make addTypedTool fall
// back to mcp.AddTool: a default anywhere, an object with properties that
// allows others.
func TestSchemaDecodesExactly(t *testing.T) {
	for _, c := range []struct {
		schema string
		want   bool
	}{
		{`{"type":"object","properties":{"a":{"type":"string"}},"additionalProperties":false}`, true},
		{`{"type":"object","properties":{"a":{"type":"string"}}}`, false},
		{`{"type":"object","properties":{"a":{"type":"string"}},"additionalProperties":{}}`, false},
		{`{"type":"object","properties":{"a":{"type":"string","default":"x"}},"additionalProperties":false}`, false},
		{`{"type":"object","properties":{"default":{"type":"string"}},"additionalProperties":false}`, true},
		{`{"type":"object","properties":{"a":{"type":"array","items":{"type":"object","properties":{"b":{}}}}},"additionalProperties":false}`, false},
		{`{"type":"object","additionalProperties":{"type":"object","properties":{"b":{}},"additionalProperties":false}}`, true},
		{`{"type":"object","additionalProperties":{"type":"object","properties":{"b":{}}}}`, false},
		{`{"anyOf":[{"type":"string"},{"type":"object","properties":{"b":{}}}]}`, false},
		{`{"$defs":{"x":{"default":1}},"type":"object"}`, false},
	} {
		var doc any
		if err := json.Unmarshal([]byte(c.schema), &doc); err != nil {
			t.Fatal(err)
		}
		if got := schemaDecodesExactly(doc); got != c.want {
			t.Errorf("%s: %v, want %v", c.schema, got, c.want)
		}
	}
}

// TestPlainOutput checks which output types addTypedTool does not validate
// results of: those whose every value the inferred schema accepts.
func TestPlainOutput(t *testing.T) {
	type node struct {
		Name     string  `json:"name"`
		Children []*node `json:"children,omitempty"`
	}
	type embedded struct{ A int }
	for _, c := range []struct {
		name string
		typ  reflect.Type
		want bool
	}{
		{"ReadOutput", reflect.TypeFor[ReadOutput](), true},
		{"GrepOutput", reflect.TypeFor[GrepOutput](), true},
		{"recursive", reflect.TypeFor[node](), true},
		{"pointer", reflect.TypeFor[*ReadOutput](), true},
		{"embedded", reflect.TypeFor[struct {
			embedded
			B map[string][]float64
		}](), true},
		{"skipped field", reflect.TypeFor[struct {
			A int `json:"-"`
			b any
		}](), true},
		{"time", reflect.TypeFor[struct{ T time.Time }](), false},
		{"any", reflect.TypeFor[struct{ V any }](), false},
		{"bytes", reflect.TypeFor[struct{ B []byte }](), false},
		{"int keys", reflect.TypeFor[map[int]string](), false},
		{"string option", reflect.TypeFor[struct {
			N int `json:"n,string"`
		}](), false},
		{"json.RawMessage", reflect.TypeFor[struct{ R json.RawMessage }](), false},
		{"channel", reflect.TypeFor[struct{ C chan int }](), false},
	} {
		if got := plainOutput(c.typ); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
