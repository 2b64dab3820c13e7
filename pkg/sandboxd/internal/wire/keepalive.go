package wire

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"
)

// Kept connections: the later direct calls of a kept-alive connection,
// served without net/http's per-request work.
//
// A client makes one tools/call after the other on one kept-alive HTTP/1.1
// connection. net/http serves each with work that a call of a few tens of
// µs feels: it starts a goroutine per request for its background read of
// the connection (which wakes the other P's thread), reads the connection
// again for it, and builds a context, a response and its buffers. Once the
// direct path (directcall_streamable.go) has served a call (a session's or
// a stateless one) on a plain HTTP/1.1 connection that stays open, the
// transport takes the connection over (http.Hijacker) and serves its next
// requests in the same goroutine: it reads each with net/http's own parser
// (http.ReadRequest) and the checks net/http's server makes after it,
// runs the server's own handler (the mux, the guard and the transport), and
// writes the answer with its length in one write. Every request passes the
// Guard on its own, as on net/http: nothing is trusted for its connection.
//
// It serves only what it is sure to serve as net/http would: a POST of
// /mcp, HTTP/1.1, with one Content-Length within the message bound, no
// Transfer-Encoding, Expect, Upgrade or Connection: close, one valid Host,
// and valid header names and values, that is a call the direct path takes
// (not one the task store takes). A stateless call still ends with its
// POST: while it runs past watchDelay, the connection is watched, and the
// client's end cancels it (connWatch). Everything else is handed back to net/http: the
// connection, with every byte read from it since the request began, goes
// to the http.Server through a listener of its own (backListener), and
// net/http reads the request again and serves it (and the connection) as
// it serves any. So a refusal (a 400 for a malformed request, a 431, a
// 413, the guard's 401 and 403) is net/http's and the transport's own, and
// nothing is lost or added on the way (TestKeptConnReplaysExactly).
//
// The kept connection keeps net/http's timeouts: the idle timeout between
// requests, the header timeout while a request's head is read, and none
// while its body is (sandboxd sets no ReadTimeout). At shutdown the idle
// ones are closed and the busy ones closed when their call has answered,
// as http.Server.Shutdown does with its own; serve waits for them.
type KeepAlive struct {
	root          http.Handler  // the server's whole handler
	back          *backListener // where a request not taken goes: net/http
	idleTimeout   time.Duration
	headerTimeout time.Duration
	maxHead       int   // bytes of a request's head, as net/http bounds it
	maxBody       int64 // bytes of a message (options.maxMessageBytes)
	// clock runs the watch of a stateless call's connection (watchDelay).
	clock clock.WithDelayedExecution

	// taken counts the requests served on kept connections (for the tests).
	taken atomic.Int64

	mu     sync.Mutex
	conns  map[*keptConn]bool // true while the connection waits for a request
	closed bool
	wg     sync.WaitGroup
}

// NewKeepAlive keeps connections of hs, whose handler is the server's and
// whose requests it hands back through back (served by hs too).
func NewKeepAlive(hs *http.Server, back *backListener, maxBody int64, clk clock.WithDelayedExecution) *KeepAlive {
	maxHead := hs.MaxHeaderBytes
	if maxHead <= 0 {
		maxHead = http.DefaultMaxHeaderBytes
	}
	return &KeepAlive{
		root:          hs.Handler,
		back:          back,
		idleTimeout:   hs.IdleTimeout,
		headerTimeout: hs.ReadHeaderTimeout,
		maxHead:       maxHead + 4096, // net/http's initialReadLimitSize
		maxBody:       maxBody,
		clock:         clk,
		conns:         map[*keptConn]bool{},
	}
}

// mayTake reports whether r's connection may be taken over once its call
// is served: plain HTTP/1.1 (not TLS, which sandboxd does not serve) that
// the client keeps open. A nil keepAlive (a server not started by serve)
// takes none.
func (k *KeepAlive) mayTake(r *http.Request) bool {
	return k != nil && r.ProtoMajor == 1 && r.ProtoMinor == 1 && !r.Close && r.TLS == nil
}

