package sandboxd

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// BenchmarkRSSAtRest measures the resident memory of a real `airlock
// sandboxd` at rest: built as the images build it (static, -trimpath,
// -s -w), started on a loopback port with an empty workspace, and read from
// /proc/<pid>/status once it answers /readyz, with no session and no
// language server. It reports VmRSS and its anonymous and file-backed parts
// in MiB, for the sandbox images' build (-tags sandboxd_only) and for the
// full airlock binary (the operator image's). The figures are reported,
// not asserted: they depend on the kernel and the machine.
//
//	go test -run '^$' -bench BenchmarkRSSAtRest -benchtime 1x ./pkg/sandboxd/
func BenchmarkRSSAtRest(b *testing.B) {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		b.Skip("no /proc/<pid>/status on this system")
	}
	root, err := moduleRoot()
	if err != nil {
		b.Fatal(err)
	}
	for _, build := range []struct {
		name string
		tags []string
	}{
		{name: "sandbox-image", tags: []string{"-tags", "sandboxd_only"}},
		{name: "full-binary"},
	} {
		b.Run(build.name, func(b *testing.B) {
			bin := buildAirlock(b, root, build.tags...)
			var rss procMemory
			for b.Loop() {
				rss = sandboxdAtRest(b, bin)
			}
			b.ReportMetric(rss.rss, "rss-MiB")
			b.ReportMetric(rss.anon, "anon-MiB")
			b.ReportMetric(rss.file, "file-MiB")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// procMemory is what /proc/<pid>/status says of a process's resident
// memory, in MiB.
type procMemory struct{ rss, anon, file float64 }

// sandboxdAtRest starts bin's sandboxd, waits until it is ready, and reads
// its memory.
func sandboxdAtRest(b *testing.B, bin string) procMemory {
	b.Helper()
	ws := filepath.Join(b.TempDir(), "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		b.Fatal(err)
	}
	p := startSandboxdProcess(b, bin, ws)
	defer p.stop(b)
	mem, err := readProcMemory(p.pid)
	if err != nil {
		b.Fatal(err)
	}
	return mem
}

// buildAirlock builds airlock as the images do (static, -trimpath, -s -w)
// with the given build flags, and returns the binary's path.
func buildAirlock(b *testing.B, root string, flags ...string) string {
	b.Helper()
	bin := filepath.Join(b.TempDir(), "airlock")
	args := append([]string{"build", "-trimpath", "-ldflags", "-s -w", "-o", bin}, flags...)
	cmd := exec.Command("go", append(args, ".")...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// sandboxdProcess is a running `airlock sandboxd`.
type sandboxdProcess struct {
	url    string // http://127.0.0.1:port
	pid    int
	cmd    *exec.Cmd
	exited chan error
	cancel context.CancelFunc
}

// startSandboxdProcess starts `bin sandboxd` on a loopback port for the
// workspace ws and returns once it answers /readyz. stop ends it.
func startSandboxdProcess(b *testing.B, bin, ws string) *sandboxdProcess {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "sandboxd", "--listen=127.0.0.1:0", "--workspace="+ws, "--state-dir="+b.TempDir())
	cmd.Env = append(os.Environ(), "PATH=/usr/bin:/bin") // no language server is started anyway
	stderr, err := cmd.StderrPipe()
	if err != nil {
		cancel()
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		cancel()
		b.Fatal(err)
	}
	p := &sandboxdProcess{pid: cmd.Process.Pid, cmd: cmd, exited: make(chan error, 1), cancel: cancel}
	addr := make(chan string, 1)
	gathered := make(chan struct{})
	go func() {
		// The listening address is in the log line that says so, and
		// readiness waits for the isolation evidence, which a line says
		// too; the rest of the log is drained so that sandboxd never
		// blocks on it.
		re := regexp.MustCompile(`"sandboxd listening".* address="([^"]+)"`)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
			}
			if strings.Contains(sc.Text(), `"Isolation evidence gathered"`) {
				close(gathered)
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
		p.exited <- cmd.Wait()
	}()
	timeout := time.NewTimer(testTimeout)
	defer timeout.Stop()
	select {
	case a := <-addr:
		p.url = "http://" + a
	case err := <-p.exited:
		cancel()
		b.Fatalf("sandboxd exited before listening: %v", err)
	case <-timeout.C:
		p.stop(b)
		b.Fatal("sandboxd did not say where it listens")
	}
	select {
	case <-gathered:
	case <-timeout.C:
		p.stop(b)
		b.Fatal("sandboxd did not gather its isolation evidence")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url+"/readyz", nil)
	if err != nil {
		p.stop(b)
		b.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		p.stop(b)
		b.Fatal(err)
	}
	resp.Body.Close()
	http.DefaultClient.CloseIdleConnections()
	if resp.StatusCode != http.StatusOK {
		p.stop(b)
		b.Fatalf("/readyz answered %s", resp.Status)
	}
	return p
}

// stop sends SIGTERM and waits for sandboxd to exit 0 (it is killed if it
// has not within testTimeout).
func (p *sandboxdProcess) stop(b *testing.B) {
	b.Helper()
	defer p.cancel()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	timeout := time.NewTimer(testTimeout)
	defer timeout.Stop()
	select {
	case err := <-p.exited:
		if err != nil {
			b.Errorf("sandboxd exited: %v", err)
		}
	case <-timeout.C:
		b.Errorf("sandboxd did not exit on SIGTERM: killed")
		p.cancel()
		<-p.exited
	}
}

// readProcMemory reads VmRSS, RssAnon and RssFile of pid.
func readProcMemory(pid int) (procMemory, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return procMemory{}, err
	}
	var m procMemory
	fields := map[string]*float64{"VmRSS:": &m.rss, "RssAnon:": &m.anon, "RssFile:": &m.file}
	for line := range strings.Lines(string(data)) {
		f := strings.Fields(line)
		if len(f) != 3 || f[2] != "kB" {
			continue
		}
		if p, ok := fields[f[0]]; ok {
			kb, err := strconv.ParseFloat(f[1], 64)
			if err != nil {
				return procMemory{}, fmt.Errorf("%s: %v", line, err)
			}
			*p = kb / 1024
			delete(fields, f[0])
		}
	}
	if len(fields) > 0 {
		return procMemory{}, fmt.Errorf("/proc/%d/status has no %v", pid, fields)
	}
	return m, nil
}
