package wire

import (
	"encoding/json"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Task status notifications (the extension's notifications/tasks), on a
// stateless subscriptions/listen stream that asks for them
// (params.notifications.taskIds; docs/sandboxd-tools.md, "Tasks").
//
// The stream is an event stream in the listen POST's answer: first
// notifications/subscriptions/acknowledged with the task ids agreed (those
// the store holds; sandboxd offers no other subscription, so nothing else
// is agreed, as the SDK would agree nothing else), then, for each agreed
// task, its state at once and again at every change (a notifications/tasks
// with what tasks/get would answer), until every agreed task has ended (or
// been dropped): then the listen request's result ends the stream. The
// client closing the stream ends it too; shutdown ends it with the result.
// A listen without taskIds is the SDK's, as before.

// listenParams are the parts of a subscriptions/listen request the tasks
// extension reads.
type listenParams struct {
	Meta          mcp.Meta `json:"_meta"`
	Notifications *struct {
		TaskIDs []string `json:"taskIds"`
	} `json:"notifications"`
}

// serveListen answers a subscriptions/listen that asks for task status
// notifications, and reports whether it did.
func (s *TaskStore) serveListen(w http.ResponseWriter, r *http.Request, req *jsonrpc.Request) bool {
	var p listenParams
	if json.Unmarshal(req.Params, &p) != nil || p.Notifications == nil || p.Notifications.TaskIDs == nil {
		return false // not ours: the SDK answers it
	}
	if err := headerErr(r, req, p.Meta, ""); err != nil {
		writeError(w, http.StatusBadRequest, req.ID, err)
		return true
	}
	if !declaresTasks(p.Meta) {
		writeMissingTasksCapability(w, req.ID)
		return true
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		writeError(w, http.StatusOK, req.ID, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "streaming is not supported on this connection"})
		return true
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return false
	}
	s.wg.Add(1)
	agreed := s.agreedLocked(p.Notifications.TaskIDs)
	s.mu.Unlock()
	defer s.wg.Done()

	subscription := map[string]any{mcp.MetaKeySubscriptionID: req.ID.Raw()}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache, no-transform")
	w.WriteHeader(http.StatusOK)
	s.writeEvent(w, map[string]any{"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
		"params": map[string]any{"notifications": map[string]any{"taskIds": agreed}, "_meta": subscription}})
	s.streamTasks(w, flusher, r, agreed, subscription)
	result := map[string]any{"resultType": "complete", "_meta": map[string]any{
		mcp.MetaKeySubscriptionID: req.ID.Raw(), mcp.MetaKeyServerInfo: ServerImplementation()}}
	s.writeEvent(w, map[string]any{"jsonrpc": "2.0", "id": req.ID.Raw(), "result": result})
	flusher.Flush()
	return true
}

// agreedLocked is the ids of asked that the store holds, each once, in
// the order asked.
func (s *TaskStore) agreedLocked(asked []string) []string {
	agreed := []string{}
	seen := map[string]bool{}
	for _, id := range asked {
		if _, ok := s.tasks[id]; ok && !seen[id] {
			seen[id] = true
			agreed = append(agreed, id)
		}
	}
	return agreed
}

// streamTasks sends the state of each of ids, at once and at every change,
// until they have all ended or been dropped, the client goes, or the store
// closes.
func (s *TaskStore) streamTasks(w http.ResponseWriter, flusher http.Flusher, r *http.Request, ids []string, subscription map[string]any) {
	sent := map[string]int{} // the version last sent, by id
	for {
		s.mu.Lock()
		var views []map[string]any
		open := 0
		for _, id := range ids {
			t, kept := s.tasks[id]
			if !kept {
				continue // dropped: nothing more to tell
			}
			if v, ok := sent[id]; !ok || v != t.version {
				sent[id] = t.version
				view := s.viewLocked(t)
				view["_meta"] = subscription
				views = append(views, view)
			}
			if t.status == TaskWorking {
				open++
			}
		}
		changed := s.changed
		s.mu.Unlock()
		for _, view := range views {
			s.writeEvent(w, map[string]any{"jsonrpc": "2.0", "method": "notifications/tasks", "params": view})
		}
		flusher.Flush()
		if open == 0 {
			return
		}
		select {
		case <-changed:
		case <-r.Context().Done():
			return
		case <-s.base.Done():
			return
		}
	}
}

// writeEvent writes msg as one `event: message` of an event stream, as the
// SDK writes its own.
func (s *TaskStore) writeEvent(w http.ResponseWriter, msg map[string]any) {
	data, err := json.Marshal(msg)
	if err != nil {
		s.logger.Error(err, "Encoding a task notification failed")
		return
	}
	_, _ = w.Write(append(append([]byte("event: message\ndata: "), data...), '\n', '\n'))
}

// writeMissingTasksCapability answers -32021: the request needs the tasks
// extension, which it does not declare.
func writeMissingTasksCapability(w http.ResponseWriter, id jsonrpc.ID) {
	data, _ := json.Marshal(map[string]any{"requiredCapabilities": map[string]any{"extensions": map[string]any{TasksExtension: map[string]any{}}}})
	writeStatelessError(w, id, &jsonrpc.Error{Code: mcp.CodeMissingRequiredClientCapabilities,
		Message: "Missing required client capability: the extension " + TasksExtension, Data: data})
}
