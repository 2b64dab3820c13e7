package wire

import (
	"fmt"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"k8s.io/klog/v2"
)

// TestTaskStoreBounds: the store keeps at most maxTasks tasks and maxBytes
// of results, dropping the oldest finished tasks first; full of running
// tasks, it takes no more (the call stays plain); a dropped task's bytes
// are given back.
func TestTaskStoreBounds(t *testing.T) {
	fc := clocktesting.NewFakeClock(time.Date(2026, 7, 28, 12, 0, 0, 0, time.UTC))
	s := NewTaskStore(TaskOptions{MaxTasks: 3, MaxBytes: 80, Clock: fc}, func() *CallTable { return nil }, klog.Background())
	newTask := func(id string) *task {
		return &task{id: id, createdAt: fc.Now(), status: TaskWorking, done: make(chan struct{}), cancel: func() {}}
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
	if view["status"] != TaskFailed || view["statusMessage"] != "boom" || view["error"] == nil {
		t.Errorf("a call that returned a protocol error: %v, want failed with the error", view)
	}
	fc.Step(DefaultTaskRetention)
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
