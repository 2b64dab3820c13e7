// Package scrub is sandboxd's secret scrubber: it finds secrets of known formats in
// the text and structured results of tool calls and redacts them, and never cuts an
// output in the middle of a token. It needs nothing of the server.
package scrub

import (
	"bytes"
	"encoding/json"
	"regexp"
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
		re: regexp.MustCompile(`(?i)\bbearer\s+([A-Za-z0-9\-._~+/]{16,}=*)`), group: 1},
	{kind: secretBasicAuth, anchors: []string{"asic", "ASIC"},
		re: regexp.MustCompile(`(?i)\bauthorization["']?\s*[:=]\s*["']?basic\s+([A-Za-z0-9+/]{8,}=*)`), group: 1},
	{kind: secretAWSAccessKey, anchors: []string{"AKIA", "ASIA", "ABIA", "ACCA", "A3T"},
		re: regexp.MustCompile(`\b(?:AKIA|ASIA|ABIA|ACCA|A3T[A-Z0-9])[A-Z0-9]{16}\b`)},
	{kind: secretAWSSecretKey, anchors: []string{"secret", "SECRET", "Secret"},
		re: regexp.MustCompile(`(?i)aws_?secret_?(?:access_?)?key["']?\s*[:=]\s*["']?([A-Za-z0-9/+]{40})\b`), group: 1},
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

// rawMayHoldSecret is mayHoldSecret for JSON. No anchor has a character
// that JSON escapes.
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
func Text(text string, found Found) string {
	for _, r := range secretRules {
		if !containsAny(text, r.anchors) {
			continue
		}
		matches := r.re.FindAllStringSubmatchIndex(text, -1)
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
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok && mayHoldSecret(tc.Text) {
			tc.Text = Text(tc.Text, found)
		}
	}
	if res.StructuredContent != nil {
		res.StructuredContent = scrubStructured(res.StructuredContent, found)
	}
	return found
}

// scrubStructured scrubs every string of a structured result (the JSON the
// SDK marshalled from a tool's output, or any other value).
func scrubStructured(v any, found Found) any {
	raw, ok := v.(json.RawMessage)
	if !ok {
		var err error
		if raw, err = json.Marshal(v); err != nil {
			return v // the SDK will fail to marshal it as well, and say so
		}
	}
	if !rawMayHoldSecret(raw) {
		return v
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return v
	}
	doc = scrubValue(doc, found)
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(doc); err != nil {
		return v
	}
	return json.RawMessage(bytes.TrimSuffix(out.Bytes(), []byte("\n")))
}

func scrubValue(v any, found Found) any {
	switch x := v.(type) {
	case string:
		if mayHoldSecret(x) {
			return Text(x, found)
		}
		return x
	case []any:
		for i := range x {
			x[i] = scrubValue(x[i], found)
		}
		return x
	case map[string]any:
		for k, e := range x {
			x[k] = scrubValue(e, found)
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
