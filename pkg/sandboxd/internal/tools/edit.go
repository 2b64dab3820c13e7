package tools

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"go/format"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/toolcall"
)

// lintMaxBytes bounds the files whose content the post-edit check reads.
const lintMaxBytes = 2 << 20

// EditInput is the input of the Edit tool.
type EditInput struct {
	FilePath   string `json:"file_path" jsonschema:"path of the file to edit: relative to the workspace, or absolute inside it; it must have been Read first"`
	OldString  string `json:"old_string" jsonschema:"the exact text to replace; it must occur exactly once unless replace_all is set"`
	NewString  string `json:"new_string" jsonschema:"the text to put in its place; must differ from old_string"`
	ReplaceAll bool   `json:"replace_all,omitempty" jsonschema:"replace every occurrence of old_string; default false"`
}

// EditOutput is the structured result of the Edit tool.
type EditOutput struct {
	FilePath     string `json:"file_path" jsonschema:"the file edited, relative to the workspace"`
	Replacements int    `json:"replacements" jsonschema:"number of occurrences replaced"`
	Lint         string `json:"lint,omitempty" jsonschema:"what a check of the edited file found (a .go file that does not parse or is not gofmt-clean); the edit is done all the same"`
}

// EditOperation is one edit of a MultiEdit.
type EditOperation struct {
	OldString  string `json:"old_string" jsonschema:"the exact text to replace, in the file as the edits before this one left it; it must occur exactly once unless replace_all is set"`
	NewString  string `json:"new_string" jsonschema:"the text to put in its place; must differ from old_string"`
	ReplaceAll bool   `json:"replace_all,omitempty" jsonschema:"replace every occurrence of old_string; default false"`
}

// MultiEditInput is the input of the MultiEdit tool.
type MultiEditInput struct {
	FilePath string          `json:"file_path" jsonschema:"path of the file to edit: relative to the workspace, or absolute inside it; it must have been Read first"`
	Edits    []EditOperation `json:"edits" jsonschema:"the edits, applied in order, each to the result of the ones before; if any fails, none is written"`
}

// MultiEditOutput is the structured result of the MultiEdit tool.
type MultiEditOutput struct {
	FilePath     string `json:"file_path" jsonschema:"the file edited, relative to the workspace"`
	Edits        int    `json:"edits" jsonschema:"number of edits applied"`
	Replacements int    `json:"replacements" jsonschema:"number of occurrences replaced, all edits together"`
	Lint         string `json:"lint,omitempty" jsonschema:"what a check of the edited file found (a .go file that does not parse or is not gofmt-clean); the edit is done all the same"`
}

// edit is the Edit tool.
func (tb *Toolbox) edit(ctx context.Context, in EditInput) (*mcp.CallToolResult, EditOutput, error) {
	if err := checkEditStrings(in.OldString, in.NewString); err != nil {
		return nil, EditOutput{}, err
	}
	rel, content, fi, err := tb.loadForEdit(in.FilePath)
	if err != nil {
		return nil, EditOutput{}, err
	}
	content, n, err := applyEdit(rel, content, in.OldString, in.NewString, in.ReplaceAll)
	if err != nil {
		return nil, EditOutput{}, err
	}
	if err := tb.saveEdit(ctx, rel, content, fi.Mode().Perm()); err != nil {
		return nil, EditOutput{}, err
	}
	out := EditOutput{FilePath: rel, Replacements: n, Lint: lintFeedback(rel, []byte(content))}
	return textResult(withLint(fmt.Sprintf("Edited %s: %d replacement(s)", rel, n), out.Lint)), out, nil
}

// multiEdit is the MultiEdit tool: the edits are applied in order to a copy
// of the file in memory, and the result is written only if every one of
// them applied.
func (tb *Toolbox) multiEdit(ctx context.Context, in MultiEditInput) (*mcp.CallToolResult, MultiEditOutput, error) {
	if len(in.Edits) == 0 {
		return nil, MultiEditOutput{}, errors.New("edits is empty: give at least one edit")
	}
	for i, e := range in.Edits {
		if err := checkEditStrings(e.OldString, e.NewString); err != nil {
			return nil, MultiEditOutput{}, fmt.Errorf("edit %d of %d: %v; nothing was written", i+1, len(in.Edits), err)
		}
	}
	rel, content, fi, err := tb.loadForEdit(in.FilePath)
	if err != nil {
		return nil, MultiEditOutput{}, err
	}
	total := 0
	for i, e := range in.Edits {
		var n int
		if content, n, err = applyEdit(rel, content, e.OldString, e.NewString, e.ReplaceAll); err != nil {
			return nil, MultiEditOutput{}, fmt.Errorf("edit %d of %d: %v; nothing was written (the edits apply in order, each to the result of the ones before)", i+1, len(in.Edits), err)
		}
		total += n
	}
	if err := tb.saveEdit(ctx, rel, content, fi.Mode().Perm()); err != nil {
		return nil, MultiEditOutput{}, err
	}
	out := MultiEditOutput{FilePath: rel, Edits: len(in.Edits), Replacements: total, Lint: lintFeedback(rel, []byte(content))}
	return textResult(withLint(fmt.Sprintf("Edited %s: %d edit(s), %d replacement(s)", rel, out.Edits, total), out.Lint)), out, nil
}

