package tools

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/airlock-dev/airlock/pkg/toolnames"
)

// listedInputSchemas are the input schemas sandboxd lists, by tool, resolved.
func listedInputSchemas(t *testing.T) map[string]*jsonschema.Resolved {
	t.Helper()
	tb, _ := newTestToolbox(t)
	cs := connectTools(t, tb)
	res, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*jsonschema.Resolved{}
	for _, tool := range res.Tools {
		data, err := json.Marshal(tool.InputSchema)
		if err != nil {
			t.Fatal(err)
		}
		var s jsonschema.Schema
		if err := json.Unmarshal(data, &s); err != nil {
			t.Fatal(err)
		}
		resolved, err := s.Resolve(&jsonschema.ResolveOptions{ValidateDefaults: true})
		if err != nil {
			t.Fatalf("%s: %v", tool.Name, err)
		}
		out[tool.Name] = resolved
	}
	return out
}

// flatProbe is an input with every kind the flat check knows.
type flatProbe struct {
	Name  string  `json:"name"`
	Mode  string  `json:"mode,omitempty"`
	Count int     `json:"count,omitempty"`
	Ratio float64 `json:"ratio,omitempty"`
	On    bool    `json:"on,omitempty"`
}

// TestFlatArgsDecodeAsTheWholeWay checks that arguments the flat check
// proves valid decode to what the whole way (map, schema validation,
// decode) gives, and that every other argument gets the whole way's answer,
// error text and all: over sandboxd's own Read and Grep schemas and a probe
// with every kind, bounds and an enum, for valid calls and for every way
// of being refused or unproven (types, nulls, case, escapes, unknown and
// missing names, fractions and exponents for integers, out of bounds, not
// in the enum, duplicates, bad JSON, not an object). It also checks that
// the flat check takes the plain calls, so that the fast path is used, and
// which it leaves to the whole way.
func TestFlatArgsDecodeAsTheWholeWay(t *testing.T) {
	schemas := listedInputSchemas(t)
	probe, err := resolveToolSchema[flatProbe](ptr[any](schemaFor[flatProbe](func(s *jsonschema.Schema) {
		s.Properties["mode"].Enum = []any{"fast", "slow"}
		s.Properties["count"].Minimum = ptr(0.0)
		s.Properties["count"].Maximum = ptr(10.0)
		s.Properties["ratio"].Minimum = ptr(-1.5)
		s.Properties["ratio"].Maximum = ptr(1.5)
	})))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		args string
		fast bool // the flat check proves it valid
	}{
		{`{"name":"a"}`, true},
		{` { "name" : "a\"b\\c\u00e9" , "mode":"slow","count":10,"ratio":-1.5e0,"on":true } `, true},
		{`{"name":"a","count":0,"on":false}`, true},
		{`{"name":"a","count":11}`, false},
		{`{"name":"a","count":-1}`, false},
		{`{"name":"a","count":2.0}`, false},
		{`{"name":"a","count":1e0}`, false},
		{`{"name":"a","count":99999999999999999999}`, false},
		{`{"name":"a","ratio":1.6}`, false},
		{`{"name":"a","ratio":"1"}`, false},
		{`{"name":"a","mode":"other"}`, false},
		{`{"name":"a","mode":"f\u0061st"}`, false},
		{`{"name":"a","mode":null}`, false},
		{`{"name":null}`, false},
		{`{"Name":"a"}`, false},
		{`{"n\u0061me":"a"}`, false},
		{`{"name":"a","extra":1}`, false},
		{`{"name":"a","name":1}`, false},
		{`{"name":1,"name":"a"}`, false},
		{`{"mode":"fast"}`, false},
		{`{"name":"a","on":"true"}`, false},
		{`{"name":"a",}`, false},
		// Bad JSON the scan lets through: the decode refuses it, and the
		// whole way answers.
		{`{"name":"a"} x`, true},
		{`{"name":"a"}}`, true},
		{`{"name":"a` + "\x01" + `"}`, true},
		{`{"name":"a","count":01}`, true},
		{`{"name":"a"`, false},
		{`{"name":"a","count":-}`, false},
		{`{}`, false},
		{``, false},
		{`null`, false},
		{`[]`, false},
		{`"a"`, false},
	}
	checkAll[flatProbe](t, "probe", probe, cases)

	read := schemas[toolnames.Read]
	checkAll[ReadInput](t, toolnames.Read, read, []struct {
		args string
		fast bool
	}{
		{`{"file_path":"small.txt"}`, true},
		{`{"file_path":"a.txt","offset":2,"limit":1}`, true},
		{`{"file_path":"a.txt","offset":-1}`, false},
		{`{"file_path":"a.txt","offset":2.0}`, false},
		{`{"file_path":"a.txt","FILE_PATH":"b"}`, false},
		{`{"file_path":["a"]}`, false},
	})
	checkAll[GrepInput](t, toolnames.Grep, schemas[toolnames.Grep], []struct {
		args string
		fast bool
	}{
		{`{"pattern":"t","output_mode":"content","-i":true,"head_limit":3}`, true},
		{`{"pattern":"t","output_mode":"lines"}`, false},
		{`{"pattern":"t","head_limit":-3}`, false},
	})
}

