package tools

import (
	"context"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"k8s.io/klog/v2/ktesting"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/sandboxdtest"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/scrub"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/toolcall"
	"github.com/airlock-dev/airlock/pkg/toolnames"
)

// testTimeout bounds a wait of a test.
const testTimeout = sandboxdtest.Timeout

// newInMemory connects an SDK client to every tool of a fresh toolbox
// (connectTools), and returns the workspace.
func newInMemory(t *testing.T) (*mcp.ClientSession, string) {
	t.Helper()
	tb, ws := newTestToolbox(t)
	return connectTools(t, tb), ws
}

// connectTools serves every tool of tb on an SDK server, as sandboxd adds
// them (Add), over the SDK's in-memory transports, and connects a client.
// Results pass the secret scrubber, as sandboxd's middleware has them do;
// the rest of that middleware (the call gate, metrics, panics) is
// pkg/sandboxd's and tested there.
func connectTools(t *testing.T, tb *Toolbox) *mcp.ClientSession {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	server := mcp.NewServer(&mcp.Implementation{Name: "tools", Version: "v0"}, nil)
	server.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			res, err := next(ctx, method, req)
			if r, ok := res.(*mcp.CallToolResult); ok && r != nil {
				scrub.Result(r)
			}
			return res, err
		}
	})
	Add(toolcall.NewSet(server), tb, toolnames.All())
	return sandboxdtest.ConnectInMemory(ctx, t, server, nil)
}
