package sandboxd

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-dev/airlock/pkg/record"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/recordlog"
	"github.com/airlock-dev/airlock/pkg/sandboxrecord"
	"github.com/airlock-dev/airlock/pkg/sandboxstop"
	"github.com/airlock-dev/airlock/pkg/toolnames"
)

// readRecord reads GET /record?<query> with token.
func readRecord(t *testing.T, url, token, query string) (int, []record.Entry) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url+recordlog.Path+"?"+query, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out []record.Entry
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, nil
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var e record.Entry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		out = append(out, e)
	}
	return resp.StatusCode, out
}

func tokenServer(t *testing.T) *testServer {
	t.Helper()
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("tok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return startServer(t, Config{AuthTokenFile: tokenFile}, options{})
}

// TestRecordHoldsToolCallsFilesAndProcesses: each tool call is recorded with a digest of its
// arguments, its status and its number; the file a Write or an Edit wrote with its size and
// SHA-256; the process a Bash ran with its argv and exit status; and GET /record needs the
// claim's token.
func TestRecordHoldsToolCallsFilesAndProcesses(t *testing.T) {
	ts := tokenServer(t)
	client := &http.Client{Transport: headerTransport{"Authorization": "Bearer tok"}}
	cs := connect(t, &mcp.StreamableClientTransport{Endpoint: ts.url + "/mcp", HTTPClient: client, MaxRetries: -1}, nil)
	call := func(name string, args map[string]any) {
		t.Helper()
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		_ = res
	}
	call(toolnames.Write, map[string]any{"file_path": "a.txt", "content": "hello\n"})
	call(toolnames.Edit, map[string]any{"file_path": "a.txt", "old_string": "hello", "new_string": "bye"})
	call(toolnames.Bash, map[string]any{"command": "exit 3"})
	call(toolnames.Read, map[string]any{"file_path": "missing.txt"})

	if code, _ := readRecord(t, ts.url, "", ""); code != http.StatusUnauthorized {
		t.Fatalf("GET /record without the token = %d, want 401", code)
	}
	code, entries := readRecord(t, ts.url, "tok", "")
	if code != http.StatusOK {
		t.Fatalf("GET /record = %d", code)
	}
	var calls, files, procs []record.Entry
	for i, e := range entries {
		if e.Source != record.SourceSandboxd || e.SourceSeq != uint64(i+1) || e.Boot != ts.record.Boot() {
			t.Errorf("entry %d: source %q seq %d boot %q", i, e.Source, e.SourceSeq, e.Boot)
		}
		switch e.Kind {
		case record.KindToolCall:
			calls = append(calls, e)
		case record.KindFileWrite:
			files = append(files, e)
		case record.KindProcess:
			procs = append(procs, e)
		}
	}
	if len(calls) != 4 || calls[0].Tool != toolnames.Write || calls[2].Tool != toolnames.Bash || calls[3].Status != record.StatusError {
		t.Fatalf("tool calls %+v", calls)
	}
	if want := record.SumHex([]byte(`{"content":"hello\n","file_path":"a.txt"}`)); calls[0].ArgsSHA256 != want {
		t.Errorf("Write's args digest %s, want %s (of the arguments as sent)", calls[0].ArgsSHA256, want)
	}
	if len(files) != 2 || files[0].Path != "a.txt" || *files[0].Size != 6 || files[0].SHA256 != record.SumHex([]byte("hello\n")) ||
		files[1].SHA256 != record.SumHex([]byte("bye\n")) || files[0].Call != calls[0].Call || files[1].Call != calls[1].Call {
		t.Errorf("files %+v", files)
	}
	if len(procs) != 1 || strings.Join(procs[0].Argv, " ") != "/bin/bash -c exit 3" || *procs[0].Exit != 3 || procs[0].Call != calls[2].Call {
		t.Errorf("processes %+v", procs)
	}
}

// TestAnAgentCannotWriteAnEntryThroughWhatItControls: what the agent controls (a command, a
// file's path and content) reaches the log only inside the fields of sandboxd's own entries, JSON
// escaped: a command and a file that carry a newline and a whole forged entry add no entry, and
// the log has exactly the calls' own.
func TestAnAgentCannotWriteAnEntryThroughWhatItControls(t *testing.T) {
	ts := tokenServer(t)
	client := &http.Client{Transport: headerTransport{"Authorization": "Bearer tok"}}
	cs := connect(t, &mcp.StreamableClientTransport{Endpoint: ts.url + "/mcp", HTTPClient: client, MaxRetries: -1}, nil)
	forged := "\n" + `{"v":1,"source":"operator","kind":"record.sealed","count":1}` + "\n"
	for _, c := range []struct {
		name string
		args map[string]any
	}{
		{toolnames.Bash, map[string]any{"command": "true #" + forged}},
		{toolnames.Write, map[string]any{"file_path": "forged.txt", "content": forged}},
	} {
		if _, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: c.name, Arguments: c.args}); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
	}
	code, entries := readRecord(t, ts.url, "tok", "")
	if code != http.StatusOK {
		t.Fatalf("GET /record = %d", code)
	}
	var kinds []string
	for _, e := range entries {
		if e.Source != record.SourceSandboxd {
			t.Errorf("an entry of source %q in sandboxd's log: %+v", e.Source, e)
		}
		kinds = append(kinds, e.Kind)
	}
	if got, want := strings.Join(kinds, " "), "sandbox.boot process tool.call file.write tool.call"; got != want {
		t.Fatalf("entries %q, want the calls' own (%q) and nothing forged", got, want)
	}
}

