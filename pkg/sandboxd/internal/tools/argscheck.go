package tools

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/toolcall"
)

// A cheaper check of a tool call's arguments for most calls.
//
// decodeArguments validates the arguments as the SDK does: it decodes them
// into a map, validates the map against the input schema, then decodes them
// again into the tool's input. For a flat input schema (an object of
// strings, integers, numbers and booleans, no other property allowed, no
// constraint but the types, the required list, numbers' minimum and maximum
// and strings' enum: 23 of sandboxd's 29 tools, Read's among them) one scan of the bytes can prove that the schema
// accepts them: then the map and the validation are skipped, and the
// arguments are decoded once, into the input. Whatever the scan cannot
// prove (another type of value, a null, an escaped name, a number with a
// fraction or an exponent for an integer, bytes that do not decode) goes
// the whole way, so that a refusal is the SDK's, word for word.

// flatArgs is a flat input schema: its properties' kinds and the required
// ones. nil: the schema is not flat, every call goes the whole way.
type flatArgs struct {
	props    map[string]argProp
	required int // how many are required (at most 64)
}

// argProp is a property of a flat schema: its kind and, if it is required,
// its bit among the required ones.
type argProp struct {
	kind     argKind
	bit      uint64   // 0: not required
	min, max *float64 // of a number or an integer
	enum     []string // of a string
}

type argKind uint8

const (
	argString argKind = iota + 1
	argInteger
	argNumber
	argBoolean
)

// flatArgsOf returns the flat form of schema, or nil when it is not flat:
// an object whose only keywords are type, properties, required,
// additionalProperties (false) and annotations, each property of one of
// the four kinds with nothing but annotations beside its type.
func flatArgsOf(schema *jsonschema.Schema) *flatArgs {
	if schema == nil {
		return nil
	}
	data, err := json.Marshal(schema)
	if err != nil {
		return nil
	}
	var doc map[string]json.RawMessage
	if json.Unmarshal(data, &doc) != nil {
		return nil
	}
	var typ string
	if json.Unmarshal(doc["type"], &typ) != nil || typ != "object" {
		return nil
	}
	var props map[string]map[string]json.RawMessage
	if json.Unmarshal(doc["properties"], &props) != nil || props == nil {
		return nil
	}
	if add, ok := doc["additionalProperties"]; !ok || !schemaIsFalse(add) {
		return nil
	}
	var required []string
	if raw, ok := doc["required"]; ok && json.Unmarshal(raw, &required) != nil {
		return nil
	}
	required = slices.Compact(slices.Sorted(slices.Values(required)))
	if len(required) > 64 {
		return nil
	}
	for key := range doc {
		switch key {
		case "type", "properties", "required", "additionalProperties", "description", "title", "$schema", "$comment":
		default:
			return nil
		}
	}
	f := &flatArgs{props: make(map[string]argProp, len(props)), required: len(required)}
	for name, prop := range props {
		p, ok := flatProp(prop)
		if !ok {
			return nil
		}
		f.props[name] = p
	}
	for i, name := range required {
		p, ok := f.props[name]
		if !ok {
			return nil // required but not a property: left to the validation
		}
		p.bit = 1 << i
		f.props[name] = p
	}
	return f
}

