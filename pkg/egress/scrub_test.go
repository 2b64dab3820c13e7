package egress

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/iotest"
)

// TestScrubReaderSplitAcrossReads: a credential that reaches the gateway a byte at a time, or
// split at any point between two reads, is replaced whole; its token after the scheme too; the
// length is kept; the echoes are counted.
func TestScrubReaderSplitAcrossReads(t *testing.T) {
	body := "before " + testSecret + " middle " + strings.TrimPrefix(testSecret, "Bearer ") + " after" + testSecret
	for split := range len(body) + 1 {
		for name, r := range map[string]io.Reader{
			"one byte at a time": iotest.OneByteReader(strings.NewReader(body)),
			"two reads":          io.MultiReader(iotest.OneByteReader(strings.NewReader(body[:split])), strings.NewReader(body[split:])),
		} {
			before := credentialEchoCount(t)
			sc := newScrubber([][]byte{[]byte(testSecret)})
			got, err := io.ReadAll(sc.body(&http.Response{Body: io.NopCloser(r)}))
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(body) || strings.Contains(string(got), "test-secret") {
				t.Fatalf("%s, split at %d: %q", name, split, got)
			}
			if n := credentialEchoCount(t) - before; n < 3 {
				t.Errorf("%s, split at %d: %d echoes counted, want 3", name, split, n)
			}
		}
	}
}

// TestScrubHead: the status line and header values lose the credential, a field named by it
// goes.
func TestScrubHead(t *testing.T) {
	sc := newScrubber([][]byte{[]byte(testSecret)})
	resp := &http.Response{Status: "200 " + testSecret, Header: http.Header{
		"X-Echo": {"a " + testSecret}, "Test-Secret-0123456789": {"x"}, "Other": {"fine"}}}
	sc.head(resp)
	var b strings.Builder
	resp.Header.Write(&b)
	if all := resp.Status + b.String(); strings.Contains(strings.ToLower(all), "test-secret") || resp.Header.Get("Other") != "fine" {
		t.Errorf("scrubbed head: %q", all)
	}
}
