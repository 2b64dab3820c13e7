package egress

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"time"

	"github.com/airlock-dev/airlock/pkg/egress/policy"
)

// serveConnect serves a CONNECT request: the authority is the target (no userinfo), a Host
// header if any must name it too, the target must be allowed, resolve to admitted addresses and
// answer; then, after "200", the tunnel must start with a TLS ClientHello whose SNI is the
// target's name (an IP target: no SNI), unless a rule allows non-TLS tunnels and the first byte
// is not a TLS handshake. The ClientHello goes upstream unchanged, then bytes flow both ways.
func (g *Gateway) serveConnect(ctx context.Context, c net.Conn, cr *clientReader, req *http.Request, hosts []string, ex *exchange) {
	if req.RequestURI == "" || req.RequestURI[0] == '/' {
		g.refuse(c, ex, ReasonBadRequest)
		return
	}
	t, err := policy.ParseAuthority(req.RequestURI, 0)
	if err != nil {
		g.refuse(c, ex, targetReason(err))
		return
	}
	ex.host, ex.port = t.Host, t.Port
	for _, h := range hosts {
		if ht, err := policy.ParseAuthority(h, t.Port); err != nil || ht != t {
			g.refuse(c, ex, ReasonHostMismatch)
			return
		}
	}
	upstream, rules := g.open(ctx, ex, t, "", "")
	if upstream == nil {
		g.refuse(c, ex, ex.reason)
		return
	}
	defer upstream.Close()
	n, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n")
	ex.down += int64(n)
	if err != nil {
		ex.reason = ReasonAllowed
		return
	}
	_ = c.SetReadDeadline(time.Now().Add(g.cfg.HeadTimeout))
	first, reason := g.checkTunnelStart(cr.br, t, rules)
	_ = c.SetReadDeadline(time.Time{})
	if reason != "" {
		// After "200" only closing is left: the client reads the refusal from the audit and
		// metrics, and from the connection's end.
		ex.reason = reason
		return
	}
	if ex.terminate {
		if first == nil {
			ex.reason = ReasonNotTLS
			return
		}
		g.terminate(ctx, c, append(first, cr.release()...), upstream, t, rules, ex)
		return
	}
	ex.reason = ReasonAllowed
	n, err = upstream.Write(append(first, cr.release()...))
	ex.up += int64(n)
	if err != nil {
		return
	}
	up, down := g.pipe(c, upstream)
	ex.up += up
	ex.down += down
}

// checkTunnelStart reads the tunnel's first bytes: a TLS ClientHello (returned whole, as read,
// with whatever the client sent with it) whose SNI must be t's name, or, when some rule allows
// it and the first byte is not a TLS handshake record, nothing (the tunnel is not TLS).
func (g *Gateway) checkTunnelStart(br *bufio.Reader, t policy.Target, rules []*policy.CompiledRule) ([]byte, Reason) {
	b, err := br.Peek(1)
	if err != nil {
		return nil, ReasonNotTLS
	}
	if b[0] != 0x16 { // not a TLS handshake record
		if slices.ContainsFunc(rules, func(r *policy.CompiledRule) bool { return r.AllowNonTLS }) {
			return nil, ""
		}
		return nil, ReasonNotTLS
	}
	sni, raw, err := readClientHello(br)
	if err != nil {
		return nil, ReasonNotTLS
	}
	if t.IsIP() {
		if sni != "" {
			return nil, ReasonSNIMismatch
		}
		return raw, ""
	}
	name, addr, err := policy.NormalizeHost(sni)
	if sni == "" || err != nil || addr.IsValid() || name != t.Host {
		return nil, ReasonSNIMismatch
	}
	return raw, ""
}

// errHelloRead stops crypto/tls once it has parsed the ClientHello.
var errHelloRead = errors.New("client hello read")

// readClientHello parses the ClientHello from r with crypto/tls's own parser (records
// reassembled, duplicate or malformed server names refused) and returns its SNI and every byte
// read from r meanwhile. Nothing is written to the client.
func readClientHello(r io.Reader) (string, []byte, error) {
	rec := &recordingConn{r: r}
	var sni string
	var seen bool
	conf := &tls.Config{GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
		sni, seen = hello.ServerName, true
		return nil, errHelloRead
	}}
	err := tls.Server(rec, conf).Handshake()
	if !seen {
		if err == nil {
			err = errors.New("no ClientHello")
		}
		return "", nil, err
	}
	return sni, rec.buf.Bytes(), nil
}

// recordingConn is the net.Conn crypto/tls reads the ClientHello from: reads come from r and
// are recorded, writes (the alert that ends the aborted handshake) are dropped.
type recordingConn struct {
	r   io.Reader
	buf bytes.Buffer
}

func (c *recordingConn) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.buf.Write(p[:n])
	return n, err
}

func (c *recordingConn) Write(p []byte) (int, error)        { return len(p), nil }
func (c *recordingConn) Close() error                       { return nil }
func (c *recordingConn) LocalAddr() net.Addr                { return &net.TCPAddr{} }
func (c *recordingConn) RemoteAddr() net.Addr               { return &net.TCPAddr{} }
func (c *recordingConn) SetDeadline(t time.Time) error      { return nil }
func (c *recordingConn) SetReadDeadline(t time.Time) error  { return nil }
func (c *recordingConn) SetWriteDeadline(t time.Time) error { return nil }

// targetReason is the refusal reason of a target that did not parse.
func targetReason(err error) Reason {
	if errors.Is(err, policy.ErrUserinfo) {
		return ReasonUserinfo
	}
	return ReasonInvalidHost
}
