// Command runtimeclient is the e2e suite's stand-in for an agent runtime on a real node
// (e2e/realnode_test.go). It runs in a pod as the runtime's own ServiceAccount, acquires a
// sandbox through the Sandbox API Service with pkg/client's Session, talks MCP to the returned address with
// the official Go SDK client and the returned Authorization header, and prints one JSON document
// on stdout, which the test reads with `kubectl logs`. It is a test helper, not part of airlock.
//
//	runtimeclient session -plan '<JSON plan>'   acquire, check that a request without the header
//	                                            is refused, call the plan's tools in order
//	runtimeclient bench -plan '<JSON plan>'     N sessions one after another: acquire to Bound,
//	                                            one tool call, close; plus R tool-call round trips
//	runtimeclient reacquire -plan '<JSON plan>' N rounds of one session and handle: acquire, one
//	                                            tool call that marks the pod, a request with the
//	                                            previous round's token, close
//	runtimeclient acquire -plan '<JSON plan>'   acquire the plan's handle and close the session:
//	                                            the Sandbox API alone (its TLS, its answer)
//	runtimeclient scrape -plan '<JSON plan>'    GET each of the plan's URLs (Prometheus's
//	                                            /metrics) until it answers or the plan's time is
//	                                            up, and report the metric families it serves
//	runtimeclient serve [-listen :8080]         answer every HTTP request with "ok <hostname>"
//	                                            (a target for the NetworkPolicy checks)
//	runtimeclient internet -plan '<JSON plan>'  the egress suite's stand-in internet: HTTPS,
//	                                            HTTP, a test module proxy, a git front and DNS
//	                                            (internet.go)
//	runtimeclient egressprobe -plan '<JSON>'    the egress suite's techniques, from inside a
//	                                            sandbox, through its gateway (egressprobe.go)
//	runtimeclient copyself -to PATH             write this binary to PATH (into a workspace)
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-dev/airlock/pkg/client"
)

// Plan is what the test asks the client to do.
type Plan struct {
	API       string `json:"api"` // Sandbox API base URL
	TokenFile string `json:"tokenFile,omitempty"`
	// ServerName is the name the API's certificate is verified for, when it is not the URL's host.
	ServerName string `json:"serverName,omitempty"`
	// CAFile is the Sandbox API's CA bundle: the ConfigMap airlock-ca mounted at
	// client.DefaultCAFile by default.
	CAFile string `json:"caFile,omitempty"`
	// InsecureSkipVerify calls the API without verifying its certificate (a control: it must be
	// asked for by name).
	InsecureSkipVerify bool `json:"insecureSkipVerify,omitempty"`
	// PlainHTTP lets an "http://" api through (client.PlainHTTP), to test the server's side.
	PlainHTTP   bool   `json:"plainHTTP,omitempty"`
	Namespace   string `json:"namespace"`
	Runtime     string `json:"runtime"`
	Session     string `json:"session"`
	Handle      string `json:"handle"`
	WaitSeconds int    `json:"waitSeconds,omitempty"`
	Transport   string `json:"transport,omitempty"` // "streamable" (default) or "sse"
	// IdleSeconds is the AgentRuntime's spec.sandbox.idleTimeout when it is not the default:
	// the session renews at most once per half of it (client.Config.IdleTimeout).
	IdleSeconds int    `json:"idleSeconds,omitempty"`
	Steps       []Step `json:"steps,omitempty"`
	Close       bool   `json:"close,omitempty"` // sessions/close at the end
	// VerifyIsolation and RequireDedicatedKernel: pkg/client verifies the acquire answer's
	// isolation attestation with airlock-ca's isolation-keys.pem (Config.VerifyIsolation).
	VerifyIsolation        bool `json:"verifyIsolation,omitempty"`
	RequireDedicatedKernel bool `json:"requireDedicatedKernel,omitempty"`
	// Probes are host:port addresses the client itself dials (it has no NetworkPolicy): the
	// controls that show a target the sandbox cannot reach does answer.
	Probes []string `json:"probes,omitempty"`
	// bench
	Sessions   int `json:"sessions,omitempty"`
	RoundTrips int `json:"roundTrips,omitempty"`
	// GapMillis paces the sessions: the pause after one session's close before the next
	// acquire (an agent's sessions do not start back to back; the node settles in between).
	GapMillis int `json:"gapMillis,omitempty"`
	// Connect makes the runtime's first call of the Sandbox API before the timed sessions.
	Connect bool `json:"connect,omitempty"`
	// resume: Seed writes the workspace's files in the first round (a fresh workspace);
	// ExpectSHA256 is the workspace's tree hash the first round must find (the last round's of
	// the previous invocation).
	Seed         bool   `json:"seed,omitempty"`
	ExpectSHA256 string `json:"expectSHA256,omitempty"`
	// scrape: the URLs, and how long each may take to answer (connections may be refused or
	// dropped while a new pod's NetworkPolicy peers are learned).
	URLs          []string `json:"urls,omitempty"`
	ScrapeSeconds int      `json:"scrapeSeconds,omitempty"`
	// Bearer maps a URL of URLs to the token its scrape sends (Authorization: Bearer); a
	// sandbox's /metrics needs its claim's token (docs/security.md).
	Bearer map[string]string `json:"bearer,omitempty"`
	// Raw lists URLs of URLs whose answer is handed back as it came (Body), not parsed as
	// metrics: a sandbox's GET /record (its usage entries).
	Raw []string `json:"raw,omitempty"`
	// Traceparent, a W3C traceparent the runtime chose, goes on every Sandbox API request (the
	// header) and in params._meta.traceparent of every tools/call of the session's steps
	// (docs/record.md §1): the runtime's span, which the acquire's and the calls' spans join.
	Traceparent string `json:"traceparent,omitempty"`
}

