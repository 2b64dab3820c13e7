package egress

import (
	"bytes"
	"io"
	"net/http"
	"slices"
)

// A scrubber replaces the credentials of a terminated tunnel in what the gateway relays back to
// the sandbox: an upstream that echoes a request (a TRACE, a debugging endpoint, an error page
// that quotes the request) would otherwise hand the credential to the sandbox. It replaces each
// credential's exact bytes, and its token after the scheme ("Bearer <token>"), with as many
// '*', so that a Content-Length still holds; in the status line, the header fields (a field
// whose name holds one, in any case, is dropped), the body (as it streams: a match split across reads is
// caught) and the trailers. Each replacement counts in airlock_egress_credential_echoes_total.
// What it cannot see is not caught: a credential the upstream transforms (encodes, escapes,
// compresses; the gateway asks for an identity encoding with every credential it injects).
type scrubber struct {
	// secrets are the byte strings to replace, longest first.
	secrets [][]byte
	longest int
}

func newScrubber(values [][]byte) *scrubber {
	sc := &scrubber{}
	for _, v := range values {
		sc.secrets = append(sc.secrets, v)
		if scheme, token, ok := bytes.Cut(v, []byte(" ")); ok && len(scheme) > 0 && len(token) >= 8 {
			sc.secrets = append(sc.secrets, bytes.TrimSpace(token))
		}
	}
	slices.SortFunc(sc.secrets, func(a, b []byte) int { return len(b) - len(a) })
	if len(sc.secrets) > 0 {
		sc.longest = len(sc.secrets[0])
	}
	return sc
}

// replace overwrites every credential in b and returns how many it found.
func (sc *scrubber) replace(b []byte) int {
	n := 0
	for _, s := range sc.secrets {
		for from := 0; ; {
			i := bytes.Index(b[from:], s)
			if i < 0 {
				break
			}
			for j := range s {
				b[from+i+j] = '*'
			}
			from += i + len(s)
			n++
		}
	}
	return n
}

// text returns s with every credential replaced.
func (sc *scrubber) text(s string) string {
	if len(sc.secrets) == 0 || len(s) < len(sc.secrets[len(sc.secrets)-1]) {
		return s
	}
	b := []byte(s)
	if n := sc.replace(b); n > 0 {
		credentialEchoes.Add(float64(n))
		return string(b)
	}
	return s
}

// fields replaces the credentials in h's values, and drops a field whose name holds one.
func (sc *scrubber) fields(h http.Header) {
	for k, vs := range h {
		if sc.inName(k) {
			delete(h, k)
			continue
		}
		for i, v := range vs {
			vs[i] = sc.text(v)
		}
	}
}

// inName reports whether a field name holds a credential, in any case (names are sent in their
// canonical case, not as the upstream wrote them).
func (sc *scrubber) inName(k string) bool {
	lk := bytes.ToLower([]byte(k))
	for _, s := range sc.secrets {
		if bytes.Contains(lk, bytes.ToLower(s)) {
			credentialEchoes.Inc()
			return true
		}
	}
	return false
}

// head replaces the credentials in an answer's status line and header fields.
func (sc *scrubber) head(resp *http.Response) {
	if len(sc.secrets) == 0 {
		return
	}
	resp.Status = sc.text(resp.Status)
	sc.fields(resp.Header)
}

// body returns resp's body with the credentials replaced as it is read; its trailers are
// scrubbed once it has been read to its end (they are known only then).
func (sc *scrubber) body(resp *http.Response) io.ReadCloser {
	if len(sc.secrets) == 0 {
		return resp.Body
	}
	return &scrubReader{sc: sc, r: resp.Body, atEOF: func() { sc.fields(resp.Trailer) }}
}

// scrubReader streams r with the credentials replaced: it holds back the last longest-1 bytes
// read until more come (or the end), so that a credential split across reads is replaced whole.
type scrubReader struct {
	sc    *scrubber
	r     io.ReadCloser
	atEOF func()
	// pending is read and scrubbed but may begin a credential; ready may be returned.
	pending, ready []byte
	err            error
	buf            [32 << 10]byte
}

func (s *scrubReader) Read(p []byte) (int, error) {
	for len(s.ready) == 0 {
		if s.err != nil {
			return 0, s.err
		}
		n, err := s.r.Read(s.buf[:])
		s.pending = append(s.pending, s.buf[:n]...)
		if c := s.sc.replace(s.pending); c > 0 {
			credentialEchoes.Add(float64(c))
		}
		if err != nil {
			s.ready, s.pending, s.err = s.pending, nil, err
			if err == io.EOF && s.atEOF != nil {
				s.atEOF()
			}
			continue
		}
		if keep := s.sc.longest - 1; len(s.pending) > keep {
			cut := len(s.pending) - keep
			s.ready = append(s.ready[:0], s.pending[:cut]...)
			s.pending = append(s.pending[:0], s.pending[cut:]...)
		}
	}
	n := copy(p, s.ready)
	s.ready = s.ready[n:]
	return n, nil
}

func (s *scrubReader) Close() error { return s.r.Close() }
