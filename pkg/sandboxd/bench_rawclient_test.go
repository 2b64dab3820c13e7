package sandboxd

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/sandboxdtest"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/wire"
)

// A light MCP client for the benchmarks: the same code for every server and
// transport, doing the same work per call (encode the request, one HTTP
// exchange on a kept-alive connection, read the answer as it comes, JSON or
// an event stream, and decode it), and nothing else. The official Go SDK's
// client costs more per call than the servers it measures, and more at
// 2026-07-28 than on SSE (docs/sandboxd-speed.md): with it, a benchmark
// measures the client. This one measures the servers. It is a real client of
// the protocol, not a replay of canned bytes: each request is encoded and
// each answer parsed and checked, and the servers are the same processes the
// SDK's client calls in the same run.

// benchCaller makes a tool call and returns its text and whether it is a tool
// error.
type benchCaller interface {
	callTool(ctx context.Context, tool string, args map[string]any) (text string, isError bool, err error)
}

// sdkCaller is the official Go SDK's client session.
type sdkCaller struct{ cs *mcp.ClientSession }

func (c sdkCaller) callTool(ctx context.Context, tool string, args map[string]any) (string, bool, error) {
	res, err := c.cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		return "", false, err
	}
	return sandboxdtest.ContentText(res), res.IsError, nil
}

// rawRequest and rawResponse are the JSON-RPC messages of the light client.
type rawRequest struct {
	JSONRPC string `json:"jsonrpc"`
	ID      int64  `json:"id,omitempty"`
	Method  string `json:"method"`
	Params  any    `json:"params,omitempty"`
}

type rawCallParams struct {
	Name      string         `json:"name"`
	Arguments map[string]any `json:"arguments"`
	Meta      *rawMeta       `json:"_meta,omitempty"`
}

// rawMeta is what a 2026-07-28 request carries in _meta, as a client with
// types of its own encodes it (the Go SDK's client does too).
type rawMeta struct {
	ProtocolVersion    string         `json:"io.modelcontextprotocol/protocolVersion"`
	ClientCapabilities struct{}       `json:"io.modelcontextprotocol/clientCapabilities"`
	ClientInfo         *rawClientInfo `json:"io.modelcontextprotocol/clientInfo,omitempty"`
}

type rawClientInfo struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

type rawResponse struct {
	ID     json.RawMessage `json:"id"`
	Result *struct {
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
		IsError bool `json:"isError"`
	} `json:"result"`
	Error *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func (r *rawResponse) toolResult() (string, bool, error) {
	if r.Error != nil {
		return "", false, fmt.Errorf("JSON-RPC error %d: %s", r.Error.Code, r.Error.Message)
	}
	if r.Result == nil {
		return "", false, errors.New("a response with neither result nor error")
	}
	var b strings.Builder
	for _, c := range r.Result.Content {
		if c.Type == "text" {
			b.WriteString(c.Text)
		}
	}
	return b.String(), r.Result.IsError, nil
}

// benchClientInfo is what the light client says it is.
var benchClientInfo = &rawClientInfo{Name: "sandboxd-bench-raw", Version: "v0"}

// rawStreamable is the light client of Streamable HTTP: stateless at
// 2026-07-28 (version, capabilities and info in each request's _meta, the
// Mcp-Method and Mcp-Name headers), or in a session of an older revision
// (initialize, then Mcp-Session-Id on each POST).
type rawStreamable struct {
	hc       *http.Client
	endpoint string
	version  string
	session  string
	nextID   int64
}

// connectRawStreamable connects the light client to endpoint at version:
// for a session revision it initializes a session first.
func connectRawStreamable(b testing.TB, endpoint, version string) *rawStreamable {
	b.Helper()
	c := &rawStreamable{hc: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}, endpoint: endpoint, version: version}
	b.Cleanup(c.hc.CloseIdleConnections)
	if version >= wire.ProtocolStateless {
		return c
	}
	init := rawRequest{JSONRPC: "2.0", ID: c.id(), Method: "initialize", Params: map[string]any{
		"protocolVersion": version, "capabilities": map[string]any{}, "clientInfo": benchClientInfo,
	}}
	resp, err := c.post(b.Context(), init, "initialize", "")
	if err != nil {
		b.Fatalf("%s: initialize: %v", endpoint, err)
	}
	if resp.Error != nil {
		b.Fatalf("%s: initialize: %d %s", endpoint, resp.Error.Code, resp.Error.Message)
	}
	if c.session == "" {
		b.Fatalf("%s: initialize answered no Mcp-Session-Id", endpoint)
	}
	if _, err := c.post(b.Context(), rawRequest{JSONRPC: "2.0", Method: "notifications/initialized"}, "notifications/initialized", ""); err != nil {
		b.Fatalf("%s: notifications/initialized: %v", endpoint, err)
	}
	return c
}

