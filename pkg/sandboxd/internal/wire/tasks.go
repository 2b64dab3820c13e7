package wire

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/airlock-dev/airlock/pkg/toolnames"
)

// Tasks: long work with a handle (the extension io.modelcontextprotocol/tasks
// of the 2026-07-28 revision; docs/sandboxd-tools.md, "Tasks").
//
// A stateless tools/call of one of TaskTools whose _meta declares the
// extension runs under a context of the sandbox's, not of its POST. If it
// ends within the threshold, its POST gets the plain result; if the client
// goes away before, the call is cancelled, as any call. Once the threshold
// passes (at once when the call's params carry `task`, the client's
// request), the call becomes a task: the POST gets a CreateTaskResult
// (resultType "task"), the task is kept in the store, and it runs on
// whatever happens to that POST. tasks/get polls it, tasks/cancel cancels
// its context (which kills its process group), tasks/update is acknowledged
// (sandboxd never asks for input). A finished task is kept for the
// retention, then dropped; the store holds at most maxTasks tasks and
// maxBytes of results (TaskOptions), dropping the oldest finished ones first; when
// it is full of running tasks, a call stays a plain call.

// TasksExtension is the extension's identifier.
const TasksExtension = "io.modelcontextprotocol/tasks"

// MetaKeyRelatedTask names the task a result is of, in its _meta.
const MetaKeyRelatedTask = "io.modelcontextprotocol/related-task"

// TaskTools are the tools whose calls may become tasks: those that run the
// workspace's processes, for as long as their timeout.
var TaskTools = map[string]bool{
	toolnames.Bash: true, toolnames.RunTests: true, toolnames.RunFailingTests: true,
	toolnames.RunScript: true, toolnames.RunLint: true,
}

const (
	DefaultTaskThreshold = 10 * time.Second // a call still running then becomes a task
	DefaultTaskRetention = time.Hour        // a finished task is kept this long
	TaskPollInterval     = time.Second      // suggested to clients
	defaultMaxTasks      = 64
	defaultMaxTaskBytes  = 32 << 20 // the results kept, together
)

// Task statuses.
const (
	TaskWorking   = "working"
	TaskCompleted = "completed"
	TaskFailed    = "failed"
	TaskCancelled = "cancelled"
)

// TaskOptions are the store's knobs; tests shorten them and step the clock.
type TaskOptions struct {
	Threshold time.Duration
	Retention time.Duration
	MaxTasks  int // kept at once, running or finished
	MaxBytes  int // of the finished tasks' results, together
	Clock     clock.WithDelayedExecution
}

// task is one call that became a task (or may yet become one).
type task struct {
	id        string
	createdAt time.Time
	done      chan struct{} // closed when the call has returned
	cancel    context.CancelFunc

	// Under the store's lock.
	status          string
	updatedAt       time.Time
	expiresAt       time.Time // zero while working
	cancelRequested bool
	result          json.RawMessage // completed: the CallToolResult
	rpcErr          *jsonrpc.Error  // failed
	version         int             // one more at each change of what tasks/get shows
}

// TaskStore holds the tasks of one sandboxd.
type TaskStore struct {
	opts   TaskOptions
	calls  func() *CallTable // nil until a warm member's adoption
	logger klog.Logger
	base   context.Context // the tasks' parent: ends at shutdown
	stop   context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	closed bool
	tasks  map[string]*task
	order  []*task // oldest first
	bytes  int
	// changed is closed (and replaced) at every change of a task kept:
	// what subscriptions/listen streams wait on (tasks_listen.go).
	changed chan struct{}
	// created counts the calls that became tasks, by how (taskRequested,
	// taskAfterThreshold): airlock_sandboxd_tasks_created_total.
	created *prometheus.CounterVec
}

// How a call became a task, the how label of
// airlock_sandboxd_tasks_created_total.
const (
	taskRequested      = "requested"       // the client asked for a task (params.task)
	taskAfterThreshold = "after_threshold" // the call outlived the threshold
)

