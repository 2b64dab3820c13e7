package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

const testTraceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// TestPlanTraceparentOnEveryAPIRequest: a plan's traceparent is the header of the runtime's
// Sandbox API requests; without one, none is sent.
func TestPlanTraceparentOnEveryAPIRequest(t *testing.T) {
	got := make(chan string, 1)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("traceparent")
	}))
	defer srv.Close()
	for _, tp := range []string{testTraceparent, ""} {
		cfg, err := apiConfig(Plan{API: srv.URL, InsecureSkipVerify: true, Traceparent: tp})
		if err != nil {
			t.Fatal(err)
		}
		resp, err := cfg.HTTPClient.Get(srv.URL + "/v1/sandboxes/acquire")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if h := <-got; h != tp {
			t.Errorf("plan traceparent %q: the request's header %q", tp, h)
		}
	}
}

// TestStepTraceparentInCallMeta: a step's traceparent is its tools/call's
// params._meta.traceparent; a step without one sends no _meta.
func TestStepTraceparentInCallMeta(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	metas := make(chan mcp.Meta, 2)
	server := mcp.NewServer(&mcp.Implementation{Name: "test", Version: "v0"}, nil)
	server.AddTool(&mcp.Tool{Name: "Echo", InputSchema: map[string]any{"type": "object"}}, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		metas <- req.Params.Meta
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil
	})
	st, ct := mcp.NewInMemoryTransports()
	ss, err := server.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "client", Version: "v0"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()

	if r := call(ctx, cs, Step{Tool: "Echo", Args: map[string]any{}, Traceparent: testTraceparent}); r.Err != "" || r.Text != "ok" {
		t.Fatalf("traced call: %+v", r)
	}
	if m := <-metas; m["traceparent"] != testTraceparent {
		t.Errorf("traced call's _meta %v, want traceparent %s", m, testTraceparent)
	}
	if r := call(ctx, cs, Step{Tool: "Echo", Args: map[string]any{}}); r.Err != "" {
		t.Fatalf("untraced call: %+v", r)
	}
	if m := <-metas; m["traceparent"] != nil {
		t.Errorf("untraced call's _meta %v, want no traceparent", m)
	}
}
