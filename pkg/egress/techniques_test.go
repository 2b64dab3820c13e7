package egress

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// technique is one way of reaching what the policy does not allow (or one allowed case), as a
// sandbox would try it through the gateway: the raw bytes it sends, and what it does in the
// tunnel once the gateway says 200.
type technique struct {
	name   string
	source string // the client's address; "" is 127.0.0.1, claim A's pod
	raw    string // the request bytes
	// In an established tunnel: a TLS handshake with tlsSNI (noSNI for none) and a GET, or the
	// bytes tunnel, written raw.
	tlsSNI string
	tunnel string

	wantStatus int
	wantReason Reason
	// wantTunnel is the body (TLS) or echo (raw) expected through the tunnel; "" when the gateway
	// must close the tunnel instead.
	wantTunnel  string
	wantBody    string // a substring of a plain response's body
	wantLookups []string
	wantDialed  []string
	// wantSecond is the reason of a second, pipelined request's refusal.
	wantSecond Reason
	// wantUpstream is what the plain upstream server must have received, exactly.
	wantUpstream []string
	// proven says what the case proves, for docs/egress.md.
	proven string
}

const noSNI = "-"

func connectReq(authority string, extra ...string) string {
	return "CONNECT " + authority + " HTTP/1.1\r\nHost: " + authority + "\r\nProxy-Authorization: " + credA + "\r\n" + strings.Join(extra, "") + "\r\n"
}

func getReq(uri, host string, extra ...string) string {
	return "GET " + uri + " HTTP/1.1\r\nHost: " + host + "\r\nProxy-Authorization: " + credA + "\r\n" + strings.Join(extra, "") + "\r\n"
}

