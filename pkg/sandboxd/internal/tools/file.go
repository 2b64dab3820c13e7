package tools

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/confine"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/outcap"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/scrub"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/toolcall"
)

const (
	// readDefaultLimit is how many lines Read returns when no limit is given,
	// and the most it returns at once.
	readDefaultLimit = 2000
	// readMaxLineBytes is where Read cuts a long line.
	readMaxLineBytes = 2000
	// editMaxFileBytes is the largest file Edit rewrites.
	editMaxFileBytes = 16 << 20
	// binarySniffBytes is how much of a file is checked for NUL bytes.
	binarySniffBytes = 8000
	// maxReadMarks bounds the read marks kept.
	maxReadMarks = 10000
)

// ReadInput is the input of the Read tool.
type ReadInput struct {
	FilePath string `json:"file_path" jsonschema:"path of the file to read: relative to the workspace, or absolute inside it"`
	Offset   int    `json:"offset,omitempty" jsonschema:"line number to start reading at (1-based); default 1"`
	Limit    int    `json:"limit,omitempty" jsonschema:"number of lines to read; default and maximum 2000"`
}

// ReadOutput is the structured result of the Read tool.
type ReadOutput struct {
	FilePath   string `json:"file_path" jsonschema:"the file read, relative to the workspace"`
	Content    string `json:"content" jsonschema:"the lines read, each prefixed with its line number and a tab"`
	StartLine  int    `json:"start_line" jsonschema:"line number of the first line returned"`
	NumLines   int    `json:"num_lines" jsonschema:"number of lines returned"`
	TotalLines int    `json:"total_lines" jsonschema:"number of lines in the file"`
	Truncated  bool   `json:"truncated,omitempty" jsonschema:"true when lines follow the ones returned or a long line was cut"`
}

// WriteInput is the input of the Write tool.
type WriteInput struct {
	FilePath string `json:"file_path" jsonschema:"path of the file to write: relative to the workspace, or absolute inside it; parent directories are created"`
	Content  string `json:"content" jsonschema:"the complete new content of the file"`
}

// WriteOutput is the structured result of the Write tool.
type WriteOutput struct {
	FilePath string `json:"file_path" jsonschema:"the file written, relative to the workspace"`
	Bytes    int    `json:"bytes" jsonschema:"number of bytes written"`
	Created  bool   `json:"created,omitempty" jsonschema:"true when the file did not exist before"`
	Lint     string `json:"lint,omitempty" jsonschema:"what a check of the file written found (a .go file that does not parse or is not gofmt-clean); the write is done all the same"`
}

// fileStamp is what a read mark remembers of a file.
type fileStamp struct {
	size    int64
	modTime time.Time
}

func stampOf(fi fs.FileInfo) fileStamp { return fileStamp{size: fi.Size(), modTime: fi.ModTime()} }

// readMarks remembers which files were Read, and in what state, so that Write
// and Edit refuse to overwrite a file the model has not seen (or that changed
// since it saw it).
type readMarks struct {
	mu    sync.Mutex
	marks map[string]fileStamp
}

func newReadMarks() *readMarks { return &readMarks{marks: make(map[string]fileStamp)} }

func (m *readMarks) mark(rel string, fi fs.FileInfo) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.marks[rel]; !ok && len(m.marks) >= maxReadMarks {
		for k := range m.marks { // drop an arbitrary mark to stay bounded
			delete(m.marks, k)
			break
		}
	}
	m.marks[rel] = stampOf(fi)
}

// current reports whether rel was read and is unchanged since.
func (m *readMarks) current(rel string, fi fs.FileInfo) (read, unchanged bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.marks[rel]
	if !ok {
		return false, false
	}
	return true, s.size == fi.Size() && s.modTime.Equal(fi.ModTime())
}

// requireRead refuses to change a file that was not read, or that changed
// since it was read.
func (m *readMarks) requireRead(rel string, fi fs.FileInfo, verb string) error {
	read, unchanged := m.current(rel, fi)
	switch {
	case !read:
		return fmt.Errorf("%s exists and has not been Read: Read it before you %s it", rel, verb)
	case !unchanged:
		return fmt.Errorf("%s has changed since it was last Read: Read it again before you %s it", rel, verb)
	}
	return nil
}

// read is the Read tool.
func (tb *Toolbox) read(_ context.Context, in ReadInput) (*mcp.CallToolResult, ReadOutput, error) {
	if in.Offset < 0 {
		return nil, ReadOutput{}, fmt.Errorf("offset must be 1 or more, got %d", in.Offset)
	}
	if in.Limit < 0 {
		return nil, ReadOutput{}, fmt.Errorf("limit must be 1 or more, got %d", in.Limit)
	}
	start := max(in.Offset, 1)
	limit := in.Limit
	if limit == 0 || limit > readDefaultLimit {
		limit = readDefaultLimit
	}
	rel, err := tb.ws.Rel(in.FilePath)
	if err != nil {
		return nil, ReadOutput{}, err
	}
	rel, f, fi, err := tb.ws.OpenFinal(rel)
	if err != nil {
		return nil, ReadOutput{}, err
	}
	defer f.Close()

	br := getFileReader(&stopAtEOF{r: f})
	defer putFileReader(br)
	if head, _ := br.Peek(binarySniffBytes); bytes.IndexByte(head, 0) >= 0 {
		return nil, ReadOutput{}, fmt.Errorf("%s looks binary (it contains NUL bytes): inspect it with Bash (xxd, file) instead", rel)
	}
	var (
		out       strings.Builder
		lineNo    int
		returned  int
		truncated bool
	)
	var scratch []byte
	for {
		line, cut, err := readLine(br, readMaxLineBytes, &scratch)
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, ReadOutput{}, fmt.Errorf("reading %s: %v", rel, err)
		}
		lineNo++
		if lineNo < start {
			continue
		}
		if returned >= limit {
			truncated = true
			continue // keep counting lines
		}
		returned++
		writeLineNumber(&out, lineNo)
		out.Write(line)
		if cut {
			out.WriteString(" [line truncated]")
			truncated = true
		}
		out.WriteByte('\n')
	}
	tb.reads.mark(rel, fi)

	res := ReadOutput{FilePath: rel, Content: out.String(), StartLine: start, NumLines: returned, TotalLines: lineNo, Truncated: truncated}
	text := res.Content
	switch {
	case lineNo == 0:
		text = fmt.Sprintf("(%s is empty)", rel)
	case returned == 0:
		text = fmt.Sprintf("(offset %d is past the end of %s, which has %d lines)", start, rel, lineNo)
	case truncated && start+returned-1 < lineNo:
		text += fmt.Sprintf("(showing lines %d-%d of %d; read on with offset %d)\n", start, start+returned-1, lineNo, start+returned)
	}
	return textResult(text), res, nil
}

