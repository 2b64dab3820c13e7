package wire

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// DefaultSessionTimeout closes a Streamable HTTP session that has seen no
// request for this long (the client went away without a DELETE).
const DefaultSessionTimeout = 30 * time.Minute

// StreamableTransport serves the Streamable HTTP transport (2025-03-26 and
// later) on /mcp with the SDK's handler. In front of it, a POSTed message is
// bounded and checked, so that garbage gets a JSON-RPC -32700 or -32600 error
// like on the SSE transport, and new sessions are refused during shutdown.
type StreamableTransport struct {
	handler   http.Handler // stateful: 2025-03-26 to 2025-11-25, with sessions
	stateless http.Handler // 2026-07-28: every request on its own
	tasks     *TaskStore   // 2026-07-28 calls that may become tasks, and tasks/*
	direct    *streamableDirect
	sessions  *streamableSessions // the stateful ones, for the direct path and their idle timeout
	maxBytes  int64
	closing   atomic.Bool
	// CountStateless counts the stateless requests by method; nil counts nothing.
	CountStateless func(method string)
	// keep takes over a connection after a direct call (keepalive.go);
	// nil (a server not started by serve) takes none.
	keep *KeepAlive
}

// NewStreamableTransport serves server on /mcp; calls is the table of the
// direct path (directcall_streamable.go). A stateful session that sees no
// POST for sessionTimeout is closed (on clk).
func NewStreamableTransport(server *mcp.Server, calls func() *CallTable, maxBytes int64, sessionTimeout time.Duration, clk clock.WithDelayedExecution, logger klog.Logger) *StreamableTransport {
	return &StreamableTransport{
		handler: mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, &mcp.StreamableHTTPOptions{
			// No timeout of the SDK's: sessions is the timer, since the
			// direct path's POSTs do not pass through the SDK.
			MaxRequestBodyBytes: maxBytes,
			Logger:              SDKLogger(logger.WithName("streamable")),
		}),
		stateless: mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, &mcp.StreamableHTTPOptions{
			Stateless: true,
			// The POST is the whole call: a client that goes away (or
			// cancels) cancels the tool, which kills its process group.
			PropagateRequestCancellation: true,
			MaxRequestBodyBytes:          maxBytes,
			Logger:                       SDKLogger(logger.WithName("stateless")),
		}),
		direct:   newStreamableDirect(calls, logger.WithName("streamable")),
		sessions: newStreamableSessions(server, sessionTimeout, clk),
		maxBytes: maxBytes,
	}
}

// isStateless reports whether a POSTed message is of the stateless
// revision: its MCP-Protocol-Version header names it or a later one, or
// its params carry the revision's _meta (then the stateless handler checks
// that the header is there and agrees, and refuses it otherwise).
func isStateless(r *http.Request, msg jsonrpc.Message) bool {
	if v := r.Header.Get("Mcp-Protocol-Version"); v >= ProtocolStateless {
		return true
	}
	req, ok := msg.(*jsonrpc.Request)
	if !ok || len(req.Params) == 0 {
		return false
	}
	// Params without an escape spell every name as it is: without the
	// version's key among their bytes, no _meta has it. That spares a
	// decode of every session request's params (a call's arguments too).
	if bytes.IndexByte(req.Params, '\\') < 0 && !bytes.Contains(req.Params, []byte(mcp.MetaKeyProtocolVersion)) {
		return false
	}
	var p struct {
		Meta map[string]json.RawMessage `json:"_meta"`
	}
	if json.Unmarshal(req.Params, &p) != nil {
		return false
	}
	_, ok = p.Meta[mcp.MetaKeyProtocolVersion]
	return ok
}

// methodOf is msg's method: a request's or a notification's; "" for a
// response or a batch.
func methodOf(msg jsonrpc.Message) string {
	if req, ok := msg.(*jsonrpc.Request); ok {
		return req.Method
	}
	return ""
}

func (t *StreamableTransport) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if kw, ok := w.(*keptWriter); ok {
		kw.handBack = !t.serveKept(kw, r)
		return
	}
	if c := t.serve(w, r); c != nil {
		t.keep.serve(c) // the connection's next requests (keepalive.go)
	}
}

