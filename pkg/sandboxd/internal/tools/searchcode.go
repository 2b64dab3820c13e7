package tools

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"io"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strings"
	"unicode"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/confine"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/outcap"
)

// search_code finds declarations by name: in Go files through go/ast
// (functions, methods, types, fields and methods of structs and interfaces,
// constants, variables), in other source files through the declaration
// keywords of their language (a text fallback, also for Go files that do
// not parse). Grep finds text wherever it is; search_code finds where a
// name is declared, what kind of thing it is and its signature.

const (
	searchCodeDefaultLimit = 50
	searchCodeMaxLimit     = 500
	// searchCodeMaxFileBytes is the largest file search_code reads.
	searchCodeMaxFileBytes = 2 << 20
	// searchCodeMaxSignature bounds a signature shown.
	searchCodeMaxSignature = 300
	// searchCodeMaxDoc bounds the doc comment shown.
	searchCodeMaxDoc = 200
)

// The kinds of declaration search_code reports.
const (
	symFunc   = "func"
	symMethod = "method"
	symType   = "type"
	symField  = "field"
	symConst  = "const"
	symVar    = "var"
	symClass  = "class" // text fallback: class, struct, enum, trait, interface of other languages
)

// SearchCodeInput is the input of the search_code tool.
type SearchCodeInput struct {
	Query string `json:"query" jsonschema:"the name, or part of a name, of what is declared (case-insensitive), e.g. Serve, newserver, Server.Start (a method or field of a type)"`
	Kind  string `json:"kind,omitempty" jsonschema:"only declarations of this kind: func, method, type, field, const, var, class (other languages' classes, structs, enums, traits, interfaces); default all"`
	Path  string `json:"path,omitempty" jsonschema:"file or directory to search, relative to the workspace or absolute inside it; default the workspace"`
	Exact bool   `json:"exact,omitempty" jsonschema:"only names equal to query (still case-insensitive); default false: names that contain it"`
	Limit int    `json:"limit,omitempty" jsonschema:"at most this many results; default 50, maximum 500"`
}

// CodeSymbol is one declaration search_code found.
type CodeSymbol struct {
	File      string `json:"file" jsonschema:"the file, relative to the workspace"`
	Line      int    `json:"line" jsonschema:"the line of the name, 1-based"`
	Column    int    `json:"column" jsonschema:"the column of the name, 1-based, in bytes"`
	Kind      string `json:"kind" jsonschema:"func, method, type, field, const, var or class"`
	Name      string `json:"name" jsonschema:"the name; a method or field as Type.Name"`
	Signature string `json:"signature" jsonschema:"the declaration without its body (Go), or its line (other languages); cut at 300 bytes"`
	Doc       string `json:"doc,omitempty" jsonschema:"the first line of its doc comment (Go)"`
	Source    string `json:"source" jsonschema:"go/ast, or text for the keyword fallback"`
}

// SearchCodeOutput is the structured result of the search_code tool.
type SearchCodeOutput struct {
	Symbols   []CodeSymbol `json:"symbols" jsonschema:"the declarations found, best matches first: exact names, then names that start with query, then names that contain it"`
	Total     int          `json:"total" jsonschema:"how many declarations matched"`
	Truncated bool         `json:"truncated,omitempty" jsonschema:"true when more matched than were returned, or the walk bound was reached"`
	Skipped   int          `json:"skipped,omitempty" jsonschema:"files larger than 2 MiB that were not read"`
}

// searchCodeExts are the files of other languages the keyword fallback
// reads.
var searchCodeExts = map[string]*regexp.Regexp{}

func init() {
	py := regexp.MustCompile(`^\s*(?:async\s+)?(def|class)\s+([A-Za-z_][A-Za-z0-9_]*)`)
	js := regexp.MustCompile(`^\s*(?:export\s+)?(?:default\s+)?(?:declare\s+)?(?:abstract\s+)?(?:async\s+)?(function\*?|class|interface|type|enum|const|let|var)\s+([A-Za-z_$][A-Za-z0-9_$]*)`)
	rs := regexp.MustCompile(`^\s*(?:pub(?:\([^)]*\))?\s+)?(?:const\s+|async\s+|unsafe\s+|extern\s+"[^"]*"\s+)*(fn|struct|enum|trait|type|const|static|mod|union)\s+([A-Za-z_][A-Za-z0-9_]*)`)
	for _, e := range []string{".py", ".pyi"} {
		searchCodeExts[e] = py
	}
	for _, e := range []string{".js", ".jsx", ".mjs", ".cjs", ".ts", ".tsx", ".mts", ".cts"} {
		searchCodeExts[e] = js
	}
	searchCodeExts[".rs"] = rs
	searchCodeExts[".go"] = regexp.MustCompile(`^(func)\s+(?:\([^)]*\)\s*)?([\p{L}_][\p{L}\p{N}_]*)|^(type|const|var)\s+([\p{L}_][\p{L}\p{N}_]*)`)
}