func NewTaskStore(opts TaskOptions, calls func() *CallTable, logger klog.Logger) *TaskStore {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Threshold <= 0 {
		opts.Threshold = DefaultTaskThreshold
	}
	if opts.Retention <= 0 {
		opts.Retention = DefaultTaskRetention
	}
	if opts.MaxTasks <= 0 {
		opts.MaxTasks = defaultMaxTasks
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = defaultMaxTaskBytes
	}
	base, stop := context.WithCancel(context.Background())
	created := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "airlock", Subsystem: "sandboxd", Name: "tasks_created_total",
		Help: "Tool calls that became tasks (io.modelcontextprotocol/tasks), by how: requested (the client asked for one) or after_threshold (the call outlived the threshold).",
	}, []string{"how"})
	for _, how := range []string{taskRequested, taskAfterThreshold} {
		created.WithLabelValues(how)
	}
	return &TaskStore{opts: opts, calls: calls, logger: logger, base: base, stop: stop, tasks: map[string]*task{}, changed: make(chan struct{}), created: created}
}

// close cancels every call in flight, tasks or not, and waits for them to
// return (their process groups killed), or for ctx.
func (s *TaskStore) close(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true // no call starts after this
	s.mu.Unlock()
	s.stop()
	return waitUntil(ctx, s.wg.Wait, "tasks still running")
}

// waitUntil runs wait and returns once it did, or when ctx is done, with
// an error that says what was still going on.
func waitUntil(ctx context.Context, wait func(), what string) error {
	done := make(chan struct{})
	go func() { wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%s: %w", what, ctx.Err())
	}
}

// count is the number of tasks kept.
func (s *TaskStore) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.tasks)
}

// running is the number of tasks still working.
func (s *TaskStore) running() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, t := range s.order {
		if t.status == TaskWorking {
			n++
		}
	}
	return n
}

// taskCall is a tools/call's params as a task-capable call sends them.
type taskCall struct {
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
	Meta      mcp.Meta        `json:"_meta,omitempty"`
	Task      json.RawMessage `json:"task,omitempty"`
}

// serve answers req when it is the store's: tasks/get, tasks/cancel,
// tasks/update, and a tools/call that may become a task. It reports
// whether it answered; everything else goes to the SDK.
func (s *TaskStore) serve(w http.ResponseWriter, r *http.Request, req *jsonrpc.Request) bool {
	if !req.IsCall() {
		return false
	}
	switch req.Method {
	case "tasks/get", "tasks/cancel", "tasks/update":
		s.serveTaskMethod(w, r, req)
		return true
	case "tools/call":
		return s.serveCall(w, r, req)
	case "subscriptions/listen":
		return s.serveListen(w, r, req)
	}
	return false
}

// taskCallOf decodes req's params when it is a call that may become a
// task: of one of TaskTools, declaring the extension.
func taskCallOf(req *jsonrpc.Request) (*taskCall, bool) {
	// The name first, which decodes nothing else: most calls are not of
	// TaskTools, and their _meta need not be decoded here.
	var named struct {
		Name string `json:"name"`
	}
	if json.Unmarshal(req.Params, &named) != nil || !TaskTools[named.Name] {
		return nil, false
	}
	var p taskCall
	if json.Unmarshal(req.Params, &p) != nil || !TaskTools[p.Name] || !declaresTasks(p.Meta) {
		return nil, false
	}
	return &p, true
}

// acceptCall returns the decoded call and the call table when req is a
// tools/call the task store takes: of a tool of TaskTools that is served,
// declaring the extension, with headers that agree. Anything else is the
// SDK's (which refuses what the headers get wrong, with the same checks).
func (s *TaskStore) acceptCall(r *http.Request, req *jsonrpc.Request) (*taskCall, *CallTable, bool) {
	// A task's call must name its tool in Mcp-Name (headerErr, below): a
	// header that names no tool of TaskTools is either a plain call or one
	// the SDK refuses, and the body need not be decoded to know it.
	if !TaskTools[r.Header.Get("Mcp-Name")] {
		return nil, nil, false
	}
	p, ok := taskCallOf(req)
	if !ok {
		return nil, nil, false
	}
	table := s.calls()
	if table == nil {
		return nil, nil, false
	}
	if _, served := table.handlers[p.Name]; !served {
		return nil, nil, false // the SDK refuses it
	}
	if headerErr(r, req, p.Meta, p.Name) != nil {
		return nil, nil, false
	}
	return p, table, true
}

