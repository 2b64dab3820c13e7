package wire

import (
	"context"
	"crypto/rand"
	"io"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/r3labs/sse/v2"
	"k8s.io/klog/v2"
)

const (
	// SSEEndpointPath is where the endpoint event sends a session's POSTs.
	SSEEndpointPath = "/message"
	// sseSessionParam is the query parameter that names the session.
	sseSessionParam = "sessionId"
	// sseStreamBuffer is the r3labs per-stream event buffer.
	sseStreamBuffer = 64
	// sseIncomingBuffer is how many POSTed messages wait for the protocol
	// layer before a POST waits.
	sseIncomingBuffer = 64
	// DefaultSSEKeepAlive is the interval of keepalive comments.
	DefaultSSEKeepAlive = 15 * time.Second
)

// SSETransport serves the HTTP+SSE transport of protocol 2024-11-05 on
// r3labs/sse streams: GET /sse opens a session with a stream of its own,
// POST /message?sessionId= feeds it.
//
// r3labs/sse is used with care:
//   - AutoReplay and AutoStream are off: an event is never sent twice, and
//     only this transport creates streams, one per session.
//   - The endpoint event is published only once the stream's subscriber is
//     registered (an event published before is dropped).
//   - A stream is removed only after its subscriber is gone: removing it
//     first would leave r3labs's unsubscribe goroutine blocked for ever. To
//     end a session from our side, the request context that r3labs watches
//     is cancelled, which unsubscribes, and then the stream is removed.
//   - No event is ever empty (r3labs ends the stream on one).
type SSETransport struct {
	mcp   *mcp.Server
	calls atomic.Pointer[CallTable] // the direct path's tools (directcall.go)
	// directCalls counts the calls the direct path took (for the tests).
	directCalls atomic.Int64
	streams     *sse.Server
	keepAlive   time.Duration
	maxBytes    int64
	logger      klog.Logger

	mu       sync.Mutex
	sessions map[string]*sseSession
	closing  bool
	handlers sync.WaitGroup // running GET /sse handlers
}

func NewSSETransport(server *mcp.Server, keepAlive time.Duration, maxBytes int64, logger klog.Logger) *SSETransport {
	t := &SSETransport{
		mcp:       server,
		keepAlive: keepAlive,
		maxBytes:  maxBytes,
		logger:    logger.WithName("sse"),
		sessions:  make(map[string]*sseSession),
	}
	streams := sse.New()
	streams.AutoReplay = false
	streams.AutoStream = false
	streams.BufferSize = sseStreamBuffer
	streams.Headers = map[string]string{"X-Accel-Buffering": "no"}
	streams.OnSubscribe = t.onSubscribe
	t.streams = streams
	return t
}

// sseSession is one HTTP+SSE session: an mcp.Transport whose Connection reads
// the POSTed messages and writes replies to the session's stream.
type sseSession struct {
	t        *SSETransport
	id       string
	incoming chan jsonrpc.Message
	// ctx is the stream's request context: cancelling it ends the stream and
	// the session.
	ctx        context.Context
	cancel     context.CancelFunc
	subscribed chan struct{} // closed once r3labs registered the subscriber
	subOnce    sync.Once
	rc         *http.ResponseController
	ss         atomic.Pointer[mcp.ServerSession]
	direct     directCalls
}

// serveStream is GET /sse.
func (t *SSETransport) serveStream(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		http.Error(w, "GET /sse opens an MCP session; POST messages to the endpoint it sends", http.StatusMethodNotAllowed)
		return
	}
	if _, ok := w.(http.Flusher); !ok {
		http.Error(w, "streaming is not supported on this connection", http.StatusInternalServerError)
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	sess := &sseSession{
		t:          t,
		id:         rand.Text(),
		incoming:   make(chan jsonrpc.Message, sseIncomingBuffer),
		ctx:        ctx,
		cancel:     cancel,
		subscribed: make(chan struct{}),
		rc:         http.NewResponseController(w),
		direct:     directCalls{cancels: make(map[any]context.CancelFunc)},
	}
	t.mu.Lock()
	if t.closing {
		t.mu.Unlock()
		cancel()
		http.Error(w, "sandboxd is shutting down", http.StatusServiceUnavailable)
		return
	}
	t.sessions[sess.id] = sess
	t.handlers.Add(1)
	t.mu.Unlock()
	defer t.handlers.Done()
	logger := t.logger.WithValues("session", sess.id)
	logger.V(2).Info("SSE session opened", "remote", r.RemoteAddr)

	t.streams.CreateStream(sess.id)
	ss, err := t.mcp.Connect(ctx, sess, nil)
	if err != nil {
		t.forget(sess)
		t.streams.RemoveStream(sess.id)
		cancel()
		logger.Error(err, "Connecting the MCP session failed")
		http.Error(w, "connecting the MCP session failed", http.StatusInternalServerError)
		return
	}

	sess.ss.Store(ss)
	var pump sync.WaitGroup
	pump.Go(func() { t.pump(sess) })

	// r3labs serves the stream on a copy of the request that names it and
	// that ends when the session does. Last-Event-ID is dropped: a new
	// session has nothing to replay, and r3labs answers 400 to a non-numeric
	// one where the transport must answer 200.
	sr := r.WithContext(ctx)
	u := *r.URL
	u.RawQuery = url.Values{"stream": {sess.id}}.Encode()
	sr.URL = &u
	sr.Header = r.Header.Clone()
	sr.Header.Del("Last-Event-ID")
	t.streams.ServeHTTP(w, sr) // returns once the subscriber is unsubscribed

	t.forget(sess) // POSTs get 404 from now on
	cancel()
	pump.Wait()
	_ = ss.Close() // in-flight tool calls are cancelled: their processes are killed
	_ = ss.Wait()
	sess.endDirect() // cancelled with ctx
	t.streams.RemoveStream(sess.id)
	logger.V(2).Info("SSE session closed")
}

