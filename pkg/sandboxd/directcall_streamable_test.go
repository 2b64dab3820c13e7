package sandboxd

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"k8s.io/klog/v2"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/airlock-dev/airlock/pkg/toolnames"
)

// mcpReply is one answer of /mcp as the raw tests read it.
type mcpReply struct {
	status      int
	contentType string
	msg         map[string]any // the JSON-RPC message: the body, or its one event's data
}

// postMCP POSTs body to /mcp with the headers of a Streamable HTTP client
// (Content-Type, Accept) and header, which may unset them ("" values).
func postMCP(ctx context.Context, t *testing.T, url string, header map[string]string, body string) mcpReply {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/mcp", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range header {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	r := mcpReply{status: resp.StatusCode, contentType: resp.Header.Get("Content-Type")}
	if strings.HasPrefix(r.contentType, "text/event-stream") {
		for _, line := range strings.Split(string(data), "\n") {
			if d, ok := strings.CutPrefix(line, "data: "); ok {
				data = []byte(d)
			}
		}
	}
	if json.Unmarshal(data, &r.msg) != nil {
		r.msg = map[string]any{"body": string(data)} // an HTTP error's text
	}
	return r
}

// statelessHeaders are the headers of a 2026-07-28 tools/call of tool.
func statelessHeaders(tool string) map[string]string {
	return map[string]string{"Mcp-Protocol-Version": protocolStateless, "Mcp-Method": "tools/call", "Mcp-Name": tool}
}

// statelessCallMeta is a 2026-07-28 call's _meta as the Go SDK's client
// sends it.
const statelessCallMeta = `{"io.modelcontextprotocol/clientCapabilities":{"roots":{"listChanged":true}},"io.modelcontextprotocol/clientInfo":{"name":"raw","version":"v0"},"io.modelcontextprotocol/protocolVersion":"2026-07-28"}`

