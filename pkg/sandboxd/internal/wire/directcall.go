package wire

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/toolcall"
	"github.com/airlock-dev/airlock/pkg/toolnames"
)

// Direct tool calls.
//
// A tools/call POSTed on an SSE session reaches a tool through the SDK in
// five goroutine hand-offs: the POST handler, the SDK's reader of the
// connection, its queue, the call's own goroutine and the reply's Write,
// with two decodes of the params through the SDK's JSON decoder (a fresh 32
// KiB buffer each). On a 2-core machine those hand-offs were most of what a
// small call cost beyond mcp-go's (docs/decisions.md, "sandboxd transport
// speed"). The SSE transport runs such a call itself: the very handler the
// SDK would run (addTypedTool's, recorded in the transport's CallTable)
// through the very middleware (toolCallMiddleware: the gate, panics,
// scrubbing, metrics), on a goroutine of its own or, for a Read, in the
// POST's goroutine (inlineTools), and publishes the response the SDK would
// have written.
//
// Only what the SDK would answer alike is taken: a call (with an id), once
// the session is initialized, whose params are a name the table has,
// arguments, and a _meta without the protocol's own keys (plainMeta); no
// input responses, nothing else. Everything else, including unknown tools,
// goes to the SDK as before. A notifications/cancelled for a direct call
// cancels it as the SDK would (the call still answers, as the SDK's do);
// one for any other id goes to the SDK. A session's direct calls are
// cancelled when it ends, and the session waits for them.

// CallTable is what a direct call runs: the tool's handler inside the
// middleware that every tools/call goes through.
type CallTable struct {
	handlers map[string]mcp.ToolHandler
	call     mcp.MethodHandler
	gate     *Gate
}

// NewCallTable wraps the handlers of set in middleware, as the SDK's server
// wraps its own dispatch.
func NewCallTable(set *toolcall.Set, middleware mcp.Middleware, gate *Gate) *CallTable {
	handlers := set.Direct
	dispatch := func(ctx context.Context, _ string, req mcp.Request) (mcp.Result, error) {
		r := req.(*mcp.CallToolRequest)
		res, err := handlers[r.Params.Name](ctx, r)
		if err == nil && res != nil && res.Content == nil {
			// As the SDK's callTool: an empty list, not null.
			res.Content = []mcp.Content{}
		}
		return res, err
	}
	return &CallTable{handlers: handlers, call: middleware(dispatch), gate: gate}
}

// directCalls are an SSE session's calls in flight on the direct path.
type directCalls struct {
	mu      sync.Mutex
	cancels map[any]context.CancelFunc // by request id (string or int64)
	ended   bool                       // the session ended: no more calls
	running sync.WaitGroup
}

// directCall returns the call that req is, if the direct path may take it:
// see the package comment above.
func directCall(req *jsonrpc.Request, table *CallTable) (*mcp.CallToolParamsRaw, bool) {
	return directCallWith(req, table, plainMeta)
}

// directCallWith is directCall with the check of the call's _meta given:
// it returns the meta the tool gets and whether the direct path may take
// a call with it.
func directCallWith(req *jsonrpc.Request, table *CallTable, checkMeta func(json.RawMessage) (mcp.Meta, bool)) (*mcp.CallToolParamsRaw, bool) {
	if table == nil || req.Method != "tools/call" || !req.IsCall() {
		return nil, false
	}
	members, err := decodeMembers(req.Params)
	if err != nil {
		return nil, false
	}
	params := &mcp.CallToolParamsRaw{}
	for key, raw := range members {
		switch key {
		case "name":
			// null leaves the name empty: no tool has it.
			if err := json.Unmarshal(raw, &params.Name); err != nil {
				return nil, false
			}
		case "arguments":
			params.Arguments = raw
		case "_meta":
			meta, ok := checkMeta(raw)
			if !ok {
				return nil, false
			}
			params.Meta = meta
		default:
			return nil, false
		}
	}
	if _, ok := table.handlers[params.Name]; !ok {
		return nil, false
	}
	return params, true
}

// plainMeta decodes a call's _meta when the SDK would do nothing with it but
// hand it to the tool (which reads none of it): an object with none of the
// protocol's own keys (io.modelcontextprotocol/..., which may select the
// per-request protocol of SEP-2575). A progressToken is not one of them,
// and sandboxd's tools send no progress. Clients put their own keys there
// (an agent's tool-use id, say), and their calls should not lose the direct
// path for it.
func plainMeta(raw json.RawMessage) (mcp.Meta, bool) {
	var meta map[string]any
	if err := json.Unmarshal(raw, &meta); err != nil || meta == nil {
		return nil, false
	}
	for key := range meta {
		if strings.HasPrefix(key, "io.modelcontextprotocol/") {
			return nil, false
		}
	}
	return meta, true
}

