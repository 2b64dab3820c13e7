package egress

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// The egress benchmarks (make bench-egress; hack/bench-egress.sh): TLS connection setup and a
// 100 MiB download, each direct, through the gateway, and through other proxies when
// EGRESS_BENCH_PROXY names some ([name=]http://host:port, comma-separated, e.g. tinyproxy and
// squid on loopback), a plain Go TCP relay as the floor of any extra hop, plus the
// gateway's memory per idle tunnel. Figures depend on the machine and its load: compare runs
// of one machine, taken side by side in one run.

// benchPath is how a benchmark reaches the upstream TLS server.
type benchPath struct {
	name string
	// open returns a connection on which a TLS handshake with allowed.example reaches the
	// upstream.
	open func(b *testing.B) (net.Conn, *bufio.Reader)
}

func benchPaths(b *testing.B, f *fixture) []benchPath {
	paths := []benchPath{
		{"direct", func(b *testing.B) (net.Conn, *bufio.Reader) {
			c, err := net.Dial("tcp", f.in.tlsAddr)
			if err != nil {
				b.Fatal(err)
			}
			return c, bufio.NewReader(c)
		}},
		{"gateway", func(b *testing.B) (net.Conn, *bufio.Reader) {
			return connectThrough(b, f.addr, "allowed.example:443", credA)
		}},
	}
	relay := startRelay(b, f.in.tlsAddr)
	paths = append(paths, benchPath{"relay", func(b *testing.B) (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", relay)
		if err != nil {
			b.Fatal(err)
		}
		return c, bufio.NewReader(c)
	}})
	for _, o := range benchProxies(b) {
		paths = append(paths, benchPath{o.name, func(b *testing.B) (net.Conn, *bufio.Reader) {
			return connectThrough(b, o.addr, f.in.tlsAddr, "")
		}})
	}
	return paths
}

// startRelay starts the floor of any proxy on this machine: a plain TCP relay to the upstream,
// in this process, that does nothing but io.Copy between two *net.TCPConn each way (splice, as in
// the gateway) with no CONNECT, policy or deadlines. The gateway cannot move bytes faster than
// it; the gap between it and direct is the extra hop's cost (a second loopback TCP connection,
// its wakeups and splices) on this machine. It returns the relay's address.
func startRelay(b *testing.B, to string) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var open []net.Conn
	track := func(c net.Conn) {
		mu.Lock()
		defer mu.Unlock()
		open = append(open, c)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", to)
			if err != nil {
				_ = c.Close()
				continue
			}
			track(c)
			track(u)
			wg.Add(2)
			go func() { defer wg.Done(); relayCopy(u, c) }()
			go func() { defer wg.Done(); relayCopy(c, u) }()
		}
	}()
	b.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range open {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// relayCopy copies src into dst and half-closes dst at src's end (both closed on an error).
func relayCopy(dst, src net.Conn) {
	if _, err := io.Copy(dst, src); err != nil {
		closeBoth(dst, src)
		return
	}
	if err := dst.(*net.TCPConn).CloseWrite(); err != nil {
		closeBoth(dst, src)
	}
}

// otherProxy is a proxy the gateway is compared with.
type otherProxy struct{ name, addr string }

// benchProxies reads EGRESS_BENCH_PROXY: a comma-separated list of [name=]http://host:port
// (name "other" when left out), e.g. tinyproxy=http://127.0.0.1:8888,squid=http://127.0.0.1:3128.
func benchProxies(b *testing.B) []otherProxy {
	var proxies []otherProxy
	for entry := range strings.SplitSeq(os.Getenv("EGRESS_BENCH_PROXY"), ",") {
		if entry = strings.TrimSpace(entry); entry == "" {
			continue
		}
		name, raw, ok := strings.Cut(entry, "=")
		if !ok {
			name, raw = "other", entry
		}
		u, err := url.Parse(raw)
		if err != nil || u.Scheme != "http" || u.Host == "" {
			b.Fatalf("EGRESS_BENCH_PROXY: %q is not [name=]http://host:port", entry)
		}
		if name == "" || slices.ContainsFunc(proxies, func(o otherProxy) bool { return o.name == name }) ||
			slices.Contains([]string{"direct", "gateway", "relay"}, name) {
			b.Fatalf("EGRESS_BENCH_PROXY: %q: the name is empty or taken", entry)
		}
		proxies = append(proxies, otherProxy{name, u.Host})
	}
	return proxies
}

// connectThrough opens a CONNECT tunnel to target through the proxy at addr.
func connectThrough(b *testing.B, addr, target, cred string) (net.Conn, *bufio.Reader) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	auth := ""
	if cred != "" {
		auth = "Proxy-Authorization: " + cred + "\r\n"
	}
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n%s\r\n", target, target, auth)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != http.StatusOK {
		b.Fatalf("CONNECT %s through %s: %v %v", target, addr, resp, err)
	}
	return c, br
}

