package sandboxd

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/sandboxdtest"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/wire"
	"github.com/airlock-dev/airlock/pkg/toolnames"
)

// taskServer starts a sandboxd whose task store runs on a fake clock.
func taskServer(t *testing.T) (*testServer, *clocktesting.FakeClock) {
	t.Helper()
	fc := clocktesting.NewFakeClock(time.Date(2026, 7, 28, 12, 0, 0, 0, time.UTC))
	opts := defaultOptions()
	opts.tasks = wire.TaskOptions{Threshold: time.Minute, Retention: time.Hour, Clock: fc}
	return startServer(t, Config{}, opts), fc
}

// TestTaskCancelKillsItsProcesses: tasks/cancel kills the task's process
// group (the shell and what it started) and the task ends cancelled.
func TestTaskCancelKillsItsProcesses(t *testing.T) {
	ts, _ := taskServer(t)
	res := sandboxdtest.Result(t, sandboxdtest.BashTask("echo $$ > leader.pid; sleep 300 & echo $! > bg.pid; wait").Call(t, ts.url))
	id, _ := res["taskId"].(string)
	pids := []int{sandboxdtest.ReadPID(t, filepath.Join(ts.ws, "leader.pid")), sandboxdtest.ReadPID(t, filepath.Join(ts.ws, "bg.pid"))}
	waitMetric(t, ts.url, "airlock_sandboxd_tasks_running 1")
	ack := sandboxdtest.Result(t, sandboxdtest.RPC{Method: "tasks/cancel", Name: id, Tasks: true, Params: map[string]any{"taskId": id}}.Call(t, ts.url))
	if len(ack) != 1 || ack["resultType"] != "complete" {
		t.Errorf("tasks/cancel = %v, want an empty acknowledgement", ack)
	}
	sandboxdtest.WaitDead(t, pids...)
	if got := sandboxdtest.WaitTask(t, ts.url, id); got["status"] != wire.TaskCancelled || got["result"] != nil {
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
	sandboxdtest.Mkfifo(t, ts.ws, "gate")
	long := sandboxdtest.RPC{Method: "tools/call", Name: toolnames.Bash, Tasks: true, Params: map[string]any{
		"name": toolnames.Bash, "arguments": map[string]any{"command": "read line < gate; echo $line"},
	}}
	got := make(chan map[string]any, 1)
	go func() {
		resp, err := long.Send(t.Context(), t, ts.url)
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
	res := sandboxdtest.Result(t, <-got)
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
	if done := sandboxdtest.WaitTask(t, ts.url, id); done["status"] != wire.TaskCompleted || !strings.Contains(fmt.Sprint(done["result"]), "late") {
		t.Errorf("task = %v", done)
	}

	short := sandboxdtest.RPC{Method: "tools/call", Name: toolnames.Bash, Tasks: true, Params: map[string]any{
		"name": toolnames.Bash, "arguments": map[string]any{"command": "echo quick"},
	}}
	plain := sandboxdtest.Result(t, short.Call(t, ts.url))
	if plain["resultType"] != "complete" || plain["taskId"] != nil || !strings.Contains(fmt.Sprint(plain["content"]), "quick") {
		t.Errorf("a call within the threshold = %v, want its plain result", plain)
	}

	bad := sandboxdtest.RPC{Method: "tools/call", Name: toolnames.Bash, Tasks: true, Params: map[string]any{
		"name": toolnames.Bash, "arguments": map[string]any{"command": "touch ran", "bogus": 1},
	}}
	if res := sandboxdtest.Result(t, bad.Call(t, ts.url)); res["isError"] != true || !strings.Contains(fmt.Sprint(res["content"]), "bogus") {
		t.Errorf("a call with an unknown argument = %v, want the schema's tool error", res)
	}
	if _, err := os.Stat(filepath.Join(ts.ws, "ran")); err == nil {
		t.Error("a call refused by its schema ran")
	}
	for name := range wire.TaskTools {
		if !ts.sse.LoadCalls().Has(name) {
			t.Errorf("%s may be a task but is not in the call table: its calls would never become tasks", name)
		}
	}

	undeclared := sandboxdtest.BashTask("echo untasked")
	undeclared.Tasks = false
	if res := undeclared.Call(t, ts.url); res["result"] != nil && sandboxdtest.Result(t, res)["resultType"] == "task" {
		t.Errorf("a client that did not declare the extension got a task: %v", res)
	}
	read := sandboxdtest.RPC{Method: "tools/call", Name: toolnames.Read, Tasks: true, Params: map[string]any{
		"name": toolnames.Read, "arguments": map[string]any{"file_path": "missing"}, "task": map[string]any{},
	}}
	if res := read.Call(t, ts.url); res["result"] != nil && sandboxdtest.Result(t, res)["resultType"] == "task" {
		t.Errorf("Read, not a task tool, became a task: %v", res)
	}
	if n := ts.streamable.Tasks().Count(); n != 1 {
		t.Errorf("%d tasks kept, want the one long call", n)
	}
	_, body := get(t, ts.url+"/metrics", nil)
	for _, line := range []string{`airlock_sandboxd_tasks_created_total{how="requested"} 0`, `airlock_sandboxd_tasks_created_total{how="after_threshold"} 1`} {
		if !strings.Contains(body, line+"\n") {
			t.Errorf("/metrics has no %q", line)
		}
	}
}
