package sandboxd

import (
	"net/http"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-dev/airlock/pkg/record"
	"github.com/airlock-dev/airlock/pkg/toolnames"
	"github.com/airlock-dev/airlock/pkg/traceparent"
)

const (
	headerParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	metaParent   = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
)

// TestToolCallsJoinTheCallersTrace: a tools/call's traceparent (params._meta, which wins, else
// the HTTP header) puts the call in the caller's trace: its tool.call entry carries the trace, a
// span of its own and the caller's span as parent; its file.write and process entries are spans
// of their own under the call's; the process got TRACEPARENT of the call's span and a proxy URL
// whose user name names it before the credential's; a malformed or unsampled traceparent is
// ignored (no ids), never an error.
func TestToolCallsJoinTheCallersTrace(t *testing.T) {
	processGetenv = func(name string) string {
		if name == "HTTPS_PROXY" {
			return "http://team-a.claim-1:secret-credential@10.0.0.9:3128"
		}
		return ""
	}
	t.Cleanup(func() { processGetenv = noEnv })
	ts := tokenServer(t)
	client := &http.Client{Transport: headerTransport{"Authorization": "Bearer tok", "Traceparent": headerParent}}
	cs := connect(t, &mcp.StreamableClientTransport{Endpoint: ts.url + "/mcp", HTTPClient: client, MaxRetries: -1}, nil)
	call := func(name string, meta mcp.Meta, args map[string]any) string {
		t.Helper()
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Meta: meta, Name: name, Arguments: args})
		if err != nil || res.IsError {
			t.Fatalf("%s: %v %+v", name, err, res)
		}
		return res.Content[0].(*mcp.TextContent).Text
	}
	call(toolnames.Write, mcp.Meta{"traceparent": metaParent}, map[string]any{"file_path": "a.txt", "content": "hi\n"})
	out := call(toolnames.Bash, nil, map[string]any{"command": `echo "tp=$TRACEPARENT"; u=${HTTPS_PROXY#http://}; echo "user=${u%%:*}"; [ "${u#*:}" = secret-credential@10.0.0.9:3128 ] && echo rest-unchanged`})
	call(toolnames.Read, mcp.Meta{"traceparent": "00-zz"}, map[string]any{"file_path": "a.txt"})                                   // malformed: the header's
	call(toolnames.Read, mcp.Meta{"traceparent": strings.TrimSuffix(metaParent, "1") + "0"}, map[string]any{"file_path": "a.txt"}) // unsampled: none

	_, entries := readRecord(t, ts.url, "tok", "")
	byKind := map[string][]record.Entry{}
	for _, e := range entries {
		byKind[e.Kind] = append(byKind[e.Kind], e)
	}
	calls, files, procs := byKind[record.KindToolCall], byKind[record.KindFileWrite], byKind[record.KindProcess]
	if len(calls) != 4 || len(files) != 1 || len(procs) != 1 {
		t.Fatalf("entries %+v", entries)
	}
	meta, _ := traceparent.Parse(metaParent)
	header, _ := traceparent.Parse(headerParent)
	write, bash, malformed, unsampled := calls[0], calls[1], calls[2], calls[3]
	if write.Trace != meta.Trace.String() || write.Parent != meta.Span.String() || len(write.Span) != 16 || write.Span == meta.Span.String() {
		t.Errorf("Write's call %+v: want the _meta's trace, its span as parent, a span of its own", write)
	}
	if files[0].Trace != write.Trace || files[0].Parent != write.Span || files[0].Span == write.Span || len(files[0].Span) != 16 {
		t.Errorf("file.write %+v: want a span of its own under the Write's (%s)", files[0], write.Span)
	}
	if bash.Trace != header.Trace.String() || bash.Parent != header.Span.String() {
		t.Errorf("Bash's call %+v: want the header's trace and span as parent", bash)
	}
	if procs[0].Trace != bash.Trace || procs[0].Parent != bash.Span || procs[0].Span == bash.Span {
		t.Errorf("process %+v: want a span of its own under the Bash's (%s)", procs[0], bash.Span)
	}
	if malformed.Trace != header.Trace.String() || malformed.Parent != header.Span.String() {
		t.Errorf("a malformed _meta traceparent: call %+v, want the header's", malformed)
	}
	if unsampled.Trace != "" || unsampled.Span != "" || unsampled.Parent != "" {
		t.Errorf("an unsampled traceparent: call %+v, want no ids", unsampled)
	}
	wantTP := "00-" + bash.Trace + "-" + bash.Span + "-01"
	if !strings.Contains(out, "tp="+wantTP+"\n") {
		t.Errorf("Bash output %q: want TRACEPARENT %s (the call's span)", out, wantTP)
	}
	_, user, _ := strings.Cut(out, "user=")
	user, _, _ = strings.Cut(user, "\n")
	rest, named, ok, valid := traceparent.SplitProxyUser(user)
	if !ok || !valid || rest != "team-a.claim-1" || named.Span.String() != bash.Span || named.Trace.String() != bash.Trace ||
		!strings.Contains(out, "rest-unchanged\n") {
		t.Errorf("Bash output %q: want HTTPS_PROXY's user name the Bash call's span before team-a.claim-1, the password and host unchanged", out)
	}
}