// serveCall runs a tools/call that may become a task; see the comment at
// the top of this file.
func (s *TaskStore) serveCall(w http.ResponseWriter, r *http.Request, req *jsonrpc.Request) bool {
	p, table, ok := s.acceptCall(r, req)
	if !ok {
		return false
	}
	ctx, cancel := context.WithCancel(s.base)
	now := s.opts.Clock.Now()
	t := &task{id: rand.Text(), createdAt: now, updatedAt: now, status: TaskWorking, done: make(chan struct{}), cancel: cancel}
	params := &mcp.CallToolParamsRaw{Name: p.Name, Arguments: p.Arguments, Meta: p.Meta}
	var res mcp.Result
	var err error
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		cancel()
		return false // shutting down: the SDK's handler answers
	}
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		defer cancel()
		res, err = table.call(ctx, "tools/call", &mcp.CallToolRequest{Params: params})
		if err == nil && res != nil {
			annotateServerInfo(res) // as the SDK's results of 2026-07-28
		}
		close(t.done) // res and err are not written again
		s.finish(t, res, err)
	}()
	asked := len(p.Task) > 0 && string(p.Task) != "null"
	if !asked {
		select {
		case <-t.done:
			writeCallResponse(w, req.ID, res, err, s.logger)
			return true
		case <-r.Context().Done():
			cancel() // the client went away before it had a task: a plain call's fate
			<-t.done
			return true
		case <-s.opts.Clock.After(s.opts.Threshold):
		}
	}
	if !s.add(t) {
		// Finished at the threshold, or the store is full of running
		// tasks: a plain call, then.
		select {
		case <-t.done:
			writeCallResponse(w, req.ID, res, err, s.logger)
		case <-r.Context().Done():
			cancel()
			<-t.done
		}
		return true
	}
	how := taskAfterThreshold
	if asked {
		how = taskRequested
	}
	s.writeCreated(w, req.ID, t, how)
	return true
}

// writeCreated answers a call that became task t (how: taskRequested or
// taskAfterThreshold) with its CreateTaskResult, and counts it.
func (s *TaskStore) writeCreated(w http.ResponseWriter, id jsonrpc.ID, t *task, how string) {
	s.created.WithLabelValues(how).Inc()
	s.mu.Lock()
	view := s.viewLocked(t)
	s.mu.Unlock()
	view["resultType"] = "task"
	// The task named in _meta too, under the key 2025-11-25 used for it: a
	// client that knows no tasks and reads this as a CallToolResult (the Go
	// SDK v1.8.0's does) still has the handle.
	view["_meta"] = map[string]any{mcp.MetaKeyServerInfo: ServerImplementation(), MetaKeyRelatedTask: map[string]any{"taskId": t.id}}
	writeResult(w, id, view)
}

// add keeps t, dropping the oldest finished tasks while the store is full,
// and reports whether it could. A call that has finished already (at the
// threshold) is not added: its POST gets its result.
func (s *TaskStore) add(t *task) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t.status != TaskWorking {
		return false
	}
	for len(s.order) >= s.opts.MaxTasks {
		if !s.dropOldestFinishedLocked() {
			return false
		}
	}
	s.tasks[t.id] = t
	s.order = append(s.order, t)
	return true
}

// finish records how t's call ended. A task whose cancellation was asked
// for is cancelled, whatever its call returned. A task is dropped after the
// retention (the timer is set outside the lock: a fake clock runs it
// within Step).
func (s *TaskStore) finish(t *task, res mcp.Result, err error) {
	if s.record(t, res, err) {
		s.opts.Clock.AfterFunc(s.opts.Retention, func() { s.expire(t) })
	}
}

// record is finish under the lock; it reports whether t is a task.
func (s *TaskStore) record(t *task, res mcp.Result, err error) bool {
	now := s.opts.Clock.Now() // before the lock: a fake clock's Step runs expire under its own
	s.mu.Lock()
	defer s.mu.Unlock()
	t.updatedAt = now
	t.expiresAt = now.Add(s.opts.Retention)
	switch {
	case t.cancelRequested:
		t.status = TaskCancelled
	case err != nil:
		t.status, t.rpcErr = TaskFailed, asRPCError(err)
	default:
		t.status = TaskCompleted
	}
	if s.tasks[t.id] != t {
		return false // a plain call: its POST has the result
	}
	s.changedLocked(t)
	if t.status == TaskCompleted {
		data, merr := json.Marshal(res)
		if merr != nil {
			t.status, t.rpcErr = TaskFailed, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "encoding the result failed: " + merr.Error()}
		}
		t.result = data
	}
	s.bytes += len(t.result)
	for s.bytes > s.opts.MaxBytes && s.dropOldestFinishedLocked() {
	}
	return true
}

