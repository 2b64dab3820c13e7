package egress

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/textproto"
	"runtime/debug"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/airlock-dev/airlock/pkg/traceparent"
)

// Resolver resolves an allowed name, which the gateway gives it rooted (with a trailing dot, so
// that no search domain is tried); *net.Resolver is one.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Dialer dials the address the gateway checked; *net.Dialer is one.
type Dialer interface {
	DialContext(ctx context.Context, network, address string) (net.Conn, error)
}

// Config is the gateway's configuration. Claims is required; the rest have defaults.
type Config struct {
	Claims   ClaimLookup
	Resolver Resolver
	Dialer   Dialer
	// ClusterCIDRs are the cluster's pod and Service ranges: answers in them are refused unless
	// the rule allows private addresses.
	ClusterCIDRs []netip.Prefix
	// HeadTimeout bounds the wait for a request's head (also between requests on a kept
	// connection) and for a tunnel's ClientHello; default 30s.
	HeadTimeout time.Duration
	// DialTimeout bounds the resolution and the dial of an upstream; default 10s.
	DialTimeout time.Duration
	// IdleTimeout closes a tunnel or an exchange in which no byte moved either way for so long;
	// default 10m.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's head; default 64 KiB.
	MaxHeaderBytes int
	// ShutdownGrace is how long open connections may go on once Serve's context ends; default 0.
	ShutdownGrace time.Duration
	// Clock times durations and the shutdown grace; default the real clock.
	Clock clock.WithTicker
	// Terminate, if set, lets the gateway terminate the TLS of tunnels to hosts whose rules
	// restrict methods or paths or inject a credential (terminate.go). Nil: such tunnels are
	// refused.
	Terminate *Terminator
	// Observe, if set, is called with every exchange's record once it has ended, after its audit
	// line; it must not block.
	Observe func(Record)
	// Tracer, if set, gets an "egress <host>" span per decision, parented on the span the
	// credential's user name named (trace.go); nil: no spans.
	Tracer trace.Tracer
	// Decisions, if set, keeps each decision of a claim as its record entry for the operator's
	// leader (GET /decisions, decisions.go); nil: none kept.
	Decisions *DecisionLog
}

// Gateway is the egress proxy.
type Gateway struct {
	cfg Config

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
	// draining is closed when Serve has stopped accepting and the grace begins.
	draining chan struct{}
}

// New returns a gateway, or an error for a Config without a claim lookup.
func New(cfg Config) (*Gateway, error) {
	if cfg.Claims == nil {
		return nil, errors.New("egress: Config.Claims is required")
	}
	for _, p := range cfg.ClusterCIDRs {
		if !p.IsValid() {
			return nil, fmt.Errorf("egress: invalid cluster CIDR %v", p)
		}
	}
	if cfg.Resolver == nil {
		cfg.Resolver = net.DefaultResolver
	}
	if cfg.Dialer == nil {
		cfg.Dialer = &net.Dialer{KeepAlive: 30 * time.Second}
	}
	if cfg.HeadTimeout <= 0 {
		cfg.HeadTimeout = 30 * time.Second
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 10 * time.Second
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = 10 * time.Minute
	}
	if cfg.MaxHeaderBytes <= 0 {
		cfg.MaxHeaderBytes = 64 << 10
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	registerMetrics()
	return &Gateway{cfg: cfg, conns: map[net.Conn]struct{}{}, draining: make(chan struct{})}, nil
}

// Ready reports why the gateway cannot serve yet: its claim lookup has not synced.
func (g *Gateway) Ready() error {
	if !g.cfg.Claims.HasSynced() {
		return ErrNotSynced
	}
	return nil
}

// Serve accepts proxy connections on ln until ctx ends; then it stops accepting, gives open
// connections ShutdownGrace, closes them, and returns once every connection's goroutine has
// returned. It closes ln.
func (g *Gateway) Serve(ctx context.Context, ln net.Listener) error {
	logger := klog.FromContext(ctx)
	stop := context.AfterFunc(ctx, func() { _ = ln.Close() })
	defer stop()
	var acceptErr error
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() == nil {
				acceptErr = fmt.Errorf("egress: accepting on %s: %w", ln.Addr(), err)
			}
			break
		}
		if !g.track(c) {
			_ = c.Close()
			break
		}
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			defer g.untrack(c)
			defer func() {
				// A bug must cost one connection (closed: nothing more passes), not the gateway.
				if r := recover(); r != nil {
					logger.Error(nil, "Panic serving an egress connection", "panic", r, "stack", string(debug.Stack()))
				}
			}()
			g.serveConn(ctx, c)
		}()
	}
	_ = ln.Close()
	g.drain(logger)
	return acceptErr
}

