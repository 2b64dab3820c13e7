package tracing

import (
	"context"
	"encoding/binary"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

var testSpans = []*tracepb.ResourceSpans{
	{ScopeSpans: []*tracepb.ScopeSpans{{Spans: []*tracepb.Span{{Name: "a", TraceId: make([]byte, 16), SpanId: make([]byte, 8)}}}}},
	{ScopeSpans: []*tracepb.ScopeSpans{{Spans: []*tracepb.Span{{Name: "b"}}}}},
}

// decodeExport reads an ExportTraceServiceRequest's resource_spans (field 1).
func decodeExport(t *testing.T, b []byte) []string {
	t.Helper()
	var names []string
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || num != 1 || typ != protowire.BytesType {
			t.Fatalf("field %d type %d (n %d), want resource_spans (1, bytes)", num, typ, n)
		}
		b = b[n:]
		m, n := protowire.ConsumeBytes(b)
		if n < 0 {
			t.Fatal("truncated resource_spans")
		}
		b = b[n:]
		var rs tracepb.ResourceSpans
		if err := proto.Unmarshal(m, &rs); err != nil {
			t.Fatal(err)
		}
		names = append(names, rs.ScopeSpans[0].Spans[0].Name)
	}
	return names
}

// TestOTLPHTTP: a batch is one POST /v1/traces of an ExportTraceServiceRequest in protobuf; a
// status that is not 2xx is an error that says it.
func TestOTLPHTTP(t *testing.T) {
	var got []string
	status := http.StatusOK
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
			t.Errorf("%s %s %s", r.Method, r.URL.Path, r.Header.Get("Content-Type"))
		}
		b, _ := io.ReadAll(r.Body)
		got = decodeExport(t, b)
		w.WriteHeader(status)
		_, _ = io.WriteString(w, "collector says no")
	}))
	defer srv.Close()
	c := newOTLPClient(ProtocolHTTP, strings.TrimPrefix(srv.URL, "http://"), true)
	if err := c.UploadTraces(t.Context(), testSpans); err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, ",") != "a,b" {
		t.Errorf("the collector got %v", got)
	}
	status = http.StatusServiceUnavailable
	if err := c.UploadTraces(t.Context(), testSpans); err == nil || !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), "collector says no") {
		t.Errorf("a 503: %v", err)
	}
}

// TestOTLPGRPC: a batch is one unary TraceService/Export over HTTP/2 without TLS (prior
// knowledge), framed as gRPC frames a message; grpc-status 0 in the trailers is success, another
// status (in trailers or, trailers-only, in the headers) an error that names it.
func TestOTLPGRPC(t *testing.T) {
	var got []string
	var answer func(w http.ResponseWriter)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor != 2 || r.URL.Path != "/opentelemetry.proto.collector.trace.v1.TraceService/Export" ||
			r.Header.Get("Content-Type") != "application/grpc" || r.Header.Get("Te") != "trailers" {
			t.Errorf("%s %s %s te %q", r.Proto, r.URL.Path, r.Header.Get("Content-Type"), r.Header.Get("Te"))
		}
		b, _ := io.ReadAll(r.Body)
		if len(b) < 5 || b[0] != 0 || int(binary.BigEndian.Uint32(b[1:5])) != len(b)-5 {
			t.Fatalf("not one uncompressed gRPC frame: % x", b[:min(len(b), 5)])
		}
		got = decodeExport(t, b[5:])
		answer(w)
	}))
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	defer srv.Close()
	c := newOTLPClient(ProtocolGRPC, strings.TrimPrefix(srv.URL, "http://"), true)

	answer = func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/grpc")
		w.Header().Set("Trailer", "Grpc-Status, Grpc-Message")
		_, _ = w.Write([]byte{0, 0, 0, 0, 0}) // an empty ExportTraceServiceResponse
		w.Header().Set("Grpc-Status", "0")
	}
	if err := c.UploadTraces(t.Context(), testSpans); err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, ",") != "a,b" {
		t.Errorf("the collector got %v", got)
	}
	answer = func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/grpc")
		w.Header().Set("Grpc-Status", "14")
		w.Header().Set("Grpc-Message", "unavailable")
		w.WriteHeader(http.StatusOK)
	}
	if err := c.UploadTraces(t.Context(), testSpans); err == nil || !strings.Contains(err.Error(), `"14"`) {
		t.Errorf("a trailers-only grpc-status 14: %v", err)
	}
	answer = func(w http.ResponseWriter) {
		w.Header().Set("Trailer", "Grpc-Status")
		w.WriteHeader(http.StatusOK)
		w.Header().Set("Grpc-Status", "3")
	}
	if err := c.UploadTraces(t.Context(), testSpans); err == nil || !strings.Contains(err.Error(), `"3"`) {
		t.Errorf("grpc-status 3 in the trailers: %v", err)
	}
	answer = func(w http.ResponseWriter) { w.WriteHeader(http.StatusOK) }
	if err := c.UploadTraces(t.Context(), testSpans); err == nil {
		t.Error("no grpc-status: want an error")
	}
	if err := c.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestOTLPGRPCOverTLS: an https endpoint is gRPC over HTTP/2 with TLS (ALPN h2).
func TestOTLPGRPCOverTLS(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor != 2 || r.TLS == nil {
			t.Errorf("%s, TLS %v: want HTTP/2 over TLS", r.Proto, r.TLS != nil)
		}
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Trailer", "Grpc-Status")
		w.WriteHeader(http.StatusOK)
		w.Header().Set("Grpc-Status", "0")
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	c := newOTLPClient(ProtocolGRPC, strings.TrimPrefix(srv.URL, "https://"), false)
	c.hc.Transport.(*http.Transport).TLSClientConfig = srv.Client().Transport.(*http.Transport).TLSClientConfig
	if err := c.UploadTraces(t.Context(), testSpans); err != nil {
		t.Fatal(err)
	}
}
