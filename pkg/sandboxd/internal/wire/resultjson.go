package wire

import (
	"bytes"
	"encoding/json"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/toolcall"
)

// marshalCallToolResult returns the JSON of r, byte for byte what
// r.MarshalJSON gives (TestMarshalCallToolResultAsTheSDK), for the direct
// paths' answers.
//
// It exists for speed: the SDK's MarshalJSON encodes the result through a
// wrapper type, each content through another with MarshalJSON of its own,
// and encoding/json scans and compacts again what each of those returns, so
// a result's text is scanned three times after it is encoded. Most results
// of sandboxd's tools are text contents and, for the typed tools, a
// structured content that is already JSON (json.RawMessage): those are
// written here in one pass, with the escaping encoding/json uses (HTML
// characters, U+2028 and U+2029 escaped; invalid UTF-8 replaced). Anything
// else (a _meta, an annotation, another kind of content, a structured
// content of another type, input requests, a request state) goes to the
// SDK's MarshalJSON, as does a result the SDK gave a result type (only the
// SDK sets it; the direct paths' results come from sandboxd's handlers and
// never pass through the SDK before they are encoded).
func marshalCallToolResult(r *mcp.CallToolResult) ([]byte, error) {
	if !plainResult(r) {
		return r.MarshalJSON()
	}
	var buf bytes.Buffer
	size := 64 // the members' names and punctuation
	for _, c := range r.Content {
		size += 32 + len(c.(*mcp.TextContent).Text)
	}
	switch raw := r.StructuredContent.(type) {
	case json.RawMessage:
		size += 24 + len(raw)
	case toolcall.MarshaledJSON:
		size += 24 + len(raw)
	}
	buf.Grow(size + size/16)     // room for some escapes
	enc := json.NewEncoder(&buf) // escapes HTML, as json.Marshal does
	buf.WriteString(`{"content":`)
	if r.Content == nil {
		buf.WriteString("null")
	} else {
		buf.WriteByte('[')
		for i, c := range r.Content {
			if i > 0 {
				buf.WriteByte(',')
			}
			buf.WriteString(`{"type":"text","text":`)
			if err := enc.Encode(c.(*mcp.TextContent).Text); err != nil {
				return nil, err
			}
			buf.Truncate(buf.Len() - 1) // Encode's newline
			buf.WriteByte('}')
		}
		buf.WriteByte(']')
	}
	switch raw := r.StructuredContent.(type) {
	case json.RawMessage:
		buf.WriteString(`,"structuredContent":`)
		// As json.Marshal writes a RawMessage: compacted, HTML escaped,
		// and refused when it is not JSON.
		if err := enc.Encode(raw); err != nil {
			return nil, err
		}
		buf.Truncate(buf.Len() - 1)
	case toolcall.MarshaledJSON:
		buf.WriteString(`,"structuredContent":`)
		buf.Write(raw) // json.Marshal's: as Encode would write it
	}
	if r.IsError {
		buf.WriteString(`,"isError":true`)
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

// plainResult reports whether marshalCallToolResult writes r itself.
func plainResult(r *mcp.CallToolResult) bool {
	if r.Meta != nil || r.InputRequests != nil || r.RequestState != "" {
		return false
	}
	switch sc := r.StructuredContent.(type) {
	case nil:
	case json.RawMessage:
		if sc == nil {
			return false // a typed nil in an interface: json.Marshal writes null
		}
	case toolcall.MarshaledJSON:
		if sc == nil {
			return false
		}
	default:
		return false
	}
	for _, c := range r.Content {
		tc, ok := c.(*mcp.TextContent)
		if !ok || tc == nil || tc.Meta != nil || tc.Annotations != nil {
			return false
		}
	}
	// The result type, unexported, is set only by the SDK (see above).
	return true
}
