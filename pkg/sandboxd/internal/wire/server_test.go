package wire

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/clock"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/procgroup"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/sandboxdtest"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/toolcall"
)

// The wire's test harness: the transports, the guard, the tasks and kept
// connections composed as pkg/sandboxd composes them (server.go, run.go),
// over a fake set of tools (testTools) instead of internal/tools, served on
// a loopback port (with a /healthz, as the server's, for a request that is
// not the transports'). The tests of the wire go through it; those that need the
// real tools, the middleware's scrubber and metrics, or the whole server are
// in pkg/sandboxd.

const testTimeout = sandboxdtest.Timeout

// testOptions are the wire's knobs as the server's options hold them; zero
// fields take the defaults.
type testOptions struct {
	keepAlive       time.Duration // interval of SSE keepalive comments
	maxMessageBytes int64         // bound of one POSTed message
	sessionTimeout  time.Duration // idle timeout of Streamable HTTP sessions
	idleTimeout     time.Duration // idle timeout of a kept-alive HTTP connection
	tasks           TaskOptions   // when a call becomes a task, how long one is kept
	clock           clock.WithDelayedExecution
	tokenFile       string   // the guard's token file ("": no token)
	served          []string // the fake tools served (nil: all)
}

// testServer is the wire serving the fake tools on a loopback port.
type testServer struct {
	url        string // http://127.0.0.1:port
	ws         string // the fake tools' workspace
	mcp        *mcp.Server
	sse        *SSETransport
	streamable *StreamableTransport
	gate       *Gate
}

// The fake tools (testTools) stand in for four of internal/tools's, under
// their names, with what the wire's tests need of them: LS answers the
// names in the workspace, one a line; Write writes content to file_path in
// the workspace; Read answers the
// text of file_path in the workspace, as text and as structured output (a
// tool error if it cannot read it); Bash runs command with /bin/bash -c in
// the workspace, in a process group of its own that is killed whole when
// the call is cancelled (internal/procgroup, as the real Bash), and answers
// its output. The rest of the real tools' behaviour is tested with them.
func testTools(set *toolcall.Set, ws string, served []string) {
	add := func(t *mcp.Tool, h mcp.ToolHandler) {
		if served != nil && !slices.Contains(served, t.Name) {
			return
		}
		set.Server.AddTool(t, h)
		set.Direct[t.Name] = h
	}
	object := func(props map[string]*jsonschema.Schema, required ...string) *jsonschema.Schema {
		return &jsonschema.Schema{Type: "object", Properties: props, Required: required}
	}
	str := &jsonschema.Schema{Type: "string"}
	groups := procgroup.NewGroups()
	add(&mcp.Tool{Name: "Read", Description: "Reads a file.", InputSchema: object(map[string]*jsonschema.Schema{"file_path": str}, "file_path"), OutputSchema: object(map[string]*jsonschema.Schema{"content": str})},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var in struct {
				FilePath string `json:"file_path"`
			}
			if err := json.Unmarshal(req.Params.Arguments, &in); err != nil {
				return nil, err
			}
			data, err := os.ReadFile(filepath.Join(ws, in.FilePath))
			if err != nil {
				res := &mcp.CallToolResult{}
				res.SetError(err)
				return res, nil
			}
			out, _ := json.Marshal(map[string]string{"content": string(data)})
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(data)}}, StructuredContent: toolcall.MarshaledJSON(out)}, nil
		})
	add(&mcp.Tool{Name: "Write", Description: "Writes a file.", InputSchema: object(map[string]*jsonschema.Schema{"file_path": str, "content": str}, "file_path", "content")},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var in struct {
				FilePath string `json:"file_path"`
				Content  string `json:"content"`
			}
			if err := json.Unmarshal(req.Params.Arguments, &in); err != nil {
				return nil, err
			}
			res := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "wrote " + in.FilePath}}}
			if err := os.WriteFile(filepath.Join(ws, in.FilePath), []byte(in.Content), 0o644); err != nil {
				res.SetError(err)
			}
			return res, nil
		})
	add(&mcp.Tool{Name: "LS", Description: "Lists the workspace.", InputSchema: object(nil)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			entries, err := os.ReadDir(ws)
			if err != nil {
				return nil, err
			}
			var b strings.Builder
			for _, e := range entries {
				b.WriteString(e.Name() + "\n")
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: b.String()}}}, nil
		})
	add(&mcp.Tool{Name: "Bash", Description: "Runs a command.", InputSchema: object(map[string]*jsonschema.Schema{"command": str}, "command")},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var in struct {
				Command string `json:"command"`
			}
			if err := json.Unmarshal(req.Params.Arguments, &in); err != nil {
				return nil, err
			}
			r, err := procgroup.RunForeground(ctx, groups, ws, in.Command, testTimeout)
			res := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: r.Output}}}
			if err != nil || r.ExitCode != 0 {
				res.IsError = true
			}
			return res, nil
		})
}