func checkAll[In any](t *testing.T, name string, resolved *jsonschema.Resolved, cases []struct {
	args string
	fast bool
}) {
	t.Helper()
	flat := flatArgsOf(resolved.Schema())
	if flat == nil {
		t.Fatalf("%s: the schema is not flat; want it flat: %s", name, mustJSON(resolved.Schema()))
	}
	for _, c := range cases {
		if got := flat.accepts([]byte(c.args)); got != c.fast {
			t.Errorf("%s(%s): flat check proves it valid = %v, want %v", name, c.args, got, c.fast)
		}
		want, wantErr := decodeArguments[In](json.RawMessage(c.args), resolved, nil)
		got, gotErr := decodeArguments[In](json.RawMessage(c.args), resolved, flat)
		if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) || !reflect.DeepEqual(got, want) {
			t.Errorf("%s(%s) = %+v, %v; the whole way gives %+v, %v", name, c.args, got, gotErr, want, wantErr)
		}
	}
}

func mustJSON(v any) string {
	data, _ := json.Marshal(v)
	return string(data)
}

// TestFlatArgsOf checks which schemas are flat: sandboxd's Read (the most
// frequent call) must be; schemas with other keywords, nested values,
// several types or an open object are not.
func TestFlatArgsOf(t *testing.T) {
	schemas := listedInputSchemas(t)
	var flat []string
	for _, name := range toolnames.All() {
		if flatArgsOf(schemas[name].Schema()) != nil {
			flat = append(flat, name)
		}
	}
	t.Logf("flat input schemas: %v", flat)
	for _, name := range []string{toolnames.Read, toolnames.Grep, toolnames.Glob} {
		if flatArgsOf(schemas[name].Schema()) == nil {
			t.Errorf("%s's input schema is not flat: %s", name, mustJSON(schemas[name].Schema()))
		}
	}
	for _, c := range []struct{ name, schema string }{
		{"not an object", `{"type":"string"}`},
		{"open", `{"type":"object","properties":{"a":{"type":"string"}}}`},
		{"open too", `{"type":"object","properties":{"a":{"type":"string"}},"additionalProperties":true}`},
		{"nested", `{"type":"object","properties":{"a":{"type":"array","items":{"type":"string"}}},"additionalProperties":false}`},
		{"two types", `{"type":"object","properties":{"a":{"type":["null","string"]}},"additionalProperties":false}`},
		{"a pattern", `{"type":"object","properties":{"a":{"type":"string","pattern":"x"}},"additionalProperties":false}`},
		{"exclusive bound", `{"type":"object","properties":{"a":{"type":"integer","exclusiveMinimum":0}},"additionalProperties":false}`},
		{"enum of a number", `{"type":"object","properties":{"a":{"type":"integer","enum":[1]}},"additionalProperties":false}`},
		{"a default", `{"type":"object","properties":{"a":{"type":"string","default":"x"}},"additionalProperties":false}`},
		{"required unknown", `{"type":"object","properties":{"a":{"type":"string"}},"required":["b"],"additionalProperties":false}`},
		{"minProperties", `{"type":"object","properties":{"a":{"type":"string"}},"minProperties":1,"additionalProperties":false}`},
	} {
		var s jsonschema.Schema
		if err := json.Unmarshal([]byte(c.schema), &s); err != nil {
			t.Fatal(err)
		}
		if flatArgsOf(&s) != nil {
			t.Errorf("%s: %s is flat; want not", c.name, c.schema)
		}
	}
}
