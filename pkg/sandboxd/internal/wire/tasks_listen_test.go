package wire

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/sandboxdtest"
)

// listenStream is a subscriptions/listen answer read event by event.
type listenStream struct {
	resp *http.Response
	sc   *bufio.Scanner
}

// openListen POSTs a subscriptions/listen asking for taskIds.
func openListen(t *testing.T, url string, taskIDs []string, declare bool) *listenStream {
	t.Helper()
	// Bounded: a notification that never comes fails the test, not hangs it.
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	t.Cleanup(cancel)
	req := sandboxdtest.RPC{Method: "subscriptions/listen", Tasks: declare, Params: map[string]any{
		"notifications": map[string]any{"taskIds": taskIDs},
	}}.Build(ctx, t, url)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return &listenStream{resp: resp, sc: bufio.NewScanner(resp.Body)}
}

// next returns the next message of the stream; nil once it has ended.
func (l *listenStream) next(t *testing.T) map[string]any {
	t.Helper()
	for l.sc.Scan() {
		data, ok := strings.CutPrefix(l.sc.Text(), "data: ")
		if !ok {
			continue
		}
		var msg map[string]any
		if err := json.Unmarshal([]byte(data), &msg); err != nil {
			t.Fatalf("event data %q: %v", data, err)
		}
		return msg
	}
	return nil
}

// TestTaskStatusNotifications: a subscriptions/listen that asks for tasks
// gets the acknowledgement with the ids sandboxd holds (not an unknown
// one), each task's state at once, a notification at each change (the
// cancellation asked for, the end) identical to what tasks/get answers,
// and, once all have ended, the listen's result, which ends the stream.
func TestTaskStatusNotifications(t *testing.T) {
	ts, _ := taskServer(t)
	sandboxdtest.Mkfifo(t, ts.ws, "gate")
	done, _ := sandboxdtest.Result(t, sandboxdtest.BashTask("read line < gate; echo \"got $line\"").Call(t, ts.url))["taskId"].(string)
	killed, _ := sandboxdtest.Result(t, sandboxdtest.BashTask("sleep 300").Call(t, ts.url))["taskId"].(string)
	if done == "" || killed == "" {
		t.Fatal("no tasks created")
	}
	l := openListen(t, ts.url, []string{done, "no-such-task", killed, done}, true)
	if ct := l.resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type = %q", ct)
	}
	ack := l.next(t)
	params, _ := ack["params"].(map[string]any)
	notifications, _ := params["notifications"].(map[string]any)
	if ack["method"] != "notifications/subscriptions/acknowledged" || fmt.Sprint(notifications["taskIds"]) != fmt.Sprint([]any{done, killed}) {
		t.Fatalf("first message = %v, want the acknowledgement of %s and %s", ack, done, killed)
	}
	meta, _ := params["_meta"].(map[string]any)
	if meta[mcp.MetaKeySubscriptionID] != float64(1) {
		t.Errorf("acknowledgement _meta = %v, want the listen's id", meta)
	}
	// state reads notifications until one of id has status, and checks it
	// against tasks/get.
	state := func(id, status string) map[string]any {
		t.Helper()
		for {
			msg := l.next(t)
			if msg == nil {
				t.Fatalf("the stream ended before %s was %s", id, status)
			}
			p, _ := msg["params"].(map[string]any)
			if msg["method"] != "notifications/tasks" || p["taskId"] != id || p["status"] != status {
				continue
			}
			got := sandboxdtest.Result(t, sandboxdtest.GetTask(id).Call(t, ts.url))
			for _, k := range []string{"status", "lastUpdatedAt", "result", "statusMessage", "ttlMs"} {
				if fmt.Sprint(got[k]) != fmt.Sprint(p[k]) {
					t.Errorf("notification %s = %v, tasks/get %v", k, p[k], got[k])
				}
			}
			return p
		}
	}
	state(done, TaskWorking)
	state(killed, TaskWorking)
	cancel := sandboxdtest.RPC{Method: "tasks/cancel", Name: killed, Tasks: true, Params: map[string]any{"taskId": killed}}
	sandboxdtest.Result(t, cancel.Call(t, ts.url))
	state(killed, TaskCancelled)
	w, err := os.OpenFile(filepath.Join(ts.ws, "gate"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(w, "it")
	w.Close()
	final := state(done, TaskCompleted)
	if !strings.Contains(fmt.Sprint(final["result"]), "got it") {
		t.Errorf("completed notification's result = %v", final["result"])
	}
	var last map[string]any
	for msg := l.next(t); msg != nil; msg = l.next(t) {
		last = msg
	}
	if res, _ := last["result"].(map[string]any); last["id"] != float64(1) || res["resultType"] != "complete" {
		t.Errorf("the stream's last message = %v, want the listen's result", last)
	}
}

// TestTaskListenRefused: asking for task notifications without declaring
// the extension gets -32021; a header that disagrees gets the header
// mismatch; a listen that asks for no tasks is the SDK's as before.
func TestTaskListenRefused(t *testing.T) {
	ts, _ := taskServer(t)
	id, _ := sandboxdtest.Result(t, sandboxdtest.BashTask("true").Call(t, ts.url))["taskId"].(string)
	resp, err := sandboxdtest.RPC{Method: "subscriptions/listen", Tasks: false, Params: map[string]any{"notifications": map[string]any{"taskIds": []string{id}}}}.Send(t.Context(), t, ts.url)
	if err != nil {
		t.Fatal(err)
	}
	if sandboxdtest.ErrorCode(resp) != float64(mcp.CodeMissingRequiredClientCapabilities) {
		t.Errorf("without the extension = %v, want -32021", resp)
	}
	bad := sandboxdtest.RPC{Method: "subscriptions/listen", Tasks: true, Header: map[string]string{"Mcp-Method": "tasks/get"},
		Params: map[string]any{"notifications": map[string]any{"taskIds": []string{id}}}}
	if resp := bad.Call(t, ts.url); sandboxdtest.ErrorCode(resp) != float64(mcp.CodeHeaderMismatch) {
		t.Errorf("Mcp-Method another method = %v, want the header mismatch", resp)
	}
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	plain, err := sandboxdtest.RPC{Method: "subscriptions/listen", Tasks: true, Params: map[string]any{"notifications": map[string]any{}}}.Send(ctx, t, ts.url)
	if err != nil {
		t.Fatal(err)
	}
	if plain["error"] != nil || plain["result"] == nil {
		t.Errorf("a listen for nothing = %v, want the SDK's result", plain)
	}
}
