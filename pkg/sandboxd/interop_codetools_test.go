package sandboxd

import (
	"context"
	"strings"
	"testing"

	mcpgoclient "github.com/mark3labs/mcp-go/client"
	mcpgo "github.com/mark3labs/mcp-go/mcp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/sandboxdtest"
	"github.com/airlock-dev/airlock/pkg/toolnames"
)

// caller calls one tool through some client and returns its text and
// whether it is a tool error; a protocol error fails the test.
type caller func(t *testing.T, name string, args map[string]any) (string, bool)

// codeToolsRoundTrip drives the AST edit tools, search_code, run_script and
// tests_covering through a client, in the directory dir of the workspace:
// each once as it should work, and once with bad input, which must come
// back as a tool error the model reads.
func codeToolsRoundTrip(t *testing.T, call caller, dir string) {
	t.Helper()
	ok := func(name string, args map[string]any) string {
		t.Helper()
		text, isErr := call(t, name, args)
		if isErr {
			t.Fatalf("%s(%v) failed: %s", name, args, text)
		}
		return text
	}
	toolErr := func(name string, args map[string]any, want string) {
		t.Helper()
		text, isErr := call(t, name, args)
		if !isErr || !strings.Contains(text, want) {
			t.Errorf("%s(%v) = %q (isError %v), want a tool error containing %q", name, args, text, isErr, want)
		}
	}
	file := dir + "/calc.go"
	ok(toolnames.Write, map[string]any{"file_path": dir + "/go.mod", "content": "module example.com/" + dir + "\n\ngo 1.22\n"})
	ok(toolnames.Write, map[string]any{"file_path": file, "content": "package calc\n\n// Add adds.\nfunc Add(a, b int) int { return a - b }\n\ntype Acc struct{ n int }\n\nfunc (a *Acc) Inc() { a.n++ }\n"})
	ok(toolnames.Write, map[string]any{"file_path": dir + "/calc_test.go", "content": "package calc\n\nimport \"testing\"\n\nfunc TestAdd(t *testing.T) {\n\tif Add(2, 1) != 3 {\n\t\tt.Fatal(Add(2, 1))\n\t}\n}\n\nfunc TestInc(t *testing.T) { new(Acc).Inc() }\n"})
	ok(toolnames.Write, map[string]any{"file_path": "Makefile", "content": "check:\n\t@cd " + dir + " && go vet . && echo vet-clean\n"})

	if got := ok(toolnames.EditFunctionBody, map[string]any{"file_path": file, "function_name": "Add", "new_body": "return a+b"}); !strings.Contains(got, "Replaced the body of Add in "+file) || !strings.Contains(got, "\treturn a + b") {
		t.Errorf("edit_function_body answered %q", got)
	}
	if got := ok(toolnames.ChangeFunctionSignature, map[string]any{"file_path": file, "function_name": "(*Acc).Inc", "new_signature": "func (a *Acc) Inc(by int)"}); !strings.Contains(got, "func (a *Acc) Inc(by int) { a.n++ }") {
		t.Errorf("change_function_signature answered %q", got)
	}
	ok(toolnames.EditFunctionBody, map[string]any{"file_path": file, "function_name": "Acc.Inc", "new_body": "a.n += by"})
	if got := ok(toolnames.InsertAfterMethod, map[string]any{"file_path": file, "receiver_type": "*Acc", "method_name": "Inc", "new_method": "func (a *Acc) N() int { return a.n }"}); !strings.Contains(got, "Inserted (Acc).N after (Acc).Inc") {
		t.Errorf("insert_after_method answered %q", got)
	}
	ok(toolnames.EditFunctionBody, map[string]any{"file_path": dir + "/calc_test.go", "function_name": "TestInc", "new_body": "new(Acc).Inc(2)"})
	toolErr(toolnames.EditFunctionBody, map[string]any{"file_path": file, "function_name": "Mul", "new_body": "return"}, "function Mul not found in "+file)
	toolErr(toolnames.ChangeFunctionSignature, map[string]any{"file_path": file, "function_name": "Add", "new_signature": "func Add(a, b int int"}, "new_signature does not parse as Go")
	toolErr(toolnames.InsertAfterMethod, map[string]any{"file_path": "Makefile", "receiver_type": "Acc", "method_name": "Inc", "new_method": "func (a *Acc) X() {}"}, "is not a Go file")

	if got := ok(toolnames.SearchCode, map[string]any{"query": "Acc.N", "kind": "method", "exact": true, "path": dir}); got != file+":14:15: method Acc.N: func (a *Acc) N() int" {
		t.Errorf("search_code answered %q", got)
	}
	toolErr(toolnames.SearchCode, map[string]any{"query": "a b"}, "is not a name")

	if got := ok(toolnames.TestsCovering, map[string]any{"file_path": file, "function": "Add"}); !strings.HasPrefix(got, "1 of the 2 tests run in "+dir+" execute Add in "+file+" (lines 4-6):\n  TestAdd\n") {
		t.Errorf("tests_covering answered %q", got)
	}
	toolErr(toolnames.TestsCovering, map[string]any{"file_path": dir + "/calc_test.go"}, "is a test file")

	if got := ok(toolnames.RunScript, map[string]any{"name": "check"}); !strings.Contains(got, "vet-clean") || !strings.HasSuffix(got, "make script check: passed") {
		t.Errorf("run_script answered %q", got)
	}
	toolErr(toolnames.RunScript, map[string]any{"name": "deploy"}, `no script named "deploy" is declared; declared: make: check`)
}

func TestCodeToolsGoSDK(t *testing.T) {
	ts := startServer(t, Config{}, options{})
	cs := connectSSE(t, ts.url, nil)
	codeToolsRoundTrip(t, func(t *testing.T, name string, args map[string]any) (string, bool) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*testTimeout)
		defer cancel()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return sandboxdtest.ContentText(res), res.IsError
	}, "sdk")
}

func TestCodeToolsMCPGo(t *testing.T) {
	ts := startServer(t, Config{}, options{})
	c, err := mcpgoclient.NewStreamableHttpClient(ts.url + "/mcp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.Start(t.Context()); err != nil {
		t.Fatalf("start: %v", err)
	}
	init := mcpgo.InitializeRequest{}
	init.Params.ClientInfo = mcpgo.Implementation{Name: "mcp-go-test", Version: "v0"}
	if _, err := c.Initialize(t.Context(), init); err != nil {
		t.Fatalf("initialize: %v", err)
	}
	codeToolsRoundTrip(t, func(t *testing.T, name string, args map[string]any) (string, bool) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*testTimeout)
		defer cancel()
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
		return b.String(), res.IsError
	}, "mcpgo")
}
