package client

import (
	"bytes"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/pkg/attestation"
)

// openapi.json describes the Sandbox API for runtimes in other languages. These tests hold it to
// the Go wire types that the server (pkg/sandboxapi) decodes and encodes and to the routes it
// registers, so that the description and the handlers cannot drift apart.

// schema is the part of a JSON Schema the checks read.
type schema struct {
	Ref                  string             `json:"$ref"`
	Type                 string             `json:"type"`
	Properties           map[string]*schema `json:"properties"`
	Required             []string           `json:"required"`
	Items                *schema            `json:"items"`
	AdditionalProperties any                `json:"additionalProperties"`
	Enum                 []string           `json:"enum"`
	Minimum              *int               `json:"minimum"`
	Maximum              *int               `json:"maximum"`
	MaxLength            *int               `json:"maxLength"`
	Default              any                `json:"default"`
}

type media struct {
	Schema *schema `json:"schema"`
}

type operation struct {
	OperationID string `json:"operationId"`
	RequestBody *struct {
		Required bool             `json:"required"`
		Content  map[string]media `json:"content"`
	} `json:"requestBody"`
	Responses map[string]struct {
		Description string           `json:"description"`
		Content     map[string]media `json:"content"`
	} `json:"responses"`
	Security []map[string][]string `json:"security"`
}

type document struct {
	OpenAPI    string                          `json:"openapi"`
	Paths      map[string]map[string]operation `json:"paths"`
	Components struct {
		Schemas         map[string]*schema `json:"schemas"`
		SecuritySchemes map[string]any     `json:"securitySchemes"`
	} `json:"components"`
}

func loadDocument(t *testing.T) *document {
	t.Helper()
	b, err := os.ReadFile("openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	var d document
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	if d.OpenAPI != "3.1.0" {
		t.Fatalf("openapi is %q, want 3.1.0", d.OpenAPI)
	}
	return &d
}

// resolve follows a $ref to components.schemas.
func (d *document) resolve(t *testing.T, s *schema) (*schema, string) {
	t.Helper()
	if s == nil || s.Ref == "" {
		return s, ""
	}
	name, ok := strings.CutPrefix(s.Ref, "#/components/schemas/")
	if !ok || d.Components.Schemas[name] == nil {
		t.Fatalf("$ref %q does not name a schema of components.schemas", s.Ref)
	}
	return d.Components.Schemas[name], name
}

// wireTypes are the bodies of the Sandbox API, by the schema that describes each.
var wireTypes = []any{AcquireRequest{}, AcquireResponse{}, attestation.Attestation{}, RenewRequest{}, SessionRequest{}, SessionResponse{}, SessionClaim{}, Address{}, ErrorResponse{}}

// TestOpenAPISchemasAreTheWireTypes: each wire type has a schema of its name with exactly its
// JSON fields, the fields without omitempty required, of the JSON type Go encodes them as, and
// no other properties allowed (the server refuses unknown fields).
func TestOpenAPISchemasAreTheWireTypes(t *testing.T) {
	d := loadDocument(t)
	for _, v := range wireTypes {
		typ := reflect.TypeOf(v)
		t.Run(typ.Name(), func(t *testing.T) {
			s := d.Components.Schemas[typ.Name()]
			if s == nil {
				t.Fatalf("components.schemas has no %s", typ.Name())
			}
			if s.Type != "object" || s.AdditionalProperties != false {
				t.Errorf("type %q, additionalProperties %v; want an object that allows no other properties", s.Type, s.AdditionalProperties)
			}
			var names, required []string
			for i := range typ.NumField() {
				f := typ.Field(i)
				name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
				names = append(names, name)
				if !strings.Contains(opts, "omitempty") {
					required = append(required, name)
				}
				p := s.Properties[name]
				if p == nil {
					t.Errorf("field %s (%s) is not a property", f.Name, name)
					continue
				}
				checkType(t, d, name, f.Type, p)
			}
			props := slices.Sorted(maps.Keys(s.Properties))
			slices.Sort(names)
			if !slices.Equal(props, names) {
				t.Errorf("properties %v, the type's JSON fields %v", props, names)
			}
			got := slices.Sorted(slices.Values(s.Required))
			slices.Sort(required)
			if !slices.Equal(got, required) {
				t.Errorf("required %v, want the fields without omitempty %v", got, required)
			}
		})
	}
}

// checkType checks that a property's schema is the JSON type of a Go type.
func checkType(t *testing.T, d *document, name string, goType reflect.Type, p *schema) {
	t.Helper()
	if goType.Kind() == reflect.Pointer {
		goType = goType.Elem()
	}
	resolved, refName := d.resolve(t, p)
	if goType == reflect.TypeOf(json.RawMessage(nil)) {
		// Raw JSON passed through (the attestation): an object whose fields this package does not read.
		if resolved.Type != "object" {
			t.Errorf("%s: type %q, want object", name, resolved.Type)
		}
		return
	}
	switch goType.Kind() {
	case reflect.Bool:
		if resolved.Type != "boolean" {
			t.Errorf("%s: type %q, want boolean", name, resolved.Type)
		}
	case reflect.String:
		if resolved.Type != "string" {
			t.Errorf("%s: type %q, want string", name, resolved.Type)
		}
	case reflect.Int, reflect.Int32, reflect.Int64:
		if resolved.Type != "integer" {
			t.Errorf("%s: type %q, want integer", name, resolved.Type)
		}
	case reflect.Slice:
		if resolved.Type != "array" || resolved.Items == nil {
			t.Errorf("%s: type %q, want an array with items", name, resolved.Type)
			return
		}
		checkType(t, d, name+"[]", goType.Elem(), resolved.Items)
	case reflect.Map:
		if resolved.Type != "object" {
			t.Errorf("%s: type %q, want object", name, resolved.Type)
			return
		}
		ap, _ := json.Marshal(resolved.AdditionalProperties)
		var values schema
		if err := json.Unmarshal(ap, &values); err != nil || values.Type != "string" || goType.Elem().Kind() != reflect.String {
			t.Errorf("%s: additionalProperties %s, want string values", name, ap)
		}
	case reflect.Struct:
		if refName != goType.Name() {
			t.Errorf("%s: $ref %q, want #/components/schemas/%s", name, p.Ref, goType.Name())
		}
	default:
		t.Errorf("%s: no check for Go kind %v", name, goType.Kind())
	}
}

// routes are the routes a file registers with Handle or HandleFunc("METHOD /path", ...), path
// by method: pkg/sandboxapi's /v1/ endpoints, pkg/operator's /openapi.json.
func routes(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || len(call.Args) == 0 {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok || (sel.Sel.Name != "Handle" && sel.Sel.Name != "HandleFunc") {
			return true
		}
		lit, ok := call.Args[0].(*ast.BasicLit)
		if !ok {
			return true
		}
		pattern, _ := strconv.Unquote(lit.Value)
		if method, p, ok := strings.Cut(pattern, " "); ok {
			out[p] = strings.ToLower(method)
		}
		return true
	})
	if len(out) == 0 {
		t.Fatalf("no routes found in %s", path)
	}
	return out
}

