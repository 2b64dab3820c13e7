package egress

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"testing"
)

// fragmentingConn splits the first TLS record its client writes (the ClientHello) into
// records of at most size bytes of payload each, as a client evading a parser that reads only
// the first record would.
type fragmentingConn struct {
	net.Conn
	size int
	done bool
}

func (c *fragmentingConn) Write(p []byte) (int, error) {
	if c.done || len(p) < 5 || p[0] != 0x16 {
		return c.Conn.Write(p)
	}
	c.done = true
	n := int(p[3])<<8 | int(p[4])
	if len(p) < 5+n {
		return c.Conn.Write(p)
	}
	var out []byte
	for body := p[5 : 5+n]; len(body) > 0; {
		k := min(c.size, len(body))
		out = append(out, 0x16, p[1], p[2], byte(k>>8), byte(k))
		out = append(out, body[:k]...)
		body = body[k:]
	}
	out = append(out, p[5+n:]...)
	if _, err := c.Conn.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// TestFragmentedClientHello: a ClientHello split over many small records is reassembled before
// its SNI is read: an allowed SNI gets through (and the upstream, which reassembles too,
// completes the handshake), another is refused.
func TestFragmentedClientHello(t *testing.T) {
	for _, tc := range []struct {
		sni  string
		want Reason
	}{{"allowed.example", ReasonAllowed}, {"evil.example", ReasonSNIMismatch}} {
		t.Run(tc.sni, func(t *testing.T) {
			f := newFixture(t, newInternet(t))
			res, br, c := f.send("", connectReq("allowed.example:443"))
			if res.status != http.StatusOK {
				t.Fatalf("CONNECT: %d %q", res.status, res.reason)
			}
			fc := &fragmentingConn{Conn: &bufConn{Conn: c, r: br}, size: 7}
			tc2 := tls.Client(fc, &tls.Config{ServerName: tc.sni, RootCAs: f.in.pool})
			err := tc2.Handshake()
			if err == nil {
				fmt.Fprint(tc2, "GET /frag HTTP/1.1\r\nHost: allowed.example\r\nConnection: close\r\n\r\n")
				var resp *http.Response
				resp, err = http.ReadResponse(bufio.NewReader(tc2), nil)
				if err == nil {
					resp.Body.Close()
				}
			}
			if (err == nil) != (tc.want == ReasonAllowed) {
				t.Errorf("handshake and GET: %v, want success %v", err, tc.want == ReasonAllowed)
			}
			c.Close()
			if rec := f.record(); rec.Reason != tc.want {
				t.Errorf("audit reason %q, want %q", rec.Reason, tc.want)
			}
			if tc.want != ReasonAllowed && f.in.hellos.Load() != 0 {
				t.Error("the upstream received the refused ClientHello")
			}
			if !fc.done {
				t.Error("the ClientHello was not fragmented")
			}
		})
	}
}
