package egress

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/component-base/metrics/legacyregistry"
)

const testSecret = "Bearer test-secret-0123456789"

// terminatedFixture is a gateway that terminates tunnels with a CA of its own, holds the
// credential "cred" and verifies upstreams against the test internet's CA.
func terminatedFixture(t *testing.T) (*fixture, *x509.CertPool) {
	in := newInternet(t)
	ca, pool := newTestCA(t, "egress gateway CA")
	tr := &Terminator{CA: ca, UpstreamRoots: in.pool, Secrets: func(name string) ([]byte, bool) {
		if name == "cred" {
			return []byte(testSecret), true
		}
		return nil, false
	}}
	return newFixture(t, in, withTerminator(tr)), pool
}

// terminatedTunnel opens a CONNECT tunnel to authority and a TLS session in it with sni, trusting
// the gateway's CA.
func terminatedTunnel(t *testing.T, f *fixture, gatewayCA *x509.CertPool, authority, sni string) (*tls.Conn, *bufio.Reader, error) {
	t.Helper()
	res, br, c := f.send("", connectReq(authority))
	if res.status != http.StatusOK {
		t.Fatalf("CONNECT %s: %d %q", authority, res.status, res.reason)
	}
	tc := tls.Client(&bufConn{Conn: c, r: br}, &tls.Config{ServerName: sni, RootCAs: gatewayCA})
	if err := tc.Handshake(); err != nil {
		return nil, nil, err
	}
	return tc, bufio.NewReader(tc), nil
}

// roundTrip writes raw into the terminated tunnel and reads one response; all is every byte the
// client received for it.
func roundTrip(t *testing.T, tc *tls.Conn, br *bufio.Reader, raw string) (result, string) {
	t.Helper()
	if _, err := io.WriteString(tc, raw); err != nil {
		return result{closed: true, err: err}, ""
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return result{closed: true, err: err}, ""
	}
	body, _ := io.ReadAll(resp.Body)
	var all strings.Builder
	resp.Header.Write(&all)
	all.Write(body)
	return result{status: resp.StatusCode, reason: Reason(resp.Header.Get("X-Airlock-Egress-Reason")), body: string(body)}, all.String()
}

func innerReq(method, path, host string, extra ...string) string {
	return method + " " + path + " HTTP/1.1\r\nHost: " + host + "\r\n" + strings.Join(extra, "") + "\r\n"
}

// TestTerminatedCredential: in a terminated tunnel the gateway replaces the sandbox's own
// Authorization with the credential, for an allowed method and path only; the sandbox never
// receives the credential; the next request of the tunnel is checked on its own and its refusal
// ends the tunnel without reaching the upstream.
func TestTerminatedCredential(t *testing.T) {
	f, gatewayCA := terminatedFixture(t)
	tc, br, err := terminatedTunnel(t, f, gatewayCA, "cred.example:443", "cred.example")
	if err != nil {
		t.Fatal(err)
	}
	res, all := roundTrip(t, tc, br, innerReq("GET", "/v1/repo", "cred.example", "Authorization: Bearer forged-by-the-agent\r\n"))
	if res.status != http.StatusOK || !strings.Contains(res.body, "hello GET cred.example /v1/repo") {
		t.Fatalf("allowed request: %d %q %q", res.status, res.reason, res.body)
	}
	if strings.Contains(all, "test-secret") {
		t.Error("the sandbox received the credential")
	}
	res, _ = roundTrip(t, tc, br, innerReq("POST", "/v1/repo", "cred.example"))
	if res.status != http.StatusForbidden || res.reason != ReasonMethodOrPath {
		t.Errorf("a disallowed method: %d %q", res.status, res.reason)
	}
	if res, _ := roundTrip(t, tc, br, innerReq("GET", "/v1/again", "cred.example")); !res.closed {
		t.Errorf("the tunnel carried a request after a refusal: %d", res.status)
	}
	tc.Close()
	if rec := f.record(); rec.Reason != ReasonMethodOrPath || rec.Allowed {
		t.Errorf("record %+v", rec)
	}
	want := []string{"GET cred.example /v1/repo auth=" + testSecret}
	if got := f.in.tlsSeen(); !slices.Equal(got, want) {
		t.Errorf("the upstream received %q, want %q", got, want)
	}
}

