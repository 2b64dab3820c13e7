package scrub

import (
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// filterPieces are what the random lines of TestLineFilterAdmitsEveryMatch
// are made of: the rules' anchors and literals in several cases, the
// runes that fold to k and s (the Kelvin sign, the long s), separators,
// and token runs long and short.
var filterPieces = []string{
	"Bearer", "bearer", "BEARER", "bEaReR", "authorization", "Authorization", "Basic", "basic", "BASIC",
	"aws", "AWS", "aws_", "secret", "Secret", "SECRET", "ſecret", "_access", "key", "KEY", "\u212aey",
	"AKIA", "ASIA", "A3TX", "ghp_", "github_pat_", "glpat-", "hooks.slack.com/services/",
	"https://hooks.slack.com/services/", "xoxb-", "AIza", "sk_live_", "rk_test_", "sk-", "sk-ant-", "npm_",
	"eyJ", ".eyJ", "https://", "user:", "@", ":", "=", " ", "\t", "\"", "'", ".", "-", "_", "/", "+", "é",
	"abcdefgh", "ABCDEFGHIJKLMNOP", "0123456789", "abcdefghijklmnopqrstuvwxyzABCDEF", "xY7_zK9-",
	fakeBearer, fakeBasic, fakeAWSSecret, fakeAWSKeyID, fakeGitHubPAT, fakeGitLab, fakeSlackBot, fakeJWT,
	fakeGoogle, fakeStripe, fakeLLM, fakeNPM, fakeURLPassword,
	// Whole heads of the rules with more parts than a few random pieces
	// put together, some with the runes that fold to k and s.
	"Authorization: Basic ", "authorization='basic\t", "AUTHORIZATION=BASIC ", "\"Authorization\": \"Basic ",
	"aws_secret_access_key = ", "AWS_SECRET_KEY=", "awssecretkey:\"", "aws_ſecret_\u212aey: ", "Aws_Secret_Access_Key\t=\t'",
}

// TestLineFilterAdmitsEveryMatch: a line on which a rule's expression
// matches is admitted by the rule's filter, on lines made to come close
// to every rule (its literals in every case, the runes that fold to ASCII
// letters, token runs about as long as its minimums). The filter is what
// lets lineMatches skip a line, so a line it refuses with a match on it
// would be a secret left in place.
func TestLineFilterAdmitsEveryMatch(t *testing.T) {
	rng := rand.New(rand.NewPCG(26, 3))
	matched := map[string]int{}
	for range 100_000 {
		var b strings.Builder
		for range 1 + rng.IntN(8) {
			b.WriteString(filterPieces[rng.IntN(len(filterPieces))])
		}
		line := b.String()
		for _, r := range secretRules {
			if !r.lines || !r.re.MatchString(line) {
				continue
			}
			matched[r.kind]++
			if !r.filter.admits(line) {
				t.Fatalf("rule %s matches %q, but its filter refuses the line", r.kind, line)
			}
		}
	}
	for _, r := range secretRules {
		if r.lines && matched[r.kind] == 0 {
			t.Errorf("rule %s never matched a random line: the test does not reach it", r.kind)
		}
	}
}

// TestLineFilterOf: the filter read off an expression's syntax holds its
// top-level literals and counted repeats, and nothing of an alternation
// or an optional part.
func TestLineFilterOf(t *testing.T) {
	for expr, want := range map[string]struct {
		lits []string
		runs []int
	}{
		`(?i)aws_?secret_?(?:access_?)?key[ \t]*[:=]([A-Za-z0-9/+]{40})\b`: {[]string{"aws", "secret", "key"}, []int{40}},
		`\bfoo(?:bar|baz)-[A-Z]{3}\b`:                                      {[]string{"foo", "ba", "-"}, nil}, // the parser factors "ba" out
		`x(?:ab)?y[a-z]{8,}z*`:                                             {[]string{"x", "y"}, []int{8}},
		`(?:abc|abd)`:                                                      {[]string{"ab"}, nil}, // the parser factors the common prefix out
		`é[a-z]{9}`:                                                        {nil, []int{9}},
		`q(?:[0-9]{12})|r`:                                                 {nil, nil},
		`(?i)bearer[ \t]+([A-Za-z0-9\-._~+/]{16,}=*)`:                      {[]string{"bearer"}, []int{16}},
	} {
		f := filterOf(regexp.MustCompile(expr))
		var lits []string
		for _, l := range f.lits {
			lits = append(lits, l.s)
		}
		var runs []int
		for _, r := range f.runs {
			runs = append(runs, r.min)
		}
		if !slices.Equal(lits, want.lits) || !slices.Equal(runs, want.runs) {
			t.Errorf("%s: literals %q runs %v, want %q %v", expr, lits, runs, want.lits, want.runs)
		}
	}
}

// TestLineFilterFoldsPastASCII: a case-insensitive literal with a letter
// that folds past ASCII (k, s) is not looked for on a line that is not
// ASCII, where the expression may match it as the Kelvin sign or the
// long s; on an ASCII line it is looked for in any case.
func TestLineFilterFoldsPastASCII(t *testing.T) {
	f := filterOf(regexp.MustCompile(`(?i)key=[a-z]{8}`))
	for line, want := range map[string]bool{
		"KeY=abcdefgh":        true,
		"kex=abcdefgh":        false,
		"\u212aey=abcdefgh":   true, // not ASCII: not refused on the literal
		"ſomething=abcdefgh":  true,
		"key=abc":             false, // the run is short, whatever the line
		"\u212aey=abcdefg":    false,
		"say KEY = abcdefgh!": false, // the expression holds no space: "key=" is not on the line
	} {
		if got := f.admits(line); got != want {
			t.Errorf("admits(%q) = %v, want %v", line, got, want)
		}
	}
}
