package sandboxd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"k8s.io/klog/v2"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/scrub"
	"github.com/airlock-dev/airlock/pkg/toolnames"
	"github.com/airlock-dev/airlock/pkg/version"
)

// MaxMessageBytes bounds one JSON-RPC message that a client POSTs, on both
// transports. A larger message is refused with HTTP 413 and a JSON-RPC error
// that says so.
const MaxMessageBytes = 4 << 20

// protocolVersions are the MCP protocol versions sandboxd negotiates, newest
// first. A client that asks for another version is answered with the newest
// of these (initialize) or refused (server/discover), and falls back.
var protocolVersions = []string{protocolStateless, "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"}

// protocolStateless is the stateless revision: no initialize, no session,
// each request's version and capabilities in its _meta. It is served on
// /mcp only (the stateless handler, transport_streamable.go); initialize
// never negotiates it (the SDK caps initialize at 2025-11-25).
const protocolStateless = "2026-07-28"

// serverName is the name sandboxd gives in its initialize result.
const serverName = "airlock-sandboxd"

// newMCPServer builds the protocol layer: the SDK's MCP server with the
// served tools, restricted to protocolVersions, with the middleware that
// counts tool calls and turns a panicking tool into a tool error.
func newMCPServer(tb *toolbox, served []string, m *metrics, logger klog.Logger) (*mcp.Server, *callTable) {
	s := newBareMCPServer(tb, logger)
	return s, serveTools(s, tb, served, m, logger)
}

// serverImplementation is how sandboxd names itself to clients.
func serverImplementation() *mcp.Implementation {
	impl := *implementation() // a copy: the caller may change it
	return &impl
}

// implementation is sandboxd's name and version, read once: version.Get
// reads the build information, which every 2026-07-28 result names.
var implementation = sync.OnceValue(func() *mcp.Implementation {
	return &mcp.Implementation{Name: serverName, Version: version.Get().Version}
})

// newBareMCPServer builds the SDK's MCP server without tools: a warm
// member's until its adoption (serveTools).
func newBareMCPServer(tb *toolbox, logger klog.Logger) *mcp.Server {
	return mcp.NewServer(serverImplementation(), &mcp.ServerOptions{
		Instructions: fmt.Sprintf("airlock codegen sandbox. File tools work inside the workspace %s (relative paths are taken from it); "+
			"Bash runs /bin/bash -c in it. Read a file before you Write over it or Edit it.", tb.ws.Dir()),
		Logger: sdkLogger(logger),
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{},
			// sandboxd has no prompts or resources, but the SDK answers
			// their lists (empty), and a server declares what it answers
			// (the 2026-07-28 revision checks it: the conformance suite's
			// sep-2575-server-declares-prompts-in-discover).
			Prompts:   &mcp.PromptCapabilities{},
			Resources: &mcp.ResourceCapabilities{},
			// Served to 2026-07-28 requests that declare it (tasks.go).
			Extensions: map[string]any{tasksExtension: map[string]any{}}},
		SupportedProtocolVersions: protocolVersions,
	})
}

// serveTools adds the served tools to s, with the middleware every tool
// call goes through, and returns the table of those that the SSE transport
// calls directly (directcall.go), in the same middleware. It is called once
// per server: at construction, or for a warm member at its adoption, before
// any session exists.
func serveTools(s *mcp.Server, tb *toolbox, served []string, m *metrics, logger klog.Logger) *callTable {
	s.AddReceivingMiddleware(toolCallMiddleware(tb.gate, served, m, logger, true))
	set := newToolSet(s)
	for _, spec := range toolSpecs {
		if slices.Contains(served, spec.name) {
			spec.add(set, tb)
		}
	}
	return newCallTable(set, toolCallMiddleware(tb.gate, served, m, logger, false), tb.gate)
}

// sdkLogger routes the SDK's slog output to klog, at V(4) but for errors.
func sdkLogger(logger klog.Logger) *slog.Logger {
	return slog.New(logr.ToSlogHandler(logger.WithName("mcp").V(4)))
}

// toolCallMiddleware is the one place every tools/call goes through. It
// lets the call through the gate (snapshot_restore and snapshot_create
// alone, the others side by side), turns a panic in a tool into a tool
// error instead of a crash, scrubs secrets from the result, and counts,
// times and logs the call by tool and result.
//
// sdk says the middleware is the SDK's, which runs each call on a fresh
// goroutine whose stack growStack grows at once; the direct path's calls
// (directcall.go) are shallow enough not to need it.
func toolCallMiddleware(gate *callGate, served []string, m *metrics, logger klog.Logger, sdk bool) mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (res mcp.Result, err error) {
			if method != "tools/call" {
				return next(ctx, method, req)
			}
			if sdk {
				growStack()
			}
			tool := toolNameUnknown
			if p, ok := req.GetParams().(*mcp.CallToolParamsRaw); ok && slices.Contains(served, p.Name) {
				tool = p.Name
			}
			start := time.Now()
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
				logger.V(2).Info("Tool call", "tool", tool, "result", result, "elapsed", elapsed)
			}()
			if tool == toolNameUnknown {
				return next(ctx, method, req) // the SDK answers a protocol error
			}
			if gateHeld(ctx) {
				return next(ctx, method, req) // a direct call that entered it
			}
			release, gerr := gate.enter(ctx, tool == toolnames.SnapshotRestore || tool == toolnames.SnapshotCreate)
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

