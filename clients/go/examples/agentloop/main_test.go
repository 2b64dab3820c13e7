package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-dev/airlock/pkg/client"
)

// TestAgentLoop runs the example against a stand-in of the Sandbox API and an MCP server of the
// official SDK that refuses requests without the sandbox's Authorization header.
func TestAgentLoop(t *testing.T) {
	var mu sync.Mutex
	var calls, apiPaths []string
	server := mcp.NewServer(&mcp.Implementation{Name: "fake-sandboxd", Version: "v0"}, nil)
	files := map[string]string{}
	type args struct {
		FilePath string `json:"file_path,omitempty"`
		Content  string `json:"content,omitempty"`
		Command  string `json:"command,omitempty"`
	}
	tool := func(name string, f func(args) string) {
		mcp.AddTool(server, &mcp.Tool{Name: name}, func(_ context.Context, _ *mcp.CallToolRequest, in args) (*mcp.CallToolResult, any, error) {
			mu.Lock()
			defer mu.Unlock()
			calls = append(calls, name)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: f(in)}}}, nil, nil
		})
	}
	tool("Write", func(in args) string { files[in.FilePath] = in.Content; return "Wrote " + in.FilePath })
	tool("Bash", func(in args) string { return "ran " + in.Command })
	tool("Read", func(in args) string { return files[in.FilePath] })
	handler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil)
	sandbox := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer claim-token" {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		handler.ServeHTTP(w, r)
	}))
	defer sandbox.Close()
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		apiPaths = append(apiPaths, r.URL.Path)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v1/sandboxes/acquire":
			_ = json.NewEncoder(w).Encode(client.AcquireResponse{Claim: "c", Phase: "Bound",
				Addresses: []client.Address{{Name: "mcp", URL: sandbox.URL}}, Headers: map[string]string{"Authorization": "Bearer claim-token"}})
		case "/v1/sandboxes/renew":
			w.WriteHeader(http.StatusNoContent)
		default:
			w.WriteHeader(http.StatusAccepted)
			_ = json.NewEncoder(w).Encode(client.SessionResponse{Claims: []client.SessionClaim{}})
		}
	}))
	defer api.Close()
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte("sa-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	cfg := client.Config{API: api.URL, PlainHTTP: true, TokenFile: token, Namespace: "team-a", Runtime: "agent"}
	if err := run(context.Background(), cfg, "s1", &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "Read -> print('hello from the sandbox')") || !strings.HasSuffix(out.String(), "\nclosed session s1 (0 sandbox(es))\n") {
		t.Errorf("output:\n%s", out.String())
	}
	if want := []string{"Write", "Bash", "Read"}; !slices.Equal(calls, want) {
		t.Errorf("calls %v, want %v", calls, want)
	}
	// One renewal (the throttle), then the close.
	if want := []string{"/v1/sandboxes/acquire", "/v1/sandboxes/renew", "/v1/sessions/close"}; !slices.Equal(apiPaths, want) {
		t.Errorf("API calls %v, want %v", apiPaths, want)
	}
}
