package egress

import (
	"context"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/pkg/egress/policy"
)

// anySource is claim A's lookup from any address (a net.Pipe has none), so that fuzzed requests
// reach every check after the credential's.
type anySource struct{ *StaticClaims }

func (a anySource) Lookup(ctx context.Context, cred Credential, _ netip.Addr) (Identity, error) {
	return a.StaticClaims.Lookup(ctx, cred, netip.MustParseAddr("127.0.0.1"))
}

// FuzzServeConn feeds arbitrary bytes to one client connection of the gateway: it must neither
// panic nor hang, and it never dials an address that is not on the test internet (the test
// dialer refuses those, and records them) beyond what the policy admits.
func FuzzServeConn(f *testing.F) {
	for _, tc := range techniques() {
		f.Add([]byte(tc.raw + tc.tunnel))
	}
	f.Add([]byte(connectReq("allowed.example:443") + "\x16\x03\x01\x00\x05\x01\x00\x00\x01\x00"))
	claims, err := NewStaticClaims(StaticClaim{Namespace: "team-a", Claim: "agent-a", Password: passwordA,
		Sources: []netip.Addr{netip.MustParseAddr("127.0.0.1")}, Policy: testPolicy})
	if err != nil {
		f.Fatal(err)
	}
	claims.SetSynced()
	dialer := &testDialer{routes: map[string]string{}}
	g, err := New(Config{Claims: anySource{claims}, Resolver: &testResolver{}, Dialer: dialer,
		HeadTimeout: time.Second, DialTimeout: time.Second, IdleTimeout: time.Second})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, input []byte) {
		client, server := net.Pipe()
		done := make(chan struct{})
		go func() { defer close(done); defer server.Close(); g.serveConn(context.Background(), server) }()
		go func() { _, _ = io.Copy(io.Discard, client) }()
		_, _ = client.Write(input)
		client.Close()
		<-done
		for _, a := range dialer.addresses() {
			// Public, or the one private answer a rule allows (private-ok.example).
			if ap, err := netip.ParseAddrPort(a); err != nil || (policy.Classify(ap.Addr(), nil) != policy.ClassPublic && a != "10.1.2.3:443") {
				t.Errorf("dialed %q", a)
			}
		}
	})
}
