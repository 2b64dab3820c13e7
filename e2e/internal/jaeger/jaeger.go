// Package jaeger is the e2e tests' trace collector: the real Jaeger (v2, an OpenTelemetry
// Collector, built from its pin in hack/tools/jaeger by `hack/build-cluster-bins.sh jaeger`),
// started for a test on free loopback ports with in-memory storage, OTLP in and the query API
// out; and the reading of a trace back from a query API (this one's, or the one
// hack/e2e-node.sh runs for the real node): one GET /api/traces/<id>, its spans, parents, tags
// and services, and a summary to print when a check fails (docs/record.md §1).
package jaeger

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// Collector is a running Jaeger.
type Collector struct {
	OTLPGRPC string // host:port of OTLP over gRPC
	OTLPHTTP string // host:port of OTLP over HTTP
	Query    string // base URL of the query API
}

// Bin is $AIRLOCK_BIN_DIR/jaeger, else the repository's bin/jaeger; the test fails without it.
func Bin(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("AIRLOCK_BIN_DIR")
	if dir == "" {
		root, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
		if err != nil {
			t.Fatalf("finding the module: %v", err)
		}
		dir = filepath.Join(strings.TrimSpace(string(root)), "bin")
	}
	bin := filepath.Join(dir, "jaeger")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%v: build it with hack/build-cluster-bins.sh jaeger", err)
	}
	return bin
}

// config is Jaeger's configuration: in-memory storage, OTLP (gRPC and HTTP) in, the query API
// out, on the given loopback ports: health, query HTTP, query gRPC, OTLP gRPC, OTLP HTTP.
const config = `service:
  extensions: [jaeger_storage, jaeger_query, healthcheckv2]
  pipelines:
    traces:
      receivers: [otlp]
      processors: []
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  healthcheckv2:
    use_v2: true
    http:
      endpoint: 127.0.0.1:%d
  jaeger_query:
    storage:
      traces: memstore
    http:
      endpoint: 127.0.0.1:%d
    grpc:
      endpoint: 127.0.0.1:%d
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 10000
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:%d
      http:
        endpoint: 127.0.0.1:%d
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
`

