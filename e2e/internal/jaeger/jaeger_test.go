package jaeger

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// answer is a query API answer as Jaeger v1.75.0 gives it (trimmed): a root, a child with an
// error status and tags of three types.
const answer = `{"data":[{"traceID":"4bf92f3577b34da6a3ce929d0e0e4736","spans":[
 {"traceID":"4bf92f3577b34da6a3ce929d0e0e4736","spanID":"00f067aa0ba902b7","operationName":"agent turn","references":[],
  "startTime":1765000000000000,"duration":2000000,"tags":[],"processID":"p1"},
 {"traceID":"4bf92f3577b34da6a3ce929d0e0e4736","spanID":"b7ad6b7169203331","operationName":"syncback",
  "references":[{"refType":"CHILD_OF","traceID":"4bf92f3577b34da6a3ce929d0e0e4736","spanID":"00f067aa0ba902b7"}],
  "startTime":1765000000500000,"duration":250000,
  "tags":[{"key":"airlock.syncback.attempt","type":"int64","value":2},{"key":"error","type":"bool","value":true},
          {"key":"otel.status_code","type":"string","value":"ERROR"},{"key":"airlock.claim.name","type":"string","value":"c1"}],
  "processID":"p2"}],
 "processes":{"p1":{"serviceName":"airlock-e2e-runtime","tags":[]},"p2":{"serviceName":"airlock-operator","tags":[]}},"warnings":null}],
 "total":0,"limit":0,"offset":0,"errors":null}`

// TestTraceReadsSpansParentsTagsAndServices: a query API answer is read into spans whose parents,
// tags, status, services and times are what Jaeger said.
func TestTraceReadsSpansParentsTagsAndServices(t *testing.T) {
	tr, err := parse("4bf92f3577b34da6a3ce929d0e0e4736", []byte(answer))
	if err != nil {
		t.Fatal(err)
	}
	root, sync := tr.Find("00f067aa0ba902b7"), tr.Find("b7ad6b7169203331")
	if root != 0 || sync != 1 || tr.Find("ffffffffffffffff") != -1 {
		t.Fatalf("Find: root %d syncback %d", root, sync)
	}
	if tr.Parent(root) != "" || tr.Parent(sync) != "00f067aa0ba902b7" {
		t.Errorf("parents %q %q", tr.Parent(root), tr.Parent(sync))
	}
	if tr.Service(root) != "airlock-e2e-runtime" || tr.Service(sync) != "airlock-operator" {
		t.Errorf("services %q %q", tr.Service(root), tr.Service(sync))
	}
	if tr.Tag(sync, "airlock.syncback.attempt") != "2" || tr.Tag(sync, "airlock.claim.name") != "c1" || tr.Tag(sync, "nope") != "" {
		t.Errorf("tags %v", tr.Spans[sync].Tags)
	}
	if tr.Failed(root) || !tr.Failed(sync) {
		t.Errorf("failed: root %v syncback %v", tr.Failed(root), tr.Failed(sync))
	}
	if want := time.UnixMicro(1765000000500000); !tr.Start(sync).Equal(want) || tr.End(sync).Sub(want) != 250*time.Millisecond {
		t.Errorf("syncback %v..%v", tr.Start(sync), tr.End(sync))
	}
	if by := tr.ByName(); len(by["syncback"]) != 1 || len(by["agent turn"]) != 1 {
		t.Errorf("ByName %v", by)
	}
	want := "[airlock-e2e-runtime: agent turn 00f067aa0ba902b7 (parent ); airlock-operator: syncback b7ad6b7169203331 (parent 00f067aa0ba902b7)]"
	if got := tr.Summary(); got != want {
		t.Errorf("Summary\n got %s\nwant %s", got, want)
	}
}

// TestQuery: one GET /api/traces/<id>; a trace Jaeger does not hold (404) is an error that says
// the answer; Services lists the services.
func TestQuery(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/api/traces/4bf92f3577b34da6a3ce929d0e0e4736":
			w.Write([]byte(answer))
		case "/api/services":
			w.Write([]byte(`{"data":["airlock-operator","airlock-e2e-runtime"]}`))
		default:
			http.Error(w, `{"errors":[{"code":404,"msg":"trace not found"}]}`, http.StatusNotFound)
		}
	}))
	defer srv.Close()
	tr, err := Query(t.Context(), srv.URL, "4bf92f3577b34da6a3ce929d0e0e4736")
	if err != nil || len(tr.Spans) != 2 {
		t.Fatalf("Query: %v %+v", err, tr)
	}
	if _, err := Query(t.Context(), srv.URL, "0123"); err == nil || !strings.Contains(err.Error(), "404") || !strings.Contains(err.Error(), "trace not found") {
		t.Errorf("a trace Jaeger does not hold: %v", err)
	}
	if got := Services(srv.URL); got != "[airlock-operator airlock-e2e-runtime]" {
		t.Errorf("Services: %s", got)
	}
}
