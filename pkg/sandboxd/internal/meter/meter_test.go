package meter

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestCgroupFindsTheV2DirectoryOrSaysThereIsNone: the path of /proc/self/cgroup's "0::" line
// under the root; the root itself when the path is the host's view; ErrNoCgroup for cgroup v1
// or missing counters.
func TestCgroupFindsTheV2DirectoryOrSaysThereIsNone(t *testing.T) {
	tests := map[string]struct {
		procCgroup string
		files      []string // under root
		want       string   // relative to root; "-" for ErrNoCgroup
	}{
		"namespaced":          {procCgroup: "0::/\n", files: []string{"cpu.stat", "memory.current"}, want: "."},
		"nested":              {procCgroup: "0::/kubepods/pod1/c1\n", files: []string{"kubepods/pod1/c1/cpu.stat", "kubepods/pod1/c1/memory.current"}, want: "kubepods/pod1/c1"},
		"host view, own root": {procCgroup: "0::/kubepods/pod1/c1\n", files: []string{"cpu.stat", "memory.current"}, want: "."},
		"cgroup v1":           {procCgroup: "12:cpu,cpuacct:/kubepods\n11:memory:/kubepods\n", files: []string{"cpu.stat", "memory.current"}, want: "-"},
		"no memory.current":   {procCgroup: "0::/\n", files: []string{"cpu.stat"}, want: "-"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			root := filepath.Join(dir, "cgroup")
			if err := os.Mkdir(root, 0o755); err != nil {
				t.Fatal(err)
			}
			write(t, filepath.Join(dir, "proc"), tc.procCgroup)
			for _, f := range tc.files {
				write(t, filepath.Join(root, f), "0\n")
			}
			got, err := Cgroup(filepath.Join(dir, "proc"), root)
			if tc.want == "-" {
				if !errors.Is(err, ErrNoCgroup) {
					t.Fatalf("Cgroup = %q, %v; want ErrNoCgroup", got, err)
				}
				return
			}
			if err != nil || got != filepath.Join(root, tc.want) {
				t.Fatalf("Cgroup = %q, %v; want %q", got, err, filepath.Join(root, tc.want))
			}
		})
	}
	if _, err := Cgroup(filepath.Join(t.TempDir(), "absent"), "/"); !errors.Is(err, ErrNoCgroup) {
		t.Errorf("no /proc/self/cgroup: %v, want ErrNoCgroup", err)
	}
}

// TestMeterIntegratesMemoryAndReadsCPU: memory counts at each sample's value for the time since
// the one before; CPU is cpu.stat's usage_usec.
func TestMeterIntegratesMemoryAndReadsCPU(t *testing.T) {
	dir := t.TempDir()
	t0 := time.Date(2026, 12, 6, 5, 0, 0, 0, time.UTC)
	write(t, filepath.Join(dir, "cpu.stat"), "usage_usec 2500000\nuser_usec 2000000\n")
	write(t, filepath.Join(dir, "memory.current"), "104857600\n") // 100 MiB
	m := New(dir, t0)
	if err := m.Sample(t0.Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "memory.current"), "209715200\n") // 200 MiB
	if err := m.Sample(t0.Add(10 * time.Second)); err != nil {    // no time passed: nothing added
		t.Fatal(err)
	}
	f, err := m.Read(t0.Add(15 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if want := (Figures{CPUMillis: 2500, MemoryMiBSeconds: 100*10 + 200*5}); f != want {
		t.Errorf("Read = %+v, want %+v", f, want)
	}
	write(t, filepath.Join(dir, "memory.current"), "lots\n")
	if _, err := m.Read(t0.Add(20 * time.Second)); err == nil {
		t.Error("Read of an unreadable memory.current gave figures")
	}
}

// TestWorkspaceBytesSumsRegularFilesWithinItsBound: regular files' sizes, not symbolic links';
// a walk past its bound gives no figure.
func TestWorkspaceBytesSumsRegularFilesWithinItsBound(t *testing.T) {
	ws := t.TempDir()
	write(t, filepath.Join(ws, "a.txt"), "hello\n")
	write(t, filepath.Join(ws, "sub/b.bin"), string(make([]byte, 1000)))
	if err := os.Symlink("/etc/passwd", filepath.Join(ws, "link")); err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 12, 6, 5, 0, 0, 0, time.UTC)
	now := func() time.Time { return t0 }
	n, err := WorkspaceBytes(ws, DefaultWalkLimits, now)
	if err != nil || n != 1006 {
		t.Fatalf("WorkspaceBytes = %d, %v; want 1006", n, err)
	}
	if _, err := WorkspaceBytes(ws, WalkLimits{Entries: 2, Duration: time.Hour}, now); !errors.Is(err, ErrWalkCut) {
		t.Errorf("a walk past its entries: %v, want ErrWalkCut", err)
	}
	calls := 0
	slow := func() time.Time { calls++; return t0.Add(time.Duration(calls) * time.Second) }
	if _, err := WorkspaceBytes(ws, WalkLimits{Entries: 100, Duration: 2 * time.Second}, slow); !errors.Is(err, ErrWalkCut) {
		t.Errorf("a walk past its time: %v, want ErrWalkCut", err)
	}
}
