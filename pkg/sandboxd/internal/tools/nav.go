package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/confine"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/outcap"
)

// Code navigation through a language server (lsp_server.go): the position
// is a file, a 1-based line, and a 1-based column counted in characters as
// Read shows the line, or a symbol name on that line. Locations outside the
// workspace are counted, never shown; a rename is applied to every file or
// to none, through the same confinement as Edit.

const (
	// navMaxLocations bounds the locations a result lists.
	navMaxLocations = 500
	// navLineTextBytes bounds the line text shown with a location.
	navLineTextBytes = 300
	// renameMaxFiles bounds the files one rename may change.
	renameMaxFiles = 1000
)

// NavPositionInput names a symbol in a file: the fields find_definition,
// find_references and rename_symbol share.
type NavPositionInput struct {
	FilePath string `json:"file_path" jsonschema:"the file where the symbol occurs: relative to the workspace, or absolute inside it"`
	Line     int    `json:"line" jsonschema:"the line of the symbol, 1-based, as Read numbers lines"`
	Column   int    `json:"column,omitempty" jsonschema:"the column of the symbol, 1-based, in characters of the line as Read shows it (a tab is one); give column or symbol or both"`
	Col      int    `json:"col,omitempty" jsonschema:"the same as column"`
	Symbol   string `json:"symbol,omitempty" jsonschema:"the symbol's name as written on that line; used to find the column (the occurrence nearest column when both are given)"`
}

// NavLocation is one place in the workspace.
type NavLocation struct {
	FilePath string `json:"file_path" jsonschema:"the file, relative to the workspace"`
	Line     int    `json:"line" jsonschema:"1-based line"`
	Column   int    `json:"column" jsonschema:"1-based column, in characters"`
	Text     string `json:"text" jsonschema:"the line, trimmed (cut at 300 bytes)"`
}

// FindDefinitionInput is the input of the find_definition tool.
type FindDefinitionInput struct {
	NavPositionInput
}

// FindDefinitionOutput is the structured result of the find_definition tool.
type FindDefinitionOutput struct {
	Definitions []NavLocation `json:"definitions" jsonschema:"where the symbol is defined, in the workspace"`
	Outside     int           `json:"outside,omitempty" jsonschema:"definitions outside the workspace (the standard library, dependencies), counted and not shown"`
}

// FindReferencesInput is the input of the find_references tool.
type FindReferencesInput struct {
	NavPositionInput
	IncludeDeclaration *bool `json:"include_declaration,omitempty" jsonschema:"list the declaration too; default true"`
}

// FindReferencesOutput is the structured result of the find_references tool.
type FindReferencesOutput struct {
	References []NavLocation `json:"references" jsonschema:"the uses of the symbol in the workspace, by file and line (at most 500)"`
	Total      int           `json:"total" jsonschema:"number of uses in the workspace, listed or not"`
	Outside    int           `json:"outside,omitempty" jsonschema:"uses outside the workspace, counted and not shown"`
}

// RenameSymbolInput is the input of the rename_symbol tool.
type RenameSymbolInput struct {
	NavPositionInput
	NewName string `json:"new_name" jsonschema:"the new name of the symbol"`
}

// RenamedFile is one file a rename changed.
type RenamedFile struct {
	FilePath string `json:"file_path" jsonschema:"the file, relative to the workspace"`
	Edits    int    `json:"edits" jsonschema:"number of places changed in it"`
}

// RenameSymbolOutput is the structured result of the rename_symbol tool.
type RenameSymbolOutput struct {
	NewName string        `json:"new_name" jsonschema:"the new name"`
	Files   []RenamedFile `json:"files" jsonschema:"the files changed"`
	Edits   int           `json:"edits" jsonschema:"number of places changed, all files together"`
}

// lspLocation is an LSP Location.
type lspLocation struct {
	URI   string   `json:"uri"`
	Range lspRange `json:"range"`
}

type lspRange struct {
	Start lspPosition `json:"start"`
	End   lspPosition `json:"end"`
}

