// Command agentloop is a runtime's agent loop with an airlock sandbox, to copy: acquire, then
// Write, Bash and Read through the official MCP Go SDK (renewing after each call), close. In a
// pod that runs as the AgentRuntime's ServiceAccount, with the projected token and airlock-ca
// mounted (docs/clients.md):
//
//	AIRLOCK_RUNTIME=agent agentloop session-1
//
// A real agent asks its model which tool to call next; here the "model" is a fixed plan.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-dev/airlock/pkg/client"
)

const handle = "codegen/default"

// plan is what the model would ask for, one tool call at a time.
var plan = []struct {
	tool string
	args map[string]any
}{
	{"Write", map[string]any{"file_path": "hello.py", "content": "print('hello from the sandbox')\n"}},
	{"Bash", map[string]any{"command": "python3 hello.py || echo 'no python3 in this sandbox'"}},
	{"Read", map[string]any{"file_path": "hello.py"}},
}

func main() {
	session := "example-session"
	if len(os.Args) > 1 {
		session = os.Args[1]
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	if err := run(ctx, client.Config{}, session, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// run is the loop; cfg is empty in a pod (runtime from $AIRLOCK_RUNTIME, the rest from the pod).
func run(ctx context.Context, cfg client.Config, sessionID string, out io.Writer) error {
	s, err := client.NewSession(cfg, sessionID)
	if err != nil {
		return err
	}
	sb, err := s.Acquire(ctx, handle) // waits through 202s
	var apiErr *client.APIError
	if errors.Is(err, client.ErrRefused) && errors.As(err, &apiErr) {
		return fmt.Errorf("refused (%s), not queued: try later: %w", apiErr.Reason, err)
	}
	if err != nil {
		return fmt.Errorf("no sandbox: %w", err)
	}
	fmt.Fprintf(out, "sandbox %s at %s (warm %v, resumed %v)\n", sb.Claim, sb.MCPURL, sb.Warm, sb.ResumedWorkspace != nil)
	err = callTools(ctx, s, sb, out)
	closed, cerr := s.Close(context.WithoutCancel(ctx)) // reaps the sandbox now, with its sync-back
	if cerr != nil {
		return errors.Join(err, fmt.Errorf("close: %w", cerr))
	}
	fmt.Fprintf(out, "closed session %s (%d sandbox(es))\n", sessionID, len(closed.Claims))
	return err
}

// callTools connects the official MCP Go SDK to the sandbox (streamable HTTP, with its
// Authorization header) and runs the plan, renewing after each call.
func callTools(ctx context.Context, s *client.Session, sb *client.Sandbox, out io.Writer) error {
	mc := mcp.NewClient(&mcp.Implementation{Name: "agentloop", Version: "v0.1.0"}, nil)
	cs, err := mc.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: sb.MCPURL, HTTPClient: sb.HTTPClient(nil)}, nil)
	if err != nil {
		return fmt.Errorf("MCP: %w", err)
	}
	defer cs.Close()
	for _, step := range plan {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: step.tool, Arguments: step.args})
		if err != nil {
			return fmt.Errorf("%s: %w", step.tool, err)
		}
		var text strings.Builder
		for _, c := range res.Content {
			if t, ok := c.(*mcp.TextContent); ok {
				text.WriteString(t.Text)
			}
		}
		prefix := ""
		if res.IsError {
			prefix = "ERROR "
		}
		fmt.Fprintf(out, "%s -> %s%s\n", step.tool, prefix, strings.TrimSpace(text.String()))
		if _, err := s.Renew(ctx, handle); err != nil { // after each tool call: at most one API write per idle/2
			return fmt.Errorf("renew: %w", err)
		}
	}
	return nil
}
