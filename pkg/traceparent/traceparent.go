// Package traceparent is the W3C Trace Context header airlock accepts (docs/record.md §1): a
// parser that takes only the one form of version 00 and ignores everything else (a malformed
// header is a new root, never an error), a span id drawn at random, and the span id a proxy
// URL's user name carries to the egress gateway. Pure, standard library only: sandboxd, which
// never exports, imports it, and so does the gateway.
package traceparent

import (
	"crypto/rand"
	"encoding/hex"
	"strings"
)

// Header is the W3C header name; Env the variable sandboxd gives a process it starts.
const (
	Header      = "traceparent"
	StateHeader = "tracestate"
	Env         = "TRACEPARENT"
	// MaxLength is the length of a version 00 traceparent.
	MaxLength = 55
)

// TraceID and SpanID are W3C ids; the zero value of each is invalid.
type (
	TraceID [16]byte
	SpanID  [8]byte
)

func (t TraceID) String() string { return hex.EncodeToString(t[:]) }
func (s SpanID) String() string  { return hex.EncodeToString(s[:]) }

// IsValid reports whether the id is not all zeros.
func (t TraceID) IsValid() bool { return t != TraceID{} }

// IsValid reports whether the id is not all zeros.
func (s SpanID) IsValid() bool { return s != SpanID{} }

// Parent is a parsed traceparent: the trace, the span that is the parent of what follows, and
// whether it was sampled.
type Parent struct {
	Trace   TraceID
	Span    SpanID
	Sampled bool
}

// Parse reads a traceparent header. It takes "00-<32 hex>-<16 hex>-<2 hex>" with lower-case hex
// and non-zero ids only; a higher version is read by its first four fields as the spec asks, if
// what follows them starts with "-". Anything else is not a parent (ok false): the caller starts
// a new root.
func Parse(s string) (p Parent, ok bool) {
	if len(s) < MaxLength || len(s) > 512 { // a bound on what a later version may add
		return Parent{}, false
	}
	if s[2] != '-' || s[35] != '-' || s[52] != '-' {
		return Parent{}, false
	}
	version, ok := hexByte(s[0:2])
	if !ok || version == 0xff || (version == 0 && len(s) != MaxLength) || (version != 0 && len(s) > MaxLength && s[MaxLength] != '-') {
		return Parent{}, false
	}
	if !lowerHex(s[3:35], p.Trace[:]) || !lowerHex(s[36:52], p.Span[:]) {
		return Parent{}, false
	}
	flags, ok := hexByte(s[53:55])
	if !ok || !p.Trace.IsValid() || !p.Span.IsValid() {
		return Parent{}, false
	}
	p.Sampled = flags&1 == 1
	return p, true
}

// String is the version 00 header of p.
func (p Parent) String() string {
	flags := "00"
	if p.Sampled {
		flags = "01"
	}
	return "00-" + p.Trace.String() + "-" + p.Span.String() + "-" + flags
}

// Child is p with span as the parent of what follows (a span of p's trace, started by the
// holder of p).
func (p Parent) Child(span SpanID) Parent {
	return Parent{Trace: p.Trace, Span: span, Sampled: p.Sampled}
}

// NewSpanID draws a random, non-zero span id.
func NewSpanID() SpanID {
	var s SpanID
	for !s.IsValid() {
		_, _ = rand.Read(s[:])
	}
	return s
}

// NewTraceID draws a random, non-zero trace id.
func NewTraceID() TraceID {
	var t TraceID
	for !t.IsValid() {
		_, _ = rand.Read(t[:])
	}
	return t
}

// ParseSpanID reads 16 lower-case hex digits of a non-zero span id.
func ParseSpanID(s string) (SpanID, bool) {
	var id SpanID
	if len(s) != 16 || !lowerHex(s, id[:]) || !id.IsValid() {
		return SpanID{}, false
	}
	return id, true
}

// ParseTraceID reads 32 lower-case hex digits of a non-zero trace id.
func ParseTraceID(s string) (TraceID, bool) {
	var id TraceID
	if len(s) != 32 || !lowerHex(s, id[:]) || !id.IsValid() {
		return TraceID{}, false
	}
	return id, true
}

// proxyUserPrefix starts a proxy user name that carries a span. A credential's own user name
// starts with its namespace, a DNS label ([a-z0-9-]): it never starts with "_", so the two forms
// are disjoint and no credential's user name is ever read as a span (docs/security.md).
const proxyUserPrefix = "_"

// proxyUserPrefixLength is the length of what ProxyUser puts before the credential's user name:
// "_", 32 hex digits, "-", 16 hex digits, ".".
const proxyUserPrefixLength = len(proxyUserPrefix) + 32 + 1 + 16 + 1

// ProxyUser is the user name of a proxy URL that names p's trace and span before the
// credential's own user name: "_<32 hex trace>-<16 hex span>.<user>".
func ProxyUser(p Parent, user string) string {
	return proxyUserPrefix + p.Trace.String() + "-" + p.Span.String() + "." + user
}

// SplitProxyUser takes a proxy user name apart. A user name that does not start with "_" is a
// credential's own: it is returned unchanged, ok false. One that does must be exactly what
// ProxyUser writes (valid lower-case ids, the dot, a non-empty rest); then the rest is the
// credential's user name and p the span it named. Otherwise valid is false: the caller refuses
// the credential as it refuses any user name that names no claim (it never tries the user name
// whole, nor a part of it). The span is attribution only: it never decides which claim the
// credential selects, which is the rest's and the password's alone.
func SplitProxyUser(user string) (rest string, p Parent, ok, valid bool) {
	if !strings.HasPrefix(user, proxyUserPrefix) {
		return user, Parent{}, false, true
	}
	if len(user) <= proxyUserPrefixLength || user[len(proxyUserPrefix)+32] != '-' || user[proxyUserPrefixLength-1] != '.' {
		return "", Parent{}, false, false
	}
	trace, ok1 := ParseTraceID(user[len(proxyUserPrefix) : len(proxyUserPrefix)+32])
	span, ok2 := ParseSpanID(user[len(proxyUserPrefix)+33 : proxyUserPrefixLength-1])
	if !ok1 || !ok2 {
		return "", Parent{}, false, false
	}
	return user[proxyUserPrefixLength:], Parent{Trace: trace, Span: span, Sampled: true}, true, true
}

func hexByte(s string) (byte, bool) {
	var b [1]byte
	if !lowerHex(s, b[:]) {
		return 0, false
	}
	return b[0], true
}

// lowerHex decodes s, lower-case hex digits only, into dst (len(s) == 2*len(dst)).
func lowerHex(s string, dst []byte) bool {
	if len(s) != 2*len(dst) {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	_, err := hex.Decode(dst, []byte(s))
	return err == nil
}