type lspPosition struct {
	Line      int `json:"line"`
	Character int `json:"character"` // UTF-16 code units
}

type lspTextEdit struct {
	Range   lspRange `json:"range"`
	NewText string   `json:"newText"`
}

// navTarget is a resolved position: the file and the LSP position in it.
type navTarget struct {
	spec    langServerSpec
	rel     string
	content string
	pos     lspPosition
}

// resolveTarget checks the position an agent gave and turns it into an LSP
// position.
func (tb *Toolbox) resolveTarget(in NavPositionInput) (navTarget, error) {
	column, err := oneOf("column", in.Column, "col", in.Col)
	if err != nil {
		return navTarget{}, err
	}
	in.Column, in.Col = column, 0
	if in.Line < 1 {
		return navTarget{}, fmt.Errorf("line must be 1 or more, got %d", in.Line)
	}
	if in.Column < 0 {
		return navTarget{}, fmt.Errorf("column must be 1 or more, got %d", in.Column)
	}
	if in.Column == 0 && in.Symbol == "" {
		return navTarget{}, errors.New("give the column of the symbol (1-based, in characters), or its name as symbol, or both")
	}
	rel, err := tb.ws.Rel(in.FilePath)
	if err != nil {
		return navTarget{}, err
	}
	if rel, err = tb.ws.ResolveFinal(rel); err != nil {
		return navTarget{}, err
	}
	spec, err := tb.nav.specFor(rel)
	if err != nil {
		return navTarget{}, err
	}
	content, _, err := tb.readConfined(rel)
	if err != nil {
		return navTarget{}, err
	}
	lines := strings.Split(content, "\n")
	if in.Line > len(lines) {
		return navTarget{}, fmt.Errorf("line %d is past the end of %s, which has %d lines", in.Line, rel, len(lines))
	}
	text := strings.TrimSuffix(lines[in.Line-1], "\r")
	col := in.Column - 1 // 0-based, in runes
	if in.Symbol != "" {
		if col, err = symbolColumn(text, in.Symbol, col); err != nil {
			return navTarget{}, fmt.Errorf("%s line %d: %v", rel, in.Line, err)
		}
	} else if n := utf8.RuneCountInString(text); col >= n {
		return navTarget{}, fmt.Errorf("column %d is past the end of %s line %d, which has %d characters", in.Column, rel, in.Line, n)
	}
	return navTarget{spec: spec, rel: rel, content: content, pos: lspPosition{Line: in.Line - 1, Character: runesToUTF16(text, col)}}, nil
}

// symbolColumn returns the 0-based rune column of the whole-word occurrence
// of symbol in line nearest near (the first when near is -1).
func symbolColumn(line, symbol string, near int) (int, error) {
	runes := []rune(line)
	sym := []rune(symbol)
	isWord := func(r rune) bool { return r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) }
	best := -1
	for i := 0; i+len(sym) <= len(runes); i++ {
		if !slices.Equal(runes[i:i+len(sym)], sym) {
			continue
		}
		if (i > 0 && isWord(runes[i-1])) || (i+len(sym) < len(runes) && isWord(runes[i+len(sym)])) {
			continue // part of a longer name
		}
		if best < 0 || (near >= 0 && abs(i-near) < abs(best-near)) {
			best = i
		}
	}
	if best < 0 {
		return 0, fmt.Errorf("symbol %q does not occur (as a whole word) on the line: %q", symbol, truncateText(strings.TrimSpace(line)))
	}
	return best, nil
}

func abs(n int) int { return max(n, -n) }

// readConfined reads a regular file of the workspace, at most
// editMaxFileBytes.
func (tb *Toolbox) readConfined(rel string) (string, fs.FileInfo, error) {
	f, fi, err := tb.ws.OpenRegular(rel)
	if err != nil {
		return "", nil, err
	}
	defer f.Close()
	if fi.Size() > editMaxFileBytes {
		return "", nil, fmt.Errorf("%s is %d bytes, more than code navigation handles (%d)", rel, fi.Size(), editMaxFileBytes)
	}
	data, err := io.ReadAll(io.LimitReader(f, editMaxFileBytes+1))
	if err != nil {
		return "", nil, fmt.Errorf("reading %s: %v", rel, err)
	}
	return string(data), fi, nil
}

