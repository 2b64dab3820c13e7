// Package toolcall holds the few types that sandboxd's tools and its wire
// share about a tool call, so that neither imports the other: the typed
// handler of a tool (Handler), the set the tools are added to (Set: the
// SDK's server, and the table of handlers the direct path calls without
// it), and a tool's structured output as it was marshaled (MarshaledJSON),
// which the wire writes as it is; and SkipSpace, with which both scan a
// call's raw JSON. internal/tools adds its tools to a Set;
// internal/wire calls them through it.
package toolcall

import (
	"context"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Handler is a tool as a plain function of its input, as the unit tests
// call it.
type Handler[In, Out any] func(context.Context, In) (*mcp.CallToolResult, Out, error)

// Set is where the tools are added: the SDK's server, which lists them
// and calls them for every transport, and the table of those that the SSE
// transport may call directly.
type Set struct {
	Server *mcp.Server
	Direct map[string]mcp.ToolHandler
}

// NewSet returns an empty set on server.
func NewSet(server *mcp.Server) *Set {
	return &Set{Server: server, Direct: make(map[string]mcp.ToolHandler)}
}

// MarshaledJSON is a tool's structured output as encodeOutput wrote it
// with json.Marshal: compact, valid, HTML escaped. marshalCallToolResult
// writes it as it is; to anything else (the SDK's encoding) it is a
// json.Marshaler that gives those bytes, which encoding/json checks and
// compacts as it does a json.RawMessage. (Until it had a type of its own,
// a Read of a 20 KiB file spent about 100 µs in encoding/json checking
// again what sandboxd's json.Marshal had just written.)
type MarshaledJSON []byte

// MarshalJSON gives the bytes.
func (m MarshaledJSON) MarshalJSON() ([]byte, error) {
	if m == nil {
		return []byte("null"), nil
	}
	return m, nil
}

// JSON gives the bytes, for the scrubber (internal/scrub).
func (m MarshaledJSON) JSON() []byte { return m }

// SkipSpace returns the index of the first byte of raw at or after i that is
// not JSON white space (len(raw) if there is none): the wire's message checks
// and the tools' argument checks scan a call's raw JSON with it.
func SkipSpace(raw []byte, i int) int {
	for i < len(raw) {
		switch raw[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}