// changedLocked records a change of t for the streams that listen.
func (s *TaskStore) changedLocked(t *task) {
	t.version++
	close(s.changed)
	s.changed = make(chan struct{})
}

// expire drops t once its retention has passed.
func (s *TaskStore) expire(t *task) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tasks[t.id] == t {
		s.dropLocked(t)
	}
}

func (s *TaskStore) dropOldestFinishedLocked() bool {
	for _, t := range s.order {
		if t.status != TaskWorking {
			s.dropLocked(t)
			return true
		}
	}
	return false
}

func (s *TaskStore) dropLocked(t *task) {
	s.changedLocked(t)
	delete(s.tasks, t.id)
	for i, o := range s.order {
		if o == t {
			s.order = append(s.order[:i], s.order[i+1:]...)
			break
		}
	}
	s.bytes -= len(t.result)
}

// serveTaskMethod answers tasks/get, tasks/cancel and tasks/update.
func (s *TaskStore) serveTaskMethod(w http.ResponseWriter, r *http.Request, req *jsonrpc.Request) {
	var p struct {
		TaskID string   `json:"taskId"`
		Meta   mcp.Meta `json:"_meta"`
	}
	if err := json.Unmarshal(req.Params, &p); err != nil || p.TaskID == "" {
		writeStatelessError(w, req.ID, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: req.Method + " needs params.taskId, a string"})
		return
	}
	if err := headerErr(r, req, p.Meta, p.TaskID); err != nil {
		writeError(w, http.StatusBadRequest, req.ID, err)
		return
	}
	if !declaresTasks(p.Meta) {
		writeMissingTasksCapability(w, req.ID)
		return
	}
	s.mu.Lock()
	t, ok := s.tasks[p.TaskID]
	var view map[string]any
	if ok {
		if req.Method == "tasks/cancel" && t.status == TaskWorking && !t.cancelRequested {
			t.cancelRequested = true
			t.cancel()
			s.changedLocked(t)
		}
		view = s.viewLocked(t)
	}
	s.mu.Unlock()
	if !ok {
		writeStatelessError(w, req.ID, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "Failed to retrieve task: task not found (unknown, or dropped after its retention)"})
		return
	}
	if req.Method == "tasks/get" {
		view["_meta"] = map[string]any{mcp.MetaKeyServerInfo: ServerImplementation()}
	} else {
		view = map[string]any{} // an empty acknowledgement (no _meta, as the SDK's)
	}
	view["resultType"] = "complete"
	writeResult(w, req.ID, view)
}

// viewLocked is t as tasks/get shows it.
func (s *TaskStore) viewLocked(t *task) map[string]any {
	v := map[string]any{
		"taskId":         t.id,
		"status":         t.status,
		"createdAt":      t.createdAt.UTC().Format(time.RFC3339Nano),
		"lastUpdatedAt":  t.updatedAt.UTC().Format(time.RFC3339Nano),
		"pollIntervalMs": TaskPollInterval.Milliseconds(),
		"ttlMs":          nil, // running: kept until it ends, then for the retention
	}
	if !t.expiresAt.IsZero() {
		v["ttlMs"] = t.expiresAt.Sub(t.createdAt).Milliseconds()
	}
	switch {
	case t.status == TaskWorking && t.cancelRequested:
		v["statusMessage"] = "cancellation requested: its processes are being killed"
	case t.status == TaskCompleted:
		v["result"] = t.result
	case t.status == TaskFailed:
		v["error"] = t.rpcErr
		v["statusMessage"] = t.rpcErr.Message
	case t.status == TaskCancelled:
		v["statusMessage"] = "cancelled by tasks/cancel; its processes were killed"
	}
	return v
}
