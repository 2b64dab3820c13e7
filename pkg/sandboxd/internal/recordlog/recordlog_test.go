package recordlog

import (
	"bufio"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/pkg/record"
)

var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

func newLog(t *testing.T, max int) *Log {
	t.Helper()
	l, err := New(func() time.Time { return t0 }, max)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func serve(t *testing.T, l *Log) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("GET "+Path, l)
	ts := httptest.NewServer(mux)
	t.Cleanup(func() { l.Close(); ts.Close() })
	return ts
}

func read(t *testing.T, url string) (int, http.Header, []record.Entry) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out []record.Entry
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var e record.Entry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		out = append(out, e)
	}
	return resp.StatusCode, resp.Header, out
}

func TestLogServesEntriesAfterASeq(t *testing.T) {
	l := newLog(t, 0)
	l.Append(record.Entry{Kind: record.KindToolCall, Tool: "Read", Status: record.StatusOK})
	l.Append(record.Entry{Kind: record.KindToolCall, Tool: "Write", Status: record.StatusOK})
	ts := serve(t, l)
	code, h, all := read(t, ts.URL+Path)
	if code != 200 || h.Get(BootHeader) != l.Boot() || len(all) != 3 {
		t.Fatalf("GET = %d, boot %q, %d entries; want 200, %q, 3", code, h.Get(BootHeader), len(all), l.Boot())
	}
	if all[0].Kind != record.KindSandboxBoot || all[2].Tool != "Write" || all[2].SourceSeq != 3 || all[2].Boot != l.Boot() || all[2].Source != record.SourceSandboxd {
		t.Errorf("entries %+v", all)
	}
	_, _, tail := read(t, ts.URL+Path+"?after=2&boot="+l.Boot())
	if len(tail) != 1 || tail[0].SourceSeq != 3 {
		t.Errorf("after=2: %+v", tail)
	}
}

func TestLogRefusesAnotherBoot(t *testing.T) {
	l := newLog(t, 0)
	ts := serve(t, l)
	code, h, _ := read(t, ts.URL+Path+"?after=5&boot=0123456789abcdef")
	if code != http.StatusConflict || h.Get(BootHeader) != l.Boot() {
		t.Fatalf("GET with another boot = %d (boot %q), want 409 with %q", code, h.Get(BootHeader), l.Boot())
	}
	if code, _, _ := read(t, ts.URL+Path+"?after=x"); code != http.StatusBadRequest {
		t.Errorf("after=x: %d, want 400", code)
	}
}

// TestLogCannotBeTrimmedOverHTTP: the agent holds the claim's token, so no request may change
// the log: only GET is routed, and a read changes nothing.
func TestLogCannotBeTrimmedOverHTTP(t *testing.T) {
	l := newLog(t, 0)
	l.Append(record.Entry{Kind: record.KindToolCall, Tool: "Bash"})
	ts := serve(t, l)
	for _, m := range []string{http.MethodPost, http.MethodDelete, http.MethodPut, http.MethodPatch} {
		req, _ := http.NewRequest(m, ts.URL+Path+"?after=2", strings.NewReader(`{"ack":2}`))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("%s %s = %d, want 405", m, Path, resp.StatusCode)
		}
	}
	if _, _, all := read(t, ts.URL+Path); len(all) != 2 {
		t.Errorf("after the requests the log has %d entries, want 2", len(all))
	}
}

func TestFollowStreamsNewEntriesUntilStop(t *testing.T) {
	l := newLog(t, 0)
	ts := serve(t, l)
	resp, err := http.Get(ts.URL + Path + "?after=1&follow=1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	l.Append(record.Entry{Kind: record.KindToolCall, Tool: "Read"})
	if !sc.Scan() || !strings.Contains(sc.Text(), `"tool":"Read"`) {
		t.Fatalf("the stream did not carry the new entry: %q %v", sc.Text(), sc.Err())
	}
	if n := l.Stop(); n != 3 {
		t.Errorf("Stop = %d, want 3 (boot, Read, stopped)", n)
	}
	if !sc.Scan() || !strings.Contains(sc.Text(), `"kind":"sandbox.stopped"`) || !strings.Contains(sc.Text(), `"count":3`) {
		t.Fatalf("the stream's last line is not the stopped entry: %q", sc.Text())
	}
	if sc.Scan() {
		t.Fatalf("the stream goes on after the stopped entry: %q", sc.Text())
	}
	l.Append(record.Entry{Kind: record.KindToolCall, Tool: "Write"})
	if _, _, all := read(t, ts.URL+Path); len(all) != 3 {
		t.Errorf("an entry was appended after Stop: %d entries", len(all))
	}
}

func TestFullLogSaysWhereItStoppedKeeping(t *testing.T) {
	l := newLog(t, 600)
	for range 10 {
		l.Append(record.Entry{Kind: record.KindToolCall, Tool: "Read", ArgsSHA256: record.SumHex(nil), Status: record.StatusOK})
	}
	l.Stop()
	ts := serve(t, l)
	_, _, all := read(t, ts.URL+Path)
	var gap, stopped *record.Entry
	for i := range all {
		switch all[i].Kind {
		case record.KindRecordGap:
			gap = &all[i]
		case record.KindSandboxStopped:
			stopped = &all[i]
		}
	}
	if gap == nil || stopped == nil {
		t.Fatalf("no gap or stopped entry: %+v", all)
	}
	kept := 0
	for _, e := range all {
		if e.Kind == record.KindToolCall {
			kept++
		}
	}
	dropped := 10 - kept
	if kept == 0 || dropped == 0 {
		t.Fatalf("kept %d, dropped %d: the bound was not reached", kept, dropped)
	}
	if !strings.Contains(gap.Message, "from source entry "+itoa(gap.SourceSeq+1)+" on") {
		t.Errorf("gap %q at %d", gap.Message, gap.SourceSeq)
	}
	if stopped.Count != 13 || stopped.Message != "not kept: "+itoa(uint64(dropped))+" tool.call" {
		t.Errorf("stopped: count %d (want 13: boot, gap, 10 calls, itself), message %q", stopped.Count, stopped.Message)
	}
	_, _, tail := read(t, ts.URL+Path+"?after="+itoa(gap.SourceSeq))
	if len(tail) != 1 || tail[0].Kind != record.KindSandboxStopped {
		t.Errorf("after the gap: %+v", tail)
	}
}

func itoa(n uint64) string { b, _ := json.Marshal(n); return string(b) }