// Step is one tool call.
type Step struct {
	Name string         `json:"name"` // a label for the test
	Tool string         `json:"tool"`
	Args map[string]any `json:"args"`
	// CancelAfterMillis, when set, cancels the call that long after it was sent: the Go SDK
	// sends notifications/cancelled (the result's Err then says the context's deadline).
	CancelAfterMillis int `json:"cancelAfterMillis,omitempty"`
	// Traceparent, when set, is the call's params._meta.traceparent (a session's steps get the
	// plan's).
	Traceparent string `json:"traceparent,omitempty"`
}

// CallResult is one tool call's outcome.
type CallResult struct {
	Name    string  `json:"name"`
	Tool    string  `json:"tool"`
	IsError bool    `json:"isError"`
	Text    string  `json:"text"`
	Millis  float64 `json:"millis"`
	Err     string  `json:"err,omitempty"`
}

// SessionResult is the output of `session`.
type SessionResult struct {
	Claim         string  `json:"claim"`
	Phase         string  `json:"phase"`
	URL           string  `json:"url"`
	AcquireMillis float64 `json:"acquireMillis"`
	// ReachableMillis: from the acquire answer (Bound: the pod is Ready) to the first MCP
	// session through the Service (the EndpointSlice and kube-proxy catching up).
	ReachableMillis float64           `json:"reachableMillis"`
	NoHeader        int               `json:"noHeaderStatus"`  // POST /mcp without Authorization
	BadHeader       int               `json:"badHeaderStatus"` // POST /mcp with a wrong token
	Protocol        string            `json:"protocol"`
	Calls           []CallResult      `json:"calls"`
	Closed          bool              `json:"closed"`
	Probes          map[string]string `json:"probes,omitempty"` // address -> OPEN or BLOCKED
	// Kernel, Runtime and Node are the verified isolation statement's (VerifyIsolation).
	Kernel  string `json:"kernel,omitempty"`
	Runtime string `json:"runtime,omitempty"`
	Node    string `json:"node,omitempty"`
	Error   string `json:"error,omitempty"`
}