// gateMiddleware lets every tools/call through the gate, as the server's
// middleware does (a direct call that entered it is not stopped again).
func gateMiddleware(gate *Gate) mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method != "tools/call" || GateHeld(ctx) {
				return next(ctx, method, req)
			}
			release, err := gate.enter(ctx, false)
			if err != nil {
				return nil, err
			}
			defer release()
			return next(ctx, method, req)
		}
	}
}

// startServer composes the wire over the fake tools, as newServer and serve
// do, serves it on 127.0.0.1, and shuts it down when the test ends.
func startServer(t testing.TB, opts testOptions) *testServer {
	t.Helper()
	if sandboxdtest.ProtocolStateless != ProtocolStateless || sandboxdtest.TasksExtension != TasksExtension || sandboxdtest.TaskWorking != TaskWorking {
		t.Fatalf("the tests' client names the stateless revision %s, the tasks extension %s and a working task %s; the wire %s, %s and %s",
			sandboxdtest.ProtocolStateless, sandboxdtest.TasksExtension, sandboxdtest.TaskWorking, ProtocolStateless, TasksExtension, TaskWorking)
	}
	logger, _ := ktesting.NewTestContext(t)
	if opts.keepAlive == 0 {
		opts.keepAlive = DefaultSSEKeepAlive
	}
	if opts.maxMessageBytes == 0 {
		opts.maxMessageBytes = MaxMessageBytes
	}
	if opts.sessionTimeout == 0 {
		opts.sessionTimeout = DefaultSessionTimeout
	}
	if opts.idleTimeout == 0 {
		opts.idleTimeout = time.Minute
	}
	if opts.clock == nil {
		opts.clock = clock.RealClock{}
	}
	if opts.tasks == (TaskOptions{}) {
		opts.tasks = TaskOptions{Threshold: DefaultTaskThreshold, Retention: DefaultTaskRetention, Clock: clock.RealClock{}}
	}
	guard, err := NewGuard(opts.tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	s := &testServer{gate: NewGate(), ws: t.TempDir()}
	s.mcp = mcp.NewServer(ServerImplementation(), &mcp.ServerOptions{
		Logger: SDKLogger(logger),
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{},
			Prompts: &mcp.PromptCapabilities{}, Resources: &mcp.ResourceCapabilities{},
			Extensions: map[string]any{TasksExtension: map[string]any{}}},
		SupportedProtocolVersions: ProtocolVersions,
	})
	s.mcp.AddReceivingMiddleware(gateMiddleware(s.gate))
	set := toolcall.NewSet(s.mcp)
	testTools(set, s.ws, opts.served)
	s.sse = NewSSETransport(s.mcp, opts.keepAlive, opts.maxMessageBytes, logger)
	s.sse.StoreCalls(NewCallTable(set, gateMiddleware(s.gate), s.gate))
	s.streamable = NewStreamableTransport(s.mcp, s.sse.LoadCalls, opts.maxMessageBytes, opts.sessionTimeout, opts.clock, logger)
	s.streamable.SetTasks(NewTaskStore(opts.tasks, s.sse.LoadCalls, logger.WithName("tasks")))

	mux := http.NewServeMux()
	mux.Handle("/sse", guard.wrap(http.HandlerFunc(s.sse.serveStream)))
	mux.Handle(SSEEndpointPath, guard.wrap(http.HandlerFunc(s.sse.serveMessage)))
	mux.Handle("/mcp", guard.wrap(s.streamable))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: opts.idleTimeout, MaxHeaderBytes: 64 << 10}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	back := NewBackListener(ln.Addr())
	keep := NewKeepAlive(hs, back, s.streamable.maxBytes, opts.clock)
	s.streamable.keep = keep
	served := make(chan error, 2)
	go func() { served <- hs.Serve(ln) }()
	go func() { served <- hs.Serve(back) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		s.streamable.closing.Store(true)
		if err := s.sse.close(ctx); err != nil {
			t.Errorf("closing the SSE streams: %v", err)
		}
		for ss := range s.mcp.Sessions() {
			_ = ss.Close()
		}
		for _, err := range []error{s.streamable.sessions.close(ctx), s.streamable.direct.close(ctx), s.streamable.tasks.close(ctx), keep.close(ctx), hs.Shutdown(ctx)} {
			if err != nil {
				t.Errorf("shutdown: %v", err)
			}
		}
		for range 2 {
			<-served
		}
	})
	s.url = "http://" + ln.Addr().String()
	return s
}
