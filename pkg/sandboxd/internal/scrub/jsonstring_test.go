package scrub

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// jsonBodyPieces make up the string bodies of the tests below: plain
// text, every escape JSON has (surrogate pairs, lone and reversed
// surrogates, upper- and lower-case hex), bad escapes, bytes that are not
// UTF-8, raw control characters and quotes.
var jsonBodyPieces = []string{
	"a", "Bearer ", "secret", "é", "日本", "\\\"", "\\\\", "\\/", "\\b", "\\f", "\\n", "\\r", "\\t",
	"\\u0041", "\\u00e9", "\\u00E9", "\\u2028", "\\ud83d\\ude00", "\\uD83D\\uDE00", "\\ud83d", "\\ude00",
	"\\ud83dx", "\\ud83d\\u0041", "\\ude00\\ud83d", "\\u0000", "\\u00", "\\uZZZZ", "\\x", "\\'", "\\",
	"\xff", "\xe6\x97", "\xc0\xaf", "\x01", "\"", "\t", " ", fakeBearer,
}

func randomBody(rng *rand.Rand) string {
	var b strings.Builder
	for range rng.IntN(12) {
		b.WriteString(jsonBodyPieces[rng.IntN(len(jsonBodyPieces))])
	}
	return b.String()
}

// TestUnquoteAsUnmarshal: unquote decodes every string body json.Unmarshal
// takes to the same string, over random bodies made of every escape and
// of bytes that are not UTF-8.
func TestUnquoteAsUnmarshal(t *testing.T) {
	rng := rand.New(rand.NewPCG(26, 4))
	valid := 0
	for range 50_000 {
		body := randomBody(rng)
		if checkUnquote(t, body) {
			valid++
		}
	}
	if valid < 5_000 {
		t.Fatalf("only %d of the random bodies were JSON: the test reaches too little", valid)
	}
}

// FuzzUnquote: the same, on what the fuzzer makes.
func FuzzUnquote(f *testing.F) {
	for _, p := range jsonBodyPieces {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, body string) { checkUnquote(t, body) })
}

// checkUnquote fails t when unquote and json.Unmarshal disagree on body,
// and reports whether body is a JSON string's.
func checkUnquote(t *testing.T, body string) bool {
	t.Helper()
	var want string
	if err := json.Unmarshal([]byte(`"`+body+`"`), &want); err != nil {
		return false // not JSON: what unquote says does not matter (stringsUnchanged's doc)
	}
	got, ok := unquote([]byte(body))
	if !ok || got != want {
		t.Fatalf("unquote(%q) = %q, %v; json.Unmarshal gives %q", body, got, ok, want)
	}
	return true
}

// TestStringsUnchangedIsSound: when stringsUnchanged says a JSON text needs
// no scrubbing, decoding and scrubbing it changes nothing (what
// scrubStructured did for every text before). On random documents whose
// strings hold secrets, anchors, escapes and texts already scrubbed.
func TestStringsUnchangedIsSound(t *testing.T) {
	rng := rand.New(rand.NewPCG(26, 5))
	said := 0
	for range 20_000 {
		strs := make([]string, 1+rng.IntN(4))
		for i := range strs {
			strs[i] = randomText(rng)
		}
		done := map[string]string{}
		for _, s := range strs {
			switch rng.IntN(3) {
			case 0:
				done[s] = Text(s, Found{}) // as Result records a text content
			case 1:
				done[s] = s + "x" // a text that Result changed
			}
		}
		raw := randomDoc(rng, strs)
		if !stringsUnchanged(raw, done) {
			continue
		}
		said++
		var doc any
		if err := json.Unmarshal(raw, &doc); err != nil {
			continue // not JSON: returned as it came either way
		}
		changed := false
		scrubValue(doc, Found{}, done, &changed)
		if changed {
			t.Fatalf("stringsUnchanged said %s needs no scrubbing (done %q), but scrubbing changes it", raw, done)
		}
	}
	if said < 1_000 {
		t.Fatalf("stringsUnchanged said yes %d times: the test reaches too little", said)
	}
}