// keywordKind maps a declaration keyword of the fallback to a kind.
func keywordKind(kw string) string {
	switch kw {
	case "def", "fn", "function", "function*", "func":
		return symFunc
	case "const", "static":
		return symConst
	case "let", "var":
		return symVar
	case "type":
		return symType
	default:
		return symClass
	}
}

// symbolQuery is a parsed query: a name (lowercased), and for Type.Name the
// type it belongs to.
type symbolQuery struct {
	owner, name string
	exact       bool
	kind        string
}

// rank says how well a declared name matches: 1 equal (but maybe for case),
// 2 prefix, 3 contained; -1 no match. The caller makes an equal name of the
// same case 0.
func (q symbolQuery) rank(owner, name string) int {
	if q.owner != "" && !strings.EqualFold(owner, q.owner) {
		return -1
	}
	lower := strings.ToLower(name)
	switch {
	case lower == q.name:
		return 1
	case q.exact:
		return -1
	case strings.HasPrefix(lower, q.name):
		return 2
	case strings.Contains(lower, q.name):
		return 3
	}
	return -1
}

// searchCode is the search_code tool.
func (tb *Toolbox) searchCode(ctx context.Context, in SearchCodeInput) (*mcp.CallToolResult, SearchCodeOutput, error) {
	query, q, limit, err := searchCodeRequest(in)
	if err != nil {
		return nil, SearchCodeOutput{}, err
	}
	needle := []byte(q.name)

	base, err := tb.searchBase(in.Path, false)
	if err != nil {
		return nil, SearchCodeOutput{}, err
	}
	var hits []codeHit
	out := SearchCodeOutput{}
	searchFile := func(rel string) error {
		ext := path.Ext(rel)
		fallback, known := searchCodeExts[ext]
		if !known {
			return nil
		}
		f, fi, err := tb.ws.OpenRegular(rel)
		if err != nil {
			return nil // vanished, swapped or refused: not searched
		}
		defer f.Close()
		if fi.Size() > searchCodeMaxFileBytes {
			out.Skipped++
			return nil
		}
		src, err := io.ReadAll(io.LimitReader(f, searchCodeMaxFileBytes+1))
		if err != nil || len(src) > searchCodeMaxFileBytes {
			return nil
		}
		if !bytes.Contains(bytes.ToLower(src), needle) { // cheap: most files do not name it at all
			return nil
		}
		var syms []CodeSymbol
		if ext == ".go" {
			syms = goSymbols(rel, src)
		}
		if syms == nil {
			syms = keywordSymbols(rel, src, fallback)
		}
		for _, s := range syms {
			if q.kind != "" && s.Kind != q.kind {
				continue
			}
			owner, name := "", s.Name
			if o, n, ok := strings.Cut(s.Name, "."); ok {
				owner, name = o, n
			}
			r := q.rank(owner, name)
			if r < 0 {
				continue
			}
			if r == 1 && name == lastSegment(query) {
				r = 0 // the same case as asked
			}
			hits = append(hits, codeHit{sym: s, rank: r})
		}
		return nil
	}

	fi, err := tb.ws.Root().Stat(base)
	if err != nil {
		return nil, SearchCodeOutput{}, tb.ws.Explain(base, err)
	}
	var walkErr error
	switch {
	case fi.Mode().IsRegular():
		if _, known := searchCodeExts[path.Ext(base)]; !known {
			return nil, SearchCodeOutput{}, fmt.Errorf("%s is not a source file search_code reads (.go, .py, .js, .ts and the like, .rs): use Grep", base)
		}
		walkErr = searchFile(base)
	case fi.IsDir():
		walkErr = tb.walkSource(ctx, base, searchFile)
	default:
		return nil, SearchCodeOutput{}, confine.CheckRegular(base, fi)
	}
	if errors.Is(walkErr, errWalkBound) {
		out.Truncated = true
	} else if walkErr != nil {
		return nil, SearchCodeOutput{}, walkErr
	}
	return textResult(searchCodeAnswer(query, hits, limit, &out)), out, nil
}

// codeHit is a declaration search_code found, and how well it matches the query (0 best).
type codeHit struct {
	sym  CodeSymbol
	rank int
}

