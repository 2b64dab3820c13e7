// Package scrub is sandboxd's secret scrubber: it finds secrets of known formats in
// the text and structured results of tool calls and redacts them, and never cuts an
// output in the middle of a token. It needs nothing of the server.
package scrub

import (
	"bytes"
	"encoding/json"
	"regexp"
	"regexp/syntax"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Output hygiene: every tool result passes the secret scrubber on its way
// out (sandboxd's toolCallMiddleware calls Result), whatever the tool. A secret of
// a known format is replaced by [REDACTED:<kind>] in the text the model
// reads and in the structured result alike, and counted by kind; the secret
// itself is never logged. Scrubbing is hygiene, not a boundary: Bash can
// print a secret in a form no pattern knows (split, encoded), and the pod is
// the boundary.
//
// A cap that cuts an output (Bash's first and last halves, a background
// shell's dropped output, Read's and Grep's long lines) never leaves half of
// a token behind: the cut drops the whole token it would split (see
// trimTokenEnd and trimTokenStart), so a secret cut in two is neither
// recognisable nor half-shown. A private key block cut by a cap is redacted
// from its BEGIN line on, or up to its END line.

// Secret kinds, the kind label of airlock_sandboxd_secrets_scrubbed_total.
const (
	secretPrivateKey     = "private_key"
	secretJWT            = "jwt"
	secretURLCredentials = "url_credentials"
	secretBearerToken    = "bearer_token"
	secretBasicAuth      = "basic_auth"
	secretAWSAccessKey   = "aws_access_key_id"
	secretAWSSecretKey   = "aws_secret_access_key"
	secretGitHubToken    = "github_token"
	secretGitLabToken    = "gitlab_token"
	secretSlackToken     = "slack_token"
	secretSlackWebhook   = "slack_webhook"
	secretGoogleAPIKey   = "google_api_key"
	secretStripeKey      = "stripe_key"
	secretLLMAPIKey      = "llm_api_key"
	secretNPMToken       = "npm_token"
)

// maxCutToken is the longest partial token a cut drops; a longer run of
// token bytes (a base64 blob) is cut where the cap falls.
const maxCutToken = 4096

// secretRule is one secret format.
type secretRule struct {
	kind string
	// anchors are literal strings of which one must occur for re to be
	// run at all: a cheap filter, since most outputs hold no secret.
	anchors []string
	re      *regexp.Regexp
	// group is the submatch that is the secret (0: the whole match), so
	// that "Authorization: Bearer" stays readable around its token.
	group int
	// lines: no match of re holds a newline (set at init from re's
	// syntax, withinLines), so re runs only on the lines that hold an
	// anchor (see Text), not on the whole text.
	lines bool
	// filter: what every match holds besides an anchor (set at init from
	// re's syntax, filterOf). A line that lacks it is not run: the @ of URL
	// credentials on the many lines that hold a URL, the "aws" of an AWS
	// secret key on the lines that say Secret.
	filter lineFilter
}

// secretRules are applied in order; a redaction marker matches none of them.
var secretRules = []secretRule{
	{kind: secretPrivateKey, anchors: []string{"PRIVATE KEY"},
		// A whole block, or one whose END a cap cut off: then its body runs
		// as far as base64, header and blank-line characters go.
		re: regexp.MustCompile(`-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----(?:[\s\S]*?-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|[A-Za-z0-9+/=\s:,.\-]*)`)},
	{kind: secretPrivateKey, anchors: []string{"PRIVATE KEY"},
		// The rest of a block whose BEGIN a cap cut off.
		re: regexp.MustCompile(`(?:[A-Za-z0-9+/=]+\r?\n)*[A-Za-z0-9+/=]*-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----`)},
	{kind: secretJWT, anchors: []string{"eyJ"},
		re: regexp.MustCompile(`\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*`)},
	{kind: secretURLCredentials, anchors: []string{"://"},
		// Not a placeholder (${TOKEN}, %s, {password}, <password>).
		re: regexp.MustCompile(`\b[a-zA-Z][a-zA-Z0-9+.\-]{1,20}://[^\s:/@'"<>]+:([^\s@/'"<>$%{][^\s@/'"<>]*)@`), group: 1},
	{kind: secretBearerToken, anchors: []string{"earer", "EARER"},
		re: regexp.MustCompile(`(?i)\bbearer[ \t]+([A-Za-z0-9\-._~+/]{16,}=*)`), group: 1},
	{kind: secretBasicAuth, anchors: []string{"asic", "ASIC"},
		re: regexp.MustCompile(`(?i)\bauthorization["']?[ \t]*[:=][ \t]*["']?basic[ \t]+([A-Za-z0-9+/]{8,}=*)`), group: 1},
	{kind: secretAWSAccessKey, anchors: []string{"AKIA", "ASIA", "ABIA", "ACCA", "A3T"},
		re: regexp.MustCompile(`\b(?:AKIA|ASIA|ABIA|ACCA|A3T[A-Z0-9])[A-Z0-9]{16}\b`)},
	{kind: secretAWSSecretKey, anchors: []string{"secret", "SECRET", "Secret"},
		re: regexp.MustCompile(`(?i)aws_?secret_?(?:access_?)?key["']?[ \t]*[:=][ \t]*["']?([A-Za-z0-9/+]{40})\b`), group: 1},
	{kind: secretGitHubToken, anchors: []string{"ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"},
		re: regexp.MustCompile(`\b(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})\b`)},
	{kind: secretGitLabToken, anchors: []string{"glpat-"},
		re: regexp.MustCompile(`\bglpat-[A-Za-z0-9_\-]{20,}`)},
	{kind: secretSlackWebhook, anchors: []string{"hooks.slack.com"},
		re: regexp.MustCompile(`https://hooks\.slack\.com/services/[A-Za-z0-9/_\-]{20,}`)},
	{kind: secretSlackToken, anchors: []string{"xox"},
		re: regexp.MustCompile(`\bxox[abposre]-[A-Za-z0-9\-]{10,}`)},
	{kind: secretGoogleAPIKey, anchors: []string{"AIza"},
		re: regexp.MustCompile(`\bAIza[0-9A-Za-z_\-]{35}`)},
	{kind: secretStripeKey, anchors: []string{"k_live_", "k_test_"},
		re: regexp.MustCompile(`\b[sr]k_(?:live|test)_[0-9a-zA-Z]{16,}`)},
	{kind: secretLLMAPIKey, anchors: []string{"sk-"},
		re: regexp.MustCompile(`\bsk-(?:ant-|proj-)?[A-Za-z0-9_\-]{32,}`)},
	{kind: secretNPMToken, anchors: []string{"npm_"},
		re: regexp.MustCompile(`\bnpm_[A-Za-z0-9]{36}\b`)},
}

func init() {
	for i := range secretRules {
		secretRules[i].lines = withinLines(secretRules[i].re)
		secretRules[i].filter = filterOf(secretRules[i].re)
	}
}

// withinLines reports whether no match of re can hold a newline, and
// whether re means the same on a line as inside a text: it has no ^, $,
// \A or \z, and at a line's edges \b and \B see what they see around a
// newline (a non-word character) as at the edges of a text.
func withinLines(re *regexp.Regexp) bool {
	parsed, err := syntax.Parse(re.String(), syntax.Perl)
	if err != nil {
		return false
	}
	return !mayCrossLines(parsed.Simplify())
}

// mayCrossLines reports whether re may match a newline, or anchors at the
// start or end of a text or line.
func mayCrossLines(re *syntax.Regexp) bool {
	switch re.Op {
	case syntax.OpBeginLine, syntax.OpEndLine, syntax.OpBeginText, syntax.OpEndText, syntax.OpAnyChar:
		return true
	case syntax.OpLiteral:
		return slices.Contains(re.Rune, '\n')
	case syntax.OpCharClass:
		for i := 0; i+1 < len(re.Rune); i += 2 {
			if re.Rune[i] <= '\n' && '\n' <= re.Rune[i+1] {
				return true
			}
		}
		return false
	}
	for _, sub := range re.Sub {
		if mayCrossLines(sub) {
			return true
		}
	}
	return false
}

// SecretKinds returns every kind, each once, in rule order.
func SecretKinds() []string {
	var kinds []string
	for _, r := range secretRules {
		if len(kinds) == 0 || kinds[len(kinds)-1] != r.kind {
			kinds = append(kinds, r.kind)
		}
	}
	return kinds
}

// Redaction is what a secret of kind is replaced with.
func Redaction(kind string) string { return "[REDACTED:" + kind + "]" }

// Found collects what one tool result's scrubbing found: the distinct
// secrets per kind, so that a secret shown both in the text and in the
// structured result counts once.
type Found map[string]map[string]struct{}

// Counts returns the number of distinct secrets found per kind.
func (s Found) Counts() map[string]int {
	out := make(map[string]int, len(s))
	for kind, set := range s {
		out[kind] = len(set)
	}
	return out
}

func (s Found) Add(kind, secret string) {
	set, ok := s[kind]
	if !ok {
		set = make(map[string]struct{})
		s[kind] = set
	}
	set[secret] = struct{}{}
}

// mayHoldSecret reports whether text holds an anchor of some rule.
func mayHoldSecret(text string) bool {
	for _, r := range secretRules {
		if containsAny(text, r.anchors) {
			return true
		}
	}
	return false
}

// rawMayHoldSecret is mayHoldSecret for bytes.
func rawMayHoldSecret(raw []byte) bool {
	for _, r := range secretRules {
		for _, a := range r.anchors {
			if bytes.Contains(raw, []byte(a)) {
				return true
			}
		}
	}
	return false
}

// Text returns text with every secret replaced by its redaction,
// recording what it found in found.
//
// A rule whose matches stay within a line (all but the private keys') runs
// only on the lines that hold one of its anchors and that its filter
// admits (linefilter.go): on the source files of a
// repository, where "Secret", "://" or "Bearer" are common words, running
// every such rule over the whole text made scrubbing most of a Read's time
// (390 µs of a 10 KB Go file). A match on a line without an anchor of its
// rule (one cased as no anchor is, "bEaReR") is not redacted, as it was not
// when no line of the text held an anchor.
func Text(text string, found Found) string {
	for _, r := range secretRules {
		if !containsAny(text, r.anchors) {
			continue
		}
		var matches [][]int
		if r.lines {
			matches = lineMatches(r, text)
		} else {
			matches = r.re.FindAllStringSubmatchIndex(text, -1)
		}
		if len(matches) == 0 {
			continue
		}
		var b strings.Builder
		last := 0
		for _, m := range matches {
			start, end := m[2*r.group], m[2*r.group+1]
			if start < 0 {
				continue
			}
			found.Add(r.kind, text[start:end])
			b.WriteString(text[last:start])
			b.WriteString(Redaction(r.kind))
			last = end
		}
		b.WriteString(text[last:])
		text = b.String()
	}
	return text
}

// lineMatches is r.re.FindAllStringSubmatchIndex(text, -1) for a rule
// whose matches stay within a line, on the lines of text that hold an
// anchor of r only, in order, with indexes into text.
func lineMatches(r secretRule, text string) [][]int {
	var lines [][2]int // [start, end) of each line with an anchor
	for _, a := range r.anchors {
		for from := 0; ; {
			i := strings.Index(text[from:], a)
			if i < 0 {
				break
			}
			i += from
			start := strings.LastIndexByte(text[:i], '\n') + 1
			end := len(text)
			if j := strings.IndexByte(text[i:], '\n'); j >= 0 {
				end = i + j
			}
			lines = append(lines, [2]int{start, end})
			from = end
		}
	}
	slices.SortFunc(lines, func(a, b [2]int) int { return a[0] - b[0] })
	lines = slices.Compact(lines)
	var out [][]int
	for _, l := range lines {
		if !r.filter.admits(text[l[0]:l[1]]) {
			continue
		}
		for _, m := range r.re.FindAllStringSubmatchIndex(text[l[0]:l[1]], -1) {
			for k := range m {
				if m[k] >= 0 {
					m[k] += l[0]
				}
			}
			out = append(out, m)
		}
	}
	return out
}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// Result scrubs a tool result in place: its text content and its
// structured content. It returns what it found.
func Result(res *mcp.CallToolResult) Found {
	found := Found{}
	// The text contents scrubbed, to what they became: a structured result
	// often holds the same text (Read's content, Bash's output), which is
	// then not scrubbed twice.
	var done map[string]string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok && mayHoldSecret(tc.Text) {
			if done == nil {
				done = map[string]string{}
			}
			scrubbed := Text(tc.Text, found)
			done[tc.Text] = scrubbed
			tc.Text = scrubbed
		}
	}
	if res.StructuredContent != nil {
		res.StructuredContent = scrubStructured(res.StructuredContent, found, done)
	}
	return found
}

