package sandboxd

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/sandboxdtest"
	"github.com/airlock-dev/airlock/pkg/toolnames"
)

// wantMetrics checks GET /metrics with header: 200 with sandboxd's families, or 401 with the
// challenge and not one metric line.
func wantMetrics(t *testing.T, url string, header http.Header, ok bool) {
	t.Helper()
	code, body := get(t, url+"/metrics", header)
	switch {
	case ok && (code != http.StatusOK || !strings.Contains(body, "airlock_sandboxd_")):
		t.Errorf("GET /metrics = %d, want 200 with sandboxd's metrics:\n%.300s", code, body)
	case !ok && (code != http.StatusUnauthorized || strings.Contains(body, "airlock_sandboxd_") || strings.Contains(body, "go_goroutines")):
		t.Errorf("GET /metrics = %d, want 401 and no metric:\n%.300s", code, body)
	}
}

// TestMetricsNeedTheClaimToken (issue 39, small 1): /metrics sits behind the guard /mcp does: a
// pod of the namespace that does not hold the claim's token reads nothing (no token, a wrong one,
// the token's prefix, another claim's token); the claim's token reads the metrics.
func TestMetricsNeedTheClaimToken(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("claim-a-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, Config{AuthTokenFile: tokenFile}, options{})
	for name, h := range map[string]http.Header{
		"no token":            nil,
		"empty bearer":        {"Authorization": {"Bearer "}},
		"wrong token":         bearer("nope"),
		"prefix of the token": bearer("claim-a-token"),
		"another claim's":     bearer("claim-b-token-0123456789"),
		"basic scheme":        {"Authorization": {"Basic claim-a-token-0123456789"}},
	} {
		t.Run(name, func(t *testing.T) { wantMetrics(t, ts.url, h, false) })
	}
	wantMetrics(t, ts.url, bearer("claim-a-token-0123456789"), true)
	// The probes stay open: the kubelet has no token.
	for _, p := range []string{"/healthz", "/readyz"} {
		if code, _ := get(t, ts.url+p, nil); code != http.StatusOK {
			t.Errorf("GET %s without a token = %d, want 200", p, code)
		}
	}
}

// TestWarmMemberMetricsNeedTheAdoptingToken (issue 39, small 1): a warm member's /metrics answers
// nobody before adoption, and after it only the adopting claim's token: not another claim's valid
// adoption token, not a forged one.
func TestWarmMemberMetricsNeedTheAdoptingToken(t *testing.T) {
	ts := startWarmServer(t)
	key := sandboxdtest.WarmMemberKey(t, 0)
	forged := sandboxdtest.AdoptionToken(t, sandboxdtest.WarmMemberKey(t, 1), "claim-forged", toolnames.Glob)
	wantMetrics(t, ts.url, nil, false)
	wantMetrics(t, ts.url, bearer(forged), false)
	if a := ts.guard.Adopted(); a != "" {
		t.Fatalf("adopted by %s", a)
	}
	tok := sandboxdtest.AdoptionToken(t, key, "claim-1", toolnames.Glob)
	wantMetrics(t, ts.url, bearer(tok), true) // the guard adopts on the first valid token, as /mcp does
	if a := ts.guard.Adopted(); a != "claim-1" {
		t.Fatalf("adopted by %q, want claim-1", a)
	}
	for name, h := range map[string]http.Header{
		"no token":             nil,
		"another claim's":      bearer(sandboxdtest.AdoptionToken(t, key, "claim-2", toolnames.Glob)),
		"another member's key": bearer(forged),
		"truncated":            bearer(tok[:len(tok)-1]),
	} {
		t.Run("after adoption/"+name, func(t *testing.T) { wantMetrics(t, ts.url, h, false) })
	}
	wantMetrics(t, ts.url, bearer(tok), true)
}
