package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's utime and stime: 100 on every Linux
// architecture the plane runs on (the kernel's ABI fixes it; sysconf(_SC_CLK_TCK) answers 100).
const clockTicks = 100

// procSample is what /proc says of one process at one moment.
type procSample struct {
	// CPU is user + system time used so far.
	CPU time.Duration
	// RSSBytes is VmRSS, PeakRSSBytes VmHWM (the peak since start or since resetPeakRSS).
	RSSBytes, PeakRSSBytes int64
}

// readProc samples process pid.
func readProc(pid int) (procSample, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procSample{}, err
	}
	cpu, err := parseStatCPU(stat)
	if err != nil {
		return procSample{}, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return procSample{}, err
	}
	rss, hwm, err := parseStatusMemory(status)
	if err != nil {
		return procSample{}, fmt.Errorf("/proc/%d/status: %w", pid, err)
	}
	return procSample{CPU: cpu, RSSBytes: rss, PeakRSSBytes: hwm}, nil
}

// parseStatCPU returns utime + stime of a /proc/<pid>/stat line. The command name (field 2) is in
// parentheses and may itself hold spaces and parentheses, so fields are counted from the last ')'.
func parseStatCPU(stat []byte) (time.Duration, error) {
	end := bytes.LastIndexByte(stat, ')')
	if end < 0 {
		return 0, fmt.Errorf("no command name in %q", stat)
	}
	// After ") ": field 3 (state) is rest[0]; utime is field 14, stime field 15.
	rest := strings.Fields(string(stat[end+1:]))
	if len(rest) < 13 {
		return 0, fmt.Errorf("%d fields after the command name, want at least 13", len(rest))
	}
	var ticks int64
	for _, f := range rest[11:13] {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("bad CPU time %q: %w", f, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// parseStatusMemory returns VmRSS and VmHWM of a /proc/<pid>/status, in bytes.
func parseStatusMemory(status []byte) (rss, hwm int64, err error) {
	found := 0
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		key, value, ok := strings.Cut(sc.Text(), ":")
		if !ok || (key != "VmRSS" && key != "VmHWM") {
			continue
		}
		fields := strings.Fields(value)
		if len(fields) != 2 || fields[1] != "kB" {
			return 0, 0, fmt.Errorf("unexpected %s line %q", key, sc.Text())
		}
		kb, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("bad %s %q: %w", key, fields[0], err)
		}
		if key == "VmRSS" {
			rss = kb * 1024
		} else {
			hwm = kb * 1024
		}
		found++
	}
	if found != 2 {
		return 0, 0, fmt.Errorf("VmRSS or VmHWM missing")
	}
	return rss, hwm, nil
}

// resetPeakRSS makes VmHWM start again from the current RSS (clear_refs 5; the process must be
// ours).
func resetPeakRSS(pid int) error {
	return os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
}

// pidOf reads <stateDir>/<name>.pid, written by hack/lib/cluster.sh's start.
func pidOf(stateDir, name string) (int, error) {
	b, err := os.ReadFile(filepath.Join(stateDir, name+".pid"))
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("%s.pid holds %q, not a process id", name, b)
	}
	return pid, nil
}
