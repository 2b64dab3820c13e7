package tools

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/scanner"
	"go/token"
	"io/fs"
	"path"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The AST edit tools (change_function_signature, edit_function_body,
// insert_after_method) edit one Go declaration of one file, addressed by
// name rather than by text: the file is parsed with go/parser, the new code
// is parsed on its own first, the change is spliced into the source at the
// declaration's byte offsets (everything else, comments included, stays as
// it was), and the whole file is gofmt'ed (go/format) before it is written
// atomically, like Edit.

// astMaxShownLines bounds the lines of the changed declaration a result
// shows.
const astMaxShownLines = 40

// ChangeFunctionSignatureInput is the input of change_function_signature.
type ChangeFunctionSignatureInput struct {
	FilePath     string `json:"file_path" jsonschema:"path of the Go file: relative to the workspace, or absolute inside it; it must have been Read first"`
	FunctionName string `json:"function_name" jsonschema:"the function (Foo) or method ((*T).Foo, (T).Foo or T.Foo; pointer or not does not matter) whose signature to change"`
	NewSignature string `json:"new_signature" jsonschema:"the new declaration up to the body's opening brace, e.g. func (s *Server) Start(ctx context.Context) error"`
}

// EditFunctionBodyInput is the input of edit_function_body.
type EditFunctionBodyInput struct {
	FilePath     string `json:"file_path" jsonschema:"path of the Go file: relative to the workspace, or absolute inside it; it must have been Read first"`
	FunctionName string `json:"function_name" jsonschema:"the function (Foo) or method ((*T).Foo, (T).Foo or T.Foo; pointer or not does not matter) whose body to replace"`
	NewBody      string `json:"new_body" jsonschema:"the statements of the new body, without the enclosing braces (an empty string empties the body)"`
}

// InsertAfterMethodInput is the input of insert_after_method.
type InsertAfterMethodInput struct {
	FilePath     string `json:"file_path" jsonschema:"path of the Go file: relative to the workspace, or absolute inside it; it must have been Read first"`
	ReceiverType string `json:"receiver_type" jsonschema:"the receiver's type name, T or *T (the same: pointer or not does not matter)"`
	MethodName   string `json:"method_name" jsonschema:"the method of that type after which the new method goes"`
	NewMethod    string `json:"new_method" jsonschema:"the complete new method declaration on the same type (func, receiver, signature and body), doc comment optional"`
}

// ASTEditOutput is the structured result of the AST edit tools.
type ASTEditOutput struct {
	FilePath string `json:"file_path" jsonschema:"the file edited, relative to the workspace"`
	Function string `json:"function" jsonschema:"the declaration changed or inserted, as (T).Name or Name"`
	Line     int    `json:"line" jsonschema:"its first line in the file as written (after gofmt)"`
	EndLine  int    `json:"end_line" jsonschema:"its last line"`
	Lint     string `json:"lint,omitempty" jsonschema:"what a check of the edited file found; the edit is done all the same"`
}

// goFile is a parsed Go file being edited.
type goFile struct {
	rel  string
	src  []byte
	fset *token.FileSet
	file *ast.File
}

// loadGoForEdit resolves, reads and parses a Go file to edit: it must be a
// .go file of the workspace, Read before and unchanged since, and parse.
func (tb *Toolbox) loadGoForEdit(filePath string) (*goFile, fs.FileMode, error) {
	rel, err := tb.ws.Rel(filePath)
	if err != nil {
		return nil, 0, err
	}
	if path.Ext(rel) != ".go" {
		return nil, 0, fmt.Errorf("%s is not a Go file (.go): the AST edit tools edit Go only; use Edit or MultiEdit", rel)
	}
	rel, content, fi, err := tb.loadForEdit(rel)
	if err != nil {
		return nil, 0, err
	}
	if path.Ext(rel) != ".go" { // a link to a file of another kind
		return nil, 0, fmt.Errorf("%s is not a Go file (.go): the AST edit tools edit Go only; use Edit or MultiEdit", rel)
	}
	src := []byte(content)
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, rel, src, parser.ParseComments|parser.SkipObjectResolution)
	if err != nil {
		return nil, 0, fmt.Errorf("%s does not parse as Go, so it cannot be edited by declaration: %s; fix it with Edit first", rel, firstParseError(err))
	}
	return &goFile{rel: rel, src: src, fset: fset, file: f}, fi.Mode().Perm(), nil
}

