package sandboxd

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/airlock-dev/airlock/pkg/toolnames"
)

// initializedSession opens a raw SSE session and initializes it.
func initializedSession(t *testing.T, ts *testServer) (*sseStream, string) {
	t.Helper()
	s, endpoint := rawSession(t, ts)
	if code, _ := post(t, endpoint, "application/json", initializeRequest, nil); code != http.StatusAccepted {
		t.Fatalf("POST initialize = %d", code)
	}
	if r := decodeReply(t, s.next(t).data); r.Error != nil {
		t.Fatalf("initialize: %+v", r.Error)
	}
	post(t, endpoint, "application/json", `{"jsonrpc":"2.0","method":"notifications/initialized"}`, nil)
	return s, endpoint
}

// callRaw POSTs one message and returns the next event's data.
func callRaw(t *testing.T, s *sseStream, endpoint, msg string) string {
	t.Helper()
	if code, body := post(t, endpoint, "application/json", msg, nil); code != http.StatusAccepted {
		t.Fatalf("POST %s = %d %q", msg, code, body)
	}
	return s.next(t).data
}

// TestDirectCallsAnswerAsTheSDK sends each call twice on one session: as a
// client sends it, which the direct path takes, and with a _meta key of the
// protocol's own (which the SDK ignores here), which sends it to the SDK. The two responses are the same bytes, and the
// direct path took exactly the first of each pair.
func TestDirectCallsAnswerAsTheSDK(t *testing.T) {
	ts := startServer(t, Config{}, options{})
	if err := os.WriteFile(filepath.Join(ts.ws, "a.txt"), []byte("<b>&amp;</b> \u2028 é \"q\" \\ \x01\nline 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, endpoint := initializedSession(t, ts)
	tests := directCallCases
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := ts.sse.directCalls.Load()
			meta := ""
			if tt.meta != "" {
				meta = `"_meta":` + tt.meta + `,`
			}
			direct := callRaw(t, s, endpoint, fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":"tools/call","params":{%s"name":%q,"arguments":%s}}`, tt.id, meta, tt.tool, tt.args))
			if got := ts.sse.directCalls.Load() - before; got != 1 {
				t.Fatalf("direct calls = %d, want 1", got)
			}
			viaSDK := callRaw(t, s, endpoint, fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":"tools/call","params":{"_meta":{"io.modelcontextprotocol/test":true},"name":%q,"arguments":%s}}`, tt.id, tt.tool, tt.args))
			if got := ts.sse.directCalls.Load() - before; got != 1 {
				t.Fatalf("direct calls = %d after the call for the SDK, want 1", got)
			}
			// Bash says how long it ran: the one thing the two may differ in.
			direct, viaSDK = durationMS.ReplaceAllString(direct, `"duration_ms":0`), durationMS.ReplaceAllString(viaSDK, `"duration_ms":0`)
			if direct != viaSDK {
				t.Errorf("direct:  %s\nvia SDK: %s", direct, viaSDK)
			}
		})
	}
}

// directCallCases are the calls that the direct paths' tests send both
// ways, direct and through the SDK.
var directCallCases = []struct {
	name, id, tool, args string
	meta                 string // the direct call's _meta, if any (an object)
}{
	{name: "Read", id: `7`, tool: toolnames.Read, args: `{"file_path":"a.txt"}`},
	{name: "string id with HTML", id: `"r-<&>\u2028"`, tool: toolnames.Read, args: `{"file_path":"a.txt","offset":2}`},
	{name: "tool error", id: `8`, tool: toolnames.Read, args: `{"file_path":"missing.txt"}`},
	{name: "escape refused", id: `9`, tool: toolnames.Read, args: `{"file_path":"../../etc/passwd"}`},
	{name: "invalid arguments", id: `10`, tool: toolnames.Read, args: `{"file_path":5}`},
	{name: "argument in another case", id: `11`, tool: toolnames.Read, args: `{"file_path":"a.txt","FILE_PATH":"b"}`},
	{name: "arguments not an object", id: `12`, tool: toolnames.Read, args: `[1]`},
	{name: "null arguments", id: `13`, tool: toolnames.LS, args: `null`},
	{name: "Glob", id: `14`, tool: toolnames.Glob, args: `{"pattern":"*.txt"}`},
	{name: "Bash", id: `15`, tool: toolnames.Bash, args: `{"command":"printf '<%s>' \"$((6*7))\"; echo oops >&2; exit 3"}`},
	{name: "secret scrubbed", id: `16`, tool: toolnames.Bash, args: `{"command":"echo ghp_0123456789abcdefghijABCDEFGHIJ012345"}`},
	{name: "a client's _meta", id: `17`, tool: toolnames.Read, args: `{"file_path":"a.txt"}`, meta: `{"progressToken":"p-1","claudecode/toolUseId":"toolu_01"}`},
	{name: "an empty _meta", id: `18`, tool: toolnames.Glob, args: `{"pattern":"*"}`, meta: `{}`},
}

var durationMS = regexp.MustCompile(`"duration_ms":[0-9]+`)

// TestDirectPathLeavesTheRestToTheSDK: what the direct path does not take
// is answered by the SDK as before.
func TestDirectPathLeavesTheRestToTheSDK(t *testing.T) {
	ts := startServer(t, Config{AllowedTools: []string{toolnames.Read}}, options{})
	s, endpoint := rawSession(t, ts)
	// Before initialize: the SDK refuses.
	r := decodeReply(t, callRaw(t, s, endpoint, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"Read","arguments":{"file_path":"x"}}}`))
	if r.Error == nil || !strings.Contains(r.Error.Message, "initialization") {
		t.Errorf("a call before initialize = %s %+v, want the SDK's refusal", r.Result, r.Error)
	}
	if code, _ := post(t, endpoint, "application/json", initializeRequest, nil); code != http.StatusAccepted {
		t.Fatal("POST initialize failed")
	}
	s.next(t)
	for name, params := range map[string]string{
		"a tool not served":         `{"name":"Bash","arguments":{"command":"true"}}`,
		"an unknown tool":           `{"name":"Nope"}`,
		"a name in another case":    `{"Name":"Read","arguments":{"file_path":"x"}}`,
		"a name that is no string":  `{"name":7}`,
		"input responses":           `{"name":"Read","arguments":{"file_path":"x"},"inputResponses":{}}`,
		"a per-request protocol":    `{"name":"Read","arguments":{"file_path":"x"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}`,
		"a _meta that is no object": `{"name":"Read","arguments":{"file_path":"x"},"_meta":5}`,
	} {
		t.Run(name, func(t *testing.T) {
			r := decodeReply(t, callRaw(t, s, endpoint, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":`+params+`}`))
			if r.Error == nil && !strings.Contains(string(r.Result), `"isError":true`) {
				t.Errorf("reply = %s, want an error", r.Result)
			}
		})
	}
	if n := ts.sse.directCalls.Load(); n != 0 {
		t.Errorf("direct calls = %d, want 0", n)
	}
}

