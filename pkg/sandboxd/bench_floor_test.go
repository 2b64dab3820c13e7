package sandboxd

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
)

// The floors of BenchmarkSideBySideStreamable: two servers that do no MCP work at all. Each
// answers a 2025-11-25 session's initialize, its notifications, and every call with the very
// result sandboxd gave for the benchmark's call (recorded before the run, so the answer has the
// same bytes), its id put in. What they cost per call is what any server on the same HTTP layer
// costs at least, on this machine, with the same client:
//
//	floor-nethttp  net/http, as sandboxd and mcp-go serve: no server on net/http can be faster
//	floor-raw      HTTP/1.1 read and written by hand on the connection (keep-alive, a
//	               Content-Length body, nothing else): what leaving net/http would be worth
//
// They make the figures of a session against mcp-go readable: a ratio that the floor itself does
// not reach is a bound of the HTTP layer, not of sandboxd.

// floorServerEnv runs the test binary as a floor server ("nethttp" or "raw", TestMain), answering
// calls with the result in floorResultEnv.
const (
	floorServerEnv = "AIRLOCK_BENCH_FLOOR_SERVER"
	floorResultEnv = "AIRLOCK_BENCH_FLOOR_RESULT"
)

// floorInitResult is the floors' answer to initialize.
const floorInitResult = `{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"floor","version":"v0"}}`

// floorSession is the session id the floors give and do not check.
const floorSession = "floor-session"

// floorAnswer is a floor's answer to a message: the HTTP status, whether it carries the session
// header, and the body (none for a notification). Decoding the id and method is the least any
// server does with a message; the floors do nothing more.
func floorAnswer(msg []byte, result json.RawMessage) (status int, session bool, body []byte) {
	var m struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
	}
	if err := json.Unmarshal(msg, &m); err != nil {
		return http.StatusBadRequest, false, []byte(`{"jsonrpc":"2.0","error":{"code":-32700,"message":"parse error"}}`)
	}
	if len(m.ID) == 0 {
		return http.StatusAccepted, false, nil
	}
	if m.Method == "initialize" {
		result = json.RawMessage(floorInitResult)
	}
	body = make([]byte, 0, len(result)+64)
	body = append(body, `{"jsonrpc":"2.0","id":`...)
	body = append(body, m.ID...)
	body = append(body, `,"result":`...)
	body = append(body, result...)
	body = append(body, '}')
	return http.StatusOK, m.Method == "initialize", body
}

// runFloorServer serves the floor mode on a loopback port, prints its URL on stdout, and serves
// until stdin is closed (the benchmark ends) or SIGTERM.
func runFloorServer(mode string) int {
	result := json.RawMessage(os.Getenv(floorResultEnv))
	if !json.Valid(result) {
		fmt.Fprintln(os.Stderr, "floor server: no valid result in", floorResultEnv)
		return 1
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "floor server:", err)
		return 1
	}
	defer ln.Close()
	switch mode {
	case "nethttp":
		hs := &http.Server{Handler: floorHandler(result)}
		go func() { _ = hs.Serve(ln) }()
		defer hs.Close()
	case "raw":
		go serveRawFloor(ln, result)
	default:
		fmt.Fprintln(os.Stderr, "floor server: unknown mode", mode)
		return 1
	}
	fmt.Printf("http://%s/mcp\n", ln.Addr())
	waitForBenchEnd()
	return 0
}

// floorHandler is the net/http floor.
func floorHandler(result json.RawMessage) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		msg, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			return
		}
		status, session, body := floorAnswer(msg, result)
		h := w.Header()
		if session {
			h.Set("Mcp-Session-Id", floorSession)
		}
		if body != nil {
			h.Set("Content-Type", "application/json")
		}
		h.Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(status)
		_, _ = w.Write(body)
	})
}

// serveRawFloor is the hand-written HTTP/1.1 floor: keep-alive requests with a Content-Length
// body, one write per answer. Anything else ends the connection: it is a measure, not a server.
func serveRawFloor(ln net.Listener, result json.RawMessage) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			br := bufio.NewReader(c)
			var out []byte
			for {
				msg, ok := readRawRequest(br)
				if !ok {
					return
				}
				status, session, body := floorAnswer(msg, result)
				out = append(out[:0], "HTTP/1.1 "...)
				out = strconv.AppendInt(out, int64(status), 10)
				out = append(out, ' ')
				out = append(out, http.StatusText(status)...)
				out = append(out, "\r\n"...)
				if session {
					out = append(out, "Mcp-Session-Id: "+floorSession+"\r\n"...)
				}
				if body != nil {
					out = append(out, "Content-Type: application/json\r\n"...)
				}
				out = append(out, "Content-Length: "...)
				out = strconv.AppendInt(out, int64(len(body)), 10)
				out = append(out, "\r\n\r\n"...)
				out = append(out, body...)
				if _, err := c.Write(out); err != nil {
					return
				}
			}
		}()
	}
}

