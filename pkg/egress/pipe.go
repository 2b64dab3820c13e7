package egress

import (
	"io"
	"net"
	"sync"
	"time"
)

// copyChunk is how much one copy call moves at most before the idle deadlines are moved on: small
// enough that a slow but live transfer (1 KiB/s) finishes a chunk well within IdleTimeout.
const copyChunk = 128 << 10

// pipe copies client to upstream and upstream to client until both directions have ended, and
// returns the bytes copied each way. Between TCP connections the kernel moves the bytes (splice,
// through io.Copy and TCPConn.ReadFrom): no buffer in the gateway's heap, none held by an idle
// tunnel. A direction that ends cleanly half-closes its destination; an error or IdleTimeout
// without a byte in either direction closes both.
func (g *Gateway) pipe(client, upstream net.Conn) (up, down int64) {
	idle := &idleWatch{timeout: g.cfg.IdleTimeout, conns: []net.Conn{client, upstream}}
	idle.touch()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		down = copyDirection(client, upstream, idle)
	}()
	up = copyDirection(upstream, client, idle)
	wg.Wait()
	return up, down
}

// copyDirection copies src into dst, chunk by chunk. On src's end it half-closes dst; on an
// error it closes both ends, which ends the other direction too.
func copyDirection(dst, src net.Conn, idle *idleWatch) int64 {
	var total int64
	for {
		lr := &io.LimitedReader{R: src, N: copyChunk}
		n, err := io.Copy(dst, lr)
		total += n
		if n > 0 {
			idle.touch()
		}
		if err != nil {
			closeBoth(dst, src)
			return total
		}
		if lr.N > 0 { // src ended before the chunk did
			if cw, ok := dst.(interface{ CloseWrite() error }); !ok || cw.CloseWrite() != nil {
				closeBoth(dst, src)
			}
			return total
		}
	}
}

func closeBoth(a, b net.Conn) {
	_ = a.Close()
	_ = b.Close()
}

// idleWatch moves both connections' deadlines forward whenever a byte moves, so that a tunnel
// idle for timeout in both directions times out.
type idleWatch struct {
	timeout time.Duration
	conns   []net.Conn

	mu   sync.Mutex
	last time.Time
}

func (w *idleWatch) touch() {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	// Deadlines move at most once a second: a busy tunnel does not pay a syscall per read.
	if now.Sub(w.last) < time.Second {
		return
	}
	w.last = now
	for _, c := range w.conns {
		_ = c.SetDeadline(now.Add(w.timeout))
	}
}

// idleConn is a connection whose every read and write moves its watch's deadlines forward.
type idleConn struct {
	net.Conn
	watch *idleWatch
}

func (c *idleConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.watch.touch()
	}
	return n, err
}

func (c *idleConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if n > 0 {
		c.watch.touch()
	}
	return n, err
}