// TestTerminatedRefusals: what a terminated tunnel refuses, each before the upstream sees a
// request.
func TestTerminatedRefusals(t *testing.T) {
	tests := []struct {
		name       string
		authority  string
		sni        string
		raw        string
		wantStatus int
		wantReason Reason
	}{
		{"a path outside the prefix", "cred.example:443", "cred.example", innerReq("GET", "/admin", "cred.example"), 403, ReasonMethodOrPath},
		{"a dot segment out of the prefix", "cred.example:443", "cred.example", innerReq("GET", "/v1/../admin", "cred.example"), 403, ReasonMethodOrPath},
		{"another Host in the tunnel", "cred.example:443", "cred.example", innerReq("GET", "/v1/x", "evil.example"), 400, ReasonHostMismatch},
		{"an absolute URI to another host in the tunnel", "cred.example:443", "cred.example", innerReq("GET", "http://evil.example/v1/x", "cred.example"), 400, ReasonHostMismatch},
		{"a WebSocket upgrade in the tunnel", "cred.example:443", "cred.example", innerReq("GET", "/v1/ws", "cred.example", "Connection: Upgrade\r\nUpgrade: websocket\r\n"), 403, ReasonUpgrade},
		{"a credential the gateway does not have", "nosecret.example:443", "nosecret.example", innerReq("GET", "/", "nosecret.example"), 503, ReasonNoCredentialValue},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, gatewayCA := terminatedFixture(t)
			conn, br, err := terminatedTunnel(t, f, gatewayCA, tc.authority, tc.sni)
			if err != nil {
				t.Fatal(err)
			}
			res, _ := roundTrip(t, conn, br, tc.raw)
			if res.status != tc.wantStatus || res.reason != tc.wantReason {
				t.Errorf("%d %q, want %d %q", res.status, res.reason, tc.wantStatus, tc.wantReason)
			}
			conn.Close()
			if rec := f.record(); rec.Reason != tc.wantReason {
				t.Errorf("audit reason %q, want %q", rec.Reason, tc.wantReason)
			}
			if got := f.in.tlsSeen(); len(got) != 0 {
				t.Errorf("the upstream received %q", got)
			}
		})
	}
}

// TestTerminatedUpstreamVerified: the gateway verifies the real server; one whose certificate
// does not name the host gets nothing.
func TestTerminatedUpstreamVerified(t *testing.T) {
	f, gatewayCA := terminatedFixture(t)
	conn, br, err := terminatedTunnel(t, f, gatewayCA, "badtls.example:443", "badtls.example")
	if err == nil {
		if res, _ := roundTrip(t, conn, br, innerReq("GET", "/", "badtls.example")); !res.closed {
			t.Errorf("a request reached an upstream that did not verify: %d", res.status)
		}
		conn.Close()
	}
	if rec := f.record(); rec.Reason != ReasonUpstreamTLS {
		t.Errorf("audit reason %q, want %q", rec.Reason, ReasonUpstreamTLS)
	}
}

// TestTerminatedStillHeldToSNI: termination happens after the SNI check, which refuses as for
// any tunnel.
func TestTerminatedStillHeldToSNI(t *testing.T) {
	f, gatewayCA := terminatedFixture(t)
	if _, _, err := terminatedTunnel(t, f, gatewayCA, "cred.example:443", "evil.example"); err == nil {
		t.Error("a TLS session with another SNI was established")
	}
	if rec := f.record(); rec.Reason != ReasonSNIMismatch {
		t.Errorf("audit reason %q, want %q", rec.Reason, ReasonSNIMismatch)
	}
}

// TestCredentialNeedsTLS: a host that only a credential-injecting rule allows is refused over
// plain HTTP, where the credential would cross the network in clear.
func TestCredentialNeedsTLS(t *testing.T) {
	f, _ := terminatedFixture(t)
	res, _, _ := f.send("", getReq("http://cred.example/v1/x", "cred.example"))
	if res.status != http.StatusForbidden || res.reason != ReasonCredentialNeedsTLS {
		t.Errorf("%d %q, want 403 %q", res.status, res.reason, ReasonCredentialNeedsTLS)
	}
	if rec := f.record(); rec.Reason != ReasonCredentialNeedsTLS {
		t.Errorf("audit reason %q", rec.Reason)
	}
	if got := f.in.plainSeen(); len(got) != 0 {
		t.Errorf("the upstream received %q", got)
	}
}

// TestLeafCacheBounded: however many names a sandbox asks for under a wildcard, the minted
// certificates kept stay bounded; a kept one is reused.
func TestLeafCacheBounded(t *testing.T) {
	ca, _ := newTestCA(t, "gateway CA")
	tr := &Terminator{CA: ca}
	now := time.Now()
	first, err := tr.certificate("a.example", now)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := tr.certificate("a.example", now); again != first {
		t.Error("a kept certificate was minted again")
	}
	if later, _ := tr.certificate("a.example", now.Add(leafValidity)); later == first {
		t.Error("a certificate near its end was reused")
	}
	for i := range maxLeaves + 10 {
		if _, err := tr.certificate(fmt.Sprintf("h%d.example", i), now); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(tr.leaves); n > maxLeaves {
		t.Errorf("%d certificates kept, want at most %d", n, maxLeaves)
	}
}

// credentialEchoCount is airlock_egress_credential_echoes_total now.
func credentialEchoCount(t *testing.T) int {
	t.Helper()
	registerMetrics()
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "airlock_egress_credential_echoes_total" {
			return int(f.GetMetric()[0].GetCounter().GetValue())
		}
	}
	t.Fatal("no airlock_egress_credential_echoes_total")
	return 0
}