// BenchResult is the output of `bench`.
type BenchResult struct {
	AcquireMillis   []float64 `json:"acquireMillis"` // acquire call to 200 Bound, one per session
	FirstCallMillis []float64 `json:"firstCallMillis"`
	ReachableMillis []float64 `json:"reachableMillis"` // acquire answer to the first MCP session
	// FirstResultMillis is the acquire call to the first tool result (acquire, connect, call).
	FirstResultMillis []float64 `json:"firstResultMillis"`
	// ConnectMillis is the runtime's first call of the Sandbox API (a sessions/close of a session
	// that has nothing), made before the first timed acquire when the plan asks for it: what a
	// new runtime process pays once (DNS, TLS, the first TokenReview), not each session.
	ConnectMillis   float64   `json:"connectMillis,omitempty"`
	RoundTripMillis []float64 `json:"roundTripMillis"` // Read round trips on one MCP session
	Error           string    `json:"error,omitempty"`
}

// ReacquireRound is one round of `reacquire`.
type ReacquireRound struct {
	Claim         string  `json:"claim"`
	AcquireMillis float64 `json:"acquireMillis"`
	// Marker is what the marking call answered: NEW when the pod that served it had not been
	// marked before (a fresh pod), OLD when an earlier round's pod served it.
	Marker string `json:"marker"`
	// PrevTokenStatus is the HTTP status of an MCP request carrying the previous round's token
	// (0 in the first round).
	PrevTokenStatus int `json:"prevTokenStatus"`
	// Resumed says whether the acquire answered resumedWorkspace (issue 24: the workspace the
	// previous round's claim left).
	Resumed bool `json:"resumed"`
	// JournalSHA256 is the sha256 of the workspace's journal file as the round found it, before
	// it appended its own line (journalCommand): the test checks every earlier round's line is
	// there, byte for byte.
	JournalSHA256 string `json:"journalSHA256"`
}

// ReacquireResult is the output of `reacquire`.
type ReacquireResult struct {
	Rounds []ReacquireRound `json:"rounds"`
	Error  string           `json:"error,omitempty"`
}

// markerCommand marks the pod it runs in and says whether it had been marked before.
const markerCommand = `if [ -e /tmp/airlock-e2e-marker ]; then echo OLD; else touch /tmp/airlock-e2e-marker && echo NEW; fi`

// journalCommand prints the sha256 of the workspace's journal as it is, then appends the round's
// line (%d) to it.
const journalCommand = `touch journal.txt && sha256sum journal.txt | cut -d' ' -f1 && echo round-%d >> journal.txt`

// escapeCommand leaves a process behind that is not in the Bash call's process group (a session
// of its own), so that only the operator's stop (or the kubelet) ends it: the stop's event says
// how many such processes it killed. The call returns once the process is in its session (it
// says so through a FIFO), so that the call's own group kill cannot catch it before setsid.
const escapeCommand = `rm -f /tmp/airlock-e2e-escape && mkfifo /tmp/airlock-e2e-escape && ` +
	`(setsid sh -c 'echo escaped > /tmp/airlock-e2e-escape; exec sleep 100000' > /dev/null 2>&1 < /dev/null &) && ` +
	`read x < /tmp/airlock-e2e-escape && echo $x`

// AcquireResult is the output of `acquire`.
type AcquireResult struct {
	Claim  string `json:"claim"`
	Phase  string `json:"phase"`
	Closed bool   `json:"closed"`
	Error  string `json:"error,omitempty"`
}