// onSubscribe runs (in a goroutine of r3labs's) once a stream's subscriber
// is registered: from then on, published events reach the client.
func (t *SSETransport) onSubscribe(streamID string, _ *sse.Subscriber) {
	if sess := t.lookup(streamID); sess != nil {
		sess.subOnce.Do(func() { close(sess.subscribed) })
	}
}

// pump sends the endpoint event once the client is subscribed, then keepalive
// comments until the session ends.
func (t *SSETransport) pump(sess *sseSession) {
	select {
	case <-sess.subscribed:
	case <-sess.ctx.Done():
		return
	}
	t.streams.Publish(sess.id, &sse.Event{
		Event: []byte("endpoint"),
		Data:  []byte(SSEEndpointPath + "?" + sseSessionParam + "=" + url.QueryEscape(sess.id)),
	})
	ticker := time.NewTicker(t.keepAlive)
	defer ticker.Stop()
	for {
		select {
		case <-sess.ctx.Done():
			return
		case <-ticker.C:
			// A keepalive that finds the buffer full is not needed.
			t.streams.TryPublish(sess.id, &sse.Event{Comment: []byte("keepalive")})
		}
	}
}

// serveMessage is POST /message?sessionId=.
func (t *SSETransport) serveMessage(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "POST a JSON-RPC message here", http.StatusMethodNotAllowed)
		return
	}
	id := r.URL.Query().Get(sseSessionParam)
	if id == "" {
		http.Error(w, "the "+sseSessionParam+" query parameter is missing: use the endpoint that GET /sse sent", http.StatusBadRequest)
		return
	}
	sess := t.lookup(id)
	if sess == nil {
		http.Error(w, "unknown or closed session: open a new one with GET /sse", http.StatusNotFound)
		return
	}
	data, rerr := readMessage(w, r, t.maxBytes)
	if rerr != nil {
		rerr.write(w)
		return
	}
	msg, rerr := checkMessage(data, false)
	if rerr != nil {
		rerr.write(w)
		return
	}
	if resp, handled := unknownMethod(msg); handled {
		if resp != nil {
			_ = sess.Write(r.Context(), resp)
		}
		w.WriteHeader(http.StatusAccepted)
		return
	}
	// The POST's headers reach the tools as a streamable request's do (the caller's
	// traceparent, docs/record.md §1): in the request's Extra, off the wire.
	header := r.Header.Clone()
	if sess.takeCall(msg, header) || sess.takeCancel(msg) {
		w.WriteHeader(http.StatusAccepted)
		return
	}
	if req, ok := msg.(*jsonrpc.Request); ok {
		req.Extra = &mcp.RequestExtra{Header: header}
	}
	select {
	case sess.incoming <- msg:
		w.WriteHeader(http.StatusAccepted)
	case <-sess.ctx.Done():
		http.Error(w, "unknown or closed session: open a new one with GET /sse", http.StatusNotFound)
	case <-r.Context().Done():
	}
}

func (t *SSETransport) lookup(id string) *sseSession {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.sessions[id]
}

func (t *SSETransport) forget(sess *sseSession) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.sessions[sess.id] == sess {
		delete(t.sessions, sess.id)
	}
}

// open returns the number of open sessions.
func (t *SSETransport) open() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.sessions)
}

// close refuses new sessions, ends every open one, and waits (until ctx is
// done) for their handlers to return. A client that does not read is cut
// off: its pending writes fail at once.
func (t *SSETransport) close(ctx context.Context) error {
	t.mu.Lock()
	t.closing = true
	sessions := make([]*sseSession, 0, len(t.sessions))
	for _, s := range t.sessions {
		sessions = append(sessions, s)
	}
	t.mu.Unlock()
	for _, s := range sessions {
		s.cancel()
		_ = s.rc.SetWriteDeadline(time.Now())
	}
	done := make(chan struct{})
	go func() {
		t.handlers.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Connect implements mcp.Transport: the session is its own connection.
func (s *sseSession) Connect(context.Context) (mcp.Connection, error) { return s, nil }

// SupportsProtocolVersion implements mcp.ProtocolVersionSupporter: this
// transport serves the handshake-era protocol versions only.
func (s *sseSession) SupportsProtocolVersion(v string) bool { return v < "2026-07-28" }

// Read implements mcp.Connection.
func (s *sseSession) Read(ctx context.Context) (jsonrpc.Message, error) {
	select {
	case msg := <-s.incoming:
		return msg, nil
	case <-s.ctx.Done():
		return nil, io.EOF
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Write implements mcp.Connection: the message becomes an `event: message`
// on the session's stream.
func (s *sseSession) Write(ctx context.Context, msg jsonrpc.Message) error {
	data, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		return err
	}
	if s.ctx.Err() != nil {
		return mcp.ErrConnectionClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.publish(data)
	return nil
}

// publish sends an encoded message as an `event: message` on the session's
// stream. It waits while the stream's buffer is full; it cannot wait for
// ever: once the client goes, r3labs drops events for the stream.
func (s *sseSession) publish(data []byte) {
	if s.ctx.Err() != nil {
		return
	}
	s.t.streams.Publish(s.id, &sse.Event{Event: []byte("message"), Data: data})
}

// Close implements mcp.Connection: it ends the stream and the session.
func (s *sseSession) Close() error {
	s.cancel()
	return nil
}

// SessionID implements mcp.Connection.
func (s *sseSession) SessionID() string { return s.id }
