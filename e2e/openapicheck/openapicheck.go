// Package openapicheck holds the Sandbox API's traffic to its OpenAPI document
// (pkg/client/openapi.json): a RoundTripper that the e2e suite puts under its API clients checks
// every request it sends and every answer it gets, and records what the document does not
// allow. Bodies are validated with a JSON Schema 2020-12 validator (OpenAPI 3.1's schemas are
// JSON Schema 2020-12).
//
// What counts as a violation:
//   - an answer whose status the operation does not list, or whose body does not match the
//     schema of that status (a 204 must have no body);
//   - a request the document says is invalid (its body does not match the request schema) that
//     the server accepted with a 2xx: the e2e suite sends bad requests on purpose, and those
//     must be refused;
//   - a /v1/ path or method the document does not describe that was answered other than 404/405.
package openapicheck

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// documentURL is where the document is registered with the schema compiler.
const documentURL = "https://airlock.dev/sandbox-api/openapi.json"

// Spec is a compiled OpenAPI document and the violations seen so far.
type Spec struct {
	ops map[string]*operation // "POST /v1/sandboxes/acquire"

	mu         sync.Mutex
	violations []string
	checked    int
}

type operation struct {
	request   *jsonschema.Schema         // nil: no body
	responses map[int]*jsonschema.Schema // nil value: a status without a body
}

type rawOperation struct {
	RequestBody *struct {
		Content map[string]json.RawMessage `json:"content"`
	} `json:"requestBody"`
	Responses map[string]struct {
		Content map[string]json.RawMessage `json:"content"`
	} `json:"responses"`
}

// pointer escapes a JSON pointer token.
func pointer(tokens ...string) string {
	var b strings.Builder
	for _, t := range tokens {
		b.WriteString("/")
		b.WriteString(strings.NewReplacer("~", "~0", "/", "~1").Replace(t))
	}
	return b.String()
}

// New compiles an OpenAPI 3.1 document: the JSON schema of every request body and answer.
func New(document []byte) (*Spec, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(document))
	if err != nil {
		return nil, fmt.Errorf("the OpenAPI document: %w", err)
	}
	var raw struct {
		OpenAPI string                             `json:"openapi"`
		Paths   map[string]map[string]rawOperation `json:"paths"`
	}
	if err := json.Unmarshal(document, &raw); err != nil {
		return nil, fmt.Errorf("the OpenAPI document: %w", err)
	}
	if !strings.HasPrefix(raw.OpenAPI, "3.1.") {
		return nil, fmt.Errorf("the OpenAPI document is version %q, want 3.1", raw.OpenAPI)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource(documentURL, doc); err != nil {
		return nil, err
	}
	compile := func(tokens ...string) (*jsonschema.Schema, error) {
		loc := documentURL + "#" + pointer(tokens...)
		s, err := c.Compile(loc)
		if err != nil {
			return nil, fmt.Errorf("compiling %s: %w", loc, err)
		}
		return s, nil
	}
	s := &Spec{ops: map[string]*operation{}}
	for path, methods := range raw.Paths {
		for method, op := range methods {
			o := &operation{responses: map[int]*jsonschema.Schema{}}
			if op.RequestBody != nil {
				if _, ok := op.RequestBody.Content["application/json"]; !ok {
					return nil, fmt.Errorf("%s %s: the request body is not application/json", method, path)
				}
				if o.request, err = compile("paths", path, method, "requestBody", "content", "application/json", "schema"); err != nil {
					return nil, err
				}
			}
			for status, r := range op.Responses {
				code, err := strconv.Atoi(status)
				if err != nil {
					return nil, fmt.Errorf("%s %s: status %q is not a number", method, path, status)
				}
				o.responses[code] = nil
				if _, ok := r.Content["application/json"]; ok {
					if o.responses[code], err = compile("paths", path, method, "responses", status, "content", "application/json", "schema"); err != nil {
						return nil, err
					}
				}
			}
			s.ops[strings.ToUpper(method)+" "+path] = o
		}
	}
	return s, nil
}

// Check checks one exchange and returns what the document does not allow in it ("" if nothing).
func (s *Spec) Check(method, path string, reqBody []byte, status int, respBody []byte) string {
	op, ok := s.ops[method+" "+path]
	if !ok {
		if strings.HasPrefix(path, "/v1/") && status != http.StatusNotFound && status != http.StatusMethodNotAllowed {
			return fmt.Sprintf("%s %s is not in the document but was answered %d", method, path, status)
		}
		return ""
	}
	var problems []string
	if op.request != nil && status >= 200 && status < 300 {
		if err := validate(op.request, reqBody); err != nil {
			problems = append(problems, fmt.Sprintf("the server accepted (%d) a request the document does not allow: %v", status, err))
		}
	}
	schema, listed := op.responses[status]
	switch {
	case !listed:
		problems = append(problems, fmt.Sprintf("status %d is not an answer the document lists", status))
	case schema == nil && len(bytes.TrimSpace(respBody)) > 0:
		problems = append(problems, fmt.Sprintf("status %d has a body, the document says none: %.200s", status, respBody))
	case schema != nil:
		if err := validate(schema, respBody); err != nil {
			problems = append(problems, fmt.Sprintf("the %d answer does not match the document: %v", status, err))
		}
	}
	if len(problems) == 0 {
		return ""
	}
	return fmt.Sprintf("%s %s: %s", method, path, strings.Join(problems, "; "))
}

func validate(schema *jsonschema.Schema, body []byte) error {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	return schema.Validate(v)
}

// Violations returns what was recorded, and how many exchanges were checked.
func (s *Spec) Violations() (violations []string, checked int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.violations...), s.checked
}

// Wrap returns a RoundTripper that sends through base (http.DefaultTransport if nil) and checks
// every exchange, recording violations. It never changes what the caller sends or gets.
func (s *Spec) Wrap(base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return &transport{spec: s, base: base}
}

type transport struct {
	spec *Spec
	base http.RoundTripper
}

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	var reqBody []byte
	if req.Body != nil && req.Body != http.NoBody {
		b, err := io.ReadAll(req.Body)
		_ = req.Body.Close()
		if err != nil {
			return nil, err
		}
		reqBody = b
		req = req.Clone(req.Context())
		req.Body = io.NopCloser(bytes.NewReader(b))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	}
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	respBody, readErr := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if readErr != nil {
		// The caller gets what was read, then the same error; a cut answer is not checked.
		resp.Body = io.NopCloser(io.MultiReader(bytes.NewReader(respBody), errorReader{readErr}))
		return resp, nil
	}
	resp.Body = io.NopCloser(bytes.NewReader(respBody))
	problem := t.spec.Check(req.Method, req.URL.Path, reqBody, resp.StatusCode, respBody)
	t.spec.mu.Lock()
	t.spec.checked++
	if problem != "" {
		t.spec.violations = append(t.spec.violations, problem)
	}
	t.spec.mu.Unlock()
	return resp, nil
}

// errorReader fails every read with its error.
type errorReader struct{ err error }

func (r errorReader) Read([]byte) (int, error) { return 0, r.err }
