package tools

import (
	"context"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/toolcall"
)

// addTypedTool adds a typed tool to s as mcp.AddTool does, with the same
// schemas, the same validation of the arguments, and the same results and
// errors, but faster. The output is validated too where that can fail
// (plainOutput).
//
// mcp.AddTool's handler decodes with the SDK's JSON decoder, which takes a
// fresh 32 KiB buffer for every value it decodes: three per tool call (the
// arguments twice, the output once), which made the garbage collector run
// every few calls and was most of what a small tool call cost. Here the
// arguments and the output are decoded with encoding/json, which allocates
// in proportion to the value.
//
// encoding/json matches struct fields case-insensitively where the SDK does
// not; the arguments are decoded straight into In only when the input schema
// makes that the same: every object schema with properties refuses other
// properties (jsonschema.For's inference does so for every struct), so an
// argument whose name differs in case from a field is refused before it is
// decoded, and no schema has a default that ApplyDefaults would add. A tool
// whose schemas are not so is added with mcp.AddTool.
//
// A tool added here is in s's direct table as well (the wire's direct path); one
// added with mcp.AddTool is not, and is called through the SDK alone.
func addTypedTool[In, Out any](s *toolcall.Set, t *mcp.Tool, h toolcall.Handler[In, Out]) {
	tt := *t
	// An output schema inferred from a plain Out accepts every value of it:
	// validating each result against it is left out (see plainOutput).
	checkOutput := t.OutputSchema != nil || !plainOutput(reflect.TypeFor[Out]())
	inResolved, err := resolveToolSchema[In](&tt.InputSchema)
	if err != nil {
		panic(fmt.Sprintf("tool %s: input schema: %v", t.Name, err))
	}
	outResolved, err := resolveToolSchema[Out](&tt.OutputSchema)
	if err != nil {
		panic(fmt.Sprintf("tool %s: output schema: %v", t.Name, err))
	}
	if reflect.TypeFor[Out]().Kind() == reflect.Pointer ||
		!decodesExactly(inResolved.Schema()) || !decodesExactly(outResolved.Schema()) {
		mcp.AddTool(s.Server, t, func(ctx context.Context, _ *mcp.CallToolRequest, in In) (*mcp.CallToolResult, Out, error) {
			return h(ctx, in)
		})
		return
	}
	flat := flatArgsOf(inResolved.Schema())
	handler := func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		in, err := decodeArguments[In](req.Params.Arguments, inResolved, flat)
		if err != nil {
			res := &mcp.CallToolResult{}
			res.SetError(err)
			return res, nil
		}
		res, out, err := h(ctx, in)
		if err != nil {
			if wireErr, ok := err.(*jsonrpc.Error); ok {
				return nil, wireErr
			}
			res := &mcp.CallToolResult{}
			res.SetError(err)
			return res, nil
		}
		if res == nil {
			res = &mcp.CallToolResult{}
		}
		if res.InputRequests != nil {
			return res, nil
		}
		// As the SDK does, a result without content carries the structured
		// output as text too, for clients that read only text: then it is
		// the JSON the SDK gives, keys sorted, byte for byte.
		outJSON, err := encodeOutput(out, outResolved, checkOutput, res.Content == nil)
		if err != nil {
			return nil, err
		}
		res.StructuredContent = toolcall.MarshaledJSON(outJSON)
		if res.Content == nil {
			res.Content = []mcp.Content{&mcp.TextContent{Text: string(outJSON)}}
		}
		return res, nil
	}
	s.Server.AddTool(&tt, handler)
	s.Direct[tt.Name] = handler
}

// resolveToolSchema sets *field to the schema inferred from T when it is
// nil, and resolves it, as mcp.AddTool does.
func resolveToolSchema[T any](field *any) (*jsonschema.Resolved, error) {
	var schema *jsonschema.Schema
	switch v := (*field).(type) {
	case nil:
		rt := reflect.TypeFor[T]()
		if rt.Kind() == reflect.Pointer {
			rt = rt.Elem()
		}
		var err error
		if schema, err = jsonschema.ForType(rt, &jsonschema.ForOptions{}); err != nil {
			return nil, err
		}
		*field = schema
	case *jsonschema.Schema:
		schema = v
	default:
		return nil, fmt.Errorf("a schema of type %T: sandboxd's tools give a *jsonschema.Schema", v)
	}
	return schema.Resolve(&jsonschema.ResolveOptions{ValidateDefaults: true})
}

// decodeArguments validates a tool call's arguments against the input
// schema and decodes them into In, as mcp.AddTool does: absent arguments
// are an empty object, and a failure is a tool error that says
// `validating "arguments"`. Arguments that flat proves the schema accepts
// (argscheck.go) are decoded once, into In, without the map and the
// validation; anything else, and anything that then does not decode, goes
// the whole way.
func decodeArguments[In any](raw json.RawMessage, resolved *jsonschema.Resolved, flat *flatArgs) (In, error) {
	var in In
	if flat.accepts(raw) {
		if json.Unmarshal(raw, &in) == nil {
			return in, nil
		}
		in = *new(In)
	}
	args := make(map[string]any)
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &args); err != nil {
			var typeErr *json.UnmarshalTypeError
			if errors.As(err, &typeErr) && typeErr.Field == "" {
				// Not an object: said as the SDK's decoder says it.
				err = fmt.Errorf("json: cannot unmarshal %q into Go value of type %T", raw, args)
			}
			return in, fmt.Errorf("validating \"arguments\": unmarshaling arguments: %v", err)
		}
	}
	var v any = args
	if err := resolved.Validate(&v); err != nil {
		return in, fmt.Errorf("validating \"arguments\": %v", err)
	}
	if len(raw) == 0 || string(raw) == "null" {
		return in, nil
	}
	if err := json.Unmarshal(raw, &in); err == nil {
		return in, nil
	}
	// A value the schema accepts that Go does not take as written (1.0 or
	// 1e2 for an integer): the SDK decodes the arguments as it re-encodes
	// them from the validated map, where every number is a float64.
	in = *new(In)
	data, err := json.Marshal(args)
	if err != nil {
		return in, err
	}
	if err := json.Unmarshal(data, &in); err != nil {
		return in, err
	}
	return in, nil
}