func techniques() []technique {
	dialedTLS := []string{publicV4 + ":443"}
	return []technique{
		// Allowed cases.
		{name: "allowed: CONNECT and TLS to an allowed name", raw: connectReq("allowed.example:443"), tlsSNI: "allowed.example",
			wantStatus: 200, wantReason: ReasonAllowed, wantTunnel: "hello GET allowed.example /tls",
			wantLookups: []string{"allowed.example"}, wantDialed: dialedTLS},
		{name: "allowed: plain HTTP GET of an allowed name", raw: getReq("http://allowed.example/x?q=1", "allowed.example"),
			wantStatus: 200, wantReason: ReasonAllowed, wantBody: "hello GET allowed.example /x",
			wantLookups: []string{"allowed.example"}, wantDialed: []string{publicV4 + ":80"}, wantUpstream: []string{"GET allowed.example /x?q=1"}},
		{name: "allowed: trailing dot and upper case name the same host", raw: connectReq("ALLOWED.Example.:443"), tlsSNI: "allowed.example",
			wantStatus: 200, wantReason: ReasonAllowed, wantTunnel: "hello GET allowed.example /tls",
			wantLookups: []string{"allowed.example"}, wantDialed: dialedTLS},
		{name: "allowed: full-width letters map (IDNA) to the same host", raw: connectReq("ａｌｌｏｗｅｄ.example:443"), tlsSNI: "allowed.example",
			wantStatus: 200, wantReason: ReasonAllowed, wantTunnel: "hello GET allowed.example /tls",
			wantLookups: []string{"allowed.example"}, wantDialed: dialedTLS},
		{name: "allowed: a wildcard covers names below its suffix", raw: connectReq("a.b.wild.example:443"), tlsSNI: "a.b.wild.example",
			wantStatus: 200, wantReason: ReasonAllowed, wantTunnel: "hello GET a.b.wild.example /tls",
			wantLookups: []string{"a.b.wild.example"}, wantDialed: dialedTLS},
		{name: "allowed: an IPv6 answer", raw: connectReq("v6.example:443"), tlsSNI: "v6.example",
			wantStatus: 200, wantReason: ReasonAllowed, wantTunnel: "hello GET v6.example /tls", wantLookups: []string{"v6.example"}, wantDialed: []string{"[" + publicV6 + "]:443"}},
		{name: "allowed: a non-TLS tunnel where the rule allows it", raw: connectReq("ssh.example:22"), tunnel: "SSH-2.0-test\r\n",
			wantStatus: 200, wantReason: ReasonAllowed, wantTunnel: "SSH-2.0-test\r\n",
			wantLookups: []string{"ssh.example"}, wantDialed: []string{publicV4 + ":22"}},
		{name: "allowed: a private answer where the rule allows private addresses", raw: connectReq("private-ok.example:443"), tlsSNI: "private-ok.example",
			wantStatus: 200, wantReason: ReasonAllowed, wantTunnel: "hello GET private-ok.example /tls",
			wantLookups: []string{"private-ok.example"}, wantDialed: []string{"10.1.2.3:443"}},
		{name: "allowed: a method and path the rule lists", raw: getReq("http://api.example/v1/items", "api.example"),
			wantStatus: 200, wantReason: ReasonAllowed, wantBody: "hello GET api.example /v1/items",
			wantLookups: []string{"api.example"}, wantDialed: []string{publicV4 + ":80"}, wantUpstream: []string{"GET api.example /v1/items"}},

		// Who is asking.
		{name: "no credential", raw: "CONNECT allowed.example:443 HTTP/1.1\r\nHost: allowed.example:443\r\n\r\n",
			wantStatus: 407, wantReason: ReasonNoCredential},
		{name: "a credential that is not Basic", raw: "CONNECT allowed.example:443 HTTP/1.1\r\nProxy-Authorization: Bearer " + passwordA + "\r\n\r\n",
			wantStatus: 407, wantReason: ReasonNoCredential},
		{name: "a wrong password", raw: "CONNECT allowed.example:443 HTTP/1.1\r\nProxy-Authorization: " + basic("team-a.agent-a", passwordB) + "\r\n\r\n",
			wantStatus: 407, wantReason: ReasonBadCredential},
		{name: "another claim's credential from this claim's pod", raw: "CONNECT allowed.example:443 HTTP/1.1\r\nProxy-Authorization: " + basic("team-b.agent-b", passwordB) + "\r\n\r\n",
			wantStatus: 407, wantReason: ReasonWrongSource},
		{name: "a claim's credential from another pod", source: "127.0.0.2", raw: connectReq("allowed.example:443"),
			wantStatus: 407, wantReason: ReasonWrongSource},
		{name: "allowed: claim B's credential from claim B's pod", source: "127.0.0.2",
			raw:    "CONNECT allowed.example:443 HTTP/1.1\r\nProxy-Authorization: " + basic("team-b.agent-b", passwordB) + "\r\n\r\n",
			tlsSNI: "allowed.example", wantStatus: 200, wantReason: ReasonAllowed, wantTunnel: "hello GET allowed.example /tls",
			wantLookups: []string{"allowed.example"}, wantDialed: dialedTLS},

		// What is asked for: IP literals and spellings of addresses.
		{name: "CONNECT to an IPv4 literal", raw: connectReq(publicV4 + ":443"), wantStatus: 403, wantReason: ReasonIPLiteral},
		{name: "CONNECT to an IPv6 literal", raw: connectReq("[" + publicV6 + "]:443"), wantStatus: 403, wantReason: ReasonIPLiteral},
		{name: "CONNECT to an IPv4-mapped IPv6 literal", raw: connectReq("[::ffff:1.2.3.4]:443"), wantStatus: 403, wantReason: ReasonIPLiteral},
		{name: "CONNECT to a decimal IPv4 (16909060)", raw: connectReq("16909060:443"), wantStatus: 400, wantReason: ReasonInvalidHost},
		{name: "CONNECT to a hexadecimal IPv4 (0x7f000001)", raw: connectReq("0x7f000001:443"), wantStatus: 400, wantReason: ReasonInvalidHost},
		{name: "CONNECT to a short IPv4 (127.1)", raw: connectReq("127.1:443"), wantStatus: 400, wantReason: ReasonInvalidHost},
		{name: "CONNECT to an IPv6 literal with a zone", raw: connectReq("[fe80::1%25eth0]:443"), wantStatus: 400, wantReason: ReasonInvalidHost},
		{name: "plain HTTP to an IPv4 literal", raw: getReq("http://1.2.3.4/", "1.2.3.4"), wantStatus: 403, wantReason: ReasonIPLiteral},
		{name: "the gateway's own metrics port, by address", raw: connectReq("127.0.0.1:8080"), wantStatus: 403, wantReason: ReasonIPLiteral},
		{name: "the gateway's own metrics port, by localhost", raw: connectReq("localhost:8080"),
			wantStatus: 403, wantReason: ReasonLocalAddress, wantLookups: []string{"localhost"}},

		// Names that are not allowed are never resolved.
		{name: "a name no rule lists", raw: connectReq("evil.example:443"), wantStatus: 403, wantReason: ReasonNotAllowed},
		{name: "allowed.evil: an allowed name as a prefix", raw: connectReq("allowed.example.evil.example:443"), wantStatus: 403, wantReason: ReasonNotAllowed},
		{name: "an allowed name as a suffix without a dot", raw: connectReq("notallowed.example:443"), wantStatus: 403, wantReason: ReasonNotAllowed},
		{name: "DNS-tunnel subdomain of an exact name", raw: connectReq("c2VjcmV0LWRhdGE.allowed.example:443"), wantStatus: 403, wantReason: ReasonNotAllowed},
		{name: "the apex of a wildcard", raw: connectReq("wild.example:443"), wantStatus: 403, wantReason: ReasonNotAllowed},
		{name: "IDN homograph (Cyrillic а in allowed)", raw: connectReq("\u0430llowed.example:443"), wantStatus: 403, wantReason: ReasonNotAllowed},
		{name: "IDN homograph in punycode", raw: connectReq("xn--llowed-2nf.example:443"), wantStatus: 403, wantReason: ReasonNotAllowed},
		{name: "invalid punycode", raw: connectReq("xn--a.example:443"), wantStatus: 400, wantReason: ReasonInvalidHost},
		{name: "two trailing dots", raw: connectReq("allowed.example..:443"), wantStatus: 400, wantReason: ReasonInvalidHost},
		{name: "userinfo in CONNECT (allowed@evil)", raw: connectReq("allowed.example@evil.example:443"), wantStatus: 400, wantReason: ReasonUserinfo},
		{name: "userinfo in CONNECT (evil@allowed)", raw: connectReq("evil.example@allowed.example:443"), wantStatus: 400, wantReason: ReasonUserinfo},
		{name: "userinfo in an absolute URI (allowed@evil)", raw: getReq("http://allowed.example@evil.example/", "evil.example"), wantStatus: 400, wantReason: ReasonUserinfo},
		{name: "userinfo with a backslash (evil\\@allowed)", raw: getReq(`http://evil.example\@allowed.example/`, "allowed.example"), wantStatus: 400, wantReason: ReasonBadRequest},
		{name: "a %-escaped host in an absolute URI", raw: getReq("http://b%C3%BCcher.example/", "xn--bcher-kva.example"), wantStatus: 400, wantReason: ReasonInvalidHost},
		{name: "an opaque absolute URI (http:x)", raw: getReq("http:allowed.example", "allowed.example"), wantStatus: 400, wantReason: ReasonInvalidHost},
		{name: "a short absolute URI (http:/)", raw: getReq("http:/", "allowed.example"), wantStatus: 400, wantReason: ReasonInvalidHost},
		{name: "an upper-case scheme (HTTP://)", raw: getReq("HTTP://allowed.example/up", "allowed.example"),
			wantStatus: 200, wantReason: ReasonAllowed, wantBody: "hello GET allowed.example /up",
			wantLookups: []string{"allowed.example"}, wantDialed: []string{publicV4 + ":80"}, wantUpstream: []string{"GET allowed.example /up"}},
		{name: "a disallowed port of an allowed name", raw: connectReq("allowed.example:8443"), wantStatus: 403, wantReason: ReasonPortNotAllowed},
		{name: "port 0", raw: connectReq("allowed.example:0"), wantStatus: 400, wantReason: ReasonInvalidHost},
		{name: "a port with a sign (+443)", raw: connectReq("allowed.example:+443"), wantStatus: 400, wantReason: ReasonBadRequest},
		{name: "plain HTTP on a disallowed port", raw: getReq("http://allowed.example:8080/", "allowed.example:8080"), wantStatus: 403, wantReason: ReasonPortNotAllowed},

		// Where it is: answers outside the internet.
		{name: "an allowed name resolving to 127.0.0.1", raw: connectReq("loop.example:443"), wantStatus: 403, wantReason: ReasonLocalAddress, wantLookups: []string{"loop.example"}},
		{name: "an allowed name resolving to 10.x", raw: connectReq("ten.example:443"), wantStatus: 403, wantReason: ReasonPrivateAddress, wantLookups: []string{"ten.example"}},
		{name: "an allowed name resolving to 169.254.169.254 (metadata)", raw: connectReq("meta.example:443"), wantStatus: 403, wantReason: ReasonLocalAddress, wantLookups: []string{"meta.example"}},
		{name: "plain HTTP to the metadata address through an allowed name", raw: getReq("http://meta.example/latest/meta-data/", "meta.example"),
			wantStatus: 403, wantReason: ReasonLocalAddress, wantLookups: []string{"meta.example"}},
		{name: "an allowed name resolving to a cluster Service IP", raw: connectReq("svc.example:443"), wantStatus: 403, wantReason: ReasonClusterAddress, wantLookups: []string{"svc.example"}},
		{name: "an allowed name resolving into a public-looking cluster range", raw: connectReq("gkesvc.example:443"), wantStatus: 403, wantReason: ReasonClusterAddress, wantLookups: []string{"gkesvc.example"}},
		{name: "an answer that mixes public and loopback", raw: connectReq("mixed.example:443"), wantStatus: 403, wantReason: ReasonLocalAddress, wantLookups: []string{"mixed.example"}},
		{name: "an IPv4-mapped loopback answer", raw: connectReq("mapped.example:443"), wantStatus: 403, wantReason: ReasonLocalAddress, wantLookups: []string{"mapped.example"}},
		{name: "a NAT64 answer embedding the metadata address", raw: connectReq("nat64.example:443"), wantStatus: 403, wantReason: ReasonLocalAddress, wantLookups: []string{"nat64.example"}},
		{name: "a CGNAT answer", raw: connectReq("cgnat.example:443"), wantStatus: 403, wantReason: ReasonPrivateAddress, wantLookups: []string{"cgnat.example"}},
		{name: "a ULA answer", raw: connectReq("ula.example:443"), wantStatus: 403, wantReason: ReasonPrivateAddress, wantLookups: []string{"ula.example"}},
		{name: "loopback even where the rule allows private addresses", raw: connectReq("private-lo.example:443"), wantStatus: 403, wantReason: ReasonLocalAddress, wantLookups: []string{"private-lo.example"}},
		{name: "an allowed name that does not resolve", raw: connectReq("unresolvable.example:443"), wantStatus: 502, wantReason: ReasonResolveFailed, wantLookups: []string{"unresolvable.example"}},

		// What is sent in the tunnel.
		{name: "SNI other than the CONNECT host", raw: connectReq("allowed.example:443"), tlsSNI: "evil.example",
			wantStatus: 200, wantReason: ReasonSNIMismatch, wantLookups: []string{"allowed.example"}, wantDialed: dialedTLS},
		{name: "no SNI in the ClientHello", raw: connectReq("allowed.example:443"), tlsSNI: noSNI,
			wantStatus: 200, wantReason: ReasonSNIMismatch, wantLookups: []string{"allowed.example"}, wantDialed: dialedTLS},
		{name: "SNI of a wildcard sibling", raw: connectReq("a.b.wild.example:443"), tlsSNI: "c.wild.example",
			wantStatus: 200, wantReason: ReasonSNIMismatch, wantLookups: []string{"a.b.wild.example"}, wantDialed: dialedTLS},
		{name: "plain text in a CONNECT tunnel", raw: connectReq("allowed.example:443"), tunnel: "GET http://evil.example/ HTTP/1.1\r\nHost: evil.example\r\n\r\n",
			wantStatus: 200, wantReason: ReasonNotTLS, wantLookups: []string{"allowed.example"}, wantDialed: dialedTLS},
		{name: "a request pipelined behind CONNECT, before the 200", raw: connectReq("allowed.example:443") + "GET http://evil.example/ HTTP/1.1\r\nHost: evil.example\r\n\r\n",
			wantStatus: 200, wantReason: ReasonNotTLS, wantLookups: []string{"allowed.example"}, wantDialed: dialedTLS},
		{name: "a CONNECT Host header naming another host", raw: "CONNECT allowed.example:443 HTTP/1.1\r\nHost: evil.example:443\r\nProxy-Authorization: " + credA + "\r\n\r\n",
			wantStatus: 400, wantReason: ReasonHostMismatch},
		{name: "Host other than the target (plain HTTP)", raw: getReq("http://allowed.example/", "evil.example"), wantStatus: 400, wantReason: ReasonHostMismatch},
		{name: "Host other than the target's port", raw: getReq("http://allowed.example/", "allowed.example:8080"), wantStatus: 400, wantReason: ReasonHostMismatch},
		{name: "absolute-URI smuggling: an evil target behind an allowed Host", raw: getReq("http://evil.example/", "allowed.example"), wantStatus: 400, wantReason: ReasonHostMismatch},
		{name: "an origin-form request (the gateway as a web server)", raw: getReq("/metrics", "allowed.example"), wantStatus: 400, wantReason: ReasonNotProxyReq},
		{name: "an https:// absolute URI", raw: getReq("https://allowed.example/", "allowed.example"), wantStatus: 403, wantReason: ReasonScheme},
		{name: "request pipelining after an allowed request", raw: getReq("http://allowed.example/one", "allowed.example") + getReq("http://evil.example/two", "evil.example"),
			wantStatus: 200, wantReason: ReasonAllowed, wantBody: "hello GET allowed.example /one", wantSecond: ReasonNotAllowed,
			wantLookups: []string{"allowed.example"}, wantDialed: []string{publicV4 + ":80"}, wantUpstream: []string{"GET allowed.example /one"}},
		// Content-Length and chunked: two lengths, which upstreams read differently (RFC 9112
		// section 6.1): refused, as a body without one unambiguous length.
		{name: "request smuggling in the body (Content-Length and chunked)", raw: "POST http://allowed.example/a HTTP/1.1\r\nHost: allowed.example\r\nProxy-Authorization: " + credA +
			"\r\nContent-Length: 52\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + getReq("http://evil.example/", "evil.example"),
			wantStatus: 400, wantReason: ReasonAmbiguousLength},
		{name: "request smuggling in a chunked body", raw: "POST http://allowed.example/a HTTP/1.1\r\nHost: allowed.example\r\nProxy-Authorization: " + credA +
			"\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + getReq("http://evil.example/", "evil.example"),
			wantStatus: 200, wantReason: ReasonAllowed, wantBody: "hello POST allowed.example /a", wantSecond: ReasonNotAllowed,
			wantLookups: []string{"allowed.example"}, wantDialed: []string{publicV4 + ":80"}, wantUpstream: []string{"POST allowed.example /a"}},
		{name: "a GET with a body (plain HTTP: a request smuggled to an upstream that ignores it)",
			raw:        getReq("http://api.example/v1/items", "api.example", "Content-Length: 40\r\n") + "DELETE /admin HTTP/1.1\r\nHost: api.example\r\n\r\n",
			wantStatus: 400, wantReason: ReasonUnexpectedBody},
		{name: "a WebSocket upgrade to a disallowed host (plain)", raw: getReq("http://evil.example/ws", "evil.example", "Connection: Upgrade\r\nUpgrade: websocket\r\n"),
			wantStatus: 403, wantReason: ReasonNotAllowed},
		{name: "a WebSocket upgrade to a disallowed host (CONNECT)", raw: connectReq("evil.example:443"), wantStatus: 403, wantReason: ReasonNotAllowed},
		{name: "a plain WebSocket upgrade to an allowed host", raw: getReq("http://allowed.example/ws", "allowed.example", "Connection: Upgrade\r\nUpgrade: websocket\r\n"),
			wantStatus: 403, wantReason: ReasonUpgrade},
		{name: "an h2c upgrade", raw: getReq("http://allowed.example/", "allowed.example", "Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n"),
			wantStatus: 403, wantReason: ReasonUpgrade},
		{name: "a method the rule does not list", raw: strings.Replace(getReq("http://api.example/v1/items", "api.example"), "GET", "DELETE", 1),
			wantStatus: 403, wantReason: ReasonMethodOrPath},
		{name: "a path outside the rule's prefix", raw: getReq("http://api.example/admin", "api.example"), wantStatus: 403, wantReason: ReasonMethodOrPath},
		{name: "a prefix continued without a slash (/v1beta)", raw: getReq("http://api.example/v1beta", "api.example"), wantStatus: 403, wantReason: ReasonMethodOrPath},
		{name: "a dot segment out of the prefix (/v1/../admin)", raw: getReq("http://api.example/v1/../admin", "api.example"), wantStatus: 403, wantReason: ReasonMethodOrPath},
		{name: "an escaped slash (/v1%2F..%2Fadmin)", raw: getReq("http://api.example/v1%2F..%2Fadmin", "api.example"), wantStatus: 403, wantReason: ReasonMethodOrPath},
		{name: "CONNECT to a host whose rule restricts methods and paths", raw: connectReq("api.example:443"), wantStatus: 403, wantReason: ReasonInspection},
		{name: "a request head over the limit", raw: getReq("http://allowed.example/", "allowed.example", "X-Pad: "+strings.Repeat("a", 70<<10)+"\r\n"),
			wantStatus: 431, wantReason: ReasonHeaderTooLarge},
		{name: "garbage instead of a request", raw: "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", wantStatus: 400, wantReason: ReasonBadRequest},
	}
}