// takeOver hijacks w's connection, writes the answer kw holds to it and
// returns the connection for serve. When the connection cannot be taken
// (the ResponseWriter cannot hijack, or sandboxd is shutting down), the
// answer goes through w and takeOver returns nil.
func (k *KeepAlive) takeOver(w http.ResponseWriter, r *http.Request, kw *keptWriter) *keptConn {
	k.mu.Lock()
	closed := k.closed
	if !closed {
		k.wg.Add(1)
	}
	k.mu.Unlock()
	if closed {
		kw.writeTo(w)
		return nil
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		k.wg.Done()
		kw.writeTo(w)
		return nil
	}
	c := newKeptConn(conn, brw.Reader, r.Context())
	if _, err := conn.Write(kw.appendResponse(c.out[:0], time.Now())); err != nil {
		c.Close()
		k.wg.Done()
		return nil
	}
	k.mu.Lock()
	k.conns[c] = false
	k.mu.Unlock()
	return c
}

// serve serves c's requests until the client closes it, a timeout or
// shutdown ends it, or one of its requests is handed back to net/http. It
// runs in the goroutine of the request that took c over.
func (k *KeepAlive) serve(c *keptConn) {
	handedBack := false
	defer func() {
		if !handedBack {
			c.Close()
		}
		c.cancel()
		k.mu.Lock()
		delete(k.conns, c)
		k.mu.Unlock()
		k.wg.Done()
	}()
	for {
		if !k.setWaiting(c, true) {
			return
		}
		_ = c.SetReadDeadline(deadline(k.idleTimeout))
		if _, err := c.br.Peek(1); err != nil {
			return // closed by the client, idle too long, or closed at shutdown
		}
		if !k.setWaiting(c, false) {
			k.handBack(c, c.replay(nil, nil)) // shutting down: net/http answers, or closes it
			handedBack = true
			return
		}
		_ = c.SetReadDeadline(deadline(k.headerTimeout))
		keep, replay := k.serveOne(c)
		if replay != nil {
			k.handBack(c, replay)
			handedBack = true
			return
		}
		if !keep {
			return
		}
	}
}

// serveOne reads c's next request and answers it. It reports whether it
// answered and may read the next (keep); or, when the request is one for
// net/http, the bytes that net/http is to read before c's (replay).
func (k *KeepAlive) serveOne(c *keptConn) (keep bool, replay []byte) {
	// After a POST, as net/http: RFC 7230 section 3's tolerance for old
	// clients that end a body with a line end it does not count.
	peek, _ := c.br.Peek(4)
	_, _ = c.br.Discard(leadingLineEnds(peek))
	req, head, err := c.readHead(k.maxHead)
	if err != nil {
		if c.src.err != nil && !errors.Is(c.src.err, errHeadTooLong) {
			return false, nil // the connection failed or timed out: net/http closes it too
		}
		return false, head // malformed or too long: net/http's answer
	}
	_ = c.SetReadDeadline(time.Time{}) // no ReadTimeout: the body has none
	if !k.takes(req) {
		return false, c.replay(head, nil)
	}
	// Read as it comes (not a buffer of the length the head claims, which
	// nobody has yet checked): the body reader ends at the length, or
	// fails if the connection ends first.
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return false, nil // the client went away mid-body
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	req.RemoteAddr = c.remote
	kw := newKeptWriter()
	if req.Header.Get("Mcp-Session-Id") != "" {
		// A session's call does not end with its POST: nothing to watch.
		k.root.ServeHTTP(kw, req.WithContext(c.ctx))
	} else {
		// A stateless call ends with its POST: the client closing the
		// connection cancels it, as net/http's background read does.
		ctx, cancel := context.WithCancel(c.ctx)
		watch := k.watch(c, cancel)
		k.root.ServeHTTP(kw, req.WithContext(ctx))
		watch.stop()
		cancel()
	}
	if kw.handBack {
		return false, c.replay(head, body)
	}
	k.taken.Add(1)
	if _, err := c.Write(kw.appendResponse(c.out[:0], time.Now())); err != nil {
		return false, nil
	}
	return !kw.closes(), nil
}