// request asks the server about the target: the file is opened (as it is
// on disk) for the request and closed after it.
func (s *langServer) request(ctx context.Context, ws *confine.Resolver, t navTarget, method string, extra map[string]any, result any) error {
	uri := pathURI(ws.Dir() + "/" + t.rel)
	s.ver++
	if err := s.conn.Notify("textDocument/didOpen", map[string]any{"textDocument": map[string]any{
		"uri": uri, "languageId": t.spec.language, "version": s.ver, "text": t.content}}); err != nil {
		return err
	}
	params := map[string]any{"textDocument": map[string]any{"uri": uri}, "position": t.pos}
	for k, v := range extra {
		params[k] = v
	}
	err := s.conn.Call(ctx, method, params, result)
	if cerr := s.conn.Notify("textDocument/didClose", map[string]any{"textDocument": map[string]any{"uri": uri}}); err == nil {
		err = cerr
	}
	return err
}

// findDefinition is the find_definition tool.
func (tb *Toolbox) findDefinition(ctx context.Context, in FindDefinitionInput) (*mcp.CallToolResult, FindDefinitionOutput, error) {
	t, err := tb.resolveTarget(in.NavPositionInput)
	if err != nil {
		return nil, FindDefinitionOutput{}, err
	}
	var raw json.RawMessage
	err = tb.nav.with(ctx, t.spec, func(ctx context.Context, s *langServer) error {
		return s.request(ctx, tb.ws, t, "textDocument/definition", nil, &raw)
	})
	if err != nil {
		return nil, FindDefinitionOutput{}, err
	}
	locs, outside, err := tb.confineLocations(decodeLocations(raw))
	if err != nil {
		return nil, FindDefinitionOutput{}, err
	}
	out := FindDefinitionOutput{Definitions: locs, Outside: outside}
	var b strings.Builder
	switch {
	case len(locs) == 0 && outside == 0:
		b.WriteString("No definition found at that position (is it an identifier?).")
	case len(locs) == 0:
		b.WriteString("Defined outside the workspace (the standard library or a dependency), which this tool does not show: use `go doc` with Bash to read it.")
	default:
		writeLocations(&b, locs)
		if outside > 0 {
			fmt.Fprintf(&b, "(%d more outside the workspace, not shown)\n", outside)
		}
	}
	return textResult(b.String()), out, nil
}

// findReferences is the find_references tool.
func (tb *Toolbox) findReferences(ctx context.Context, in FindReferencesInput) (*mcp.CallToolResult, FindReferencesOutput, error) {
	t, err := tb.resolveTarget(in.NavPositionInput)
	if err != nil {
		return nil, FindReferencesOutput{}, err
	}
	includeDecl := in.IncludeDeclaration == nil || *in.IncludeDeclaration
	var raw json.RawMessage
	err = tb.nav.with(ctx, t.spec, func(ctx context.Context, s *langServer) error {
		return s.request(ctx, tb.ws, t, "textDocument/references", map[string]any{"context": map[string]any{"includeDeclaration": includeDecl}}, &raw)
	})
	if err != nil {
		return nil, FindReferencesOutput{}, err
	}
	locs, outside, err := tb.confineLocations(decodeLocations(raw))
	if err != nil {
		return nil, FindReferencesOutput{}, err
	}
	out := FindReferencesOutput{References: locs, Total: len(locs), Outside: outside}
	if len(locs) > navMaxLocations {
		out.References = locs[:navMaxLocations]
	}
	var b strings.Builder
	if len(locs) == 0 {
		b.WriteString("No references found in the workspace.\n")
	}
	writeLocations(&b, out.References)
	if len(locs) > navMaxLocations {
		fmt.Fprintf(&b, "(%d references in all; the first %d are shown)\n", len(locs), navMaxLocations)
	}
	if outside > 0 {
		fmt.Fprintf(&b, "(%d more outside the workspace, not shown)\n", outside)
	}
	return textResult(b.String()), out, nil
}