func noEnv(string) string { return "" }

// TestSSECallsCarryTheirTraceInMeta: on the legacy SSE transport a call's _meta traceparent
// traces it (on the direct path, a Read, and through the SDK, a Bash).
func TestSSECallsCarryTheirTraceInMeta(t *testing.T) {
	ts := startServer(t, Config{}, options{})
	cs := connectSSE(t, ts.url, nil)
	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{toolnames.Write, map[string]any{"file_path": "a.txt", "content": "x"}},
		{toolnames.Read, map[string]any{"file_path": "a.txt"}},
		{toolnames.Bash, map[string]any{"command": "true"}},
	} {
		if res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Meta: mcp.Meta{"traceparent": metaParent}, Name: c.tool, Arguments: c.args}); err != nil || res.IsError {
			t.Fatalf("%s: %v %+v", c.tool, err, res)
		}
	}
	_, entries := readRecord(t, ts.url, "", "")
	meta, _ := traceparent.Parse(metaParent)
	calls := 0
	for _, e := range entries {
		if e.Kind != record.KindToolCall {
			continue
		}
		calls++
		if e.Trace != meta.Trace.String() || e.Parent != meta.Span.String() {
			t.Errorf("%s over SSE: trace %q parent %q, want the _meta's", e.Tool, e.Trace, e.Parent)
		}
	}
	if calls != 3 {
		t.Fatalf("%d tool.call entries, want 3", calls)
	}
}

// TestProxyWithSpan: the span goes before a proxy URL's user name, the rest of the URL as it
// was; a URL without a user name (nothing to attribute to) or that does not parse is left alone.
func TestProxyWithSpan(t *testing.T) {
	tp, _ := traceparent.Parse(headerParent)
	if got, want := proxyWithSpan("http://ns.claim:p%40ss@10.0.0.1:3128", tp), "http://"+traceparent.ProxyUser(tp, "ns.claim")+":p%40ss@10.0.0.1:3128"; got != want {
		t.Errorf("proxyWithSpan = %q, want %q", got, want)
	}
	for _, raw := range []string{"", "http://10.0.0.1:3128", "http://:pw@10.0.0.1:3128", "://bad"} {
		if got := proxyWithSpan(raw, tp); got != "" {
			t.Errorf("proxyWithSpan(%q) = %q, want it left alone", raw, got)
		}
	}
}

// TestSSECallsJoinTheHeadersTrace: on the legacy SSE transport, a call with no _meta
// traceparent takes the POST's traceparent header, as on streamable HTTP (the message POST's
// headers reach the call in its Extra, on the direct path and on the SDK's).
func TestSSECallsJoinTheHeadersTrace(t *testing.T) {
	ts := tokenServer(t)
	client := &http.Client{Transport: headerTransport{"Authorization": "Bearer tok", "Traceparent": headerParent}}
	cs := connect(t, &mcp.SSEClientTransport{Endpoint: ts.url + "/sse", HTTPClient: client}, nil)
	for _, c := range []struct {
		name string
		args map[string]any
	}{
		{toolnames.Write, map[string]any{"file_path": "a.txt", "content": "hi\n"}},
		{toolnames.Bash, map[string]any{"command": "true"}},
	} {
		if res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: c.name, Arguments: c.args}); err != nil || res.IsError {
			t.Fatalf("%s: %v %+v", c.name, err, res)
		}
	}
	header, _ := traceparent.Parse(headerParent)
	_, entries := readRecord(t, ts.url, "tok", "")
	var calls int
	for _, e := range entries {
		if e.Kind != record.KindToolCall {
			continue
		}
		calls++
		if e.Trace != header.Trace.String() || e.Parent != header.Span.String() || len(e.Span) != 16 {
			t.Errorf("%s's call over SSE %+v: want the header's trace and span as parent, a span of its own", e.Tool, e)
		}
	}
	if calls != 2 {
		t.Fatalf("%d tool.call entries, want 2: %+v", calls, entries)
	}
}