// apiRoutes are the Sandbox API's endpoints, as pkg/sandboxapi registers them.
func apiRoutes(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for p, m := range routes(t, filepath.Join("..", "sandboxapi", "handlers.go")) {
		if strings.HasPrefix(p, "/v1/") {
			out[p] = m
		}
	}
	return out
}

// TestOpenAPIDocumentIsServed: the document describes the GET /openapi.json that pkg/operator
// serves on the API port, without a token.
func TestOpenAPIDocumentIsServed(t *testing.T) {
	d := loadDocument(t)
	if m := routes(t, filepath.Join("..", "operator", "servers.go"))["/openapi.json"]; m != "get" {
		t.Errorf("pkg/operator registers /openapi.json with method %q, want GET", m)
	}
	op, ok := d.Paths["/openapi.json"]["get"]
	if !ok {
		t.Fatal("openapi.json does not describe GET /openapi.json")
	}
	if op.Security == nil || len(op.Security) != 0 {
		t.Errorf("GET /openapi.json security %v, want [] (no token)", op.Security)
	}
	if _, ok := op.Responses["200"]; !ok {
		t.Error("GET /openapi.json has no 200 answer")
	}
	if !bytes.Equal(OpenAPIDocument(), mustRead(t, "openapi.json")) {
		t.Error("OpenAPIDocument() is not openapi.json")
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestOpenAPIPathsAreTheRoutes: the document describes exactly the routes the server registers,
// each with its request type, its success answers, the error answers of SPEC section 4 and the
// bearer token.
func TestOpenAPIPathsAreTheRoutes(t *testing.T) {
	d := loadDocument(t)
	want := map[string]struct {
		request   string
		successes map[string]string // status -> response schema ("" for no body)
	}{
		"/v1/sandboxes/acquire": {"AcquireRequest", map[string]string{"200": "AcquireResponse", "202": "AcquireResponse"}},
		"/v1/sandboxes/renew":   {"RenewRequest", map[string]string{"204": ""}},
		"/v1/sessions/open":     {"SessionRequest", map[string]string{"200": "SessionResponse"}},
		"/v1/sessions/close":    {"SessionRequest", map[string]string{"202": "SessionResponse"}},
	}
	registered := apiRoutes(t)
	for p := range d.Paths {
		if _, ok := want[p]; !ok && p != "/openapi.json" {
			t.Errorf("openapi.json describes %s, which the server does not register", p)
		}
	}
	for p, method := range registered {
		if _, ok := want[p]; !ok {
			t.Errorf("the server registers %s %s, which this test does not know: describe it in openapi.json and here", method, p)
		}
		if d.Paths[p] == nil {
			t.Errorf("the server registers %s, which openapi.json does not describe", p)
		}
	}
	for p, w := range want {
		if registered[p] != "post" {
			t.Errorf("%s: the server registers method %q, want POST", p, registered[p])
		}
		ops := d.Paths[p]
		if len(ops) != 1 {
			t.Errorf("%s: operations %v, want post only", p, slices.Sorted(maps.Keys(ops)))
		}
		op, ok := ops["post"]
		if !ok {
			continue
		}
		if op.RequestBody == nil || !op.RequestBody.Required {
			t.Errorf("%s: no required request body", p)
		} else if _, name := d.resolve(t, op.RequestBody.Content["application/json"].Schema); name != w.request {
			t.Errorf("%s: request body %q, want %s", p, name, w.request)
		}
		for status, body := range w.successes {
			r, ok := op.Responses[status]
			if !ok {
				t.Errorf("%s: no %s answer", p, status)
				continue
			}
			var got string
			if m, ok := r.Content["application/json"]; ok {
				_, got = d.resolve(t, m.Schema)
			}
			if got != body {
				t.Errorf("%s %s: body %q, want %q", p, status, got, body)
			}
		}
		for _, status := range []string{"400", "401", "403", "404", "413", "503"} {
			r, ok := op.Responses[status]
			if !ok {
				t.Errorf("%s: no %s answer", p, status)
				continue
			}
			if _, name := d.resolve(t, r.Content["application/json"].Schema); name != "ErrorResponse" {
				t.Errorf("%s %s: body %q, want ErrorResponse", p, status, name)
			}
		}
		if len(op.Security) != 1 || op.Security[0]["serviceAccountToken"] == nil {
			t.Errorf("%s: security %v, want the serviceAccountToken scheme", p, op.Security)
		}
	}
	if d.Components.SecuritySchemes["serviceAccountToken"] == nil {
		t.Error("no securityScheme serviceAccountToken")
	}
}

// codeConstants are the values of the Code* constants of types.go.
func codeConstants(t *testing.T) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "types.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var codes []string
	for _, decl := range f.Decls {
		gd, ok := decl.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if !strings.HasPrefix(name.Name, "Code") || i >= len(vs.Values) {
					continue
				}
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok {
					v, _ := strconv.Unquote(lit.Value)
					codes = append(codes, v)
				}
			}
		}
	}
	if len(codes) == 0 {
		t.Fatal("no Code constants in types.go")
	}
	return codes
}