// readRawRequest reads one request (its line, headers and Content-Length body) and returns the
// body.
func readRawRequest(br *bufio.Reader) ([]byte, bool) {
	n := -1
	for first := true; ; first = false {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return nil, false
		}
		line = bytes.TrimRight(line, "\r\n")
		if first {
			if !bytes.HasPrefix(line, []byte("POST ")) {
				return nil, false
			}
			continue
		}
		if len(line) == 0 {
			break
		}
		if k, v, ok := bytes.Cut(line, []byte(":")); ok && strings.EqualFold(string(k), "Content-Length") {
			if n, err = strconv.Atoi(string(bytes.TrimSpace(v))); err != nil || n < 0 || n > 1<<20 {
				return nil, false
			}
		}
	}
	if n < 0 {
		return nil, false
	}
	msg := make([]byte, n)
	if _, err := io.ReadFull(br, msg); err != nil {
		return nil, false
	}
	return msg, true
}

// startFloorProcesses records sandboxd's result for the call (through a session of the light
// client at url) and starts the two floors with it, each in a process of its own; it returns
// their contenders, connected, each with its process id.
func startFloorProcesses(b *testing.B, url, tool string, args map[string]any) []*contender {
	b.Helper()
	result := recordResult(b, url, tool, args)
	var all []*contender
	for _, mode := range []string{"nethttp", "raw"} {
		label := "floor-" + mode
		u, pid := startServerProcess(b, "the "+label+" server", floorServerEnv+"="+mode, floorResultEnv+"="+string(result))
		c := &contender{label: label, c: connectRawStreamable(b, u, "2025-11-25")}
		c.stats.pid = pid
		all = append(all, c)
	}
	return all
}

// recordResult makes the call once through a 2025-11-25 session of the light client at url and
// returns the JSON-RPC result as sandboxd wrote it.
func recordResult(b testing.TB, url, tool string, args map[string]any) json.RawMessage {
	b.Helper()
	c := connectRawStreamable(b, url, "2025-11-25")
	msg := rawRequest{JSONRPC: "2.0", ID: c.id(), Method: "tools/call", Params: rawCallParams{Name: tool, Arguments: args}}
	resp, err := c.exchange(b.Context(), msg, "tools/call", tool)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	var m struct {
		Result json.RawMessage `json:"result"`
	}
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || !strings.HasPrefix(ct, "application/json") {
		b.Fatalf("recording the result of %s: %s, %s", tool, resp.Status, ct)
	}
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil || len(m.Result) == 0 {
		b.Fatalf("recording the result of %s: %v (%d bytes)", tool, err, len(m.Result))
	}
	return m.Result
}

// TestFloorServers: both floors answer the light client's session (initialize, the
// notification, calls with their ids) with the result recorded from sandboxd, so that the
// benchmark's floors return what sandboxd returns.
func TestFloorServers(t *testing.T) {
	ws := benchWorkspace(t)
	ts := startServer(t, Config{Workspace: ws}, options{})
	args := map[string]any{"file_path": "small.txt"}
	result := recordResult(t, ts.url+"/mcp", "Read", args)
	hs := httptest.NewServer(floorHandler(result))
	t.Cleanup(hs.Close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go serveRawFloor(ln, result)
	want := "     1\tpackage main\n     2\t\n     3\tfunc main() {}\n"
	for name, url := range map[string]string{"nethttp": hs.URL + "/mcp", "raw": "http://" + ln.Addr().String() + "/mcp"} {
		c := connectRawStreamable(t, url, "2025-11-25")
		for range 3 {
			text, isError, err := c.callTool(t.Context(), "Read", args)
			if err != nil || isError || text != want {
				t.Errorf("floor %s: Read = %q, %v, %v; want %q", name, text, isError, err, want)
			}
		}
	}
	if status, _, _ := floorAnswer([]byte("{"), result); status != http.StatusBadRequest {
		t.Errorf("a message that is not JSON: %d, want 400", status)
	}
}
