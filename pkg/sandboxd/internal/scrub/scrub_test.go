package scrub

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Fake secrets in the formats the scrubber knows. None of them is live.
const (
	fakeAWSKeyID    = "AKIAIOSFODNN7EXAMPLE"
	fakeAWSSecret   = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
	fakeGitHubPAT   = "ghp_R2d2C3poLuke0Leia1Han2Chewie3Yoda4xy"
	fakeGitHubFine  = "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEFGHIJ0123456789"
	fakeGitLab      = "glpat-xY7_zK9-aB3cD5eF7gH9"
	fakeSlackBot    = "xoxb-1234567890-0987654321-AbCdEfGhIjKlMnOpQrStUvWx"
	fakeSlackHook   = "https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX"
	fakeJWT         = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIn0.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
	fakeGoogle      = "AIzaSyA-1234567890abcdefghijklmnopqrstu"
	fakeStripe      = "sk_live_4eC39HqLyjWDarjtT1zdp7dc"
	fakeLLM         = "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"
	fakeNPM         = "npm_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"
	fakeBearer      = "mF_9.B5f-4.1JqM/abcDEF+xyz=="
	fakeBasic       = "QWxhZGRpbjpvcGVuIHNlc2FtZQ=="
	fakeURLPassword = "s3cr3t-Pa55"
)

// fakePEM is a private key block of the shape ssh-keygen writes.
var fakePEM = "-----BEGIN OPENSSH PRIVATE KEY-----\n" +
	strings.Repeat("b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n", 6) +
	"-----END OPENSSH PRIVATE KEY-----"

