package wire

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"k8s.io/klog/v2"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/sandboxdtest"
	"github.com/airlock-dev/airlock/pkg/toolnames"
)

// TestStatelessMetaKept: checkStatelessMeta keeps the last _meta of the
// protocol's keys only and answers the same bytes with a copy of it (a
// change to one call's _meta is not the next call's), never for another
// version; a _meta with keys of the client's own is decoded every time; a
// refused one stays refused.
func TestStatelessMetaKept(t *testing.T) {
	d := newStreamableDirect(func() *CallTable { return nil }, klog.Background())
	const triple = `{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"c","version":"1"}}`
	first, ok := d.checkStatelessMeta(json.RawMessage(triple), ProtocolStateless)
	if !ok || first[mcp.MetaKeyProtocolVersion] != ProtocolStateless || len(first) != 3 {
		t.Fatalf("first _meta = %v, %v", first, ok)
	}
	if d.lastMeta.Load() == nil {
		t.Fatal("the protocol's _meta was not kept")
	}
	first["changed"] = true
	second, ok := d.checkStatelessMeta(json.RawMessage(triple), ProtocolStateless)
	if !ok || len(second) != 3 || second["changed"] != nil {
		t.Errorf("second _meta = %v, %v; want the first as it was decoded", second, ok)
	}
	if want := (mcp.Meta{
		mcp.MetaKeyProtocolVersion:    ProtocolStateless,
		mcp.MetaKeyClientCapabilities: json.RawMessage(`{}`),
		mcp.MetaKeyClientInfo:         json.RawMessage(`{"name":"c","version":"1"}`),
	}); !reflect.DeepEqual(want, second) {
		t.Errorf("kept _meta = %v, want %v", second, want)
	}
	second["changed"] = true // a copy of the kept one: the next call's is as decoded
	if third, _ := d.checkStatelessMeta(json.RawMessage(triple), ProtocolStateless); len(third) != 3 || third["changed"] != nil {
		t.Errorf("third _meta = %v; want the first as it was decoded", third)
	}
	if m, ok := d.checkStatelessMeta(json.RawMessage(triple), "2026-08-01"); ok {
		t.Errorf("the kept _meta answered another version: %v", m)
	}
	withOwn := `{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"agent/tool-use-id":{"n":1}}`
	kept := d.lastMeta.Load()
	own, ok := d.checkStatelessMeta(json.RawMessage(withOwn), ProtocolStateless)
	if !ok || own["agent/tool-use-id"] == nil {
		t.Fatalf("_meta with a key of the client's = %v, %v", own, ok)
	}
	if d.lastMeta.Load() != kept {
		t.Error("a _meta with a key of the client's own was kept")
	}
	own["agent/tool-use-id"].(map[string]any)["n"] = 2
	again, _ := d.checkStatelessMeta(json.RawMessage(withOwn), ProtocolStateless)
	if fmt.Sprint(again["agent/tool-use-id"]) != "map[n:1]" {
		t.Errorf("the client's key decoded again = %v, want it as sent", again["agent/tool-use-id"])
	}
	for name, bad := range map[string]string{
		"version differs": `{"io.modelcontextprotocol/protocolVersion":"2025-11-25","io.modelcontextprotocol/clientCapabilities":{}}`,
		"no capabilities": `{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}`,
		"log level":       `{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/logLevel":"debug"}`,
	} {
		for range 2 {
			if m, ok := d.checkStatelessMeta(json.RawMessage(bad), ProtocolStateless); ok {
				t.Errorf("%s: accepted %v", name, m)
			}
		}
	}
}

