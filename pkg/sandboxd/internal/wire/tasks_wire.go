package wire

// What a task call reads from and writes to the wire: the tasks declaration in _meta, the
// required headers, and the JSON-RPC answers (tasks.go).

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"k8s.io/klog/v2"
)

// declaresTasks reports whether a request's _meta declares the extension
// in its client capabilities.
func declaresTasks(meta mcp.Meta) bool {
	caps, ok := meta[mcp.MetaKeyClientCapabilities].(map[string]any)
	if !ok {
		return false
	}
	ext, ok := caps["extensions"].(map[string]any)
	if !ok {
		return false
	}
	_, ok = ext[TasksExtension].(map[string]any)
	return ok
}

// headerErr checks the headers of a 2026-07-28 request as the SDK does for
// its own: MCP-Protocol-Version present and equal to _meta's version,
// Mcp-Method equal to the method, and Mcp-Name equal to name (the tool,
// or the task id for tasks/*; "": a method without one).
func headerErr(r *http.Request, req *jsonrpc.Request, meta mcp.Meta, name string) *jsonrpc.Error {
	mismatch := func(format string, args ...any) *jsonrpc.Error {
		return &jsonrpc.Error{Code: mcp.CodeHeaderMismatch, Message: fmt.Sprintf(format, args...)}
	}
	version, _ := meta[mcp.MetaKeyProtocolVersion].(string)
	switch header := r.Header.Get("Mcp-Protocol-Version"); {
	case header == "":
		return mismatch("MCP-Protocol-Version header is required")
	case version == "":
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("missing or invalid _meta field %q", mcp.MetaKeyProtocolVersion)}
	case header != version:
		return mismatch("MCP-Protocol-Version header %q does not match request %s %q", header, mcp.MetaKeyProtocolVersion, version)
	}
	if got := r.Header.Get("Mcp-Method"); got != req.Method {
		return mismatch("Mcp-Method header %q does not match body value %q", got, req.Method)
	}
	if got := r.Header.Get("Mcp-Name"); name != "" && got != name {
		return mismatch("Mcp-Name header %q does not match body value %q", got, name)
	}
	return nil
}

// annotateServerInfo names the server in res's _meta, unless it does.
func annotateServerInfo(res mcp.Result) {
	m := res.GetMeta()
	if m == nil {
		m = map[string]any{}
	}
	if _, ok := m[mcp.MetaKeyServerInfo]; !ok {
		m[mcp.MetaKeyServerInfo] = ServerImplementation()
		res.SetMeta(m)
	}
}

// asRPCError is err as a JSON-RPC error.
func asRPCError(err error) *jsonrpc.Error {
	if e, ok := err.(*jsonrpc.Error); ok {
		return e
	}
	return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: err.Error()}
}

// writeCallResponse answers a call that did not become a task with its
// result, with resultType "complete" as the SDK answers 2026-07-28.
func writeCallResponse(w http.ResponseWriter, id jsonrpc.ID, res mcp.Result, err error, logger klog.Logger) {
	if err != nil {
		writeStatelessError(w, id, asRPCError(err))
		return
	}
	data, eerr := json.Marshal(res)
	if eerr == nil && !bytes.HasPrefix(data, []byte("{")) {
		eerr = fmt.Errorf("a tool result that is not an object: %.40s", data)
	}
	if eerr != nil {
		logger.Error(eerr, "Encoding a tool call's response failed")
		writeError(w, http.StatusOK, id, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "encoding the response failed: " + eerr.Error()})
		return
	}
	typed := []byte(`{"resultType":"complete"`)
	if rest := data[1:]; !bytes.HasPrefix(bytes.TrimSpace(rest), []byte("}")) {
		typed = append(typed, ',')
	}
	writeRaw(w, id, append(typed, data[1:]...))
}

func writeResult(w http.ResponseWriter, id jsonrpc.ID, result map[string]any) {
	data, err := json.Marshal(result)
	if err != nil {
		writeError(w, http.StatusOK, id, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: err.Error()})
		return
	}
	writeRaw(w, id, data)
}

func writeRaw(w http.ResponseWriter, id jsonrpc.ID, data json.RawMessage) {
	body, err := jsonrpc.EncodeMessage(&jsonrpc.Response{ID: id, Result: data})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(body)
}

// writeStatelessError writes a 2026-07-28 request's JSON-RPC error with
// the HTTP status the revision gives it (statelessStatus).
func writeStatelessError(w http.ResponseWriter, id jsonrpc.ID, rpcErr *jsonrpc.Error) {
	writeError(w, statelessStatus(rpcErr.Code), id, rpcErr)
}

// statelessStatus is the HTTP status of a 2026-07-28 answer that is a
// JSON-RPC error of code (SEP-2575, as the SDK's own answers have it): 404
// for -32601 (method not found); 400 for -32602 (invalid params), -32021
// (a required client capability missing) and -32022 (an unsupported
// revision); 200 for any other.
func statelessStatus(code int64) int {
	switch code {
	case jsonrpc.CodeMethodNotFound:
		return http.StatusNotFound
	case jsonrpc.CodeInvalidParams, mcp.CodeMissingRequiredClientCapabilities, mcp.CodeUnsupportedProtocolVersion:
		return http.StatusBadRequest
	}
	return http.StatusOK
}

func writeError(w http.ResponseWriter, status int, id jsonrpc.ID, rpcErr *jsonrpc.Error) {
	body, err := jsonrpc.EncodeMessage(&jsonrpc.Response{ID: id, Error: rpcErr})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(body)
}
