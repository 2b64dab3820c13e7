package wire

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"k8s.io/utils/clock"
)

// fakeConn is a connection that reads in and records what is written.
type fakeConn struct {
	in     *bytes.Reader
	out    bytes.Buffer
	closed bool
}

func (c *fakeConn) Read(p []byte) (int, error)       { return c.in.Read(p) }
func (c *fakeConn) Write(p []byte) (int, error)      { return c.out.Write(p) }
func (c *fakeConn) Close() error                     { c.closed = true; return nil }
func (c *fakeConn) LocalAddr() net.Addr              { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1} }
func (c *fakeConn) RemoteAddr() net.Addr             { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 2} }
func (c *fakeConn) SetDeadline(time.Time) error      { return nil }
func (c *fakeConn) SetReadDeadline(time.Time) error  { return nil }
func (c *fakeConn) SetWriteDeadline(time.Time) error { return nil }

// takenRequest is what the loop's handler saw of a request it served.
type takenRequest struct {
	method, uri, host string
	header            http.Header
	body              string
}

// runKeptLoop serves stream on a kept connection whose handler answers
// every request, except those with X-Hand-Back, which it hands back. It
// returns the requests answered, what was handed back to net/http (all of
// it, read to the end) and whether anything was.
func runKeptLoop(t testing.TB, stream []byte, maxBody int64) (taken []takenRequest, back []byte, handed bool) {
	t.Helper()
	fc := &fakeConn{in: bytes.NewReader(stream)}
	root := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Hand-Back") != "" {
			w.(*keptWriter).handBack = true
			return
		}
		body, _ := io.ReadAll(r.Body)
		taken = append(taken, takenRequest{r.Method, r.RequestURI, r.Host, r.Header.Clone(), string(body)})
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprintf(w, "ok %d", len(taken))
	})
	bl := NewBackListener(fc.LocalAddr())
	k := NewKeepAlive(&http.Server{Handler: root, MaxHeaderBytes: 1024}, bl, maxBody, clock.RealClock{})
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := bl.Accept()
		accepted <- c
	}()
	c := newKeptConn(fc, bufio.NewReader(strings.NewReader("")), context.Background())
	k.mu.Lock()
	k.conns[c] = false
	k.mu.Unlock()
	k.wg.Add(1)
	k.serve(c)
	bl.Close()
	if hc := <-accepted; hc != nil {
		data, err := io.ReadAll(hc)
		if err != nil {
			t.Fatal(err)
		}
		return taken, data, true
	}
	if !fc.closed {
		t.Error("the loop ended without closing the connection or handing it back")
	}
	return taken, nil, false
}

// checkReplay checks the loop's one promise: what it served and what it
// handed back are the stream, cut where net/http would cut it. The
// stream less what was handed back must read, with net/http's parser
// (and its tolerance of line ends after a POST), as exactly the requests
// served, and nothing more.
func checkReplay(t *testing.T, stream []byte, taken []takenRequest, back []byte, handed bool) {
	t.Helper()
	if !bytes.HasSuffix(stream, back) {
		t.Fatalf("handed back bytes the stream does not end with:\nstream %q\nback   %q", stream, back)
	}
	served := stream[:len(stream)-len(back)]
	br := bufio.NewReader(bytes.NewReader(served))
	for i, want := range taken {
		peek, _ := br.Peek(4)
		_, _ = br.Discard(leadingLineEnds(peek))
		req, err := http.ReadRequest(br)
		if err != nil {
			t.Fatalf("request %d served, but net/http reads %v there; stream %q", i, err, stream)
		}
		body, err := io.ReadAll(req.Body)
		if err != nil {
			t.Fatalf("request %d: body: %v", i, err)
		}
		got := takenRequest{req.Method, req.RequestURI, req.Host, req.Header, string(body)}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("request %d: net/http reads %+v, the loop served %+v; stream %q", i, got, want, stream)
		}
	}
	peek, _ := br.Peek(4)
	_, _ = br.Discard(leadingLineEnds(peek)) // dropped before the next, as net/http drops them
	rest, _ := io.ReadAll(br)
	if handed && len(rest) > 0 {
		t.Fatalf("bytes between the served requests and what was handed back: %q; stream %q", rest, stream)
	}
	if !handed && len(rest) > 0 {
		// The connection ended (here: the stream did) mid-request: what
		// is left must not be a whole request.
		if req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(bytes.TrimLeft(rest, "\r\n")))); err == nil {
			if _, err := io.ReadAll(req.Body); err == nil {
				t.Fatalf("a whole request %q was neither served nor handed back; stream %q", rest, stream)
			}
		}
	}
}