// openStatefulSession initializes a raw 2025-11-25 session on /mcp and
// returns its id, once the transport tracks it.
func openStatefulSession(t *testing.T, ts *testServer) string {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, ts.url+"/mcp", strings.NewReader(
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	id := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != http.StatusOK || id == "" {
		t.Fatalf("initialize = %d, session %q", resp.StatusCode, id)
	}
	if r := postMCP(t.Context(), t, ts.url, sessionHeaders(id), `{"jsonrpc":"2.0","method":"notifications/initialized"}`); r.status != http.StatusAccepted {
		t.Fatalf("notifications/initialized = %d %v", r.status, r.msg)
	}
	return id
}

// sessionHeaders are the headers of a POST of the 2025-11-25 session id.
func sessionHeaders(id string) map[string]string {
	return map[string]string{"Mcp-Session-Id": id, "Mcp-Protocol-Version": "2025-11-25"}
}

// normalReply is a reply's message with what may differ between two runs of
// the same call (how long Bash ran) set to zero.
func normalReply(t *testing.T, r mcpReply) any {
	t.Helper()
	data, err := json.Marshal(r.msg)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(durationMS.ReplaceAll(data, []byte(`"duration_ms":0`)), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestStreamableDirectCallsAnswerAsTheSDK sends each call twice, on each
// revision of /mcp: as a client sends it, which the direct path takes, and
// with a _meta key of the protocol's own that the SDK ignores, which sends
// it to the SDK. The two answers are the same JSON-RPC message, and the
// direct path took exactly the first of each pair.
func TestStreamableDirectCallsAnswerAsTheSDK(t *testing.T) {
	ts := startServer(t, Config{}, options{})
	if err := os.WriteFile(filepath.Join(ts.ws, "a.txt"), []byte("<b>&amp;</b> \u2028 é \"q\" \\ \x01\nline 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	session := openStatefulSession(t, ts)
	for _, revision := range []string{protocolStateless, "2025-11-25"} {
		for _, tc := range directCallCases {
			t.Run(revision+"/"+tc.name, func(t *testing.T) {
				header, meta := sessionHeaders(session), cmp.Or(tc.meta, "{}")
				if revision == protocolStateless {
					header, meta = statelessHeaders(tc.tool), joinObjects(statelessCallMeta, meta)
				}
				body := func(meta string) string {
					return fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":"tools/call","params":{"_meta":%s,"name":%q,"arguments":%s}}`, tc.id, meta, tc.tool, tc.args)
				}
				before := ts.streamable.direct.taken.Load()
				direct := postMCP(t.Context(), t, ts.url, header, body(meta))
				if got := ts.streamable.direct.taken.Load() - before; got != 1 {
					t.Fatalf("direct calls = %d, want 1 (reply %d %v)", got, direct.status, direct.msg)
				}
				viaSDK := postMCP(t.Context(), t, ts.url, header, body(joinObjects(meta, `{"io.modelcontextprotocol/test":true}`)))
				if got := ts.streamable.direct.taken.Load() - before; got != 1 {
					t.Fatalf("direct calls = %d after the call for the SDK, want 1", got)
				}
				if direct.status != viaSDK.status || direct.status != http.StatusOK {
					t.Errorf("HTTP %d direct, %d via the SDK", direct.status, viaSDK.status)
				}
				if d, s := normalReply(t, direct), normalReply(t, viaSDK); !reflect.DeepEqual(d, s) {
					t.Errorf("direct:  %v\nvia SDK: %v", d, s)
				}
				if direct.contentType != "application/json" {
					t.Errorf("direct answer's Content-Type = %q", direct.contentType)
				}
			})
		}
	}
}

// joinObjects joins the members of two JSON objects, written out.
func joinObjects(a, b string) string {
	a, b = strings.TrimSpace(a), strings.TrimSpace(b)
	switch {
	case a == "{}":
		return b
	case b == "{}":
		return a
	}
	return strings.TrimSuffix(a, "}") + "," + strings.TrimPrefix(b, "{")
}

// TestStreamableDirectPathLeavesTheRestToTheSDK: what the direct path does
// not take is answered by the SDK as before (a refusal, for most), and
// nothing refused runs.
func TestStreamableDirectPathLeavesTheRestToTheSDK(t *testing.T) {
	ts := startServer(t, Config{AllowedTools: []string{toolnames.Read, toolnames.Write}}, options{})
	session := openStatefulSession(t, ts)
	write := func(meta, file string) string {
		return `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"_meta":` + meta + `,"name":"Write","arguments":{"file_path":"` + file + `","content":"x"}}}`
	}
	with := func(h map[string]string, k, v string) map[string]string {
		out := map[string]string{}
		for hk, hv := range h {
			out[hk] = hv
		}
		out[k] = v
		return out
	}
	stateless := statelessHeaders(toolnames.Write)
	cases := map[string]struct {
		header map[string]string
		body   string
		runs   bool // the SDK runs it (the direct path only leaves it)
	}{ // each call writes (or touches) the file named in its body: f1, f2, ...
		"stateless: no Mcp-Name":           {header: with(stateless, "Mcp-Name", ""), body: write(statelessCallMeta, "f1")},
		"stateless: Mcp-Name another tool": {header: with(stateless, "Mcp-Name", "Read"), body: write(statelessCallMeta, "f2")},
		"stateless: no Mcp-Method":         {header: with(stateless, "Mcp-Method", ""), body: write(statelessCallMeta, "f3")},
		"stateless: Accept without event streams": {header: with(stateless, "Accept", "application/json"),
			body: write(statelessCallMeta, "f4")},
		"stateless: no Content-Type": {header: with(stateless, "Content-Type", ""), body: write(statelessCallMeta, "f5")},
		"stateless: no client capabilities": {header: stateless,
			body: write(`{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}`, "f6")},
		"stateless: capabilities that do not decode": {header: stateless,
			body: write(`{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"roots":5}}`, "f7")},
		"stateless: client info that does not decode": {header: stateless,
			body: write(`{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":5}`, "f8")},
		"stateless: _meta version not the header's": {header: stateless,
			body: write(`{"io.modelcontextprotocol/protocolVersion":"2025-11-25","io.modelcontextprotocol/clientCapabilities":{}}`, "f9")},
		"stateless: a log level": {header: stateless, runs: true,
			body: write(`{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/logLevel":"debug"}`, "f10")},
		"stateless: a param header": {header: with(stateless, "Mcp-Param-Mode", "x"), body: write(statelessCallMeta, "f11"), runs: true},
		"stateless: Last-Event-ID":  {header: with(stateless, "Last-Event-ID", "1"), body: write(statelessCallMeta, "f12")},
		"stateless: a tool not served": {header: with(stateless, "Mcp-Name", "Bash"),
			body: `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"_meta":` + statelessCallMeta + `,"name":"Bash","arguments":{"command":"touch f13"}}}`},
		"session: unknown session":     {header: sessionHeaders("nope"), body: write(`{}`, "f14")},
		"session: Accept without JSON": {header: with(sessionHeaders(session), "Accept", "text/event-stream"), body: write(`{}`, "f15")},
		"session: a revision not served": {header: with(sessionHeaders(session), "Mcp-Protocol-Version", "1999-01-01"),
			body: write(`{}`, "f16")},
		"session: a name in another case": {header: sessionHeaders(session),
			body: `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"Name":"Write","arguments":{"file_path":"f17","content":"x"}}}`},
		"session: input responses": {header: sessionHeaders(session),
			body: `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"Write","arguments":{"file_path":"f18","content":"x"},"inputResponses":{}}}`, runs: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			before := ts.streamable.direct.taken.Load()
			r := postMCP(t.Context(), t, ts.url, tc.header, tc.body)
			if got := ts.streamable.direct.taken.Load() - before; got != 0 {
				t.Fatalf("the direct path took it (reply %d %v)", r.status, r.msg)
			}
			file := fileOf.FindString(tc.body)
			_, err := os.Stat(filepath.Join(ts.ws, file))
			switch {
			case tc.runs && err != nil:
				t.Errorf("the SDK did not run it: %d %v (%v)", r.status, r.msg, err)
			case !tc.runs && err == nil:
				t.Errorf("it ran: %d %v", r.status, r.msg)
			case !tc.runs && r.status == http.StatusOK && r.msg["error"] == nil && !strings.Contains(fmt.Sprint(r.msg["result"]), "isError:true"):
				t.Errorf("answer %d %v, want a refusal", r.status, r.msg)
			}
		})
	}
}

// fileOf finds the file a call of TestStreamableDirectPathLeavesTheRestToTheSDK writes.
var fileOf = regexp.MustCompile(`\bf[0-9]+\b`)

// TestStreamableDirectCallCancelled: a stateful session's direct call is
// cancelled by a notifications/cancelled that names it, and by the
// session's end (DELETE); either way its process group dies and its POST
// is answered. A second call with the id of one in flight is refused.
func TestStreamableDirectCallCancelled(t *testing.T) {
	ts := startServer(t, Config{}, options{})
	session := openStatefulSession(t, ts)
	start := func(id, dir string) (chan mcpReply, []int) {
		call := fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":"tools/call","params":{"name":"Bash","arguments":{"command":"mkdir -p %[2]s; echo $$ > %[2]s/leader.pid; sleep 300 & echo $! > %[2]s/bg.pid; wait"}}}`, id, dir)
		replied := make(chan mcpReply, 1)
		go func() { replied <- postMCP(context.Background(), t, ts.url, sessionHeaders(session), call) }()
		return replied, []int{readPID(t, filepath.Join(ts.ws, dir, "leader.pid")), readPID(t, filepath.Join(ts.ws, dir, "bg.pid"))}
	}
	awaitReply := func(replied chan mcpReply, id string) {
		t.Helper()
		select {
		case r := <-replied:
			if got, _ := json.Marshal(r.msg["id"]); string(got) != id {
				t.Errorf("reply %d %v, want one for id %s", r.status, r.msg, id)
			}
		case <-time.After(testTimeout):
			t.Fatal("the cancelled call was not answered")
		}
	}
	for _, id := range []string{`21`, `"c-21"`} {
		dir := fmt.Sprintf("d%d", len(id))
		replied, pids := start(id, dir)
		dup := postMCP(t.Context(), t, ts.url, sessionHeaders(session), `{"jsonrpc":"2.0","id":`+id+`,"method":"tools/call","params":{"name":"LS","arguments":{}}}`)
		if dup.status != http.StatusBadRequest || errorCode(dup.msg) != -32600 {
			t.Errorf("a second call with id %s in flight = %d %v, want 400 and -32600", id, dup.status, dup.msg)
		}
		if r := postMCP(t.Context(), t, ts.url, sessionHeaders(session), `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":`+id+`,"reason":"test"}}`); r.status != http.StatusAccepted {
			t.Fatalf("notifications/cancelled = %d %v", r.status, r.msg)
		}
		waitDead(t, pids...)
		awaitReply(replied, id)
	}
	if n := ts.streamable.direct.taken.Load(); n != 2 {
		t.Errorf("direct calls = %d, want 2", n)
	}

	// The session's end cancels its calls.
	replied, pids := start(`31`, "del")
	req, err := http.NewRequestWithContext(t.Context(), http.MethodDelete, ts.url+"/mcp", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Mcp-Session-Id", session)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE = %d", resp.StatusCode)
	}
	waitDead(t, pids...)
	awaitReply(replied, `31`)
	if r := postMCP(t.Context(), t, ts.url, sessionHeaders(session), `{"jsonrpc":"2.0","id":40,"method":"tools/call","params":{"name":"LS","arguments":{}}}`); r.status != http.StatusNotFound {
		t.Errorf("a call of the deleted session = %d %v, want 404", r.status, r.msg)
	}
}

// TestStatelessDirectCallEndsWithItsPOST: a stateless direct call runs as
// long as its POST: the client going away kills its process group; so does
// shutdown, which waits for it.
func TestStatelessDirectCallEndsWithItsPOST(t *testing.T) {
	ts := startServer(t, Config{}, options{})
	call := func(dir string) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":%s,"name":"Bash","arguments":{"command":"mkdir -p %[2]s; echo $$ > %[2]s/leader.pid; sleep 300 & echo $! > %[2]s/bg.pid; wait"}}}`, statelessCallMeta, dir)
	}
	ctx, cancel := context.WithCancel(t.Context())
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, ts.url+"/mcp", strings.NewReader(call("a")))
		if err != nil {
			return
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		for k, v := range statelessHeaders(toolnames.Bash) {
			req.Header.Set(k, v)
		}
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	pids := []int{readPID(t, filepath.Join(ts.ws, "a", "leader.pid")), readPID(t, filepath.Join(ts.ws, "a", "bg.pid"))}
	cancel()
	<-gone
	waitDead(t, pids...)
	if n := ts.streamable.direct.taken.Load(); n != 1 {
		t.Errorf("direct calls = %d, want 1", n)
	}

	replied := make(chan mcpReply, 1)
	go func() {
		replied <- postMCP(context.Background(), t, ts.url, statelessHeaders(toolnames.Bash), call("b"))
	}()
	pids = []int{readPID(t, filepath.Join(ts.ws, "b", "leader.pid")), readPID(t, filepath.Join(ts.ws, "b", "bg.pid"))}
	sctx, scancel := context.WithTimeout(t.Context(), testTimeout)
	defer scancel()
	if err := ts.streamable.direct.close(sctx); err != nil {
		t.Fatal(err)
	}
	if alive(pids[0]) {
		t.Errorf("the call's shell %d is alive after the direct path closed", pids[0])
	}
	waitDead(t, pids[1])
	<-replied
	// Closed: a new call goes to the SDK.
	before := ts.streamable.direct.taken.Load()
	postMCP(t.Context(), t, ts.url, statelessHeaders(toolnames.LS), `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"_meta":`+statelessCallMeta+`,"name":"LS","arguments":{}}}`)
	if n := ts.streamable.direct.taken.Load(); n != before {
		t.Errorf("a call after close took the direct path")
	}
}

// TestStreamableSessionIdleTimeout: a stateful session is closed once no
// POST of it has been in flight for the idle timeout, whichever path
// served its POSTs (the direct path's do not pass through the SDK, whose
// own timer is off), and never while one is in flight.
func TestStreamableSessionIdleTimeout(t *testing.T) {
	fc := clocktesting.NewFakeClock(time.Date(2026, 7, 28, 12, 0, 0, 0, time.UTC))
	opts := defaultOptions()
	opts.sessionTimeout = time.Minute
	opts.clock = fc
	ts := startServer(t, Config{}, opts)
	session := openStatefulSession(t, ts)
	waitFor(t, "the session's idle timer", fc.HasWaiters)
	fifo := mkfifo(t, ts, "gate")

	// A direct call in flight: the timer stops, and a step past the
	// timeout closes nothing.
	replied := make(chan mcpReply, 1)
	go func() {
		replied <- postMCP(context.Background(), t, ts.url, sessionHeaders(session),
			`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"Bash","arguments":{"command":"read line < gate; echo $line"}}}`)
	}()
	waitFor(t, "the timer stopped for the POST in flight", func() bool { return !fc.HasWaiters() })
	fc.Step(2 * time.Minute)
	if n := countSessions(ts.mcp); n != 1 {
		t.Fatalf("%d sessions while a call was in flight, want 1", n)
	}
	w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(w, "done")
	w.Close()
	if r := <-replied; !strings.Contains(fmt.Sprint(r.msg), "done") {
		t.Fatalf("reply %d %v", r.status, r.msg)
	}
	if n := ts.streamable.direct.taken.Load(); n != 1 {
		t.Fatalf("direct calls = %d, want 1", n)
	}

	// Idle again: just short of the timeout it stays, at it it is closed.
	waitFor(t, "the idle timer restarted", fc.HasWaiters)
	fc.Step(time.Minute - time.Second)
	if n := countSessions(ts.mcp); n != 1 {
		t.Fatalf("%d sessions before the timeout, want 1", n)
	}
	fc.Step(time.Second)
	waitFor(t, "the idle session closed", func() bool { return countSessions(ts.mcp) == 0 && ts.streamable.sessions.tracked() == 0 })
	if r := postMCP(t.Context(), t, ts.url, sessionHeaders(session), `{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"LS","arguments":{}}}`); r.status != http.StatusNotFound {
		t.Errorf("a call of the closed session = %d %v, want 404", r.status, r.msg)
	}
}

// waitFor waits, bounded, until cond holds; what names it.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond) // the condition is another goroutine's
	}
}