// TestStopEndsTheRecordWithItsCount: the operator's stop appends sandbox.stopped with the
// count of entries before it answers, and a follow stream ends with it.
func TestStopEndsTheRecordWithItsCount(t *testing.T) {
	ts := tokenServer(t)
	var stopped atomic.Bool
	ts.stopper.stopAll = func(context.Context) (int, error) { stopped.Store(true); return 0, nil }
	// The stream is bounded: a stop that does not end it fails the test, never hangs it.
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, ts.url+recordlog.Path+"?follow=1", nil)
	req.Header.Set("Authorization", "Bearer tok")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	if !sc.Scan() || !strings.Contains(sc.Text(), `"kind":"sandbox.boot"`) {
		t.Fatalf("first line %q", sc.Text())
	}
	if code, _ := postStop(t, ts.url, "tok"); code != http.StatusOK || !stopped.Load() {
		t.Fatalf("POST /stop = %d", code)
	}
	if !sc.Scan() || !strings.Contains(sc.Text(), `"kind":"sandbox.stopped"`) || !strings.Contains(sc.Text(), `"count":2`) {
		t.Fatalf("the stream's next line is not the stopped entry: %q", sc.Text())
	}
	if sc.Scan() {
		t.Fatalf("the stream goes on after the stop: %q", sc.Text())
	}
}

// TestRecordCollectedFromSandboxdVerifies: what the operator reads from a real sandboxd, to its
// stopped entry, taken by the Collector into a chain and sealed, verifies intact and sealed,
// with no gap, and keeps every tool call in its order.
func TestRecordCollectedFromSandboxdVerifies(t *testing.T) {
	ts := tokenServer(t)
	ts.stopper.stopAll = func(context.Context) (int, error) { return 0, nil }
	client := &http.Client{Transport: headerTransport{"Authorization": "Bearer tok"}}
	cs := connect(t, &mcp.StreamableClientTransport{Endpoint: ts.url + "/mcp", HTTPClient: client, MaxRetries: -1}, nil)
	for _, f := range []string{"a.txt", "b.txt", "c.txt"} {
		if _, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: toolnames.Write, Arguments: map[string]any{"file_path": f, "content": f}}); err != nil {
			t.Fatal(err)
		}
	}
	if code, _ := postStop(t, ts.url, "tok"); code != http.StatusOK {
		t.Fatalf("POST /stop = %d", code)
	}
	all := collectAndVerify(t, ts.url, "tok")
	var files []string
	for _, e := range all {
		if e.Kind == record.KindRecordGap {
			t.Errorf("a gap: %s", e.Message)
		}
		if e.Kind == record.KindFileWrite {
			files = append(files, e.Path)
		}
	}
	if strings.Join(files, " ") != "a.txt b.txt c.txt" {
		t.Errorf("files %v", files)
	}
}

