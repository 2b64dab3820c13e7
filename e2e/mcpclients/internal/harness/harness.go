// Package harness runs a real sandboxd, built from this repository, for the
// third-party MCP client tests. This module is separate from the main one so
// that it can pin client versions of its own (the main module can hold only
// one version of the Go SDK).
package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Timeout bounds every wait of these tests.
const Timeout = 60 * time.Second

var (
	buildOnce sync.Once
	binary    string
	buildErr  error
	buildDir  string
)

// Main runs the package's tests and removes the binary built for them.
func Main(m *testing.M) int {
	code := m.Run()
	for _, dir := range []string{buildDir, goplsDir} {
		if dir != "" {
			os.RemoveAll(dir)
		}
	}
	return code
}

// RepoRoot returns the root of the airlock repository.
func RepoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.HasPrefix(data, []byte("module github.com/airlock-dev/airlock\n")) {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("not inside the airlock repository")
		}
		dir = parent
	}
}

// Binary returns the airlock binary to run: $AIRLOCK_BIN if set, else one
// built, once per test process, from the repository root.
func Binary(t testing.TB) string {
	t.Helper()
	if bin := os.Getenv("AIRLOCK_BIN"); bin != "" {
		return bin
	}
	root := RepoRoot(t)
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "airlock-e2e-")
		if buildErr != nil {
			return
		}
		binary = filepath.Join(buildDir, "airlock")
		cmd := exec.Command("go", "build", "-o", binary, ".")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build of the airlock binary in %s: %v\n%s", root, err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binary
}

var (
	goplsOnce sync.Once
	goplsDir  string
	goplsErr  error
)

// GoplsDir returns a directory that holds gopls, built once per test
// process from the pin in hack/tools/gopls (the version the sandbox-go image
// has), with the default Go caches: minutes the first time on a cold build
// cache, seconds after. Main removes it.
func GoplsDir(t testing.TB) string {
	t.Helper()
	root := RepoRoot(t)
	goplsOnce.Do(func() {
		if goplsDir, goplsErr = os.MkdirTemp("", "airlock-e2e-gopls-"); goplsErr != nil {
			return
		}
		cmd := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(goplsDir, "gopls"), "golang.org/x/tools/gopls")
		cmd.Dir = filepath.Join(root, "hack", "tools", "gopls")
		cmd.Env = append(os.Environ(), "GOWORK=off", "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			goplsErr = fmt.Errorf("go build of gopls in %s: %v\n%s", cmd.Dir, err, out)
		}
	})
	if goplsErr != nil {
		t.Fatal(goplsErr)
	}
	return goplsDir
}

// Sandboxd is a running `airlock sandboxd`.
type Sandboxd struct {
	URL       string // http://127.0.0.1:port
	Workspace string
}

// Start runs `airlock sandboxd` with a fresh workspace (and state
// directory beside it) on a free loopback port, waits until /readyz answers 200, and stops it when the test ends
// (SIGTERM; it must exit 0 within its grace period).
func Start(t testing.TB, args ...string) *Sandboxd {
	t.Helper()
	return StartEnv(t, nil, args...)
}

// StartEnv is Start with env added to sandboxd's environment (a later
// entry of a name wins).
func StartEnv(t testing.TB, env []string, args ...string) *Sandboxd {
	t.Helper()
	bin := Binary(t)
	ws := filepath.Join(t.TempDir(), "workspace")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	logs := &lockedWriter{}
	state := filepath.Join(filepath.Dir(ws), "state") // the snapshot store, beside the workspace
	cmd := exec.Command(bin, append([]string{"sandboxd", "--listen", addr, "--workspace", ws, "--state-dir", state, "--shutdown-grace", "5s"}, args...)...)
	cmd.Stdout = logs
	cmd.Stderr = logs
	cmd.Env = append(os.Environ(), env...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	t.Cleanup(func() {
		if stopped {
			return
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("sandboxd exited with %v after SIGTERM; its log:\n%s", err, logs.String())
			}
		case <-time.After(Timeout):
			_ = cmd.Process.Kill()
			<-exited
			t.Errorf("sandboxd did not stop after SIGTERM; its log:\n%s", logs.String())
		}
	})
	url := "http://" + addr
	deadline := time.Now().Add(Timeout)
	for {
		select {
		case err := <-exited:
			stopped = true
			t.Fatalf("sandboxd exited at start (%v); its log:\n%s", err, logs.String())
		default:
		}
		if ready(url) {
			return &Sandboxd{URL: url, Workspace: ws}
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandboxd not ready in time; its log:\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond) // a separate process: poll its readiness probe
	}
}

func ready(url string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/readyz", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// freeAddr returns a loopback address with a port that was free a moment ago.
func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// lockedWriter collects a process's output.
type lockedWriter struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lockedWriter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// ErrNoNPM is returned by NPM when npm is not installed.
var ErrNoNPM = errors.New("npm is not installed")

// LookNPM returns the path of npm, or ErrNoNPM.
func LookNPM() (string, error) {
	p, err := exec.LookPath("npm")
	if err != nil {
		return "", ErrNoNPM
	}
	return p, nil
}

// TrimBanner drops any text before the first '{' of a JSON document.
func TrimBanner(s string) string {
	if i := strings.IndexByte(s, '{'); i > 0 {
		return s[i:]
	}
	return s
}
