//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
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

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var (
	buildOnce   sync.Once
	airlockBin  string
	errBuildBin error
)

// airlockBinary builds the airlock binary once per run.
func airlockBinary(t *testing.T) string {
	t.Helper()
	bin, err := buildAirlockBinary()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// buildAirlockBinary is airlockBinary without a test (TestMain's records webhook).
func buildAirlockBinary() (string, error) {
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "airlock-e2e-bin-")
		if err != nil {
			errBuildBin = err
			return
		}
		airlockBin = filepath.Join(dir, "airlock")
		cmd := exec.Command("go", "build", "-o", airlockBin, ".")
		cmd.Dir = repoRoot
		if out, err := cmd.CombinedOutput(); err != nil {
			errBuildBin = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	return airlockBin, errBuildBin
}

func freePort(t *testing.T) int {
	t.Helper()
	port, err := freePortErr()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// freePortErr is freePort without a test.
func freePortErr() (int, error) {
	portsMu.Lock()
	defer portsMu.Unlock()
	for {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		// The kernel may hand a port out again once its listener is closed: two flags of one
		// operator got the same one (CI, TestOperatorLeaderElection). Never twice in a run.
		if !portsGiven[port] {
			portsGiven[port] = true
			return port, nil
		}
	}
}

var (
	portsMu    sync.Mutex
	portsGiven = map[int]bool{}
)

// operatorProcess is one `airlock operator` running out of cluster against the suite's cluster.
type operatorProcess struct {
	cmd         *exec.Cmd
	healthAddr  string
	metricsAddr string
	log         string
	done        chan struct{}
	exitErr     error
}

// startOperator runs `airlock operator` out of cluster against the suite's cluster, with its Lease
// in leaseNamespace and its servers on free loopback ports; extra flags come last and win.
func startOperator(t *testing.T, leaseNamespace, leaseName string, extra ...string) *operatorProcess {
	t.Helper()
	health := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	metrics := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	logPath := filepath.Join(t.TempDir(), "operator.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"operator",
		"--kubeconfig=" + os.Getenv("KUBECONFIG"),
		"--leader-elect=true",
		"--leader-elect-resource-namespace=" + leaseNamespace,
		"--leader-elect-resource-name=" + leaseName,
		"--leader-elect-lease-duration=6s",
		"--leader-elect-renew-deadline=4s",
		"--leader-elect-retry-period=500ms",
		"--health-probe-bind-address=" + health,
		"--metrics-bind-address=" + metrics,
		fmt.Sprintf("--api-bind-address=127.0.0.1:%d", freePort(t)),
		"-v=2",
	}, extra...)
	cmd := exec.Command(airlockBinary(t), args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &operatorProcess{cmd: cmd, healthAddr: health, metricsAddr: metrics, log: logPath, done: make(chan struct{})}
	go func() {
		p.exitErr = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.stop(t, syscall.SIGKILL)
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("operator log (%s):\n%s", logPath, b)
		}
	})
	return p
}

// stop signals the process and waits for it to exit.
func (p *operatorProcess) stop(t *testing.T, sig syscall.Signal) error {
	t.Helper()
	select {
	case <-p.done:
		return p.exitErr
	default:
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
		return p.exitErr
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		t.Errorf("operator did not exit within 30s of %v", sig)
		return p.exitErr
	}
}

func (p *operatorProcess) get(ctx context.Context, path string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.healthAddr+path, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

func (p *operatorProcess) waitReady(t *testing.T) {
	t.Helper()
	eventually(t, 60*time.Second, "operator /readyz", func(ctx context.Context) (bool, error) {
		select {
		case <-p.done:
			return false, fmt.Errorf("operator exited: %v", p.exitErr)
		default:
		}
		code, _, err := p.get(ctx, "/readyz")
		return err == nil && code == http.StatusOK, nil
	})
}

func leaseHolder(ctx context.Context, ns, name string) (string, error) {
	lease, err := kubeClient.CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	if lease.Spec.HolderIdentity == nil {
		return "", nil
	}
	return *lease.Spec.HolderIdentity, nil
}

// TestOperatorLeaderElection runs two operator processes: both become ready (probes work on
// standbys), exactly one holds the Lease, and when the leader is stopped with SIGTERM it releases
// the Lease and the other takes over.
func TestOperatorLeaderElection(t *testing.T) {
	ns := newNamespace(t, "airlock-lease")
	const lease = "airlock-operator-e2e"

	a := startOperator(t, ns, lease)
	a.waitReady(t)
	var first string
	eventually(t, 30*time.Second, "a lease holder", func(ctx context.Context) (bool, error) {
		h, err := leaseHolder(ctx, ns, lease)
		first = h
		return h != "", err
	})
	hostname, _ := os.Hostname()
	if !strings.HasPrefix(first, hostname+"_") {
		t.Errorf("lease holder %q is not hostname_uuid", first)
	}

	b := startOperator(t, ns, lease)
	b.waitReady(t)
	code, body, err := b.get(context.Background(), "/healthz")
	if err != nil || code != http.StatusOK {
		t.Errorf("standby /healthz: %d %q %v", code, body, err)
	}
	if h, err := leaseHolder(context.Background(), ns, lease); err != nil || h != first {
		t.Fatalf("the lease moved to %q (%v) while its holder was healthy", h, err)
	}

	if err := a.stop(t, syscall.SIGTERM); err != nil {
		t.Errorf("leader exit after SIGTERM: %v", err)
	}
	eventually(t, 30*time.Second, "the standby to take the lease", func(ctx context.Context) (bool, error) {
		h, err := leaseHolder(ctx, ns, lease)
		return h != "" && h != first, err
	})
}