// TestDirectReadDoesNotWaitAtTheGate: a Read POSTed while a snapshot holds
// the workspace is not run in its POST, which is answered 202 at once; the
// Read is answered once the snapshot lets go.
func TestDirectReadDoesNotWaitAtTheGate(t *testing.T) {
	ts := startServer(t, Config{}, options{})
	if err := os.WriteFile(filepath.Join(ts.ws, "a.txt"), []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, endpoint := initializedSession(t, ts)
	release, err := ts.tb.gate.enter(t.Context(), true) // as snapshot_restore does
	if err != nil {
		t.Fatal(err)
	}
	// The POST is answered while the gate is held: were the Read run in
	// it, it would wait for release, which comes after.
	answered := make(chan int, 1)
	go func() {
		code, _ := post(t, endpoint, "application/json", `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"Read","arguments":{"file_path":"a.txt"}}}`, nil)
		answered <- code
	}()
	select {
	case code := <-answered:
		if code != http.StatusAccepted {
			t.Fatalf("POST = %d", code)
		}
	case <-time.After(testTimeout):
		release()
		t.Fatal("the POST waited for the gate")
	}
	if n := ts.sse.directCalls.Load(); n != 1 {
		t.Fatalf("direct calls = %d, want 1", n)
	}
	release()
	r := decodeReply(t, s.next(t).data)
	if string(r.ID) != "3" || r.Error != nil || !strings.Contains(string(r.Result), "hello") {
		t.Fatalf("reply = %s %+v", r.Result, r.Error)
	}
}

// TestDirectCallCancelled: notifications/cancelled for a direct call kills
// its processes, and the call is answered, as the SDK answers a cancelled
// call; a cancellation for an id the direct path does not run goes to the
// SDK.
func TestDirectCallCancelled(t *testing.T) {
	ts := startServer(t, Config{}, options{})
	s, endpoint := initializedSession(t, ts)
	for _, id := range []string{`21`, `"c-21"`} {
		dir := fmt.Sprintf("d%d", len(id))
		call := fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":"tools/call","params":{"name":"Bash","arguments":{"command":"mkdir -p %[2]s; echo $$ > %[2]s/leader.pid; sleep 300 & echo $! > %[2]s/bg.pid; wait"}}}`, id, dir)
		if code, _ := post(t, endpoint, "application/json", call, nil); code != http.StatusAccepted {
			t.Fatalf("POST = %d", code)
		}
		pids := []int{readPID(t, filepath.Join(ts.ws, dir, "leader.pid")), readPID(t, filepath.Join(ts.ws, dir, "bg.pid"))}
		if code, _ := post(t, endpoint, "application/json", `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":`+id+`,"reason":"test"}}`, nil); code != http.StatusAccepted {
			t.Fatalf("POST cancelled = %d", code)
		}
		waitDead(t, pids...)
		if r := decodeReply(t, s.next(t).data); string(r.ID) != id {
			t.Fatalf("reply for %s, want %s", r.ID, id)
		}
	}
	if n := ts.sse.directCalls.Load(); n != 2 {
		t.Errorf("direct calls = %d, want 2", n)
	}
	// Not a direct call: the SDK gets it (and knows no such call).
	if code, _ := post(t, endpoint, "application/json", `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":99}}`, nil); code != http.StatusAccepted {
		t.Fatalf("POST cancelled = %d", code)
	}
	if r := decodeReply(t, callRaw(t, s, endpoint, `{"jsonrpc":"2.0","id":"p","method":"ping"}`)); string(r.ID) != `"p"` || r.Error != nil {
		t.Fatalf("ping after a stray cancellation = %+v", r)
	}
}

// TestSessionEndWaitsForDirectCalls: when the client goes, the session's
// direct calls are cancelled and their goroutines gone before the session
// is; a POST that comes after is refused.
func TestSessionEndWaitsForDirectCalls(t *testing.T) {
	ts := startServer(t, Config{}, options{})
	s, endpoint := initializedSession(t, ts)
	call := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"Bash","arguments":{"command":"echo $$ > leader.pid; sleep 300 & wait"}}}`
	if code, _ := post(t, endpoint, "application/json", call, nil); code != http.StatusAccepted {
		t.Fatalf("POST = %d", code)
	}
	pid := readPID(t, filepath.Join(ts.ws, "leader.pid"))
	sess := ts.sse.lookup(strings.TrimPrefix(endpoint, ts.url+"/message?sessionId="))
	if sess == nil {
		t.Fatal("no session")
	}
	s.close()
	deadline := time.Now().Add(testTimeout)
	for {
		sess.direct.mu.Lock()
		ended := sess.direct.ended
		sess.direct.mu.Unlock()
		if ended {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the session's direct calls never ended")
		}
		time.Sleep(10 * time.Millisecond) // the server notices the disconnect asynchronously
	}
	sess.direct.running.Wait() // the call's goroutine is gone
	waitDead(t, pid)
	sess.direct.mu.Lock()
	left := len(sess.direct.cancels)
	sess.direct.mu.Unlock()
	if left != 0 {
		t.Errorf("%d direct calls registered after the session", left)
	}
	if sess.takeCall(mustDecode(t, call)) {
		t.Error("a direct call was taken after the session ended")
	}
}

func mustDecode(t *testing.T, msg string) jsonrpc.Message {
	t.Helper()
	m, err := decodeMessage([]byte(msg))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestDecodeID: an id decodes as the SDK's jsonrpc.MakeID gives it, for a
// call and for the requestId of a cancellation alike, so that a
// cancellation finds its direct call by id.Raw.
func TestDecodeID(t *testing.T) {
	for raw, want := range map[string]any{`7`: int64(7), ` "x" `: "x", `"\u0041"`: "A", `-3`: int64(-3), `1.5`: int64(1)} {
		if id, err := decodeID([]byte(raw)); err != nil || !id.IsValid() || id.Raw() != want {
			t.Errorf("decodeID(%s) = %v, %v; want %v", raw, id.Raw(), err, want)
		}
	}
	for _, raw := range []string{``, `null`, `{}`, `"unterminated`} {
		if id, err := decodeID([]byte(raw)); err == nil && id.IsValid() {
			t.Errorf("decodeID(%s) = %v, want no id", raw, id.Raw())
		}
	}
}
