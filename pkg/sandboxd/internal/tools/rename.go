package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/toolcall"
)

// rename_symbol: the language server computes the edits; sandboxd applies
// them to every file or to none. Every file is resolved like Edit resolves
// its file (inside the workspace, no symbolic link out of it, a regular
// file); a rename that would touch anything else, or create, rename or
// delete files, is refused before anything is written.

// renamedFile is one file of a rename, with its new content.
type renamedFile struct {
	rel     string
	before  fs.FileInfo
	orig    string // the content before the rename
	content string
	edits   int
	tmp     string
}

// renameSymbol is the rename_symbol tool.
func (tb *Toolbox) renameSymbol(ctx context.Context, in RenameSymbolInput) (*mcp.CallToolResult, RenameSymbolOutput, error) {
	name := strings.TrimSpace(in.NewName)
	if name == "" || len(name) > 256 || strings.ContainsAny(name, "\x00\r\n") {
		return nil, RenameSymbolOutput{}, errors.New("new_name must be one line, 1 to 256 bytes")
	}
	t, err := tb.resolveTarget(in.NavPositionInput)
	if err != nil {
		return nil, RenameSymbolOutput{}, err
	}
	var raw json.RawMessage
	err = tb.nav.with(ctx, t.spec, func(ctx context.Context, s *langServer) error {
		return s.request(ctx, tb.ws, t, "textDocument/rename", map[string]any{"newName": name}, &raw)
	})
	if err != nil {
		return nil, RenameSymbolOutput{}, fmt.Errorf("%v; nothing was written", err)
	}
	edits, err := decodeWorkspaceEdit(raw)
	if err != nil {
		return nil, RenameSymbolOutput{}, fmt.Errorf("%v; nothing was written", err)
	}
	files, err := tb.prepareRename(edits)
	if err != nil {
		return nil, RenameSymbolOutput{}, fmt.Errorf("%v; nothing was written", err)
	}
	if err := tb.commitRename(ctx, files); err != nil {
		return nil, RenameSymbolOutput{}, err
	}
	out := RenameSymbolOutput{NewName: name, Files: []RenamedFile{}}
	var b strings.Builder
	for _, f := range files {
		out.Files = append(out.Files, RenamedFile{FilePath: f.rel, Edits: f.edits})
		out.Edits += f.edits
		fmt.Fprintf(&b, "  %s (%d)\n", f.rel, f.edits)
	}
	if len(files) == 0 {
		return textResult("The language server proposed no change: nothing was written."), out, nil
	}
	return textResult(fmt.Sprintf("Renamed to %s: %d edit(s) in %d file(s):\n%s", name, out.Edits, len(files), b.String())), out, nil
}

// decodeWorkspaceEdit reads a WorkspaceEdit into text edits by URI.
// Creating, renaming or deleting files is refused.
func decodeWorkspaceEdit(raw json.RawMessage) (map[string][]lspTextEdit, error) {
	var we struct {
		Changes         map[string][]lspTextEdit `json:"changes"`
		DocumentChanges []json.RawMessage        `json:"documentChanges"`
	}
	if len(raw) == 0 || string(raw) == "null" {
		return map[string][]lspTextEdit{}, nil
	}
	if err := json.Unmarshal(raw, &we); err != nil {
		return nil, fmt.Errorf("the language server's rename is not a workspace edit: %v", err)
	}
	out := map[string][]lspTextEdit{}
	for uri, e := range we.Changes {
		out[uri] = append(out[uri], e...)
	}
	for _, dc := range we.DocumentChanges {
		var d struct {
			Kind         string `json:"kind"`
			TextDocument struct {
				URI string `json:"uri"`
			} `json:"textDocument"`
			Edits []lspTextEdit `json:"edits"`
		}
		if err := json.Unmarshal(dc, &d); err != nil {
			return nil, fmt.Errorf("the language server's rename is not a workspace edit: %v", err)
		}
		if d.Kind != "" {
			return nil, fmt.Errorf("the rename would %s a file, which rename_symbol does not do (rename the symbol only, then move files with Bash)", d.Kind)
		}
		out[d.TextDocument.URI] = append(out[d.TextDocument.URI], d.Edits...)
	}
	return out, nil
}

