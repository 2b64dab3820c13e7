// Package python holds runtime.py, the real-node e2e's agent runtime in Python (standard
// library only, on the airlock_client package of clients/python; e2e/realnode_python_test.go
// runs it in a pod). These tests run it on this
// machine against a real sandboxd (pkg/sandboxd, in process) and a stand-in of the Sandbox API
// over TLS, so that a change of either side shows in `go test ./...`, not only on a real node.
package python

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/e2e/openapicheck"
	"github.com/airlock-dev/airlock/pkg/client"
	"github.com/airlock-dev/airlock/pkg/sandboxd"
)

// python3 is the interpreter: skipped where there is none, except under CI, where it fails.
func python3(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("no python3 on PATH: %v", err)
		}
		t.Skipf("no python3 on PATH (%v): runtime.py is not run", err)
	}
	return p
}

// startSandboxd runs sandboxd in process on a free loopback port with a workspace and a token
// of its own, until the test ends; it returns its URL.
func startSandboxd(t *testing.T, token string) (url, workspace string) {
	t.Helper()
	dir := t.TempDir()
	workspace = filepath.Join(dir, "workspace")
	if err := os.Mkdir(workspace, 0o755); err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- sandboxd.Run(ctx, sandboxd.Config{Listen: addr, Workspace: workspace, AuthTokenFile: tokenFile,
			StateDir: filepath.Join(dir, "state"), ShutdownGrace: time.Second})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("sandboxd: %v", err)
		}
	})
	url = "http://" + addr
	for {
		resp, err := http.Get(url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return url, workspace
			}
		}
		select {
		case err := <-done:
			t.Fatalf("sandboxd ended before it was ready: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// request is one request the stand-in API received, and its answer.
type request struct {
	Path, Authorization string
	Body                map[string]any
	raw, answer         []byte
	status              int
}

// fakeAPI is a stand-in of the Sandbox API over TLS: it records the requests and answers with
// answer(n, path), n counting the requests from 0.
type fakeAPI struct {
	srv    *httptest.Server
	caFile string
	mu     sync.Mutex
	got    []request
}

func newFakeAPI(t *testing.T, answer func(n int, path string) (int, any)) *fakeAPI {
	t.Helper()
	f := &fakeAPI{}
	f.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var body map[string]any
		_ = json.Unmarshal(raw, &body)
		f.mu.Lock()
		n := len(f.got)
		f.mu.Unlock()
		status, out := answer(n, r.URL.Path)
		var answerBody []byte
		if loc, ok := out.(redirect); ok {
			w.Header().Set("Location", string(loc))
		} else if out != nil && status != http.StatusNoContent {
			answerBody, _ = json.Marshal(out)
		}
		f.mu.Lock()
		f.got = append(f.got, request{Path: r.URL.Path, Authorization: r.Header.Get("Authorization"), Body: body,
			raw: raw, answer: answerBody, status: status})
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write(answerBody)
	}))
	t.Cleanup(f.srv.Close)
	// httptest's certificate is its own CA, for 127.0.0.1 and example.com.
	f.caFile = filepath.Join(t.TempDir(), "ca.crt")
	pemData := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: f.srv.Certificate().Raw})
	if err := os.WriteFile(f.caFile, pemData, 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fakeAPI) requests() []request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]request(nil), f.got...)
}

// newCAFile writes a CA certificate of its own, which verifies no server here.
func newCAFile(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "another CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "other-ca.crt")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// redirect is an answer body that makes the stand-in send a Location header.
type redirect string

// result is runtime.py's RESULT document.
type result struct {
	Claim          string   `json:"claim"`
	Phase          string   `json:"phase"`
	URL            string   `json:"url"`
	NoHeaderStatus int      `json:"noHeaderStatus"`
	Protocol       string   `json:"protocol"`
	Server         string   `json:"server"`
	Tools          []string `json:"tools"`
	Calls          []struct {
		Tool    string `json:"tool"`
		IsError bool   `json:"isError"`
		Text    string `json:"text"`
	} `json:"calls"`
	RenewStatus int    `json:"renewStatus"`
	CloseStatus int    `json:"closeStatus"`
	Error       string `json:"error"`
}

// scriptDir lays runtime.py out as the image does: the script, and beside it the package
// airlock_client from clients/python (python3 -I finds it in the script's directory only).
func scriptDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	copyFile(t, "runtime.py", filepath.Join(dir, "runtime.py"))
	pkg := filepath.Join("..", "..", "..", "clients", "python", "src", "airlock_client")
	entries, err := os.ReadDir(pkg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "airlock_client"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".py") || e.Name() == "py.typed" {
			copyFile(t, filepath.Join(pkg, e.Name()), filepath.Join(dir, "airlock_client", e.Name()))
		}
	}
	return dir
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// runScript runs runtime.py with args and returns its exit code and RESULT.
func runScript(t *testing.T, args ...string) (int, result) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, python3(t), append([]string{"-I", filepath.Join(scriptDir(t), "runtime.py")}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	code := 0
	if exit, ok := err.(*exec.ExitError); ok {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatalf("running runtime.py: %v", err)
	}
	var res result
	for _, line := range strings.Split(string(out), "\n") {
		if s, ok := strings.CutPrefix(line, "RESULT "); ok {
			if err := json.Unmarshal([]byte(s), &res); err != nil {
				t.Fatalf("RESULT %q: %v", s, err)
			}
			return code, res
		}
	}
	t.Fatalf("runtime.py printed no RESULT (exit %d); stdout %q, stderr %q", code, out, stderr.String())
	return 0, res
}

