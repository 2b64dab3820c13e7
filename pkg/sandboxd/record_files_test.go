package sandboxd

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-dev/airlock/pkg/record"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/confine"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/recordlog"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/sandboxdtest"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/wsscan"
	"github.com/airlock-dev/airlock/pkg/toolnames"
)

// filesServer is a sandboxd with the record, no token, and each scan within limits (the
// defaults when zero), and a session to it.
func filesServer(t *testing.T, limits wsscan.Limits) (*testServer, *mcp.ClientSession) {
	t.Helper()
	opts := defaultOptions()
	opts.fileScan = limits
	ts := startServer(t, Config{}, opts)
	return ts, connectStreamable(t, ts.url, nil)
}

// callEntries reads the log and returns the entries of the tool call whose tool.call entry is
// the n-th (from 1) of tool, in the log's order, and that entry.
func callEntries(t *testing.T, ts *testServer, tool string, n int) (own []record.Entry, call record.Entry) {
	t.Helper()
	code, entries := readRecord(t, ts.url, "", "")
	if code != http.StatusOK {
		t.Fatalf("GET /record = %d", code)
	}
	seen := 0
	for _, e := range entries {
		if e.Kind == record.KindToolCall && e.Tool == tool {
			if seen++; seen == n {
				call = e
			}
		}
	}
	if call.Call == 0 {
		t.Fatalf("no %d-th %s call in %+v", n, tool, entries)
	}
	for _, e := range entries {
		if e.Call == call.Call && e.Kind != record.KindToolCall {
			own = append(own, e)
		}
	}
	return own, call
}

// filesOf returns the file.write entries of es.
func filesOf(es []record.Entry) []record.Entry {
	var out []record.Entry
	for _, e := range es {
		if e.Kind == record.KindFileWrite {
			out = append(out, e)
		}
	}
	return out
}

// TestRecordHoldsTheFilesABashCallWrote: a Bash command that writes two files, one in a new
// subdirectory, leaves a file.write entry for each, with its size and SHA-256, under the Bash
// call's number, before the call's own entry.
func TestRecordHoldsTheFilesABashCallWrote(t *testing.T) {
	ts, cs := filesServer(t, wsscan.Limits{})
	sandboxdtest.CallOK(t, cs, toolnames.Bash, map[string]any{"command": "mkdir -p sub && printf 'one\\n' > one.txt && printf 'two two\\n' > sub/two.txt"})
	own, call := callEntries(t, ts, toolnames.Bash, 1)
	files := filesOf(own)
	if len(files) != 2 {
		t.Fatalf("file entries %+v, want one.txt and sub/two.txt", files)
	}
	for i, want := range []struct{ path, content string }{{"one.txt", "one\n"}, {"sub/two.txt", "two two\n"}} {
		f := files[i]
		if f.Path != want.path || f.Size == nil || *f.Size != int64(len(want.content)) || f.SHA256 != record.SumHex([]byte(want.content)) || f.Call != call.Call {
			t.Errorf("file %d: %+v, want %s (%d bytes, sha256 %s) of call %d", i, f, want.path, len(want.content), record.SumHex([]byte(want.content)), call.Call)
		}
		if f.SourceSeq >= call.SourceSeq {
			t.Errorf("file %s at source entry %d, after its call's entry %d", f.Path, f.SourceSeq, call.SourceSeq)
		}
	}
}

// TestABashCallThatWritesNothingRecordsNoFile: a command that only reads (files written just
// before, by a Bash call and by the Write tool, possibly in the same clock tick) records no file.
func TestABashCallThatWritesNothingRecordsNoFile(t *testing.T) {
	ts, cs := filesServer(t, wsscan.Limits{})
	sandboxdtest.CallOK(t, cs, toolnames.Bash, map[string]any{"command": "printf a > a.txt"})
	sandboxdtest.CallOK(t, cs, toolnames.Write, map[string]any{"file_path": "w.txt", "content": "w"})
	sandboxdtest.CallOK(t, cs, toolnames.Bash, map[string]any{"command": "cat a.txt w.txt > /dev/null; true"})
	if own, _ := callEntries(t, ts, toolnames.Bash, 2); len(filesOf(own)) != 0 {
		t.Fatalf("a command that wrote nothing recorded %+v", filesOf(own))
	}
	if own, _ := callEntries(t, ts, toolnames.Bash, 1); len(filesOf(own)) != 1 {
		t.Fatalf("the first command's files %+v, want a.txt", filesOf(own))
	}
}