// checkEditStrings refuses an edit that cannot mean anything.
func checkEditStrings(oldString, newString string) error {
	if oldString == "" {
		return errors.New("old_string is empty: to create a file or replace all of it, use Write")
	}
	if oldString == newString {
		return errors.New("old_string and new_string are the same: nothing to change")
	}
	return nil
}

// loadForEdit resolves a file to edit, checks that it was Read and is
// unchanged since, and returns its workspace-relative path, content and
// info.
func (tb *Toolbox) loadForEdit(filePath string) (string, string, fs.FileInfo, error) {
	rel, err := tb.ws.Rel(filePath)
	if err != nil {
		return "", "", nil, err
	}
	rel, f, fi, err := tb.ws.OpenFinal(rel)
	if err != nil {
		return "", "", nil, err
	}
	defer f.Close()
	if err := tb.reads.requireRead(rel, fi, "edit"); err != nil {
		return "", "", nil, err
	}
	if fi.Size() > editMaxFileBytes {
		return "", "", nil, fmt.Errorf("%s is %d bytes, more than Edit handles (%d): use Bash (sed, patch) instead", rel, fi.Size(), editMaxFileBytes)
	}
	data, err := io.ReadAll(io.LimitReader(f, editMaxFileBytes+1))
	if err != nil {
		return "", "", nil, fmt.Errorf("reading %s: %v", rel, err)
	}
	return rel, string(data), fi, nil
}

// applyEdit replaces oldString with newString in content: once (it must
// occur exactly once) or, with replaceAll, everywhere. It returns the new
// content and the number of replacements.
func applyEdit(rel, content, oldString, newString string, replaceAll bool) (string, int, error) {
	n := strings.Count(content, oldString)
	switch {
	case n == 0:
		return "", 0, fmt.Errorf("old_string was not found in %s: Read the file and copy the text exactly, including whitespace", rel)
	case n > 1 && !replaceAll:
		return "", 0, fmt.Errorf("old_string occurs %d times in %s: give more surrounding text so that it is unique, or set replace_all", n, rel)
	}
	if !replaceAll {
		n = 1
	}
	if size := int64(len(content)) + int64(n)*(int64(len(newString))-int64(len(oldString))); size > editMaxFileBytes {
		return "", 0, fmt.Errorf("the edit would make %s %d bytes, more than Edit handles (%d)", rel, size, editMaxFileBytes)
	}
	if replaceAll {
		return strings.ReplaceAll(content, oldString, newString), n, nil
	}
	return strings.Replace(content, oldString, newString, 1), 1, nil
}

// saveEdit writes an edited file atomically, marks it read and records it.
func (tb *Toolbox) saveEdit(ctx context.Context, rel, content string, mode os.FileMode) error {
	data := []byte(content)
	nfi, err := tb.ws.AtomicWrite(rel, data, mode)
	if err != nil {
		return err
	}
	tb.reads.mark(rel, nfi)
	toolcall.RecorderFrom(ctx).FileWritten(rel, data)
	return nil
}

// lintFeedback checks the new content of a file that Write, Edit or
// MultiEdit wrote, in process, and says what is wrong with it, or "" when
// nothing is (or there is no check for its kind). A .go file must parse and
// be gofmt-clean (go/format, as gofmt -l checks it). It never blocks the
// edit: the file is written already.
func lintFeedback(rel string, content []byte) (msg string) {
	if path.Ext(rel) != ".go" || len(content) > lintMaxBytes {
		return ""
	}
	defer func() {
		if recover() != nil { // go/format on input it cannot handle: no feedback
			msg = ""
		}
	}()
	formatted, err := format.Source(content)
	if err != nil {
		return fmt.Sprintf("%s does not parse as Go: %v", rel, err)
	}
	if bytes.Equal(formatted, content) {
		return ""
	}
	return fmt.Sprintf("%s is not gofmt-clean (first difference at line %d): format it (gofmt -w %s) or fix the indentation and spacing", rel, firstDifferentLine(content, formatted), rel)
}

// firstDifferentLine returns the 1-based line of a where a and b first
// differ.
func firstDifferentLine(a, b []byte) int {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	return bytes.Count(a[:i], []byte("\n")) + 1
}

// withLint adds lint feedback, if any, to the text of a result.
func withLint(text, lint string) string {
	if lint == "" {
		return text
	}
	return text + "\nLint: " + lint
}
