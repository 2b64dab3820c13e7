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

// TestCgroupFindsTheCountersOrSaysThereAreNone: cgroup v2, the path of /proc/self/cgroup's
// "0::" line under the root, or the root itself when the path is the host's view; cgroup v1,
// the cpuacct and memory controllers' directories under their hierarchies (the path, or the
// hierarchy's root in a container); ErrNoCgroup when the counters are missing.
func TestCgroupFindsTheCountersOrSaysThereAreNone(t *testing.T) {
	v1 := "12:cpu,cpuacct:/kubepods/pod1/c1\n11:memory:/kubepods/pod1/c1\n3:pids:/kubepods/pod1/c1\n0::/\n"
	tests := map[string]struct {
		procCgroup string
		files      []string // under root
		want       Counters // relative to root; zero for ErrNoCgroup
	}{
		"namespaced":          {procCgroup: "0::/\n", files: []string{"cpu.stat", "memory.current"}, want: V2(".")},
		"nested":              {procCgroup: "0::/kubepods/pod1/c1\n", files: []string{"kubepods/pod1/c1/cpu.stat", "kubepods/pod1/c1/memory.current"}, want: V2("kubepods/pod1/c1")},
		"host view, own root": {procCgroup: "0::/kubepods/pod1/c1\n", files: []string{"cpu.stat", "memory.current"}, want: V2(".")},
		"no memory.current":   {procCgroup: "0::/\n", files: []string{"cpu.stat"}},
		"v1, container": {procCgroup: v1, files: []string{"cpu,cpuacct/cpuacct.usage", "memory/memory.usage_in_bytes"},
			want: V1("cpu,cpuacct", "memory")},
		"v1, host": {procCgroup: v1, files: []string{"cpu,cpuacct/cpuacct.usage", "memory/memory.usage_in_bytes",
			"cpu,cpuacct/kubepods/pod1/c1/cpuacct.usage", "memory/kubepods/pod1/c1/memory.usage_in_bytes"},
			want: V1("cpu,cpuacct/kubepods/pod1/c1", "memory/kubepods/pod1/c1")},
		"v1, no memory controller": {procCgroup: "12:cpu,cpuacct:/\n", files: []string{"cpu,cpuacct/cpuacct.usage"}},
		"v1, no cpuacct.usage":     {procCgroup: v1, files: []string{"memory/memory.usage_in_bytes"}},
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
			if tc.want == (Counters{}) {
				if !errors.Is(err, ErrNoCgroup) {
					t.Fatalf("Cgroup = %+v, %v; want ErrNoCgroup", got, err)
				}
				return
			}
			want := Counters{CPU: filepath.Join(root, tc.want.CPU), Memory: filepath.Join(root, tc.want.Memory), V1: tc.want.V1}
			if err != nil || got != want {
				t.Fatalf("Cgroup = %+v, %v; want %+v", got, err, want)
			}
		})
	}
	if _, err := Cgroup(filepath.Join(t.TempDir(), "absent"), "/"); !errors.Is(err, ErrNoCgroup) {
		t.Errorf("no /proc/self/cgroup: %v, want ErrNoCgroup", err)
	}
}

// TestMeterReadsCgroupV1: CPU is cpuacct.usage in nanoseconds, memory memory.usage_in_bytes.
func TestMeterReadsCgroupV1(t *testing.T) {
	dir := t.TempDir()
	t0 := time.Date(2026, 12, 6, 5, 0, 0, 0, time.UTC)
	write(t, filepath.Join(dir, "cpuacct.usage"), "2500000000\n")        // 2.5 s
	write(t, filepath.Join(dir, "memory.usage_in_bytes"), "104857600\n") // 100 MiB
	m := New(V1(dir, dir), t0)
	f, err := m.Read(t0.Add(10 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if f.CPUMillis != 2500 || f.MemoryMiBSeconds != 1000 {
		t.Fatalf("figures %+v, want 2500 CPU ms and 1000 MiB-s", f)
	}
}

// TestMeterIntegratesMemoryAndReadsCPU: memory counts at each sample's value for the time since
// the one before; CPU is cpu.stat's usage_usec.
func TestMeterIntegratesMemoryAndReadsCPU(t *testing.T) {
	dir := t.TempDir()
	t0 := time.Date(2026, 12, 6, 5, 0, 0, 0, time.UTC)
	write(t, filepath.Join(dir, "cpu.stat"), "usage_usec 2500000\nuser_usec 2000000\n")
	write(t, filepath.Join(dir, "memory.current"), "104857600\n") // 100 MiB
	m := New(V2(dir), t0)
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
