//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/claimname"
	"github.com/airlock-dev/airlock/pkg/client"
)

// The Python and TypeScript clients (issue 41) against a real API server and operator, through
// the same matrix as the Go client's (clients_test.go): each language's client is run by a small
// driver (clientdrivers/driver.py, driver.mjs) that takes one JSON command a line and answers
// each with what the client returned or the typed error it raised.

// driverCommand is one command of a driver: acquire, renew, close (of a session, for a runtime:
// AIRLOCK_RUNTIME when empty) or step (the sessions' clock moved by Seconds).
type driverCommand struct {
	ID             int     `json:"id"`
	Op             string  `json:"op"`
	Session        string  `json:"session,omitempty"`
	Runtime        string  `json:"runtime,omitempty"`
	Handle         string  `json:"handle,omitempty"`
	AcquireTimeout float64 `json:"acquireTimeout,omitempty"`
	IdleTimeout    float64 `json:"idleTimeout,omitempty"`
	WaitSeconds    int     `json:"waitSeconds,omitempty"`
	Seconds        float64 `json:"seconds,omitempty"`
}

// driverAnswer is a driver's answer to a command; Error is the client's typed error: its class
// (the language's class name), and the status, code and reason of an API error or the phase of
// an acquire timeout.
type driverAnswer struct {
	ID            int    `json:"id"`
	Claim         string `json:"claim"`
	Phase         string `json:"phase"`
	MCPURL        string `json:"mcpUrl"`
	Authorization string `json:"authorization"`
	Sent          bool   `json:"sent"`
	Closed        int    `json:"closed"`
	Error         *struct {
		Class   string `json:"class"`
		Status  int    `json:"status"`
		Code    string `json:"code"`
		Reason  string `json:"reason"`
		Phase   string `json:"phase"`
		Message string `json:"message"`
	} `json:"error"`
}

// clientDriver is a running driver.
type clientDriver struct {
	t       *testing.T
	lang    string
	stdin   io.WriteCloser
	mu      sync.Mutex
	next    int
	waiting map[int]chan driverAnswer
	// acquires and exchanges count the calls through the test's proxy.
	acquires, exchanges atomic.Int32
}

// checkedProxy serves the Sandbox API by calling the operator with the suite's client, so that
// each exchange is checked against openapi.json; it counts exchanges and acquires.
func checkedProxy(t *testing.T, op *apiOperator, d *clientDriver) string {
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d.exchanges.Add(1)
		if r.URL.Path == "/v1/sandboxes/acquire" {
			d.acquires.Add(1)
		}
		req, err := http.NewRequestWithContext(r.Context(), r.Method, op.apiURL+r.URL.Path, r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		req.Header = r.Header.Clone()
		resp, err := op.httpClient.Do(req) // checked against openapi.json
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		maps.Copy(w.Header(), resp.Header)
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	}))
	t.Cleanup(proxy.Close)
	return proxy.URL
}

// startDriver runs lang's driver against op through a checked proxy, its identity from the
// environment: AIRLOCK_* and tokenFile. Without python3 or npm the test is skipped, except under
// CI, where it fails.
func startDriver(t *testing.T, lang string, op *apiOperator, ns, tokenFile string) *clientDriver {
	t.Helper()
	d := &clientDriver{t: t, lang: lang, waiting: map[int]chan driverAnswer{}}
	missing := func(what string, err error) {
		t.Helper()
		if os.Getenv("CI") != "" {
			t.Fatalf("%s: %v (CI is set)", what, err)
		}
		t.Skipf("%s: %v", what, err)
	}
	drivers := filepath.Join(repoRoot, "e2e", "clientdrivers")
	var cmd *exec.Cmd
	switch lang {
	case "python":
		python, err := exec.LookPath("python3")
		if err != nil {
			missing("no python3", err)
		}
		cmd = exec.Command(python, "-B", "-I", filepath.Join(drivers, "driver.py"), filepath.Join(repoRoot, "clients", "python", "src"))
	case "typescript":
		if _, err := exec.LookPath("npm"); err != nil {
			missing("no npm", err)
		}
		if out, err := exec.Command(filepath.Join(repoRoot, "clients", "test.sh"), "typescript-build").CombinedOutput(); err != nil {
			t.Fatalf("clients/test.sh typescript-build: %v\n%s", err, out)
		}
		out := filepath.Join(repoRoot, "_output", "clients-typescript")
		cmd = exec.Command(filepath.Join(out, "node_modules", "node", "bin", "node"), filepath.Join(drivers, "driver.mjs"),
			"file://"+filepath.Join(out, "dist", "src", "index.js"))
	}
	cmd.Env = append(os.Environ(), "AIRLOCK_SANDBOX_API="+checkedProxy(t, op, d), "AIRLOCK_TOKEN_FILE="+tokenFile,
		"AIRLOCK_NAMESPACE="+ns, "AIRLOCK_RUNTIME=agent")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if d.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go d.read(stdout)
	t.Cleanup(func() {
		_ = d.stdin.Close() // the driver ends at the end of its input, once its commands are answered
		if err := cmd.Wait(); err != nil {
			t.Errorf("the %s driver: %v\n%s", lang, err, stderr.String())
		}
	})
	return d
}

