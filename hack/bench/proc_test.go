package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestParseStatCPU(t *testing.T) {
	// utime 1234 and stime 566 ticks; the command name holds a space and a ')'.
	stat := []byte("4242 (kube (api) x) S 1 4242 4242 0 -1 4194560 1000 0 0 0 1234 566 0 0 20 0 12 0 100 1000000 2000 18446744073709551615\n")
	got, err := parseStatCPU(stat)
	if err != nil {
		t.Fatal(err)
	}
	if want := 18 * time.Second; got != want {
		t.Errorf("cpu %v, want %v", got, want)
	}
	for _, bad := range []string{"4242 no name", "4242 (x) S 1 2", "4242 (x) S 1 2 3 4 5 6 7 8 9 10 ten 12"} {
		if _, err := parseStatCPU([]byte(bad)); err == nil {
			t.Errorf("parseStatCPU(%q) accepted it", bad)
		}
	}
}

func TestParseStatusMemory(t *testing.T) {
	status := []byte("Name:\tairlock\nVmPeak:\t 900000 kB\nVmHWM:\t   51200 kB\nVmRSS:\t   40960 kB\nThreads:\t12\n")
	rss, hwm, err := parseStatusMemory(status)
	if err != nil {
		t.Fatal(err)
	}
	if rss != 40<<20 || hwm != 50<<20 {
		t.Errorf("rss %d hwm %d, want 40 MiB and 50 MiB", rss, hwm)
	}
	if _, _, err := parseStatusMemory([]byte("Name:\tx\nVmRSS:\t 1 kB\n")); err == nil {
		t.Error("a status without VmHWM was accepted")
	}
}

func TestReadProcSelf(t *testing.T) {
	s, err := readProc(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if s.RSSBytes <= 0 || s.PeakRSSBytes < s.RSSBytes {
		t.Errorf("this process: %+v, want a positive RSS at or below its peak", s)
	}
}

func TestPidOf(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "etcd.pid"), []byte("1234\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "kwok.pid"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if pid, err := pidOf(dir, "etcd"); err != nil || pid != 1234 {
		t.Errorf("etcd: %d %v, want 1234", pid, err)
	}
	if _, err := pidOf(dir, "kwok"); err == nil {
		t.Error("a pid file without a number was accepted")
	}
	if _, err := pidOf(dir, "missing"); err == nil {
		t.Error("a missing pid file was accepted")
	}
}