func (c *rawStreamable) id() int64 { c.nextID++; return c.nextID }

func (c *rawStreamable) callTool(ctx context.Context, tool string, args map[string]any) (string, bool, error) {
	params := rawCallParams{Name: tool, Arguments: args}
	if c.version >= wire.ProtocolStateless {
		params.Meta = &rawMeta{ProtocolVersion: c.version, ClientInfo: benchClientInfo}
	}
	resp, err := c.post(ctx, rawRequest{JSONRPC: "2.0", ID: c.id(), Method: "tools/call", Params: params}, "tools/call", tool)
	if err != nil {
		return "", false, err
	}
	return resp.toolResult()
}

// post sends msg and reads its answer: nil for a notification (202), else
// the response, from a JSON body or from the event stream.
func (c *rawStreamable) post(ctx context.Context, msg rawRequest, method, name string) (*rawResponse, error) {
	resp, err := c.exchange(ctx, msg, method, name)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if s := resp.Header.Get("Mcp-Session-Id"); s != "" && method == "initialize" {
		c.session = s
	}
	if msg.ID == 0 {
		_, _ = io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != http.StatusAccepted {
			return nil, fmt.Errorf("%s: %s", method, resp.Status)
		}
		return nil, nil
	}
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(resp.Body)
		return nil, fmt.Errorf("%s: %s: %s", method, resp.Status, data)
	}
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if ct == "text/event-stream" {
		return readEventResponse(bufio.NewReader(resp.Body), msg.ID)
	}
	var out rawResponse
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, err
	}
	return &out, nil
}

// exchange sends msg with the headers its revision and session require and returns the HTTP
// response, its body unread.
func (c *rawStreamable) exchange(ctx context.Context, msg rawRequest, method, name string) (*http.Response, error) {
	req, err := newJSONPost(ctx, c.endpoint, msg)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json, text/event-stream")
	if c.session != "" {
		req.Header.Set("Mcp-Session-Id", c.session)
	}
	if method != "initialize" {
		req.Header.Set("Mcp-Protocol-Version", c.version)
	}
	if c.version >= wire.ProtocolStateless {
		req.Header.Set("Mcp-Method", method)
		if name != "" {
			req.Header.Set("Mcp-Name", name)
		}
	}
	return c.hc.Do(req)
}

// readEvent reads one event of an event stream: its type and data (the
// data lines joined). Comments and other fields are skipped.
func readEvent(r *bufio.Reader) (event string, data []byte, err error) {
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			return "", nil, err
		}
		line = bytes.TrimRight(line, "\r\n")
		switch {
		case len(line) == 0:
			if data != nil || event != "" {
				return event, data, nil
			}
		case bytes.HasPrefix(line, []byte("data:")):
			if data != nil {
				data = append(data, '\n')
			}
			data = append(data, bytes.TrimPrefix(bytes.TrimPrefix(line, []byte("data:")), []byte(" "))...)
		case bytes.HasPrefix(line, []byte("event:")):
			event = string(bytes.TrimSpace(bytes.TrimPrefix(line, []byte("event:"))))
		}
	}
}

// readEventResponse reads events until the response with id.
func readEventResponse(r *bufio.Reader, id int64) (*rawResponse, error) {
	want := fmt.Sprint(id)
	for {
		_, data, err := readEvent(r)
		if err != nil {
			return nil, fmt.Errorf("the event stream ended before response %d: %w", id, err)
		}
		var out rawResponse
		if len(data) == 0 || json.Unmarshal(data, &out) != nil {
			continue
		}
		if string(out.ID) == want {
			return &out, nil
		}
	}
}