// TestStatelessCancelNoticeIsIgnored: at 2026-07-28 a client cancels a
// call by closing its POST (TestStatelessDirectCallEndsWithItsPOST); a
// notifications/cancelled in a POST of its own names a request id that,
// with no session, could be any client's, and is ignored, as the SDK
// ignores it: the call it names runs to its end.
func TestStatelessCancelNoticeIsIgnored(t *testing.T) {
	ts := startServer(t, Config{}, options{})
	fifo := mkfifo(t, ts, "gate")
	replied := make(chan mcpReply, 1)
	go func() {
		replied <- postMCP(context.Background(), t, ts.url, statelessHeaders(toolnames.Bash),
			`{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"_meta":`+statelessCallMeta+`,"name":"Bash","arguments":{"command":"echo $$ > leader.pid; read line < gate; echo \"got $line\""}}}`)
	}()
	readPID(t, filepath.Join(ts.ws, "leader.pid")) // the call runs
	notice := postMCP(t.Context(), t, ts.url, map[string]string{"Mcp-Protocol-Version": protocolStateless, "Mcp-Method": "notifications/cancelled"},
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"_meta":`+statelessCallMeta+`,"requestId":9,"reason":"test"}}`)
	if notice.status != http.StatusAccepted {
		t.Errorf("the notice = %d %v, want 202", notice.status, notice.msg)
	}
	w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(w, "through")
	w.Close()
	r := <-replied
	if !strings.Contains(fmt.Sprint(r.msg), "got through") {
		t.Errorf("the call named by the notice = %d %v, want its own end", r.status, r.msg)
	}
}

// TestStatelessIgnoresASessionID: a stray Mcp-Session-Id on a 2026-07-28
// request (unknown, or a live session's) is ignored: the call is answered
// as without it, on the direct path, and the session is left as it was.
func TestStatelessIgnoresASessionID(t *testing.T) {
	ts := startServer(t, Config{}, options{})
	session := openStatefulSession(t, ts)
	body := `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"_meta":` + statelessCallMeta + `,"name":"LS","arguments":{}}}`
	want := postMCP(t.Context(), t, ts.url, statelessHeaders(toolnames.LS), body)
	for _, id := range []string{"nope", session} {
		header := statelessHeaders(toolnames.LS)
		header["Mcp-Session-Id"] = id
		before := ts.streamable.direct.taken.Load()
		got := postMCP(t.Context(), t, ts.url, header, body)
		if n := ts.streamable.direct.taken.Load() - before; n != 1 || !reflect.DeepEqual(normalReply(t, got), normalReply(t, want)) {
			t.Errorf("with session id %q: %d direct, answer %v, want %v", id, n, got.msg, want.msg)
		}
	}
	if n := countSessions(ts.mcp); n != 1 {
		t.Errorf("%d sessions, want the one opened", n)
	}
}

// TestStatelessMetaKept: checkStatelessMeta keeps the last _meta of the
// protocol's keys only and answers the same bytes with a copy of it (a
// change to one call's _meta is not the next call's), never for another
// version; a _meta with keys of the client's own is decoded every time; a
// refused one stays refused.
func TestStatelessMetaKept(t *testing.T) {
	d := newStreamableDirect(func() *callTable { return nil }, klog.Background())
	const triple = `{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"c","version":"1"}}`
	first, ok := d.checkStatelessMeta(json.RawMessage(triple), protocolStateless)
	if !ok || first[mcp.MetaKeyProtocolVersion] != protocolStateless || len(first) != 3 {
		t.Fatalf("first _meta = %v, %v", first, ok)
	}
	if d.lastMeta.Load() == nil {
		t.Fatal("the protocol's _meta was not kept")
	}
	first["changed"] = true
	second, ok := d.checkStatelessMeta(json.RawMessage(triple), protocolStateless)
	if !ok || len(second) != 3 || second["changed"] != nil {
		t.Errorf("second _meta = %v, %v; want the first as it was decoded", second, ok)
	}
	if want := (mcp.Meta{
		mcp.MetaKeyProtocolVersion:    protocolStateless,
		mcp.MetaKeyClientCapabilities: json.RawMessage(`{}`),
		mcp.MetaKeyClientInfo:         json.RawMessage(`{"name":"c","version":"1"}`),
	}); !reflect.DeepEqual(want, second) {
		t.Errorf("kept _meta = %v, want %v", second, want)
	}
	second["changed"] = true // a copy of the kept one: the next call's is as decoded
	if third, _ := d.checkStatelessMeta(json.RawMessage(triple), protocolStateless); len(third) != 3 || third["changed"] != nil {
		t.Errorf("third _meta = %v; want the first as it was decoded", third)
	}
	if m, ok := d.checkStatelessMeta(json.RawMessage(triple), "2026-08-01"); ok {
		t.Errorf("the kept _meta answered another version: %v", m)
	}
	withOwn := `{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"agent/tool-use-id":{"n":1}}`
	kept := d.lastMeta.Load()
	own, ok := d.checkStatelessMeta(json.RawMessage(withOwn), protocolStateless)
	if !ok || own["agent/tool-use-id"] == nil {
		t.Fatalf("_meta with a key of the client's = %v, %v", own, ok)
	}
	if d.lastMeta.Load() != kept {
		t.Error("a _meta with a key of the client's own was kept")
	}
	own["agent/tool-use-id"].(map[string]any)["n"] = 2
	again, _ := d.checkStatelessMeta(json.RawMessage(withOwn), protocolStateless)
	if fmt.Sprint(again["agent/tool-use-id"]) != "map[n:1]" {
		t.Errorf("the client's key decoded again = %v, want it as sent", again["agent/tool-use-id"])
	}
	for name, bad := range map[string]string{
		"version differs": `{"io.modelcontextprotocol/protocolVersion":"2025-11-25","io.modelcontextprotocol/clientCapabilities":{}}`,
		"no capabilities": `{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}`,
		"log level":       `{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/logLevel":"debug"}`,
	} {
		for range 2 {
			if m, ok := d.checkStatelessMeta(json.RawMessage(bad), protocolStateless); ok {
				t.Errorf("%s: accepted %v", name, m)
			}
		}
	}
}