// keptPieces are requests of every shape the loop meets: those it
// serves, those it hands back, and broken ones.
var keptPieces = []string{
	"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:1\r\nContent-Type: application/json\r\nContent-Length: 5\r\n\r\nhello",
	"POST /mcp HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n",
	"POST /mcp HTTP/1.1\r\nHost: h\r\nX-Hand-Back: 1\r\nContent-Length: 3\r\n\r\nabc",
	"\r\nPOST /mcp HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\nxy",
	"\r\n\r\n\r\nPOST /mcp HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\nxy",
	"POST /mcp HTTP/1.1\r\nhost: h\r\ncontent-length: 4\r\nx-a: 1\r\nX-A: 2\r\n\r\nbody",
	"GET /healthz HTTP/1.1\r\nHost: h\r\n\r\n",
	"POST /mcp?x=1 HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n\r\nq",
	"POST /mcp/ HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n\r\nq",
	"POST /mcp HTTP/1.0\r\nHost: h\r\nContent-Length: 1\r\n\r\nq",
	"POST /mcp HTTP/1.1\r\nContent-Length: 1\r\n\r\nq",
	"POST /mcp HTTP/1.1\r\nHost: h\r\nHost: i\r\nContent-Length: 1\r\n\r\nq",
	"POST /mcp HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nq",
	"POST /mcp HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nqq",
	"POST /mcp HTTP/1.1\r\nHost: h\r\nContent-Length: +1\r\n\r\nq",
	"POST /mcp HTTP/1.1\r\nHost: h\r\nContent-Length: 99999\r\n\r\nq",
	"POST /mcp HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nq\r\n0\r\n\r\n",
	"POST /mcp HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nq\r\n0\r\n\r\n",
	"POST /mcp HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\nq",
	"POST /mcp HTTP/1.1\r\nHost: h\r\nConnection: close\r\nContent-Length: 1\r\n\r\nq",
	"POST /mcp HTTP/1.1\r\nHost: h\r\nConnection: keep-alive\r\nContent-Length: 1\r\n\r\nq",
	"POST /mcp HTTP/1.1\r\nHost: h\r\nUpgrade: h2c\r\nContent-Length: 1\r\n\r\nq",
	"POST /mcp HTTP/1.1\r\nHost: h\r\nX-Folded: a\r\n b\r\nContent-Length: 1\r\n\r\nq",
	"POST /mcp HTTP/1.1\nHost: h\nContent-Length: 1\n\nq",
	"POST /mcp HTTP/1.1\r\nHost: h\r\nBad Name: v\r\nContent-Length: 1\r\n\r\nq",
	"POST /mcp HTTP/1.1\r\nHost: h\r\nX-V: a\x00b\r\nContent-Length: 1\r\n\r\nq",
	"POST /mcp HTTP/1.1\r\nHost: h h\r\nContent-Length: 1\r\n\r\nq",
	"POST /mcp HTTP/1.1\r\nHost: h\r\nX-Big: " + strings.Repeat("b", 12000) + "\r\nContent-Length: 1\r\n\r\nq",
	"POST http://h/mcp HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n\r\nq",
	"post /mcp HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n\r\nq",
	"POST  /mcp HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n\r\nq",
	"POST /mcp HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\nshort",
	"POST /mcp HTTP/1.1\r\nHost: h\r\nContent-Le",
	"garbage\r\n\r\n",
	"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03",
}