// takeCall starts msg on the direct path and reports whether it did; when
// it did not, msg goes to the SDK. A Read whose turn at the gate comes at
// once runs in the POST's own goroutine, answered before its 202 (see
// inlineTools); every other direct call runs on a goroutine of its own.
func (s *sseSession) takeCall(msg jsonrpc.Message, header http.Header) bool {
	req, ok := msg.(*jsonrpc.Request)
	if !ok || req.Method != "tools/call" {
		return false
	}
	ss := s.ss.Load()
	if ss == nil || ss.InitializeParams() == nil {
		return false // the SDK answers calls before initialize
	}
	table := s.t.calls.Load()
	params, ok := directCall(req, table)
	if !ok {
		return false
	}
	id := req.ID.Raw()
	d := &s.direct
	d.mu.Lock()
	if _, dup := d.cancels[id]; dup || d.ended {
		d.mu.Unlock()
		return false
	}
	ctx, cancel := context.WithCancel(s.ctx)
	d.cancels[id] = cancel
	d.running.Add(1)
	d.mu.Unlock()
	s.t.directCalls.Add(1)
	run := func(ctx context.Context, release func()) {
		defer d.running.Done()
		res, err := table.call(ctx, "tools/call", &mcp.CallToolRequest{Session: ss, Params: params, Extra: &mcp.RequestExtra{Header: header}})
		if release != nil {
			release()
		}
		d.mu.Lock()
		delete(d.cancels, id)
		d.mu.Unlock()
		cancel()
		data, err := encodeResponse(req.ID, res, err)
		if err != nil {
			s.t.logger.Error(err, "Encoding a tool call's response failed", "tool", params.Name)
			data, _ = jsonrpc.EncodeMessage(&jsonrpc.Response{ID: req.ID, Error: &jsonrpc.Error{
				Code: jsonrpc.CodeInternalError, Message: "encoding the response failed: " + err.Error(),
			}})
		}
		// Nothing is published once the session ended: nobody listens.
		s.publish(data)
	}
	if inlineTools[params.Name] {
		if release, ok := table.gate.tryEnter(); ok {
			run(WithGateHeld(ctx), release)
			return true
		}
	}
	go run(ctx, nil)
	return true
}

// inlineTools are the tools whose direct calls run in the POST's goroutine
// when they need not wait at the gate: their work is bounded by one
// regular file (Read: at most 2000 lines, opened non-blocking, anything but
// a regular file refused), so the POST is held about as long as a small
// file takes to read. Saving the hand-off to a goroutine of its own is what
// a small call's round trip is made of on a small machine (docs/decisions.md,
// "sandboxd transport speed"). A tool that runs processes, walks trees or
// can wait is never run so: its POST would be held as long as it runs, and
// clients time out POSTs (Node's fetch after 300 s).
var inlineTools = map[string]bool{toolnames.Read: true}

// encodeResponse is the JSON-RPC response to a call with id that ended
// with res or err, as the SDK's connection encodes it (jsonrpc2's
// NewResponse and EncodeMessage: the result marshalled without HTML
// escaping of its own, members in the order jsonrpc, id, result or error).
func encodeResponse(id jsonrpc.ID, res mcp.Result, err error) ([]byte, error) {
	return encodeResponseOf(id, res, err, false)
}

// encodeResponseOf is encodeResponse; complete answers a request of
// 2026-07-28 as the SDK does: the result names the server in its _meta
// (annotateServerInfo) and ends with `"resultType":"complete"` (where
// CallToolResult.MarshalJSON puts it).
func encodeResponseOf(id jsonrpc.ID, res mcp.Result, err error, complete bool) ([]byte, error) {
	if err != nil {
		return jsonrpc.EncodeMessage(&jsonrpc.Response{ID: id, Error: err})
	}
	var buf bytes.Buffer
	buf.WriteString(`{"jsonrpc":"2.0","id":`)
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(id.Raw()); err != nil {
		return nil, err
	}
	buf.Truncate(buf.Len() - 1) // Encode's newline
	buf.WriteString(`,"result":`)
	if r, ok := res.(*mcp.CallToolResult); ok && r != nil {
		// What Encode gives, without compacting again what MarshalJSON
		// made compact: its JSON goes through as it is.
		// A result without _meta (every tool's) gets the server's name
		// as encoded once (serverInfoMember), appended below; one with
		// it, the name added to it.
		bare := r.Meta == nil
		if complete && !bare {
			annotateServerInfo(r)
		}
		data, err := marshalCallToolResult(r)
		if err != nil {
			return nil, err
		}
		if complete && len(data) >= 2 && data[len(data)-1] == '}' {
			if len(data) > 2 {
				data[len(data)-1] = ','
			} else {
				data = data[:1]
			}
			if bare {
				data = append(data, serverInfoMember()...)
				data = append(data, ',')
			}
			data = append(data, `"resultType":"complete"}`...)
		}
		buf.Write(data)
	} else {
		if err := enc.Encode(res); err != nil {
			return nil, err
		}
		buf.Truncate(buf.Len() - 1)
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

// takeCancel cancels the direct call that a notifications/cancelled names,
// and reports whether there was one.
func (s *sseSession) takeCancel(msg jsonrpc.Message) bool { return s.direct.cancel(msg) }

// cancel cancels the call of d that msg, a notifications/cancelled, names,
// and reports whether there was one (else msg is the SDK's).
func (d *directCalls) cancel(msg jsonrpc.Message) bool {
	req, ok := msg.(*jsonrpc.Request)
	if !ok || req.Method != "notifications/cancelled" || req.IsCall() {
		return false
	}
	var params struct {
		RequestID json.RawMessage `json:"requestId"`
	}
	if err := json.Unmarshal(req.Params, &params); err != nil {
		return false
	}
	id, err := decodeID(params.RequestID)
	if err != nil || !id.IsValid() {
		return false
	}
	d.mu.Lock()
	cancel, found := d.cancels[id.Raw()]
	d.mu.Unlock()
	if found {
		cancel()
	}
	return found
}

// endDirect refuses new direct calls and waits for those in flight, which
// the session's end has cancelled.
func (s *sseSession) endDirect() {
	s.direct.mu.Lock()
	s.direct.ended = true
	s.direct.mu.Unlock()
	s.direct.running.Wait()
}

// serverInfoMember is the _meta member that names sandboxd in a result of
// 2026-07-28, encoded once.
var serverInfoMember = sync.OnceValue(func() []byte {
	data, err := json.Marshal(map[string]any{mcp.MetaKeyServerInfo: implementation()})
	if err != nil {
		panic(err) // a struct of two strings
	}
	return append([]byte(`"_meta":`), data...)
})