// rawSSE is the light client of HTTP+SSE (2024-11-05): one GET stream whose
// first event names the endpoint to POST to, and every response on the
// stream.
type rawSSE struct {
	hc       *http.Client
	endpoint string
	stream   *http.Response
	events   *bufio.Reader
	nextID   int64
}

// connectRawSSE opens base's /sse stream and initializes the session.
func connectRawSSE(b testing.TB, base string) *rawSSE {
	b.Helper()
	c := &rawSSE{hc: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}}
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(func() {
		cancel()
		if c.stream != nil {
			c.stream.Body.Close()
		}
		c.hc.CloseIdleConnections()
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/sse", nil)
	if err != nil {
		b.Fatal(err)
	}
	req.Header.Set("Accept", "text/event-stream")
	c.stream, err = c.hc.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	if c.stream.StatusCode != http.StatusOK {
		b.Fatalf("%s/sse: %s", base, c.stream.Status)
	}
	c.events = bufio.NewReader(c.stream.Body)
	event, data, err := readEvent(c.events)
	if err != nil || event != "endpoint" {
		b.Fatalf("%s/sse: first event %q %q, %v; want the endpoint", base, event, data, err)
	}
	endpoint := string(data)
	if strings.HasPrefix(endpoint, "/") {
		endpoint = base + endpoint
	}
	c.endpoint = endpoint
	init := rawRequest{JSONRPC: "2.0", ID: c.id(), Method: "initialize", Params: map[string]any{
		"protocolVersion": "2024-11-05", "capabilities": map[string]any{}, "clientInfo": benchClientInfo,
	}}
	resp, err := c.roundTrip(b.Context(), init)
	if err != nil || resp.Error != nil {
		b.Fatalf("%s: initialize: %v %+v", base, err, resp)
	}
	if _, err := c.roundTrip(b.Context(), rawRequest{JSONRPC: "2.0", Method: "notifications/initialized"}); err != nil {
		b.Fatalf("%s: notifications/initialized: %v", base, err)
	}
	return c
}

func (c *rawSSE) id() int64 { c.nextID++; return c.nextID }

func (c *rawSSE) callTool(ctx context.Context, tool string, args map[string]any) (string, bool, error) {
	resp, err := c.roundTrip(ctx, rawRequest{JSONRPC: "2.0", ID: c.id(), Method: "tools/call", Params: rawCallParams{Name: tool, Arguments: args}})
	if err != nil {
		return "", false, err
	}
	return resp.toolResult()
}

// newJSONPost is a POST of msg as JSON to endpoint, for both light clients.
func newJSONPost(ctx context.Context, endpoint string, msg rawRequest) (*http.Request, error) {
	body, err := json.Marshal(msg)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	return req, nil
}

// roundTrip POSTs msg and, for a request, reads its response off the
// stream (the calls are one at a time, so the next response is ours, but
// the id is checked all the same).
func (c *rawSSE) roundTrip(ctx context.Context, msg rawRequest) (*rawResponse, error) {
	req, err := newJSONPost(ctx, c.endpoint, msg)
	if err != nil {
		return nil, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return nil, fmt.Errorf("%s: %s", msg.Method, resp.Status)
	}
	if msg.ID == 0 {
		return nil, nil
	}
	return readEventResponse(c.events, msg.ID)
}

// BenchmarkRawCall is the light client's Read against an in-process
// sandboxd, one call at a time, on each transport, and against the
// standalone mcp-go server (in process too) on its two: a profile of it
// (-cpuprofile, -memprofile) shows sandboxd's own costs per call beside a
// client that costs little, and allocs/op counts both (the client's are the
// same on every transport but for the event stream of SSE).
//
//	go test -run '^$' -bench BenchmarkRawCall -benchtime 5000x -cpuprofile cpu.out ./pkg/sandboxd/
//
// Each reads small.txt (29 bytes); under "big", a file of 20 KiB, whose
// answer is longer than net/http's 2 KiB buffer (sent chunked unless the
// server says its length); under "source", 10 KiB of Go (benchSource) with
// the words that wake the secret scrubber ("Secret", "://", "Bearer") on
// most lines and no secret, as in much of a Kubernetes project's code.
func BenchmarkRawCall(b *testing.B) {
	ws := benchWorkspace(b)
	if err := os.WriteFile(filepath.Join(ws, "big.txt"), []byte(strings.Repeat("a line of the file\n", 1100)), 0o644); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "source.go"), benchSource(10<<10), 0o644); err != nil {
		b.Fatal(err)
	}
	ts := startServer(b, Config{Workspace: ws}, options{})
	mg := startMCPGoServer(b, ws)
	for _, tr := range []struct {
		name    string
		connect func(b *testing.B) benchCaller
	}{
		{"sse", func(b *testing.B) benchCaller { return connectRawSSE(b, ts.url) }},
		{"mcp", func(b *testing.B) benchCaller { return connectRawStreamable(b, ts.url+"/mcp", wire.ProtocolStateless) }},
		{"mcp2025", func(b *testing.B) benchCaller { return connectRawStreamable(b, ts.url+"/mcp", "2025-11-25") }},
		{"mcpgo-mcp", func(b *testing.B) benchCaller {
			return connectRawStreamable(b, mg+mcpgoStatelessPath, wire.ProtocolStateless)
		}},
		{"mcpgo-mcp2025", func(b *testing.B) benchCaller { return connectRawStreamable(b, mg+mcpgoStreamablePath, "2025-11-25") }},
	} {
		for _, file := range []struct{ sub, name string }{{"", "small.txt"}, {"/big", "big.txt"}, {"/source", "source.go"}} {
			b.Run(tr.name+file.sub, func(b *testing.B) {
				c := tr.connect(b)
				args := map[string]any{"file_path": file.name}
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					if text, isError, err := c.callTool(b.Context(), "Read", args); err != nil || isError {
						b.Fatalf("Read: %v %s", err, text)
					}
				}
			})
		}
	}
}

