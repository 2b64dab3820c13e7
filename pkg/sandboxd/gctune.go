package sandboxd

import (
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"k8s.io/klog/v2"
)

// sandboxdGCPercent is the GOGC that sandboxd runs with unless GOGC is set.
//
// Most of what a tool call allocates is garbage at once: the SDK's JSON
// decoder takes a fresh 32 KiB buffer for each of the two values it decodes
// per call. With the default GOGC of 100 and the small heap of a sandboxd
// (a few MiB), the collector ran every few dozen calls and took about a
// quarter of sandboxd's CPU time per call (BenchmarkSideBySide's
// sandboxd-cpu-µs/call: 360 µs at GOGC=100, 270 µs at 400). 400 lets the
// heap grow to five times what is live (at least 16 MiB) between two
// collections; at rest, nothing is allocated and the heap stays as small.
const sandboxdGCPercent = 400

// cgroupMemoryMax is where cgroup v2 says the container's memory limit.
const cgroupMemoryMax = "/sys/fs/cgroup/memory.max"

// gcSettings are the garbage collector settings sandboxd applies.
type gcSettings struct {
	percent     int   // 0: leave GOGC as it is
	memoryLimit int64 // 0: leave GOMEMLIMIT as it is
}

// chooseGCSettings decides the settings from the environment and the
// cgroup's memory.max: GOGC sandboxdGCPercent unless GOGC is set, and,
// unless GOMEMLIMIT is set, a soft memory limit of half the container's
// memory limit (when it has one), so that the larger GOGC never lets the
// heap near it: the collector runs more often as the heap nears the soft
// limit, and the other half is left to the tools' processes.
func chooseGCSettings(getenv func(string) string, memoryMax []byte) gcSettings {
	var s gcSettings
	if getenv("GOGC") == "" {
		s.percent = sandboxdGCPercent
	}
	if getenv("GOMEMLIMIT") == "" {
		if limit, err := strconv.ParseInt(strings.TrimSpace(string(memoryMax)), 10, 64); err == nil && limit > 0 {
			s.memoryLimit = limit / 2
		}
	}
	return s
}

// tuneGC applies chooseGCSettings for this process.
func tuneGC(logger klog.Logger) {
	memoryMax, _ := os.ReadFile(cgroupMemoryMax) // absent or "max": no limit
	s := chooseGCSettings(os.Getenv, memoryMax)
	if s.percent != 0 {
		debug.SetGCPercent(s.percent)
	}
	if s.memoryLimit != 0 {
		debug.SetMemoryLimit(s.memoryLimit)
	}
	logger.V(1).Info("Garbage collector", "gcPercent", s.percent, "memoryLimit", s.memoryLimit)
}

// releaseStartupGarbage collects what starting up left behind (the package
// initialisations, the tools' schemas) and returns the freed memory to the
// system, so that sandboxd at rest holds only what it uses: with the larger
// GOGC, no collection would come before the first calls.
func releaseStartupGarbage() { debug.FreeOSMemory() }