// TestTechniques runs every technique against a gateway of its own and checks the answer, the
// audit record, that the resolver was asked only for the names the case allows (a refused name
// is never resolved), and that the gateway dialed only the addresses it checked.
func TestTechniques(t *testing.T) {
	for _, tc := range techniques() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in := newInternet(t)
			f := newFixture(t, in)
			runTechnique(t, f, tc)
		})
	}
}

func runTechnique(t *testing.T, f *fixture, tc technique) {
	res, br, c := f.send(tc.source, tc.raw)
	if res.status != tc.wantStatus {
		t.Fatalf("status %d (reason %q, %v), want %d", res.status, res.reason, res.err, tc.wantStatus)
	}
	if tc.wantStatus != http.StatusOK && res.reason != tc.wantReason {
		t.Errorf("X-Airlock-Egress-Reason %q, want %q", res.reason, tc.wantReason)
	}
	if tc.wantBody != "" && !strings.Contains(res.body, tc.wantBody) {
		t.Errorf("body %q, want it to contain %q", res.body, tc.wantBody)
	}
	hellos := f.in.hellos.Load()
	switch {
	case tc.tlsSNI != "":
		sni := tc.tlsSNI
		if sni == noSNI {
			sni = ""
		}
		host := sni
		if host == "" {
			host = "allowed.example"
		}
		body, err := f.tlsGet(c, br, sni, host)
		checkTunnel(t, tc, body, err)
		if tc.wantTunnel == "" && f.in.hellos.Load() != hellos {
			t.Errorf("the upstream received a ClientHello of a refused tunnel")
		}
	case tc.tunnel != "":
		_, _ = io.WriteString(c, tc.tunnel)
		got := make([]byte, len(tc.wantTunnel))
		_, err := io.ReadFull(br, got)
		if tc.wantTunnel == "" {
			_, err = br.ReadByte()
		}
		checkTunnel(t, tc, string(got), err)
	}
	var second result
	if tc.wantSecond != "" {
		second = readResult(br, "GET")
	}
	// A tunnel's record comes when it ends.
	_ = c.Close()
	rec := f.record()
	if rec.Reason != tc.wantReason {
		t.Errorf("audit reason %q, want %q", rec.Reason, tc.wantReason)
	}
	if rec.Allowed != (tc.wantReason == ReasonAllowed) {
		t.Errorf("audit allowed %v for reason %q", rec.Allowed, rec.Reason)
	}
	if tc.wantSecond != "" {
		if second.status == http.StatusOK || second.reason != tc.wantSecond {
			t.Errorf("pipelined request: status %d reason %q, want a refusal %q", second.status, second.reason, tc.wantSecond)
		}
		if rec := f.record(); rec.Reason != tc.wantSecond {
			t.Errorf("pipelined request's audit reason %q, want %q", rec.Reason, tc.wantSecond)
		}
	}
	if got := f.resolver.names(); !slices.Equal(got, tc.wantLookups) {
		t.Errorf("the resolver was asked %q, want %q", got, tc.wantLookups)
	}
	if got := f.dialer.addresses(); !slices.Equal(got, tc.wantDialed) {
		t.Errorf("the gateway dialed %q, want %q", got, tc.wantDialed)
	}
	if got := f.in.plainSeen(); !slices.Equal(got, tc.wantUpstream) {
		t.Errorf("the plain upstream received %q, want %q", got, tc.wantUpstream)
	}
}

