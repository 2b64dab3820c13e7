package wire

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/toolcall"
)

// messageMaxDepth is the deepest nesting of objects and arrays a message may
// have, as the SDK's own decoder allows.
const messageMaxDepth = 1000

// decodeMessage decodes one JSON-RPC 2.0 message, an object, into the SDK's
// message types, as jsonrpc.DecodeMessage does: the same keys, matched
// exactly ("jsonrpc", "id", "method", "params", "result", "error"; others
// are ignored), the same checks (version "2.0", an id that is a number, a
// string or absent, a response with an id) and the same nesting bound.
//
// It exists for speed: the SDK's decoder takes a fresh 32 KiB buffer for
// every message, which on a small tool call is most of what sandboxd
// allocates and makes the garbage collector run every few calls. Here the
// message is split into its members with encoding/json, which allocates in
// proportion to the message.
func decodeMessage(data []byte) (jsonrpc.Message, error) {
	if err := checkDepth(data, messageMaxDepth); err != nil {
		return nil, err
	}
	members, err := decodeMembers(data)
	if err != nil {
		return nil, err
	}
	var version string
	if raw, ok := members["jsonrpc"]; ok {
		if err := json.Unmarshal(raw, &version); err != nil {
			return nil, fmt.Errorf("jsonrpc: %w", err)
		}
	}
	if version != "2.0" {
		return nil, fmt.Errorf("invalid message version tag %q; expected %q", version, "2.0")
	}
	var id jsonrpc.ID
	if raw, ok := members["id"]; ok {
		if id, err = decodeID(raw); err != nil {
			return nil, err
		}
	}
	if raw, ok := members["method"]; ok {
		var method string
		if err := json.Unmarshal(raw, &method); err != nil {
			return nil, fmt.Errorf("method: %w", err)
		}
		return &jsonrpc.Request{ID: id, Method: method, Params: members["params"]}, nil
	}
	if !id.IsValid() {
		return nil, errors.New("invalid request: a response without an id")
	}
	resp := &jsonrpc.Response{ID: id, Result: members["result"]}
	if raw, ok := members["error"]; ok && string(raw) != "null" {
		werr, err := decodeWireError(raw)
		if err != nil {
			return nil, err
		}
		resp.Error = werr
	}
	return resp, nil
}

// decodeID decodes a JSON-RPC id as the SDK does, for a message and for
// the requestId of a cancellation alike (jsonrpc.MakeID of the decoded
// value): a string, or a number as an int64; null is no id.
func decodeID(raw json.RawMessage) (jsonrpc.ID, error) {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return jsonrpc.ID{}, err
	}
	return jsonrpc.MakeID(v)
}

// decodeMembers splits a JSON object into its members, matched by their
// exact names (encoding/json matches struct fields case-insensitively, the
// SDK does not). A member given twice counts once, the last time.
func decodeMembers(data []byte) (map[string]json.RawMessage, error) {
	if members, ok := splitMembers(data); ok {
		return members, nil
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(data, &members); err != nil {
		return nil, err
	}
	if members == nil {
		return nil, errors.New("not a JSON object")
	}
	return members, nil
}

// decodeWireError decodes the error member of a response.
func decodeWireError(data []byte) (*jsonrpc.Error, error) {
	members, err := decodeMembers(data)
	if err != nil {
		return nil, fmt.Errorf("error: %w", err)
	}
	werr := &jsonrpc.Error{Data: members["data"]}
	if raw, ok := members["code"]; ok {
		if err := json.Unmarshal(raw, &werr.Code); err != nil {
			return nil, fmt.Errorf("error code: %w", err)
		}
	}
	if raw, ok := members["message"]; ok {
		if err := json.Unmarshal(raw, &werr.Message); err != nil {
			return nil, fmt.Errorf("error message: %w", err)
		}
	}
	return werr, nil
}

// checkDepth fails when objects and arrays in data nest deeper than max.
// data must be valid JSON.
func checkDepth(data []byte, max int) error {
	depth := 0
	inString, escaped := false, false
	for _, b := range data {
		if inString {
			switch {
			case escaped:
				escaped = false
			case b == '\\':
				escaped = true
			case b == '"':
				inString = false
			}
			continue
		}
		switch b {
		case '"':
			inString = true
		case '{', '[':
			if depth++; depth > max {
				return fmt.Errorf("the message nests deeper than %d levels", max)
			}
		case '}', ']':
			depth--
		}
	}
	return nil
}

// splitMembers is decodeMembers in one scan of valid JSON, without the
// reflection of encoding/json and without copying the values: each is a
// slice of data (its capacity cut at its end, so that an append copies),
// which nothing writes to (data is a request's own body, read afresh). It
// takes only what it decodes exactly as json.Unmarshal does: an object
// whose names are plain ASCII without escapes; false for anything else,
// which json.Unmarshal then decodes (or refuses, with its error).
func splitMembers(data []byte) (map[string]json.RawMessage, bool) {
	i := toolcall.SkipSpace(data, 0)
	if i >= len(data) || data[i] != '{' || !json.Valid(data) {
		return nil, false
	}
	members := make(map[string]json.RawMessage, 4)
	i = toolcall.SkipSpace(data, i+1)
	if data[i] == '}' {
		return members, true
	}
	for {
		end := i + 1 // data[i] is the name's quote: data is valid
		for data[end] != '"' {
			if data[end] == '\\' || data[end] >= 0x80 {
				return nil, false // decoded by encoding/json: escapes, UTF-8 checks
			}
			end++
		}
		name := data[i+1 : end]
		i = toolcall.SkipSpace(data, toolcall.SkipSpace(data, end+1)+1) // past the colon
		vend := valueEnd(data, i)
		members[string(name)] = data[i:vend:vend]
		i = toolcall.SkipSpace(data, vend)
		if data[i] == '}' {
			return members, true
		}
		i = toolcall.SkipSpace(data, i+1) // past the comma
	}
}

// valueEnd is where the JSON value at data[i] ends; data is valid JSON.
func valueEnd(data []byte, i int) int {
	switch data[i] {
	case '"':
		return stringEnd(data, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(data); j++ {
			switch data[j] {
			case '"':
				j = stringEnd(data, j) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1
				}
			}
		}
		return len(data)
	default:
		j := i
		for j < len(data) {
			switch data[j] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return j
			}
			j++
		}
		return j
	}
}

// stringEnd is where the JSON string whose quote is data[i] ends.
func stringEnd(data []byte, i int) int {
	for j := i + 1; j < len(data); j++ {
		switch data[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return len(data)
}
