package egress

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"slices"
	"strings"

	"github.com/airlock-dev/airlock/pkg/egress/policy"
)

// serveHTTP serves one absolute-URI request (http:// only, no userinfo) whose single Host header
// names its target: decided with its method and path, resolved, dialed at the checked address,
// and sent on an upstream connection of its own, in origin form, with the normalised host in Host
// and without hop-by-hop headers. It reports whether the client's connection may carry another
// request, which is then checked on its own.
func (g *Gateway) serveHTTP(ctx context.Context, c net.Conn, req *http.Request, hosts []string, ex *exchange) bool {
	t, reason := httpTarget(req, hosts)
	if reason != "" {
		ex.host, ex.port = t.Host, t.Port
		g.refuse(c, ex, reason)
		return false
	}
	path := req.URL.EscapedPath()
	if path == "" {
		path = "/"
	}
	upgrade := req.Header.Get("Upgrade") != "" || headerHasToken(req.Header, "Connection", "upgrade")
	if upgrade {
		// Decided first, so that an upgrade to a host that is not allowed says so.
		if _, _, reason := decide(ex.id, t, ex.kind, req.Method, path, func() bool { return false }); reason != "" {
			ex.host, ex.port = t.Host, t.Port
			g.refuse(c, ex, reason)
			return false
		}
		ex.host, ex.port = t.Host, t.Port
		g.refuse(c, ex, ReasonUpgrade)
		return false
	}
	if reason := bodyReason(req, ex.head); reason != "" {
		ex.host, ex.port = t.Host, t.Port
		g.refuse(c, ex, reason)
		return false
	}
	upstream, _ := g.open(ctx, ex, t, req.Method, path)
	if upstream == nil {
		g.refuse(c, ex, ex.reason)
		return false
	}
	defer upstream.Close()
	ex.reason = ReasonAllowed
	// Neither side may stall the exchange for longer than IdleTimeout.
	idle := &idleWatch{timeout: g.cfg.IdleTimeout, conns: []net.Conn{c, upstream}}
	idle.touch()
	return g.exchangeHTTP(&idleConn{Conn: c, watch: idle}, req, t, &idleConn{Conn: upstream, watch: idle}, ex)
}

// httpTarget checks an absolute-URI request's target and Host header and returns the target.
func httpTarget(req *http.Request, hosts []string) (policy.Target, Reason) {
	if !req.URL.IsAbs() {
		return policy.Target{}, ReasonNotProxyReq
	}
	if req.URL.Scheme != "http" {
		return policy.Target{}, ReasonScheme
	}
	// The authority as the client wrote it (an opaque "http:x" or a short "http:/" has none).
	const prefix = "http://"
	if len(req.RequestURI) < len(prefix) || !strings.EqualFold(req.RequestURI[:len(prefix)], prefix) {
		return policy.Target{}, ReasonInvalidHost
	}
	authority := req.RequestURI[len(prefix):]
	if i := strings.IndexAny(authority, "/?#"); i >= 0 {
		authority = authority[:i]
	}
	if req.URL.User != nil || strings.Contains(authority, "@") {
		return policy.Target{}, ReasonUserinfo
	}
	// url.Parse decodes %-escapes in a host: the target is checked as the client wrote it.
	if strings.Contains(authority, "%") {
		return policy.Target{}, ReasonInvalidHost
	}
	t, err := policy.ParseAuthority(req.URL.Host, 80)
	if err != nil {
		return policy.Target{}, targetReason(err)
	}
	if len(hosts) != 1 {
		return t, ReasonHostMismatch
	}
	if ht, err := policy.ParseAuthority(hosts[0], 80); err != nil || ht != t {
		return t, ReasonHostMismatch
	}
	return t, ""
}

