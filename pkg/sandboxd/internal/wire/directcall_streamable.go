package wire

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"k8s.io/klog/v2"
)

// Direct tool calls on /mcp (Streamable HTTP).
//
// The SDK's handler answers a tools/call POSTed on /mcp through as many
// hand-offs as on SSE, and more for the stateless revision (2026-07-28),
// where every POST is a session of its own: a connection, a jsonrpc2
// reader and its goroutines, set up and torn down per call. That made /mcp
// serve Read at about half the calls/s of SSE (issue 26, item 4). As on
// SSE (directcall.go), /mcp runs such a call itself, with the handler and
// the middleware the SDK would run (the CallTable), in the POST's own
// goroutine (the POST is held until the call ends in either case), and
// writes the response the SDK would have sent, as application/json (which
// the transport allows for any POST's answer; the SDK answers in an event
// stream of one event).
//
// Only calls that the SDK would take and answer alike go this way; the
// rest goes to the SDK as before:
//   - POST with Content-Type application/json, an Accept that names both
//     application/json and text/event-stream, no Last-Event-ID;
//   - a call (with an id) of a tool in the table, params of name,
//     arguments and _meta only;
//   - stateless (2026-07-28): MCP-Protocol-Version is the revision, _meta
//     carries the same version, client capabilities that decode (and
//     client info, if any, that does), no other key of the protocol's own;
//     Mcp-Method and Mcp-Name equal to the method and the tool. A call that
//     declares the tasks extension, for a tool whose calls may become
//     tasks, is the task store's (tasks.go) and never comes here.
//     Cancellation is the SDK's for this revision (PropagateRequestCancellation):
//     the POST's end cancels the call;
//   - stateful (2025-03-26 … 2025-11-25): Mcp-Session-Id names a session
//     that this transport tracks (transport_streamable_sessions.go) and
//     that is initialized, no MCP-Protocol-Version or one of those
//     revisions, a _meta without the protocol's own keys (plainMeta). A notifications/cancelled for a
//     direct call cancels it; the session's end cancels them all; an id
//     already in flight on the direct path is refused as the SDK refuses
//     one (400, -32600).
//
// streamableDirect is the direct path of /mcp.
type streamableDirect struct {
	calls  func() *CallTable // nil until a warm member's adoption
	logger klog.Logger
	// taken counts the calls the direct path took (for the tests).
	taken atomic.Int64
	// The last client capabilities and info that decoded.
	caps, info lastDecoded
	// The last _meta of the protocol's keys only that was accepted.
	lastMeta atomic.Pointer[acceptedMeta]

	// Stateless calls in flight, cancelled and waited for at shutdown.
	base    context.Context
	stop    context.CancelFunc
	mu      sync.Mutex
	closed  bool
	running sync.WaitGroup
}

func newStreamableDirect(calls func() *CallTable, logger klog.Logger) *streamableDirect {
	base, stop := context.WithCancel(context.Background())
	return &streamableDirect{calls: calls, logger: logger, base: base, stop: stop}
}

// close cancels the stateless direct calls in flight and waits for them
// (their process groups killed), or for ctx.
func (d *streamableDirect) close(ctx context.Context) error {
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	d.stop()
	return waitUntil(ctx, d.running.Wait, "stateless tool calls still running")
}

// postAcceptable reports whether the SDK's handler would take r's POST on
// its headers (else it answers 400 or 415 itself).
func postAcceptable(r *http.Request) bool {
	if baseMediaType(r.Header.Get("Content-Type")) != "application/json" || len(r.Header.Values("Last-Event-ID")) > 0 {
		return false
	}
	jsonOK, streamOK := acceptsBoth(r.Header.Values("Accept"))
	return jsonOK && streamOK
}

// serveStateless answers a stateless tools/call on the direct path, if it
// may take it (see the top of this file), and reports whether it did.
func (d *streamableDirect) serveStateless(w http.ResponseWriter, r *http.Request, req *jsonrpc.Request) bool {
	version := r.Header.Get("Mcp-Protocol-Version")
	if version != ProtocolStateless || !postAcceptable(r) || hasParamHeaders(r) ||
		r.Header.Get("Mcp-Method") != req.Method {
		return false
	}
	params, ok := directCallWith(req, d.calls(), func(raw json.RawMessage) (mcp.Meta, bool) { return d.checkStatelessMeta(raw, version) })
	if !ok || params.Meta == nil || r.Header.Get("Mcp-Name") != params.Name {
		return false
	}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return false // shutting down: the SDK's handler answers
	}
	d.running.Add(1)
	d.mu.Unlock()
	defer d.running.Done()
	d.taken.Add(1)
	// The POST is the whole call (as PropagateRequestCancellation): its end
	// cancels the call, and so does shutdown.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(d.base, cancel)
	defer stop()
	res, err := d.calls().call(ctx, "tools/call", &mcp.CallToolRequest{Params: params, Extra: &mcp.RequestExtra{Header: r.Header}})
	d.writeResponse(w, req.ID, res, err, true, params.Name)
	return true
}

