package egressbin

import (
	"context"
	"crypto/tls"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/airlock-dev/airlock/pkg/egress/egresstest"
)

// upstream is a TLS server on this machine's address that frames requests its own way, as some
// servers do (egresstest.ServeNaive, as pkg/egress's in-process tests use it). It records the
// request heads it parsed ("METHOD path auth=...").
type upstream struct {
	port int

	mu   sync.Mutex
	seen []string
}

func (u *upstream) parsed() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.seen)
}

// waitParsed waits until the upstream has parsed n request heads and returns them.
func (u *upstream) waitParsed(t *testing.T, n int) []string {
	t.Helper()
	var got []string
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		got = u.parsed()
		return len(got) >= n, nil
	})
	if err != nil {
		t.Fatalf("the upstream parsed %q, want %d requests", got, n)
	}
	return got
}

func startUpstream(t *testing.T, ip net.IP, cert tls.Certificate) *upstream {
	t.Helper()
	ln, err := tls.Listen("tcp", net.JoinHostPort(ip.String(), "0"), &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	u := &upstream{port: ln.Addr().(*net.TCPAddr).Port}
	var wg sync.WaitGroup
	var connsMu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		connsMu.Lock()
		for _, c := range conns {
			c.Close()
		}
		connsMu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			connsMu.Lock()
			conns = append(conns, c)
			connsMu.Unlock()
			wg.Add(1)
			go func() { defer wg.Done(); u.serve(c) }()
		}
	}()
	return u
}

func (u *upstream) serve(c net.Conn) {
	egresstest.ServeNaive(c, func(head string) {
		u.mu.Lock()
		u.seen = append(u.seen, head)
		u.mu.Unlock()
	})
}
