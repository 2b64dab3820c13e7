package egressbin

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/pkg/egress/egresstest"
)

func request(method, path, host string, extra ...string) string {
	return method + " " + path + " HTTP/1.1\r\nHost: " + host + "\r\n" + strings.Join(extra, "") + "\r\n"
}

// noCredential fails the test if the credential, or its token after the scheme, is anywhere in
// what the sandbox received.
func noCredential(t *testing.T, ex exchange) {
	t.Helper()
	if strings.Contains(ex.raw, secret) || strings.Contains(ex.raw, secretToken) {
		t.Errorf("the sandbox received the credential: %.2000q", ex.raw)
	}
}

// check compares the answers (by prefix), the 1xx count, the tunnel's audit reason and what the
// upstream parsed with the test's; the sandbox never receives the credential.
func check(t *testing.T, g *gateway, host string, ex exchange, wantAnswers []string, wantInterim int, wantReason string, wantUpstream []string) {
	t.Helper()
	noCredential(t, ex)
	if len(ex.answers) != len(wantAnswers) {
		t.Errorf("answers %.300q, want %q", ex.answers, wantAnswers)
	} else {
		for i := range ex.answers {
			if !strings.HasPrefix(ex.answers[i], wantAnswers[i]) {
				t.Errorf("answer %d: %.300q, want %q", i, ex.answers[i], wantAnswers[i])
			}
		}
	}
	if ex.interim != wantInterim {
		t.Errorf("%d interim (1xx) answers, want %d", ex.interim, wantInterim)
	}
	if got := g.auditReasons(t, host, 1); got[0] != wantReason {
		t.Errorf("audit reason %q, want %q", got[0], wantReason)
	}
	if got := g.up.parsed(); !slices.Equal(got, wantUpstream) {
		t.Errorf("the upstream parsed %q, want %q", got, wantUpstream)
	}
}

// TestBinaryTraceNeverCarriesTheCredential: a TRACE to a credentialed host (whose upstream echoes
// the request) is refused before the upstream: it would hand the credential to the sandbox.
func TestBinaryTraceNeverCarriesTheCredential(t *testing.T) {
	g := startGateway(t)
	ex := g.send(t, rawHost, request("TRACE", "/x", g.hostPort(rawHost)))
	check(t, g, rawHost, ex, []string{"403 method_or_path"}, 0, "method_or_path", nil)
}

// TestBinaryCredentialRuleWithoutMethods: a credential rule that lists no methods injects only
// into GET and HEAD; a POST is refused and never reaches the upstream, with or without the
// credential.
func TestBinaryCredentialRuleWithoutMethods(t *testing.T) {
	g := startGateway(t)
	ex := g.send(t, rawHost, request("GET", "/x", g.hostPort(rawHost))+request("HEAD", "/x", g.hostPort(rawHost)))
	check(t, g, rawHost, ex, []string{"200 answer GET /x", "200 "}, 0, "allowed",
		[]string{"GET /x auth=" + secret, "HEAD /x auth=" + secret})

	g = startGateway(t)
	ex = g.send(t, rawHost, request("POST", "/x", g.hostPort(rawHost), "Content-Length: 2\r\n")+"{}")
	check(t, g, rawHost, ex, []string{"403 method_or_path"}, 0, "method_or_path", nil)
}

// TestBinaryGetBodySmuggling: a GET with a body, which this upstream does not read, would make the
// body its next request: one that echoes the request after it, which the gateway sends with the
// credential. The GET is refused (unexpected_body) and nothing reaches the upstream.
func TestBinaryGetBodySmuggling(t *testing.T) {
	g := startGateway(t)
	next := "GET /v1/b HTTP/1.1\r\nHost: " + g.hostPort(rawPostHost) + "\r\nAuthorization: " + secret + "\r\n\r\n"
	smuggled := fmt.Sprintf("POST /v1/echo HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n\r\n", g.hostPort(rawPostHost), len(next))
	requests := request("GET", "/v1/a", g.hostPort(rawPostHost), fmt.Sprintf("Content-Length: %d\r\n", len(smuggled))) + smuggled + request("GET", "/v1/b", g.hostPort(rawPostHost))
	ex := g.send(t, rawPostHost, requests)
	check(t, g, rawPostHost, ex, []string{"400 unexpected_body"}, 0, "unexpected_body", nil)
}

// TestBinaryAmbiguousLength: a body with both a Content-Length and chunked framing, which an
// upstream may read either way (RFC 9112 section 6.1), is refused before the upstream.
func TestBinaryAmbiguousLength(t *testing.T) {
	g := startGateway(t)
	ex := g.send(t, rawPostHost, request("POST", "/v1/a", g.hostPort(rawPostHost), "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n")+"0\r\n\r\n")
	check(t, g, rawPostHost, ex, []string{"400 ambiguous_length"}, 0, "ambiguous_length", nil)
}

