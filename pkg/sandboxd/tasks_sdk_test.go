package sandboxd

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/sandboxdtest"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/wire"
	"github.com/airlock-dev/airlock/pkg/toolnames"
)

// sdkTaskParams are the params of tasks/get and tasks/cancel, for the Go
// SDK's custom methods (v1.8.0 has no tasks of its own).
type sdkTaskParams struct {
	mcp.ParamsBase
	TaskID string `json:"taskId"`
}

// sdkTask is a task as tasks/get answers it.
type sdkTask struct {
	mcp.ResultBase
	ResultType    string          `json:"resultType"`
	TaskID        string          `json:"taskId"`
	Status        string          `json:"status"`
	StatusMessage string          `json:"statusMessage"`
	Result        json.RawMessage `json:"result"`
}

// taskNameHeader is what a Go SDK v1.8.0 client needs to speak the tasks
// extension over Streamable HTTP: the SDK sets Mcp-Name for tools/call,
// prompts/get and resources/read only, and the extension requires it to
// be the task id on tasks/* (which sandboxd checks). It adds the header
// from the request's body.
type taskNameHeader struct{ next http.RoundTripper }

func (h taskNameHeader) RoundTrip(req *http.Request) (*http.Response, error) {
	if m := req.Header.Get("Mcp-Method"); strings.HasPrefix(m, "tasks/") && req.Body != nil {
		data, err := io.ReadAll(req.Body)
		if err != nil {
			return nil, err
		}
		var msg struct {
			Params struct {
				TaskID string `json:"taskId"`
			} `json:"params"`
		}
		if json.Unmarshal(data, &msg) == nil && msg.Params.TaskID != "" {
			req = req.Clone(req.Context())
			req.Header.Set("Mcp-Name", msg.Params.TaskID)
		}
		req.Body = io.NopCloser(bytes.NewReader(data))
	}
	return h.next.RoundTrip(req)
}

// connectTasksClient connects the official Go SDK's client (v1.8.0, at
// 2026-07-28) declaring the tasks extension, with tasks/get and
// tasks/cancel as custom methods.
func connectTasksClient(t *testing.T, url string) *mcp.ClientSession {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "sandboxd-test", Version: "v0"}, &mcp.ClientOptions{
		Capabilities: &mcp.ClientCapabilities{Extensions: map[string]any{wire.TasksExtension: map[string]any{}}},
	})
	for _, method := range []string{"tasks/get", "tasks/cancel"} {
		if err := mcp.AddSendingCustomMethod[*sdkTaskParams, *sdkTask](client, method); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url + "/mcp",
		HTTPClient: &http.Client{Transport: taskNameHeader{next: http.DefaultTransport}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	if v := cs.InitializeResult().ProtocolVersion; v != wire.ProtocolStateless {
		t.Fatalf("negotiated %s", v)
	}
	return cs
}

// startTaskCall calls Bash with command through cs and, once the call
// waits at the threshold, passes it: the client's CallTool returns the
// task, which it reads as a CallToolResult, and the task id found in its
// _meta.
func startTaskCall(t *testing.T, cs *mcp.ClientSession, fc interface {
	HasWaiters() bool
	Step(time.Duration)
}, command string) string {
	t.Helper()
	type answer struct {
		res *mcp.CallToolResult
		err error
	}
	answered := make(chan answer, 1)
	go func() {
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: toolnames.Bash, Arguments: map[string]any{"command": command}})
		answered <- answer{res, err}
	}()
	sandboxdtest.WaitFor(t, "the call at the threshold", fc.HasWaiters)
	fc.Step(time.Minute)
	a := <-answered
	if a.err != nil {
		t.Fatalf("CallTool: %v", a.err)
	}
	related, _ := a.res.Meta[wire.MetaKeyRelatedTask].(map[string]any)
	id, _ := related["taskId"].(string)
	if id == "" {
		t.Fatalf("CallTool answered %+v: no task in its _meta", a.res)
	}
	return id
}

// getSDKTask polls the task once through the client.
func getSDKTask(t *testing.T, cs *mcp.ClientSession, id string) *sdkTask {
	t.Helper()
	got, err := mcp.CallCustomMethod[*sdkTaskParams, *sdkTask](t.Context(), cs, "tasks/get", &sdkTaskParams{TaskID: id})
	if err != nil {
		t.Fatalf("tasks/get: %v", err)
	}
	if got.TaskID != id || got.ResultType != "complete" {
		t.Fatalf("tasks/get %s = %+v", id, got)
	}
	return got
}

// TestTaskThroughTheGoSDKClient: the official Go SDK's client drives tasks
// end to end: a Bash call that outlives the threshold becomes a task, is
// polled while it works and to its result; another is cancelled with
// tasks/cancel, and its process group is gone: no process of it is left.
func TestTaskThroughTheGoSDKClient(t *testing.T) {
	t.Run("completed", func(t *testing.T) {
		ts, fc := taskServer(t)
		cs := connectTasksClient(t, ts.url)
		fifo := sandboxdtest.Mkfifo(t, ts.ws, "gate")
		id := startTaskCall(t, cs, fc, "read line < gate; echo \"got $line\"")
		if got := getSDKTask(t, cs, id); got.Status != wire.TaskWorking {
			t.Fatalf("a task waiting for its input is %s", got.Status)
		}
		w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintln(w, "there")
		w.Close()
		var got *sdkTask
		for got = getSDKTask(t, cs, id); got.Status == wire.TaskWorking; got = getSDKTask(t, cs, id) {
			time.Sleep(10 * time.Millisecond) // as a client polls (pollIntervalMs, shortened)
		}
		var res mcp.CallToolResult
		if err := json.Unmarshal(got.Result, &res); err != nil {
			t.Fatalf("the task's result %s: %v", got.Result, err)
		}
		if got.Status != wire.TaskCompleted || res.IsError || !strings.Contains(sandboxdtest.ContentText(&res), "got there") {
			t.Errorf("task = %s, result %s", got.Status, got.Result)
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		ts, fc := taskServer(t)
		cs := connectTasksClient(t, ts.url)
		id := startTaskCall(t, cs, fc, "echo $$ > leader.pid; sleep 300 & echo $! > bg.pid; wait")
		pids := []int{sandboxdtest.ReadPID(t, filepath.Join(ts.ws, "leader.pid")), sandboxdtest.ReadPID(t, filepath.Join(ts.ws, "bg.pid"))}
		if _, err := mcp.CallCustomMethod[*sdkTaskParams, *sdkTask](t.Context(), cs, "tasks/cancel", &sdkTaskParams{TaskID: id}); err != nil {
			t.Fatalf("tasks/cancel: %v", err)
		}
		sandboxdtest.WaitDead(t, pids...)
		var got *sdkTask
		for got = getSDKTask(t, cs, id); got.Status == wire.TaskWorking; got = getSDKTask(t, cs, id) {
			time.Sleep(10 * time.Millisecond) // as a client polls
		}
		if got.Status != wire.TaskCancelled {
			t.Errorf("a cancelled task is %s (%s)", got.Status, got.StatusMessage)
		}
		if n := ts.tb.ProcessGroups(); n != 0 {
			t.Errorf("%d process groups left after the cancelled task", n)
		}
	})
}
