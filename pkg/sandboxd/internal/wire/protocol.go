package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"sync"

	"github.com/go-logr/logr"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"k8s.io/klog/v2"

	"github.com/airlock-dev/airlock/pkg/version"
)

// MaxMessageBytes bounds one JSON-RPC message that a client POSTs, on both
// transports. A larger message is refused with HTTP 413 and a JSON-RPC error
// that says so.
const MaxMessageBytes = 4 << 20

// ProtocolVersions are the MCP protocol versions sandboxd negotiates, newest
// first. A client that asks for another version is answered with the newest
// of these (initialize) or refused (server/discover), and falls back.
var ProtocolVersions = []string{ProtocolStateless, "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"}

// ProtocolStateless is the stateless revision: no initialize, no session,
// each request's version and capabilities in its _meta. It is served on
// /mcp only (the stateless handler, transport_streamable.go); initialize
// never negotiates it (the SDK caps initialize at 2025-11-25).
const ProtocolStateless = "2026-07-28"

// ServerName is the name sandboxd gives in its initialize result.
const ServerName = "airlock-sandboxd"

// ServerImplementation is how sandboxd names itself to clients.
func ServerImplementation() *mcp.Implementation {
	impl := *implementation() // a copy: the caller may change it
	return &impl
}

// implementation is sandboxd's name and version, read once: version.Get
// reads the build information, which every 2026-07-28 result names.
var implementation = sync.OnceValue(func() *mcp.Implementation {
	return &mcp.Implementation{Name: ServerName, Version: version.Get().Version}
})

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

// SDKLogger routes the SDK's slog output to klog, at V(4) but for errors.
func SDKLogger(logger klog.Logger) *slog.Logger {
	return slog.New(logr.ToSlogHandler(logger.WithName("mcp").V(4)))
}