// Start runs Jaeger until the test ends (its log printed if the test failed), and returns once
// its query API answers.
func Start(t testing.TB) Collector {
	t.Helper()
	ports := FreePorts(t, 5)
	file := filepath.Join(t.TempDir(), "jaeger.yaml")
	if err := os.WriteFile(file, fmt.Appendf(nil, config, ports[0], ports[1], ports[2], ports[3], ports[4]), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(Bin(t), "--config", "file:"+file)
	logFile, err := os.Create(filepath.Join(t.TempDir(), "jaeger.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		logFile.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logFile.Name())
			t.Logf("jaeger's log:\n%s", b)
		}
	})
	c := Collector{OTLPGRPC: fmt.Sprintf("127.0.0.1:%d", ports[3]), OTLPHTTP: fmt.Sprintf("127.0.0.1:%d", ports[4]), Query: fmt.Sprintf("http://127.0.0.1:%d", ports[1])}
	err = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, wait.ForeverTestTimeout, true, func(ctx context.Context) (bool, error) {
		select {
		case err := <-exited:
			exited <- err
			return false, fmt.Errorf("jaeger exited: %v", err)
		default:
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.Query+"/api/services", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("jaeger's query API: %v", err)
	}
	return c
}

// FreePorts returns n loopback ports that were free a moment ago.
func FreePorts(t testing.TB, n int) []int {
	var lns []net.Listener
	var ports []int
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	for _, ln := range lns {
		ln.Close()
	}
	return ports
}

// Trace is the part of the query API's answer for one trace (GET /api/traces/<id>) the tests
// read.
type Trace struct {
	Spans     []Span             `json:"spans"`
	Processes map[string]Process `json:"processes"`
}

// Span is one span of a Trace.
type Span struct {
	TraceID       string      `json:"traceID"`
	SpanID        string      `json:"spanID"`
	OperationName string      `json:"operationName"`
	References    []Reference `json:"references"`
	StartTime     int64       `json:"startTime"` // microseconds since the epoch
	Duration      int64       `json:"duration"`  // microseconds
	Tags          []KeyValue  `json:"tags"`
	ProcessID     string      `json:"processID"`
}

// Reference is a span's reference to another (CHILD_OF: its parent).
type Reference struct {
	RefType string `json:"refType"`
	SpanID  string `json:"spanID"`
}

// KeyValue is a tag.
type KeyValue struct {
	Key   string `json:"key"`
	Value any    `json:"value"`
}

// Process is the program that exported a span (its service.name).
type Process struct {
	ServiceName string `json:"serviceName"`
}

// Query is the trace id of the query API at base (its one GET /api/traces/<id>, at most 10 s):
// an error when Jaeger does not hold it (yet) or answers anything else.
func Query(ctx context.Context, base, id string) (Trace, error) {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, base+"/api/traces/"+id, nil)
	if err != nil {
		return Trace{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return Trace{}, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return Trace{}, fmt.Errorf("GET /api/traces/%s: %d %.300s", id, resp.StatusCode, body)
	}
	return parse(id, body)
}

// parse reads the query API's answer for trace id.
func parse(id string, body []byte) (Trace, error) {
	var out struct {
		Data []Trace `json:"data"`
	}
	if err := json.Unmarshal(body, &out); err != nil || len(out.Data) != 1 {
		return Trace{}, fmt.Errorf("GET /api/traces/%s: %v %.300s", id, err, body)
	}
	return out.Data[0], nil
}

// Services is the query API's list of the services it has spans of, or why it is not known:
// what to print when a trace lacks a program's spans.
func Services(base string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/services", nil)
	if err != nil {
		return err.Error()
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var out struct {
		Data []string `json:"data"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		return fmt.Sprintf("%v: %.300s", err, body)
	}
	return fmt.Sprint(out.Data)
}

// Parent is the span id of span i's parent (its CHILD_OF reference), "" for a root.
func (tr Trace) Parent(i int) string {
	for _, r := range tr.Spans[i].References {
		if r.RefType == "CHILD_OF" {
			return r.SpanID
		}
	}
	return ""
}

// Tag is span i's tag key, as text ("" without it).
func (tr Trace) Tag(i int, key string) string {
	for _, tg := range tr.Spans[i].Tags {
		if tg.Key == key {
			return fmt.Sprint(tg.Value)
		}
	}
	return ""
}

// Failed says whether span i's status is an error.
func (tr Trace) Failed(i int) bool {
	return tr.Tag(i, "otel.status_code") == "ERROR" || tr.Tag(i, "error") == "true"
}

// Service is the service.name of the program that exported span i.
func (tr Trace) Service(i int) string { return tr.Processes[tr.Spans[i].ProcessID].ServiceName }

// Start and End are span i's times.
func (tr Trace) Start(i int) time.Time { return time.UnixMicro(tr.Spans[i].StartTime) }
func (tr Trace) End(i int) time.Time {
	return time.UnixMicro(tr.Spans[i].StartTime + tr.Spans[i].Duration)
}

// ByName indexes the spans by operation name.
func (tr Trace) ByName() map[string][]int {
	out := map[string][]int{}
	for i, s := range tr.Spans {
		out[s.OperationName] = append(out[s.OperationName], i)
	}
	return out
}

// Find is the index of the span with id, or -1.
func (tr Trace) Find(spanID string) int {
	for i, s := range tr.Spans {
		if s.SpanID == spanID {
			return i
		}
	}
	return -1
}

// Summary lists the spans, as "service: operation span (parent p)", sorted.
func (tr Trace) Summary() string {
	out := make([]string, 0, len(tr.Spans))
	for i, s := range tr.Spans {
		out = append(out, fmt.Sprintf("%s: %s %s (parent %s)", tr.Service(i), s.OperationName, s.SpanID, tr.Parent(i)))
	}
	sort.Strings(out)
	return "[" + strings.Join(out, "; ") + "]"
}
