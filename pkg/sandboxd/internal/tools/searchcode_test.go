package tools

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	gocmp "github.com/google/go-cmp/cmp"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/sandboxdtest"
)

// newSearchCodeWorkspace plants declarations in several languages.
func newSearchCodeWorkspace(t *testing.T) (*Toolbox, string) {
	t.Helper()
	tb, ws := newTestToolbox(t)
	sandboxdtest.WriteFile(t, filepath.Join(ws, "srv", "server.go"), `package srv

import "context"

// Server serves requests.
type Server struct {
	Addr string // where it listens
}

// Handler handles one request.
type Handler interface {
	ServeRequest(ctx context.Context, req string) error
}

// NewServer returns a Server on addr.
func NewServer(addr string) *Server { return &Server{Addr: addr} }

// Serve runs the server until ctx ends.
func (s *Server) Serve(ctx context.Context) error {
	<-ctx.Done()
	return nil
}

const (
	// DefaultAddr is where a server listens by default.
	DefaultAddr = ":8080"
	maxConns    = 10
)

var serverCount int
`)
	sandboxdtest.WriteFile(t, filepath.Join(ws, "srv", "uses.go"), "package srv\n\nfunc use() { _ = NewServer(DefaultAddr) }\n")
	sandboxdtest.WriteFile(t, filepath.Join(ws, "broken", "half.go"), "package broken\n\nfunc ServeBroken() {\n")
	sandboxdtest.WriteFile(t, filepath.Join(ws, "py", "app.py"), "class ServerApp:\n    def serve(self):\n        pass\n\nasync def serve_forever():\n    pass\n")
	sandboxdtest.WriteFile(t, filepath.Join(ws, "web", "index.ts"), "export async function serveStatic(dir: string) {}\nexport const SERVER_NAME = 'x'\nexport interface ServerOptions {}\n")
	sandboxdtest.WriteFile(t, filepath.Join(ws, "rs", "lib.rs"), "pub struct ServerConfig {}\npub(crate) async fn serve_all() {}\n")
	sandboxdtest.WriteFile(t, filepath.Join(ws, "node_modules", "dep", "index.js"), "function serveDep() {}\n")
	sandboxdtest.WriteFile(t, filepath.Join(ws, "notes.txt"), "func ServeText() {}\n")
	return tb, ws
}

