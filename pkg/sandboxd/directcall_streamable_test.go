package sandboxd

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/sandboxdtest"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/wire"
	"github.com/airlock-dev/airlock/pkg/toolnames"
)

// normalReply is a reply's message with what may differ between two runs of
// the same call (how long Bash ran) set to zero.
func normalReply(t *testing.T, r sandboxdtest.MCPReply) any {
	t.Helper()
	data, err := json.Marshal(r.Msg)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(durationMS.ReplaceAll(data, []byte(`"duration_ms":0`)), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestStreamableDirectCallsAnswerAsTheSDK sends each call twice, on each
// revision of /mcp: as a client sends it, which the direct path takes, and
// with a _meta key of the protocol's own that the SDK ignores, which sends
// it to the SDK. The two answers are the same JSON-RPC message, and the
// direct path took exactly the first of each pair.
func TestStreamableDirectCallsAnswerAsTheSDK(t *testing.T) {
	ts := startServer(t, Config{}, options{})
	if err := os.WriteFile(filepath.Join(ts.ws, "a.txt"), []byte("<b>&amp;</b> \u2028 é \"q\" \\ \x01\nline 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	session := sandboxdtest.OpenStatefulSession(t, ts.url)
	for _, revision := range []string{wire.ProtocolStateless, "2025-11-25"} {
		for _, tc := range directCallCases {
			t.Run(revision+"/"+tc.name, func(t *testing.T) {
				header, meta := sandboxdtest.SessionHeaders(session), cmp.Or(tc.meta, "{}")
				if revision == wire.ProtocolStateless {
					header, meta = sandboxdtest.StatelessHeaders(tc.tool), joinObjects(sandboxdtest.StatelessCallMeta, meta)
				}
				body := func(meta string) string {
					return fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":"tools/call","params":{"_meta":%s,"name":%q,"arguments":%s}}`, tc.id, meta, tc.tool, tc.args)
				}
				before := ts.streamable.DirectTaken()
				direct := sandboxdtest.PostMCP(t.Context(), t, ts.url, header, body(meta))
				if got := ts.streamable.DirectTaken() - before; got != 1 {
					t.Fatalf("direct calls = %d, want 1 (reply %d %v)", got, direct.Status, direct.Msg)
				}
				viaSDK := sandboxdtest.PostMCP(t.Context(), t, ts.url, header, body(joinObjects(meta, `{"io.modelcontextprotocol/test":true}`)))
				if got := ts.streamable.DirectTaken() - before; got != 1 {
					t.Fatalf("direct calls = %d after the call for the SDK, want 1", got)
				}
				if direct.Status != viaSDK.Status || direct.Status != http.StatusOK {
					t.Errorf("HTTP %d direct, %d via the SDK", direct.Status, viaSDK.Status)
				}
				if d, s := normalReply(t, direct), normalReply(t, viaSDK); !reflect.DeepEqual(d, s) {
					t.Errorf("direct:  %v\nvia SDK: %v", d, s)
				}
				if direct.ContentType != "application/json" {
					t.Errorf("direct answer's Content-Type = %q", direct.ContentType)
				}
			})
		}
	}
}

// joinObjects joins the members of two JSON objects, written out.
func joinObjects(a, b string) string {
	a, b = strings.TrimSpace(a), strings.TrimSpace(b)
	switch {
	case a == "{}":
		return b
	case b == "{}":
		return a
	}
	return strings.TrimSuffix(a, "}") + "," + strings.TrimPrefix(b, "{")
}

// TestStreamableSessionIdleTimeout: a stateful session is closed once no
// POST of it has been in flight for the idle timeout, whichever path
// served its POSTs (the direct path's do not pass through the SDK, whose
// own timer is off), and never while one is in flight.
func TestStreamableSessionIdleTimeout(t *testing.T) {
	fc := clocktesting.NewFakeClock(time.Date(2026, 7, 28, 12, 0, 0, 0, time.UTC))
	opts := defaultOptions()
	opts.sessionTimeout = time.Minute
	opts.clock = fc
	ts := startServer(t, Config{}, opts)
	session := sandboxdtest.OpenStatefulSession(t, ts.url)
	sandboxdtest.WaitFor(t, "the session's idle timer", fc.HasWaiters)
	fifo := sandboxdtest.Mkfifo(t, ts.ws, "gate")

	// A direct call in flight: the timer stops, and a step past the
	// timeout closes nothing.
	replied := make(chan sandboxdtest.MCPReply, 1)
	go func() {
		replied <- sandboxdtest.PostMCP(context.Background(), t, ts.url, sandboxdtest.SessionHeaders(session),
			`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"Bash","arguments":{"command":"read line < gate; echo $line"}}}`)
	}()
	sandboxdtest.WaitFor(t, "the timer stopped for the POST in flight", func() bool { return !fc.HasWaiters() })
	fc.Step(2 * time.Minute)
	if n := countSessions(ts.mcp); n != 1 {
		t.Fatalf("%d sessions while a call was in flight, want 1", n)
	}
	w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(w, "done")
	w.Close()
	if r := <-replied; !strings.Contains(fmt.Sprint(r.Msg), "done") {
		t.Fatalf("reply %d %v", r.Status, r.Msg)
	}
	if n := ts.streamable.DirectTaken(); n != 1 {
		t.Fatalf("direct calls = %d, want 1", n)
	}

	// Idle again: just short of the timeout it stays, at it it is closed.
	sandboxdtest.WaitFor(t, "the idle timer restarted", fc.HasWaiters)
	fc.Step(time.Minute - time.Second)
	if n := countSessions(ts.mcp); n != 1 {
		t.Fatalf("%d sessions before the timeout, want 1", n)
	}
	fc.Step(time.Second)
	sandboxdtest.WaitFor(t, "the idle session closed", func() bool { return countSessions(ts.mcp) == 0 && ts.streamable.TrackedSessions() == 0 })
	if r := sandboxdtest.PostMCP(t.Context(), t, ts.url, sandboxdtest.SessionHeaders(session), `{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"LS","arguments":{}}}`); r.Status != http.StatusNotFound {
		t.Errorf("a call of the closed session = %d %v, want 404", r.Status, r.Msg)
	}
}

// TestStatelessIgnoresASessionID: a stray Mcp-Session-Id on a 2026-07-28
// request (unknown, or a live session's) is ignored: the call is answered
// as without it, on the direct path, and the session is left as it was.
func TestStatelessIgnoresASessionID(t *testing.T) {
	ts := startServer(t, Config{}, options{})
	session := sandboxdtest.OpenStatefulSession(t, ts.url)
	body := `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"_meta":` + sandboxdtest.StatelessCallMeta + `,"name":"LS","arguments":{}}}`
	want := sandboxdtest.PostMCP(t.Context(), t, ts.url, sandboxdtest.StatelessHeaders(toolnames.LS), body)
	for _, id := range []string{"nope", session} {
		header := sandboxdtest.StatelessHeaders(toolnames.LS)
		header["Mcp-Session-Id"] = id
		before := ts.streamable.DirectTaken()
		got := sandboxdtest.PostMCP(t.Context(), t, ts.url, header, body)
		if n := ts.streamable.DirectTaken() - before; n != 1 || !reflect.DeepEqual(normalReply(t, got), normalReply(t, want)) {
			t.Errorf("with session id %q: %d direct, answer %v, want %v", id, n, got.Msg, want.Msg)
		}
	}
	if n := countSessions(ts.mcp); n != 1 {
		t.Errorf("%d sessions, want the one opened", n)
	}
}
