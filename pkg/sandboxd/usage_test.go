package sandboxd

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/airlock-dev/airlock/pkg/record"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/meter"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/recordlog"
	"github.com/airlock-dev/airlock/pkg/toolnames"
)

// fakeCgroup writes a cgroup v2 directory's two counters.
func fakeCgroup(t *testing.T, dir string, cpuUsec, memBytes int64) {
	t.Helper()
	cpu := "usage_usec " + itoa(cpuUsec) + "\nuser_usec 1\nsystem_usec 1\n"
	if err := os.WriteFile(filepath.Join(dir, "cpu.stat"), []byte(cpu), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "memory.current"), []byte(itoa(memBytes)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }

// usageServer is a sandboxd with the claim's token "tok" whose usage comes from cgroup (a
// directory, or an error) on clk.
func usageServer(t *testing.T, clk *clocktesting.FakeClock, cgroup func() (string, error)) *testServer {
	t.Helper()
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("tok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	opts := defaultOptions()
	counters := func() (meter.Counters, error) {
		dir, err := cgroup()
		return meter.V2(dir), err
	}
	opts.usage = &usageOptions{clock: clk, cgroup: counters, walk: meter.DefaultWalkLimits}
	return startServer(t, Config{AuthTokenFile: tokenFile}, opts)
}

// follow opens GET /record?follow=1 and returns the next entry each call (bounded by testTimeout).
func follow(t *testing.T, url string) func() record.Entry {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+recordlog.Path+"?follow=1", nil)
	req.Header.Set("Authorization", "Bearer tok")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	sc := bufio.NewScanner(resp.Body)
	return func() record.Entry {
		t.Helper()
		if !sc.Scan() {
			t.Fatalf("the record's stream ended: %v", sc.Err())
		}
		var e record.Entry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatal(err)
		}
		return e
	}
}

func nextOfKind(t *testing.T, next func() record.Entry, kind string) record.Entry {
	t.Helper()
	for {
		if e := next(); e.Kind == kind {
			return e
		}
	}
}

// TestUsageEntryEveryMinuteAndInTheStoppedEntry: sandboxd appends the boot's cumulative usage
// each minute of its clock (CPU from cpu.stat usage_usec, memory.current integrated over the
// samples, tool calls counted) and in its stopped entry, with the workspace's bytes there.
func TestUsageEntryEveryMinuteAndInTheStoppedEntry(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 6, 5, 0, 0, 0, time.UTC))
	cg := t.TempDir()
	fakeCgroup(t, cg, 1_500_000, 1<<30) // 1.5 s of CPU, 1 GiB
	ts := usageServer(t, clk, func() (string, error) { return cg, nil })
	ts.stopper.stopAll = func(context.Context) (int, error) { return 0, nil }
	client := &http.Client{Transport: headerTransport{"Authorization": "Bearer tok"}}
	cs := connect(t, &mcp.StreamableClientTransport{Endpoint: ts.url + "/mcp", HTTPClient: client, MaxRetries: -1}, nil)
	if _, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: toolnames.Write, Arguments: map[string]any{"file_path": "a.txt", "content": "hello\n"}}); err != nil {
		t.Fatal(err)
	}
	next := follow(t, ts.url)
	nextOfKind(t, next, record.KindToolCall)

	clk.Step(time.Minute)
	u := nextOfKind(t, next, record.KindUsage)
	want := record.Usage{CPUMillis: 1500, MemoryMiBSeconds: 1024 * 60, ToolCalls: 1}
	if u.Usage == nil || *u.Usage != want || u.Message != "" {
		t.Fatalf("the minute's usage entry: %+v (message %q), want %+v", u.Usage, u.Message, want)
	}

	fakeCgroup(t, cg, 3_000_000, 2<<30)
	clk.Step(time.Second)
	if code, _ := postStop(t, ts.url, "tok"); code != http.StatusOK {
		t.Fatalf("POST /stop = %d", code)
	}
	stopped := nextOfKind(t, next, record.KindSandboxStopped)
	want = record.Usage{CPUMillis: 3000, MemoryMiBSeconds: 1024*60 + 2048, ToolCalls: 1, WorkspaceBytes: 6}
	if stopped.Usage == nil || *stopped.Usage != want || stopped.Message != "" {
		t.Fatalf("the stopped entry's usage: %+v (message %q), want %+v", stopped.Usage, stopped.Message, want)
	}
}

// TestUsageWithoutCgroupInventsNothing: with no cgroup v2 to read, no CPU or memory figure is
// made up: no entry each minute, and the stopped entry says what was not measured.
func TestUsageWithoutCgroupInventsNothing(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 6, 5, 0, 0, 0, time.UTC))
	ts := usageServer(t, clk, func() (string, error) { return "", errors.New("cgroup v1") })
	ts.stopper.stopAll = func(context.Context) (int, error) { return 0, nil }
	next := follow(t, ts.url)
	clk.Step(2 * time.Minute)
	if code, _ := postStop(t, ts.url, "tok"); code != http.StatusOK {
		t.Fatalf("POST /stop = %d", code)
	}
	for {
		e := next()
		if e.Kind == record.KindUsage {
			t.Fatalf("a usage entry without a cgroup: %+v", e.Usage)
		}
		if e.Kind != record.KindSandboxStopped {
			continue
		}
		if e.Usage == nil || e.Usage.CPUMillis != 0 || e.Usage.MemoryMiBSeconds != 0 || !strings.Contains(e.Message, "cpu and memory not measured: cgroup v1") {
			t.Fatalf("stopped entry: usage %+v, message %q", e.Usage, e.Message)
		}
		return
	}
}