func checkTunnel(t *testing.T, tc technique, got string, err error) {
	t.Helper()
	if tc.wantTunnel == "" {
		if err == nil {
			t.Errorf("the tunnel carried %q, want it closed", got)
		}
		return
	}
	if err != nil || !strings.Contains(got, tc.wantTunnel) {
		t.Errorf("through the tunnel: %q, %v; want %q", got, err, tc.wantTunnel)
	}
}

// TestNotSynced: until the claim source has synced, even a right credential gets nothing, and
// nothing is resolved.
func TestNotSynced(t *testing.T) {
	in := newInternet(t)
	f := newFixture(t, in, unsynced())
	res, _, _ := f.send("", connectReq("allowed.example:443"))
	if res.status != http.StatusServiceUnavailable || res.reason != ReasonNotSynced {
		t.Fatalf("status %d reason %q, want 503 %q", res.status, res.reason, ReasonNotSynced)
	}
	if rec := f.record(); rec.Reason != ReasonNotSynced {
		t.Errorf("audit reason %q", rec.Reason)
	}
	if got := f.resolver.names(); len(got) != 0 {
		t.Errorf("resolved %q while not synced", got)
	}
	f.claims.SetSynced()
	res, br, c := f.send("", connectReq("allowed.example:443"))
	if res.status != http.StatusOK {
		t.Fatalf("after sync: status %d reason %q", res.status, res.reason)
	}
	if body, err := f.tlsGet(c, br, "allowed.example", "allowed.example"); err != nil || !strings.Contains(body, "hello") {
		t.Errorf("after sync: %q, %v", body, err)
	}
}