// serveStateful answers a tools/call of a stateful session on the direct
// path, if it may take it (see the top of this file), and reports whether
// it did. sess is the tracked session the POST names.
func (d *streamableDirect) serveStateful(w http.ResponseWriter, r *http.Request, req *jsonrpc.Request, sess *streamableSession) bool {
	if v := r.Header.Get("Mcp-Protocol-Version"); v >= ProtocolStateless || v != "" && !servedVersion(v) || !postAcceptable(r) {
		return false
	}
	if sess.ss.InitializeParams() == nil {
		return false // the SDK answers calls before initialize
	}
	table := d.calls()
	params, ok := directCallWith(req, table, plainMeta)
	if !ok {
		return false
	}
	id := req.ID.Raw()
	dc := &sess.direct
	dc.mu.Lock()
	if dc.ended {
		dc.mu.Unlock()
		return false
	}
	if _, dup := dc.cancels[id]; dup {
		dc.mu.Unlock()
		writeError(w, http.StatusBadRequest, req.ID, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest,
			Message: fmt.Sprintf("duplicate in-flight request ID %v", id)})
		return true
	}
	// The session's call, as the SDK's: it ends with the session or a
	// notifications/cancelled, not with its POST.
	ctx, cancel := context.WithCancel(sess.ctx)
	dc.cancels[id] = cancel
	dc.running.Add(1)
	dc.mu.Unlock()
	defer dc.running.Done()
	d.taken.Add(1)
	res, err := table.call(ctx, "tools/call", &mcp.CallToolRequest{Session: sess.ss, Params: params, Extra: &mcp.RequestExtra{Header: r.Header}})
	dc.mu.Lock()
	delete(dc.cancels, id)
	dc.mu.Unlock()
	cancel()
	d.writeResponse(w, req.ID, res, err, false, params.Name)
	return true
}

