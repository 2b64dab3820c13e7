package wire

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/sandboxdtest"
	"github.com/airlock-dev/airlock/pkg/toolnames"
)

// taskServer starts the wire whose task store runs on a fake clock.
func taskServer(t *testing.T) (*testServer, *clocktesting.FakeClock) {
	t.Helper()
	fc := clocktesting.NewFakeClock(time.Date(2026, 7, 28, 12, 0, 0, 0, time.UTC))
	return startServer(t, testOptions{tasks: TaskOptions{Threshold: time.Minute, Retention: time.Hour, Clock: fc}}), fc
}

// TestTaskOutlivesItsStream: a Bash call that becomes a task goes on after
// its client's POST is gone (the client's context cancelled, its
// connections closed), is polled to its result from another request, and is
// collected after the retention.
func TestTaskOutlivesItsStream(t *testing.T) {
	ts, fc := taskServer(t)
	fifo := sandboxdtest.Mkfifo(t, ts.ws, "gate")
	ctx, cancel := context.WithCancel(t.Context())
	created, err := sandboxdtest.BashTask("read line < gate; echo \"got $line\"").Send(ctx, t, ts.url)
	if err != nil {
		t.Fatal(err)
	}
	res := sandboxdtest.Result(t, created)
	if res["resultType"] != "task" || res["status"] != TaskWorking {
		t.Fatalf("CreateTaskResult = %v, want resultType task, status working", res)
	}
	id, _ := res["taskId"].(string)
	if len(id) < 20 {
		t.Fatalf("task id %q: want an unguessable one", id)
	}
	if res["ttlMs"] != nil || res["pollIntervalMs"] != float64(TaskPollInterval.Milliseconds()) {
		t.Errorf("ttlMs = %v, pollIntervalMs = %v; want null while working, %d", res["ttlMs"], res["pollIntervalMs"], TaskPollInterval.Milliseconds())
	}
	cancel() // the client's stream is gone
	http.DefaultClient.CloseIdleConnections()
	if got := sandboxdtest.Result(t, sandboxdtest.GetTask(id).Call(t, ts.url)); got["status"] != TaskWorking {
		t.Fatalf("after the client left, the task is %v, want working", got)
	}

	w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(w, "through")
	w.Close()
	done := sandboxdtest.WaitTask(t, ts.url, id)
	if done["status"] != TaskCompleted || done["resultType"] != "complete" {
		t.Fatalf("task = %v, want completed (resultType complete)", done)
	}
	inner, _ := done["result"].(map[string]any)
	if text := fmt.Sprint(inner["content"]); !strings.Contains(text, "got through") || inner["isError"] == true {
		t.Errorf("task result = %v, want Bash's output", inner)
	}
	if ttl, _ := done["ttlMs"].(float64); ttl < float64(time.Hour.Milliseconds()) {
		t.Errorf("ttlMs = %v, want at least the retention", done["ttlMs"])
	}

	fc.Step(time.Hour - time.Second)
	if got := sandboxdtest.Result(t, sandboxdtest.GetTask(id).Call(t, ts.url)); got["status"] != TaskCompleted {
		t.Fatalf("before the retention passed, the task is %v", got)
	}
	fc.Step(time.Second)
	if resp := sandboxdtest.GetTask(id).Call(t, ts.url); sandboxdtest.ErrorCode(resp) != -32602 {
		t.Fatalf("after the retention, tasks/get = %v, want invalid params (collected)", resp)
	}
	if n := ts.streamable.Tasks().Count(); n != 0 {
		t.Errorf("%d tasks kept after the retention", n)
	}
}