// TestKeepAliveEachRequestChecked: a kept connection serves allowed requests one after another,
// each decided on its own, and the first refusal ends it.
func TestKeepAliveEachRequestChecked(t *testing.T) {
	in := newInternet(t)
	f := newFixture(t, in)
	c := f.dial("")
	br := newReader(c)
	for i := range 3 {
		fmt.Fprint(c, getReq(fmt.Sprintf("http://allowed.example/%d", i), "allowed.example"))
		if res := readResult(br, "GET"); res.status != http.StatusOK || !strings.Contains(res.body, fmt.Sprintf("/%d", i)) {
			t.Fatalf("request %d: %d %q %q", i, res.status, res.reason, res.body)
		}
		if rec := f.record(); rec.Reason != ReasonAllowed {
			t.Fatalf("request %d: audit %q", i, rec.Reason)
		}
	}
	fmt.Fprint(c, getReq("http://allowed.example:8443/", "allowed.example:8443"))
	if res := readResult(br, "GET"); res.reason != ReasonPortNotAllowed {
		t.Fatalf("refusal: %d %q", res.status, res.reason)
	}
	fmt.Fprint(c, getReq("http://allowed.example/after", "allowed.example"))
	if _, err := br.ReadByte(); err == nil {
		t.Errorf("the connection carried a request after a refusal")
	}
}

