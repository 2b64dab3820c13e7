// Package meter measures what a sandbox uses (docs/record.md §3): CPU time and memory from the
// container's cgroup (v2: cpu.stat usage_usec, memory.current; v1: cpuacct.usage,
// memory.usage_in_bytes; the counters the kubelet's cAdvisor reads), memory integrated over time from samples, and the workspace's bytes by a bounded walk.
// It reads files only; its caller's clock says when.
package meter

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ErrNoCgroup says that the cgroup's counters cannot be read: the files are missing, or this
// process's cgroup is not found. Nothing is measured then; nothing is invented.
var ErrNoCgroup = errors.New("no cgroup counters")

// Counters are the two files of the container's cgroup that usage reads: its CPU time and its
// memory in use. cgroup v2: cpu.stat (usage_usec) and memory.current; cgroup v1: the cpuacct
// controller's cpuacct.usage (nanoseconds) and the memory controller's memory.usage_in_bytes.
// Each is the counter the kubelet's cAdvisor reads for the container on that cgroup version.
type Counters struct {
	CPU    string
	Memory string
	// V1 says that CPU is cpuacct.usage (one number, nanoseconds), not cpu.stat.
	V1 bool
}

// V2 are the counters of the cgroup v2 directory dir.
func V2(dir string) Counters {
	return Counters{CPU: filepath.Join(dir, "cpu.stat"), Memory: filepath.Join(dir, "memory.current")}
}

// V1 are the counters of the cgroup v1 cpuacct directory cpuDir and memory directory memDir.
func V1(cpuDir, memDir string) Counters {
	return Counters{CPU: filepath.Join(cpuDir, "cpuacct.usage"), Memory: filepath.Join(memDir, "memory.usage_in_bytes"), V1: true}
}

// Cgroup finds this process's cgroup counters from procSelfCgroup (/proc/self/cgroup) under root
// (/sys/fs/cgroup): cgroup v2 when the file has a "0::<path>" line and root holds a v2
// hierarchy, else cgroup v1's cpuacct and memory controllers. In a container the path the file
// names may be the host's view while root holds the container's own cgroup (no cgroup
// namespace: the runtime mounts the container's cgroup as the hierarchy's root): the path under
// root is taken when it has the counters, else root's own (which, in a container, is the
// container's cgroup). It returns ErrNoCgroup (wrapped, with what was found) when neither is
// there.
func Cgroup(procSelfCgroup, root string) (Counters, error) {
	b, err := os.ReadFile(procSelfCgroup)
	if err != nil {
		return Counters{}, fmt.Errorf("%w: %v", ErrNoCgroup, err)
	}
	v1 := map[string]string{} // controller -> "<hierarchy dir name>\x00<path>"
	for _, line := range strings.Split(string(b), "\n") {
		id, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		controllers, path, ok := strings.Cut(rest, ":")
		if !ok {
			continue
		}
		if id == "0" && controllers == "" {
			if c, err := under(root, path, V2); err == nil {
				return c, nil
			}
			continue
		}
		for _, ctl := range strings.Split(controllers, ",") {
			v1[ctl] = controllers + "\x00" + path
		}
	}
	cpu, okc := v1["cpuacct"]
	mem, okm := v1["memory"]
	if !okc || !okm {
		return Counters{}, fmt.Errorf("%w: %s names neither a cgroup v2 hierarchy with cpu.stat and memory.current under %s nor the cgroup v1 cpuacct and memory controllers", ErrNoCgroup, procSelfCgroup, root)
	}
	cpuDir, err := v1Dir(root, cpu, "cpuacct.usage")
	if err != nil {
		return Counters{}, err
	}
	memDir, err := v1Dir(root, mem, "memory.usage_in_bytes")
	if err != nil {
		return Counters{}, err
	}
	return V1(cpuDir, memDir), nil
}

// under is the counters of path under root when they are there, else root's own.
func under(root, path string, counters func(dir string) Counters) (Counters, error) {
	for _, dir := range []string{filepath.Join(root, filepath.Clean("/"+path)), root} {
		c := counters(dir)
		if exists(c.CPU) && exists(c.Memory) {
			return c, nil
		}
	}
	return Counters{}, fmt.Errorf("%w: %s under %s", ErrNoCgroup, path, root)
}

