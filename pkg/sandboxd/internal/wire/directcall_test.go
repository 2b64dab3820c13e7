package wire

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/sandboxdtest"
	"github.com/airlock-dev/airlock/pkg/toolnames"
)

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

// TestDirectPathLeavesTheRestToTheSDK: what the direct path does not take
// is answered by the SDK as before.
func TestDirectPathLeavesTheRestToTheSDK(t *testing.T) {
	ts := startServer(t, testOptions{served: []string{toolnames.Read}})
	s, endpoint := sandboxdtest.RawSession(t, ts.url)
	// Before initialize: the SDK refuses.
	r := sandboxdtest.DecodeReply(t, sandboxdtest.CallRaw(t, s, endpoint, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"Read","arguments":{"file_path":"x"}}}`))
	if r.Error == nil || !strings.Contains(r.Error.Message, "initialization") {
		t.Errorf("a call before initialize = %s %+v, want the SDK's refusal", r.Result, r.Error)
	}
	if code, _ := sandboxdtest.Post(t, endpoint, "application/json", sandboxdtest.InitializeRequest, nil); code != http.StatusAccepted {
		t.Fatal("POST initialize failed")
	}
	s.Next(t)
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
			r := sandboxdtest.DecodeReply(t, sandboxdtest.CallRaw(t, s, endpoint, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":`+params+`}`))
			if r.Error == nil && !strings.Contains(string(r.Result), `"isError":true`) {
				t.Errorf("reply = %s, want an error", r.Result)
			}
		})
	}
	if n := ts.sse.DirectCalls(); n != 0 {
		t.Errorf("direct calls = %d, want 0", n)
	}
}

// TestDirectReadDoesNotWaitAtTheGate: a Read POSTed while a snapshot holds
// the workspace is not run in its POST, which is answered 202 at once; the
// Read is answered once the snapshot lets go.
func TestDirectReadDoesNotWaitAtTheGate(t *testing.T) {
	ts := startServer(t, testOptions{})
	if err := os.WriteFile(filepath.Join(ts.ws, "a.txt"), []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, endpoint := sandboxdtest.InitializedSession(t, ts.url)
	release, err := ts.gate.Enter(t.Context(), true) // as snapshot_restore does
	if err != nil {
		t.Fatal(err)
	}
	// The POST is answered while the gate is held: were the Read run in
	// it, it would wait for release, which comes after.
	answered := make(chan int, 1)
	go func() {
		code, _ := sandboxdtest.Post(t, endpoint, "application/json", `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"Read","arguments":{"file_path":"a.txt"}}}`, nil)
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
	if n := ts.sse.DirectCalls(); n != 1 {
		t.Fatalf("direct calls = %d, want 1", n)
	}
	release()
	r := sandboxdtest.DecodeReply(t, s.Next(t).Data)
	if string(r.ID) != "3" || r.Error != nil || !strings.Contains(string(r.Result), "hello") {
		t.Fatalf("reply = %s %+v", r.Result, r.Error)
	}
}

// TestDirectCallCancelled: notifications/cancelled for a direct call kills
// its processes, and the call is answered, as the SDK answers a cancelled
// call; a cancellation for an id the direct path does not run goes to the
// SDK.
func TestDirectCallCancelled(t *testing.T) {
	ts := startServer(t, testOptions{})
	s, endpoint := sandboxdtest.InitializedSession(t, ts.url)
	for _, id := range []string{`21`, `"c-21"`} {
		dir := fmt.Sprintf("d%d", len(id))
		call := fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":"tools/call","params":{"name":"Bash","arguments":{"command":"mkdir -p %[2]s; echo $$ > %[2]s/leader.pid; sleep 300 & echo $! > %[2]s/bg.pid; wait"}}}`, id, dir)
		if code, _ := sandboxdtest.Post(t, endpoint, "application/json", call, nil); code != http.StatusAccepted {
			t.Fatalf("POST = %d", code)
		}
		pids := []int{sandboxdtest.ReadPID(t, filepath.Join(ts.ws, dir, "leader.pid")), sandboxdtest.ReadPID(t, filepath.Join(ts.ws, dir, "bg.pid"))}
		if code, _ := sandboxdtest.Post(t, endpoint, "application/json", `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":`+id+`,"reason":"test"}}`, nil); code != http.StatusAccepted {
			t.Fatalf("POST cancelled = %d", code)
		}
		sandboxdtest.WaitDead(t, pids...)
		if r := sandboxdtest.DecodeReply(t, s.Next(t).Data); string(r.ID) != id {
			t.Fatalf("reply for %s, want %s", r.ID, id)
		}
	}
	if n := ts.sse.DirectCalls(); n != 2 {
		t.Errorf("direct calls = %d, want 2", n)
	}
	// Not a direct call: the SDK gets it (and knows no such call).
	if code, _ := sandboxdtest.Post(t, endpoint, "application/json", `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":99}}`, nil); code != http.StatusAccepted {
		t.Fatalf("POST cancelled = %d", code)
	}
	if r := sandboxdtest.DecodeReply(t, sandboxdtest.CallRaw(t, s, endpoint, `{"jsonrpc":"2.0","id":"p","method":"ping"}`)); string(r.ID) != `"p"` || r.Error != nil {
		t.Fatalf("ping after a stray cancellation = %+v", r)
	}
}

// TestSessionEndWaitsForDirectCalls: when the client goes, the session's
// direct calls are cancelled and their goroutines gone before the session
// is; a POST that comes after is refused.
func TestSessionEndWaitsForDirectCalls(t *testing.T) {
	ts := startServer(t, testOptions{})
	s, endpoint := sandboxdtest.InitializedSession(t, ts.url)
	call := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"Bash","arguments":{"command":"echo $$ > leader.pid; sleep 300 & wait"}}}`
	if code, _ := sandboxdtest.Post(t, endpoint, "application/json", call, nil); code != http.StatusAccepted {
		t.Fatalf("POST = %d", code)
	}
	pid := sandboxdtest.ReadPID(t, filepath.Join(ts.ws, "leader.pid"))
	sess := ts.sse.Session(strings.TrimPrefix(endpoint, ts.url+"/message?sessionId="))
	if sess == nil {
		t.Fatal("no session")
	}
	s.Close()
	deadline := time.Now().Add(testTimeout)
	for {
		if sess.DirectEnded() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the session's direct calls never ended")
		}
		time.Sleep(10 * time.Millisecond) // the server notices the disconnect asynchronously
	}
	sess.WaitDirect() // the call's goroutine is gone
	sandboxdtest.WaitDead(t, pid)
	if left := sess.DirectInFlight(); left != 0 {
		t.Errorf("%d direct calls registered after the session", left)
	}
	if sess.TakeCall(mustDecode(t, call)) {
		t.Error("a direct call was taken after the session ended")
	}
}

func mustDecode(t *testing.T, msg string) jsonrpc.Message {
	t.Helper()
	m, err := DecodeMessage([]byte(msg))
	if err != nil {
		t.Fatal(err)
	}
	return m
}