func TestScrubText(t *testing.T) {
	tests := map[string]struct {
		in        string
		want      string
		wantKinds map[string]int
	}{
		"aws key id and secret": {
			in:        "aws_access_key_id = " + fakeAWSKeyID + "\naws_secret_access_key = " + fakeAWSSecret + "\n",
			want:      "aws_access_key_id = [REDACTED:aws_access_key_id]\naws_secret_access_key = [REDACTED:aws_secret_access_key]\n",
			wantKinds: map[string]int{secretAWSAccessKey: 1, secretAWSSecretKey: 1},
		},
		"github tokens, the same one twice": {
			in:        "GH_TOKEN=" + fakeGitHubPAT + " again " + fakeGitHubPAT + " fine " + fakeGitHubFine,
			want:      "GH_TOKEN=[REDACTED:github_token] again [REDACTED:github_token] fine [REDACTED:github_token]",
			wantKinds: map[string]int{secretGitHubToken: 2},
		},
		"gitlab": {in: "token: " + fakeGitLab, want: "token: [REDACTED:gitlab_token]", wantKinds: map[string]int{secretGitLabToken: 1}},
		"slack token and webhook": {
			in:        "SLACK=" + fakeSlackBot + " hook=" + fakeSlackHook,
			want:      "SLACK=[REDACTED:slack_token] hook=[REDACTED:slack_webhook]",
			wantKinds: map[string]int{secretSlackToken: 1, secretSlackWebhook: 1},
		},
		"private key block": {
			in:        "key:\n" + fakePEM + "\ndone\n",
			want:      "key:\n[REDACTED:private_key]\ndone\n",
			wantKinds: map[string]int{secretPrivateKey: 1},
		},
		"jwt": {in: `{"id_token":"` + fakeJWT + `"}`, want: `{"id_token":"[REDACTED:jwt]"}`, wantKinds: map[string]int{secretJWT: 1}},
		"authorization bearer keeps the scheme": {
			in:        "curl -H 'Authorization: Bearer " + fakeBearer + "' https://api.example.com",
			want:      "curl -H 'Authorization: Bearer [REDACTED:bearer_token]' https://api.example.com",
			wantKinds: map[string]int{secretBearerToken: 1},
		},
		"authorization basic": {
			in:        "Authorization: Basic " + fakeBasic,
			want:      "Authorization: Basic [REDACTED:basic_auth]",
			wantKinds: map[string]int{secretBasicAuth: 1},
		},
		"password in a URL keeps the user and host": {
			in:        "remote: https://deploy:" + fakeURLPassword + "@git.example.com/x.git",
			want:      "remote: https://deploy:[REDACTED:url_credentials]@git.example.com/x.git",
			wantKinds: map[string]int{secretURLCredentials: 1},
		},
		"google, stripe, llm and npm keys": {
			in:        fakeGoogle + " " + fakeStripe + " " + fakeLLM + " " + fakeNPM,
			want:      "[REDACTED:google_api_key] [REDACTED:stripe_key] [REDACTED:llm_api_key] [REDACTED:npm_token]",
			wantKinds: map[string]int{secretGoogleAPIKey: 1, secretStripeKey: 1, secretLLMAPIKey: 1, secretNPMToken: 1},
		},
		"a key block whose end a cap cut off": {
			in:        "x\n" + fakePEM[:200] + "\n[... 9000 bytes of output elided ...]\ntail\n",
			want:      "x\n[REDACTED:private_key][... 9000 bytes of output elided ...]\ntail\n",
			wantKinds: map[string]int{secretPrivateKey: 1},
		},
		"a key block whose start a cap cut off": {
			in:        "head\n[... 9000 bytes of output elided ...]\n" + fakePEM[len(fakePEM)-150:] + "\nafter\n",
			want:      "head\n[... 9000 bytes of output elided ...]\n[REDACTED:private_key]\nafter\n",
			wantKinds: map[string]int{secretPrivateKey: 1},
		},
		"ordinary code is left alone": {
			in: "token := os.Getenv(\"GITHUB_TOKEN\")\nreq.Header.Set(\"Authorization\", \"Bearer \"+token)\n" +
				"import sklearn # sk-learn\nhttps://example.com:8080/path?q=1\nAKIA is a prefix\nsecret = compute()\n" +
				"git clone https://${USER}:${TOKEN}@example.com/x.git\nfmt.Sprintf(\"https://%s:%s@%s\", u, p, h)\n",
			want: "token := os.Getenv(\"GITHUB_TOKEN\")\nreq.Header.Set(\"Authorization\", \"Bearer \"+token)\n" + "import sklearn # sk-learn\nhttps://example.com:8080/path?q=1\nAKIA is a prefix\nsecret = compute()\n" +
				"git clone https://${USER}:${TOKEN}@example.com/x.git\nfmt.Sprintf(\"https://%s:%s@%s\", u, p, h)\n",
			wantKinds: map[string]int{},
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			found := Found{}
			got := Text(tt.in, found)
			if got != tt.want {
				t.Errorf("Text:\n got %q\nwant %q", got, tt.want)
			}
			if diff := cmp.Diff(tt.wantKinds, found.Counts()); diff != "" {
				t.Errorf("counts (-want +got):\n%s", diff)
			}
			// Scrubbing is idempotent: a redaction is never a secret.
			if again := Text(got, Found{}); again != got {
				t.Errorf("scrubbing twice changed %q into %q", got, again)
			}
		})
	}
}

// TestScrubResult checks that the text and the structured result are both
// scrubbed, and that a secret shown in both counts once.
func TestScrubResult(t *testing.T) {
	type shown struct {
		Output   string `json:"output"`
		ExitCode int    `json:"exit_code"`
	}
	out, err := json.Marshal(shown{Output: "key " + fakeGitHubPAT + "\n", ExitCode: 0})
	if err != nil {
		t.Fatal(err)
	}
	res := &mcp.CallToolResult{
		Content:           []mcp.Content{&mcp.TextContent{Text: "key " + fakeGitHubPAT + "\n"}},
		StructuredContent: json.RawMessage(out),
	}
	found := Result(res)
	if got := res.Content[0].(*mcp.TextContent).Text; got != "key [REDACTED:github_token]\n" {
		t.Errorf("text = %q", got)
	}
	raw, _ := res.StructuredContent.(json.RawMessage)
	var got shown
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatalf("structured content %s: %v", raw, err)
	}
	if got.Output != "key [REDACTED:github_token]\n" {
		t.Errorf("structured output = %q", got.Output)
	}
	if diff := cmp.Diff(map[string]int{secretGitHubToken: 1}, found.Counts()); diff != "" {
		t.Errorf("counts (-want +got):\n%s", diff)
	}
}