// runAcquire acquires the plan's handle for its session, then closes the session.
func runAcquire(ctx context.Context, p Plan) *AcquireResult {
	out := &AcquireResult{}
	s, err := apiSession(p, p.Session)
	if err != nil {
		out.Error = "the Sandbox API's CA: " + err.Error()
		return out
	}
	got, _, err := acquire(ctx, s, p)
	if err != nil {
		out.Error = "acquire: " + err.Error()
		return out
	}
	out.Claim, out.Phase = got.Claim, got.Response.Phase
	if _, err := s.Close(ctx); err != nil {
		out.Error = "close: " + err.Error()
		return out
	}
	out.Closed = true
	return out
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: runtimeclient session|bench|reacquire|resume|acquire|scrape|serve|internet|egressprobe|copyself [flags]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	planJSON := fs.String("plan", "", "the plan, as JSON")
	listen := fs.String("listen", ":8080", "serve: listen address")
	to := fs.String("to", "", "copyself: the path to write")
	_ = fs.Parse(os.Args[2:])

	switch os.Args[1] {
	case "serve":
		serve(*listen)
		return
	case "copyself":
		if err := copySelf(*to); err != nil {
			fmt.Fprintln(os.Stderr, "copyself:", err)
			os.Exit(1)
		}
		fmt.Println("RESULT {}")
		return
	case "internet", "egressprobe":
		runEgressMode(os.Args[1], *planJSON)
		return
	case "session", "bench", "reacquire", "resume", "acquire", "scrape":
	default:
		fmt.Fprintln(os.Stderr, "unknown mode", os.Args[1])
		os.Exit(2)
	}
	var plan Plan
	if err := json.Unmarshal([]byte(*planJSON), &plan); err != nil {
		fmt.Fprintln(os.Stderr, "plan:", err)
		os.Exit(2)
	}
	if plan.TokenFile == "" {
		// A projected ServiceAccount token with audience airlock (the pod's default token, for
		// the API server's audience, is refused by the Sandbox API).
		plan.TokenFile = "/var/run/secrets/airlock/token"
	}
	if plan.CAFile == "" {
		// The ConfigMap airlock-ca, which the operator keeps in the runtime's namespace.
		plan.CAFile = client.DefaultCAFile
	}
	if plan.WaitSeconds == 0 {
		plan.WaitSeconds = 120
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	var out any
	switch os.Args[1] {
	case "session":
		out = runSession(ctx, plan)
	case "bench":
		out = runBench(ctx, plan)
	case "reacquire":
		out = runReacquire(ctx, plan)
	case "resume":
		out = runResume(ctx, plan)
	case "acquire":
		out = runAcquire(ctx, plan)
	case "scrape":
		out = runScrape(ctx, plan)
	}
	b, _ := json.Marshal(out)
	fmt.Println("RESULT " + string(b))
}

func serve(addr string) {
	host, _ := os.Hostname()
	err := http.ListenAndServe(addr, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "ok %s\n", host)
	}))
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}

// say writes one human-readable line to stdout, before the RESULT line that the test reads
// (`kubectl logs` shows both). Not stderr: the runtime reads a pod's two streams apart, and
// splits a line longer than 16 KiB (a scrape's RESULT) into parts, so a stderr line written
// before the RESULT could land between its parts in the log and cut the JSON.
func say(format string, args ...any) { fmt.Printf(format+"\n", args...) }

// firstLine shortens a tool's answer for say.
func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " ..."
	}
	return s
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// apiConfig is the plan's runtime as pkg/client's Session takes it, with one HTTP client (kept
// connections shared by every session made from it) that verifies the Sandbox API with the
// plan's CA bundle.
func apiConfig(p Plan) (client.Config, error) {
	hc, err := client.NewHTTPClient(client.TLSOptions{CAFile: p.CAFile, ServerName: p.ServerName, InsecureSkipVerify: p.InsecureSkipVerify})
	if err != nil {
		return client.Config{}, err
	}
	hc.Timeout = time.Duration(p.WaitSeconds+30) * time.Second
	if p.Traceparent != "" {
		base := hc.Transport
		if base == nil {
			base = http.DefaultTransport
		}
		hc.Transport = &headerTransport{headers: map[string]string{"traceparent": p.Traceparent}, base: base}
	}
	return client.Config{
		API: p.API, TokenFile: p.TokenFile, HTTPClient: hc, PlainHTTP: p.PlainHTTP,
		Namespace: p.Namespace, Runtime: p.Runtime,
		IdleTimeout: time.Duration(p.IdleSeconds) * time.Second, AcquireTimeout: 20 * time.Minute, WaitSeconds: p.WaitSeconds,
		VerifyIsolation: p.VerifyIsolation, RequireDedicatedKernel: p.RequireDedicatedKernel,
	}, nil
}

