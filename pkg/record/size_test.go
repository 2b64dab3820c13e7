package record

import (
	"testing"
)

// TestBytesPerToolCall measures what one Read costs the stored record: its tool.call entry as
// sandboxd writes it, chained and signed by the operator (docs/record.md §4 quotes the figure).
func TestBytesPerToolCall(t *testing.T) {
	c, _ := NewChain("6f1c2a4e-0d3b-4c1e-9a57-3b1f0c2d4e5f", testSigner(t, 1))
	e, err := c.Append(Entry{Time: FormatTime(t0), Source: SourceSandboxd, Boot: "0123456789abcdef", SourceSeq: 1234,
		Kind: KindToolCall, Call: 617, Tool: "Read", ArgsSHA256: SumHex([]byte(`{"file_path":"pkg/a/b.go"}`)), Status: StatusOK, DurationMS: 2})
	if err != nil {
		t.Fatal(err)
	}
	line, _ := e.Line()
	n := len(line) + 1
	t.Logf("a Read's tool.call entry: %d bytes stored (%s)", n, line)
	if n > 640 {
		t.Errorf("a Read costs the record %d bytes, more than the 640 docs/record.md allows for", n)
	}
}