// exchangeHTTP sends req upstream and its response (after any 1xx) back to the client, and
// reports whether the client's connection may carry another request.
func (g *Gateway) exchangeHTTP(c net.Conn, req *http.Request, t policy.Target, upstream net.Conn, ex *exchange) bool {
	out := outboundRequest(req, t, 80)
	out.Close = true
	cu := &countingWriter{w: upstream}
	if err := out.Write(cu); err != nil {
		ex.up += cu.n
		ex.reason = ReasonDialFailed
		return false
	}
	ex.up += cu.n
	ubr := bufio.NewReader(upstream)
	cc := &countingWriter{w: c}
	defer func() { ex.down += cc.n }()
	for {
		resp, err := http.ReadResponse(ubr, out)
		if err != nil {
			g.refuse(cc, &exchange{}, ReasonDialFailed)
			ex.reason = ReasonDialFailed
			return false
		}
		if resp.StatusCode == http.StatusSwitchingProtocols {
			// No upgrade was asked for, or it would have been refused.
			_ = resp.Body.Close()
			g.refuse(cc, &exchange{}, ReasonDialFailed)
			ex.reason = ReasonDialFailed
			return false
		}
		for _, h := range connectionHeaders(resp.Header) {
			resp.Header.Del(h)
		}
		if resp.StatusCode < 200 {
			_ = resp.Body.Close()
			if _, err := fmt.Fprintf(cc, "HTTP/1.1 %s\r\n", resp.Status); err != nil {
				return false
			}
			if err := resp.Header.Write(cc); err != nil {
				return false
			}
			if _, err := io.WriteString(cc, "\r\n"); err != nil {
				return false
			}
			continue
		}
		// The client's connection is kept when the client wants it and the response has a
		// length of its own (the upstream's connection is closed either way).
		resp.Close = req.Close || !req.ProtoAtLeast(1, 1) ||
			(resp.ContentLength < 0 && !slices.Contains(resp.TransferEncoding, "chunked"))
		err = resp.Write(cc)
		_ = resp.Body.Close()
		return err == nil && !resp.Close
	}
}

// outboundRequest is req as the gateway sends it upstream: its body, the normalised target in
// Host (the port only when it is not defaultPort), without hop-by-hop headers and the proxy's
// credential, and without a User-Agent the client did not send.
func outboundRequest(req *http.Request, t policy.Target, defaultPort uint16) *http.Request {
	out := req.Clone(context.Background())
	out.Body = req.Body
	for _, h := range connectionHeaders(req.Header) {
		out.Header.Del(h)
	}
	if _, ok := out.Header["User-Agent"]; !ok {
		out.Header["User-Agent"] = []string{""} // Request.Write adds none then
	}
	out.Host = t.Host
	if t.Port != defaultPort {
		out.Host = t.HostPort()
	}
	return out
}

// bodyReason refuses a request's body unless its method has one (POST, PUT, PATCH) and it has
// one unambiguous length: never both Content-Length and Transfer-Encoding, nor two
// Content-Length fields (RFC 9112 section 6.3), as the client sent them (head). An upstream that
// reads a GET's body as the next request, or the other length, would take the rest of the body
// for a request the gateway never checked.
func bodyReason(req *http.Request, head textproto.MIMEHeader) Reason {
	lengths, codings := len(head["Content-Length"]), len(head["Transfer-Encoding"])
	if lengths > 1 || lengths > 0 && codings > 0 {
		return ReasonAmbiguousLength
	}
	if (codings > 0 || req.ContentLength != 0) && !methodHasBody(req.Method) {
		return ReasonUnexpectedBody
	}
	return ""
}

// methodHasBody reports whether a request of method may carry a body through the gateway.
func methodHasBody(method string) bool {
	return method == http.MethodPost || method == http.MethodPut || method == http.MethodPatch
}

// connectionHeaders are the hop-by-hop headers and those that h's Connection header names.
func connectionHeaders(h http.Header) []string {
	names := append([]string(nil), policy.HopByHop...)
	for _, v := range h.Values("Connection") {
		for _, f := range strings.Split(v, ",") {
			if f = strings.TrimSpace(f); f != "" {
				names = append(names, f)
			}
		}
	}
	return names
}

func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for _, f := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(f), token) {
				return true
			}
		}
	}
	return false
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
