package sandboxd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"k8s.io/klog/v2"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/airlock-dev/airlock/pkg/toolnames"
)

// taskServer starts a sandboxd whose task store runs on a fake clock.
func taskServer(t *testing.T) (*testServer, *clocktesting.FakeClock) {
	t.Helper()
	fc := clocktesting.NewFakeClock(time.Date(2026, 7, 28, 12, 0, 0, 0, time.UTC))
	opts := defaultOptions()
	opts.tasks = taskOptions{threshold: time.Minute, retention: time.Hour, clock: fc}
	return startServer(t, Config{}, opts), fc
}

// rpc is one 2026-07-28 request to /mcp.
type rpc struct {
	method string
	name   string         // the Mcp-Name header: the tool or the task id
	params map[string]any // _meta is added
	tasks  bool           // declare the tasks extension
	header map[string]string
}

// send POSTs the request with ctx and returns the decoded response.
func (c rpc) send(ctx context.Context, t *testing.T, url string) (map[string]any, error) {
	t.Helper()
	resp, err := http.DefaultClient.Do(c.build(ctx, t, url))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		for _, line := range strings.Split(string(data), "\n") {
			if d, ok := strings.CutPrefix(line, "data: "); ok {
				data = []byte(d)
			}
		}
	}
	var out map[string]any
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatalf("%s: not JSON (%v): %s", c.method, err, data)
	}
	return out, nil
}

// build is the HTTP request of c.
func (c rpc) build(ctx context.Context, t *testing.T, url string) *http.Request {
	t.Helper()
	caps := map[string]any{}
	if c.tasks {
		caps["extensions"] = map[string]any{tasksExtension: map[string]any{}}
	}
	params := map[string]any{"_meta": map[string]any{
		mcp.MetaKeyProtocolVersion:    protocolStateless,
		mcp.MetaKeyClientCapabilities: caps,
	}}
	for k, v := range c.params {
		params[k] = v
	}
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": c.method, "params": params})
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/mcp", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", protocolStateless)
	req.Header.Set("Mcp-Method", c.method)
	if c.name != "" {
		req.Header.Set("Mcp-Name", c.name)
	}
	for k, v := range c.header {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	return req
}

