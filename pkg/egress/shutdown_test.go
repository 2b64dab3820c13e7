package egress

import (
	"io"
	"net"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// openEcho opens an allowed non-TLS tunnel to the echo server and checks it echoes.
func openEcho(t *testing.T, f *fixture) (net.Conn, func(string) error) {
	t.Helper()
	res, br, c := f.send("", connectReq("ssh.example:22"))
	if res.status != 200 {
		t.Fatalf("tunnel: %d %q", res.status, res.reason)
	}
	echo := func(s string) error {
		if _, err := io.WriteString(c, s); err != nil {
			return err
		}
		got := make([]byte, len(s))
		if _, err := io.ReadFull(br, got); err != nil {
			return err
		}
		if string(got) != s {
			t.Errorf("echo %q, want %q", got, s)
		}
		return nil
	}
	if err := echo("one"); err != nil {
		t.Fatal(err)
	}
	return c, echo
}

// TestShutdownClosesTunnels: without a grace, the end of Serve's context closes open tunnels and
// Serve returns.
func TestShutdownClosesTunnels(t *testing.T) {
	f := newFixture(t, newInternet(t))
	_, echo := openEcho(t, f)
	f.stop()
	if err := <-f.served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	f.served <- nil
	if err := echo("two"); err == nil {
		t.Error("the tunnel still carries bytes after Serve returned")
	}
	if rec := f.record(); rec.Reason != ReasonAllowed || rec.BytesUp == 0 || rec.BytesDown == 0 {
		t.Errorf("record %+v", rec)
	}
}

// TestShutdownGrace: during the grace, open tunnels go on and new connections are refused; the
// grace's end closes what is still open, and Serve returns.
func TestShutdownGrace(t *testing.T) {
	fake := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	f := newFixture(t, newInternet(t), withGrace(time.Hour, fake))
	_, echo := openEcho(t, f)
	f.stop()
	<-f.g.draining
	if _, err := net.Dial("tcp", f.addr); err == nil {
		t.Error("the proxy accepts connections during the grace")
	}
	if err := echo("during the grace"); err != nil {
		t.Fatalf("the tunnel broke during the grace: %v", err)
	}
	select {
	case err := <-f.served:
		t.Fatalf("Serve returned during the grace with a tunnel open: %v", err)
	default:
	}
	fake.Step(time.Hour)
	if err := <-f.served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	f.served <- nil
	if err := echo("after the grace"); err == nil {
		t.Error("the tunnel still carries bytes after the grace")
	}
}

// TestShutdownGraceEndsEarly: once the last tunnel ends, Serve returns without waiting out the
// grace.
func TestShutdownGraceEndsEarly(t *testing.T) {
	fake := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	f := newFixture(t, newInternet(t), withGrace(time.Hour, fake))
	c, _ := openEcho(t, f)
	f.stop()
	<-f.g.draining
	c.Close()
	if err := <-f.served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	f.served <- nil
}

// TestIdleTunnelCloses: a tunnel in which nothing moves for IdleTimeout is closed by the gateway
// (the test waits for the close, however long the machine takes).
func TestIdleTunnelCloses(t *testing.T) {
	f := newFixture(t, newInternet(t), withIdleTimeout(50*time.Millisecond))
	c, _ := openEcho(t, f)
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("read a byte from an idle tunnel")
	}
	if rec := f.record(); rec.Reason != ReasonAllowed || rec.Kind != "connect" {
		t.Errorf("record %+v", rec)
	}
}