// knownMethods are the client-to-server methods the protocol layer (the
// SDK's server) handles. Any other request is answered -32601 by the
// transport at once, before and after initialize alike, so that a client
// probing a method sandboxd does not have never waits and never gets an
// HTTP error instead.
var knownMethods = map[string]bool{
	"initialize":                       true,
	"ping":                             true,
	"tools/list":                       true,
	"tools/call":                       true,
	"prompts/list":                     true,
	"prompts/get":                      true,
	"resources/list":                   true,
	"resources/templates/list":         true,
	"resources/read":                   true,
	"resources/subscribe":              true,
	"resources/unsubscribe":            true,
	"logging/setLevel":                 true,
	"completion/complete":              true,
	"server/discover":                  true,
	"subscriptions/listen":             true,
	"notifications/initialized":        true,
	"notifications/cancelled":          true,
	"notifications/progress":           true,
	"notifications/roots/list_changed": true,
}

// unknownMethod checks a request the protocol layer would not handle: it
// returns handled=true for one, with the -32601 response to send for a call
// (nil for a notification, which is dropped).
func unknownMethod(msg jsonrpc.Message) (resp *jsonrpc.Response, handled bool) {
	req, ok := msg.(*jsonrpc.Request)
	if !ok || knownMethods[req.Method] {
		return nil, false
	}
	if !req.IsCall() {
		return nil, true
	}
	return &jsonrpc.Response{ID: req.ID, Error: &jsonrpc.Error{
		Code:    jsonrpc.CodeMethodNotFound,
		Message: fmt.Sprintf("method not found: %q (sandboxd serves tools: tools/list, tools/call)", req.Method),
	}}, true
}

// rpcError is a JSON-RPC error answered directly in an HTTP response, for a
// message that never reaches the protocol layer.
type rpcError struct {
	status int // HTTP status
	code   int64
	msg    string
}

func (e *rpcError) Error() string { return e.msg }

// write answers the request with the error as a JSON-RPC response (id null).
func (e *rpcError) write(w http.ResponseWriter) {
	body, _ := json.Marshal(struct {
		JSONRPC string `json:"jsonrpc"`
		ID      any    `json:"id"`
		Error   struct {
			Code    int64  `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}{JSONRPC: "2.0", Error: struct {
		Code    int64  `json:"code"`
		Message string `json:"message"`
	}{Code: e.code, Message: e.msg}})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(e.status)
	w.Write(append(body, '\n'))
}

// readMessage reads a POSTed message body, bounded by limit bytes.
func readMessage(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, *rpcError) {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			return nil, &rpcError{status: http.StatusUnsupportedMediaType, code: jsonrpc.CodeInvalidRequest,
				msg: fmt.Sprintf("Content-Type must be application/json, got %q", ct)}
		}
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, &rpcError{status: http.StatusRequestEntityTooLarge, code: jsonrpc.CodeInvalidRequest,
				msg: fmt.Sprintf("message too large: the limit is %d bytes (for big files, write them in parts with Bash, or use smaller Writes)", mbe.Limit)}
		}
		return nil, &rpcError{status: http.StatusBadRequest, code: jsonrpc.CodeParseError, msg: fmt.Sprintf("reading the message: %v", err)}
	}
	return data, nil
}

// checkMessage checks that data is JSON (else -32700) and, when it is an
// object, a JSON-RPC 2.0 message (else -32600). It returns the decoded
// message for an object, and nil for a batch (an array), which only
// allowBatch accepts.
func checkMessage(data []byte, allowBatch bool) (jsonrpc.Message, *rpcError) {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return nil, &rpcError{status: http.StatusBadRequest, code: jsonrpc.CodeParseError, msg: "parse error: the message is empty"}
	}
	notJSON := &rpcError{status: http.StatusBadRequest, code: jsonrpc.CodeParseError, msg: "parse error: the message is not valid JSON"}
	if trimmed[0] == '{' {
		// Decoded first: the decode checks that the whole message is JSON
		// as json.Valid does, and a message that decodes (nearly all) is
		// scanned once less.
		msg, err := decodeMessage(trimmed)
		if err == nil {
			return msg, nil
		}
		if !json.Valid(trimmed) {
			return nil, notJSON
		}
		return nil, &rpcError{status: http.StatusBadRequest, code: jsonrpc.CodeInvalidRequest,
			msg: fmt.Sprintf("invalid request: not a JSON-RPC 2.0 message: %v", err)}
	}
	if !json.Valid(trimmed) {
		return nil, notJSON
	}
	switch trimmed[0] {
	case '[':
		if allowBatch {
			return nil, nil
		}
		return nil, &rpcError{status: http.StatusBadRequest, code: jsonrpc.CodeInvalidRequest,
			msg: "invalid request: JSON-RPC batches are not supported on this transport: send one message per POST"}
	default:
		return nil, &rpcError{status: http.StatusBadRequest, code: jsonrpc.CodeInvalidRequest,
			msg: "invalid request: a JSON-RPC message must be a JSON object"}
	}
}