// v1Dir is the directory of a cgroup v1 controller's cgroup that holds file: its hierarchy is
// mounted at root/<controllers as /proc/self/cgroup lists them>.
func v1Dir(root, hierarchyAndPath, file string) (string, error) {
	hierarchy, path, _ := strings.Cut(hierarchyAndPath, "\x00")
	base := filepath.Join(root, hierarchy)
	for _, dir := range []string{filepath.Join(base, filepath.Clean("/"+path)), base} {
		if exists(filepath.Join(dir, file)) {
			return dir, nil
		}
	}
	return "", fmt.Errorf("%w: no %s for the cgroup v1 hierarchy %s (path %s) under %s", ErrNoCgroup, file, hierarchy, path, root)
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// ReadCPU is the cgroup's CPU time since it was created: cpu.stat's usage_usec (v2) or
// cpuacct.usage (v1).
func ReadCPU(c Counters) (time.Duration, error) {
	b, err := os.ReadFile(c.CPU)
	if err != nil {
		return 0, err
	}
	if c.V1 {
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("cpuacct.usage %q: not a count", strings.TrimSpace(string(b)))
		}
		return time.Duration(n), nil
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "usage_usec "); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil || n < 0 {
				return 0, fmt.Errorf("cpu.stat usage_usec %q: not a count", v)
			}
			return time.Duration(n) * time.Microsecond, nil
		}
	}
	return 0, errors.New("cpu.stat has no usage_usec")
}

// ReadMemory is the cgroup's memory in use, in bytes: memory.current (v2) or
// memory.usage_in_bytes (v1).
func ReadMemory(c Counters) (int64, error) {
	b, err := os.ReadFile(c.Memory)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%s %q: not a count", filepath.Base(c.Memory), strings.TrimSpace(string(b)))
	}
	return n, nil
}

// Meter integrates a cgroup's memory over time. Sample it at a steady period (each second):
// between two samples the memory counts at the later sample's value. Safe for concurrent use.
type Meter struct {
	counters Counters

	mu      sync.Mutex
	last    time.Time // the last sample's time (zero before the first)
	byteSec float64   // memory × time so far, in byte-seconds
	err     error     // the last read's failure, if it failed
}

// New meters the cgroup's counters from now on: memory is integrated from start.
func New(c Counters, start time.Time) *Meter {
	return &Meter{counters: c, last: start}
}

// Sample reads memory.current at now and adds memory × the time since the last sample.
func (m *Meter) Sample(now time.Time) error {
	mem, err := ReadMemory(m.counters)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		m.err = err
		return err
	}
	if dt := now.Sub(m.last); dt > 0 {
		m.byteSec += float64(mem) * dt.Seconds()
		m.last = now
	}
	m.err = nil
	return nil
}

// Figures are the cgroup's cumulative figures.
type Figures struct {
	CPUMillis        int64
	MemoryMiBSeconds int64
}

// Read samples memory at now and returns the cumulative figures: the cgroup's CPU time and the
// memory integrated so far.
func (m *Meter) Read(now time.Time) (Figures, error) {
	if err := m.Sample(now); err != nil {
		return Figures{}, err
	}
	cpu, err := ReadCPU(m.counters)
	if err != nil {
		return Figures{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return Figures{CPUMillis: cpu.Milliseconds(), MemoryMiBSeconds: int64(m.byteSec / (1 << 20))}, nil
}

// WalkLimits bound a walk of the workspace: a stop must answer in seconds.
type WalkLimits struct {
	Entries  int           // at most this many directory entries
	Duration time.Duration // for at most this long (by now)
}

// DefaultWalkLimits: 200,000 entries or 2 s, whichever comes first.
var DefaultWalkLimits = WalkLimits{Entries: 200_000, Duration: 2 * time.Second}

// ErrWalkCut says that a walk hit its bound: its total is not the workspace's.
var ErrWalkCut = errors.New("the workspace walk hit its bound")

// WorkspaceBytes sums the sizes of the regular files under dir (symbolic links are not
// followed, and count for nothing), within limits; now is the caller's clock. A walk cut by its
// bound returns ErrWalkCut and no figure.
func WorkspaceBytes(dir string, limits WalkLimits, now func() time.Time) (int64, error) {
	start := now()
	var total int64
	n := 0
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // an entry that went or cannot be read: not counted
		}
		n++
		if n > limits.Entries || now().Sub(start) > limits.Duration {
			return ErrWalkCut
		}
		if !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		total += info.Size()
		return nil
	})
	if err != nil {
		return 0, err
	}
	return total, nil
}
