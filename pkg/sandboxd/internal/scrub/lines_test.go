package scrub

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestRulesWithinLines: every rule but the private keys' matches within a
// line, as its syntax says, and the syntax check knows what crosses a line.
func TestRulesWithinLines(t *testing.T) {
	for _, r := range secretRules {
		if want := r.kind != secretPrivateKey; r.lines != want {
			t.Errorf("rule %s (%s): lines = %v, want %v", r.kind, r.re, r.lines, want)
		}
	}
	for expr, crosses := range map[string]bool{
		`a[ \t]+b`: false, `\bfoo-[A-Z]{3}\b`: false, `x.y`: false, `[^\s@]+`: false,
		`a\s+b`: true, `[^x]`: true, `(?s)x.y`: true, `^a`: true, `a$`: true, `\Aa`: true, `a\z`: true,
		`a\nb`: true, `[\s\S]`: true, `(?m)^a`: true, `(?i)bearer\s`: true,
	} {
		if got := !withinLines(regexp.MustCompile(expr)); got != crosses {
			t.Errorf("%s: crosses lines = %v, want %v", expr, got, crosses)
		}
	}
}

// TestLineMatchesAsWholeText: on texts whose every secret sits on a line
// with an anchor of its rule (as every secret of a known format does),
// running a rule line by line finds what it finds on the whole text.
func TestLineMatchesAsWholeText(t *testing.T) {
	pool := []string{
		"package main", "", "\t// see https://example.com/docs and http://x.io:8080/p?q=1",
		"\tsecret := corev1.Secret{} // not a key", "req.Header.Set(\"Authorization\", \"Bearer \"+token)",
		"curl -H 'Authorization: Bearer " + fakeBearer + "' https://api.example.com",
		"Authorization: Basic " + fakeBasic, "aws_secret_access_key = " + fakeAWSSecret,
		"export AWS_ACCESS_KEY_ID=" + fakeAWSKeyID, "GH=" + fakeGitHubPAT + " and " + fakeGitHubFine,
		"git clone https://user:" + fakeURLPassword + "@example.com/x.git", "token: " + fakeGitLab,
		"slack " + fakeSlackBot + " " + fakeSlackHook, "jwt " + fakeJWT, "key=" + fakeGoogle,
		"stripe " + fakeStripe + " llm " + fakeLLM + " npm " + fakeNPM, "AKIA is a prefix, sk-learn too",
		"\tfmt.Println(\"eyJ\", \"xox\", \"ghp_\")",
	}
	rng := rand.New(rand.NewPCG(26, 1))
	for i := range 300 {
		lines := make([]string, 1+rng.IntN(40))
		for j := range lines {
			lines[j] = pool[rng.IntN(len(pool))]
		}
		text := strings.Join(lines, "\n")
		if i%2 == 1 {
			text += "\n"
		}
		for _, r := range secretRules {
			if !r.lines || !containsAny(text, r.anchors) {
				continue
			}
			whole := r.re.FindAllStringSubmatchIndex(text, -1)
			if got := lineMatches(r, text); !slices.EqualFunc(got, whole, slices.Equal) {
				t.Fatalf("rule %s on %q:\nline by line %v\nwhole text   %v", r.kind, text, got, whole)
			}
		}
	}
}

// TestScrubLineDecisions: what running rules line by line decides, where
// it differs from the whole text's run (docs/sandboxd-tools.md).
func TestScrubLineDecisions(t *testing.T) {
	// A token on the line after its "Bearer" is not taken for one.
	if got := Text("Authorization: Bearer\n"+fakeBearer+"\n", Found{}); strings.Contains(got, "REDACTED") {
		t.Errorf("a bearer token across a newline was redacted: %q", got)
	}
	// A match that no anchor's casing spells is redacted only where its
	// line holds an anchor, as a text with no anchor at all never was.
	in := "x: bearer " + fakeBearer + "\ny: bEaReR " + fakeBearer + "x\n"
	want := "x: bearer [REDACTED:bearer_token]\ny: bEaReR " + fakeBearer + "x\n"
	if got := Text(in, Found{}); got != want {
		t.Errorf("Text(%q)\n got %q\nwant %q", in, got, want)
	}
}