func TestSearchCode(t *testing.T) {
	tb, _ := newSearchCodeWorkspace(t)
	short := func(out SearchCodeOutput) []string {
		var got []string
		for _, s := range out.Symbols {
			got = append(got, fmt.Sprintf("%s:%d:%d %s %s [%s]", s.File, s.Line, s.Column, s.Kind, s.Name, s.Source))
		}
		return got
	}
	tests := map[string]struct {
		in   SearchCodeInput
		want []string
	}{
		"exact names first, then prefixes, then the rest; declarations, not uses": {in: SearchCodeInput{Query: "serve"}, want: []string{
			"py/app.py:2:9 func serve [text]",
			"srv/server.go:19:18 method Server.Serve [go/ast]",
			"broken/half.go:3:6 func ServeBroken [text]",
			"py/app.py:1:7 class ServerApp [text]",
			"py/app.py:5:11 func serve_forever [text]",
			"rs/lib.rs:1:12 class ServerConfig [text]",
			"rs/lib.rs:2:21 func serve_all [text]",
			"srv/server.go:6:6 type Server [go/ast]",
			"srv/server.go:12:2 method Handler.ServeRequest [go/ast]",
			"srv/server.go:30:5 var serverCount [go/ast]",
			"web/index.ts:1:23 func serveStatic [text]",
			"web/index.ts:2:14 const SERVER_NAME [text]",
			"web/index.ts:3:18 class ServerOptions [text]",
			"srv/server.go:16:6 func NewServer [go/ast]",
		}},
		"the same case ranks first": {in: SearchCodeInput{Query: "Serve", Exact: true}, want: []string{
			"srv/server.go:19:18 method Server.Serve [go/ast]",
			"py/app.py:2:9 func serve [text]",
		}},
		"Type.Name finds fields and methods of a type": {in: SearchCodeInput{Query: "Server.addr"}, want: []string{
			"srv/server.go:7:2 field Server.Addr [go/ast]",
		}},
		"kind": {in: SearchCodeInput{Query: "server", Kind: "type"}, want: []string{
			"srv/server.go:6:6 type Server [go/ast]",
		}},
		"constants and variables": {in: SearchCodeInput{Query: "addr", Kind: "const"}, want: []string{
			"srv/server.go:26:2 const DefaultAddr [go/ast]",
		}},
		"path narrows": {in: SearchCodeInput{Query: "serve", Path: "web"}, want: []string{
			"web/index.ts:1:23 func serveStatic [text]",
			"web/index.ts:2:14 const SERVER_NAME [text]",
			"web/index.ts:3:18 class ServerOptions [text]",
		}},
		"a file as path": {in: SearchCodeInput{Query: "count", Path: "srv/server.go"}, want: []string{
			"srv/server.go:30:5 var serverCount [go/ast]",
		}},
		"limit": {in: SearchCodeInput{Query: "serve", Limit: 2}, want: []string{
			"py/app.py:2:9 func serve [text]",
			"srv/server.go:19:18 method Server.Serve [go/ast]",
		}},
		"nothing": {in: SearchCodeInput{Query: "nowhere"}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			res, out, err := tb.searchCode(t.Context(), tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if d := gocmp.Diff(tt.want, short(out)); d != "" {
				t.Errorf("symbols (-want +got):\n%s\ntext:\n%s", d, resultText(t, res))
			}
		})
	}

	// Signatures and doc lines come from the Go parser.
	res, out, err := tb.searchCode(t.Context(), SearchCodeInput{Query: "newserver"})
	if err != nil {
		t.Fatal(err)
	}
	want := CodeSymbol{File: "srv/server.go", Line: 16, Column: 6, Kind: "func", Name: "NewServer", Signature: "func NewServer(addr string) *Server",
		Doc: "NewServer returns a Server on addr.", Source: "go/ast"}
	if len(out.Symbols) != 1 || out.Symbols[0] != want || out.Total != 1 {
		t.Errorf("search_code newserver = %+v", out)
	}
	if text := resultText(t, res); text != "srv/server.go:16:6: func NewServer: func NewServer(addr string) *Server  // NewServer returns a Server on addr." {
		t.Errorf("text %q", text)
	}
	_, out, _ = tb.searchCode(t.Context(), SearchCodeInput{Query: "Server", Exact: true})
	if len(out.Symbols) != 1 || out.Symbols[0].Signature != "type Server struct{...}" {
		t.Errorf("type signature: %+v", out.Symbols)
	}
	_, out, _ = tb.searchCode(t.Context(), SearchCodeInput{Query: "ServeRequest"})
	if len(out.Symbols) != 1 || out.Symbols[0].Signature != "ServeRequest func(ctx context.Context, req string) error" {
		t.Errorf("interface method signature: %+v", out.Symbols)
	}
	// The limit says that more matched.
	res, out, _ = tb.searchCode(t.Context(), SearchCodeInput{Query: "serve", Limit: 2})
	if !out.Truncated || out.Total != 14 || !strings.Contains(resultText(t, res), "(2 shown of 14 matching declarations") {
		t.Errorf("truncated result %+v: %s", out, resultText(t, res))
	}
}

func TestSearchCodeErrors(t *testing.T) {
	tb, _ := newSearchCodeWorkspace(t)
	for in, want := range map[SearchCodeInput]string{
		{Query: ""}:                        "query is empty",
		{Query: "a b"}:                     "is not a name",
		{Query: "x(.*)"}:                   "is not a name",
		{Query: "x", Kind: "module"}:       "kind must be one of",
		{Query: "x", Limit: -1}:            "limit must be 1 or more",
		{Query: "x", Path: "notes.txt"}:    "notes.txt is not a source file search_code reads",
		{Query: "x", Path: "nowhere"}:      "no such file or directory",
		{Query: "x", Path: "../elsewhere"}: "leaves the workspace",
	} {
		_, _, err := tb.searchCode(t.Context(), in)
		sandboxdtest.WantErrContaining(t, err, want)
	}
}

// TestConfinementOfSearchCode: search_code reads nothing outside the
// workspace, whether named as its path or reached through a link.
func TestConfinementOfSearchCode(t *testing.T) {
	f := newEscapeFixture(t)
	sandboxdtest.WriteFile(t, filepath.Join(f.outside, "evil.go"), "package evil\n\n// "+secret+"\nfunc TopSecret() {}\n")
	sandboxdtest.MustSymlink(t, "../outside/evil.go", filepath.Join(f.ws, "linked.go"))
	_, out, err := f.tb.searchCode(t.Context(), SearchCodeInput{Query: "secret"})
	if err != nil {
		t.Fatal(err)
	}
	if out.Total != 0 {
		t.Errorf("search_code of the workspace found %+v", out.Symbols)
	}
	for _, p := range append(f.escapePaths(), "linked.go", "dir-link", "abs-dir-link", "a/b/up", "a/chain", "root-link"+f.outside, "../outside/evil.go") {
		_, out, err := f.tb.searchCode(t.Context(), SearchCodeInput{Query: "secret", Path: p})
		if err == nil && out.Total > 0 {
			t.Errorf("search_code(path %.80q) found %+v", p, out.Symbols)
		}
		if err != nil && strings.Contains(err.Error(), secret) {
			t.Errorf("search_code(path %.80q) error leaks the secret: %v", p, err)
		}
	}
}