// takes reports whether req is of the shape this loop serves (see the top
// of this file), after the checks net/http's server makes past its parser.
func (k *KeepAlive) takes(req *http.Request) bool {
	h := req.Header
	return req.Method == http.MethodPost && req.RequestURI == "/mcp" &&
		req.ProtoMajor == 1 && req.ProtoMinor == 1 && !req.Close &&
		len(req.TransferEncoding) == 0 && len(h["Content-Length"]) == 1 &&
		req.ContentLength >= 0 && req.ContentLength <= k.maxBody &&
		len(h["Expect"]) == 0 && len(h["Upgrade"]) == 0 && len(h["Connection"]) == 0 &&
		validHost(req.Host) && validHeader(h)
}

// watchDelay is how long a stateless call on a kept connection runs before
// the connection is watched for the client's end. Nearly every call ends
// sooner (a Read, a Glob), and pays no goroutine for a watch; a longer one
// (Bash, run_tests) is cancelled this much later than net/http's
// background read would have noticed the client go.
const watchDelay = 2 * time.Millisecond

// connWatch watches a kept connection while a stateless call runs: after
// watchDelay it reads the connection (a Peek, which keeps what it reads),
// and cancels the call if the read fails (the client went away). Bytes
// that arrive (a request sent before the answer came) end the watch, as
// they end net/http's.
type connWatch struct {
	c       *keptConn
	cancel  context.CancelFunc
	timer   clock.Timer
	mu      sync.Mutex
	stopped bool
	reading bool
	done    chan struct{} // closed when a read begun has ended
}

// watch starts the watch of c, cancelling with cancel.
func (k *KeepAlive) watch(c *keptConn, cancel context.CancelFunc) *connWatch {
	w := &connWatch{c: c, cancel: cancel, done: make(chan struct{})}
	w.timer = k.clock.AfterFunc(watchDelay, w.read)
	return w
}

func (w *connWatch) read() {
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		return
	}
	w.reading = true
	w.mu.Unlock()
	defer close(w.done)
	_, err := w.c.br.Peek(1)
	w.mu.Lock()
	stopped := w.stopped
	w.mu.Unlock()
	if err != nil && !stopped {
		w.cancel()
	}
}

// stop ends the watch once the call has answered: a read in progress is
// ended (a deadline in the past, as net/http ends its background read) and
// waited for, so that the loop alone reads the connection again.
func (w *connWatch) stop() {
	w.timer.Stop()
	w.mu.Lock()
	w.stopped = true
	reading := w.reading
	w.mu.Unlock()
	if !reading {
		return
	}
	_ = w.c.SetReadDeadline(time.Unix(1, 0))
	<-w.done
	_ = w.c.SetReadDeadline(time.Time{})
}

// setWaiting records whether c waits for a request (shutdown closes the
// connections that wait). It reports false once shutdown has begun.
func (k *KeepAlive) setWaiting(c *keptConn, waiting bool) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return false
	}
	k.conns[c] = waiting
	return true
}

// handBack gives c to net/http with replay to be read first; once its
// server has shut down, it closes c.
func (k *KeepAlive) handBack(c *keptConn, replay []byte) {
	_ = c.SetReadDeadline(time.Time{})
	k.back.give(c.handOff(replay))
}

// close closes the connections that wait for a request, and the others
// once their answers are written; it returns when every kept connection's
// loop has ended, or when ctx is done.
func (k *KeepAlive) close(ctx context.Context) error {
	if k == nil {
		return nil
	}
	k.mu.Lock()
	k.closed = true
	for c, waiting := range k.conns {
		if waiting {
			c.Close()
		}
	}
	k.mu.Unlock()
	return waitUntil(ctx, k.wg.Wait, "kept connections still answering")
}

// deadline is the read deadline of a timeout d from now: none for d ≤ 0,
// as net/http's.
func deadline(d time.Duration) time.Time {
	if d <= 0 {
		return time.Time{}
	}
	return time.Now().Add(d)
}

// leadingLineEnds is how many of b's first bytes are CR or LF.
func leadingLineEnds(b []byte) int {
	n := 0
	for n < len(b) && (b[n] == '\r' || b[n] == '\n') {
		n++
	}
	return n
}

// keptConn is a connection the transport took over.
type keptConn struct {
	net.Conn
	src    recordingReader
	br     *bufio.Reader
	ctx    context.Context // the values of the request that took it over, not its end
	cancel context.CancelFunc
	remote string
	out    []byte // the answer's bytes, kept for the next
}