// TestStreamableDirectCallCancelled: a stateful session's direct call is
// cancelled by a notifications/cancelled that names it, and by the
// session's end (DELETE); either way its process group dies and its POST
// is answered. A second call with the id of one in flight is refused.
func TestStreamableDirectCallCancelled(t *testing.T) {
	ts := startServer(t, testOptions{})
	session := sandboxdtest.OpenStatefulSession(t, ts.url)
	start := func(id, dir string) (chan sandboxdtest.MCPReply, []int) {
		call := fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":"tools/call","params":{"name":"Bash","arguments":{"command":"mkdir -p %[2]s; echo $$ > %[2]s/leader.pid; sleep 300 & echo $! > %[2]s/bg.pid; wait"}}}`, id, dir)
		replied := make(chan sandboxdtest.MCPReply, 1)
		go func() {
			replied <- sandboxdtest.PostMCP(context.Background(), t, ts.url, sandboxdtest.SessionHeaders(session), call)
		}()
		return replied, []int{sandboxdtest.ReadPID(t, filepath.Join(ts.ws, dir, "leader.pid")), sandboxdtest.ReadPID(t, filepath.Join(ts.ws, dir, "bg.pid"))}
	}
	awaitReply := func(replied chan sandboxdtest.MCPReply, id string) {
		t.Helper()
		select {
		case r := <-replied:
			if got, _ := json.Marshal(r.Msg["id"]); string(got) != id {
				t.Errorf("reply %d %v, want one for id %s", r.Status, r.Msg, id)
			}
		case <-time.After(testTimeout):
			t.Fatal("the cancelled call was not answered")
		}
	}
	for _, id := range []string{`21`, `"c-21"`} {
		dir := fmt.Sprintf("d%d", len(id))
		replied, pids := start(id, dir)
		dup := sandboxdtest.PostMCP(t.Context(), t, ts.url, sandboxdtest.SessionHeaders(session), `{"jsonrpc":"2.0","id":`+id+`,"method":"tools/call","params":{"name":"LS","arguments":{}}}`)
		if dup.Status != http.StatusBadRequest || sandboxdtest.ErrorCode(dup.Msg) != -32600 {
			t.Errorf("a second call with id %s in flight = %d %v, want 400 and -32600", id, dup.Status, dup.Msg)
		}
		if r := sandboxdtest.PostMCP(t.Context(), t, ts.url, sandboxdtest.SessionHeaders(session), `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":`+id+`,"reason":"test"}}`); r.Status != http.StatusAccepted {
			t.Fatalf("notifications/cancelled = %d %v", r.Status, r.Msg)
		}
		sandboxdtest.WaitDead(t, pids...)
		awaitReply(replied, id)
	}
	if n := ts.streamable.DirectTaken(); n != 2 {
		t.Errorf("direct calls = %d, want 2", n)
	}

	// The session's end cancels its calls.
	replied, pids := start(`31`, "del")
	req, err := http.NewRequestWithContext(t.Context(), http.MethodDelete, ts.url+"/mcp", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Mcp-Session-Id", session)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE = %d", resp.StatusCode)
	}
	sandboxdtest.WaitDead(t, pids...)
	awaitReply(replied, `31`)
	if r := sandboxdtest.PostMCP(t.Context(), t, ts.url, sandboxdtest.SessionHeaders(session), `{"jsonrpc":"2.0","id":40,"method":"tools/call","params":{"name":"LS","arguments":{}}}`); r.Status != http.StatusNotFound {
		t.Errorf("a call of the deleted session = %d %v, want 404", r.Status, r.Msg)
	}
}

// TestStatelessDirectCallEndsWithItsPOST: a stateless direct call runs as
// long as its POST: the client going away kills its process group; so does
// shutdown, which waits for it.
func TestStatelessDirectCallEndsWithItsPOST(t *testing.T) {
	ts := startServer(t, testOptions{})
	call := func(dir string) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":%s,"name":"Bash","arguments":{"command":"mkdir -p %[2]s; echo $$ > %[2]s/leader.pid; sleep 300 & echo $! > %[2]s/bg.pid; wait"}}}`, sandboxdtest.StatelessCallMeta, dir)
	}
	ctx, cancel := context.WithCancel(t.Context())
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, ts.url+"/mcp", strings.NewReader(call("a")))
		if err != nil {
			return
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		for k, v := range sandboxdtest.StatelessHeaders(toolnames.Bash) {
			req.Header.Set(k, v)
		}
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	pids := []int{sandboxdtest.ReadPID(t, filepath.Join(ts.ws, "a", "leader.pid")), sandboxdtest.ReadPID(t, filepath.Join(ts.ws, "a", "bg.pid"))}
	cancel()
	<-gone
	sandboxdtest.WaitDead(t, pids...)
	if n := ts.streamable.DirectTaken(); n != 1 {
		t.Errorf("direct calls = %d, want 1", n)
	}

	replied := make(chan sandboxdtest.MCPReply, 1)
	go func() {
		replied <- sandboxdtest.PostMCP(context.Background(), t, ts.url, sandboxdtest.StatelessHeaders(toolnames.Bash), call("b"))
	}()
	pids = []int{sandboxdtest.ReadPID(t, filepath.Join(ts.ws, "b", "leader.pid")), sandboxdtest.ReadPID(t, filepath.Join(ts.ws, "b", "bg.pid"))}
	sctx, scancel := context.WithTimeout(t.Context(), testTimeout)
	defer scancel()
	if err := ts.streamable.CloseDirect(sctx); err != nil {
		t.Fatal(err)
	}
	if sandboxdtest.Alive(pids[0]) {
		t.Errorf("the call's shell %d is alive after the direct path closed", pids[0])
	}
	sandboxdtest.WaitDead(t, pids[1])
	<-replied
	// Closed: a new call goes to the SDK.
	before := ts.streamable.DirectTaken()
	sandboxdtest.PostMCP(t.Context(), t, ts.url, sandboxdtest.StatelessHeaders(toolnames.LS), `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"_meta":`+sandboxdtest.StatelessCallMeta+`,"name":"LS","arguments":{}}}`)
	if n := ts.streamable.DirectTaken(); n != before {
		t.Errorf("a call after close took the direct path")
	}
}