// call sends the request and fails the test on a transport error.
func (c rpc) call(t *testing.T, url string) map[string]any {
	t.Helper()
	out, err := c.send(t.Context(), t, url)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func result(t *testing.T, resp map[string]any) map[string]any {
	t.Helper()
	res, ok := resp["result"].(map[string]any)
	if !ok {
		t.Fatalf("no result: %v", resp)
	}
	return res
}

func errorCode(resp map[string]any) float64 {
	e, _ := resp["error"].(map[string]any)
	code, _ := e["code"].(float64)
	return code
}

// bashTask is a Bash call that asks to run as a task at once.
func bashTask(command string) rpc {
	return rpc{method: "tools/call", name: toolnames.Bash, tasks: true, params: map[string]any{
		"name": toolnames.Bash, "arguments": map[string]any{"command": command}, "task": map[string]any{},
	}}
}

func getTask(id string) rpc {
	return rpc{method: "tasks/get", name: id, tasks: true, params: map[string]any{"taskId": id}}
}

// waitTask polls tasks/get, as a client does, until the task is no longer
// working, and returns it.
func waitTask(t *testing.T, url, id string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for {
		res := result(t, getTask(id).call(t, url))
		if res["status"] != taskWorking {
			return res
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s still working: %v", id, res)
		}
		time.Sleep(10 * time.Millisecond) // the protocol's own polling (pollIntervalMs, shortened)
	}
}

// mkfifo makes a FIFO in the workspace, for a command to block on.
func mkfifo(t *testing.T, ts *testServer, name string) string {
	t.Helper()
	p := filepath.Join(ts.ws, name)
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestTaskOutlivesItsStream: a Bash call that becomes a task goes on after
// its client's POST is gone (the client's context cancelled, its
// connections closed), is polled to its result from another request, and is
// collected after the retention.
func TestTaskOutlivesItsStream(t *testing.T) {
	ts, fc := taskServer(t)
	fifo := mkfifo(t, ts, "gate")
	ctx, cancel := context.WithCancel(t.Context())
	created, err := bashTask("read line < gate; echo \"got $line\"").send(ctx, t, ts.url)
	if err != nil {
		t.Fatal(err)
	}
	res := result(t, created)
	if res["resultType"] != "task" || res["status"] != taskWorking {
		t.Fatalf("CreateTaskResult = %v, want resultType task, status working", res)
	}
	id, _ := res["taskId"].(string)
	if len(id) < 20 {
		t.Fatalf("task id %q: want an unguessable one", id)
	}
	if res["ttlMs"] != nil || res["pollIntervalMs"] != float64(taskPollInterval.Milliseconds()) {
		t.Errorf("ttlMs = %v, pollIntervalMs = %v; want null while working, %d", res["ttlMs"], res["pollIntervalMs"], taskPollInterval.Milliseconds())
	}
	cancel() // the client's stream is gone
	http.DefaultClient.CloseIdleConnections()
	if got := result(t, getTask(id).call(t, ts.url)); got["status"] != taskWorking {
		t.Fatalf("after the client left, the task is %v, want working", got)
	}

	w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(w, "through")
	w.Close()
	done := waitTask(t, ts.url, id)
	if done["status"] != taskCompleted || done["resultType"] != "complete" {
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
	if got := result(t, getTask(id).call(t, ts.url)); got["status"] != taskCompleted {
		t.Fatalf("before the retention passed, the task is %v", got)
	}
	fc.Step(time.Second)
	if resp := getTask(id).call(t, ts.url); errorCode(resp) != -32602 {
		t.Fatalf("after the retention, tasks/get = %v, want invalid params (collected)", resp)
	}
	if n := ts.streamable.tasks.count(); n != 0 {
		t.Errorf("%d tasks kept after the retention", n)
	}
}

// TestTaskCancelKillsItsProcesses: tasks/cancel kills the task's process
// group (the shell and what it started) and the task ends cancelled.
func TestTaskCancelKillsItsProcesses(t *testing.T) {
	ts, _ := taskServer(t)
	res := result(t, bashTask("echo $$ > leader.pid; sleep 300 & echo $! > bg.pid; wait").call(t, ts.url))
	id, _ := res["taskId"].(string)
	pids := []int{readPID(t, filepath.Join(ts.ws, "leader.pid")), readPID(t, filepath.Join(ts.ws, "bg.pid"))}
	waitMetric(t, ts.url, "airlock_sandboxd_tasks_running 1")
	ack := result(t, rpc{method: "tasks/cancel", name: id, tasks: true, params: map[string]any{"taskId": id}}.call(t, ts.url))
	if len(ack) != 1 || ack["resultType"] != "complete" {
		t.Errorf("tasks/cancel = %v, want an empty acknowledgement", ack)
	}
	waitDead(t, pids...)
	if got := waitTask(t, ts.url, id); got["status"] != taskCancelled || got["result"] != nil {
		t.Errorf("cancelled task = %v, want status cancelled, no result", got)
	}
	waitMetric(t, ts.url, "airlock_sandboxd_tasks_running 0")
	waitMetric(t, ts.url, "airlock_sandboxd_tasks_kept 1")
	_, body := get(t, ts.url+"/metrics", nil)
	for _, line := range []string{`airlock_sandboxd_tasks_created_total{how="requested"} 1`, `airlock_sandboxd_tasks_created_total{how="after_threshold"} 0`} {
		if !strings.Contains(body, line+"\n") {
			t.Errorf("/metrics has no %q", line)
		}
	}
}

// TestTaskAfterThreshold: a call that declares the extension becomes a task
// when it outlives the threshold; one that ends before gets its plain
// result; one that does not declare it never becomes a task.
func TestTaskAfterThreshold(t *testing.T) {
	ts, fc := taskServer(t)
	mkfifo(t, ts, "gate")
	long := rpc{method: "tools/call", name: toolnames.Bash, tasks: true, params: map[string]any{
		"name": toolnames.Bash, "arguments": map[string]any{"command": "read line < gate; echo $line"},
	}}
	got := make(chan map[string]any, 1)
	go func() {
		resp, err := long.send(t.Context(), t, ts.url)
		if err != nil {
			t.Error(err)
		}
		got <- resp
	}()
	deadline := time.Now().Add(testTimeout)
	for !fc.HasWaiters() { // the call waits on the threshold
		if time.Now().After(deadline) {
			t.Fatal("the call never waited on the threshold")
		}
		time.Sleep(time.Millisecond)
	}
	fc.Step(time.Minute)
	res := result(t, <-got)
	if res["resultType"] != "task" {
		t.Fatalf("a call past the threshold answered %v, want a task", res)
	}
	id, _ := res["taskId"].(string)
	w, err := os.OpenFile(filepath.Join(ts.ws, "gate"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(w, "late")
	w.Close()
	if done := waitTask(t, ts.url, id); done["status"] != taskCompleted || !strings.Contains(fmt.Sprint(done["result"]), "late") {
		t.Errorf("task = %v", done)
	}

	short := rpc{method: "tools/call", name: toolnames.Bash, tasks: true, params: map[string]any{
		"name": toolnames.Bash, "arguments": map[string]any{"command": "echo quick"},
	}}
	plain := result(t, short.call(t, ts.url))
	if plain["resultType"] != "complete" || plain["taskId"] != nil || !strings.Contains(fmt.Sprint(plain["content"]), "quick") {
		t.Errorf("a call within the threshold = %v, want its plain result", plain)
	}

	bad := rpc{method: "tools/call", name: toolnames.Bash, tasks: true, params: map[string]any{
		"name": toolnames.Bash, "arguments": map[string]any{"command": "touch ran", "bogus": 1},
	}}
	if res := result(t, bad.call(t, ts.url)); res["isError"] != true || !strings.Contains(fmt.Sprint(res["content"]), "bogus") {
		t.Errorf("a call with an unknown argument = %v, want the schema's tool error", res)
	}
	if _, err := os.Stat(filepath.Join(ts.ws, "ran")); err == nil {
		t.Error("a call refused by its schema ran")
	}
	for name := range taskTools {
		if _, ok := ts.sse.calls.Load().handlers[name]; !ok {
			t.Errorf("%s may be a task but is not in the call table: its calls would never become tasks", name)
		}
	}

	undeclared := bashTask("echo untasked")
	undeclared.tasks = false
	if res := undeclared.call(t, ts.url); res["result"] != nil && result(t, res)["resultType"] == "task" {
		t.Errorf("a client that did not declare the extension got a task: %v", res)
	}
	read := rpc{method: "tools/call", name: toolnames.Read, tasks: true, params: map[string]any{
		"name": toolnames.Read, "arguments": map[string]any{"file_path": "missing"}, "task": map[string]any{},
	}}
	if res := read.call(t, ts.url); res["result"] != nil && result(t, res)["resultType"] == "task" {
		t.Errorf("Read, not a task tool, became a task: %v", res)
	}
	if n := ts.streamable.tasks.count(); n != 1 {
		t.Errorf("%d tasks kept, want the one long call", n)
	}
	_, body := get(t, ts.url+"/metrics", nil)
	for _, line := range []string{`airlock_sandboxd_tasks_created_total{how="requested"} 0`, `airlock_sandboxd_tasks_created_total{how="after_threshold"} 1`} {
		if !strings.Contains(body, line+"\n") {
			t.Errorf("/metrics has no %q", line)
		}
	}
}

// TestTaskProtocolErrors: discovery lists the extension; an unknown task,
// a client that does not declare the extension and headers that disagree
// are refused with the extension's errors.
func TestTaskProtocolErrors(t *testing.T) {
	ts, _ := taskServer(t)
	disc := result(t, rpc{method: "server/discover"}.call(t, ts.url))
	caps, _ := disc["capabilities"].(map[string]any)
	ext, _ := caps["extensions"].(map[string]any)
	if _, ok := ext[tasksExtension]; !ok {
		t.Errorf("server/discover capabilities = %v, want the extension %s", caps, tasksExtension)
	}
	res := result(t, bashTask("true").call(t, ts.url))
	id, _ := res["taskId"].(string)
	waitTask(t, ts.url, id)

	tests := map[string]struct {
		req      rpc
		wantCode float64
	}{
		"unknown task":      {req: getTask("no-such-task"), wantCode: -32602},
		"no taskId":         {req: rpc{method: "tasks/get", tasks: true, params: map[string]any{}}, wantCode: -32602},
		"undeclared":        {req: rpc{method: "tasks/get", name: id, params: map[string]any{"taskId": id}}, wantCode: mcp.CodeMissingRequiredClientCapabilities},
		"Mcp-Name differs":  {req: rpc{method: "tasks/get", name: "other", tasks: true, params: map[string]any{"taskId": id}}, wantCode: mcp.CodeHeaderMismatch},
		"no Mcp-Name":       {req: rpc{method: "tasks/cancel", tasks: true, params: map[string]any{"taskId": id}}, wantCode: mcp.CodeHeaderMismatch},
		"Mcp-Method":        {req: rpc{method: "tasks/get", name: id, tasks: true, params: map[string]any{"taskId": id}, header: map[string]string{"Mcp-Method": "tasks/cancel"}}, wantCode: mcp.CodeHeaderMismatch},
		"version differs":   {req: rpc{method: "tasks/get", name: id, tasks: true, params: map[string]any{"taskId": id}, header: map[string]string{"Mcp-Protocol-Version": "2026-08-01"}}, wantCode: mcp.CodeHeaderMismatch},
		"update unknown":    {req: rpc{method: "tasks/update", name: "x", tasks: true, params: map[string]any{"taskId": "x", "inputResponses": map[string]any{}}}, wantCode: -32602},
		"tool name differs": {req: rpc{method: "tools/call", name: "Read", tasks: true, params: map[string]any{"name": "Bash", "arguments": map[string]any{"command": "touch ran"}, "task": map[string]any{}}}, wantCode: mcp.CodeHeaderMismatch},
		"tool name missing": {req: rpc{method: "tools/call", tasks: true, params: map[string]any{"name": "Bash", "arguments": map[string]any{"command": "touch ran"}, "task": map[string]any{}}}, wantCode: mcp.CodeHeaderMismatch},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			resp := tc.req.call(t, ts.url)
			if got := errorCode(resp); got != tc.wantCode {
				t.Errorf("%s = %v, want error %v", tc.req.method, resp, tc.wantCode)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(ts.ws, "ran")); err == nil {
		t.Error("a call refused for its headers ran")
	}
	upd := result(t, rpc{method: "tasks/update", name: id, tasks: true, params: map[string]any{"taskId": id, "inputResponses": map[string]any{}}}.call(t, ts.url))
	if len(upd) != 1 || upd["resultType"] != "complete" {
		t.Errorf("tasks/update of a known task = %v, want an empty acknowledgement", upd)
	}
	// On the SSE transport and in a stateful session, tasks/* are unknown methods.
	code, body := post(t, ts.url+"/mcp", "application/json", `{"jsonrpc":"2.0","id":3,"method":"tasks/get","params":{"taskId":"`+id+`"}}`, nil)
	if code != http.StatusOK || !strings.Contains(body, "-32601") {
		t.Errorf("tasks/get without the revision = %d %s, want method not found", code, body)
	}
}

// TestTaskKilledAtShutdown: a task still running when sandboxd shuts down
// has its processes killed, and shutdown waits for it.
func TestTaskKilledAtShutdown(t *testing.T) {
	ts, _ := taskServer(t)
	result(t, bashTask("echo $$ > leader.pid; sleep 300 & echo $! > bg.pid; wait").call(t, ts.url))
	pids := []int{readPID(t, filepath.Join(ts.ws, "leader.pid")), readPID(t, filepath.Join(ts.ws, "bg.pid"))}
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	if err := ts.streamable.tasks.close(ctx); err != nil {
		t.Fatal(err)
	}
	if alive(pids[0]) {
		t.Errorf("the task's shell %d is alive after the store closed", pids[0])
	}
	waitDead(t, pids[1]) // killed with its group; reaped by init, in its own time
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
	opts := defaultOptions()
	opts.tasks = taskOptions{threshold: time.Minute, retention: time.Hour, clock: fc}
	ts := startServer(t, Config{AuthTokenFile: tokenFile}, opts)
	authed := map[string]string{"Authorization": "Bearer s3cret-token"}
	mkfifo(t, ts, "gate")
	create := bashTask("read line < gate")
	create.header = authed
	id, _ := result(t, create.call(t, ts.url))["taskId"].(string)
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
			run := bashTask("touch ran")
			cancel := rpc{method: "tasks/cancel", name: id, tasks: true, params: map[string]any{"taskId": id}}
			for _, req := range []rpc{getTask(id), cancel, run} {
				req.header = header
				resp, err := http.DefaultClient.Do(req.build(t.Context(), t, ts.url))
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != want {
					t.Errorf("%s: HTTP %d, want %d", req.method, resp.StatusCode, want)
				}
			}
		})
	}
	if _, err := os.Stat(filepath.Join(ts.ws, "ran")); err == nil {
		t.Error("a refused call ran")
	}
	get := getTask(id)
	get.header = authed
	if got := result(t, get.call(t, ts.url)); got["status"] != taskWorking || got["statusMessage"] != nil {
		t.Errorf("after the refused requests the task is %v, want working, no cancellation", got)
	}
}

// TestTaskStoreBounds: the store keeps at most maxTasks tasks and maxBytes
// of results, dropping the oldest finished tasks first; full of running
// tasks, it takes no more (the call stays plain); a dropped task's bytes
// are given back.
func TestTaskStoreBounds(t *testing.T) {
	fc := clocktesting.NewFakeClock(time.Date(2026, 7, 28, 12, 0, 0, 0, time.UTC))
	s := newTaskStore(taskOptions{maxTasks: 3, maxBytes: 80, clock: fc}, func() *callTable { return nil }, klog.Background())
	newTask := func(id string) *task {
		return &task{id: id, createdAt: fc.Now(), status: taskWorking, done: make(chan struct{}), cancel: func() {}}
	}
	text := func(n int) mcp.Result {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: strings.Repeat("x", n)}}}
	}
	ids := func() []string {
		s.mu.Lock()
		defer s.mu.Unlock()
		var out []string
		for _, t := range s.order {
			out = append(out, t.id)
		}
		return out
	}
	a, b, c, d := newTask("a"), newTask("b"), newTask("c"), newTask("d")
	for _, tk := range []*task{a, b, c} {
		if !s.add(tk) {
			t.Fatalf("add(%s) refused with room left", tk.id)
		}
	}
	if s.add(d) {
		t.Fatal("a store full of running tasks took one more")
	}
	s.finish(b, text(10), nil)
	if !s.add(d) {
		t.Fatal("add refused while a finished task could be dropped")
	}
	if got, want := fmt.Sprint(ids()), "[a c d]"; got != want {
		t.Errorf("tasks = %s, want %s (the finished b dropped)", got, want)
	}
	s.finish(a, text(10), nil) // 49 bytes of JSON
	s.finish(c, text(10), nil) // over 80 together: a, the oldest finished, goes
	if got, want := fmt.Sprint(ids()), "[c d]"; got != want {
		t.Errorf("tasks = %s, want %s (over the byte bound, the oldest finished dropped)", got, want)
	}
	s.mu.Lock()
	kept := s.bytes
	s.mu.Unlock()
	if kept != len(c.result) || kept == 0 {
		t.Errorf("bytes = %d, want c's %d", kept, len(c.result))
	}
	s.finish(d, nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "boom"})
	s.mu.Lock()
	view := s.viewLocked(d)
	s.mu.Unlock()
	if view["status"] != taskFailed || view["statusMessage"] != "boom" || view["error"] == nil {
		t.Errorf("a call that returned a protocol error: %v, want failed with the error", view)
	}
	fc.Step(defaultTaskRetention)
	if got := ids(); len(got) != 0 {
		t.Errorf("after the retention: %v kept", got)
	}
	s.mu.Lock()
	kept = s.bytes
	s.mu.Unlock()
	if kept != 0 {
		t.Errorf("bytes = %d after every task was dropped", kept)
	}
}

// TestTaskClientGoesBeforeTheThreshold: a call that may become a task but
// whose client goes away before the threshold is a plain call that lost its
// client: cancelled, its processes killed, no task kept.
func TestTaskClientGoesBeforeTheThreshold(t *testing.T) {
	ts, _ := taskServer(t)
	req := rpc{method: "tools/call", name: toolnames.Bash, tasks: true, params: map[string]any{
		"name": toolnames.Bash, "arguments": map[string]any{"command": "echo $$ > leader.pid; sleep 300 & echo $! > bg.pid; wait"},
	}}
	ctx, cancel := context.WithCancel(t.Context())
	sent := make(chan error, 1)
	go func() {
		_, err := req.send(ctx, t, ts.url)
		sent <- err
	}()
	pids := []int{readPID(t, filepath.Join(ts.ws, "leader.pid")), readPID(t, filepath.Join(ts.ws, "bg.pid"))}
	cancel()
	if err := <-sent; !errors.Is(err, context.Canceled) {
		t.Errorf("the client's POST ended with %v, want its cancellation", err)
	}
	waitDead(t, pids...)
	if n := ts.streamable.tasks.count(); n != 0 {
		t.Errorf("%d tasks kept for a call whose client left before the threshold", n)
	}
}