// firstParseError keeps the first errors of a go/parser error list short.
func firstParseError(err error) string {
	var list scanner.ErrorList
	if errors.As(err, &list) && len(list) > 3 {
		return fmt.Sprintf("%v (and %d more errors)", scanner.ErrorList(list[:3]), len(list)-3)
	}
	return err.Error()
}

// offset is the byte offset of pos in the file.
func (g *goFile) offset(pos token.Pos) int { return g.fset.Position(pos).Offset }

// receiverTypeName returns the base type name of a method's receiver (T for
// T, *T, T[K], *T[K, V]), or "" for a function.
func receiverTypeName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return ""
	}
	return baseTypeName(fd.Recv.List[0].Type)
}

func baseTypeName(e ast.Expr) string {
	for {
		switch t := e.(type) {
		case *ast.StarExpr:
			e = t.X
		case *ast.ParenExpr:
			e = t.X
		case *ast.IndexExpr:
			e = t.X
		case *ast.IndexListExpr:
			e = t.X
		case *ast.Ident:
			return t.Name
		default:
			return ""
		}
	}
}

// qualifiedName names a function Foo and a method (T).Foo.
func qualifiedName(fd *ast.FuncDecl) string {
	if r := receiverTypeName(fd); r != "" {
		return "(" + r + ")." + fd.Name.Name
	}
	return fd.Name.Name
}

// parseFunctionName splits a function_name into a receiver type (empty for
// a plain name) and a name: Foo, (*T).Foo, (T).Foo, T.Foo, *T.Foo.
func parseFunctionName(s string) (recv, name string, err error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return "", "", errors.New("function_name is empty")
	}
	if rest, ok := strings.CutPrefix(s, "("); ok {
		r, n, ok := strings.Cut(rest, ").")
		if !ok {
			return "", "", fmt.Errorf("function_name %q: a method is written (*T).Name, (T).Name or T.Name", s)
		}
		recv, name = r, n
	} else if r, n, ok := strings.Cut(s, "."); ok {
		recv, name = r, n
	} else {
		name = s
	}
	recv = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(recv), "*"))
	if i := strings.IndexByte(recv, '['); i >= 0 { // T[K]: the type's name
		recv = recv[:i]
	}
	if !token.IsIdentifier(name) || (recv != "" && !token.IsIdentifier(recv)) || strings.Contains(s, "..") {
		return "", "", fmt.Errorf("function_name %q is not a Go function or method name: write Foo, (*T).Foo, (T).Foo or T.Foo", s)
	}
	return recv, name, nil
}

// findFunc finds the one function or method of the file that recv and name
// name: a plain name matches functions and methods alike, and more than one
// match is ambiguous.
func (g *goFile) findFunc(recv, name string) (*ast.FuncDecl, int, error) {
	var matches []int
	for i, d := range g.file.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Name.Name != name {
			continue
		}
		if recv != "" && receiverTypeName(fd) != recv {
			continue
		}
		matches = append(matches, i)
	}
	switch len(matches) {
	case 0:
		return nil, -1, g.notFound(recv, name)
	case 1:
		return g.file.Decls[matches[0]].(*ast.FuncDecl), matches[0], nil
	}
	var names []string
	for _, i := range matches {
		fd := g.file.Decls[i].(*ast.FuncDecl)
		names = append(names, fmt.Sprintf("%s (line %d)", qualifiedName(fd), g.fset.Position(fd.Pos()).Line))
	}
	what := name
	if recv != "" {
		what = "(" + recv + ")." + name
	}
	return nil, -1, fmt.Errorf("%s is ambiguous in %s: %d declarations match: %s; name the method with its receiver, e.g. (T).%s", what, g.rel, len(matches), strings.Join(names, ", "), name)
}

// notFound says that a function is not in the file, and what is.
func (g *goFile) notFound(recv, name string) error {
	var have []string
	for _, d := range g.file.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok && (recv == "" || receiverTypeName(fd) == recv) {
			have = append(have, qualifiedName(fd))
		}
	}
	what, where := "function "+name, "functions and methods"
	if recv != "" {
		what, where = "method "+name+" of "+recv, "methods of "+recv
	}
	if len(have) == 0 {
		return fmt.Errorf("%s not found in %s (it has no %s)", what, g.rel, where)
	}
	if len(have) > 30 {
		have = append(have[:30], fmt.Sprintf("... %d more", len(have)-30))
	}
	return fmt.Errorf("%s not found in %s; its %s: %s", what, g.rel, where, strings.Join(have, ", "))
}

// snippetHeader is put before a snippet of new code to parse it as a file;
// it takes no line of its own, so errors point at the snippet's lines.
const snippetHeader = "package p; "

