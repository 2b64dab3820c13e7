//go:build e2e

package tracing

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/propagation"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2/ktesting"

	"github.com/airlock-dev/airlock/e2e/internal/jaeger"
	"github.com/airlock-dev/airlock/pkg/egress"
	"github.com/airlock-dev/airlock/pkg/egress/policy"
	"github.com/airlock-dev/airlock/pkg/record"
	"github.com/airlock-dev/airlock/pkg/recordtrace"
	"github.com/airlock-dev/airlock/pkg/sandboxd"
	"github.com/airlock-dev/airlock/pkg/tracing"
)

const (
	upstreamHost = "upstream.test"
	// upstreamV4 stands for the internet: the test's resolver answers it for upstreamHost and
	// its dialer maps it to the test's upstream on loopback (the gateway refuses loopback
	// answers whatever a rule says).
	upstreamV4 = "1.2.3.4"
	password   = "claim-password-0123456789"
	token      = "sandboxd-token"
)

// TestOneQueryFindsTheToolCallBehindEgressAndAFileWrite: a runtime's trace reaches Jaeger with
// the Bash call's span parenting the gateway's egress span (the call's span named in the proxy
// URL sandboxd gave the process), and the Write call's span parenting its file.write span; both
// found by one query of the trace by its id.
//
// Once with each OTLP protocol: gRPC and HTTP.
func TestOneQueryFindsTheToolCallBehindEgressAndAFileWrite(t *testing.T) {
	collector := jaeger.Start(t)
	for _, otlp := range []tracing.Config{
		{Endpoint: collector.OTLPGRPC, Protocol: tracing.ProtocolGRPC, SampleRatio: 1},
		{Endpoint: "http://" + collector.OTLPHTTP, Protocol: tracing.ProtocolHTTP, SampleRatio: 1},
	} {
		t.Run(otlp.Protocol, func(t *testing.T) { oneQuery(t, collector, otlp) })
	}
}

func oneQuery(t *testing.T, collector jaeger.Collector, otlp tracing.Config) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	// The runtime: its own span, exported, whose context goes with each tool call.
	runtimeTP, err := tracing.New(ctx, otlp, "test-runtime")
	if err != nil {
		t.Fatal(err)
	}
	defer shutdown(t, runtimeTP.Shutdown)
	// The gateway, exporting its egress spans.
	gatewayTP, err := tracing.New(ctx, otlp, tracing.ServiceEgress)
	if err != nil {
		t.Fatal(err)
	}
	defer shutdown(t, gatewayTP.Shutdown)
	gw := startGateway(ctx, t, gatewayTP)
	// The leader's side: the record entries' spans.
	records, err := recordtrace.New(ctx, otlp)
	if err != nil {
		t.Fatal(err)
	}
	defer shutdown(t, records.Shutdown)

	// sandboxd, with the proxy environment a sandbox of a class with egress gets.
	proxy := "http://team-a.agent-a:" + password + "@" + gw
	for _, name := range []string{"HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy"} {
		t.Setenv(name, proxy)
	}
	t.Setenv("NO_PROXY", "localhost,127.0.0.1")
	sd := startSandboxd(ctx, t)

	turnCtx, turn := runtimeTP.Tracer("runtime").Start(ctx, "agent turn")
	carrier := propagation.MapCarrier{}
	tracing.Propagator.Inject(turnCtx, carrier)
	traceID := turn.SpanContext().TraceID().String()

	cs := connectMCP(ctx, t, sd)
	call := func(name string, args map[string]any) string {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Meta: mcp.Meta{"traceparent": carrier.Get("traceparent")}, Name: name, Arguments: args})
		if err != nil || res.IsError {
			t.Fatalf("%s: %v %+v", name, err, res)
		}
		return res.Content[0].(*mcp.TextContent).Text
	}
	call("Write", map[string]any{"file_path": "out.txt", "content": "traced\n"})
	if out := call("Bash", map[string]any{"command": "curl -sS --max-time 20 http://" + upstreamHost + "/hello"}); !strings.Contains(out, "hello from upstream") {
		t.Fatalf("Bash through the gateway: %q", out)
	}
	turn.End()

	// The leader collects the entries and calls the hook for each.
	for _, e := range readRecord(ctx, t, sd) {
		records.Observe(ctx, recordtrace.Claim{Namespace: "team-a", Name: "agent-a", UID: "uid-a", Runtime: "agent"}, e)
	}
	for _, flush := range []func(context.Context) error{records.ForceFlush, gatewayTP.SDK().ForceFlush, runtimeTP.SDK().ForceFlush} {
		if err := flush(ctx); err != nil {
			t.Fatal(err)
		}
	}

	// One query by trace id (asked again until the collector has stored what it was sent).
	var last string
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, wait.ForeverTestTimeout, true, func(ctx context.Context) (bool, error) {
		tr, err := jaeger.Query(ctx, collector.Query, traceID)
		if err != nil {
			if ctx.Err() == nil { // not the poll's own deadline: say what the last answer was
				last = err.Error()
			}
			return false, nil
		}
		found, why := check(tr)
		last = why
		return found, nil
	})
	if err != nil {
		t.Fatalf("the trace %s in Jaeger: %s", traceID, last)
	}
}

