package wire

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// TestDecodeMessageMatchesSDK checks that decodeMessage, sandboxd's faster
// decoder, decodes every message as the SDK's jsonrpc.DecodeMessage does,
// and refuses the messages it refuses: well-formed calls, notifications
// and responses, and the odd and hostile ones (keys in another case,
// duplicate keys, ids of every JSON type, null members, deep nesting).
func TestDecodeMessageMatchesSDK(t *testing.T) {
	deep := func(n int) string {
		return `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"a":` + strings.Repeat("[", n) + strings.Repeat("]", n) + `}}`
	}
	for _, msg := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"Read","arguments":{"file_path":"a.txt"}}}`,
		`{"jsonrpc":"2.0","id":"abc","method":"initialize","params":{}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":7,"result":{"ok":true}}`,
		`{"jsonrpc":"2.0","id":7,"error":{"code":-32601,"message":"no","data":{"x":1}}}`,
		`{"jsonrpc":"2.0","id":7,"error":null}`,
		`{"jsonrpc":"2.0","id":7}`,
		`{"jsonrpc":"2.0","result":{}}`,
		`{"jsonrpc":"2.0","id":null,"method":"ping"}`,
		`{"jsonrpc":"2.0","id":1.5,"method":"ping"}`,
		`{"jsonrpc":"2.0","id":-3,"method":"ping"}`,
		`{"jsonrpc":"2.0","id":true,"method":"ping"}`,
		`{"jsonrpc":"2.0","id":{},"method":"ping"}`,
		`{"jsonrpc":"2.0","id":[1],"method":"ping"}`,
		`{"jsonrpc":"2.0","id":1,"method":""}`,
		`{"jsonrpc":"2.0","id":1,"method":null}`,
		`{"jsonrpc":"2.0","id":1,"method":5}`,
		`{"jsonrpc":"2.0","id":1,"method":"ping","params":null}`,
		`{"jsonrpc":"2.0","id":1,"method":"ping","params":[1,2]}`,
		`{"jsonrpc":"1.0","id":1,"method":"ping"}`,
		`{"jsonrpc":2,"id":1,"method":"ping"}`,
		`{"id":1,"method":"ping"}`,
		`{"JSONRPC":"2.0","id":1,"method":"ping"}`,
		`{"jsonrpc":"2.0","ID":1,"Method":"ping"}`,
		`{"jsonrpc":"2.0","id":1,"method":"ping","Params":{"x":1}}`,
		`{"jsonrpc":"2.0","id":1,"method":"a","method":"b"}`,
		`{"jsonrpc":"2.0","id":1,"id":"x","method":"ping"}`,
		`{"jsonrpc":"2.0","id":1,"method":"ping","extra":{"deep":[1,2,3]}}`,
		`{"jsonrpc":"2.0","id":7,"error":{"Code":1,"Message":"m"}}`,
		`{"jsonrpc":"2.0","id":7,"error":{"code":"x","message":"m"}}`,
		`{"jsonrpc":"2.0","id":7,"error":[]}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"s":"\u00e9\"}{[\\"}}`,
		deep(990),
		deep(1001),
	} {
		want, wantErr := jsonrpc.DecodeMessage([]byte(msg))
		got, gotErr := decodeMessage([]byte(msg))
		name := msg
		if len(name) > 80 {
			name = name[:80] + "..."
		}
		if (wantErr != nil) != (gotErr != nil) {
			t.Errorf("%s: SDK error %v, ours %v", name, wantErr, gotErr)
			continue
		}
		if wantErr != nil {
			continue
		}
		if diff := cmp.Diff(describeMessage(t, want), describeMessage(t, got)); diff != "" {
			t.Errorf("%s (-SDK +ours):\n%s", name, diff)
		}
	}
}