// parseSnippet parses prefix+src+suffix (prefix on src's first line) as the
// declarations of a file and returns them, or an error whose positions are
// lines of the snippet.
func parseSnippet(what, prefix, src, suffix string) ([]ast.Decl, *token.FileSet, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, what, snippetHeader+prefix+src+suffix, parser.ParseComments|parser.SkipObjectResolution)
	if err != nil {
		return nil, nil, fmt.Errorf("%s does not parse as Go: %s; nothing was written", what, firstParseError(err))
	}
	return f.Decls, fset, nil
}

// changeFunctionSignature is the change_function_signature tool.
func (tb *Toolbox) changeFunctionSignature(ctx context.Context, in ChangeFunctionSignatureInput) (*mcp.CallToolResult, ASTEditOutput, error) {
	recv, name, err := parseFunctionName(in.FunctionName)
	if err != nil {
		return nil, ASTEditOutput{}, err
	}
	sig := strings.TrimSpace(in.NewSignature)
	sig = strings.TrimSpace(strings.TrimSuffix(sig, "{")) // the brace, if given, is the body's
	if sig == "" {
		return nil, ASTEditOutput{}, errors.New("new_signature is empty")
	}
	decls, _, err := parseSnippet("new_signature", "", sig, " {}")
	if err != nil {
		return nil, ASTEditOutput{}, err
	}
	if len(decls) != 1 {
		return nil, ASTEditOutput{}, fmt.Errorf("new_signature must be one function declaration without its body (func Name(...) ...), got %d declarations; nothing was written", len(decls))
	}
	nfd, ok := decls[0].(*ast.FuncDecl)
	if !ok {
		return nil, ASTEditOutput{}, errors.New("new_signature is not a function declaration: it must start with func; nothing was written")
	}
	if nfd.Body == nil || len(nfd.Body.List) != 0 || nfd.Doc != nil {
		return nil, ASTEditOutput{}, errors.New("new_signature must stop before the body's opening brace, with no doc comment (the doc comment and the body stay as they are); nothing was written")
	}
	g, mode, err := tb.loadGoForEdit(in.FilePath)
	if err != nil {
		return nil, ASTEditOutput{}, err
	}
	fd, idx, err := g.findFunc(recv, name)
	if err != nil {
		return nil, ASTEditOutput{}, err
	}
	if fd.Body == nil {
		return nil, ASTEditOutput{}, fmt.Errorf("%s in %s has no body (it is implemented elsewhere, e.g. in assembly): there is no signature to splice before a body; use Edit", qualifiedName(fd), g.rel)
	}
	if (fd.Recv == nil) != (nfd.Recv == nil) {
		return nil, ASTEditOutput{}, fmt.Errorf("new_signature would turn %s %s into a %s: keep it a %s (or add the new declaration with Edit); nothing was written", kindOf(fd), qualifiedName(fd), kindOf(nfd), kindOf(fd))
	}
	start, end := g.offset(fd.Pos()), g.offset(fd.Body.Lbrace)
	out, err := tb.spliceAndSave(ctx, g, mode, start, end, sig+" ", idx, qualifiedName(nfd), "new_signature")
	if err != nil {
		return nil, ASTEditOutput{}, err
	}
	return astResult(fmt.Sprintf("Changed the signature of %s in %s (callers are not updated: run run_typecheck to find them)", qualifiedName(fd), g.rel), out), out.ASTEditOutput, nil
}

func kindOf(fd *ast.FuncDecl) string {
	if fd.Recv != nil {
		return "method"
	}
	return "function"
}