// serve serves a request that net/http read. It returns the connection
// when it took it over after a direct call.
func (t *StreamableTransport) serve(w http.ResponseWriter, r *http.Request) *keptConn {
	if t.closing.Load() {
		http.Error(w, "sandboxd is shutting down", http.StatusServiceUnavailable)
		return nil
	}
	if r.Method != http.MethodPost {
		t.handler.ServeHTTP(w, r) // GET and DELETE of a session: the SDK's
		return nil
	}
	data, rerr := readMessage(w, r, t.maxBytes)
	if rerr != nil {
		rerr.write(w)
		return nil
	}
	msg, rerr := checkMessage(data, true)
	if rerr != nil {
		rerr.write(w)
		return nil
	}
	req, _ := msg.(*jsonrpc.Request)
	stateless := isStateless(r, msg)
	if stateless {
		t.countStateless(methodOf(msg))
	}
	if req != nil && stateless && t.tasks != nil && t.tasks.serve(w, r, req) {
		return nil
	}
	if resp, handled := unknownMethod(msg); handled {
		writeUnknownMethod(w, resp, stateless)
		return nil
	}
	r.Body = io.NopCloser(bytes.NewReader(data))
	r.ContentLength = int64(len(data))
	switch id := r.Header.Get("Mcp-Session-Id"); {
	case stateless:
		if req != nil {
			if c, served := t.serveKeeping(w, r, func(w http.ResponseWriter) bool { return t.direct.serveStateless(w, r, req) }); served {
				return c
			}
		}
		t.stateless.ServeHTTP(w, r)
	case id != "":
		sess := t.sessions.begin(id)
		if sess == nil {
			t.handler.ServeHTTP(w, r) // unknown to the SDK too: 404
			return nil
		}
		defer t.sessions.end(sess)
		if req != nil {
			if c, served := t.serveKeeping(w, r, func(w http.ResponseWriter) bool { return t.direct.serveStateful(w, r, req, sess) }); served {
				return c
			}
		}
		if sess.direct.cancel(msg) {
			w.WriteHeader(http.StatusAccepted)
			return nil
		}
		t.handler.ServeHTTP(w, r)
	default:
		t.handler.ServeHTTP(w, r)
		if id := w.Header().Get("Mcp-Session-Id"); id != "" {
			t.sessions.track(id) // a new session: its idle timer starts
		}
	}
	return nil
}

// writeUnknownMethod writes unknownMethod's answer: 202 for a
// notification, the error for a request; at 2026-07-28 (stateless) with
// HTTP 404, as the revision has it.
func writeUnknownMethod(w http.ResponseWriter, resp *jsonrpc.Response, stateless bool) {
	if resp == nil {
		w.WriteHeader(http.StatusAccepted)
		return
	}
	body, err := jsonrpc.EncodeMessage(resp)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if stateless {
		w.WriteHeader(statelessStatus(jsonrpc.CodeMethodNotFound))
	}
	w.Write(body)
}

// serveKeeping runs one of the direct path's serves (serveStateful,
// serveStateless) through w and reports whether it served. When r's
// connection may be kept (keepalive.go), the answer is held, the
// connection taken over and the answer written to it; takeOver's
// connection is returned, to be served once this POST's handling has
// ended (a session's POST included).
func (t *StreamableTransport) serveKeeping(w http.ResponseWriter, r *http.Request, serve func(http.ResponseWriter) bool) (*keptConn, bool) {
	if !t.keep.mayTake(r) {
		return nil, serve(w)
	}
	kw := newKeptWriter()
	if !serve(kw) {
		return nil, false
	}
	return t.keep.takeOver(w, r, kw), true
}

// serveKept serves a request read on a kept connection (keepalive.go) if
// it is a call that the direct path takes (a session's, or a stateless one
// that is not the task store's), and reports whether it did; it writes
// nothing otherwise, and net/http serves the request as serve does.
func (t *StreamableTransport) serveKept(kw *keptWriter, r *http.Request) bool {
	if t.closing.Load() {
		return false
	}
	data, rerr := readMessage(kw, r, t.maxBytes)
	if rerr != nil {
		return false
	}
	msg, rerr := checkMessage(data, true)
	req, _ := msg.(*jsonrpc.Request)
	if rerr != nil || req == nil {
		return false
	}
	if _, handled := unknownMethod(msg); handled {
		return false
	}
	if isStateless(r, msg) {
		if t.tasks != nil {
			if _, _, theirs := t.tasks.acceptCall(r, req); theirs {
				return false
			}
		}
		if !t.direct.serveStateless(kw, r, req) {
			return false
		}
		t.countStateless(req.Method)
		return true
	}
	id := r.Header.Get("Mcp-Session-Id")
	if id == "" {
		return false
	}
	sess := t.sessions.begin(id)
	if sess == nil {
		return false
	}
	defer t.sessions.end(sess)
	return t.direct.serveStateful(kw, r, req, sess)
}

// countStateless counts a request of the stateless revision (CountStateless).
func (t *StreamableTransport) countStateless(method string) {
	if t.CountStateless != nil {
		t.CountStateless(method)
	}
}