// describeMessage puts what a message says in comparable form.
func describeMessage(t *testing.T, msg jsonrpc.Message) map[string]any {
	t.Helper()
	compact := func(raw json.RawMessage) string {
		if raw == nil {
			return "<absent>"
		}
		var b bytes.Buffer
		if err := json.Compact(&b, raw); err != nil {
			t.Fatalf("compact %q: %v", raw, err)
		}
		return b.String()
	}
	switch m := msg.(type) {
	case *jsonrpc.Request:
		return map[string]any{"kind": "request", "id": m.ID.Raw(), "valid": m.ID.IsValid(), "method": m.Method, "params": compact(m.Params)}
	case *jsonrpc.Response:
		d := map[string]any{"kind": "response", "id": m.ID.Raw(), "result": compact(m.Result), "error": nil}
		if m.Error != nil {
			we, ok := m.Error.(*jsonrpc.Error)
			if !ok {
				t.Fatalf("error of type %T", m.Error)
			}
			d["error"] = map[string]any{"code": we.Code, "message": we.Message, "data": compact(we.Data)}
		}
		return d
	}
	t.Fatalf("message of type %T", msg)
	return nil
}

// BenchmarkDecodeMessage compares decodeMessage with the SDK's decoder on a
// Read call.
func BenchmarkDecodeMessage(b *testing.B) {
	msg := []byte(`{"jsonrpc":"2.0","id":12,"method":"tools/call","params":{"name":"Read","arguments":{"file_path":"small.txt"}}}`)
	b.Run("sdk", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := jsonrpc.DecodeMessage(msg); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("sandboxd", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := decodeMessage(msg); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// splitMembersCorpus are objects and non-objects for splitMembers: nested
// values, strings with quotes, braces and escapes, duplicate names,
// whitespace, every literal; names with escapes or outside ASCII, bad JSON.
var splitMembersCorpus = []string{
	`{}`, ` { } `, `{"a":1}`, `{"a":1,"a":2}`,
	`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"Read","arguments":{"file_path":"a\"}{][.txt"}}}`,
	` {"a" : [1, {"b": "]}"}, "\\\"" ] ,"c":true,"d":false,"e":null,"f":-1.5e3 } `,
	"{\"a\":\"x\",\n\t\"b\":{}\r}",
	`{"a":{"b":{"c":[[[]]]}},"z":"end"}`,
	`{"n\u0061me":1}`, `{"é":1}`, `{"a":"é\ud83d\ude00"}`, `{"a":"\xff"}`, "{\"\xff\":1}",
	`{"a":1,}`, `{"a":1`, `{"a" 1}`, `{"a":1}}`, `{"a":1} {}`, `[1]`, `"a"`, `null`, `1`, ``, ` `,
}

// TestSplitMembersAsUnmarshal checks that splitMembers, where it takes an
// object, gives what json.Unmarshal into a map of json.RawMessage gives, and
// that it leaves to json.Unmarshal what it cannot take exactly: names with
// escapes or outside ASCII, bad JSON and non-objects.
func TestSplitMembersAsUnmarshal(t *testing.T) {
	declined := map[string]bool{`{"n\u0061me":1}`: true, `{"é":1}`: true, "{\"\xff\":1}": true}
	for _, data := range splitMembersCorpus {
		var want map[string]json.RawMessage
		wantErr := json.Unmarshal([]byte(data), &want)
		got, ok := splitMembers([]byte(data))
		switch {
		case wantErr != nil || want == nil:
			if ok {
				t.Errorf("splitMembers(%q) took it; json.Unmarshal: %v, %v", data, want, wantErr)
			}
		case declined[data]:
			if ok {
				t.Errorf("splitMembers(%q) took it; want it left to json.Unmarshal", data)
			}
		case !ok:
			t.Errorf("splitMembers(%q) declined it; want it taken", data)
		case !reflect.DeepEqual(got, want):
			t.Errorf("splitMembers(%q) = %q, json.Unmarshal gives %q", data, got, want)
		}
		if ok {
			for name, v := range got {
				if cap(v) != len(v) {
					t.Errorf("splitMembers(%q)[%q] has room past its end: an append would write into the message", data, name)
				}
			}
		}
	}
}

// FuzzSplitMembers: wherever splitMembers takes its input, json.Unmarshal
// decodes it to the same members.
func FuzzSplitMembers(f *testing.F) {
	for _, data := range splitMembersCorpus {
		f.Add([]byte(data))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, ok := splitMembers(data)
		if !ok {
			return
		}
		var want map[string]json.RawMessage
		if err := json.Unmarshal(data, &want); err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("splitMembers(%q) = %q; json.Unmarshal gives %q, %v", data, got, want, err)
		}
	})
}
