package tools

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/outcap"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/sandboxdtest"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/scrub"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/snapshot"
)

// newTestToolbox returns a toolbox over a fresh workspace, and the
// workspace's path.
func newTestToolbox(t *testing.T) (*Toolbox, string) {
	t.Helper()
	ws := filepath.Join(t.TempDir(), "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	tb, err := NewToolbox(ws)
	if err != nil {
		t.Fatal(err)
	}
	if tb.snaps, err = snapshot.NewStore(filepath.Join(filepath.Dir(ws), "state"), tb.ws); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tb.Close() })
	return tb, ws
}

// resultText returns the text the model reads from a tool result.
func resultText(t *testing.T, res *mcp.CallToolResult) string {
	t.Helper()
	if res == nil {
		t.Fatal("nil result")
	}
	var b strings.Builder
	for _, c := range res.Content {
		tc, ok := c.(*mcp.TextContent)
		if !ok {
			t.Fatalf("content %T is not text", c)
		}
		b.WriteString(tc.Text)
	}
	return b.String()
}

func TestRead(t *testing.T) {
	tb, ws := newTestToolbox(t)
	var lines []string
	for i := 1; i <= 2500; i++ {
		lines = append(lines, fmt.Sprintf("line %d", i))
	}
	sandboxdtest.WriteFile(t, filepath.Join(ws, "big.txt"), strings.Join(lines, "\n")+"\n")
	sandboxdtest.WriteFile(t, filepath.Join(ws, "small.txt"), "alpha\nbeta\r\ngamma") // no final newline
	sandboxdtest.WriteFile(t, filepath.Join(ws, "empty.txt"), "")
	sandboxdtest.WriteFile(t, filepath.Join(ws, "long.txt"), strings.Repeat("é", 1500)+"\nshort\n")
	sandboxdtest.WriteFile(t, filepath.Join(ws, "bin.dat"), "ab\x00cd")

	tests := []struct {
		name     string
		in       ReadInput
		want     ReadOutput
		wantText string // substring of the text the model reads
		wantErr  string
	}{
		{
			name: "whole small file",
			in:   ReadInput{FilePath: "small.txt"},
			want: ReadOutput{FilePath: "small.txt", Content: "     1\talpha\n     2\tbeta\n     3\tgamma\n", StartLine: 1, NumLines: 3, TotalLines: 3},
		},
		{
			name:     "absolute path, offset and limit",
			in:       ReadInput{FilePath: filepath.Join(ws, "small.txt"), Offset: 2, Limit: 1},
			want:     ReadOutput{FilePath: "small.txt", Content: "     2\tbeta\n", StartLine: 2, NumLines: 1, TotalLines: 3, Truncated: true},
			wantText: "read on with offset 3",
		},
		{
			name: "default limit is 2000 lines",
			in:   ReadInput{FilePath: "big.txt"},
			want: ReadOutput{FilePath: "big.txt", StartLine: 1, NumLines: 2000, TotalLines: 2500, Truncated: true},
		},
		{
			name: "limit above 2000 is capped",
			in:   ReadInput{FilePath: "big.txt", Offset: 100, Limit: 5000},
			want: ReadOutput{FilePath: "big.txt", StartLine: 100, NumLines: 2000, TotalLines: 2500, Truncated: true},
		},
		{
			name:     "empty file",
			in:       ReadInput{FilePath: "empty.txt"},
			want:     ReadOutput{FilePath: "empty.txt", StartLine: 1},
			wantText: "is empty",
		},
		{
			name:     "offset past the end",
			in:       ReadInput{FilePath: "small.txt", Offset: 10},
			want:     ReadOutput{FilePath: "small.txt", StartLine: 10, TotalLines: 3},
			wantText: "past the end",
		},
		{
			name:     "long line is cut on a rune boundary",
			in:       ReadInput{FilePath: "long.txt"},
			want:     ReadOutput{FilePath: "long.txt", Content: "     1\t" + strings.Repeat("é", 1000) + " [line truncated]\n     2\tshort\n", StartLine: 1, NumLines: 2, TotalLines: 2, Truncated: true},
			wantText: "[line truncated]",
		},
		{name: "binary", in: ReadInput{FilePath: "bin.dat"}, wantErr: "binary"},
		{name: "missing", in: ReadInput{FilePath: "nope.txt"}, wantErr: "no such file"},
		{name: "directory", in: ReadInput{FilePath: "."}, wantErr: "is a directory"},
		{name: "negative offset", in: ReadInput{FilePath: "small.txt", Offset: -1}, wantErr: "offset"},
		{name: "negative limit", in: ReadInput{FilePath: "small.txt", Limit: -1}, wantErr: "limit"},
		{name: "outside", in: ReadInput{FilePath: "/etc/hostname"}, wantErr: "outside the workspace"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, got, err := tb.read(t.Context(), tt.in)
			if tt.wantErr != "" {
				sandboxdtest.WantErrContaining(t, err, tt.wantErr)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.want.Content == "" && got.NumLines > 0 {
				got.Content = "" // only the counts are checked for big files
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("output (-want +got):\n%s", diff)
			}
			if text := resultText(t, res); !strings.Contains(text, tt.wantText) {
				t.Errorf("text %q does not contain %q", text, tt.wantText)
			}
		})
	}
}