// TestRecordHoldsABackgroundShellsEnd: a background shell's process is recorded when it ends,
// under the call that started it.
func TestRecordHoldsABackgroundShellsEnd(t *testing.T) {
	ts := tokenServer(t)
	client := &http.Client{Transport: headerTransport{"Authorization": "Bearer tok"}}
	cs := connect(t, &mcp.StreamableClientTransport{Endpoint: ts.url + "/mcp", HTTPClient: client, MaxRetries: -1}, nil)
	if _, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: toolnames.Bash, Arguments: map[string]any{"command": "exit 4", "run_in_background": true}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, ts.url+recordlog.Path+"?follow=1", nil)
	req.Header.Set("Authorization", "Bearer tok")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	var call uint64
	for sc.Scan() { // until the process's entry comes: the stream is bounded by ctx
		var e record.Entry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatal(err)
		}
		switch e.Kind {
		case record.KindToolCall:
			call = e.Call
		case record.KindProcess:
			if strings.Join(e.Argv, " ") != "/bin/bash -c exit 4" || *e.Exit != 4 || e.Call != call || call == 0 {
				t.Fatalf("process %+v (the call's number %d)", e, call)
			}
			return
		}
	}
	t.Fatalf("no process entry before the stream ended: %v", sc.Err())
}

// TestOperatorFollowsTheRecordAcrossAReconnect: the operator's client follows a real sandboxd's
// log into a Collector; its stream is cut (as a leader's failover or a dropped connection cuts
// it) and read again from the collector's cursor; after the stop, Follow returns at the stopped
// entry, and the record has every entry once and no gap. Asking for another boot is refused
// with the current one.
func TestOperatorFollowsTheRecordAcrossAReconnect(t *testing.T) {
	ts := tokenServer(t)
	ts.stopper.stopAll = func(context.Context) (int, error) { return 0, nil }
	client := &http.Client{Transport: headerTransport{"Authorization": "Bearer tok"}}
	cs := connect(t, &mcp.StreamableClientTransport{Endpoint: ts.url + "/mcp", HTTPClient: client, MaxRetries: -1}, nil)
	write := func(f string) {
		t.Helper()
		if _, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: toolnames.Write, Arguments: map[string]any{"file_path": f, "content": f}}); err != nil {
			t.Fatal(err)
		}
	}
	priv, _ := record.SigningKey([]byte(strings.Repeat("k", 32)))
	signer, _ := record.NewSigner(priv)
	chain, _ := record.NewChain("claim-uid", signer)
	col := record.NewCollector(chain, time.Now, "", 0)
	var all []record.Entry
	take := func(line []byte) error {
		got, err := col.Take(line)
		all = append(all, got...)
		return err
	}
	rc := sandboxrecord.NewClient()

	write("a.txt") // boot, the file, the call: 3 entries
	ctx, cut := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		errc <- rc.Follow(ctx, ts.url, "tok", "", 0, func(line []byte) error {
			err := take(line)
			if _, after := col.Cursor(); after == 3 {
				cut() // the connection is lost after the third entry
			}
			return err
		})
	}()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("the cut stream returned %v", err)
	}
	write("b.txt")
	if _, err := postStop(t, ts.url, "tok"); err != (sandboxstop.Response{Stopped: true}) {
		t.Fatalf("POST /stop: %+v", err)
	}
	boot, after := col.Cursor()
	if err := rc.Follow(t.Context(), ts.url, "tok", boot, after, take); err != nil {
		t.Fatalf("following from the cursor: %v", err)
	}
	var kinds []string
	for _, e := range all {
		kinds = append(kinds, e.Kind)
	}
	want := "sandbox.boot file.write tool.call file.write tool.call sandbox.stopped"
	if strings.Join(kinds, " ") != want {
		t.Fatalf("record %q, want %q", strings.Join(kinds, " "), want)
	}
	var bce *sandboxrecord.BootChangedError
	if err := rc.Follow(t.Context(), ts.url, "tok", "0011223344556677", 0, take); !errors.As(err, &bce) || bce.Boot != boot {
		t.Errorf("another boot: %v, want a BootChangedError naming %s", err, boot)
	}
	if err := rc.Follow(t.Context(), ts.url, "nope", "", 0, take); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("a wrong token: %v, want 401", err)
	}
}

