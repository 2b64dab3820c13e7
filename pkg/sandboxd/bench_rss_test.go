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
			bin := filepath.Join(b.TempDir(), "airlock")
			args := append([]string{"build", "-trimpath", "-ldflags", "-s -w", "-o", bin}, build.tags...)
			cmd := exec.Command("go", append(args, ".")...)
			cmd.Dir = root
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("go build: %v\n%s", err, out)
			}
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

// sandboxdAtRest starts bin's sandboxd, waits until it is ready, reads its
// memory, and stops it (SIGTERM, then it must exit 0).
func sandboxdAtRest(b *testing.B, bin string) procMemory {
	b.Helper()
	ws := filepath.Join(b.TempDir(), "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "sandboxd", "--listen=127.0.0.1:0", "--workspace="+ws, "--state-dir="+b.TempDir())
	cmd.Env = append(os.Environ(), "PATH=/usr/bin:/bin") // no language server is started anyway
	stderr, err := cmd.StderrPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	exited := make(chan error, 1)
	addr := make(chan string, 1)
	go func() {
		// The listening address is in the log line that says so; the rest
		// of the log is drained so that sandboxd never blocks on it.
		re := regexp.MustCompile(`"sandboxd listening".* address="([^"]+)"`)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
		exited <- cmd.Wait()
	}()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				b.Errorf("sandboxd exited: %v", err)
			}
		case <-ctx.Done():
			b.Errorf("sandboxd did not exit on SIGTERM")
		}
	}()
	var url string
	select {
	case a := <-addr:
		url = "http://" + a
	case err := <-exited:
		exited <- err
		b.Fatalf("sandboxd exited before listening: %v", err)
	case <-ctx.Done():
		b.Fatal("sandboxd did not say where it listens")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/readyz", nil)
	if err != nil {
		b.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b.Fatalf("/readyz answered %s", resp.Status)
	}
	http.DefaultClient.CloseIdleConnections()
	mem, err := readProcMemory(cmd.Process.Pid)
	if err != nil {
		b.Fatal(err)
	}
	return mem
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