// benchSource is about size bytes of Go source that holds, on most of its
// lines, the words the secret scrubber looks for, and no secret.
func benchSource(size int) []byte {
	var src strings.Builder
	src.WriteString("package bench\n\n")
	for i := 0; src.Len() < size; i++ {
		fmt.Fprintf(&src, "// step%d: see https://pkg.go.dev/k8s.io/api/core/v1#Secret\n", i)
		fmt.Fprintf(&src, "func step%d(ctx context.Context, c client, token string) error {\n", i)
		fmt.Fprintf(&src, "\tif err := c.Create(ctx, &corev1.Secret{Name: \"s%d\"}); err != nil {\n\t\treturn err\n\t}\n", i)
		src.WriteString("\treturn c.Do(ctx, \"Authorization\", \"Bearer \"+token)\n}\n\n")
	}
	return []byte(src.String())
}

// TestRawBenchClient: the benchmarks' light client gets the same Read from
// sandboxd on each transport and from the standalone mcp-go server on its
// two, and a tool error as a tool error, so that the side-by-side figures
// compare calls that did the same work.
func TestRawBenchClient(t *testing.T) {
	ws := benchWorkspace(t)
	ts := startServer(t, Config{Workspace: ws}, options{})
	mg := startMCPGoServer(t, ws)
	callers := map[string]benchCaller{
		"sandboxd-sse":     connectRawSSE(t, ts.url),
		"sandboxd-mcp":     connectRawStreamable(t, ts.url+"/mcp", wire.ProtocolStateless),
		"sandboxd-mcp2025": connectRawStreamable(t, ts.url+"/mcp", "2025-11-25"),
		"mcpgo-mcp":        connectRawStreamable(t, mg+mcpgoStatelessPath, wire.ProtocolStateless),
		"mcpgo-mcp2025":    connectRawStreamable(t, mg+mcpgoStreamablePath, "2025-11-25"),
	}
	want := "     1\tpackage main\n     2\t\n     3\tfunc main() {}\n"
	for name, c := range callers {
		for range 3 { // ids move on; the connection is reused
			text, isError, err := c.callTool(t.Context(), "Read", map[string]any{"file_path": "small.txt"})
			if err != nil || isError || text != want {
				t.Errorf("%s: Read = %q, %v, %v; want %q", name, text, isError, err, want)
			}
		}
		if _, isError, err := c.callTool(t.Context(), "Read", map[string]any{"file_path": "missing.txt"}); err != nil || !isError {
			t.Errorf("%s: Read of a missing file = tool error %v, %v; want a tool error", name, isError, err)
		}
	}
	if got := ts.streamable.DirectTaken(); got < 8 {
		t.Errorf("the direct path of /mcp took %d of the light client's 8 calls", got)
	}
}
