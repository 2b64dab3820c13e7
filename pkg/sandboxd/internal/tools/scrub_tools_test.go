package tools

import (
	"fmt"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/outcap"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/sandboxdtest"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/scrub"
)

// Fake secrets of the formats the scrubber knows (none is live), for the
// tests of the tools' output (the scrubber's own tests have more), beside
// sandboxdtest.GitHubPAT and sandboxdtest.Bearer.
const (
	testAWSKeyID = "AKIAIOSFODNN7EXAMPLE"
	testJWT      = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIn0.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)

// TestSecretAcrossTheCap puts a secret across each cut of Bash's capped
// output, at every offset around the cut: neither half of it is shown.
func TestSecretAcrossTheCap(t *testing.T) {
	const limit = 512
	for _, secret := range []string{sandboxdtest.GitHubPAT, testAWSKeyID, testJWT} {
		for shift := 1; shift < len(secret); shift += 3 {
			// Across the head's end: the head holds the first shift bytes.
			b := outcap.New(limit)
			filler := strings.Repeat("filler line\n", 100)
			fmt.Fprintf(b, "%s%s\n%s\nend\n", strings.Repeat(" ", limit/2-shift), secret, filler)
			text := scrub.Text(b.String(), scrub.Found{})
			sandboxdtest.NoFragment(t, text, secret)
			if !strings.Contains(text, "bytes of output elided") {
				t.Fatalf("the output was not cut: %q", text)
			}
			// Across the tail's start: the tail holds its last shift bytes.
			b = outcap.New(limit)
			fmt.Fprintf(b, "start\n%s%s%s", filler, secret, strings.Repeat(" ", limit/2-(len(secret)-shift)))
			text = scrub.Text(b.String(), scrub.Found{})
			sandboxdtest.NoFragment(t, text, secret)
			if !strings.Contains(text, "bytes of output elided") {
				t.Fatalf("the output was not cut: %q", text)
			}
		}
	}
}

// TestSecretAcrossLineCuts puts a token across Read's and Grep's long-line
// cuts: the part before the cut is not shown either.
func TestSecretAcrossLineCuts(t *testing.T) {
	tb, ws := newTestToolbox(t)
	for _, cut := range []int{readMaxLineBytes, grepMaxShownBytes} {
		line := strings.Repeat("a ", (cut-10)/2) + sandboxdtest.GitHubPAT + " tail"
		sandboxdtest.WriteFile(t, ws+"/long.txt", line+"\n")
		_, out, err := tb.read(t.Context(), ReadInput{FilePath: "long.txt"})
		if err != nil {
			t.Fatal(err)
		}
		if cut == readMaxLineBytes {
			if !out.Truncated {
				t.Fatalf("Read did not cut the line")
			}
			sandboxdtest.NoFragment(t, out.Content, sandboxdtest.GitHubPAT)
		}
		_, g, err := tb.grep(t.Context(), GrepInput{Pattern: "tail", OutputMode: grepContent})
		if err != nil || len(g.Matches) != 1 {
			t.Fatalf("Grep: %v, %+v", err, g)
		}
		sandboxdtest.NoFragment(t, g.Matches[0].Text, sandboxdtest.GitHubPAT)
	}
}
