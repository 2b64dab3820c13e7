package outcap

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// TestBuffer: the first and last halves kept, what is between counted,
// and a token that a cut splits dropped whole.
func TestBuffer(t *testing.T) {
	tests := []struct {
		name   string
		writes []string
		want   string
	}{
		{name: "under the cap", writes: []string{"ab", "cd"}, want: "abcd"},
		{name: "exactly the cap", writes: []string{"abcdefgh"}, want: "abcdefgh"},
		{name: "one big write", writes: []string{"abc defghi jkl"}, want: "abc |6| jkl"},
		{name: "many small writes", writes: strings.Split("abc de fghi jk", ""), want: "abc |7| jk"},
		{name: "a write longer than the tail", writes: []string{"ab cdef", "0123 56789"}, want: "ab |14|"},
		{name: "cuts between tokens", writes: []string{"abc d", "ef ", "ghi"}, want: "abc |3| ghi"},
		// A token the cut splits is dropped whole, on either side: no half of
		// a secret is shown.
		{name: "a token across the head cut", writes: []string{"a ghp_0123456789 b"}, want: "a |14| b"},
		{name: "a token across the tail cut", writes: []string{"a b ghp_0123456789"}, want: "a b |14|"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := New(8)
			for _, w := range tt.writes {
				b.Write([]byte(w))
			}
			got := b.String()
			if head, rest, ok := strings.Cut(got, "\n[... "); ok {
				n, tail, _ := strings.Cut(rest, " bytes")
				got = head + "|" + n + "|" + tail[strings.LastIndex(tail, "\n")+1:]
			}
			if got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

// TestPartialRunes: the cuts keep whole UTF-8 sequences only.
func TestPartialRunes(t *testing.T) {
	const s = "aé€😀" // 1, 2, 3 and 4 bytes
	for n := 0; n <= len(s); n++ {
		head := TrimPartialRune([]byte(s[:n]))
		if !utf8.Valid(head) || !strings.HasPrefix(s, string(head)) || n-len(head) > 3 {
			t.Errorf("TrimPartialRune(%q) = %q", s[:n], head)
		}
		if utf8.Valid([]byte(s[:n])) && string(head) != s[:n] {
			t.Errorf("TrimPartialRune(%q) = %q, want it whole", s[:n], head)
		}
		tail := SkipPartialRune([]byte(s[n:]))
		if !utf8.Valid(tail) || !strings.HasSuffix(s, string(tail)) || len(s)-n-len(tail) > 3 {
			t.Errorf("SkipPartialRune(%q) = %q", s[n:], tail)
		}
		if utf8.Valid([]byte(s[n:])) && string(tail) != s[n:] {
			t.Errorf("SkipPartialRune(%q) = %q, want it whole", s[n:], tail)
		}
	}
	// Bytes that are not UTF-8 at all are not a partial rune to cut forever.
	if got := SkipPartialRune([]byte{0x80, 0x80, 0x80, 0x80, 'x'}); len(got) != 2 {
		t.Errorf("SkipPartialRune of four continuation bytes = %q, want at most three skipped", got)
	}
}
