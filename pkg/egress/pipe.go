package egress

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// copyChunk is how much one copy call moves at most before the idle deadlines are moved on: small
// enough that a slow but live transfer (1 KiB/s) finishes a chunk well within IdleTimeout.
const copyChunk = 128 << 10

// copyBufSize is the size of the buffers a tunnel's bytes go through between two TCP
// connections. A buffer is taken from copyBufs only once the source has bytes to read and given
// back as soon as they are written on, so an idle tunnel holds none and the gateway's buffers in
// use are those of the copies in flight at that moment, not one per tunnel.
const copyBufSize = 64 << 10

var copyBufs = sync.Pool{New: func() any { b := make([]byte, copyBufSize); return &b }}

// copyBufsInUse counts the buffers taken from copyBufs and not yet given back.
var copyBufsInUse atomic.Int64

// pipe copies client to upstream and upstream to client until both directions have ended, and
// returns the bytes copied each way. A direction that ends cleanly half-closes its destination;
// an error or IdleTimeout without a byte in either direction closes both.
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
//
// Between TCP connections each chunk waits for src to be readable without a buffer, then goes
// through a pooled one (read, write): measured on loopback (docs/egress.md, "Speed"), this moves
// more bytes per second than the kernel's splice through a pipe, which io.Copy between two
// *net.TCPConn uses. Any other pair of connections is copied by io.Copy.
func copyDirection(dst, src net.Conn, idle *idleWatch) int64 {
	var total int64
	rc := rawConnOf(src)
	for {
		var n int64
		var err error
		if rc != nil {
			n, err = copyReadable(dst, src, rc)
		} else {
			lr := &io.LimitedReader{R: src, N: copyChunk}
			n, err = io.Copy(dst, lr)
			if err == nil && lr.N > 0 { // src ended before the chunk did
				err = io.EOF
			}
		}
		total += n
		if n > 0 {
			idle.touch()
		}
		if err == io.EOF {
			if cw, ok := dst.(interface{ CloseWrite() error }); !ok || cw.CloseWrite() != nil {
				closeBoth(dst, src)
			}
			return total
		}
		if err != nil {
			closeBoth(dst, src)
			return total
		}
	}
}

// rawConnOf returns src's raw connection when src is a TCP connection, or nil.
func rawConnOf(src net.Conn) syscall.RawConn {
	tc, ok := src.(*net.TCPConn)
	if !ok {
		return nil
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return nil
	}
	return rc
}

// copyReadable waits until src has bytes (or its end, or an error) to read, under src's read
// deadline, then reads what is there into a pooled buffer and writes it to dst. It returns
// io.EOF at src's end.
func copyReadable(dst, src net.Conn, rc syscall.RawConn) (int64, error) {
	if err := waitReadable(rc); err != nil {
		return 0, err
	}
	bp := copyBufs.Get().(*[]byte)
	copyBufsInUse.Add(1)
	defer func() {
		copyBufsInUse.Add(-1)
		copyBufs.Put(bp)
	}()
	n, err := src.Read(*bp)
	if n > 0 {
		if wn, werr := dst.Write((*bp)[:n]); werr != nil {
			return int64(wn), werr
		}
	}
	return int64(n), err
}

// waitReadable returns once a read of rc would not block: a byte is there to read, the peer has
// ended, or the socket has an error. It peeks rather than trusting the poller alone, which may
// have been told of these bytes before the last read.
func waitReadable(rc syscall.RawConn) error {
	var one [1]byte
	return rc.Read(func(fd uintptr) bool {
		for {
			_, _, err := syscall.Recvfrom(int(fd), one[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
			if err != syscall.EINTR {
				return err != syscall.EAGAIN
			}
		}
	})
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