// TestTaskProtocolErrors: discovery lists the extension; an unknown task,
// a client that does not declare the extension and headers that disagree
// are refused with the extension's errors.
func TestTaskProtocolErrors(t *testing.T) {
	ts, _ := taskServer(t)
	disc := sandboxdtest.Result(t, sandboxdtest.RPC{Method: "server/discover"}.Call(t, ts.url))
	caps, _ := disc["capabilities"].(map[string]any)
	ext, _ := caps["extensions"].(map[string]any)
	if _, ok := ext[TasksExtension]; !ok {
		t.Errorf("server/discover capabilities = %v, want the extension %s", caps, TasksExtension)
	}
	res := sandboxdtest.Result(t, sandboxdtest.BashTask("true").Call(t, ts.url))
	id, _ := res["taskId"].(string)
	sandboxdtest.WaitTask(t, ts.url, id)

	tests := map[string]struct {
		req      sandboxdtest.RPC
		wantCode float64
	}{
		"unknown task":      {req: sandboxdtest.GetTask("no-such-task"), wantCode: -32602},
		"no taskId":         {req: sandboxdtest.RPC{Method: "tasks/get", Tasks: true, Params: map[string]any{}}, wantCode: -32602},
		"undeclared":        {req: sandboxdtest.RPC{Method: "tasks/get", Name: id, Params: map[string]any{"taskId": id}}, wantCode: mcp.CodeMissingRequiredClientCapabilities},
		"Mcp-Name differs":  {req: sandboxdtest.RPC{Method: "tasks/get", Name: "other", Tasks: true, Params: map[string]any{"taskId": id}}, wantCode: mcp.CodeHeaderMismatch},
		"no Mcp-Name":       {req: sandboxdtest.RPC{Method: "tasks/cancel", Tasks: true, Params: map[string]any{"taskId": id}}, wantCode: mcp.CodeHeaderMismatch},
		"Mcp-Method":        {req: sandboxdtest.RPC{Method: "tasks/get", Name: id, Tasks: true, Params: map[string]any{"taskId": id}, Header: map[string]string{"Mcp-Method": "tasks/cancel"}}, wantCode: mcp.CodeHeaderMismatch},
		"version differs":   {req: sandboxdtest.RPC{Method: "tasks/get", Name: id, Tasks: true, Params: map[string]any{"taskId": id}, Header: map[string]string{"Mcp-Protocol-Version": "2026-08-01"}}, wantCode: mcp.CodeHeaderMismatch},
		"update unknown":    {req: sandboxdtest.RPC{Method: "tasks/update", Name: "x", Tasks: true, Params: map[string]any{"taskId": "x", "inputResponses": map[string]any{}}}, wantCode: -32602},
		"tool name differs": {req: sandboxdtest.RPC{Method: "tools/call", Name: "Read", Tasks: true, Params: map[string]any{"name": "Bash", "arguments": map[string]any{"command": "touch ran"}, "task": map[string]any{}}}, wantCode: mcp.CodeHeaderMismatch},
		"tool name missing": {req: sandboxdtest.RPC{Method: "tools/call", Tasks: true, Params: map[string]any{"name": "Bash", "arguments": map[string]any{"command": "touch ran"}, "task": map[string]any{}}}, wantCode: mcp.CodeHeaderMismatch},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			resp := tc.req.Call(t, ts.url)
			if got := sandboxdtest.ErrorCode(resp); got != tc.wantCode {
				t.Errorf("%s = %v, want error %v", tc.req.Method, resp, tc.wantCode)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(ts.ws, "ran")); err == nil {
		t.Error("a call refused for its headers ran")
	}
	upd := sandboxdtest.Result(t, sandboxdtest.RPC{Method: "tasks/update", Name: id, Tasks: true, Params: map[string]any{"taskId": id, "inputResponses": map[string]any{}}}.Call(t, ts.url))
	if len(upd) != 1 || upd["resultType"] != "complete" {
		t.Errorf("tasks/update of a known task = %v, want an empty acknowledgement", upd)
	}
	// On the SSE transport and in a stateful session, tasks/* are unknown methods.
	code, body := sandboxdtest.Post(t, ts.url+"/mcp", "application/json", `{"jsonrpc":"2.0","id":3,"method":"tasks/get","params":{"taskId":"`+id+`"}}`, nil)
	if code != http.StatusOK || !strings.Contains(body, "-32601") {
		t.Errorf("tasks/get without the revision = %d %s, want method not found", code, body)
	}
}

// TestTaskKilledAtShutdown: a task still running when sandboxd shuts down
// has its processes killed, and shutdown waits for it.
func TestTaskKilledAtShutdown(t *testing.T) {
	ts, _ := taskServer(t)
	sandboxdtest.Result(t, sandboxdtest.BashTask("echo $$ > leader.pid; sleep 300 & echo $! > bg.pid; wait").Call(t, ts.url))
	pids := []int{sandboxdtest.ReadPID(t, filepath.Join(ts.ws, "leader.pid")), sandboxdtest.ReadPID(t, filepath.Join(ts.ws, "bg.pid"))}
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	if err := ts.streamable.Tasks().Close(ctx); err != nil {
		t.Fatal(err)
	}
	if sandboxdtest.Alive(pids[0]) {
		t.Errorf("the task's shell %d is alive after the store closed", pids[0])
	}
	sandboxdtest.WaitDead(t, pids[1]) // killed with its group; reaped by init, in its own time
}

// TestTaskNeedsTheToken: tasks/* and calls that may become tasks are behind
// the same guard as every request: without the claim's token, or with a
// foreign Host on loopback, they are refused, and nothing runs or is
// cancelled.
func TestTaskNeedsTheToken(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("s3cret-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fc := clocktesting.NewFakeClock(time.Date(2026, 7, 28, 12, 0, 0, 0, time.UTC))
	opts := testOptions{}
	opts.tasks = TaskOptions{Threshold: time.Minute, Retention: time.Hour, Clock: fc}
	opts.tokenFile = tokenFile
	ts := startServer(t, opts)
	authed := map[string]string{"Authorization": "Bearer s3cret-token"}
	sandboxdtest.Mkfifo(t, ts.ws, "gate")
	create := sandboxdtest.BashTask("read line < gate")
	create.Header = authed
	id, _ := sandboxdtest.Result(t, create.Call(t, ts.url))["taskId"].(string)
	if id == "" {
		t.Fatal("no task created with the token")
	}
	for name, header := range map[string]map[string]string{
		"no token":     nil,
		"wrong token":  {"Authorization": "Bearer nope"},
		"foreign Host": {"Authorization": "Bearer s3cret-token", "Host": "evil.example"},
	} {
		t.Run(name, func(t *testing.T) {
			want := http.StatusUnauthorized
			if header["Host"] != "" {
				want = http.StatusForbidden
			}
			run := sandboxdtest.BashTask("touch ran")
			cancel := sandboxdtest.RPC{Method: "tasks/cancel", Name: id, Tasks: true, Params: map[string]any{"taskId": id}}
			for _, req := range []sandboxdtest.RPC{sandboxdtest.GetTask(id), cancel, run} {
				req.Header = header
				resp, err := http.DefaultClient.Do(req.Build(t.Context(), t, ts.url))
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != want {
					t.Errorf("%s: HTTP %d, want %d", req.Method, resp.StatusCode, want)
				}
			}
		})
	}
	if _, err := os.Stat(filepath.Join(ts.ws, "ran")); err == nil {
		t.Error("a refused call ran")
	}
	get := sandboxdtest.GetTask(id)
	get.Header = authed
	if got := sandboxdtest.Result(t, get.Call(t, ts.url)); got["status"] != TaskWorking || got["statusMessage"] != nil {
		t.Errorf("after the refused requests the task is %v, want working, no cancellation", got)
	}
}

// TestTaskClientGoesBeforeTheThreshold: a call that may become a task but
// whose client goes away before the threshold is a plain call that lost its
// client: cancelled, its processes killed, no task kept.
func TestTaskClientGoesBeforeTheThreshold(t *testing.T) {
	ts, _ := taskServer(t)
	req := sandboxdtest.RPC{Method: "tools/call", Name: toolnames.Bash, Tasks: true, Params: map[string]any{
		"name": toolnames.Bash, "arguments": map[string]any{"command": "echo $$ > leader.pid; sleep 300 & echo $! > bg.pid; wait"},
	}}
	ctx, cancel := context.WithCancel(t.Context())
	sent := make(chan error, 1)
	go func() {
		_, err := req.Send(ctx, t, ts.url)
		sent <- err
	}()
	pids := []int{sandboxdtest.ReadPID(t, filepath.Join(ts.ws, "leader.pid")), sandboxdtest.ReadPID(t, filepath.Join(ts.ws, "bg.pid"))}
	cancel()
	if err := <-sent; !errors.Is(err, context.Canceled) {
		t.Errorf("the client's POST ended with %v, want its cancellation", err)
	}
	sandboxdtest.WaitDead(t, pids...)
	if n := ts.streamable.Tasks().Count(); n != 0 {
		t.Errorf("%d tasks kept for a call whose client left before the threshold", n)
	}
}