// encodeOutput marshals a tool's output. With check, it validates it
// against the output schema as mcp.AddTool does; with check or sorted, the
// JSON is that of a map, keys sorted, as the SDK gives it (without, the
// fields are in the struct's order: the same JSON value).
func encodeOutput[Out any](out Out, resolved *jsonschema.Resolved, check, sorted bool) (json.RawMessage, error) {
	data, err := json.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("marshaling output: %w", err)
	}
	if !check && !sorted {
		return data, nil
	}
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		return nil, fmt.Errorf("validating tool output: unmarshaling output: %w", err)
	}
	if v == nil && resolved.Schema().Type == "object" {
		v = map[string]any{}
	}
	if check {
		if err := resolved.Validate(&v); err != nil {
			return nil, fmt.Errorf("validating tool output: %w", err)
		}
	}
	if _, ok := v.(map[string]any); !ok {
		return data, nil
	}
	if data, err = json.Marshal(v); err != nil {
		return nil, fmt.Errorf("validating tool output: marshalling: %v", err)
	}
	return data, nil
}

// plainOutput reports whether every value of t marshals, with
// encoding/json, to JSON that the schema jsonschema.For infers from t
// accepts, so that validating a tool's output against it can only pass.
// That holds for structs (exported fields, named by their json tags), and
// slices, arrays, maps with string keys and pointers of them, down to
// booleans, numbers and strings: the inference gives each field the JSON
// type it marshals to, makes a field required only when it has no
// omitempty (and then it is always there), and lets slices, maps and
// pointers be null. It does not hold for an interface (any value), nor for
// a type that marshals itself (json.Marshaler, encoding.TextMarshaler),
// whose JSON the inference cannot know: those are validated.
func plainOutput(t reflect.Type) bool {
	return plainType(t, map[reflect.Type]bool{})
}

var (
	jsonMarshalerType = reflect.TypeFor[json.Marshaler]()
	textMarshalerType = reflect.TypeFor[encoding.TextMarshaler]()
)

func plainType(t reflect.Type, seen map[reflect.Type]bool) bool {
	if seen[t] {
		return true // a recursive type: the rest of it is being checked
	}
	seen[t] = true
	if t.Implements(jsonMarshalerType) || t.Implements(textMarshalerType) ||
		reflect.PointerTo(t).Implements(jsonMarshalerType) || reflect.PointerTo(t).Implements(textMarshalerType) {
		return false
	}
	switch t.Kind() {
	case reflect.Bool, reflect.String,
		reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		return true
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return false // []byte marshals as base64
		}
		return plainType(t.Elem(), seen)
	case reflect.Pointer, reflect.Array:
		return plainType(t.Elem(), seen)
	case reflect.Map:
		return t.Key().Kind() == reflect.String && plainType(t.Elem(), seen)
	case reflect.Struct:
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() && !f.Anonymous {
				continue // not marshalled
			}
			if tag := f.Tag.Get("json"); tag == "-" {
				continue
			} else if strings.Contains(tag, ",string") {
				return false // a number or boolean marshalled as a string
			}
			if !plainType(f.Type, seen) {
				return false
			}
		}
		return true
	}
	return false
}

// decodesExactly reports whether decoding a value that schema accepts with
// encoding/json gives what the SDK's decoder gives, with no default to
// apply: no schema in it has a default, and every object schema that lists
// properties refuses others (so that no name can differ in case from a
// field's).
func decodesExactly(schema *jsonschema.Schema) bool {
	data, err := json.Marshal(schema)
	if err != nil {
		return false
	}
	var doc any
	if err := json.Unmarshal(data, &doc); err != nil {
		return false
	}
	return schemaDecodesExactly(doc)
}

// schemaDecodesExactly is decodesExactly on a schema as generic JSON.
func schemaDecodesExactly(doc any) bool {
	m, ok := doc.(map[string]any)
	if !ok {
		return true // true or false
	}
	if _, ok := m["default"]; ok {
		return false
	}
	if props, ok := m["properties"].(map[string]any); ok {
		if m["additionalProperties"] != false {
			return false
		}
		for _, p := range props {
			if !schemaDecodesExactly(p) {
				return false
			}
		}
	}
	for _, key := range []string{"items", "additionalProperties", "not", "contains", "propertyNames", "if", "then", "else", "unevaluatedItems", "unevaluatedProperties"} {
		if sub, ok := m[key]; ok && !schemaDecodesExactly(sub) {
			return false
		}
	}
	for _, key := range []string{"prefixItems", "allOf", "anyOf", "oneOf"} {
		list, _ := m[key].([]any)
		for _, sub := range list {
			if !schemaDecodesExactly(sub) {
				return false
			}
		}
	}
	for _, key := range []string{"$defs", "definitions", "patternProperties", "dependentSchemas"} {
		set, _ := m[key].(map[string]any)
		for _, sub := range set {
			if !schemaDecodesExactly(sub) {
				return false
			}
		}
	}
	return true
}