// writeLineNumber writes n as cat -n does (fmt's "%6d\t"), without fmt:
// it was a tenth of a small Read's own time.
func writeLineNumber(out *strings.Builder, n int) {
	var buf [20]byte
	digits := strconv.AppendInt(buf[:0], int64(n), 10)
	for range 6 - len(digits) {
		out.WriteByte(' ')
	}
	out.Write(digits)
	out.WriteByte('\t')
}

// readLine reads one line without its newline, keeping at most max bytes of
// it (cut at a UTF-8 boundary) and discarding the rest. It returns io.EOF
// only when no byte was left.
// stopAtEOF reads r until its first end of file, and then ends without
// reading r again: a bufio.Reader hands an end of file on once, and asks
// again (a system call) on the next read, which for a small file is the
// read of its last line after the sniff of its head.
type stopAtEOF struct {
	r   io.Reader
	eof bool
}

func (s *stopAtEOF) Read(p []byte) (int, error) {
	if s.eof {
		return 0, io.EOF
	}
	n, err := s.r.Read(p)
	if err == io.EOF {
		s.eof = true
	}
	return n, err
}

// readLine reads the next line of br without its line ending, at most max
// bytes of it (cut says there were more). The bytes are br's, or
// *scratch's for a line longer than br's buffer or than max: they are good
// until the next read. (A string per line was two allocations per line,
// 2,200 for a Read of a 1,100-line file.)
func readLine(br *bufio.Reader, max int, scratch *[]byte) (line []byte, cut bool, err error) {
	frag, isPrefix, err := br.ReadLine()
	if err != nil {
		return nil, false, err
	}
	if !isPrefix && len(frag) <= max {
		return bytes.TrimSuffix(frag, []byte("\r")), false, nil
	}
	buf := (*scratch)[:0]
	for {
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
		if frag, isPrefix, err = br.ReadLine(); err != nil {
			if err == io.EOF {
				break
			}
			return nil, false, err
		}
	}
	*scratch = buf
	if cut { // not in a rune, nor in a token (half a secret would not be recognised)
		buf = bytes.ToValidUTF8(scrub.TrimTokenEnd(outcap.TrimPartialRune(buf)), nil)
	}
	return bytes.TrimSuffix(buf, []byte("\r")), cut, nil
}

// write is the Write tool.
func (tb *Toolbox) write(ctx context.Context, in WriteInput) (*mcp.CallToolResult, WriteOutput, error) {
	rel, err := tb.ws.Rel(in.FilePath)
	if err != nil {
		return nil, WriteOutput{}, err
	}
	if rel == "." {
		return nil, WriteOutput{}, errors.New("file_path names the workspace directory itself, not a file")
	}
	if rel, err = tb.ws.ResolveFinal(rel); err != nil {
		return nil, WriteOutput{}, err
	}
	mode := fs.FileMode(0o644)
	created := false
	fi, err := tb.ws.Root().Stat(rel)
	switch {
	case err == nil:
		if err := confine.CheckRegular(rel, fi); err != nil {
			return nil, WriteOutput{}, err
		}
		if err := tb.reads.requireRead(rel, fi, "overwrite"); err != nil {
			return nil, WriteOutput{}, err
		}
		mode = fi.Mode().Perm()
	case errors.Is(err, fs.ErrNotExist):
		created = true
		if dir := path.Dir(rel); dir != "." {
			if err := tb.ws.Root().MkdirAll(dir, 0o755); err != nil {
				return nil, WriteOutput{}, tb.ws.Explain(dir, err)
			}
		}
	default:
		return nil, WriteOutput{}, tb.ws.Explain(rel, err)
	}
	data := []byte(in.Content)
	nfi, err := tb.ws.AtomicWrite(rel, data, mode)
	if err != nil {
		return nil, WriteOutput{}, err
	}
	tb.reads.mark(rel, nfi)
	toolcall.RecorderFrom(ctx).FileWritten(rel, data)
	out := WriteOutput{FilePath: rel, Bytes: len(in.Content), Created: created, Lint: lintFeedback(rel, data)}
	verb := "Overwrote"
	if created {
		verb = "Created"
	}
	return textResult(withLint(fmt.Sprintf("%s %s (%d bytes)", verb, rel, out.Bytes), out.Lint)), out, nil
}

// textResult is a successful tool result whose text is what the model reads.
func textResult(text string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}
}
