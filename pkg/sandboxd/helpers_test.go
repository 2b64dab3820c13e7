package sandboxd

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/airlock-dev/airlock/pkg/isolation"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/evidence"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/snapshot"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/tools"
)

// newTestToolbox returns a toolbox over a fresh workspace, and the
// workspace's path.
func newTestToolbox(t *testing.T) (*tools.Toolbox, string) {
	t.Helper()
	ws := filepath.Join(t.TempDir(), "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	tb, err := tools.NewToolbox(ws)
	if err != nil {
		t.Fatal(err)
	}
	snaps, err := snapshot.NewStore(filepath.Join(filepath.Dir(ws), "state"), tb.Workspace())
	if err != nil {
		t.Fatal(err)
	}
	tb.SetSnapshots(snaps)
	t.Cleanup(func() { tb.Close() })
	return tb, ws
}

// testKernel is the kernel release the tests' sandboxd reports (fakeEvidence).
const testKernel = "6.18.0-test"

// fakeEvidence are the sources of the tests' isolation evidence: a restricted pod under runc on
// testKernel, in a cluster whose every probe is refused at once. TestMain makes them the
// default (hostEvidence), so that no test asks this host's network; onDial, when set, is called
// with each probe's address first.
func fakeEvidence(onDial func(ctx context.Context, address string) error) *evidence.Sources {
	env := map[string]string{"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443", isolation.NodeIPEnv: "10.0.0.5"}
	return &evidence.Sources{
		Uname: func() (string, string, error) { return testKernel, "#1 SMP PREEMPT_DYNAMIC test", nil },
		Status: func() ([]byte, error) {
			return []byte("Uid:\t65532\t65532\t65532\t65532\nGid:\t65532\t65532\t65532\t65532\nCapPrm:\t0000000000000000\n" +
				"CapEff:\t0000000000000000\nNoNewPrivs:\t1\nSeccomp:\t2\n"), nil
		},
		Getenv:     func(k string) string { return env[k] },
		ResolvConf: func() ([]byte, error) { return []byte("nameserver 10.96.0.10\n"), nil },
		Dial: func(ctx context.Context, _, address string) (net.Conn, error) {
			if onDial != nil {
				if err := onDial(ctx, address); err != nil {
					return nil, err
				}
			}
			return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
		},
	}
}