// TestOpenAPILimitsAreTheClients: the error codes and the request limits of the document are
// this package's constants.
func TestOpenAPILimitsAreTheClients(t *testing.T) {
	d := loadDocument(t)
	s := d.Components.Schemas
	gotCodes := slices.Sorted(slices.Values(s["ErrorResponse"].Properties["error"].Enum))
	wantCodes := codeConstants(t)
	slices.Sort(wantCodes)
	if !slices.Equal(gotCodes, wantCodes) {
		t.Errorf("error codes %v, the Code constants %v", gotCodes, wantCodes)
	}
	wait := s["AcquireRequest"].Properties["waitSeconds"]
	if wait.Maximum == nil || *wait.Maximum != MaxWaitSeconds || wait.Minimum == nil || *wait.Minimum != 0 || wait.Default != float64(DefaultWaitSeconds) {
		t.Errorf("waitSeconds minimum %v, maximum %v, default %v; want 0, %d, %d", wait.Minimum, wait.Maximum, wait.Default, MaxWaitSeconds, DefaultWaitSeconds)
	}
	for name, want := range map[string]int{"Session": MaxSessionLength, "Handle": MaxHandleLength} {
		if got := s[name].MaxLength; got == nil || *got != want {
			t.Errorf("%s maxLength %v, want %d", name, got, want)
		}
	}
}