// TestWithoutRecordNothingIsRecorded: options.withoutRecord, BenchmarkRecordOverhead's
// record=off, really leaves the record out (no log, GET /record not routed) while the tools
// answer as with it; and the default, record=on, records the same calls. So the benchmark never
// compares two servers that both record.
func TestWithoutRecordNothingIsRecorded(t *testing.T) {
	calls := func(t *testing.T, ts *testServer) {
		t.Helper()
		cs := connectStreamable(t, ts.url, nil)
		for _, c := range recordBenchCalls {
			if _, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: c.tool, Arguments: c.args}); err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
		}
	}
	write := func(t *testing.T, ts *testServer) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(ts.ws, "small.txt"), []byte("small\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	off := defaultOptions()
	off.withoutRecord = true
	ts := startServer(t, Config{}, off)
	write(t, ts)
	calls(t, ts)
	if ts.record != nil {
		t.Errorf("withoutRecord: the server has a log")
	}
	if code, entries := readRecord(t, ts.url, "", ""); code != http.StatusNotFound || len(entries) != 0 {
		t.Errorf("withoutRecord: GET /record = %d with %d entries, want 404", code, len(entries))
	}

	ts = startServer(t, Config{}, defaultOptions())
	write(t, ts)
	calls(t, ts)
	code, entries := readRecord(t, ts.url, "", "")
	var tools []string
	for _, e := range entries {
		if e.Kind == record.KindToolCall {
			tools = append(tools, e.Tool)
		}
	}
	if code != http.StatusOK || strings.Join(tools, " ") != "Read Write" {
		t.Errorf("with the record: GET /record = %d, tool calls %v, want Read Write", code, tools)
	}
}

// TestOnlyTestsLeaveTheRecordOut: no code of the package but its tests sets
// options.withoutRecord (and no other package can: the field is unexported), so the record is
// not something a flag, a Config or a class can turn off.
func TestOnlyTestsLeaveTheRecordOut(t *testing.T) {
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			var set []ast.Expr // what n sets: a composite literal's keys, an assignment's left side
			switch n := n.(type) {
			case *ast.KeyValueExpr:
				set = append(set, n.Key)
			case *ast.AssignStmt:
				for _, lhs := range n.Lhs {
					if sel, ok := lhs.(*ast.SelectorExpr); ok {
						set = append(set, sel.Sel)
					}
				}
			}
			for _, x := range set {
				if id, ok := x.(*ast.Ident); ok && id.Name == "withoutRecord" {
					t.Errorf("%s sets withoutRecord: only the package's tests may", fset.Position(n.Pos()))
				}
			}
			return true
		})
	}
}

// collectAndVerify follows a stopped sandboxd's log (with token) into a Collector's chain, as the
// operator does, seals it, checks that it verifies intact and sealed, and returns the entries
// the chain took (the seal left out).
func collectAndVerify(t *testing.T, url, token string) []record.Entry {
	t.Helper()
	priv, err := record.SigningKey([]byte(strings.Repeat("k", 32)))
	if err != nil {
		t.Fatal(err)
	}
	signer, _ := record.NewSigner(priv)
	chain, _ := record.NewChain("claim-uid", signer)
	col := record.NewCollector(chain, time.Now, "", 0)
	_, entries := readRecord(t, url, token, "follow=1")
	var all []record.Entry
	for _, e := range entries {
		line, _ := json.Marshal(e)
		got, err := col.Take(line)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, got...)
	}
	if more, _ := col.Ended("the pod was deleted"); len(more) != 0 {
		t.Fatalf("the log did not end with its stopped entry: %+v", more)
	}
	seal, anchor, err := chain.Seal(time.Now(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := record.WriteJSONL(&b, append(all, seal), &anchor); err != nil {
		t.Fatal(err)
	}
	rep, err := record.Verify(&b, record.NewKeys(signer.Public()), record.Options{Claim: "claim-uid"})
	if err != nil || !rep.Intact() || !rep.Sealed {
		t.Fatalf("%s: %v %v", rep.Verdict(), rep.Findings, err)
	}
	return all
}
