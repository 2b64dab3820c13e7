package scrub

import (
	"bytes"
	"unicode/utf16"
	"unicode/utf8"
)

// jsonMayHoldSecret is mayHoldSecret for a JSON text: an anchor in its
// bytes, or a \u escape of a character that some anchor holds. json.Marshal
// writes no such character as an escape (it escapes control characters,
// <, >, &, U+2028 and U+2029), but JSON may write any character so, and
// "\u0042earer" decodes to an anchor that its bytes do not show.
func jsonMayHoldSecret(raw []byte) bool {
	if rawMayHoldSecret(raw) {
		return true
	}
	for i := 0; ; {
		k := bytes.Index(raw[i:], []byte(`\u`))
		if k < 0 {
			return false
		}
		i += k
		if r, ok := hex4(raw[i:]); ok && r < utf8.RuneSelf && anchorBytes[r] {
			return true // (or an escaped backslash and a "u": taken as an escape all the same)
		}
		i += 2
	}
}

// anchorBytes holds every byte of every rule's anchors.
var anchorBytes = func() (in byteSet) {
	for _, r := range secretRules {
		for _, a := range r.anchors {
			for i := 0; i < len(a); i++ {
				in[a[i]] = true
			}
		}
	}
	return in
}()

// stringsUnchanged reports whether every string of the JSON text raw is
// one scrubValue leaves as it is: a text that Result scrubbed to itself
// (done), or one without an anchor. It scans raw and does not decode it.
// For a Read's structured content (its text again, every tab, newline and
// quote escaped) the decode was most of what scrubStructured cost.
//
// A string with an escape or a byte outside ASCII is unquoted as
// encoding/json decodes it (unquote); a plain one is its own bytes. Object
// keys are looked at too, which only ever sends more to the decoder. False
// is no verdict: the caller decodes and scrubs. Raw that is not JSON is
// returned as it came either way, here or by the decoder's error.
func stringsUnchanged(raw []byte, done map[string]string) bool {
	for i := 0; i < len(raw); i++ {
		if raw[i] != '"' {
			continue // outside a string: a number, a literal or punctuation
		}
		j := closingQuote(raw, i+1)
		if j < 0 {
			return false
		}
		body := raw[i+1 : j]
		i = j
		if bytes.IndexByte(body, '\\') < 0 && isASCII(body) { // a byte past ASCII may be no UTF-8: U+FFFD
			if !unchangedBytes(body, done) {
				return false
			}
			continue
		}
		s, ok := unquote(body)
		if !ok || !unchanged(s, done) {
			return false
		}
	}
	return true
}

// closingQuote returns the index of the quote that ends the JSON string
// whose body starts at from in raw: the first quote after from with an
// even number of backslashes before it. -1 when there is none.
func closingQuote(raw []byte, from int) int {
	for j := from; ; {
		k := bytes.IndexByte(raw[j:], '"')
		if k < 0 {
			return -1
		}
		q, escapes := j+k, 0
		for p := q - 1; p >= from && raw[p] == '\\'; p-- {
			escapes++
		}
		if escapes%2 == 0 {
			return q
		}
		j = q + 1
	}
}

// unchanged reports whether scrubValue leaves the string s as it is.
func unchanged(s string, done map[string]string) bool {
	if scrubbed, ok := done[s]; ok {
		return scrubbed == s
	}
	return !mayHoldSecret(s)
}

// unchangedBytes is unchanged for the string of b, without copying it.
func unchangedBytes(b []byte, done map[string]string) bool {
	if scrubbed, ok := done[string(b)]; ok {
		return scrubbed == string(b)
	}
	return !rawMayHoldSecret(b)
}

// unquote returns the string that body, the bytes between a JSON string's
// quotes, decodes to as encoding/json decodes it: escapes replaced, and
// each byte that is not part of UTF-8 and each lone surrogate escape
// replaced by U+FFFD (FuzzUnquote holds it to json.Unmarshal). ok is false
// for bytes that no JSON string holds: a raw control character or quote,
// an unknown escape.
func unquote(body []byte) (s string, ok bool) {
	out := make([]byte, 0, len(body))
	for i := 0; i < len(body); {
		j := i
		for j < len(body) && ' ' <= body[j] && body[j] < utf8.RuneSelf && body[j] != '\\' && body[j] != '"' {
			j++
		}
		out = append(out, body[i:j]...) // a run of plain ASCII, as it is
		if i = j; i == len(body) {
			break
		}
		c := body[i]
		switch {
		case c == '\\':
			if i+1 >= len(body) {
				return "", false
			}
			e := body[i+1]
			if e == 'u' {
				r, n, ok := unicodeEscape(body[i:])
				if !ok {
					return "", false
				}
				out = utf8.AppendRune(out, r)
				i += n
				continue
			}
			b := simpleEscapes[e]
			if b == 0 {
				return "", false
			}
			out = append(out, b)
			i += 2
		case c == '"' || c < ' ':
			return "", false
		default:
			r, n := utf8.DecodeRune(body[i:]) // utf8.RuneError, 1 for a byte that is not UTF-8
			out = utf8.AppendRune(out, r)
			i += n
		}
	}
	return string(out), true
}

// simpleEscapes are JSON's one-letter escapes, to the byte each stands
// for (0: no such escape).
var simpleEscapes = [256]byte{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}

// unicodeEscape decodes the \uXXXX escape at the start of b, and the one
// after it when the two are a surrogate pair. It returns the rune
// (U+FFFD for a surrogate that is not half of a pair) and the bytes used.
func unicodeEscape(b []byte) (r rune, n int, ok bool) {
	r, ok = hex4(b)
	if !ok {
		return 0, 0, false
	}
	if !utf16.IsSurrogate(r) {
		return r, 6, true
	}
	if low, ok := hex4(b[6:]); ok {
		if pair := utf16.DecodeRune(r, low); pair != utf8.RuneError {
			return pair, 12, true
		}
	}
	return utf8.RuneError, 6, true // the next escape, if any, is read on its own
}

// hex4 decodes b's leading \uXXXX.
func hex4(b []byte) (rune, bool) {
	if len(b) < 6 || b[0] != '\\' || b[1] != 'u' {
		return 0, false
	}
	var r rune
	for _, c := range b[2:6] {
		var d byte
		switch {
		case '0' <= c && c <= '9':
			d = c - '0'
		case 'a' <= c && c <= 'f':
			d = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(d)
	}
	return r, true
}
