package egress

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"io"
	"net"
	"testing"
	"time"
)

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t *testing.T) (*net.TCPConn, *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b, ok := <-accepted
	if !ok {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	return a.(*net.TCPConn), b.(*net.TCPConn)
}

// pipeUnderTest runs the gateway's pipe between two TCP connections: it returns the client's
// end, the upstream's end, and a channel that gets the pipe's byte counts when it ends.
func pipeUnderTest(t *testing.T, idle time.Duration) (client, upstream *net.TCPConn, done <-chan [2]int64) {
	t.Helper()
	client, gwClient := tcpPair(t)
	gwUpstream, upstream := tcpPair(t)
	g := &Gateway{cfg: Config{IdleTimeout: idle}}
	ch := make(chan [2]int64, 1)
	go func() {
		up, down := g.pipe(gwClient, gwUpstream)
		ch <- [2]int64{up, down}
	}()
	return client, upstream, ch
}

// TestPipeMovesEveryByte: several MiB each way at once arrive whole (by content hash), each
// direction's end reaches the other side as an end (half-close), and the counts are the bytes.
func TestPipeMovesEveryByte(t *testing.T) {
	client, upstream, done := pipeUnderTest(t, time.Minute)
	upBytes, downBytes := randomBytes(t, 3<<20+17), randomBytes(t, 5<<20+3)
	send := func(c *net.TCPConn, b []byte) <-chan error {
		errc := make(chan error, 1)
		go func() {
			_, err := c.Write(b)
			if err == nil {
				err = c.CloseWrite()
			}
			errc <- err
		}()
		return errc
	}
	upSent, downSent := send(client, upBytes), send(upstream, downBytes)
	gotUp, errUp := io.ReadAll(upstream)
	gotDown, errDown := io.ReadAll(client)
	if errUp != nil || errDown != nil {
		t.Fatalf("reads: %v, %v", errUp, errDown)
	}
	if err := <-upSent; err != nil {
		t.Fatal(err)
	}
	if err := <-downSent; err != nil {
		t.Fatal(err)
	}
	if sha256.Sum256(gotUp) != sha256.Sum256(upBytes) || sha256.Sum256(gotDown) != sha256.Sum256(downBytes) {
		t.Fatalf("content differs: up %d of %d bytes, down %d of %d", len(gotUp), len(upBytes), len(gotDown), len(downBytes))
	}
	counts := <-done
	if counts != [2]int64{int64(len(upBytes)), int64(len(downBytes))} {
		t.Errorf("pipe counted up %d down %d, want %d and %d", counts[0], counts[1], len(upBytes), len(downBytes))
	}
}

// TestPipeDeliversWhatIsAlreadyThere: bytes that reach the gateway in one burst, more than one
// copy buffer holds, with nothing after them and the connection left open, all reach the client.
// A copy that waited on the poller alone after a read that left bytes behind would sit on them.
func TestPipeDeliversWhatIsAlreadyThere(t *testing.T) {
	client, upstream, _ := pipeUnderTest(t, time.Minute)
	burst := randomBytes(t, 4*copyBufSize+100)
	written := make(chan error, 1)
	go func() { // the sockets' buffers may not hold it all before the client reads
		_, err := upstream.Write(burst)
		written <- err
	}()
	// A generous deadline only so that the failure says what it is instead of the test's timeout.
	_ = client.SetReadDeadline(time.Now().Add(30 * time.Second))
	got := make([]byte, len(burst))
	if _, err := io.ReadFull(client, got); err != nil {
		t.Fatalf("read the burst: %v", err)
	}
	if !bytes.Equal(got, burst) {
		t.Fatal("the burst's content differs")
	}
	if err := <-written; err != nil {
		t.Fatal(err)
	}
}

// TestIdlePipeHoldsNoBuffer: once bytes have moved both ways and the tunnel is idle, no copy
// buffer is held: the pipe's goroutines wait for readable sources without one.
func TestIdlePipeHoldsNoBuffer(t *testing.T) {
	before := copyBufsInUse.Load()
	client, upstream, _ := pipeUnderTest(t, time.Minute)
	for _, dir := range [][2]*net.TCPConn{{client, upstream}, {upstream, client}} {
		msg := randomBytes(t, 3*copyBufSize)
		written := make(chan error, 1)
		go func() { // more than the sockets' buffers may hold before the far end reads
			_, err := dir[0].Write(msg)
			written <- err
		}()
		if _, err := io.ReadFull(dir[1], make([]byte, len(msg))); err != nil {
			t.Fatal(err)
		}
		if err := <-written; err != nil {
			t.Fatal(err)
		}
	}
	// The last buffer is given back just after its write returns, which may be after the read
	// above: wait for it (the bound only turns a hang into a message).
	for giveUp := time.Now().Add(30 * time.Second); copyBufsInUse.Load() != before; time.Sleep(time.Millisecond) {
		if time.Now().After(giveUp) {
			t.Fatalf("an idle tunnel holds %d copy buffers", copyBufsInUse.Load()-before)
		}
	}
}

// TestPipeIdleTimeoutCloses: a tunnel in which nothing moves for the idle timeout is closed both
// ways, by the read deadline of the wait for a readable source.
func TestPipeIdleTimeoutCloses(t *testing.T) {
	client, upstream, done := pipeUnderTest(t, 50*time.Millisecond)
	if _, err := client.Read(make([]byte, 1)); err == nil {
		t.Fatal("read a byte from an idle tunnel")
	}
	if _, err := upstream.Read(make([]byte, 1)); err == nil {
		t.Fatal("read a byte from an idle tunnel's upstream")
	}
	if counts := <-done; counts != [2]int64{} {
		t.Errorf("counts %v, want none", counts)
	}
}

// TestPipeOtherConns: connections that are not TCP are copied by io.Copy, whole.
func TestPipeOtherConns(t *testing.T) {
	client, gwClient := net.Pipe()
	gwUpstream, upstream := tcpPair(t)
	defer client.Close()
	g := &Gateway{cfg: Config{IdleTimeout: time.Minute}}
	go g.pipe(gwClient, gwUpstream)
	msg := randomBytes(t, 2*copyChunk+5)
	go func() { _, _ = client.Write(msg) }()
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(upstream, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, msg) {
		t.Fatal("content differs")
	}
}

func randomBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}