// searchCodeRequest checks a search_code call's input and returns the query as given, as parsed,
// and the limit.
func searchCodeRequest(in SearchCodeInput) (string, symbolQuery, int, error) {
	query := strings.TrimSpace(in.Query)
	if query == "" {
		return "", symbolQuery{}, 0, errors.New("query is empty: give a name or part of one")
	}
	if in.Limit < 0 {
		return "", symbolQuery{}, 0, fmt.Errorf("limit must be 1 or more, got %d", in.Limit)
	}
	limit := in.Limit
	if limit == 0 {
		limit = searchCodeDefaultLimit
	}
	limit = min(limit, searchCodeMaxLimit)
	kinds := []string{symFunc, symMethod, symType, symField, symConst, symVar, symClass}
	if in.Kind != "" && !slices.Contains(kinds, in.Kind) {
		return "", symbolQuery{}, 0, fmt.Errorf("kind must be one of %s; got %q", strings.Join(kinds, ", "), in.Kind)
	}
	q := symbolQuery{exact: in.Exact, kind: in.Kind}
	if owner, name, ok := strings.Cut(query, "."); ok {
		q.owner, q.name = strings.TrimPrefix(strings.Trim(owner, "()"), "*"), name
	} else {
		q.name = query
	}
	if !isIdentLike(q.name) || (q.owner != "" && !isIdentLike(q.owner)) {
		return "", symbolQuery{}, 0, fmt.Errorf("query %q is not a name: give a name (or part of one) made of letters, digits, _ and $, or Type.Name; search text with Grep", query)
	}
	q.name, q.owner = strings.ToLower(q.name), strings.ToLower(q.owner)
	return query, q, limit, nil
}

// searchCodeAnswer orders the hits (best match, then file and line), keeps limit of them in out,
// and returns the answer's text.
func searchCodeAnswer(query string, hits []codeHit, limit int, out *SearchCodeOutput) string {
	slices.SortStableFunc(hits, func(a, b codeHit) int {
		if a.rank != b.rank {
			return a.rank - b.rank
		}
		if c := strings.Compare(a.sym.File, b.sym.File); c != 0 {
			return c
		}
		return a.sym.Line - b.sym.Line
	})
	out.Total = len(hits)
	if len(hits) > limit {
		hits, out.Truncated = hits[:limit], true
	}
	out.Symbols = make([]CodeSymbol, 0, len(hits))
	var b strings.Builder
	for _, h := range hits {
		s := h.sym
		out.Symbols = append(out.Symbols, s)
		fmt.Fprintf(&b, "%s:%d:%d: %s %s: %s", s.File, s.Line, s.Column, s.Kind, s.Name, s.Signature)
		if s.Doc != "" {
			fmt.Fprintf(&b, "  // %s", s.Doc)
		}
		b.WriteByte('\n')
	}
	switch {
	case out.Total == 0:
		b.WriteString(fmt.Sprintf("No declaration matches %q (search_code finds declarations by name; Grep finds text)", query))
	case out.Truncated:
		fmt.Fprintf(&b, "(%d shown of %d matching declarations: narrow with kind, path or exact, or raise limit)", len(out.Symbols), out.Total)
	}
	if out.Skipped > 0 {
		fmt.Fprintf(&b, "\n(%d files over 2 MiB were not read)", out.Skipped)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

func lastSegment(s string) string {
	if i := strings.LastIndexByte(s, '.'); i >= 0 {
		return s[i+1:]
	}
	return s
}

func isIdentLike(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '_' && r != '$' {
			return false
		}
	}
	return true
}

// walkSource walks the source files below base like Grep's walk, and
// leaves out node_modules, vendor and target directories too (dependencies
// and build output, not the workspace's own declarations).
func (tb *Toolbox) walkSource(ctx context.Context, base string, fn func(rel string) error) error {
	visited := 0
	return fs.WalkDir(tb.ws.Root().FS(), base, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == base {
				return tb.ws.Explain(base, err)
			}
			return nil
		}
		if visited++; visited > walkMaxEntries {
			return errWalkBound
		}
		if visited%256 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		if d.IsDir() {
			if p != base && (d.Name() == ".git" || d.Name() == "node_modules" || d.Name() == "vendor" || d.Name() == "target") {
				return fs.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		return fn(p)
	})
}

// goSymbols returns the declarations of a Go file through go/ast, or nil
// when it does not parse (the caller falls back to keywords).
func goSymbols(rel string, src []byte) []CodeSymbol {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, rel, src, parser.ParseComments|parser.SkipObjectResolution)
	if err != nil {
		return nil
	}
	syms := []CodeSymbol{}
	add := func(kind, name string, id *ast.Ident, sig string, doc *ast.CommentGroup) {
		pos := fset.Position(id.Pos())
		syms = append(syms, CodeSymbol{File: rel, Line: pos.Line, Column: pos.Column, Kind: kind, Name: name,
			Signature: cutSignature(sig), Doc: docLine(doc), Source: "go/ast"})
	}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			sig := nodeText(fset, &ast.FuncDecl{Recv: d.Recv, Name: d.Name, Type: d.Type})
			if r := receiverTypeName(d); r != "" {
				add(symMethod, r+"."+d.Name.Name, d.Name, sig, d.Doc)
			} else {
				add(symFunc, d.Name.Name, d.Name, sig, d.Doc)
			}
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				switch s := spec.(type) {
				case *ast.TypeSpec:
					doc := s.Doc
					if doc == nil {
						doc = d.Doc
					}
					add(symType, s.Name.Name, s.Name, "type "+s.Name.Name+" "+typeHead(fset, s), doc)
					for _, m := range members(s) {
						for _, n := range m.Names {
							kind := symField
							if _, isFunc := m.Type.(*ast.FuncType); isFunc {
								kind = symMethod
							}
							add(kind, s.Name.Name+"."+n.Name, n, n.Name+" "+nodeText(fset, m.Type), m.Doc)
						}
					}
				case *ast.ValueSpec:
					kind := symVar
					if d.Tok == token.CONST {
						kind = symConst
					}
					doc := s.Doc
					if doc == nil {
						doc = d.Doc
					}
					for _, n := range s.Names {
						add(kind, n.Name, n, kind+" "+oneLine(nodeText(fset, s)), doc)
					}
				}
			}
		}
	}
	return syms
}