// drain waits up to ShutdownGrace for open connections, then closes them and waits for their
// goroutines.
func (g *Gateway) drain(logger klog.Logger) {
	done := make(chan struct{})
	go func() { g.wg.Wait(); close(done) }()
	if g.cfg.ShutdownGrace > 0 {
		graceEnd := g.cfg.Clock.After(g.cfg.ShutdownGrace)
		close(g.draining)
		select {
		case <-done:
		case <-graceEnd:
		}
	} else {
		close(g.draining)
	}
	g.mu.Lock()
	g.closed = true
	n := len(g.conns)
	for c := range g.conns {
		_ = c.Close()
	}
	g.mu.Unlock()
	if n > 0 {
		logger.Info("Closing egress connections at shutdown", "connections", n)
	}
	<-done
}

func (g *Gateway) track(c net.Conn) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.conns[c] = struct{}{}
	openConnections.Inc()
	return true
}

func (g *Gateway) untrack(c net.Conn) {
	g.mu.Lock()
	delete(g.conns, c)
	g.mu.Unlock()
	openConnections.Dec()
	_ = c.Close()
}

// exchange is one decision of the gateway: a CONNECT tunnel or a plain HTTP request, and what
// its audit line says.
type exchange struct {
	kind     string
	source   netip.Addr
	id       Identity
	host     string
	port     uint16
	dialed   netip.AddrPort
	reason   Reason
	up, down int64
	start    time.Time
	// terminate: the tunnel is terminated, its requests checked one by one (terminate.go).
	terminate bool
	// head is the request's head as the client sent it (readHead), which http.ReadRequest
	// normalises: its Host and framing headers.
	head textproto.MIMEHeader
	// parent is the span the proxy user name named (traced), attribution only (trace.go).
	parent traceparent.Parent
	traced bool
	// credential is the name of the last credential a rule injected (never its value).
	credential string
}

// serveConn reads requests from one client connection and handles each until one is refused,
// the client or the upstream closes, or a tunnel ends.
func (g *Gateway) serveConn(ctx context.Context, c net.Conn) {
	source := remoteAddr(c)
	cr := &clientReader{br: bufio.NewReaderSize(c, g.cfg.MaxHeaderBytes)}
	for {
		// The last exchange's deadlines go; the head has HeadTimeout.
		_ = c.SetDeadline(time.Time{})
		_ = c.SetReadDeadline(time.Now().Add(g.cfg.HeadTimeout))
		head, err := readHead(cr.br)
		hosts := head.Values("Host")
		if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || isTimeout(err) {
			return
		}
		ex := &exchange{kind: "http", source: source, start: g.cfg.Clock.Now(), head: head}
		var req *http.Request
		if err == nil {
			req, err = http.ReadRequest(cr.br)
		}
		_ = c.SetReadDeadline(time.Time{})
		var keep bool
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			g.refuse(c, ex, ReasonHeaderTooLarge)
		case err != nil:
			g.refuse(c, ex, ReasonBadRequest)
		default:
			keep = g.handle(ctx, c, cr, req, hosts, ex)
		}
		g.audit(ctx, ex)
		if !keep {
			return
		}
	}
}