// TestAFileTouchedToAnOldDateIsRecorded: a file written and then given an mtime of 2001 by the
// command (`touch -d`) is still recorded: its ctime is the kernel's, which no process can set.
func TestAFileTouchedToAnOldDateIsRecorded(t *testing.T) {
	ts, cs := filesServer(t, wsscan.Limits{})
	sandboxdtest.CallOK(t, cs, toolnames.Bash, map[string]any{"command": "printf hidden > old.txt && touch -d '2001-01-01 00:00:00' old.txt"})
	fi, err := os.Stat(filepath.Join(ts.ws, "old.txt"))
	if err != nil || fi.ModTime().Year() != 2001 {
		t.Fatalf("the command did not set the mtime to 2001: %v %v", fi, err)
	}
	own, call := callEntries(t, ts, toolnames.Bash, 1)
	files := filesOf(own)
	if len(files) != 1 || files[0].Path != "old.txt" || files[0].SHA256 != record.SumHex([]byte("hidden")) || files[0].Call != call.Call {
		t.Fatalf("files %+v, want old.txt", files)
	}
}

// TestTheScansBoundsLeaveACountedEntry: past the files or the bytes hashed per scan, the files
// are counted in one file.write entry without a path, whose count and message say so; a walk
// cut at its bound says that files beyond were not looked at.
func TestTheScansBoundsLeaveACountedEntry(t *testing.T) {
	for name, c := range map[string]struct {
		limits      wsscan.Limits
		command     string
		wantPaths   string
		wantCounted uint64
		wantMessage string
	}{
		"files": {
			limits: wsscan.Limits{Walk: 1000, Files: 2, Bytes: 1 << 20}, command: "for i in 1 2 3 4 5; do echo $i > f$i; done",
			wantPaths: "f1 f2", wantCounted: 3, wantMessage: "3 more files",
		},
		"bytes": {
			limits: wsscan.Limits{Walk: 1000, Files: 100, Bytes: 10}, command: "printf 1234 > a; head -c 100 /dev/zero > b; printf 123456 > c; printf 1 > d",
			wantPaths: "a c", wantCounted: 2, wantMessage: "2 more files",
		},
		"walk": {
			limits: wsscan.Limits{Walk: 3, Files: 100, Bytes: 1 << 20}, command: "for i in 1 2 3 4 5; do echo $i > f$i; done",
			wantPaths: "f1 f2 f3", wantCounted: 0, wantMessage: "the workspace's walk stopped at 3 entries",
		},
	} {
		t.Run(name, func(t *testing.T) {
			ts, cs := filesServer(t, c.limits)
			sandboxdtest.CallOK(t, cs, toolnames.Bash, map[string]any{"command": c.command})
			own, call := callEntries(t, ts, toolnames.Bash, 1)
			var paths []string
			var counted []record.Entry
			for _, f := range filesOf(own) {
				if f.Path == "" {
					counted = append(counted, f)
					continue
				}
				paths = append(paths, f.Path)
			}
			if strings.Join(paths, " ") != c.wantPaths {
				t.Errorf("files recorded %v, want %s", paths, c.wantPaths)
			}
			if len(counted) != 1 || counted[0].Count != c.wantCounted || !strings.Contains(counted[0].Message, c.wantMessage) || counted[0].Call != call.Call {
				t.Fatalf("counted entries %+v, want one of count %d saying %q", counted, c.wantCounted, c.wantMessage)
			}
		})
	}
}

