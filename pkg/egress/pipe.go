package egress

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// pipe copies client (read through br) to upstream and upstream to client until both directions
// have ended, and returns the bytes copied each way. A direction that ends cleanly half-closes
// its destination; an error or IdleTimeout without a byte in either direction closes both.
func (g *Gateway) pipe(client net.Conn, br io.Reader, upstream net.Conn) (up, down int64) {
	idle := &idleWatch{timeout: g.cfg.IdleTimeout, conns: []net.Conn{client, upstream}}
	idle.touch()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		down = g.copyDirection(client, upstream, upstream, idle)
	}()
	up = g.copyDirection(upstream, br, client, idle)
	wg.Wait()
	return up, down
}

// copyDirection copies src (read from r) into dst. On a clean end it half-closes dst; on an
// error it closes both ends, which ends the other direction too.
func (g *Gateway) copyDirection(dst net.Conn, r io.Reader, src net.Conn, idle *idleWatch) int64 {
	buf := make([]byte, 32<<10)
	var total int64
	for {
		n, err := r.Read(buf)
		if n > 0 {
			idle.touch()
			w, werr := dst.Write(buf[:n])
			total += int64(w)
			if werr != nil {
				closeBoth(dst, src)
				return total
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				if cw, ok := dst.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
					return total
				}
			}
			closeBoth(dst, src)
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