// TestKeptConnReplaysExactly runs random sequences of keptPieces through
// the loop and checks checkReplay, and that every piece shape is served
// or handed back as it should be.
func TestKeptConnReplaysExactly(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	servedOnce := map[int]bool{}
	for range 3000 {
		var stream []byte
		var order []int
		for range 1 + rng.IntN(5) {
			i := rng.IntN(len(keptPieces))
			order = append(order, i)
			stream = append(stream, keptPieces[i]...)
		}
		taken, back, handed := runKeptLoop(t, stream, 1024)
		checkReplay(t, stream, taken, back, handed)
		if len(taken) > 0 {
			servedOnce[order[0]] = true
		}
	}
	// The shapes it serves, first in a stream: the first six pieces but
	// the one it is told to hand back and the one with more line ends
	// before it than net/http drops; and those net/http's parser reads as
	// one of them (a repeated equal Content-Length, a folded header line,
	// bare line feeds). A body cut short takes the next piece's bytes, as
	// net/http's would: served or not, by what follows.
	serves := map[int]bool{0: true, 1: true, 3: true, 5: true, 12: true, 22: true, 23: true}
	for i := range keptPieces {
		if i == 31 {
			continue
		}
		if want := serves[i]; servedOnce[i] != want {
			t.Errorf("piece %d %q: served first = %v, want %v", i, keptPieces[i], servedOnce[i], want)
		}
	}
}

// FuzzKeptConnReplays is checkReplay on any bytes after a request the
// loop serves.
func FuzzKeptConnReplays(f *testing.F) {
	for _, p := range keptPieces {
		f.Add([]byte(p))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		stream := append([]byte(keptPieces[0]), data...)
		taken, back, handed := runKeptLoop(t, stream, 1024)
		if len(taken) == 0 {
			t.Fatal("the first request was not served")
		}
		checkReplay(t, stream, taken, back, handed)
	})
}

// TestKeptWriterAnswersAsNetHTTP writes the answers sandboxd's handlers
// give through net/http and through keptWriter, and reads both with
// net/http's client parser: the same status, headers (but Date) and body.
func TestKeptWriterAnswersAsNetHTTP(t *testing.T) {
	handlers := map[string]http.HandlerFunc{
		"a direct call's answer": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Cache-Control", "no-cache, no-transform")
			w.Header().Set("Content-Length", "13")
			w.Write([]byte(`{"jsonrpc":1}`))
		},
		"a big one": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Write(bytes.Repeat([]byte("x"), 70000))
		},
		"a 400": func(w http.ResponseWriter, r *http.Request) {
			id, _ := jsonrpc.MakeID(float64(7))
			writeError(w, http.StatusBadRequest, id, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "duplicate"})
		},
		"the guard 401": func(w http.ResponseWriter, r *http.Request) { unauthorized(w) },
		"a 403":         func(w http.ResponseWriter, r *http.Request) { http.Error(w, "Forbidden: no", http.StatusForbidden) },
		"a 202":         func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusAccepted) },
		"sniffed":       func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("<html>hi</html>")) },
		"nothing":       func(w http.ResponseWriter, r *http.Request) {},
		"a 204":         func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) },
	}
	for name, h := range handlers {
		t.Run(name, func(t *testing.T) {
			hs := httptest.NewServer(h)
			defer hs.Close()
			resp, err := http.Post(hs.URL, "application/json", strings.NewReader("{}"))
			if err != nil {
				t.Fatal(err)
			}
			wantBody, _ := io.ReadAll(resp.Body)
			resp.Body.Close()

			kw := newKeptWriter()
			h(kw, httptest.NewRequest(http.MethodPost, "/mcp", strings.NewReader("{}")))
			raw := kw.appendResponse(nil, time.Now())
			got, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(raw)), nil)
			if err != nil {
				t.Fatalf("net/http cannot read the kept answer %q: %v", raw, err)
			}
			gotBody, _ := io.ReadAll(got.Body)
			if got.StatusCode != resp.StatusCode || !bytes.Equal(gotBody, wantBody) {
				t.Errorf("kept: %d %q, net/http: %d %q", got.StatusCode, gotBody, resp.StatusCode, wantBody)
			}
			// net/http sends an answer longer than its buffer (2 KiB) whose
			// handler set no length chunked; the kept answer has its length.
			if resp.ContentLength < 0 && got.ContentLength == int64(len(gotBody)) {
				got.Header.Del("Content-Length")
			} else if got.ContentLength != resp.ContentLength {
				t.Errorf("Content-Length: kept %d, net/http %d", got.ContentLength, resp.ContentLength)
			}
			for _, hd := range []http.Header{got.Header, resp.Header} {
				if _, err := http.ParseTime(hd.Get("Date")); err != nil {
					t.Errorf("Date %q: %v", hd.Get("Date"), err)
				}
				hd.Del("Date")
			}
			if !reflect.DeepEqual(got.Header, resp.Header) {
				t.Errorf("headers: kept %v, net/http %v", got.Header, resp.Header)
			}
		})
	}
}
