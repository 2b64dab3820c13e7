package sandboxd

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/outcap"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/procgroup"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/scrub"
	"github.com/airlock-dev/airlock/pkg/toolnames"
)

// Fake secrets of the formats the scrubber knows (none is live), for the
// tests of the tools' output (the scrubber's own tests have more).
const (
	testGitHubPAT = "ghp_R2d2C3poLuke0Leia1Han2Chewie3Yoda4xy"
	testAWSKeyID  = "AKIAIOSFODNN7EXAMPLE"
	testJWT       = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIn0.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
	testBearer    = "mF_9.B5f-4.1JqM/abcDEF+xyz=="
)

// noFragment fails if any 6-byte piece of secret's body shows in text.
func noFragment(t *testing.T, text, secret string) {
	t.Helper()
	for i := 0; i+6 <= len(secret); i++ {
		if piece := secret[i : i+6]; strings.Contains(text, piece) {
			t.Errorf("the output shows %q, a piece of the secret %q", piece, secret)
			return
		}
	}
}

// TestSecretAcrossTheCap puts a secret across each cut of Bash's capped
// output, at every offset around the cut: neither half of it is shown.
func TestSecretAcrossTheCap(t *testing.T) {
	const limit = 512
	for _, secret := range []string{testGitHubPAT, testAWSKeyID, testJWT} {
		for shift := 1; shift < len(secret); shift += 3 {
			// Across the head's end: the head holds the first shift bytes.
			b := outcap.New(limit)
			filler := strings.Repeat("filler line\n", 100)
			fmt.Fprintf(b, "%s%s\n%s\nend\n", strings.Repeat(" ", limit/2-shift), secret, filler)
			text := scrub.Text(b.String(), scrub.Found{})
			noFragment(t, text, secret)
			if !strings.Contains(text, "bytes of output elided") {
				t.Fatalf("the output was not cut: %q", text)
			}
			// Across the tail's start: the tail holds its last shift bytes.
			b = outcap.New(limit)
			fmt.Fprintf(b, "start\n%s%s%s", filler, secret, strings.Repeat(" ", limit/2-(len(secret)-shift)))
			text = scrub.Text(b.String(), scrub.Found{})
			noFragment(t, text, secret)
			if !strings.Contains(text, "bytes of output elided") {
				t.Fatalf("the output was not cut: %q", text)
			}
		}
	}
}

// TestSecretsScrubbedThroughMCP runs Bash through the protocol layer: the
// model reads no secret, in the text nor in the structured result, a
// secret cut by the cap is not half shown, and the secrets are counted.
func TestSecretsScrubbedThroughMCP(t *testing.T) {
	cs, _, m := newInMemoryWithMetrics(t, false, nil)
	cmd := fmt.Sprintf("echo %s; echo 'Authorization: Bearer %s'", testGitHubPAT, testBearer)
	res := callTool(t, cs, toolnames.Bash, map[string]any{"command": cmd})
	text := contentText(res)
	for _, s := range []string{testGitHubPAT, testBearer} {
		noFragment(t, text, s)
	}
	structured, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	noFragment(t, string(structured), testGitHubPAT)
	if !strings.Contains(text, "[REDACTED:github_token]") || !strings.Contains(string(structured), "[REDACTED:github_token]") {
		t.Errorf("no redaction marker in %q / %s", text, structured)
	}

	// A token right across the first half's end of 100 KiB of output.
	head := procgroup.ForegroundOutputBytes / 2
	cmd = fmt.Sprintf("head -c %d /dev/zero | tr '\\0' 'a'; echo; printf '%%s' %q; head -c 200000 /dev/zero | tr '\\0' '\\n'",
		head-10-1, testGitHubPAT)
	text = contentText(callTool(t, cs, toolnames.Bash, map[string]any{"command": cmd}))
	if !strings.Contains(text, "bytes of output elided") {
		t.Fatalf("the output was not cut")
	}
	noFragment(t, text, testGitHubPAT)

	if got := counterValue(t, m.secretsScrubbed.WithLabelValues("github_token")); got != 1 {
		t.Errorf("github tokens scrubbed = %v, want 1 (the same token in text and structured result counts once)", got)
	}
	if got := counterValue(t, m.secretsScrubbed.WithLabelValues("bearer_token")); got != 1 {
		t.Errorf("bearer tokens scrubbed = %v, want 1", got)
	}
}

// counterValue reads a counter.
func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// TestSecretAcrossLineCuts puts a token across Read's and Grep's long-line
// cuts: the part before the cut is not shown either.
func TestSecretAcrossLineCuts(t *testing.T) {
	tb, ws := newTestToolbox(t)
	for _, cut := range []int{readMaxLineBytes, grepMaxShownBytes} {
		line := strings.Repeat("a ", (cut-10)/2) + testGitHubPAT + " tail"
		writeFile(t, ws+"/long.txt", line+"\n")
		_, out, err := tb.read(t.Context(), ReadInput{FilePath: "long.txt"})
		if err != nil {
			t.Fatal(err)
		}
		if cut == readMaxLineBytes {
			if !out.Truncated {
				t.Fatalf("Read did not cut the line")
			}
			noFragment(t, out.Content, testGitHubPAT)
		}
		_, g, err := tb.grep(t.Context(), GrepInput{Pattern: "tail", OutputMode: grepContent})
		if err != nil || len(g.Matches) != 1 {
			t.Fatalf("Grep: %v, %+v", err, g)
		}
		noFragment(t, g.Matches[0].Text, testGitHubPAT)
	}
}
