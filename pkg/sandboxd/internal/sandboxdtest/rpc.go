package sandboxdtest

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-dev/airlock/pkg/toolnames"
)

// The 2026-07-28 requests of the tasks' tests, by hand.

// TasksExtension is the tasks extension's name, as a client declares it (the
// wire's harness checks that the wire's constant agrees).
const TasksExtension = "io.modelcontextprotocol/tasks"

// TaskWorking is the status of a task that runs, as tasks/get answers it.
const TaskWorking = "working"

// RPC is one 2026-07-28 request to /mcp.
type RPC struct {
	Method string
	Name   string         // the Mcp-Name header: the tool or the task id
	Params map[string]any // _meta is added
	Tasks  bool           // declare the tasks extension
	Header map[string]string
}

// Send POSTs the request with ctx and returns the decoded response.
func (c RPC) Send(ctx context.Context, t testing.TB, url string) (map[string]any, error) {
	t.Helper()
	resp, err := http.DefaultClient.Do(c.Build(ctx, t, url))
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
		t.Fatalf("%s: not JSON (%v): %s", c.Method, err, data)
	}
	return out, nil
}

// Build is the HTTP request of c.
func (c RPC) Build(ctx context.Context, t testing.TB, url string) *http.Request {
	t.Helper()
	caps := map[string]any{}
	if c.Tasks {
		caps["extensions"] = map[string]any{TasksExtension: map[string]any{}}
	}
	params := map[string]any{"_meta": map[string]any{
		mcp.MetaKeyProtocolVersion:    ProtocolStateless,
		mcp.MetaKeyClientCapabilities: caps,
	}}
	for k, v := range c.Params {
		params[k] = v
	}
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": c.Method, "params": params})
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/mcp", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", ProtocolStateless)
	req.Header.Set("Mcp-Method", c.Method)
	if c.Name != "" {
		req.Header.Set("Mcp-Name", c.Name)
	}
	for k, v := range c.Header {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	return req
}

// Call sends the request and fails the test on a transport error.
func (c RPC) Call(t testing.TB, url string) map[string]any {
	t.Helper()
	out, err := c.Send(t.Context(), t, url)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Result is a decoded response's result, failing the test if it has none.
func Result(t testing.TB, resp map[string]any) map[string]any {
	t.Helper()
	res, ok := resp["result"].(map[string]any)
	if !ok {
		t.Fatalf("no result: %v", resp)
	}
	return res
}

// BashTask is a Bash call that asks to run as a task at once.
func BashTask(command string) RPC {
	return RPC{Method: "tools/call", Name: toolnames.Bash, Tasks: true, Params: map[string]any{
		"name": toolnames.Bash, "arguments": map[string]any{"command": command}, "task": map[string]any{},
	}}
}

// GetTask is a tasks/get of the task id.
func GetTask(id string) RPC {
	return RPC{Method: "tasks/get", Name: id, Tasks: true, Params: map[string]any{"taskId": id}}
}

// WaitTask polls tasks/get, as a client does, until the task is no longer
// working, and returns it.
func WaitTask(t testing.TB, url, id string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(Timeout)
	for {
		res := Result(t, GetTask(id).Call(t, url))
		if res["status"] != TaskWorking {
			return res
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s still working: %v", id, res)
		}
		time.Sleep(10 * time.Millisecond) // the protocol's own polling (pollIntervalMs, shortened)
	}
}