// check finds the Bash call's span and an egress span under it, and the Write's span and a
// file.write span of out.txt under it.
func check(tr jaeger.Trace) (bool, string) {
	byName := tr.ByName()
	bash, write := byName["tools/call Bash"], byName["tools/call Write"]
	egressSpans, files := byName["egress "+upstreamHost], byName["file.write"]
	if len(bash) != 1 || len(write) != 1 || len(egressSpans) != 1 || len(files) != 1 {
		return false, fmt.Sprintf("spans so far: %v", byName)
	}
	if got, want := tr.Parent(egressSpans[0]), tr.Spans[bash[0]].SpanID; got != want {
		return false, fmt.Sprintf("the egress span's parent %q, want the Bash call's span %q", got, want)
	}
	if tr.Service(egressSpans[0]) != tracing.ServiceEgress || tr.Service(bash[0]) != recordtrace.Service {
		return false, fmt.Sprintf("services %v", tr.Processes)
	}
	if tr.Tag(egressSpans[0], "airlock.egress.verdict") != "allowed" {
		return false, "the egress span does not say allowed"
	}
	if got, want := tr.Parent(files[0]), tr.Spans[write[0]].SpanID; got != want || tr.Tag(files[0], "file.path") != "out.txt" {
		return false, fmt.Sprintf("file.write parent %q path %q, want the Write call's span %q and out.txt", got, tr.Tag(files[0], "file.path"), want)
	}
	if tr.Parent(bash[0]) == "" || tr.Parent(bash[0]) != tr.Parent(write[0]) {
		return false, "the tool calls are not children of the runtime's span"
	}
	return true, ""
}

type resolver struct{}

func (resolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if host == upstreamHost+"." {
		return []netip.Addr{netip.MustParseAddr(upstreamV4)}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

type dialer struct{ upstream string }

func (d dialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	if address != upstreamV4+":80" {
		return nil, fmt.Errorf("the test dials only %s:80, not %s", upstreamV4, address)
	}
	var nd net.Dialer
	return nd.DialContext(ctx, network, d.upstream)
}

// startGateway runs an egress gateway for claim team-a/agent-a from 127.0.0.1, allowed
// upstreamHost:80, with the provider's tracer; it returns its address.
func startGateway(ctx context.Context, t *testing.T, tp *tracing.Provider) string {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "hello from upstream")
	}))
	t.Cleanup(upstream.Close)
	claims, err := egress.NewStaticClaims(egress.StaticClaim{Namespace: "team-a", Claim: "agent-a", Runtime: "agent", Password: password,
		Sources: []netip.Addr{netip.MustParseAddr("127.0.0.1")},
		Policy:  policy.Policy{Rules: []policy.Rule{{Host: upstreamHost, Ports: []uint16{80}}}}})
	if err != nil {
		t.Fatal(err)
	}
	claims.SetSynced()
	g, err := egress.New(egress.Config{Claims: claims, Resolver: resolver{}, Dialer: dialer{upstream: upstream.Listener.Addr().String()},
		Tracer: tp.Tracer(tracing.ServiceEgress)})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- g.Serve(gctx, ln) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("gateway: %v", err)
		}
	})
	return ln.Addr().String()
}

// startSandboxd runs sandboxd in process on a free loopback port until the test ends, and
// returns its URL once it is ready.
func startSandboxd(ctx context.Context, t *testing.T) string {
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", jaeger.FreePorts(t, 1)[0])
	sctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- sandboxd.Run(sctx, sandboxd.Config{Listen: addr, Workspace: t.TempDir(), AuthTokenFile: tokenFile, StateDir: t.TempDir()})
	}()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("sandboxd: %v", err)
		}
	})
	url := "http://" + addr
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, wait.ForeverTestTimeout, true, func(ctx context.Context) (bool, error) {
		resp, err := http.Get(url + "/readyz")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("sandboxd at %s: %v", url, err)
	}
	return url
}

type bearer struct{}

func (bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+token)
	return http.DefaultTransport.RoundTrip(r)
}

func connectMCP(ctx context.Context, t *testing.T, url string) *mcp.ClientSession {
	client := mcp.NewClient(&mcp.Implementation{Name: "trace-e2e", Version: "v0"}, nil)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url + "/mcp", HTTPClient: &http.Client{Transport: bearer{}}, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// readRecord reads sandboxd's record log as the leader does (GET /record, the claim's token).
func readRecord(ctx context.Context, t *testing.T, url string) []record.Entry {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/record", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out []record.Entry
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var e record.Entry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("record line %q: %v", sc.Text(), err)
		}
		out = append(out, e)
	}
	return out
}

func shutdown(t *testing.T, f func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f(ctx); err != nil {
		t.Errorf("shutdown: %v", err)
	}
}