// TestDocsListEveryTechnique keeps docs/egress.md's table true: every technique of the table is
// a row there (in the section "Bypass techniques"; the real-node suite's table has its own
// columns), with its reason.
func TestDocsListEveryTechnique(t *testing.T) {
	doc, err := os.ReadFile("../../docs/egress.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{}
	section := ""
	for _, line := range strings.Split(string(doc), "\n") {
		if strings.HasPrefix(line, "## ") {
			section = strings.TrimPrefix(line, "## ")
		}
		if section != "Bypass techniques" {
			continue
		}
		cells := strings.Split(line, " | ")
		if len(cells) == 4 && strings.HasPrefix(cells[0], "| ") {
			rows[strings.ReplaceAll(strings.TrimPrefix(cells[0], "| "), `\|`, "|")] = cells[2]
		}
	}
	for _, tc := range terminatedTechniques() {
		reason, ok := rows[tc.name]
		if !ok {
			t.Errorf("docs/egress.md has no row for %q", tc.name)
			continue
		}
		if !strings.HasPrefix(reason, "`"+string(tc.wantReason)+"`") {
			t.Errorf("docs/egress.md says %s for %q, the test %q", reason, tc.name, tc.wantReason)
		}
	}
	for _, tc := range techniques() {
		reason, ok := rows[tc.name]
		if !ok {
			t.Errorf("docs/egress.md has no row for %q", tc.name)
			continue
		}
		if !strings.HasPrefix(reason, "`"+string(tc.wantReason)+"`") {
			t.Errorf("docs/egress.md says %s for %q, the test %q", reason, tc.name, tc.wantReason)
		}
	}
}

// terminatedTechnique is a way of getting a credential out of a terminated tunnel, or of
// reaching past its rules, as a sandbox would try it: it opens the tunnel, writes requests (all
// at once, pipelined), closes its side, and reads every answer the gateway sends back.
type terminatedTechnique struct {
	name      string
	authority string // the CONNECT host (and SNI, without the port)
	requests  string
	// wantAnswers are the final answers the sandbox gets, in order ("status body-substring"), and
	// wantInterim the number of 1xx answers before them; the tunnel ends after the last one.
	wantAnswers []string
	wantInterim int
	// wantReason is the tunnel's audit reason.
	wantReason Reason
	// wantUpstream is what the raw upstream parsed, exactly.
	wantUpstream []string
	// wantEchoes is the least number of credential echoes the gateway must have replaced.
	wantEchoes int
}

// secretAuth is what the raw upstream records for a request with the injected credential.
const secretAuth = "auth=" + testSecret

func terminatedTechniques() []terminatedTechnique {
	get := func(path, host string, extra ...string) string { return innerReq("GET", path, host, extra...) }
	// The smuggled request's body is exactly the next request as the gateway forwards it, so an
	// upstream that reads the smuggled request echoes that one, credential included.
	next := "GET /v1/b HTTP/1.1\r\nHost: rawpost.example\r\nAuthorization: " + testSecret + "\r\n\r\n"
	smuggled := fmt.Sprintf("POST /v1/echo HTTP/1.1\r\nHost: rawpost.example\r\nContent-Length: %d\r\n\r\n", len(next))
	return []terminatedTechnique{
		{name: "a credential rule without methods: GET and HEAD allowed, with the credential",
			authority: "raw.example:443", requests: get("/x", "raw.example") + innerReq("HEAD", "/x", "raw.example"),
			wantAnswers: []string{"200 answer GET /x", "200 "}, wantReason: ReasonAllowed,
			wantUpstream: []string{"GET /x " + secretAuth, "HEAD /x " + secretAuth}},
		{name: "TRACE to a credentialed host (an echo of the credential)",
			authority: "raw.example:443", requests: innerReq("TRACE", "/x", "raw.example"),
			wantAnswers: []string{"403 method_or_path"}, wantReason: ReasonMethodOrPath},
		{name: "POST to a credential rule without methods",
			authority: "raw.example:443", requests: innerReq("POST", "/x", "raw.example", "Content-Length: 2\r\n") + "{}",
			wantAnswers: []string{"403 method_or_path"}, wantReason: ReasonMethodOrPath},
		{name: "CONNECT inside a terminated tunnel",
			authority: "raw.example:443", requests: "CONNECT raw.example:443 HTTP/1.1\r\nHost: raw.example:443\r\n\r\n",
			wantAnswers: []string{"400 host_mismatch"}, wantReason: ReasonHostMismatch},
		{name: "a request smuggled in a GET's body captures the next request's credential",
			authority:   "rawpost.example:443",
			requests:    get("/v1/a", "rawpost.example", fmt.Sprintf("Content-Length: %d\r\n", len(smuggled))) + smuggled + get("/v1/b", "rawpost.example"),
			wantAnswers: []string{"400 unexpected_body"}, wantReason: ReasonUnexpectedBody},
		{name: "a GET with a chunked body in a terminated tunnel",
			authority: "rawpost.example:443", requests: get("/v1/a", "rawpost.example", "Transfer-Encoding: chunked\r\n") + "0\r\n\r\n",
			wantAnswers: []string{"400 unexpected_body"}, wantReason: ReasonUnexpectedBody},
		{name: "Content-Length and chunked in a terminated tunnel",
			authority: "rawpost.example:443", requests: innerReq("POST", "/v1/a", "rawpost.example", "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n") + "0\r\n\r\n",
			wantAnswers: []string{"400 ambiguous_length"}, wantReason: ReasonAmbiguousLength},
		{name: "a POST body the upstream does not read, as the next request on a reused upstream connection",
			authority: "rawpost.example:443",
			requests:  innerReq("POST", "/v1/early", "rawpost.example", fmt.Sprintf("Content-Length: %d\r\n", len(smuggled))) + smuggled + get("/v1/b", "rawpost.example"),
			// The upstream reads the body as a request (without the credential); the tunnel ends
			// with the POST's answer, so nothing else goes on that connection.
			wantAnswers: []string{"200 answer POST /v1/early"}, wantReason: ReasonAllowed,
			wantUpstream: []string{"POST /v1/early " + secretAuth, "POST /v1/echo auth="}},
		{name: "a 100 Continue before the answer (the next request must not get this one's answer)",
			authority: "rawpost.example:443", requests: get("/v1/continue/a", "rawpost.example") + get("/v1/continue/b", "rawpost.example"),
			wantAnswers: []string{"200 answer GET /v1/continue/a", "200 answer GET /v1/continue/b"}, wantInterim: 2, wantReason: ReasonAllowed,
			wantUpstream: []string{"GET /v1/continue/a " + secretAuth, "GET /v1/continue/b " + secretAuth}},
		{name: "an upstream that echoes the credential in a header and the body",
			authority: "raw.example:443", requests: get("/echo", "raw.example"),
			wantAnswers: []string{"200 GET /echo HTTP/1.1"}, wantReason: ReasonAllowed, wantEchoes: 2,
			wantUpstream: []string{"GET /echo " + secretAuth}},
	}
}

// TestTerminatedTechniques runs every terminated technique against a gateway of its own: the
// answers, the audit record, what the upstream parsed, and that no byte sequence of the
// credential (nor its token, after "Bearer ") reaches the sandbox.
func TestTerminatedTechniques(t *testing.T) {
	for _, tc := range terminatedTechniques() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f, gatewayCA := terminatedFixture(t)
			sni, _, _ := strings.Cut(tc.authority, ":")
			echoes := credentialEchoCount(t)
			conn, _, err := terminatedTunnel(t, f, gatewayCA, tc.authority, sni)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.WriteString(conn, tc.requests); err != nil {
				t.Fatal(err)
			}
			if err := conn.CloseWrite(); err != nil {
				t.Fatal(err)
			}
			var all strings.Builder
			br := bufio.NewReader(io.TeeReader(conn, &all))
			var answers []string
			interim := 0
			for {
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					break
				}
				body, _ := io.ReadAll(resp.Body)
				if resp.StatusCode < 200 {
					interim++
					continue
				}
				answer := fmt.Sprint(resp.StatusCode, " ", string(body))
				if r := resp.Header.Get("X-Airlock-Egress-Reason"); r != "" {
					answer = fmt.Sprint(resp.StatusCode, " ", r)
				}
				answers = append(answers, answer)
			}
			conn.Close()
			if len(answers) != len(tc.wantAnswers) {
				t.Errorf("answers %q, want %q", answers, tc.wantAnswers)
			} else {
				for i := range answers {
					if !strings.HasPrefix(answers[i], tc.wantAnswers[i]) {
						t.Errorf("answer %d: %q, want %q", i, answers[i], tc.wantAnswers[i])
					}
				}
			}
			if interim != tc.wantInterim {
				t.Errorf("%d interim answers, want %d", interim, tc.wantInterim)
			}
			if strings.Contains(all.String(), testSecret) || strings.Contains(all.String(), strings.TrimPrefix(testSecret, "Bearer ")) {
				t.Errorf("the sandbox received the credential: %q", all.String())
			}
			if rec := f.record(); rec.Reason != tc.wantReason {
				t.Errorf("audit reason %q, want %q", rec.Reason, tc.wantReason)
			}
			if got := f.in.rawSettled(t, 10*time.Second); !slices.Equal(got, tc.wantUpstream) {
				t.Errorf("the upstream parsed %q, want %q", got, tc.wantUpstream)
			}
			if got := credentialEchoCount(t) - echoes; got < tc.wantEchoes {
				t.Errorf("%d credential echoes counted, want at least %d", got, tc.wantEchoes)
			}
		})
	}
}