// TestScrubResultScrubsSharedTextOnce: a structured result that holds the
// text content (Read's, Bash's) is redacted as the text is; one in which
// nothing is redacted comes back as the same bytes.
func TestScrubResultScrubsSharedTextOnce(t *testing.T) {
	text := "see https://example.com/x\nkey " + fakeGitHubPAT + "\n"
	out, err := json.Marshal(map[string]any{"content": text, "file_path": "a.go"})
	if err != nil {
		t.Fatal(err)
	}
	res := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}, StructuredContent: json.RawMessage(out)}
	found := Result(res)
	var got map[string]any
	if err := json.Unmarshal(res.StructuredContent.(json.RawMessage), &got); err != nil {
		t.Fatal(err)
	}
	want := "see https://example.com/x\nkey [REDACTED:github_token]\n"
	if res.Content[0].(*mcp.TextContent).Text != want || got["content"] != want {
		t.Errorf("text %q, structured %q; want both %q", res.Content[0].(*mcp.TextContent).Text, got["content"], want)
	}
	if c := found.Counts(); c[secretGitHubToken] != 1 || len(c) != 1 {
		t.Errorf("counts = %v", c)
	}

	clean := "see https://example.com/x and a corev1.Secret\n"
	raw := json.RawMessage(fmt.Sprintf(`{"content":%q,"total_lines":1}`, clean))
	res = &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: clean}}, StructuredContent: raw}
	if found := Result(res); len(found) != 0 {
		t.Errorf("found %v in a clean result", found.Counts())
	}
	if sc, ok := res.StructuredContent.(json.RawMessage); !ok || !bytes.Equal(sc, raw) {
		t.Errorf("a clean structured result came back as %s, want %s", res.StructuredContent, raw)
	}
}

// BenchmarkScrubSource is the scrubbing of a Read of a 10 KB Go source
// file that holds the scrubber's common words ("Secret", "://", "Bearer")
// and no secret: the text and a structured result holding it.
//
//	go test -run '^$' -bench BenchmarkScrubSource ./pkg/sandboxd/internal/scrub/
func BenchmarkScrubSource(b *testing.B) {
	var src strings.Builder
	for i := 0; src.Len() < 10<<10; i++ {
		fmt.Fprintf(&src, "\t// step %d: see https://pkg.go.dev/k8s.io/api/core/v1#Secret\n", i)
		fmt.Fprintf(&src, "\tif err := c.Create(ctx, &corev1.Secret{Name: name%d}); err != nil {\n\t\treturn err\n\t}\n", i)
		fmt.Fprintf(&src, "\treq.Header.Set(\"Authorization\", \"Bearer \"+token%d)\n", i)
	}
	text := src.String()
	structured, err := json.Marshal(map[string]any{"content": text, "file_path": "x.go"})
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		res := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}, StructuredContent: json.RawMessage(structured)}
		if found := Result(res); len(found) != 0 {
			b.Fatalf("found %v", found.Counts())
		}
	}
}

// alreadyJSON is a structured result that is JSON already, as sandboxd's
// marshaledJSON.
type alreadyJSON []byte

func (a alreadyJSON) JSON() []byte { return a }

// TestScrubResultOfJSON: a structured result that says it is JSON is
// scrubbed from its bytes, and comes back as it came when clean.
func TestScrubResultOfJSON(t *testing.T) {
	clean := alreadyJSON(`{"content":"see https://example.com/x"}`)
	res := &mcp.CallToolResult{StructuredContent: clean}
	Result(res)
	if got, ok := res.StructuredContent.(alreadyJSON); !ok || !bytes.Equal(got, clean) {
		t.Errorf("clean result came back as %T %s", res.StructuredContent, res.StructuredContent)
	}
	res = &mcp.CallToolResult{StructuredContent: alreadyJSON(`{"content":"key ` + fakeGitHubPAT + `"}`)}
	found := Result(res)
	raw, ok := res.StructuredContent.(json.RawMessage)
	if !ok || string(raw) != `{"content":"key [REDACTED:github_token]"}` || found.Counts()[secretGitHubToken] != 1 {
		t.Errorf("result with a secret came back as %T %s, found %v", res.StructuredContent, res.StructuredContent, found.Counts())
	}
}