// writeResponse writes a direct call's response as application/json.
func (d *streamableDirect) writeResponse(w http.ResponseWriter, id jsonrpc.ID, res mcp.Result, err error, complete bool, tool string) {
	data, eerr := encodeResponseOf(id, res, err, complete)
	if eerr != nil {
		d.logger.Error(eerr, "Encoding a tool call's response failed", "tool", tool)
		data, _ = jsonrpc.EncodeMessage(&jsonrpc.Response{ID: id, Error: &jsonrpc.Error{
			Code: jsonrpc.CodeInternalError, Message: "encoding the response failed: " + eerr.Error(),
		}})
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-cache, no-transform")
	// Its length, known: net/http sends an answer longer than its buffer
	// (2 KiB, a Read of any real file) chunked otherwise, its last chunk
	// a write (a system call and a TCP segment) of its own after the
	// handler returns, which the client waits for.
	h.Set("Content-Length", strconv.Itoa(len(data)))
	w.Write(data)
}

// checkStatelessMeta decodes a 2026-07-28 call's _meta when the SDK would
// take it and do nothing with it but hand it to the tool: the revision's
// version (equal to the header's), client capabilities that decode as the
// SDK decodes them, client info (optional) that does, and no other key of
// the protocol's own (the log level, say: the SDK handles those).
//
// A client sends the same _meta with every request (its version,
// capabilities and info): the last one accepted that holds only those keys
// is kept with its bytes, and the same bytes get a copy of it without
// being decoded again. Its values are a string and json.RawMessage, which
// nothing writes to (no tool reads the protocol's keys); a _meta with keys
// of the client's own, decoded to values a tool could change, is not kept.
func (d *streamableDirect) checkStatelessMeta(raw json.RawMessage, version string) (mcp.Meta, bool) {
	if last := d.lastMeta.Load(); last != nil && last.version == version && bytes.Equal(last.raw, raw) {
		return maps.Clone(last.meta), true
	}
	meta, ok := d.decodeStatelessMeta(raw, version)
	if !ok {
		return nil, false
	}
	for key := range meta {
		if !strings.HasPrefix(key, "io.modelcontextprotocol/") {
			return meta, true
		}
	}
	d.lastMeta.Store(&acceptedMeta{raw: bytes.Clone(raw), version: version, meta: maps.Clone(meta)})
	return meta, true
}

// acceptedMeta is a stateless call's _meta that checkStatelessMeta
// accepted: its bytes, the version they were checked against, and what
// they decoded to.
type acceptedMeta struct {
	raw     []byte
	version string
	meta    mcp.Meta
}

// decodeStatelessMeta is checkStatelessMeta without the copy it keeps.
func (d *streamableDirect) decodeStatelessMeta(raw json.RawMessage, version string) (mcp.Meta, bool) {
	var meta map[string]json.RawMessage
	if err := json.Unmarshal(raw, &meta); err != nil || meta == nil {
		return nil, false
	}
	var v string
	if json.Unmarshal(meta[mcp.MetaKeyProtocolVersion], &v) != nil || v != version {
		return nil, false
	}
	if c, ok := meta[mcp.MetaKeyClientCapabilities]; !ok || !d.caps.decodes(c, decodesAsCapabilities) {
		return nil, false
	}
	if info, ok := meta[mcp.MetaKeyClientInfo]; ok && !d.info.decodes(info, decodesAsImplementation) {
		return nil, false
	}
	// What the tool gets: the client's own keys decoded, as the SDK
	// decodes them; the protocol's, which no tool reads, as they came
	// (json.RawMessage, which encodes back to the same JSON), to spare
	// decoding them twice on every call.
	out := make(mcp.Meta, len(meta))
	for key, value := range meta {
		switch key {
		case mcp.MetaKeyProtocolVersion:
			out[key] = v
		case mcp.MetaKeyClientCapabilities, mcp.MetaKeyClientInfo:
			out[key] = value
		default:
			if strings.HasPrefix(key, "io.modelcontextprotocol/") {
				return nil, false
			}
			var decoded any
			if json.Unmarshal(value, &decoded) != nil {
				return nil, false
			}
			out[key] = decoded
		}
	}
	return out, true
}

// decodesAsCapabilities reports whether the SDK decodes raw as client
// capabilities (its clientCapabilitiesV2: ClientCapabilities, with roots
// of the 2026-07-28 shape).
func decodesAsCapabilities(raw []byte) bool {
	var caps struct {
		mcp.ClientCapabilities
		Roots *mcp.RootCapabilities `json:"roots,omitempty"`
	}
	return string(raw) != "null" && json.Unmarshal(raw, &caps) == nil
}

// decodesAsImplementation reports whether the SDK decodes raw as client
// info.
func decodesAsImplementation(raw []byte) bool {
	var impl *mcp.Implementation
	return json.Unmarshal(raw, &impl) == nil
}

// lastDecoded remembers the last value that decoded: a client sends the
// same capabilities and info with every request, and the same bytes decode
// alike.
type lastDecoded struct {
	last atomic.Pointer[[]byte]
}

// decodes reports whether raw decodes (check), asking check only for
// bytes other than the last that did.
func (l *lastDecoded) decodes(raw []byte, check func([]byte) bool) bool {
	if p := l.last.Load(); p != nil && bytes.Equal(*p, raw) {
		return true
	}
	if !check(raw) {
		return false
	}
	kept := bytes.Clone(raw)
	l.last.Store(&kept)
	return true
}

// hasParamHeaders reports whether r carries Mcp-Param-* headers, which the
// SDK checks against a tool's parameters (sandboxd's tools bind none: the
// SDK answers those).
func hasParamHeaders(r *http.Request) bool {
	for k := range r.Header {
		if strings.HasPrefix(http.CanonicalHeaderKey(k), "Mcp-Param-") {
			return true
		}
	}
	return false
}

// servedVersion reports whether v is a revision sandboxd negotiates.
func servedVersion(v string) bool { return slices.Contains(ProtocolVersions, v) }

// acceptsBoth reads Accept as the SDK does: whether it takes JSON and an
// event stream.
func acceptsBoth(values []string) (jsonOK, streamOK bool) {
	for _, value := range values {
		for _, raw := range strings.Split(value, ",") {
			base, _, _ := strings.Cut(strings.TrimSpace(raw), ";")
			switch strings.ToLower(strings.TrimSpace(base)) {
			case "application/json", "application/*":
				jsonOK = true
			case "text/event-stream", "text/*":
				streamOK = true
			case "*/*":
				jsonOK, streamOK = true, true
			}
		}
	}
	return jsonOK, streamOK
}

// baseMediaType is a Content-Type's media type, "" if it does not parse.
func baseMediaType(value string) string {
	mt, _, err := mime.ParseMediaType(value)
	if err != nil {
		return ""
	}
	return mt
}