// TestABackgroundShellsFilesAreRecordedAtItsEnd: the files a background shell wrote are
// recorded when it ends, under the call that started it.
func TestABackgroundShellsFilesAreRecordedAtItsEnd(t *testing.T) {
	ts, cs := filesServer(t, wsscan.Limits{})
	sandboxdtest.CallOK(t, cs, toolnames.Bash, map[string]any{"command": "printf bg > bg.txt", "run_in_background": true})
	// The stream is bounded by ctx: the files come after the shell's process entry.
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, ts.url+recordlog.Path+"?follow=1", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	var call uint64
	for sc.Scan() {
		var e record.Entry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatal(err)
		}
		switch e.Kind {
		case record.KindToolCall:
			call = e.Call
		case record.KindFileWrite:
			if e.Path != "bg.txt" || e.SHA256 != record.SumHex([]byte("bg")) || e.Call != 1 {
				t.Fatalf("file %+v, want bg.txt of call 1", e)
			}
			if call != 0 && call != e.Call {
				t.Fatalf("file %+v after the entry of call %d", e, call)
			}
			return
		}
	}
	t.Fatalf("no file entry before the stream ended: %v", sc.Err())
}

// TestBashFilesCollectedVerify: a Bash call's file entries, the counted one too, are taken by
// the Collector into a chain that verifies intact and sealed, with no gap.
func TestBashFilesCollectedVerify(t *testing.T) {
	ts, cs := filesServer(t, wsscan.Limits{Walk: 1000, Files: 1, Bytes: 1 << 20})
	ts.stopper.stopAll = func(context.Context) (int, error) { return 0, nil }
	sandboxdtest.CallOK(t, cs, toolnames.Bash, map[string]any{"command": "mkdir d && echo 1 > d/x && echo 2 > y"})
	if code, _ := postStop(t, ts.url, ""); code != http.StatusOK {
		t.Fatalf("POST /stop = %d", code)
	}
	all := collectAndVerify(t, ts.url, "")
	var files []string
	for _, e := range all {
		if e.Kind == record.KindRecordGap {
			t.Errorf("a gap: %s", e.Message)
		}
		if e.Kind == record.KindFileWrite {
			files = append(files, e.Path+"#"+strings.Repeat("+", int(e.Count)))
		}
	}
	if strings.Join(files, " ") != "d/x# #+" {
		t.Errorf("file entries %q, want d/x and one counted", files)
	}
}

// TestAScanSkipsWhatTheRecordAlreadySaid: a scan whose window holds files that another call
// recorded (a Bash call's scan, a Write's own entry) and that did not change since records
// neither again; a file changed again (other content, a new ctime) is recorded again.
func TestAScanSkipsWhatTheRecordAlreadySaid(t *testing.T) {
	dir := t.TempDir()
	ws, err := confine.NewResolver(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	log, err := recordlog.New(time.Now, 0)
	if err != nil {
		t.Fatal(err)
	}
	cr := newCallRecording(log, ws, wsscan.Limits{})
	recorder := func(call uint64) *callRecorder {
		return &callRecorder{log: log, call: call, ws: cr.ws, scan: cr.scan, seen: cr.seen}
	}
	since := wsscan.Now() // every scan below has a window that holds every write
	if err := os.WriteFile(filepath.Join(dir, "a.txt"), []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	r1 := recorder(1)
	r1.FilesChanged(since)
	r1.end()
	if err := os.WriteFile(filepath.Join(dir, "w.txt"), []byte("w"), 0o644); err != nil {
		t.Fatal(err)
	}
	recorder(2).FileWritten("w.txt", []byte("w")) // as the Write tool records its own write
	r3 := recorder(3)
	r3.FilesChanged(since)
	r3.end()
	if err := os.WriteFile(filepath.Join(dir, "a.txt"), []byte("again"), 0o644); err != nil {
		t.Fatal(err)
	}
	r4 := recorder(4)
	r4.FilesChanged(since)
	r4.end()

	rr := httptest.NewRecorder()
	log.ServeHTTP(rr, httptest.NewRequest(http.MethodGet, recordlog.Path, nil))
	var got []string
	for _, line := range strings.Split(strings.TrimSpace(rr.Body.String()), "\n") {
		var e record.Entry
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		if e.Kind == record.KindFileWrite {
			got = append(got, fmt.Sprintf("%d:%s", e.Call, e.Path))
		}
	}
	if strings.Join(got, " ") != "1:a.txt 2:w.txt 4:a.txt" {
		t.Fatalf("file entries %v, want a.txt of call 1, w.txt of call 2, a.txt again of call 4", got)
	}
}