// prepareRename checks every file of the edits and computes its new
// content, without writing anything.
func (tb *Toolbox) prepareRename(edits map[string][]lspTextEdit) ([]*renamedFile, error) {
	if len(edits) > renameMaxFiles {
		return nil, fmt.Errorf("the rename would change %d files, more than %d", len(edits), renameMaxFiles)
	}
	var files []*renamedFile
	outside := 0
	for uri := range edits {
		p := uriPath(uri)
		if p == "" {
			outside++
			continue
		}
		if _, err := tb.ws.Rel(p); err != nil {
			outside++
		}
	}
	if outside > 0 {
		return nil, fmt.Errorf("the rename would change %d file(s) outside the workspace (the standard library or a dependency?): refused", outside)
	}
	uris := slices.Sorted(func(yield func(string) bool) {
		for u := range edits {
			if !yield(u) {
				return
			}
		}
	})
	byFile := map[string][]lspTextEdit{} // one file may be named by several URIs
	for _, uri := range uris {
		rel, _ := tb.ws.Rel(uriPath(uri))
		rel, err := tb.ws.ResolveFinal(rel)
		if err != nil {
			return nil, err
		}
		if _, ok := byFile[rel]; !ok {
			content, fi, err := tb.readConfined(rel)
			if err != nil {
				return nil, err
			}
			files = append(files, &renamedFile{rel: rel, before: fi, orig: content, content: content})
		}
		byFile[rel] = append(byFile[rel], edits[uri]...)
	}
	for _, f := range files {
		if err := f.apply(byFile[f.rel]); err != nil {
			return nil, err
		}
	}
	slices.SortFunc(files, func(a, b *renamedFile) int { return strings.Compare(a.rel, b.rel) })
	return files, nil
}

// apply makes the edits, which must not overlap, on the file's content
// (all of them at once: their positions are in the content as read).
func (f *renamedFile) apply(edits []lspTextEdit) error {
	type span struct {
		start, end int
		text       string
	}
	lines := strings.SplitAfter(f.content, "\n")
	starts := make([]int, len(lines)+1)
	for i, l := range lines {
		starts[i+1] = starts[i] + len(l)
	}
	offset := func(p lspPosition) int {
		if p.Line < 0 || p.Line > len(lines) || p.Character < 0 {
			return -1
		}
		if p.Line == len(lines) {
			if p.Character == 0 {
				return len(f.content)
			}
			return -1
		}
		b := utf16ToBytes(strings.TrimRight(lines[p.Line], "\r\n"), p.Character)
		if b < 0 {
			return -1
		}
		return starts[p.Line] + b
	}
	var spans []span
	for _, e := range edits {
		s, end := offset(e.Range.Start), offset(e.Range.End)
		if s < 0 || end < s {
			return fmt.Errorf("the language server's edit of %s is out of the file (it changed since?)", f.rel)
		}
		spans = append(spans, span{s, end, e.NewText})
	}
	slices.SortFunc(spans, func(a, b span) int { return b.start - a.start })
	content := f.content
	for i, s := range spans {
		if i > 0 && s.end > spans[i-1].start {
			return fmt.Errorf("the language server's edits of %s overlap", f.rel)
		}
		content = content[:s.start] + s.text + content[s.end:]
	}
	if len(content) > editMaxFileBytes {
		return fmt.Errorf("the rename would make %s more than %d bytes", f.rel, editMaxFileBytes)
	}
	f.content = content
	f.edits += len(spans)
	return nil
}

// commitRename writes every file: first all of them to temporary files,
// then, if none changed since it was read, each over its file. Should a
// rename of a temporary file fail, the files already replaced are put
// back. A file that was Read and unchanged before stays marked read (the
// agent knows it and what the rename did); the others stay unread. Each
// file is recorded once all are written (a rename put back records none:
// nothing changed).
func (tb *Toolbox) commitRename(ctx context.Context, files []*renamedFile) error {
	cleanup := func() {
		for _, f := range files {
			if f.tmp != "" {
				_ = tb.ws.Root().Remove(f.tmp)
			}
		}
	}
	for _, f := range files {
		tmp, err := tb.ws.WriteTemp(f.rel, []byte(f.content), f.before.Mode().Perm())
		if err != nil {
			cleanup()
			return fmt.Errorf("%v; nothing was written", err)
		}
		f.tmp = tmp
	}
	for _, f := range files {
		fi, err := tb.ws.Root().Stat(f.rel)
		if err != nil || stampOf(fi) != stampOf(f.before) {
			cleanup()
			return fmt.Errorf("%s changed while the rename was computed: nothing was written; try again", f.rel)
		}
	}
	var done []*renamedFile
	for _, f := range files {
		read, unchanged := tb.reads.current(f.rel, f.before)
		nfi, err := tb.ws.CommitTemp(f.tmp, f.rel)
		f.tmp = ""
		if err != nil {
			cleanup()
			return tb.undoRename(done, fmt.Errorf("writing %s: %v", f.rel, err))
		}
		done = append(done, f)
		if read && unchanged {
			tb.reads.mark(f.rel, nfi)
		}
	}
	rec := toolcall.RecorderFrom(ctx)
	for _, f := range files {
		rec.FileWritten(f.rel, []byte(f.content))
	}
	return nil
}

// undoRename puts back the files a failed rename had replaced.
func (tb *Toolbox) undoRename(done []*renamedFile, cause error) error {
	var failed []string
	for _, f := range done {
		if _, err := tb.ws.AtomicWrite(f.rel, []byte(f.orig), f.before.Mode().Perm()); err != nil {
			failed = append(failed, f.rel)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%v; the rename was half applied and %s could not be put back", cause, strings.Join(failed, ", "))
	}
	return fmt.Errorf("%v; the files already renamed were put back: nothing was changed", cause)
}