func benchTLS(b *testing.B, f *fixture, c net.Conn, br *bufio.Reader) *tls.Conn {
	tc := tls.Client(&bufConn{Conn: c, r: br}, &tls.Config{ServerName: "allowed.example", RootCAs: f.in.pool})
	if err := tc.Handshake(); err != nil {
		b.Fatal(err)
	}
	return tc
}

func benchFixture(b *testing.B) *fixture {
	return newFixture(b, newInternet(b), quiet())
}

// BenchmarkConnectSetup: from dial to a finished TLS handshake with the upstream; p50 and p90
// are reported beside the mean.
func BenchmarkConnectSetup(b *testing.B) {
	f := benchFixture(b)
	for _, p := range benchPaths(b, f) {
		b.Run(p.name, func(b *testing.B) {
			lat := make([]time.Duration, 0, b.N)
			for b.Loop() {
				start := time.Now()
				c, br := p.open(b)
				tc := benchTLS(b, f, c, br)
				lat = append(lat, time.Since(start))
				tc.Close()
			}
			reportPercentiles(b, lat)
		})
	}
}

// BenchmarkDownload: a 100 MiB GET over TLS; MB/s is the throughput.
func BenchmarkDownload(b *testing.B) {
	f := benchFixture(b)
	for _, p := range benchPaths(b, f) {
		b.Run(p.name, func(b *testing.B) {
			b.SetBytes(bigSize)
			for b.Loop() {
				download(b, f, p)
			}
		})
	}
}

// BenchmarkDownloadSideBySide: the 100 MiB GET over every path in turn, round after round, so
// that each path sees the same load (a shared machine's load drifts between the sub-benchmarks
// of BenchmarkDownload); reports each path's median MB/s and the gateway's ratios to direct and
// to the other proxy, and the relay's to direct (the extra hop's floor), all from this run.
func BenchmarkDownloadSideBySide(b *testing.B) {
	f := benchFixture(b)
	paths := benchPaths(b, f)
	took := make(map[string][]time.Duration, len(paths))
	for b.Loop() {
		for _, p := range paths {
			took[p.name] = append(took[p.name], download(b, f, p))
		}
	}
	mbps := map[string]float64{}
	for _, p := range paths {
		lat := took[p.name]
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		mbps[p.name] = float64(bigSize) / 1e6 / lat[len(lat)/2].Seconds()
		b.ReportMetric(mbps[p.name], p.name+"-MB/s")
	}
	b.ReportMetric(mbps["gateway"]/mbps["direct"], "gateway/direct")
	b.ReportMetric(mbps["relay"]/mbps["direct"], "relay/direct")
	for _, o := range benchProxies(b) {
		b.ReportMetric(mbps["gateway"]/mbps[o.name], "gateway/"+o.name)
	}
}

// download GETs /big over TLS on p and returns how long it took, from dial to the last byte.
func download(b *testing.B, f *fixture, p benchPath) time.Duration {
	start := time.Now()
	c, br := p.open(b)
	tc := benchTLS(b, f, c, br)
	defer tc.Close()
	fmt.Fprint(tc, "GET /big HTTP/1.1\r\nHost: allowed.example\r\nConnection: close\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReaderSize(tc, 64<<10), nil)
	if err != nil {
		b.Fatal(err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil || n != bigSize {
		b.Fatalf("downloaded %d bytes, %v", n, err)
	}
	return time.Since(start)
}

// BenchmarkIdleTunnelMemory: the heap that 200 idle, established TLS tunnels through the gateway
// hold, less what 200 direct TLS connections hold (client and upstream ends are in both), per
// tunnel: the median of the rounds.
func BenchmarkIdleTunnelMemory(b *testing.B) {
	f := benchFixture(b)
	const n = 200
	heapOf := func(open func(b *testing.B) (net.Conn, *bufio.Reader)) uint64 {
		before := heapInUse()
		var conns []net.Conn
		for range n {
			c, br := open(b)
			conns = append(conns, benchTLS(b, f, c, br))
		}
		after := heapInUse()
		for _, c := range conns {
			c.Close()
		}
		return after - min(before, after)
	}
	paths := benchPaths(b, f)
	var per []float64
	for b.Loop() {
		direct := heapOf(paths[0].open)
		gateway := heapOf(paths[1].open)
		per = append(per, float64(gateway-min(direct, gateway))/n)
	}
	// The median of the rounds: one round's figure moves by whole spans and by what the
	// collector and the copy buffers' pool happen to hold at that moment.
	sort.Float64s(per)
	b.ReportMetric(per[len(per)/2], "B/idle-tunnel")
}

// heapInUse is the heap and the goroutine stacks in use once the collector has run three times: a
// tunnel that is idle lives through many collections, and each one halves the stacks of goroutines
// that use less than a quarter of theirs (one collection left them as the handshakes grew them).
func heapInUse() uint64 {
	for range 3 {
		runtime.GC()
	}
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse + m.StackInuse
}

func reportPercentiles(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*9/10].Microseconds()), "p90-µs")
}