// TestStatelessCancelNoticeIsIgnored: at 2026-07-28 a client cancels a
// call by closing its POST (TestStatelessDirectCallEndsWithItsPOST); a
// notifications/cancelled in a POST of its own names a request id that,
// with no session, could be any client's, and is ignored, as the SDK
// ignores it: the call it names runs to its end.
func TestStatelessCancelNoticeIsIgnored(t *testing.T) {
	ts := startServer(t, testOptions{})
	fifo := sandboxdtest.Mkfifo(t, ts.ws, "gate")
	replied := make(chan sandboxdtest.MCPReply, 1)
	go func() {
		replied <- sandboxdtest.PostMCP(context.Background(), t, ts.url, sandboxdtest.StatelessHeaders(toolnames.Bash),
			`{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"_meta":`+sandboxdtest.StatelessCallMeta+`,"name":"Bash","arguments":{"command":"echo $$ > leader.pid; read line < gate; echo \"got $line\""}}}`)
	}()
	sandboxdtest.ReadPID(t, filepath.Join(ts.ws, "leader.pid")) // the call runs
	notice := sandboxdtest.PostMCP(t.Context(), t, ts.url, map[string]string{"Mcp-Protocol-Version": ProtocolStateless, "Mcp-Method": "notifications/cancelled"},
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"_meta":`+sandboxdtest.StatelessCallMeta+`,"requestId":9,"reason":"test"}}`)
	if notice.Status != http.StatusAccepted {
		t.Errorf("the notice = %d %v, want 202", notice.Status, notice.Msg)
	}
	w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(w, "through")
	w.Close()
	r := <-replied
	if !strings.Contains(fmt.Sprint(r.Msg), "got through") {
		t.Errorf("the call named by the notice = %d %v, want its own end", r.Status, r.Msg)
	}
}

// TestStreamableDirectAnswerHasItsLength: a direct call's answer, on both
// revisions, says its length and is not chunked, also when it is longer
// than net/http's buffer (a Read of a 20 KiB file), and the body is that
// long.
func TestStreamableDirectAnswerHasItsLength(t *testing.T) {
	ts := startServer(t, testOptions{})
	if err := os.WriteFile(filepath.Join(ts.ws, "big.txt"), []byte(strings.Repeat("a line of the file\n", 1100)), 0o644); err != nil {
		t.Fatal(err)
	}
	session := sandboxdtest.OpenStatefulSession(t, ts.url)
	for _, c := range []struct {
		name   string
		header map[string]string
		meta   string
	}{
		{"2026-07-28", sandboxdtest.StatelessHeaders(toolnames.Read), `,"_meta":` + sandboxdtest.StatelessCallMeta},
		{"2025-11-25", sandboxdtest.SessionHeaders(session), ""},
	} {
		for _, file := range []string{"big.txt", "missing.txt"} {
			before := ts.streamable.DirectTaken()
			req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, ts.url+"/mcp", strings.NewReader(
				`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"Read","arguments":{"file_path":"`+file+`"}`+c.meta+`}}`))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			for k, v := range c.header {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			data, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			if ts.streamable.DirectTaken() != before+1 {
				t.Fatalf("%s %s: the direct path did not take the call", c.name, file)
			}
			if resp.StatusCode != http.StatusOK || resp.ContentLength != int64(len(data)) || len(resp.TransferEncoding) != 0 {
				t.Errorf("%s %s: status %d, Content-Length %d, Transfer-Encoding %v, body of %d bytes; want 200, the body's length, not chunked",
					c.name, file, resp.StatusCode, resp.ContentLength, resp.TransferEncoding, len(data))
			}
			if file == "big.txt" && len(data) < 20000 {
				t.Errorf("%s: the answer to a Read of big.txt is %d bytes, want the whole file", c.name, len(data))
			}
		}
	}
}

// TestStreamableDirectPathLeavesTheRestToTheSDK: what the direct path does
// not take is answered by the SDK as before (a refusal, for most), and
// nothing refused runs.
func TestStreamableDirectPathLeavesTheRestToTheSDK(t *testing.T) {
	ts := startServer(t, testOptions{served: []string{toolnames.Read, toolnames.Write}})
	session := sandboxdtest.OpenStatefulSession(t, ts.url)
	write := func(meta, file string) string {
		return `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"_meta":` + meta + `,"name":"Write","arguments":{"file_path":"` + file + `","content":"x"}}}`
	}
	with := func(h map[string]string, k, v string) map[string]string {
		out := map[string]string{}
		for hk, hv := range h {
			out[hk] = hv
		}
		out[k] = v
		return out
	}
	stateless := sandboxdtest.StatelessHeaders(toolnames.Write)
	cases := map[string]struct {
		header map[string]string
		body   string
		runs   bool // the SDK runs it (the direct path only leaves it)
	}{ // each call writes (or touches) the file named in its body: f1, f2, ...
		"stateless: no Mcp-Name":           {header: with(stateless, "Mcp-Name", ""), body: write(sandboxdtest.StatelessCallMeta, "f1")},
		"stateless: Mcp-Name another tool": {header: with(stateless, "Mcp-Name", "Read"), body: write(sandboxdtest.StatelessCallMeta, "f2")},
		"stateless: no Mcp-Method":         {header: with(stateless, "Mcp-Method", ""), body: write(sandboxdtest.StatelessCallMeta, "f3")},
		"stateless: Accept without event streams": {header: with(stateless, "Accept", "application/json"),
			body: write(sandboxdtest.StatelessCallMeta, "f4")},
		"stateless: no Content-Type": {header: with(stateless, "Content-Type", ""), body: write(sandboxdtest.StatelessCallMeta, "f5")},
		"stateless: no client capabilities": {header: stateless,
			body: write(`{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}`, "f6")},
		"stateless: capabilities that do not decode": {header: stateless,
			body: write(`{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"roots":5}}`, "f7")},
		"stateless: client info that does not decode": {header: stateless,
			body: write(`{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":5}`, "f8")},
		"stateless: _meta version not the header's": {header: stateless,
			body: write(`{"io.modelcontextprotocol/protocolVersion":"2025-11-25","io.modelcontextprotocol/clientCapabilities":{}}`, "f9")},
		"stateless: a log level": {header: stateless, runs: true,
			body: write(`{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/logLevel":"debug"}`, "f10")},
		"stateless: a param header": {header: with(stateless, "Mcp-Param-Mode", "x"), body: write(sandboxdtest.StatelessCallMeta, "f11"), runs: true},
		"stateless: Last-Event-ID":  {header: with(stateless, "Last-Event-ID", "1"), body: write(sandboxdtest.StatelessCallMeta, "f12")},
		"stateless: a tool not served": {header: with(stateless, "Mcp-Name", "Bash"),
			body: `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"_meta":` + sandboxdtest.StatelessCallMeta + `,"name":"Bash","arguments":{"command":"touch f13"}}}`},
		"session: unknown session":     {header: sandboxdtest.SessionHeaders("nope"), body: write(`{}`, "f14")},
		"session: Accept without JSON": {header: with(sandboxdtest.SessionHeaders(session), "Accept", "text/event-stream"), body: write(`{}`, "f15")},
		"session: a revision not served": {header: with(sandboxdtest.SessionHeaders(session), "Mcp-Protocol-Version", "1999-01-01"),
			body: write(`{}`, "f16")},
		"session: a name in another case": {header: sandboxdtest.SessionHeaders(session),
			body: `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"Name":"Write","arguments":{"file_path":"f17","content":"x"}}}`},
		"session: input responses": {header: sandboxdtest.SessionHeaders(session),
			body: `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"Write","arguments":{"file_path":"f18","content":"x"},"inputResponses":{}}}`, runs: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			before := ts.streamable.DirectTaken()
			r := sandboxdtest.PostMCP(t.Context(), t, ts.url, tc.header, tc.body)
			if got := ts.streamable.DirectTaken() - before; got != 0 {
				t.Fatalf("the direct path took it (reply %d %v)", r.Status, r.Msg)
			}
			file := fileOf.FindString(tc.body)
			_, err := os.Stat(filepath.Join(ts.ws, file))
			switch {
			case tc.runs && err != nil:
				t.Errorf("the SDK did not run it: %d %v (%v)", r.Status, r.Msg, err)
			case !tc.runs && err == nil:
				t.Errorf("it ran: %d %v", r.Status, r.Msg)
			case !tc.runs && r.Status == http.StatusOK && r.Msg["error"] == nil && !strings.Contains(fmt.Sprint(r.Msg["result"]), "isError:true"):
				t.Errorf("answer %d %v, want a refusal", r.Status, r.Msg)
			}
		})
	}
}

// fileOf finds the file a call of TestStreamableDirectPathLeavesTheRestToTheSDK writes.
var fileOf = regexp.MustCompile(`\bf[0-9]+\b`)