// editFunctionBody is the edit_function_body tool.
func (tb *Toolbox) editFunctionBody(ctx context.Context, in EditFunctionBodyInput) (*mcp.CallToolResult, ASTEditOutput, error) {
	recv, name, err := parseFunctionName(in.FunctionName)
	if err != nil {
		return nil, ASTEditOutput{}, err
	}
	// The body must be statements, not something that closes the function
	// and declares more: it parses as the body of exactly one function.
	const bodyPrefix = "func _() {"
	decls, sfset, err := parseSnippet("new_body", bodyPrefix, in.NewBody, "\n}")
	if err != nil {
		return nil, ASTEditOutput{}, err
	}
	if len(decls) != 1 {
		return nil, ASTEditOutput{}, errors.New("new_body closes the function and declares more: give only the statements of the body, without its braces; nothing was written")
	}
	if bfd, ok := decls[0].(*ast.FuncDecl); !ok || bfd.Body == nil || sfset.Position(bfd.Body.Rbrace).Offset != len(snippetHeader+bodyPrefix+in.NewBody+"\n") {
		return nil, ASTEditOutput{}, errors.New("new_body closes the function early: give only the statements of the body, without its braces; nothing was written")
	}
	g, mode, err := tb.loadGoForEdit(in.FilePath)
	if err != nil {
		return nil, ASTEditOutput{}, err
	}
	fd, idx, err := g.findFunc(recv, name)
	if err != nil {
		return nil, ASTEditOutput{}, err
	}
	if fd.Body == nil {
		return nil, ASTEditOutput{}, fmt.Errorf("%s in %s has no body (it is implemented elsewhere, e.g. in assembly): use Edit to add one", qualifiedName(fd), g.rel)
	}
	start, end := g.offset(fd.Body.Lbrace), g.offset(fd.Body.Rbrace)+1
	body := "{\n" + in.NewBody + "\n}"
	if strings.TrimSpace(in.NewBody) == "" {
		body = "{\n}"
	}
	out, err := tb.spliceAndSave(ctx, g, mode, start, end, body, idx, qualifiedName(fd), "new_body")
	if err != nil {
		return nil, ASTEditOutput{}, err
	}
	return astResult(fmt.Sprintf("Replaced the body of %s in %s", qualifiedName(fd), g.rel), out), out.ASTEditOutput, nil
}

// insertAfterMethod is the insert_after_method tool.
func (tb *Toolbox) insertAfterMethod(ctx context.Context, in InsertAfterMethodInput) (*mcp.CallToolResult, ASTEditOutput, error) {
	recv := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(in.ReceiverType), "*"))
	if i := strings.IndexByte(recv, '['); i >= 0 {
		recv = recv[:i]
	}
	if !token.IsIdentifier(recv) {
		return nil, ASTEditOutput{}, fmt.Errorf("receiver_type %q is not a type name: write T or *T", in.ReceiverType)
	}
	method := strings.TrimSpace(in.MethodName)
	if !token.IsIdentifier(method) {
		return nil, ASTEditOutput{}, fmt.Errorf("method_name %q is not a method name", in.MethodName)
	}
	src := strings.TrimSpace(in.NewMethod)
	if src == "" {
		return nil, ASTEditOutput{}, errors.New("new_method is empty")
	}
	decls, _, err := parseSnippet("new_method", "", src, "")
	if err != nil {
		return nil, ASTEditOutput{}, err
	}
	if len(decls) != 1 {
		return nil, ASTEditOutput{}, fmt.Errorf("new_method must be exactly one method declaration, got %d declarations; nothing was written", len(decls))
	}
	nfd, ok := decls[0].(*ast.FuncDecl)
	if !ok || nfd.Recv == nil {
		return nil, ASTEditOutput{}, errors.New("new_method is not a method declaration: it must be func (r *T) Name(...) ... { ... }; nothing was written")
	}
	if got := receiverTypeName(nfd); got != recv {
		return nil, ASTEditOutput{}, fmt.Errorf("new_method is a method of %s, not of %s: insert_after_method puts a method beside the methods of its own type; nothing was written", got, recv)
	}
	if nfd.Body == nil {
		return nil, ASTEditOutput{}, errors.New("new_method has no body; nothing was written")
	}
	g, mode, err := tb.loadGoForEdit(in.FilePath)
	if err != nil {
		return nil, ASTEditOutput{}, err
	}
	anchor, _, err := g.findFunc(recv, method)
	if err != nil {
		return nil, ASTEditOutput{}, err
	}
	for _, d := range g.file.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok && receiverTypeName(fd) == recv && fd.Name.Name == nfd.Name.Name {
			return nil, ASTEditOutput{}, fmt.Errorf("%s already has a method %s in %s (line %d): change it with edit_function_body or change_function_signature; nothing was written", recv, nfd.Name.Name, g.rel, g.fset.Position(fd.Pos()).Line)
		}
	}
	// After the anchor's line (a comment that ends it stays with it).
	at, text := g.offset(anchor.End()), "\n\n"+src+"\n"
	if nl := bytes.IndexByte(g.src[at:], '\n'); nl >= 0 && !g.inside(at+nl+1) {
		at, text = at+nl+1, "\n"+src+"\n"
	}
	newIdx := 0
	for _, d := range g.file.Decls {
		if g.offset(d.End()) <= at {
			newIdx++
		}
	}
	out, err := tb.spliceAndSave(ctx, g, mode, at, at, text, newIdx, qualifiedName(nfd), "new_method")
	if err != nil {
		return nil, ASTEditOutput{}, err
	}
	return astResult(fmt.Sprintf("Inserted %s after %s in %s", out.Function, qualifiedName(anchor), g.rel), out), out.ASTEditOutput, nil
}