// decodeLocations reads a definition or references answer: null, a
// Location, an array of Locations or of LocationLinks.
func decodeLocations(raw json.RawMessage) []lspLocation {
	var one lspLocation
	if json.Unmarshal(raw, &one) == nil && one.URI != "" {
		return []lspLocation{one}
	}
	var many []struct {
		lspLocation
		TargetURI   string   `json:"targetUri"`
		TargetRange lspRange `json:"targetSelectionRange"`
	}
	_ = json.Unmarshal(raw, &many)
	var out []lspLocation
	for _, l := range many {
		if l.URI == "" && l.TargetURI != "" {
			l.URI, l.Range = l.TargetURI, l.TargetRange
		}
		out = append(out, l.lspLocation)
	}
	return out
}

// confineLocations keeps the locations in the workspace, as workspace
// relative paths with the text of their line, and counts the others
// (outside it, through a symbolic link out of it, or not a file in it).
func (tb *Toolbox) confineLocations(in []lspLocation) ([]NavLocation, int, error) {
	out := []NavLocation{}
	outside := 0
	lines := map[string][]string{}
	for _, l := range in {
		p := uriPath(l.URI)
		rel, err := tb.ws.Rel(p)
		if p == "" || err != nil || rel == "." {
			outside++
			continue
		}
		ls, ok := lines[rel]
		if !ok {
			content, _, err := tb.readConfined(rel)
			if err == nil {
				ls = strings.Split(content, "\n")
			}
			lines[rel] = ls
		}
		if l.Range.Start.Line < 0 || l.Range.Start.Line >= len(ls) {
			outside++ // unreadable from the workspace (a link out of it), or not there
			continue
		}
		text := strings.TrimSuffix(ls[l.Range.Start.Line], "\r")
		out = append(out, NavLocation{FilePath: rel, Line: l.Range.Start.Line + 1, Column: utf16ToRunes(text, l.Range.Start.Character) + 1, Text: truncateText(strings.TrimSpace(text))})
	}
	slices.SortStableFunc(out, func(a, b NavLocation) int {
		if c := strings.Compare(a.FilePath, b.FilePath); c != 0 {
			return c
		}
		if a.Line != b.Line {
			return a.Line - b.Line
		}
		return a.Column - b.Column
	})
	out = slices.Compact(out)
	return out, outside, nil
}

func writeLocations(b *strings.Builder, locs []NavLocation) {
	for _, l := range locs {
		fmt.Fprintf(b, "%s:%d:%d: %s\n", l.FilePath, l.Line, l.Column, l.Text)
	}
}

// truncateText cuts s at navLineTextBytes, at a rune boundary.
func truncateText(s string) string {
	if len(s) <= navLineTextBytes {
		return s
	}
	return string(outcap.TrimPartialRune([]byte(s[:navLineTextBytes]))) + "..."
}

// runesToUTF16 is the UTF-16 offset of the rune column col of line.
func runesToUTF16(line string, col int) int {
	n, i := 0, 0
	for _, r := range line {
		if i == col {
			break
		}
		n += max(utf16.RuneLen(r), 1)
		i++
	}
	return n
}

// utf16ToRunes is the rune column of the UTF-16 offset u in line.
func utf16ToRunes(line string, u int) int {
	n, i := 0, 0
	for _, r := range line {
		if n >= u {
			break
		}
		n += max(utf16.RuneLen(r), 1)
		i++
	}
	return i
}

// utf16ToBytes is the byte offset of the UTF-16 offset u in line; -1 when
// u is past its end.
func utf16ToBytes(line string, u int) int {
	n := 0
	for b, r := range line {
		if n == u {
			return b
		}
		if n > u {
			return -1 // in the middle of a surrogate pair
		}
		n += max(utf16.RuneLen(r), 1)
	}
	if n == u {
		return len(line)
	}
	return -1
}