// read hands each answer to its command's caller; at the end of the output, every caller still
// waiting gets a closed channel.
func (d *clientDriver) read(stdout io.Reader) {
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		var a driverAnswer
		if err := json.Unmarshal(sc.Bytes(), &a); err != nil {
			d.t.Errorf("the %s driver printed %q: %v", d.lang, sc.Text(), err)
			continue
		}
		d.mu.Lock()
		ch := d.waiting[a.ID]
		delete(d.waiting, a.ID)
		d.mu.Unlock()
		if ch != nil {
			ch <- a
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for id, ch := range d.waiting {
		close(ch)
		delete(d.waiting, id)
	}
}

// start sends c; its answer arrives on the channel (closed if the driver ended without one).
func (d *clientDriver) start(c driverCommand) <-chan driverAnswer {
	d.mu.Lock()
	d.next++
	c.ID = d.next
	ch := make(chan driverAnswer, 1)
	d.waiting[c.ID] = ch
	d.mu.Unlock()
	line, _ := json.Marshal(c)
	if _, err := d.stdin.Write(append(line, '\n')); err != nil {
		d.t.Fatalf("the %s driver: %v", d.lang, err)
	}
	return ch
}

// do sends c and returns its answer.
func (d *clientDriver) do(ctx context.Context, c driverCommand) driverAnswer {
	d.t.Helper()
	select {
	case a, ok := <-d.start(c):
		if !ok {
			d.t.Fatalf("the %s driver ended without answering %+v", d.lang, c)
		}
		return a
	case <-ctx.Done():
		d.t.Fatalf("the %s driver did not answer %+v: %v", d.lang, c, ctx.Err())
		return driverAnswer{}
	}
}

// wantError fails unless a is the error of class with status, and code and reason when given;
// it logs the error's message.
func (d *clientDriver) wantError(a driverAnswer, what, class string, status int, code, reason string) {
	d.t.Helper()
	if e := a.Error; e == nil || e.Class != class || e.Status != status || (code != "" && e.Code != code) || (reason != "" && e.Reason != reason) {
		d.t.Errorf("%s (%s): %+v, want %s %d %s %s", what, d.lang, a.Error, class, status, code, reason)
		return
	}
	d.t.Logf("%s: %s", what, a.Error.Message)
}

// TestPythonAndTypeScriptClients: each of the Python and TypeScript clients, on the plane of
// TestGoClientSession: acquire (Bound at once, through 202s while the runtime's one slot is taken,
// to its deadline naming the claim's phase), the typed errors 429, 404, 409, 403 and 401 with the
// operator's code and reason (the token file rotated mid-session and back), and renewals: at most
// one per half idle timeout on the client's clock, no more claim writes than were sent. Each
// client's exchanges go through a proxy that checks them against openapi.json.
func TestPythonAndTypeScriptClients(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	e, op, agentToken := newClientPlane(t, ctx, "airlock-clients")
	intruderToken := serviceAccountToken(t, e.ns, "intruder")
	for _, lang := range []string{"python", "typescript"} {
		t.Run(lang, func(t *testing.T) {
			tokenFile := filepath.Join(t.TempDir(), "token")
			writeClientFile(t, tokenFile, agentToken)
			d := startDriver(t, lang, op, e.ns, tokenFile)
			clientSessionMatrix(t, ctx, e, op, d, lang, func(token string) { writeClientFile(t, tokenFile, token) }, agentToken, intruderToken)
			if n := d.exchanges.Load(); n < 10 {
				t.Errorf("the %s client made %d exchanges with the API, want at least 10, each checked against openapi.json", lang, n)
			}
			t.Logf("%s: %d exchanges checked against openapi.json", lang, d.exchanges.Load())
		})
	}
}

// clientSessionMatrix runs TestGoClientSession's matrix with driver d; sessions are named after
// lang; rotate writes the token file.
func clientSessionMatrix(t *testing.T, ctx context.Context, e *claimEnv, op *apiOperator, d *clientDriver, lang string, rotate func(string), agentToken, intruderToken string) {
	const handle = "codegen/default"
	idle := clientPlaneIdle.Seconds()
	session := func(n string) string { return lang + "-" + n }
	acquire := func(s string) driverCommand {
		return driverCommand{Op: "acquire", Session: session(s), Handle: handle, IdleTimeout: idle}
	}

	// Bound at once.
	got := d.do(ctx, acquire("s1"))
	if want := claimname.For("agent", session("s1"), handle); got.Error != nil || got.Claim != want || got.Phase != "Bound" ||
		!strings.HasSuffix(got.MCPURL, ":8080/mcp") || !strings.HasPrefix(got.Authorization, "Bearer ") {
		t.Fatalf("acquire: %+v %+v, want claim %s Bound with its MCP URL and token", got, got.Error, want)
	}

	// The runtime's one slot is taken: s2's acquire is answered 202 (Queued) until s1 is closed.
	queuedName := claimname.For("agent", session("s2"), handle)
	before := d.acquires.Load()
	queued := d.start(acquire("s2"))
	eventually(t, 30*time.Second, "the second session's claim Queued and answered 202 twice", func(ctx context.Context) (bool, error) {
		c, err := e.getClaim(ctx, queuedName)
		if err != nil {
			return false, nil
		}
		return c.Status.Phase == airlockv1alpha1.ClaimQueued && d.acquires.Load()-before >= 3, nil
	})

	// s3's acquire waits to its deadline, and says the claim's phase.
	timeout := acquire("s3")
	timeout.AcquireTimeout = 3
	got = d.do(ctx, timeout)
	if got.Error == nil || got.Error.Class != "AcquireTimeout" || got.Error.Phase != string(airlockv1alpha1.ClaimQueued) ||
		!strings.Contains(got.Error.Message, "is still Queued") {
		t.Errorf("acquire past its deadline: %+v, want AcquireTimeout naming Queued", got.Error)
	}
	if got := d.do(ctx, driverCommand{Op: "close", Session: session("s3")}); got.Error != nil {
		t.Errorf("close s3: %+v", got.Error)
	}

	if got := d.do(ctx, driverCommand{Op: "close", Session: session("s1")}); got.Error != nil || got.Closed != 1 {
		t.Fatalf("close s1: %+v %+v, want 1 claim closed", got, got.Error)
	}
	select {
	case got = <-queued:
	case <-ctx.Done():
		t.Fatal("the queued acquire did not end")
	}
	if got.Error != nil || got.Claim != queuedName || got.Phase != "Bound" {
		t.Fatalf("the queued acquire: %+v %+v", got, got.Error)
	}
	t.Logf("the queued acquire was answered after %d calls", d.acquires.Load()-before)

	// 429 (maxPerSession is 1 and s2 holds its sandbox), 404 and 409.
	other := acquire("s2")
	other.Handle = "codegen/other"
	d.wantError(d.do(ctx, other), "a second handle over maxPerSession", "Refused", http.StatusTooManyRequests, client.CodeRefused, client.ReasonMaxPerSession)
	missing := acquire("s2")
	missing.Handle = "nothing/default"
	d.wantError(d.do(ctx, missing), "a sandbox the registry lacks", "NotFound", http.StatusNotFound, client.CodeNotFound, "")
	disabled := acquire("s4")
	disabled.Runtime = "off"
	d.wantError(d.do(ctx, disabled), "a disabled runtime", "Conflict", http.StatusConflict, client.CodeDisabled, "")

	// The token file rotated mid-session to another ServiceAccount's token (403), to nothing
	// TokenReview accepts (401), and back: the renewal goes through.
	renew := driverCommand{Op: "renew", Session: session("s2"), Handle: handle, IdleTimeout: idle}
	rotate(intruderToken)
	d.wantError(d.do(ctx, renew), "renew with another ServiceAccount's token", "Forbidden", http.StatusForbidden, client.CodeForbidden, "")
	rotate("not-a-token")
	d.wantError(d.do(ctx, renew), "renew with a token TokenReview refuses", "Unauthorized", http.StatusUnauthorized, client.CodeUnauthorized, "")
	rotate(agentToken)

	// Renewals: at most one per half idle timeout on the client's clock; claim writes counted.
	countRenewals(t, ctx, e, op, queuedName, func() (bool, error) {
		got := d.do(ctx, renew)
		if got.Error != nil {
			return false, errors.New(got.Error.Message)
		}
		return got.Sent, nil
	}, func(step time.Duration) { d.do(ctx, driverCommand{Op: "step", Seconds: step.Seconds()}) })
	if got := d.do(ctx, driverCommand{Op: "close", Session: session("s2")}); got.Error != nil || got.Closed != 1 {
		t.Errorf("close s2: %+v %+v, want 1 claim closed", got, got.Error)
	}
}

// TestPythonAndTypeScriptClientsFailed: as TestGoClientFailed, each client's acquire of a sandbox
// whose pod cannot start, nor its replacement's, ends with its Failed error (502) carrying the
// operator's reason.
func TestPythonAndTypeScriptClientsFailed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	e, op, agentToken := newFailingPlane(t, ctx, "airlock-clients-fail")
	tokenFile := filepath.Join(t.TempDir(), "token")
	writeClientFile(t, tokenFile, agentToken)
	for _, lang := range []string{"python", "typescript"} {
		t.Run(lang, func(t *testing.T) {
			d := startDriver(t, lang, op, e.ns, tokenFile)
			got := d.do(ctx, driverCommand{Op: "acquire", Session: lang, Handle: "codegen/default", WaitSeconds: 5, AcquireTimeout: 120})
			d.wantError(got, "acquire of a sandbox that cannot start", "Failed", http.StatusBadGateway, client.CodeFailed, "Unschedulable")
			t.Logf("failed after %d acquire calls", d.acquires.Load())
			if got := d.do(ctx, driverCommand{Op: "close", Session: lang}); got.Error != nil {
				t.Errorf("close: %+v", got.Error)
			}
		})
	}
}