// members are the named fields of a struct type and the methods of an
// interface type.
func members(s *ast.TypeSpec) []*ast.Field {
	switch t := s.Type.(type) {
	case *ast.StructType:
		return t.Fields.List
	case *ast.InterfaceType:
		return t.Methods.List
	}
	return nil
}

// typeHead is a type declaration's type, without the members of a struct
// or interface.
func typeHead(fset *token.FileSet, s *ast.TypeSpec) string {
	tparams := ""
	if s.TypeParams != nil {
		tparams = nodeText(fset, s.TypeParams)
		tparams = "[" + strings.TrimSuffix(strings.TrimPrefix(tparams, "("), ")") + "] "
	}
	switch s.Type.(type) {
	case *ast.StructType:
		return tparams + "struct{...}"
	case *ast.InterfaceType:
		return tparams + "interface{...}"
	}
	eq := ""
	if s.Assign.IsValid() {
		eq = "= "
	}
	return tparams + eq + oneLine(nodeText(fset, s.Type))
}

// nodeText prints a node as gofmt would.
func nodeText(fset *token.FileSet, n any) string {
	var b bytes.Buffer
	if err := printer.Fprint(&b, fset, n); err != nil {
		return ""
	}
	return b.String()
}

// oneLine folds a printed node onto one line.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func cutSignature(s string) string {
	s = oneLine(s)
	if len(s) > searchCodeMaxSignature {
		s = string(outcap.TrimPartialRune([]byte(s[:searchCodeMaxSignature]))) + "..."
	}
	return s
}

// docLine is the first line of a doc comment.
func docLine(doc *ast.CommentGroup) string {
	if doc == nil {
		return ""
	}
	line, _, _ := strings.Cut(strings.TrimSpace(doc.Text()), "\n")
	if len(line) > searchCodeMaxDoc {
		line = string(outcap.TrimPartialRune([]byte(line[:searchCodeMaxDoc]))) + "..."
	}
	return line
}

// keywordSymbols finds declarations line by line through re, whose
// submatches are (keyword, name) pairs: the text fallback.
func keywordSymbols(rel string, src []byte, re *regexp.Regexp) []CodeSymbol {
	var syms []CodeSymbol
	sc := bufio.NewScanner(bytes.NewReader(src))
	sc.Buffer(make([]byte, 0, 64<<10), searchCodeMaxFileBytes)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		m := re.FindStringSubmatchIndex(line)
		if m == nil {
			continue
		}
		for i := 2; i+3 < len(m); i += 4 {
			if m[i] < 0 {
				continue
			}
			kw, name := line[m[i]:m[i+1]], line[m[i+2]:m[i+3]]
			syms = append(syms, CodeSymbol{File: rel, Line: n, Column: m[i+2] + 1, Kind: keywordKind(kw), Name: name,
				Signature: cutSignature(strings.TrimSuffix(strings.TrimSpace(line), "{")), Source: "text"})
			break
		}
	}
	return syms
}