// newKeptConn reads conn on, after the bytes that net/http's reader had
// already read from it (pending).
func newKeptConn(conn net.Conn, pending *bufio.Reader, ctx context.Context) *keptConn {
	c := &keptConn{Conn: conn, remote: conn.RemoteAddr().String(), out: make([]byte, 0, 4096)}
	c.src.conn = conn
	if n := pending.Buffered(); n > 0 {
		p, _ := pending.Peek(n)
		c.src.pending = bytes.Clone(p)
	}
	c.br = bufio.NewReaderSize(&c.src, 4096)
	c.ctx, c.cancel = context.WithCancel(context.WithoutCancel(ctx))
	return c
}

// readHead reads the head of the next request with net/http's parser. It
// returns the head's bytes; on an error, every byte read from the
// connection since the request began (the request as far as it came, for
// net/http to read again).
func (c *keptConn) readHead(limit int) (*http.Request, []byte, error) {
	start, _ := c.br.Peek(c.br.Buffered())
	c.src.start(start, limit)
	req, err := http.ReadRequest(c.br)
	rec := c.src.stop()
	if err != nil {
		return nil, rec, err
	}
	return req, rec[:len(rec)-c.br.Buffered()], nil
}

// replay is a request's bytes as they came (its head and, if read, its
// body) and what the reader holds after them.
func (c *keptConn) replay(head, body []byte) []byte {
	rest, _ := c.br.Peek(c.br.Buffered())
	out := make([]byte, 0, len(head)+len(body)+len(rest))
	return append(append(append(out, head...), body...), rest...)
}

// handOff is c as net/http is to read it: replay, then what c had read
// before the takeover and not yet served, then the connection.
func (c *keptConn) handOff(replay []byte) net.Conn {
	return &replayConn{Conn: c.Conn, r: io.MultiReader(bytes.NewReader(replay), bytes.NewReader(c.src.pending), c.Conn)}
}

// errHeadTooLong ends a head longer than net/http reads.
var errHeadTooLong = errors.New("request head too long")

// recordingReader reads a kept connection: first what net/http had read
// before the takeover, then the connection. While a head is read it keeps
// a copy of what it returns.
type recordingReader struct {
	conn    net.Conn
	pending []byte
	on      bool
	limit   int
	rec     []byte
	err     error // the connection's own error, or errHeadTooLong
}

func (r *recordingReader) Read(p []byte) (int, error) {
	if r.on {
		// As net/http's connReader: no byte past the limit is read, so
		// a head that does not end within it fails to parse.
		remain := r.limit - len(r.rec)
		if remain <= 0 {
			r.err = errHeadTooLong
			return 0, errHeadTooLong
		}
		if len(p) > remain {
			p = p[:remain]
		}
	}
	var n int
	var err error
	if len(r.pending) > 0 {
		n = copy(p, r.pending)
		r.pending = r.pending[n:]
	} else {
		n, err = r.conn.Read(p)
		if err != nil {
			r.err = err
		}
	}
	if r.on {
		r.rec = append(r.rec, p[:n]...)
	}
	return n, err
}

// start records from here on, after the bytes already buffered (start),
// up to limit bytes more.
func (r *recordingReader) start(buffered []byte, limit int) {
	r.rec = append(r.rec[:0], buffered...)
	r.limit = len(buffered) + limit
	r.on = true
	r.err = nil
}

// stop ends the recording and returns it (valid until the next start).
func (r *recordingReader) stop() []byte {
	r.on = false
	return r.rec
}

// replayConn is a connection handed back to net/http: its reads come from
// r (the replay, then the connection).
type replayConn struct {
	net.Conn
	r io.Reader
}

func (c *replayConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// CloseWrite half-closes the connection, as net/http does before it closes
// one whose request it refused unread (so that its answer is not lost to
// a reset).
func (c *replayConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// backListener gives the http.Server the connections handed back to it.
type backListener struct {
	addr  net.Addr
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func NewBackListener(addr net.Addr) *backListener {
	return &backListener{addr: addr, conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *backListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *backListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *backListener) Addr() net.Addr { return l.addr }

// give hands c to the server, and reports whether it took it: not once the
// listener is closed (the server is shutting down), when c is closed.
func (l *backListener) give(c net.Conn) bool {
	select {
	case l.conns <- c:
		return true
	case <-l.done:
		c.Close()
		return false
	}
}
