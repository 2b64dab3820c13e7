// Package meter measures what a sandbox uses (docs/record.md §3): CPU time and memory from the
// container's cgroup (v2: cpu.stat usage_usec, memory.current, the counters the kubelet's cAdvisor
// reads), memory integrated over time from samples, and the workspace's bytes by a bounded walk.
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

// ErrNoCgroup says that the cgroup's counters cannot be read: cgroup v1, or the files missing.
// Nothing is measured then; nothing is invented.
var ErrNoCgroup = errors.New("no cgroup v2 counters")

// Cgroup is the cgroup v2 directory of this process: /proc/self/cgroup's "0::<path>" under root
// (/sys/fs/cgroup). In a container with its own cgroup namespace the path is "/", the
// container's cgroup. It returns ErrNoCgroup (wrapped, with what was found) for a cgroup v1
// host, or when cpu.stat or memory.current is not there.
func Cgroup(procSelfCgroup, root string) (string, error) {
	b, err := os.ReadFile(procSelfCgroup)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrNoCgroup, err)
	}
	var path string
	found := false
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "0::"); ok {
			path, found = rest, true
			break
		}
	}
	if !found {
		return "", fmt.Errorf("%w: %s has no cgroup v2 line (cgroup v1)", ErrNoCgroup, procSelfCgroup)
	}
	dir := filepath.Join(root, filepath.Clean("/"+path))
	for _, f := range []string{"cpu.stat", "memory.current"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			// The path may be the host's view (no cgroup namespace, /sys/fs/cgroup the container's
			// own mount): the root itself then is the container's cgroup.
			if _, err2 := os.Stat(filepath.Join(root, f)); err2 == nil && dir != root {
				return checkDir(root)
			}
			return "", fmt.Errorf("%w: %v", ErrNoCgroup, err)
		}
	}
	return dir, nil
}

func checkDir(dir string) (string, error) {
	for _, f := range []string{"cpu.stat", "memory.current"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			return "", fmt.Errorf("%w: %v", ErrNoCgroup, err)
		}
	}
	return dir, nil
}

// ReadCPU is cpu.stat's usage_usec of dir: the cgroup's CPU time since it was created.
func ReadCPU(dir string) (time.Duration, error) {
	b, err := os.ReadFile(filepath.Join(dir, "cpu.stat"))
	if err != nil {
		return 0, err
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

// ReadMemory is memory.current of dir: the cgroup's memory in use, in bytes.
func ReadMemory(dir string) (int64, error) {
	b, err := os.ReadFile(filepath.Join(dir, "memory.current"))
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("memory.current %q: not a count", strings.TrimSpace(string(b)))
	}
	return n, nil
}

// Meter integrates a cgroup's memory over time. Sample it at a steady period (each second):
// between two samples the memory counts at the later sample's value. Safe for concurrent use.
type Meter struct {
	dir string

	mu      sync.Mutex
	last    time.Time // the last sample's time (zero before the first)
	byteSec float64   // memory × time so far, in byte-seconds
	err     error     // the last read's failure, if it failed
}

// New meters the cgroup at dir from now on: memory is integrated from start.
func New(dir string, start time.Time) *Meter {
	return &Meter{dir: dir, last: start}
}

// Sample reads memory.current at now and adds memory × the time since the last sample.
func (m *Meter) Sample(now time.Time) error {
	mem, err := ReadMemory(m.dir)
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
	cpu, err := ReadCPU(m.dir)
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