// apiSession is the plan's session (a Session, as a runtime uses it).
func apiSession(p Plan, session string) (*client.Session, error) {
	cfg, err := apiConfig(p)
	if err != nil {
		return nil, err
	}
	return client.NewSession(cfg, session)
}

func acquire(ctx context.Context, s *client.Session, p Plan) (*client.Sandbox, time.Duration, error) {
	start := time.Now()
	got, err := s.Acquire(ctx, p.Handle)
	return got, time.Since(start), err
}

// headerTransport adds the acquire answer's headers to every request.
type headerTransport struct {
	headers map[string]string
	base    http.RoundTripper
}

func (t *headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range t.headers {
		r.Header.Set(k, v)
	}
	return t.base.RoundTrip(r)
}

// connectRetry connects like connect, calling again while the Service refuses the connection
// (for at most 20 s): Bound means the pod is Ready, and the Service's endpoints reach kube-proxy a
// moment later. It returns how long that took.
func connectRetry(ctx context.Context, url string, headers map[string]string, transport string) (*mcp.ClientSession, time.Duration, error) {
	start := time.Now()
	for {
		cs, err := connect(ctx, url, headers, transport)
		if err == nil || !strings.Contains(err.Error(), "connection refused") || time.Since(start) > 20*time.Second {
			return cs, time.Since(start), err
		}
		select {
		case <-ctx.Done():
			return nil, time.Since(start), ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// connect opens an MCP session to url with headers. The session's streams live on ctx.
func connect(ctx context.Context, url string, headers map[string]string, transport string) (*mcp.ClientSession, error) {
	hc := &http.Client{Transport: &headerTransport{headers: headers, base: http.DefaultTransport}}
	var tr mcp.Transport
	if transport == "sse" {
		tr = &mcp.SSEClientTransport{Endpoint: url + "/sse", HTTPClient: hc}
	} else {
		tr = &mcp.StreamableClientTransport{Endpoint: url + "/mcp", HTTPClient: hc, DisableStandaloneSSE: true}
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "airlock-e2e-runtime", Version: "v0"}, nil)
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	type res struct {
		cs  *mcp.ClientSession
		err error
	}
	ch := make(chan res, 1)
	go func() {
		cs, err := c.Connect(ctx, tr, nil)
		ch <- res{cs, err}
	}()
	select {
	case r := <-ch:
		return r.cs, r.err
	case <-cctx.Done():
		return nil, fmt.Errorf("connect to %s: %w", url, cctx.Err())
	}
}

func call(ctx context.Context, cs *mcp.ClientSession, s Step) CallResult {
	limit := 2 * time.Minute
	if s.CancelAfterMillis > 0 {
		limit = time.Duration(s.CancelAfterMillis) * time.Millisecond
	}
	cctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	start := time.Now()
	params := &mcp.CallToolParams{Name: s.Tool, Arguments: s.Args}
	if s.Traceparent != "" {
		params.Meta = mcp.Meta{"traceparent": s.Traceparent}
	}
	res, err := cs.CallTool(cctx, params)
	r := CallResult{Name: s.Name, Tool: s.Tool, Millis: ms(time.Since(start))}
	if err != nil {
		r.Err = err.Error()
		return r
	}
	r.IsError = res.IsError
	var b strings.Builder
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			b.WriteString(t.Text)
		}
	}
	r.Text = b.String()
	return r
}

