// Package outcap caps the output of commands: a Buffer keeps
// the first and last halves of a command's output and says how much it
// elided, never half a token (a secret cut in two would be shown and not
// be recognised); the rune helpers cut text on whole UTF-8 sequences.
package outcap

import (
	"fmt"
	"sync"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/scrub"
)

// Buffer keeps the first and last halves of at most limit bytes of
// output and counts what it drops in between.
type Buffer struct {
	mu     sync.Mutex
	limit  int
	head   []byte
	tail   []byte // a ring of the last limit/2 bytes once head is full
	pos    int    // next write position in tail, once it is full
	full   bool   // tail has wrapped
	total  int64
	elided int64
	// afterHead is the first byte that did not fit in head, and lastElided
	// the newest byte elided (the one before the tail's oldest): they say
	// whether a cut split a token.
	afterHead, lastElided byte
	hasAfterHead          bool
}

func New(limit int) *Buffer { return &Buffer{limit: limit} }

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := len(p)
	b.total += int64(n)
	headCap := b.limit / 2
	if room := headCap - len(b.head); room > 0 {
		k := min(room, len(p))
		b.head = append(b.head, p[:k]...)
		p = p[k:]
	}
	tailCap := b.limit - headCap
	if len(p) > 0 && !b.hasAfterHead {
		b.afterHead, b.hasAfterHead = p[0], true
	}
	for len(p) > 0 {
		if !b.full {
			k := min(tailCap-len(b.tail), len(p))
			b.tail = append(b.tail, p[:k]...)
			p = p[k:]
			if len(b.tail) == tailCap {
				b.full = true
				b.pos = 0
			}
			continue
		}
		if len(p) >= tailCap { // only the last tailCap bytes of p can stay
			b.elided += int64(tailCap) + int64(len(p)-tailCap)
			if len(p) > tailCap {
				b.lastElided = p[len(p)-tailCap-1]
			} else {
				b.lastElided = b.tail[(b.pos+tailCap-1)%tailCap]
			}
			p = p[len(p)-tailCap:]
			copy(b.tail, p)
			b.pos = 0
			p = nil
			continue
		}
		k := min(tailCap-b.pos, len(p))
		b.elided += int64(k)
		b.lastElided = b.tail[b.pos+k-1]
		copy(b.tail[b.pos:], p[:k])
		b.pos = (b.pos + k) % tailCap
		p = p[k:]
	}
	return n, nil
}

// String returns the output kept, with a line that says how much was elided.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	tail := b.tail
	if b.full && b.pos > 0 {
		tail = append(append([]byte{}, b.tail[b.pos:]...), b.tail[:b.pos]...)
	}
	if b.elided == 0 {
		return string(b.head) + string(tail)
	}
	// Neither half ends in a token the cut split: half a secret would be
	// shown, and not be recognised as one.
	head := TrimPartialRune(b.head)
	if scrub.IsTokenByte(b.afterHead) {
		head = scrub.TrimTokenEnd(head)
	}
	kept := SkipPartialRune(tail)
	if scrub.IsTokenByte(b.lastElided) {
		kept = scrub.TrimTokenStart(kept)
	}
	elided := b.elided + int64(len(b.head)-len(head)) + int64(len(tail)-len(kept))
	tail = kept
	return string(head) +
		fmt.Sprintf("\n[... %d bytes of output elided: output is capped at %d KiB (first and last halves kept); redirect it to a file and Read or Grep that ...]\n", elided, b.limit>>10) +
		string(tail)
}

// SkipPartialRune drops UTF-8 continuation bytes at the start of b.
func SkipPartialRune(b []byte) []byte {
	for i := 0; i < 3 && len(b) > 0 && b[0]&0xC0 == 0x80; i++ {
		b = b[1:]
	}
	return b
}

// TrimPartialRune drops an incomplete UTF-8 sequence at the end of b.
func TrimPartialRune(b []byte) []byte {
	for i := len(b) - 1; i >= 0 && i >= len(b)-3; i-- {
		c := b[i]
		if c < 0x80 {
			return b
		}
		if c >= 0xC0 { // a leading byte: keep it only if its sequence is whole
			need := 2
			switch {
			case c >= 0xF0:
				need = 4
			case c >= 0xE0:
				need = 3
			}
			if len(b)-i < need {
				return b[:i]
			}
			return b
		}
	}
	return b
}
