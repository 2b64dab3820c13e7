package wire

import (
	"encoding/json"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/toolcall"
)

// TestMarshalCallToolResultAsTheSDK: the direct paths' encoding of a
// result is byte for byte the SDK's, for the results it writes itself (text
// with every kind of character encoding/json escapes, structured content
// that is JSON but not compact, tool errors, no content) and for those it
// hands to the SDK (a _meta, annotations, other content, other structured
// content), and it refuses what the SDK refuses.
func TestMarshalCallToolResultAsTheSDK(t *testing.T) {
	text := func(s ...string) []mcp.Content {
		var out []mcp.Content
		for _, t := range s {
			out = append(out, &mcp.TextContent{Text: t})
		}
		return out
	}
	tests := map[string]struct {
		res   *mcp.CallToolResult
		plain bool // written by marshalCallToolResult itself
	}{
		"text":                 {res: textResult("     1\tpackage main\n"), plain: true},
		"escapes":              {res: textResult("<a href=\"x\">&</a>\t\x00\x1f\\ \u2028\u2029 é 😀"), plain: true},
		"invalid UTF-8":        {res: textResult("a\xffb\xc3"), plain: true},
		"empty text":           {res: textResult(""), plain: true},
		"several texts":        {res: &mcp.CallToolResult{Content: text("one", "two", "")}, plain: true},
		"no content":           {res: &mcp.CallToolResult{}, plain: true},
		"empty content":        {res: &mcp.CallToolResult{Content: []mcp.Content{}}, plain: true},
		"tool error":           {res: &mcp.CallToolResult{Content: text("no such file"), IsError: true}, plain: true},
		"structured":           {res: &mcp.CallToolResult{Content: text("x"), StructuredContent: json.RawMessage(` { "a" : [1, 2.5e3, "<&>"], "b":{} } `)}, plain: true},
		"marshaled":            {res: &mcp.CallToolResult{Content: text("x"), StructuredContent: mustMarshal(map[string]any{"a": []any{1, 2.5e3, "<&>\u2028"}, "b": map[string]any{}})}, plain: true},
		"marshaled, nil":       {res: &mcp.CallToolResult{Content: text("x"), StructuredContent: toolcall.MarshaledJSON(nil)}},
		"structured and error": {res: &mcp.CallToolResult{Content: text("x"), StructuredContent: json.RawMessage(`{"u":"\u2028"}`), IsError: true}, plain: true},
		"meta":                 {res: &mcp.CallToolResult{Meta: mcp.Meta{"k": "v"}, Content: text("x")}},
		"content meta":         {res: &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "x", Meta: mcp.Meta{"k": 1}}}}},
		"annotations":          {res: &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "x", Annotations: &mcp.Annotations{Priority: 1}}}}},
		"image":                {res: &mcp.CallToolResult{Content: []mcp.Content{&mcp.ImageContent{Data: []byte{1, 2}, MIMEType: "image/png"}}}},
		"structured map":       {res: &mcp.CallToolResult{Content: text("x"), StructuredContent: map[string]any{"a": "<"}}},
		"typed nil structured": {res: &mcp.CallToolResult{Content: text("x"), StructuredContent: json.RawMessage(nil)}},
		"request state":        {res: &mcp.CallToolResult{Content: text("x"), RequestState: "s"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := plainResult(tc.res); got != tc.plain {
				t.Errorf("plainResult = %v, want %v", got, tc.plain)
			}
			want, werr := tc.res.MarshalJSON()
			got, gerr := marshalCallToolResult(tc.res)
			if (werr != nil) != (gerr != nil) {
				t.Fatalf("error %v, the SDK's %v", gerr, werr)
			}
			if string(got) != string(want) {
				t.Errorf("got  %s\nwant %s (the SDK's)", got, want)
			}
		})
	}
	for name, raw := range map[string]json.RawMessage{"not JSON": json.RawMessage(`{"a":`), "empty": {}} {
		t.Run("refused/"+name, func(t *testing.T) {
			res := &mcp.CallToolResult{Content: text("x"), StructuredContent: raw}
			if _, err := res.MarshalJSON(); err == nil {
				t.Fatal("the SDK encodes it: the case tests nothing")
			}
			if got, err := marshalCallToolResult(res); err == nil {
				t.Errorf("encoded %s, want an error as the SDK's", got)
			}
		})
	}
}

// mustMarshal is v as encodeOutput gives it.
func mustMarshal(v any) toolcall.MarshaledJSON {
	data, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return data
}

// BenchmarkMarshalCallToolResult: a Read's result, through the SDK's
// MarshalJSON and through marshalCallToolResult.
func BenchmarkMarshalCallToolResult(b *testing.B) {
	res := textResult("     1\tpackage main\n     2\t\n     3\tfunc main() {}\n")
	for name, marshal := range map[string]func(*mcp.CallToolResult) ([]byte, error){
		"sdk": (*mcp.CallToolResult).MarshalJSON, "sandboxd": marshalCallToolResult,
	} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				if _, err := marshal(res); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// textResult is a successful tool result whose text is what the model reads.
func textResult(text string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}
}