// rawStatus posts an MCP initialize to url/mcp with the given Authorization (none when empty)
// and returns the HTTP status.
func rawStatus(ctx context.Context, url, auth string) int {
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/mcp", bytes.NewBufferString(body))
	if err != nil {
		return -1
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return -1
	}
	resp.Body.Close()
	return resp.StatusCode
}

func runSession(ctx context.Context, p Plan) *SessionResult {
	out := &SessionResult{Calls: []CallResult{}, Probes: map[string]string{}}
	for _, addr := range p.Probes {
		// A Service created a moment ago may not be in kube-proxy's rules yet: try for 15 s.
		out.Probes[addr] = "BLOCKED"
		for start := time.Now(); time.Since(start) < 15*time.Second; time.Sleep(200 * time.Millisecond) {
			if conn, err := net.DialTimeout("tcp", addr, 3*time.Second); err == nil {
				conn.Close()
				out.Probes[addr] = "OPEN"
				break
			}
		}
	}
	sess, err := apiSession(p, p.Session)
	if err != nil {
		out.Error = "the Sandbox API's CA: " + err.Error()
		return out
	}
	got, d, err := acquire(ctx, sess, p)
	if err != nil {
		out.Error = "acquire: " + err.Error()
		return out
	}
	out.Claim, out.Phase, out.AcquireMillis = got.Claim, got.Response.Phase, ms(d)
	out.URL = got.Response.Addresses[0].URL
	if st := got.Isolation; st != nil {
		var ev struct {
			Runtime string `json:"runtime"`
		}
		_ = json.Unmarshal(st.Evidence, &ev)
		out.Kernel, out.Runtime, out.Node = st.Kernel, ev.Runtime, st.Node
		say("isolation verified: kernel %s (%s) on node %s (its kernel %s)", st.Kernel, ev.Runtime, st.Node, st.NodeKernel)
	}
	say("acquired %s for session %s: claim %s %s in %.0f ms, MCP at %s", p.Handle, p.Session, got.Claim, got.Response.Phase, out.AcquireMillis, got.MCPURL)

	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cs, wait, err := connectRetry(sctx, out.URL, got.Response.Headers, p.Transport)
	out.ReachableMillis = ms(wait)
	if err != nil {
		out.Error = "mcp connect: " + err.Error()
		return out
	}
	defer cs.Close()
	out.NoHeader = rawStatus(ctx, out.URL, "")
	out.BadHeader = rawStatus(ctx, out.URL, "Bearer not-the-token")
	say("MCP session open (protocol %s); without the Authorization header sandboxd answers %d, with a wrong token %d",
		cs.InitializeResult().ProtocolVersion, out.NoHeader, out.BadHeader)
	out.Protocol = cs.InitializeResult().ProtocolVersion
	for _, s := range p.Steps {
		if s.Traceparent == "" {
			s.Traceparent = p.Traceparent
		}
		r := call(ctx, cs, s)
		out.Calls = append(out.Calls, r)
		say("  %-5s %-40.40s -> %s%s (%.1f ms)", s.Tool, stepArg(s), map[bool]string{true: "ERROR "}[r.IsError || r.Err != ""], firstLine(r.Text+r.Err), r.Millis)
		if r.Err == "" && !r.IsError {
			_, _ = sess.Renew(ctx, p.Handle) // at most one renewal per half idle timeout
		}
	}
	if p.Close {
		if _, err := sess.Close(ctx); err != nil {
			out.Error = "close: " + err.Error()
			return out
		}
		out.Closed = true
		say("closed session %s: its claims are reaped now, with sync-back", p.Session)
	}
	return out
}

// stepArg is the argument say shows for a step: the path or the command.
func stepArg(s Step) string {
	for _, k := range []string{"command", "file_path"} {
		if v, ok := s.Args[k].(string); ok {
			return v
		}
	}
	return ""
}
