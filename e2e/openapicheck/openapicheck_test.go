package openapicheck

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/pkg/client"
)

// TestCheck: the exchanges the document allows pass, each kind of disagreement is reported.
func TestCheck(t *testing.T) {
	spec, err := New(client.OpenAPIDocument())
	if err != nil {
		t.Fatal(err)
	}
	const (
		acquire  = `{"namespace":"agents","runtime":"agent","session":"s-1","handle":"codegen/default"}`
		bound    = `{"claim":"agent-0123456789","phase":"Bound","addresses":[{"name":"mcp","url":"http://10.0.0.1:8080"}],"headers":{"Authorization":"Bearer x"}}`
		refused  = `{"error":"refused","message":"too many","reason":"MaxPerSession"}`
		sessions = `{"claims":[{"claim":"agent-0123456789","handle":"codegen/default","phase":"Pending"}]}`
	)
	tests := map[string]struct {
		method, path string
		req          string
		status       int
		resp         string
		want         string // a part of the violation; "" for none
	}{
		"a bound acquire":  {method: "POST", path: "/v1/sandboxes/acquire", req: acquire, status: 200, resp: bound},
		"a queued acquire": {method: "POST", path: "/v1/sandboxes/acquire", req: acquire, status: 202, resp: `{"claim":"agent-0123456789","phase":"Queued","reason":"MaxConcurrent"}`},
		"a refusal":        {method: "POST", path: "/v1/sandboxes/acquire", req: acquire, status: 429, resp: refused},
		"a renewal":        {method: "POST", path: "/v1/sandboxes/renew", req: acquire, status: 204},
		"sessions open":    {method: "POST", path: "/v1/sessions/open", req: `{"namespace":"agents","runtime":"agent","session":"s-1"}`, status: 200, resp: sessions},
		"a bad request refused": {method: "POST", path: "/v1/sandboxes/acquire", req: `{"namespace":"agents","extra":1}`, status: 400,
			resp: `{"error":"invalid","message":"unknown field extra"}`},
		"an unknown endpoint": {method: "POST", path: "/v1/nothing", status: 404, resp: `{"error":"not_found","message":"no such endpoint"}`},
		"the document":        {method: "GET", path: "/openapi.json", status: 200, resp: `{"openapi":"3.1.0"}`},
		"a health probe":      {method: "GET", path: "/healthz", status: 200, resp: "ok"},

		"a bad request accepted": {method: "POST", path: "/v1/sandboxes/acquire", req: `{"namespace":"agents","runtime":"agent","session":"has space","handle":"codegen/default"}`, status: 200, resp: bound,
			want: "accepted (200) a request the document does not allow"},
		"an unlisted status": {method: "POST", path: "/v1/sandboxes/renew", req: acquire, status: 200, resp: `{}`, want: "status 200 is not an answer the document lists"},
		"a field the document lacks": {method: "POST", path: "/v1/sandboxes/acquire", req: acquire, status: 200, resp: `{"claim":"c","phase":"Bound","extra":true}`,
			want: "the 200 answer does not match"},
		"a phase the document lacks": {method: "POST", path: "/v1/sandboxes/acquire", req: acquire, status: 202, resp: `{"claim":"c","phase":"Waiting"}`,
			want: "the 202 answer does not match"},
		"an unknown error code": {method: "POST", path: "/v1/sandboxes/acquire", req: acquire, status: 429, resp: `{"error":"slow_down","message":"x"}`,
			want: "the 429 answer does not match"},
		"a body on 204":            {method: "POST", path: "/v1/sandboxes/renew", req: acquire, status: 204, resp: `{"ok":true}`, want: "status 204 has a body"},
		"not JSON":                 {method: "POST", path: "/v1/sessions/close", req: `{"namespace":"agents","runtime":"agent","session":"s"}`, status: 202, resp: "closed", want: "not JSON"},
		"an undocumented endpoint": {method: "POST", path: "/v1/sandboxes/extend", req: acquire, status: 200, resp: `{}`, want: "is not in the document"},
		"a method not documented":  {method: "GET", path: "/v1/sandboxes/acquire", status: 200, resp: `{}`, want: "is not in the document"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := spec.Check(tc.method, tc.path, []byte(tc.req), tc.status, []byte(tc.resp))
			if tc.want == "" && got != "" {
				t.Errorf("violation %q, want none", got)
			}
			if tc.want != "" && !strings.Contains(got, tc.want) {
				t.Errorf("violation %q, want one that says %q", got, tc.want)
			}
		})
	}
}

// TestWrapRecordsAndPassesThrough: the RoundTripper checks what goes through it and hands the
// caller the same request and answer it would have had without it.
func TestWrapRecordsAndPassesThrough(t *testing.T) {
	var gotBody string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		gotBody = string(b)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, `{"claim":"c","phase":"Bound","unexpected":1}`)
	}))
	defer srv.Close()
	spec, err := New(client.OpenAPIDocument())
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: spec.Wrap(srv.Client().Transport)}
	const body = `{"namespace":"agents","runtime":"agent","session":"s-1","handle":"codegen/default"}`
	resp, err := hc.Post(srv.URL+"/v1/sandboxes/acquire", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	answer, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if gotBody != body || string(answer) != `{"claim":"c","phase":"Bound","unexpected":1}` {
		t.Errorf("the server got %q and the caller %q: the wrapper changed them", gotBody, answer)
	}
	violations, checked := spec.Violations()
	if checked != 1 || len(violations) != 1 || !strings.Contains(violations[0], "unexpected") {
		t.Errorf("checked %d, violations %q; want 1 and one naming the unexpected property", checked, violations)
	}
}

// TestNewRefusesOtherVersions: a document that is not OpenAPI 3.1 is refused, not half-checked.
func TestNewRefusesOtherVersions(t *testing.T) {
	for _, doc := range []string{`{"openapi":"3.0.3","paths":{}}`, `{"swagger":"2.0"}`, `not json`} {
		if _, err := New([]byte(doc)); err == nil {
			t.Errorf("New(%s) succeeded, want an error", doc)
		}
	}
}