// handle decides one request and serves it; it reports whether the connection may carry
// another request.
func (g *Gateway) handle(ctx context.Context, c net.Conn, cr *clientReader, req *http.Request, hosts []string, ex *exchange) bool {
	if req.Method == http.MethodConnect {
		ex.kind = "connect"
	}
	if !g.cfg.Claims.HasSynced() {
		g.refuse(c, ex, ReasonNotSynced)
		return false
	}
	cred, ok := parseProxyAuthorization(req.Header.Values("Proxy-Authorization"))
	if !ok {
		g.refuse(c, ex, ReasonNoCredential)
		return false
	}
	cred, ok = g.takeSpan(cred, ex)
	if !ok {
		g.refuse(c, ex, ReasonBadCredential)
		return false
	}
	id, err := g.cfg.Claims.Lookup(ctx, cred, ex.source)
	ex.id = id
	if err != nil {
		g.refuse(c, ex, lookupReason(err))
		return false
	}
	if id.Policy == nil {
		g.refuse(c, ex, ReasonPolicyInvalid)
		return false
	}
	if ex.kind == "connect" {
		g.serveConnect(ctx, c, cr, req, hosts, ex)
		return false
	}
	return g.serveHTTP(ctx, c, req, hosts, ex)
}

// clientReader holds a client connection's buffered reader, which a tunnel lets go of once it
// has read the ClientHello (its MaxHeaderBytes buffer is the largest part of an idle tunnel).
type clientReader struct {
	br *bufio.Reader
}

// release returns a copy of what br still buffers (the client's bytes after the ClientHello),
// and lets br go.
func (cr *clientReader) release() []byte {
	rest, _ := cr.br.Peek(cr.br.Buffered())
	cr.br = nil
	return bytes.Clone(rest)
}

// errMalformedHead is the error of a request head that does not parse.
var errMalformedHead = errors.New("malformed request head")

// readHead waits until br holds a whole request head (up to its first empty line) and returns
// its header fields as sent, which http.ReadRequest normalises (it drops Host, and a
// Content-Length beside a Transfer-Encoding). A head larger than br's buffer is
// bufio.ErrBufferFull.
func readHead(br *bufio.Reader) (textproto.MIMEHeader, error) {
	n, searched := 1, 0
	for {
		b, err := br.Peek(n)
		if end := headEnd(b, searched); end > 0 {
			tp := textproto.NewReader(bufio.NewReader(bytes.NewReader(b[:end])))
			if _, err := tp.ReadLine(); err != nil {
				return nil, errMalformedHead
			}
			hdr, err := tp.ReadMIMEHeader()
			if err != nil {
				return nil, errMalformedHead
			}
			return hdr, nil
		}
		if err != nil {
			if errors.Is(err, io.EOF) && len(b) > 0 {
				return nil, io.ErrUnexpectedEOF
			}
			return nil, err
		}
		searched = max(0, len(b)-2)
		// Everything buffered, else wait for one more byte.
		if br.Buffered() > n {
			n = br.Buffered()
		} else {
			n++
		}
	}
}

// headEnd returns the length of the head in b (through the empty line that ends it), or 0;
// the bytes before from have been searched already.
func headEnd(b []byte, from int) int {
	for i := from; i < len(b); i++ {
		if b[i] != '\n' {
			continue
		}
		if i+1 < len(b) && b[i+1] == '\n' {
			return i + 2
		}
		if i+2 < len(b) && b[i+1] == '\r' && b[i+2] == '\n' {
			return i + 3
		}
	}
	return 0
}

func remoteAddr(c net.Conn) netip.Addr {
	if ap, err := netip.ParseAddrPort(c.RemoteAddr().String()); err == nil {
		return ap.Addr().Unmap()
	}
	return netip.Addr{}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// refuse writes the refusal of reason to the client and records it.
func (g *Gateway) refuse(w io.Writer, ex *exchange, reason Reason) {
	ex.reason = reason
	status := reason.status()
	body := fmt.Sprintf("airlock egress: refused: %s\n", reason)
	var extra string
	if status == http.StatusProxyAuthRequired {
		extra = "Proxy-Authenticate: Basic realm=\"airlock-egress\"\r\n"
	}
	n, _ := fmt.Fprintf(w, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nX-Airlock-Egress-Reason: %s\r\n%sConnection: close\r\nContent-Length: %d\r\n\r\n%s",
		status, http.StatusText(status), reason, extra, len(body), body)
	ex.down += int64(n)
}
