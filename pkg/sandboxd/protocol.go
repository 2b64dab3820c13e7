package sandboxd

import (
	"context"
	"fmt"
	"runtime/debug"
	"slices"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"k8s.io/klog/v2"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/confine"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/procgroup"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/recordlog"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/scrub"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/toolcall"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/tools"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/wire"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/wsscan"
	"github.com/airlock-dev/airlock/pkg/toolnames"
)

const (
	toolNameUnknown   = "unknown" // metrics label for calls of tools that are not served
	toolNameMaxLength = 128
)

// newMCPServer builds the protocol layer: the SDK's MCP server with the
// served tools, restricted to wire.ProtocolVersions, with the middleware that
// counts tool calls and turns a panicking tool into a tool error.
func newMCPServer(tb *tools.Toolbox, gate *wire.Gate, served []string, m *metrics, cr callRecording, logger klog.Logger) (*mcp.Server, *wire.CallTable) {
	s := newBareMCPServer(tb, logger)
	return s, serveTools(s, tb, gate, served, m, cr, logger)
}

// newBareMCPServer builds the SDK's MCP server without tools: a warm
// member's until its adoption (serveTools).
func newBareMCPServer(tb *tools.Toolbox, logger klog.Logger) *mcp.Server {
	return mcp.NewServer(wire.ServerImplementation(), &mcp.ServerOptions{
		Instructions: fmt.Sprintf("airlock codegen sandbox. File tools work inside the workspace %s (relative paths are taken from it); "+
			"Bash runs /bin/bash -c in it. Read a file before you Write over it or Edit it.", tb.Workspace().Dir()),
		Logger: wire.SDKLogger(logger),
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{},
			// sandboxd has no prompts or resources, but the SDK answers
			// their lists (empty), and a server declares what it answers
			// (the 2026-07-28 revision checks it: the conformance suite's
			// sep-2575-server-declares-prompts-in-discover).
			Prompts:   &mcp.PromptCapabilities{},
			Resources: &mcp.ResourceCapabilities{},
			// Served to 2026-07-28 requests that declare it (tasks.go).
			Extensions: map[string]any{wire.TasksExtension: map[string]any{}}},
		SupportedProtocolVersions: wire.ProtocolVersions,
	})
}

// serveTools adds the served tools to s, with the middleware every tool
// call goes through, and returns the table of those that the SSE transport
// calls directly (directcall.go), in the same middleware. It is called once
// per server: at construction, or for a warm member at its adoption, before
// any session exists.
func serveTools(s *mcp.Server, tb *tools.Toolbox, gate *wire.Gate, served []string, m *metrics, cr callRecording, logger klog.Logger) *wire.CallTable {
	s.AddReceivingMiddleware(toolCallMiddleware(gate, served, m, cr, logger, true))
	set := toolcall.NewSet(s)
	tools.Add(set, tb, served)
	return wire.NewCallTable(set, toolCallMiddleware(gate, served, m, cr, logger, false), gate)
}

// toolCallMiddleware is the one place every tools/call goes through. It
// lets the call through the gate (snapshot_restore and snapshot_create
// alone, the others side by side), turns a panic in a tool into a tool
// error instead of a crash, scrubs secrets from the result, counts,
// times and logs the call by tool and result, and records it in the
// session's log with what it wrote and ran (rec; a nil log records nothing).
//
// sdk says the middleware is the SDK's, which runs each call on a fresh
// goroutine whose stack wire.GrowStack grows at once; the direct path's calls
// (directcall.go) are shallow enough not to need it.
func toolCallMiddleware(gate *wire.Gate, served []string, m *metrics, cr callRecording, logger klog.Logger, sdk bool) mcp.Middleware {
	rec := cr.log
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (res mcp.Result, err error) {
			if method != "tools/call" {
				return next(ctx, method, req)
			}
			if sdk {
				wire.GrowStack()
			}
			tool := toolNameUnknown
			if p, ok := req.GetParams().(*mcp.CallToolParamsRaw); ok && slices.Contains(served, p.Name) {
				tool = p.Name
			}
			start := time.Now()
			var call uint64
			var trace callTrace
			var recorder *callRecorder
			if rec != nil {
				call, trace = rec.NextCall(), callTraceOf(req)
				recorder = &callRecorder{log: rec, call: call, trace: trace, ws: cr.ws, scan: cr.scan, seen: cr.seen}
				ctx = toolcall.WithRecorder(ctx, recorder)
				if env := trace.processEnv(processGetenv); env != nil {
					ctx = procgroup.WithEnv(ctx, env)
				}
			}
			defer func() {
				if r := recover(); r != nil {
					logger.Error(nil, "Tool panicked", "tool", tool, "panic", r, "stack", string(debug.Stack()))
					failed := &mcp.CallToolResult{}
					failed.SetError(fmt.Errorf("internal error in %s: %v (this is a sandboxd bug)", tool, r))
					res, err = failed, nil
				}
				if r, ok := res.(*mcp.CallToolResult); ok && r != nil {
					if found := scrub.Result(r); len(found) > 0 {
						m.scrubbed(found)
						logger.V(2).Info("Secrets redacted from a tool result", "tool", tool, "kinds", found.Counts())
					}
				}
				result := callStatus(ctx, res, err)
				elapsed := time.Since(start)
				m.observe(tool, result, elapsed)
				if rec != nil {
					recorder.end() // the files its processes wrote, before the call's entry
					recordCall(rec, call, tool, req, result, start, elapsed, trace)
				}
				logger.V(2).Info("Tool call", "tool", tool, "result", result, "elapsed", elapsed)
			}()
			if tool == toolNameUnknown {
				return next(ctx, method, req) // the SDK answers a protocol error
			}
			if wire.GateHeld(ctx) {
				return next(ctx, method, req) // a direct call that entered it
			}
			release, gerr := gate.Enter(ctx, tool == toolnames.SnapshotRestore || tool == toolnames.SnapshotCreate)
			if gerr != nil {
				failed := &mcp.CallToolResult{}
				failed.SetError(fmt.Errorf("cancelled while waiting for the tool calls before it to finish (a snapshot runs alone): %v", gerr))
				return failed, nil
			}
			defer release()
			return next(ctx, method, req)
		}
	}
}

// callRecording is what the middleware records each call with: the session's log (nil records
// nothing), the workspace that the call's processes are scanned in, the scan's bounds, and what
// the record last said of each file.
type callRecording struct {
	log  *recordlog.Log
	ws   *confine.Resolver
	scan wsscan.Limits
	seen *seenFiles
}

// newCallRecording is the recording of the session's log rec in the workspace ws: each scan
// within limits (wsscan.DefaultLimits when zero).
func newCallRecording(rec *recordlog.Log, ws *confine.Resolver, limits wsscan.Limits) callRecording {
	if limits == (wsscan.Limits{}) {
		limits = wsscan.DefaultLimits
	}
	return callRecording{log: rec, ws: ws, scan: limits, seen: newSeenFiles()}
}

// callStatus is the result label of a finished tool call.
func callStatus(ctx context.Context, res mcp.Result, err error) string {
	switch {
	case ctx.Err() != nil:
		return statusCanceled
	case err != nil:
		return statusProtocolError
	}
	if r, ok := res.(*mcp.CallToolResult); ok && r.IsError {
		return statusError
	}
	return statusOK
}