// scrubStructured scrubs every string of a structured result (the JSON the
// SDK marshalled from a tool's output, or any other value); done are texts
// already scrubbed (Result's). A result in which nothing was redacted is
// returned as it came.
func scrubStructured(v any, found Found, done map[string]string) any {
	var raw []byte
	switch x := v.(type) {
	case json.RawMessage:
		raw = x
	case interface{ JSON() []byte }: // JSON already (sandboxd's marshaledJSON)
		raw = x.JSON()
	default:
		var err error
		if raw, err = json.Marshal(v); err != nil {
			return v // the SDK will fail to marshal it as well, and say so
		}
	}
	if !jsonMayHoldSecret(raw) || stringsUnchanged(raw, done) {
		return v
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return v
	}
	changed := false
	doc = scrubValue(doc, found, done, &changed)
	if !changed {
		return v
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(doc); err != nil {
		return v
	}
	return json.RawMessage(bytes.TrimSuffix(out.Bytes(), []byte("\n")))
}

// scrubValue scrubs the strings of a decoded JSON value, and sets *changed
// when one of them was redacted.
func scrubValue(v any, found Found, done map[string]string, changed *bool) any {
	switch x := v.(type) {
	case string:
		scrubbed, ok := done[x]
		if !ok {
			if !mayHoldSecret(x) {
				return x
			}
			scrubbed = Text(x, found)
		}
		if scrubbed != x {
			*changed = true
		}
		return scrubbed
	case []any:
		for i := range x {
			x[i] = scrubValue(x[i], found, done, changed)
		}
		return x
	case map[string]any:
		for k, e := range x {
			x[k] = scrubValue(e, found, done, changed)
		}
		return x
	}
	return v
}

// IsTokenByte reports whether c can be part of a token-like secret (keys,
// tokens, base64, JWTs).
func IsTokenByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '_' || c == '+' || c == '/' || c == '=' || c == '.' || c == '~'
}

// TrimTokenEnd drops the run of token bytes at the end of b, which a cut
// right after b may have split, unless the run is longer than maxCutToken.
// It returns the bytes kept.
func TrimTokenEnd(b []byte) []byte {
	i := len(b)
	for i > 0 && IsTokenByte(b[i-1]) && len(b)-i < maxCutToken {
		i--
	}
	if i > 0 && IsTokenByte(b[i-1]) {
		return b // a run longer than maxCutToken: not a secret we know
	}
	return b[:i]
}

// TrimTokenStart drops the run of token bytes at the start of b, which a cut
// right before b may have split, unless the run is longer than maxCutToken.
func TrimTokenStart(b []byte) []byte {
	i := 0
	for i < len(b) && IsTokenByte(b[i]) && i < maxCutToken {
		i++
	}
	if i < len(b) && IsTokenByte(b[i]) {
		return b
	}
	return b[i:]
}
