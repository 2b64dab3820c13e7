package evidence

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/pkg/isolation"
)

// runcStatus is /proc/self/status (its lines that matter) of sandboxd in a restricted pod under runc.
const runcStatus = "Name:\tairlock\nUmask:\t0022\nState:\tS (sleeping)\nUid:\t65532\t65532\t65532\t65532\nGid:\t65532\t65532\t65532\t65532\n" +
	"CapInh:\t0000000000000000\nCapPrm:\t0000000000000000\nCapEff:\t0000000000000000\nCapBnd:\t0000000000000000\nCapAmb:\t0000000000000000\n" +
	"NoNewPrivs:\t1\nSeccomp:\t2\nSeccomp_filters:\t1\n"

// gvisorStatus is what `runsc --network=none do cat /proc/self/status` printed (runsc
// v0.0.0-20260905035102-160fafc42237, as root: no pod's user or capabilities).
const gvisorStatus = "Name:\tcat\nState:\tR (running)\nTgid:\t3\nNSpid:\t3\nPid:\t3\nPPid:\t1\nTracerPid:\t0\nFDSize:\t64\n" +
	"Gid:\t0\t0\t0\t0\nUid:\t0\t0\t0\t0\nVmSize:\t 5124 kB\nThreads:\t1\n" +
	"CapInh:\t000001ffffffdfff\nCapPrm:\t000001ffffffdfff\nCapEff:\t000001ffffffdfff\nCapBnd:\t000001ffffffdfff\nCapAmb:\t000001ffffffdfff\n" +
	"NoNewPrivs:\t0\nSeccomp:\t0\n"

// fakeConn is an established connection.
type fakeConn struct{ net.Conn }

func (fakeConn) Close() error { return nil }

// network answers dials by address: reached, refused, or silent (blocks until the deadline).
type network struct {
	reached map[string]bool
	refused map[string]bool
	mu      sync.Mutex
	dialed  []string
}

func (n *network) dial(ctx context.Context, netw, address string) (net.Conn, error) {
	n.mu.Lock()
	n.dialed = append(n.dialed, netw+" "+address)
	n.mu.Unlock()
	switch {
	case n.reached[address]:
		return fakeConn{}, nil
	case n.refused[address]:
		return nil, &net.OpError{Op: "dial", Net: netw, Err: syscall.ECONNREFUSED}
	}
	<-ctx.Done()
	return nil, &net.OpError{Op: "dial", Net: netw, Err: ctx.Err()}
}

func podSources(n *network) *Sources {
	env := map[string]string{"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443", isolation.NodeIPEnv: "10.0.0.5"}
	return &Sources{
		Uname:  func() (string, string, error) { return "6.18.44-fc-v1272", "#1 SMP PREEMPT_DYNAMIC @0", nil },
		Status: func() ([]byte, error) { return []byte(runcStatus), nil },
		Getenv: func(k string) string { return env[k] },
		ResolvConf: func() ([]byte, error) {
			return []byte("search ns.svc.cluster.local\nnameserver 10.96.0.10\noptions ndots:5\n"), nil
		},
		Dial:    n.dial,
		Timeout: 20 * time.Millisecond,
	}
}

func TestGatherInAPod(t *testing.T) {
	n := &network{reached: map[string]bool{"10.96.0.10:53": true}, refused: map[string]bool{"10.96.0.1:443": true}}
	ev, err := Gather(context.Background(), podSources(n))
	if err != nil {
		t.Fatal(err)
	}
	want := isolation.Evidence{
		Version: 1, KernelRelease: "6.18.44-fc-v1272", KernelVersion: "#1 SMP PREEMPT_DYNAMIC @0", Runtime: isolation.RuntimeKernel,
		UID: 65532, GID: 65532, CapEff: "0000000000000000", CapPrm: "0000000000000000", NoNewPrivs: true, Seccomp: 2,
		Probes: []isolation.Probe{
			{Name: isolation.ProbeAPIServer, Address: "10.96.0.1:443", Error: "dial tcp: connection refused"},
			{Name: isolation.ProbeNode, Address: "10.0.0.5:10250", Error: "no connection within 20ms: dial tcp: context deadline exceeded"},
			{Name: isolation.ProbeMetadata, Address: "169.254.169.254:80", Error: "no connection within 20ms: dial tcp: context deadline exceeded"},
			{Name: isolation.ProbeKubeDNS, Address: "10.96.0.10:53", Reached: true},
		},
	}
	if string(ev.Canonical()) != string(want.Canonical()) {
		t.Errorf("Gather =\n%s\nwant\n%s", ev.Canonical(), want.Canonical())
	}
	if err := isolation.Validate(ev); err != nil {
		t.Errorf("the evidence gathered is not valid: %v", err)
	}
	for _, d := range n.dialed {
		if !strings.HasPrefix(d, "tcp ") {
			t.Errorf("dialed %s, want TCP", d)
		}
	}
}