// astSaved is what spliceAndSave returns: the structured output and the
// text of the declaration as written.
type astSaved struct {
	ASTEditOutput
	shown string
}

// inside reports whether the byte offset off falls strictly inside a
// declaration or a comment of the file (code that shares the anchor's last
// line and goes on below it).
func (g *goFile) inside(off int) bool {
	for _, d := range g.file.Decls {
		if g.offset(d.Pos()) < off && off < g.offset(d.End()) {
			return true
		}
	}
	for _, c := range g.file.Comments {
		if g.offset(c.Pos()) < off && off < g.offset(c.End()) {
			return true
		}
	}
	return false
}

// spliceAndSave replaces src[start:end] with text, gofmt's the file, checks
// that the declaration that is now Decls[idx] is the function want, and
// writes the file atomically. Nothing is written when the result does not
// parse, or the declaration is not where it should be.
func (tb *Toolbox) spliceAndSave(ctx context.Context, g *goFile, mode fs.FileMode, start, end int, text string, idx int, want, what string) (astSaved, error) {
	var b bytes.Buffer
	b.Grow(len(g.src) + len(text))
	b.Write(g.src[:start])
	b.WriteString(text)
	b.Write(g.src[end:])
	if int64(b.Len()) > editMaxFileBytes {
		return astSaved{}, fmt.Errorf("the edit would make %s %d bytes, more than Edit handles (%d); nothing was written", g.rel, b.Len(), editMaxFileBytes)
	}
	formatted, err := formatGo(b.Bytes())
	if err != nil {
		return astSaved{}, fmt.Errorf("%s with the %s spliced in does not parse as Go: %s; nothing was written", g.rel, what, firstParseError(err))
	}
	fset := token.NewFileSet()
	nf, err := parser.ParseFile(fset, g.rel, formatted, parser.ParseComments|parser.SkipObjectResolution)
	if err != nil || idx >= len(nf.Decls) {
		return astSaved{}, fmt.Errorf("%s with the %s spliced in does not parse as Go: %v; nothing was written", g.rel, what, err)
	}
	fd, ok := nf.Decls[idx].(*ast.FuncDecl)
	if !ok || qualifiedName(fd) != want {
		return astSaved{}, fmt.Errorf("%s with the %s spliced in does not have %s where it was put (the code around it would change meaning): use Edit; nothing was written", g.rel, what, want)
	}
	startPos := fd.Pos()
	if fd.Doc != nil {
		startPos = fd.Doc.Pos()
	}
	from, to := fset.Position(startPos), fset.Position(fd.End())
	if err := tb.saveEdit(ctx, g.rel, string(formatted), mode); err != nil {
		return astSaved{}, err
	}
	out := astSaved{
		ASTEditOutput: ASTEditOutput{FilePath: g.rel, Function: qualifiedName(fd), Line: from.Line, EndLine: to.Line, Lint: lintFeedback(g.rel, formatted)},
		shown:         numberedLines(formatted[from.Offset:to.Offset], from.Line, astMaxShownLines),
	}
	return out, nil
}

// formatGo gofmt's a Go file; go/format panics on nothing it is given, but
// a recover keeps a bug there from taking sandboxd down.
func formatGo(src []byte) (out []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, fmt.Errorf("formatting failed: %v", r)
		}
	}()
	return format.Source(src)
}

// numberedLines shows text as Read does, from line first, at most max lines.
func numberedLines(text []byte, first, max int) string {
	lines := strings.Split(string(text), "\n")
	var b strings.Builder
	for i, l := range lines {
		if i == max {
			fmt.Fprintf(&b, "  ... %d more lines\n", len(lines)-i)
			break
		}
		fmt.Fprintf(&b, "%6d\t%s\n", first+i, l)
	}
	return b.String()
}

// astResult is the text of an AST edit's result: what was done, the
// declaration as written, and lint feedback.
func astResult(summary string, out astSaved) *mcp.CallToolResult {
	text := fmt.Sprintf("%s (lines %d-%d, gofmt'ed):\n%s", summary, out.Line, out.EndLine, out.shown)
	return textResult(withLint(strings.TrimSuffix(text, "\n"), out.Lint))
}