// TestStringsUnchangedOnARead: a Read's structured content, its text
// already scrubbed clean, needs no decode; the same with the text changed
// by the scrubber, or with another string that holds an anchor, does.
func TestStringsUnchangedOnARead(t *testing.T) {
	text := "\tif err := c.Create(ctx, &corev1.Secret{}); err != nil {\n\t\treturn \"Bearer \" + err.Error()\n\t}\n"
	raw, err := json.Marshal(map[string]any{"content": text, "file_path": "x.go", "num_lines": 3})
	if err != nil {
		t.Fatal(err)
	}
	if !stringsUnchanged(raw, map[string]string{text: text}) {
		t.Errorf("a clean Read's structured content is sent to the decoder")
	}
	if stringsUnchanged(raw, map[string]string{text: text + "!"}) {
		t.Errorf("a structured content whose text the scrubber changed is taken as unchanged")
	}
	if stringsUnchanged(raw, nil) {
		t.Errorf("a text with anchors that was not scrubbed is taken as unchanged")
	}
	withKey, err := json.Marshal(map[string]any{"content": text, "note": "Bearer " + fakeBearer})
	if err != nil {
		t.Fatal(err)
	}
	if stringsUnchanged(withKey, map[string]string{text: text}) {
		t.Errorf("a second string with a secret is taken as unchanged")
	}
}

// randomText is a text for TestStringsUnchangedIsSound: some with a
// secret, some with anchors only, some with neither, and some with runes
// JSON escapes.
func randomText(rng *rand.Rand) string {
	pieces := []string{"plain words", " Bearer " + fakeBearer, " see https://example.com", "\n", "\t", "\"q\"",
		"<&>", "\u2028", "é", "Secret", " key=" + fakeGitHubPAT, "\x01", "\xff"}
	var b strings.Builder
	for range rng.IntN(5) {
		b.WriteString(pieces[rng.IntN(len(pieces))])
	}
	return b.String()
}

// randomDoc is a JSON document that holds strs as values, some of them
// as keys too, nested in objects and arrays, with numbers and literals
// between them, marshaled with or without HTML escaping, or with every
// non-ASCII rune and some ASCII letters written as \u escapes.
func randomDoc(rng *rand.Rand, strs []string) []byte {
	var b strings.Builder
	b.WriteString(`{"n":1.5e3,"t":true,"z":null,"v":[`)
	for i, s := range strs {
		if i > 0 {
			b.WriteByte(',')
		}
		enc, _ := json.Marshal(s)
		switch rng.IntN(3) {
		case 1:
			b.WriteString(`{` + string(enc) + `:` + string(enc) + `}`)
		case 2:
			b.WriteString(`[` + escapeLetters(string(enc)) + `]`)
		default:
			b.Write(enc)
		}
	}
	b.WriteString(`]}`)
	return []byte(b.String())
}

// escapeLetters writes a marshaled string's B, e and non-ASCII runes as
// \u escapes, which json.Marshal never does: a decoder reads the same
// string.
func escapeLetters(enc string) string {
	var b strings.Builder
	for i, r := range enc {
		switch {
		case i == 0 || i == len(enc)-1:
			b.WriteRune(r)
		case r == 'B' || r == 'e':
			b.WriteString(`\u00` + strings.ToLower(string("0123456789abcdef"[r>>4])+string("0123456789abcdef"[r&15])))
		case r >= 0x80 && r < 0x10000 && r != 0xfffd:
			b.WriteString(`\u` + hex16(r))
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func hex16(r rune) string {
	const digits = "0123456789abcdef"
	return string([]byte{digits[r>>12&15], digits[r>>8&15], digits[r>>4&15], digits[r&15]})
}

// TestScrubResultSeesEscapedAnchors: a structured result that writes an
// anchor's letter as a \u escape (which JSON allows and json.Marshal never
// does) is scrubbed as its decoded strings say; one whose only escapes
// are json.Marshal's (<, >, &) and that holds no anchor comes back as it
// came.
func TestScrubResultSeesEscapedAnchors(t *testing.T) {
	for _, raw := range []string{
		`{"content":"Authorization: \u0042\u0065arer ` + fakeBearer + `"}`,
		`{"content":"aws_\u0073ecret_access_key = ` + fakeAWSSecret + `"}`,
		`{"content":["x","token \u0067hp_` + fakeGitHubPAT[4:] + `"]}`,
	} {
		res := &mcp.CallToolResult{StructuredContent: json.RawMessage(raw)}
		found := Result(res)
		out, _ := res.StructuredContent.(json.RawMessage)
		if len(found) == 0 || !strings.Contains(string(out), "[REDACTED:") {
			t.Errorf("%s: found %v, came back as %s", raw, found.Counts(), res.StructuredContent)
		}
	}
	clean := json.RawMessage(`{"content":"if a \u003c b \u0026\u0026 c \u003e d {}"}`)
	res := &mcp.CallToolResult{StructuredContent: clean}
	Result(res)
	if got, ok := res.StructuredContent.(json.RawMessage); !ok || string(got) != string(clean) {
		t.Errorf("a clean result with json.Marshal's escapes came back as %s", res.StructuredContent)
	}
	if jsonMayHoldSecret(clean) {
		t.Errorf("json.Marshal's escapes are taken for an anchor's")
	}
}