// TestProbesRunSideBySide: each probe's dial waits until all four have started, so probes run
// one after another would never end (each would wait for its deadline, an hour away).
func TestProbesRunSideBySide(t *testing.T) {
	var started sync.WaitGroup
	started.Add(4)
	allStarted := make(chan struct{})
	go func() { started.Wait(); close(allStarted) }()
	src := podSources(nil)
	src.Timeout = time.Hour
	src.Dial = func(ctx context.Context, _, _ string) (net.Conn, error) {
		started.Done()
		select {
		case <-allStarted:
			return nil, errors.New("refused")
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ev, err := Gather(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ev.Probes {
		if p.Error != "refused" {
			t.Errorf("probe %s: %q, want refused (the four dials side by side)", p.Name, p.Error)
		}
	}
}

// TestGatherEndsWithItsContext: a cancelled context ends every probe, not reached.
func TestGatherEndsWithItsContext(t *testing.T) {
	src := podSources(&network{})
	src.Timeout = time.Hour
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ev, err := Gather(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ev.Probes {
		if p.Reached || !strings.Contains(p.Error, "context canceled") {
			t.Errorf("probe %s: reached %t, %q; want not reached, cancelled", p.Name, p.Reached, p.Error)
		}
	}
}

// TestGatherWithoutAddresses: a pod without the node's address, the API server's variables or a
// nameserver gets probes not run, which Judge refuses.
func TestGatherWithoutAddresses(t *testing.T) {
	n := &network{}
	src := podSources(n)
	src.Getenv = func(string) string { return "" }
	src.ResolvConf = func() ([]byte, error) { return []byte("# none\nsearch x\n"), nil }
	ev, err := Gather(context.Background(), src)
	if err != nil {
		t.Fatal(err)
	}
	wantErrors := map[string]string{
		isolation.ProbeAPIServer: "KUBERNETES_SERVICE_HOST or KUBERNETES_SERVICE_PORT is not set",
		isolation.ProbeNode:      "AIRLOCK_NODE_IP is not set",
		isolation.ProbeKubeDNS:   "resolv.conf names no nameserver",
	}
	for _, p := range ev.Probes {
		if want, ok := wantErrors[p.Name]; ok && (p.Address != "" || p.Error != want) {
			t.Errorf("probe %s: %q %q, want no address and %q", p.Name, p.Address, p.Error, want)
		}
	}
	if len(n.dialed) != 1 || n.dialed[0] != "tcp "+MetadataAddress {
		t.Errorf("dialed %v, want the metadata service only", n.dialed)
	}
	if ok, _, message := isolation.Judge(ev, "6.18.44-fc-v1272", isolation.Need{}); ok || !strings.Contains(message, "the probe apiserver was not run: KUBERNETES_SERVICE_HOST") {
		t.Errorf("Judge = %t, %q; want refused, the probe not run", ok, message)
	}
}

func TestGatherUnderGVisor(t *testing.T) {
	src := podSources(&network{})
	src.Uname = func() (string, string, error) { return "4.19.0-gvisor", isolation.GVisorKernelVersion, nil }
	src.Status = func() ([]byte, error) { return []byte(gvisorStatus), nil }
	src.Getenv = func(k string) string {
		return map[string]string{"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443", isolation.NodeIPEnv: "fd00::5"}[k]
	}
	src.ResolvConf = func() ([]byte, error) { return []byte("nameserver fd00::a\nnameserver 10.96.0.10\n"), nil }
	ev, err := Gather(context.Background(), src)
	if err != nil {
		t.Fatal(err)
	}
	if ev.Runtime != isolation.RuntimeGVisor || ev.UID != 0 || ev.CapEff != "000001ffffffdfff" || ev.NoNewPrivs || ev.Seccomp != 0 {
		t.Errorf("Gather = %+v, want gVisor, root, its capabilities, no no_new_privs, seccomp 0", ev)
	}
	for i, want := range []string{"[fd00::1]:443", "[fd00::5]:10250", MetadataAddress, "[fd00::a]:53"} {
		if ev.Probes[i].Address != want {
			t.Errorf("probe %s at %s, want %s", ev.Probes[i].Name, ev.Probes[i].Address, want)
		}
	}
}

func TestReadStatus(t *testing.T) {
	tests := map[string]struct {
		status  string
		wantUID int64
		wantErr string
	}{
		"restricted pod":       {status: runcStatus, wantUID: 65532},
		"a saved uid of root":  {status: strings.Replace(runcStatus, "Uid:\t65532\t65532\t65532\t65532", "Uid:\t65532\t65532\t0\t65532", 1), wantUID: 0},
		"no Uid line":          {status: strings.Replace(runcStatus, "Uid:", "Xid:", 1), wantErr: `the Uid line "" does not hold four ids`},
		"a Uid line of three":  {status: strings.Replace(runcStatus, "Uid:\t65532\t65532\t65532\t65532", "Uid:\t1\t2\t3", 1), wantErr: "does not hold four ids"},
		"a uid that is no int": {status: strings.Replace(runcStatus, "Uid:\t65532\t65532\t65532\t65532", "Uid:\t1\t2\t3\t-4", 1), wantErr: "the Uid line"},
		"no CapEff line":       {status: strings.Replace(runcStatus, "CapEff:", "CapXXX:", 1), wantErr: "no CapEff line"},
		"no NoNewPrivs line":   {status: strings.Replace(runcStatus, "NoNewPrivs:", "Nope:", 1), wantErr: "no NoNewPrivs line"},
		"no Seccomp line":      {status: strings.Replace(runcStatus, "Seccomp:\t2", "", 1), wantErr: "no Seccomp line"},
		"empty":                {status: "", wantErr: "does not hold four ids"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var ev isolation.Evidence
			err := readStatus([]byte(tc.status), &ev)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("readStatus = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || ev.UID != tc.wantUID {
				t.Fatalf("readStatus = %v, uid %d; want uid %d", err, ev.UID, tc.wantUID)
			}
		})
	}
}

func TestGatherErrors(t *testing.T) {
	src := podSources(&network{})
	src.Uname = func() (string, string, error) { return "", "", errors.New("uname: no") }
	if _, err := Gather(context.Background(), src); err == nil {
		t.Error("Gather without uname succeeded")
	}
	src = podSources(&network{})
	src.Status = func() ([]byte, error) { return nil, os.ErrNotExist }
	if _, err := Gather(context.Background(), src); err == nil || !strings.Contains(err.Error(), "reading the process's status") {
		t.Errorf("Gather without /proc = %v", err)
	}
}

func TestClean(t *testing.T) {
	for in, want := range map[string]string{
		" 4.19.0-gvisor\n":       "4.19.0-gvisor",
		"a\tb":                   "a?b",
		"délai":                  "d??lai",
		strings.Repeat("x", 300): strings.Repeat("x", 253) + "...",
	} {
		if got := clean(in); got != want {
			t.Errorf("clean(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestHost reads this process's own kernel and status (the network is not asked).
func TestHost(t *testing.T) {
	src := Host()
	src.Dial = (&network{}).dial
	src.Timeout = time.Millisecond
	ev, err := Gather(context.Background(), src)
	if err != nil {
		t.Fatal(err)
	}
	if ev.KernelRelease == "" || ev.KernelVersion == "" || ev.CapEff == "" || ev.CapPrm == "" {
		t.Errorf("Gather on this host = %+v: a field empty", ev)
	}
	if ev.UID > int64(os.Getuid()) || ev.GID > int64(os.Getgid()) {
		t.Errorf("uid %d gid %d, but this process runs as %d/%d", ev.UID, ev.GID, os.Getuid(), os.Getgid())
	}
	t.Logf("this host's evidence: %s", ev.Canonical())
	osrelease, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err == nil && strings.TrimSpace(string(osrelease)) != ev.KernelRelease {
		t.Errorf("release %q, /proc/sys/kernel/osrelease %q", ev.KernelRelease, osrelease)
	}
}