// TestStreamableDirectAnswerHasItsLength: a direct call's answer, on both
// revisions, says its length and is not chunked, also when it is longer
// than net/http's buffer (a Read of a 20 KiB file), and the body is that
// long.
func TestStreamableDirectAnswerHasItsLength(t *testing.T) {
	ts := startServer(t, Config{}, options{})
	if err := os.WriteFile(filepath.Join(ts.ws, "big.txt"), []byte(strings.Repeat("a line of the file\n", 1100)), 0o644); err != nil {
		t.Fatal(err)
	}
	session := openStatefulSession(t, ts)
	for _, c := range []struct {
		name   string
		header map[string]string
		meta   string
	}{
		{"2026-07-28", statelessHeaders(toolnames.Read), `,"_meta":` + statelessCallMeta},
		{"2025-11-25", sessionHeaders(session), ""},
	} {
		for _, file := range []string{"big.txt", "missing.txt"} {
			before := ts.streamable.direct.taken.Load()
			req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, ts.url+"/mcp", strings.NewReader(
				`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"Read","arguments":{"file_path":"`+file+`"}`+c.meta+`}}`))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			for k, v := range c.header {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			data, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			if ts.streamable.direct.taken.Load() != before+1 {
				t.Fatalf("%s %s: the direct path did not take the call", c.name, file)
			}
			if resp.StatusCode != http.StatusOK || resp.ContentLength != int64(len(data)) || len(resp.TransferEncoding) != 0 {
				t.Errorf("%s %s: status %d, Content-Length %d, Transfer-Encoding %v, body of %d bytes; want 200, the body's length, not chunked",
					c.name, file, resp.StatusCode, resp.ContentLength, resp.TransferEncoding, len(data))
			}
			if file == "big.txt" && len(data) < 20000 {
				t.Errorf("%s: the answer to a Read of big.txt is %d bytes, want the whole file", c.name, len(data))
			}
		}
	}
}