// TestBinaryUnsettledExchangeEndsTheTunnel: a POST whose body the upstream answers without
// reading leaves that body on the upstream connection as its next request (one that echoes the
// request after it). The gateway did not settle that exchange's framing, so nothing more goes on
// that connection: the tunnel ends with the POST's answer, and the next request, which would have
// carried the credential into the echo, is never sent.
func TestBinaryUnsettledExchangeEndsTheTunnel(t *testing.T) {
	g := startGateway(t)
	next := "GET /v1/b HTTP/1.1\r\nHost: " + g.hostPort(rawPostHost) + "\r\nAuthorization: " + secret + "\r\n\r\n"
	smuggled := fmt.Sprintf("POST /v1/echo HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n\r\n", g.hostPort(rawPostHost), len(next))
	requests := request("POST", "/v1/early", g.hostPort(rawPostHost), fmt.Sprintf("Content-Length: %d\r\n", len(smuggled))) + smuggled + request("GET", "/v1/b", g.hostPort(rawPostHost))
	ex := g.send(t, rawPostHost, requests)
	// The upstream reads the body as a request (without the credential): wait for it.
	g.up.waitParsed(t, 2)
	check(t, g, rawPostHost, ex, []string{"200 answer POST /v1/early"}, 0, "allowed",
		[]string{"POST /v1/early auth=" + secret, "POST /v1/echo auth="})
}

// TestBinaryInterimAnswers: each request's 100 Continue is relayed as an interim answer and its
// own final answer follows (RFC 9110 section 15.2): the second request never gets the first's.
func TestBinaryInterimAnswers(t *testing.T) {
	g := startGateway(t)
	ex := g.send(t, rawPostHost, request("GET", "/v1/continue/a", g.hostPort(rawPostHost))+request("GET", "/v1/continue/b", g.hostPort(rawPostHost)))
	check(t, g, rawPostHost, ex, []string{"200 answer GET /v1/continue/a", "200 answer GET /v1/continue/b"}, 2, "allowed",
		[]string{"GET /v1/continue/a auth=" + secret, "GET /v1/continue/b auth=" + secret})
}

// TestBinaryCredentialEchoScrubbed: an upstream that echoes the injected credential, in a header
// and in the body (with a Content-Length, and streamed in chunks each cut inside a copy of it),
// never hands it to the sandbox: every copy, and the token alone, is replaced by as many '*',
// the rest of the body is relayed unchanged, and each replacement is counted in
// airlock_egress_credential_echoes_total.
func TestBinaryCredentialEchoScrubbed(t *testing.T) {
	stars := func(s string) string { return strings.Repeat("*", len(s)) }
	t.Run("a header and a body with a length", func(t *testing.T) {
		g := startGateway(t)
		before := g.echoes(t)
		ex := g.send(t, rawHost, request("GET", "/echo", g.hostPort(rawHost)))
		check(t, g, rawHost, ex, []string{"200 GET /echo HTTP/1.1"}, 0, "allowed", []string{"GET /echo auth=" + secret})
		if len(ex.headers) == 1 && ex.headers[0].Get("X-Echo") != stars(secret) {
			t.Errorf("X-Echo %q, want %q", ex.headers[0].Get("X-Echo"), stars(secret))
		}
		if len(ex.bodies) == 1 && !strings.Contains(string(ex.bodies[0]), "Authorization: "+stars(secret)) {
			t.Errorf("body %q, want the Authorization line with the credential replaced", ex.bodies[0])
		}
		if got := g.echoes(t) - before; got < 2 {
			t.Errorf("%d credential echoes counted, want at least 2 (the header and the body)", got)
		}
	})
	t.Run("a streamed chunked body", func(t *testing.T) {
		g := startGateway(t)
		before := g.echoes(t)
		ex := g.send(t, rawHost, request("GET", "/stream", g.hostPort(rawHost)))
		want := strings.ReplaceAll(strings.ReplaceAll(egresstest.StreamBody(secret), secret, stars(secret)), secretToken, stars(secretToken))
		noCredential(t, ex)
		if len(ex.bodies) != 1 || string(ex.bodies[0]) != want {
			var got []int
			for _, b := range ex.bodies {
				got = append(got, len(b))
			}
			t.Errorf("answers %.200q, body lengths %v: want one body of %d bytes, the credential replaced and nothing else changed", ex.answers, got, len(want))
		}
		if got, want := g.echoes(t)-before, len(egresstest.StreamCuts)+2; got < want {
			t.Errorf("%d credential echoes counted, want at least %d (the header, %d copies and the token)", got, want, len(egresstest.StreamCuts))
		}
		if got := g.auditReasons(t, rawHost, 1); got[0] != "allowed" {
			t.Errorf("audit reason %q, want allowed", got[0])
		}
	})
}