func TestReadBigFileNumbering(t *testing.T) {
	tb, ws := newTestToolbox(t)
	sandboxdtest.WriteFile(t, filepath.Join(ws, "f"), "a\nb\nc\nd\n")
	_, got, err := tb.read(t.Context(), ReadInput{FilePath: "f", Offset: 3})
	if err != nil {
		t.Fatal(err)
	}
	if want := "     3\tc\n     4\td\n"; got.Content != want {
		t.Fatalf("content = %q, want %q", got.Content, want)
	}
}

func TestReadRefusesFIFOWithoutBlocking(t *testing.T) {
	tb, ws := newTestToolbox(t)
	if err := syscall.Mkfifo(filepath.Join(ws, "pipe"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err := tb.read(t.Context(), ReadInput{FilePath: "pipe"})
	sandboxdtest.WantErrContaining(t, err, "FIFO")
}

func TestWrite(t *testing.T) {
	tb, ws := newTestToolbox(t)

	// A new file, with parent directories.
	res, out, err := tb.write(t.Context(), WriteInput{FilePath: "src/pkg/new.go", Content: "package pkg\n"})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(WriteOutput{FilePath: "src/pkg/new.go", Bytes: 12, Created: true}, out); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}
	if text := resultText(t, res); !strings.Contains(text, "Created src/pkg/new.go") {
		t.Errorf("text = %q", text)
	}
	sandboxdtest.CheckFile(t, filepath.Join(ws, "src/pkg/new.go"), "package pkg\n")

	// Writing it again needs no Read: Write's own write counts as seen.
	if _, _, err := tb.write(t.Context(), WriteInput{FilePath: "src/pkg/new.go", Content: "package pkg // v2\n"}); err != nil {
		t.Fatalf("rewrite of a file this sandboxd wrote: %v", err)
	}

	// An existing file that was never Read.
	sandboxdtest.WriteFile(t, filepath.Join(ws, "old.txt"), "old\n")
	if err := os.Chmod(filepath.Join(ws, "old.txt"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, err = tb.write(t.Context(), WriteInput{FilePath: "old.txt", Content: "new\n"})
	sandboxdtest.WantErrContaining(t, err, "has not been Read")
	sandboxdtest.CheckFile(t, filepath.Join(ws, "old.txt"), "old\n")

	// After a Read it can be overwritten; the mode is kept.
	if _, _, err := tb.read(t.Context(), ReadInput{FilePath: "old.txt"}); err != nil {
		t.Fatal(err)
	}
	_, out, err = tb.write(t.Context(), WriteInput{FilePath: "old.txt", Content: "new\n"})
	if err != nil {
		t.Fatal(err)
	}
	if out.Created {
		t.Error("Created is set for an overwrite")
	}
	sandboxdtest.CheckFile(t, filepath.Join(ws, "old.txt"), "new\n")
	if fi, err := os.Stat(filepath.Join(ws, "old.txt")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("mode after overwrite = %v, %v; want 0600", fi.Mode().Perm(), err)
	}

	// Changed behind our back since the Read: refused.
	later := time.Now().Add(time.Hour)
	sandboxdtest.WriteFile(t, filepath.Join(ws, "old.txt"), "changed by someone else\n")
	if err := os.Chtimes(filepath.Join(ws, "old.txt"), later, later); err != nil {
		t.Fatal(err)
	}
	_, _, err = tb.write(t.Context(), WriteInput{FilePath: "old.txt", Content: "mine\n"})
	sandboxdtest.WantErrContaining(t, err, "changed since it was last Read")

	// No temporary files are left behind.
	entries, err := os.ReadDir(ws)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.Contains(e.Name(), ".airlock-") {
			t.Errorf("temporary file %s left in the workspace", e.Name())
		}
	}
}

func TestWriteErrors(t *testing.T) {
	tb, ws := newTestToolbox(t)
	outside := filepath.Dir(ws)
	sandboxdtest.WriteFile(t, filepath.Join(outside, "victim"), "untouched\n")
	sandboxdtest.MustSymlink(t, "../victim", filepath.Join(ws, "escape"))
	sandboxdtest.MustSymlink(t, "..", filepath.Join(ws, "updir"))
	sandboxdtest.WriteFile(t, filepath.Join(ws, "afile"), "x")
	if err := syscall.Mkfifo(filepath.Join(ws, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path, wantErr string
	}{
		{name: "workspace itself", path: ".", wantErr: "workspace directory"},
		{name: "dotdot", path: "../victim", wantErr: "leaves the workspace"},
		{name: "absolute outside", path: filepath.Join(outside, "victim"), wantErr: "outside the workspace"},
		{name: "symlink out", path: "escape", wantErr: "refused"},
		{name: "symlinked parent out", path: "updir/victim", wantErr: "refused"},
		{name: "new file under symlinked parent out", path: "updir/newfile", wantErr: "refused"},
		{name: "parent is a file", path: "afile/child", wantErr: "not a directory"},
		{name: "fifo", path: "fifo", wantErr: "FIFO"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := tb.write(t.Context(), WriteInput{FilePath: tt.path, Content: "pwned\n"})
			sandboxdtest.WantErrContaining(t, err, tt.wantErr)
		})
	}
	sandboxdtest.CheckFile(t, filepath.Join(outside, "victim"), "untouched\n")
	if _, err := os.Stat(filepath.Join(outside, "newfile")); !os.IsNotExist(err) {
		t.Errorf("a file was created outside the workspace: %v", err)
	}
}

func TestWriteThroughSymlinkInside(t *testing.T) {
	tb, ws := newTestToolbox(t)
	sandboxdtest.WriteFile(t, filepath.Join(ws, "real.txt"), "v1\n")
	sandboxdtest.MustSymlink(t, "real.txt", filepath.Join(ws, "alias.txt"))
	if _, _, err := tb.read(t.Context(), ReadInput{FilePath: "alias.txt"}); err != nil {
		t.Fatal(err)
	}
	_, out, err := tb.write(t.Context(), WriteInput{FilePath: "alias.txt", Content: "v2\n"})
	if err != nil {
		t.Fatal(err)
	}
	if out.FilePath != "real.txt" {
		t.Errorf("wrote %s, want real.txt", out.FilePath)
	}
	sandboxdtest.CheckFile(t, filepath.Join(ws, "real.txt"), "v2\n")
	if fi, err := os.Lstat(filepath.Join(ws, "alias.txt")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("alias.txt is no longer a symlink: %v %v", fi, err)
	}
}

func TestEdit(t *testing.T) {
	tb, ws := newTestToolbox(t)
	const src = "func a() {}\nfunc b() {}\nfunc a() {}\n"
	sandboxdtest.WriteFile(t, filepath.Join(ws, "x.go"), src)

	_, _, err := tb.edit(t.Context(), EditInput{FilePath: "x.go", OldString: "b()", NewString: "c()"})
	sandboxdtest.WantErrContaining(t, err, "has not been Read")

	if _, _, err := tb.read(t.Context(), ReadInput{FilePath: "x.go"}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		in      EditInput
		wantErr string
	}{
		{name: "no match", in: EditInput{FilePath: "x.go", OldString: "zzz", NewString: "y"}, wantErr: "not found"},
		{name: "ambiguous", in: EditInput{FilePath: "x.go", OldString: "func a() {}", NewString: "y"}, wantErr: "occurs 2 times"},
		{name: "same strings", in: EditInput{FilePath: "x.go", OldString: "b", NewString: "b"}, wantErr: "the same"},
		{name: "empty old", in: EditInput{FilePath: "x.go", OldString: "", NewString: "b"}, wantErr: "old_string is empty"},
		{name: "missing file", in: EditInput{FilePath: "nope.go", OldString: "a", NewString: "b"}, wantErr: "no such file"},
		{name: "outside", in: EditInput{FilePath: "../x.go", OldString: "a", NewString: "b"}, wantErr: "leaves the workspace"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := tb.edit(t.Context(), tt.in)
			sandboxdtest.WantErrContaining(t, err, tt.wantErr)
		})
	}
	sandboxdtest.CheckFile(t, filepath.Join(ws, "x.go"), src)

	// A unique match.
	_, out, err := tb.edit(t.Context(), EditInput{FilePath: "x.go", OldString: "func b() {}", NewString: "func c() {}"})
	if err != nil {
		t.Fatal(err)
	}
	if out.Replacements != 1 {
		t.Errorf("replacements = %d, want 1", out.Replacements)
	}
	// A second edit needs no new Read: the first edit's write is seen.
	_, out, err = tb.edit(t.Context(), EditInput{FilePath: "x.go", OldString: "func a() {}", NewString: "func z() {}", ReplaceAll: true})
	if err != nil {
		t.Fatal(err)
	}
	if out.Replacements != 2 {
		t.Errorf("replacements = %d, want 2", out.Replacements)
	}
	sandboxdtest.CheckFile(t, filepath.Join(ws, "x.go"), "func z() {}\nfunc c() {}\nfunc z() {}\n")
}

func TestWriteLineNumberIsCatN(t *testing.T) {
	for _, n := range []int{1, 9, 10, 99999, 100000, 999999, 1000000, 12345678} {
		var got strings.Builder
		writeLineNumber(&got, n)
		if want := fmt.Sprintf("%6d\t", n); got.String() != want {
			t.Errorf("writeLineNumber(%d) = %q, want %q", n, got.String(), want)
		}
	}
}

// countingReader counts the reads of what it wraps.
type countingReader struct {
	r     io.Reader
	reads int
}

func (c *countingReader) Read(p []byte) (int, error) { c.reads++; return c.r.Read(p) }

// TestStopAtEOF checks that stopAtEOF, which Read wraps a file in, asks
// the file for nothing after its first end of file (each ask is a system
// call), read as Read reads (a sniff of the head, then lines through the
// pooled bufio.Reader, which asks again after handing an end of file on),
// and still gives every byte.
func TestStopAtEOF(t *testing.T) {
	for _, text := range []string{"", "one\n", "one\ntwo", strings.Repeat("a line\n", 3000)} {
		src := &countingReader{r: strings.NewReader(text)}
		br := getFileReader(&stopAtEOF{r: src})
		_, _ = br.Peek(binarySniffBytes) // as Read sniffs the head
		var got strings.Builder
		var scratch []byte
		for {
			line, _, err := readLine(br, readMaxLineBytes, &scratch)
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			got.Write(line)
			got.WriteByte('\n')
		}
		atEOF := src.reads
		for range 3 {
			if _, _, err := readLine(br, readMaxLineBytes, &scratch); err != io.EOF {
				t.Errorf("%d bytes: a read after the end = %v, want io.EOF", len(text), err)
			}
		}
		putFileReader(br)
		if src.reads != atEOF {
			t.Errorf("%d bytes: the file was read %d times after its end, want 0", len(text), src.reads-atEOF)
		}
		if want := strings.TrimSuffix(text, "\n"); strings.TrimSuffix(got.String(), "\n") != want {
			t.Errorf("%d bytes: read %d bytes that differ from the text", len(text), got.Len())
		}
	}
}

// readLineAsBefore is readLine as it was, a string per line: the reference
// TestReadLineAsBefore holds readLine to.
func readLineAsBefore(br *bufio.Reader, max int) (line string, cut bool, err error) {
	var buf []byte
	read := false
	for {
		frag, isPrefix, err := br.ReadLine()
		if err != nil {
			if err == io.EOF && read {
				break
			}
			return "", false, err
		}
		read = true
		if room := max - len(buf); room > 0 {
			if len(frag) > room {
				frag, cut = frag[:room], true
			}
			buf = append(buf, frag...)
		} else if len(frag) > 0 {
			cut = true
		}
		if !isPrefix {
			break
		}
	}
	if cut {
		buf = bytes.ToValidUTF8(scrub.TrimTokenEnd(outcap.TrimPartialRune(buf)), nil)
	}
	return strings.TrimSuffix(string(buf), "\r"), cut, nil
}

// TestReadLineAsBefore: readLine, which hands out br's bytes, reads every
// line as the string-per-line version did, for lines shorter and longer
// than the reader's buffer and than the cap, with CRLF, runes and tokens
// at the cut, and no final newline.
func TestReadLineAsBefore(t *testing.T) {
	parts := []string{"a", "token_ABCdef123", "é", "😀", " ", "\t", "\r", "\r\n", "\n", "xyz-", "\n\n"}
	rng := rand.New(rand.NewPCG(26, 3))
	for range 2000 {
		var text strings.Builder
		for range rng.IntN(60) {
			text.WriteString(parts[rng.IntN(len(parts))])
		}
		size := 16 + rng.IntN(48) // bufio's least is 16: lines longer than it come in fragments
		max := 1 + rng.IntN(40)
		newR := bufio.NewReaderSize(strings.NewReader(text.String()), size)
		oldR := bufio.NewReaderSize(strings.NewReader(text.String()), size)
		var scratch []byte
		for n := 0; ; n++ {
			line, cut, err := readLine(newR, max, &scratch)
			want, wantCut, wantErr := readLineAsBefore(oldR, max)
			if string(line) != want || cut != wantCut || err != wantErr {
				t.Fatalf("text %q (buffer %d, cap %d), line %d: got %q %v %v, want %q %v %v",
					text.String(), size, max, n, line, cut, err, want, wantCut, wantErr)
			}
			if err != nil {
				break
			}
		}
	}
}