func writeToken(t *testing.T, path, token string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestRuntimeAcquiresCallsAndCloses: the script acquires (calling again after a 202), speaks MCP
// 2026-07-28 (airlock_client's stateless client) to a real sandboxd with the acquire answer's header (a request without it is refused), writes
// and reads a file, renews and closes; it reads its token file before every call.
func TestRuntimeAcquiresCallsAndCloses(t *testing.T) {
	const sandboxToken = "claim-token-0123456789abcdef"
	sbURL, workspace := startSandboxd(t, sandboxToken)
	tokenFile := filepath.Join(t.TempDir(), "token")
	writeToken(t, tokenFile, "sa-token-1")
	api := newFakeAPI(t, func(n int, path string) (int, any) {
		switch {
		case path == "/v1/sandboxes/acquire" && n == 0:
			writeToken(t, tokenFile, "sa-token-2") // the kubelet rotated it
			return http.StatusAccepted, client.AcquireResponse{Claim: "agent-0123456789", Phase: "Binding"}
		case path == "/v1/sandboxes/acquire":
			return http.StatusOK, client.AcquireResponse{Claim: "agent-0123456789", Phase: "Bound",
				Addresses: []client.Address{{Name: "mcp", URL: sbURL}}, Headers: map[string]string{"Authorization": "Bearer " + sandboxToken}}
		case path == "/v1/sandboxes/renew":
			return http.StatusNoContent, nil
		case path == "/v1/sessions/close":
			return http.StatusAccepted, client.SessionResponse{Claims: []client.SessionClaim{{Claim: "agent-0123456789", Handle: "codegen/default"}}}
		}
		return http.StatusNotFound, client.ErrorResponse{Error: client.CodeNotFound, Message: path}
	})

	code, res := runScript(t, "--api", api.srv.URL, "--token-file", tokenFile, "--ca-file", api.caFile,
		"--namespace", "team-a", "--runtime", "agent", "--session", "s1",
		"--call", `{"tool": "Write", "arguments": {"file_path": "py/hello.txt", "content": "hello from python\n"}}`,
		"--call", `{"tool": "Read", "arguments": {"file_path": "py/hello.txt"}}`)
	if code != 0 || res.Error != "" {
		t.Fatalf("exit %d, error %q", code, res.Error)
	}
	if res.Phase != "Bound" || res.URL != sbURL || res.Claim != "agent-0123456789" {
		t.Errorf("acquired %+v", res)
	}
	if res.NoHeaderStatus != http.StatusUnauthorized {
		t.Errorf("MCP without the Authorization header: %d, want 401", res.NoHeaderStatus)
	}
	if res.Server != "airlock-sandboxd" || res.Protocol != "2026-07-28" || !strings.Contains(strings.Join(res.Tools, ","), "Write") {
		t.Errorf("MCP session: server %q protocol %q tools %v", res.Server, res.Protocol, res.Tools)
	}
	if len(res.Calls) != 2 || res.Calls[0].IsError || res.Calls[1].IsError || res.Calls[1].Text != "     1\thello from python\n" {
		t.Errorf("tool calls %+v", res.Calls)
	}
	if b, err := os.ReadFile(filepath.Join(workspace, "py", "hello.txt")); err != nil || string(b) != "hello from python\n" {
		t.Errorf("the file in the workspace: %q %v", b, err)
	}
	if res.RenewStatus != http.StatusNoContent || res.CloseStatus != http.StatusAccepted {
		t.Errorf("renew %d, close %d; want 204, 202", res.RenewStatus, res.CloseStatus)
	}

	var paths []string
	for i, r := range api.requests() {
		paths = append(paths, r.Path)
		want := "Bearer sa-token-2"
		if i == 0 {
			want = "Bearer sa-token-1"
		}
		if r.Authorization != want {
			t.Errorf("request %d (%s): Authorization %q, want %q (the token file read before each call)", i, r.Path, r.Authorization, want)
		}
		if r.Body["namespace"] != "team-a" || r.Body["runtime"] != "agent" || r.Body["session"] != "s1" {
			t.Errorf("request %d (%s): body %v", i, r.Path, r.Body)
		}
	}
	if got, want := strings.Join(paths, " "), "/v1/sandboxes/acquire /v1/sandboxes/acquire /v1/sandboxes/renew /v1/sessions/close"; got != want {
		t.Errorf("requests %s, want %s", got, want)
	}

	// Every request the script sent, and every answer the stand-in gave it, is what
	// pkg/client/openapi.json describes (the stand-in is held to the document too).
	spec, err := openapicheck.New(client.OpenAPIDocument())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range api.requests() {
		if v := spec.Check(http.MethodPost, r.Path, r.raw, r.status, r.answer); v != "" {
			t.Errorf("not as openapi.json says: %s (request %s)", v, r.raw)
		}
	}
}

// TestRuntimeRefusals: the script sends its token only to a server its CA bundle verifies, over
// HTTPS, never follows a redirect, and fails with the API's error code.
func TestRuntimeRefusals(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "token")
	writeToken(t, tokenFile, "sa-token")
	other := newFakeAPI(t, func(int, string) (int, any) { return http.StatusOK, client.AcquireResponse{} })
	otherCA := newCAFile(t) // (every httptest server has the same certificate)
	tests := map[string]struct {
		answer    func(n int, path string) (int, any)
		api       func(f *fakeAPI) string
		caFile    func(f *fakeAPI) string
		wantError string
		wantSeen  int
	}{
		"another CA": {
			caFile:    func(*fakeAPI) string { return otherCA },
			wantError: "CERTIFICATE_VERIFY_FAILED",
		},
		"a name the certificate does not carry": {
			api:       func(f *fakeAPI) string { return strings.Replace(f.srv.URL, "127.0.0.1", "localhost", 1) },
			wantError: "CERTIFICATE_VERIFY_FAILED",
		},
		"plain HTTP": {
			api:       func(f *fakeAPI) string { return strings.Replace(f.srv.URL, "https://", "http://", 1) },
			wantError: "is not https://",
		},
		"a redirect (302, which urllib would follow with the token)": {
			answer: func(int, string) (int, any) {
				return http.StatusFound, redirect(other.srv.URL + "/v1/sandboxes/acquire")
			},
			wantError: "answered 302, a redirect to " + other.srv.URL + "/v1/sandboxes/acquire: not followed",
			wantSeen:  1,
		},
		"a redirect (307)": {
			answer: func(int, string) (int, any) {
				return http.StatusTemporaryRedirect, redirect(other.srv.URL + "/v1/sandboxes/acquire")
			},
			wantError: "answered 307, a redirect to " + other.srv.URL + "/v1/sandboxes/acquire: not followed",
			wantSeen:  1,
		},
		"refused": {
			answer: func(int, string) (int, any) {
				return http.StatusTooManyRequests, client.ErrorResponse{Error: client.CodeRefused, Message: "MaxPerSession: 3 live claims"}
			},
			wantError: "answered 429 refused: MaxPerSession",
			wantSeen:  1,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			answer := tc.answer
			if answer == nil {
				answer = func(int, string) (int, any) { return http.StatusInternalServerError, nil }
			}
			f := newFakeAPI(t, answer)
			api, caFile := f.srv.URL, f.caFile
			if tc.api != nil {
				api = tc.api(f)
			}
			if tc.caFile != nil {
				caFile = tc.caFile(f)
			}
			code, res := runScript(t, "--api", api, "--token-file", tokenFile, "--ca-file", caFile,
				"--namespace", "team-a", "--runtime", "agent", "--session", "s1")
			if code != 1 || !strings.Contains(res.Error, tc.wantError) {
				t.Errorf("exit %d, error %q; want 1 and %q", code, res.Error, tc.wantError)
			}
			if seen := len(f.requests()); seen != tc.wantSeen {
				t.Errorf("the API saw %d requests, want %d", seen, tc.wantSeen)
			}
			if seen := len(other.requests()); seen != 0 {
				t.Errorf("the other server saw %d requests (%+v): the token went elsewhere", seen, other.requests())
			}
			if res.Claim != "" {
				t.Errorf("a claim %q after a failed acquire", res.Claim)
			}
		})
	}
}