// schemaIsFalse reports whether raw is a schema that accepts nothing: false,
// or {"not": {}} (jsonschema-go's encoding of it).
func schemaIsFalse(raw json.RawMessage) bool {
	var b bool
	if json.Unmarshal(raw, &b) == nil {
		return !b
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil || len(m) != 1 {
		return false
	}
	var not map[string]json.RawMessage
	return json.Unmarshal(m["not"], &not) == nil && not != nil && len(not) == 0
}

// flatProp is a flat property's schema, false if it is not one: a type
// of the four kinds with annotations, and for a number or an integer a
// minimum and a maximum, for a string an enum of strings.
func flatProp(prop map[string]json.RawMessage) (argProp, bool) {
	var p argProp
	var typ string
	if json.Unmarshal(prop["type"], &typ) != nil {
		return p, false
	}
	switch typ {
	case "string":
		p.kind = argString
	case "integer":
		p.kind = argInteger
	case "number":
		p.kind = argNumber
	case "boolean":
		p.kind = argBoolean
	default:
		return p, false
	}
	numeric := p.kind == argInteger || p.kind == argNumber
	for key, raw := range prop {
		var ok bool
		switch key {
		case "type", "description", "title", "$comment":
			ok = true
		case "minimum":
			ok = numeric && json.Unmarshal(raw, &p.min) == nil && p.min != nil
		case "maximum":
			ok = numeric && json.Unmarshal(raw, &p.max) == nil && p.max != nil
		case "enum":
			ok = p.kind == argString && json.Unmarshal(raw, &p.enum) == nil && len(p.enum) > 0
		}
		if !ok {
			return p, false
		}
	}
	return p, true
}

// holds reports whether value (the bytes of a value of p's kind) surely
// meets p's bounds or enum.
func (p *argProp) holds(value []byte) bool {
	switch {
	case p.enum != nil:
		// Without escapes the bytes between the quotes are the string.
		inner := value[1 : len(value)-1]
		return bytes.IndexByte(inner, '\\') < 0 && slices.Contains(p.enum, string(inner))
	case p.min == nil && p.max == nil:
		return true
	}
	var v float64
	if p.kind == argInteger {
		n, err := strconv.ParseInt(string(value), 10, 64)
		if err != nil || n > 1<<53 || n < -(1<<53) {
			return false // exact as a float64 only up to 2^53
		}
		v = float64(n)
	} else {
		f, err := strconv.ParseFloat(string(value), 64)
		if err != nil {
			return false
		}
		v = f // as encoding/json decodes it into the map the schema checks
	}
	return (p.min == nil || v >= *p.min) && (p.max == nil || v <= *p.max)
}

// accepts reports whether the schema surely accepts raw: a JSON object with
// only names of properties, written without escapes, each value of its
// property's kind, every required property present. false means "not
// proven", not "refused". raw that is not valid JSON may pass the scan: the
// decode that follows refuses it.
func (f *flatArgs) accepts(raw []byte) bool {
	if f == nil {
		return false
	}
	i := toolcall.SkipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return false
	}
	var seen uint64 // the required ones seen
	all := uint64(1)<<f.required - 1
	i = toolcall.SkipSpace(raw, i+1)
	if i < len(raw) && raw[i] == '}' {
		return f.required == 0
	}
	for i < len(raw) {
		if raw[i] != '"' {
			return false
		}
		end := i + 1
		for end < len(raw) && raw[end] != '"' && raw[end] != '\\' && raw[end] >= 0x20 {
			end++
		}
		if end >= len(raw) || raw[end] != '"' {
			return false // an escape, a control byte or the end
		}
		prop, ok := f.props[string(raw[i+1:end])]
		if !ok {
			return false
		}
		seen |= prop.bit
		i = toolcall.SkipSpace(raw, end+1)
		if i >= len(raw) || raw[i] != ':' {
			return false
		}
		i = toolcall.SkipSpace(raw, i+1)
		next, ok := skipValue(raw, i, prop.kind)
		if !ok || !prop.holds(raw[i:next]) {
			return false
		}
		i = toolcall.SkipSpace(raw, next)
		if i >= len(raw) {
			return false
		}
		switch raw[i] {
		case ',':
			i = toolcall.SkipSpace(raw, i+1)
		case '}':
			return seen == all
		default:
			return false
		}
	}
	return false
}

// skipValue skips the value at raw[i] if it is of kind, and returns where it
// ends.
func skipValue(raw []byte, i int, kind argKind) (int, bool) {
	if i >= len(raw) {
		return i, false
	}
	switch kind {
	case argString:
		if raw[i] != '"' {
			return i, false
		}
		for j := i + 1; j < len(raw); j++ {
			switch raw[j] {
			case '\\':
				j++ // the escaped byte; the decode checks the escape
			case '"':
				return j + 1, true
			}
		}
		return i, false
	case argBoolean:
		for _, lit := range []string{"true", "false"} {
			if len(raw)-i >= len(lit) && string(raw[i:i+len(lit)]) == lit {
				return i + len(lit), true
			}
		}
		return i, false
	default: // a number: digits and a sign, and for a number a fraction or an exponent
		j := i
		for j < len(raw) {
			c := raw[j]
			if c >= '0' && c <= '9' || c == '-' {
				j++
				continue
			}
			if kind == argNumber && (c == '.' || c == 'e' || c == 'E' || c == '+') {
				j++
				continue
			}
			break
		}
		return j, j > i
	}
}
