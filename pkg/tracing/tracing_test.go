package tracing

import (
	"context"
	"net/http"
	"testing"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

func TestOffIsTheNoopProvider(t *testing.T) {
	p, err := New(t.Context(), Config{}, "test")
	if err != nil {
		t.Fatal(err)
	}
	if p.SDK() != nil {
		t.Fatal("tracing off built an SDK provider")
	}
	_, span := p.Tracer("t").Start(t.Context(), "x")
	if span.SpanContext().IsValid() || span.IsRecording() {
		t.Errorf("a span of the off provider is recording or has ids: %+v", span.SpanContext())
	}
	if err := p.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
}

func TestValidateNamesTheField(t *testing.T) {
	tests := map[string]struct {
		c    Config
		want []string
	}{
		"off":                 {c: Config{}},
		"host:port":           {c: Config{Endpoint: "collector.obs:4317", SampleRatio: 0.1}},
		"https URL":           {c: Config{Endpoint: "https://collector.obs:4318", Protocol: ProtocolHTTP, SampleRatio: 1}},
		"no port":             {c: Config{Endpoint: "collector"}, want: []string{"endpoint"}},
		"a path":              {c: Config{Endpoint: "http://collector:4318/v1/traces"}, want: []string{"endpoint"}},
		"a user":              {c: Config{Endpoint: "http://u:p@collector:4318"}, want: []string{"endpoint"}},
		"another scheme":      {c: Config{Endpoint: "ftp://collector:4318"}, want: []string{"endpoint"}},
		"unknown protocol":    {c: Config{Protocol: "thrift"}, want: []string{"protocol"}},
		"ratio above one":     {c: Config{SampleRatio: 1.5}, want: []string{"sample-ratio"}},
		"ratio below zero":    {c: Config{SampleRatio: -0.1}, want: []string{"sample-ratio"}},
		"everything is wrong": {c: Config{Endpoint: "x", Protocol: "y", SampleRatio: 2}, want: []string{"endpoint", "protocol", "sample-ratio"}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			errs := tt.c.Validate()
			if len(errs) != len(tt.want) {
				t.Fatalf("Validate() = %v, want errors of %v", errs, tt.want)
			}
			for _, f := range tt.want {
				if errs[f] == nil {
					t.Errorf("no error of %s in %v", f, errs)
				}
			}
		})
	}
}

// TestParentBasedSampling: a new root is sampled by the ratio; a span whose parent (a remote
// traceparent) was sampled is sampled whatever the ratio, and one whose parent was not is not.
func TestParentBasedSampling(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	p := NewSDKProvider(Config{Endpoint: "x:1", SampleRatio: 0}, "test", sdktraceSyncer(exp))
	tr := p.Tracer("t")
	_, root := tr.Start(t.Context(), "root")
	root.End()
	for _, tc := range []struct {
		header string
		want   bool
	}{
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", true},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", false},
	} {
		ctx := Propagator.Extract(context.Background(), propagation.HeaderCarrier(http.Header{"Traceparent": {tc.header}}))
		_, span := tr.Start(ctx, "child")
		if span.SpanContext().IsSampled() != tc.want {
			t.Errorf("parent %s: sampled %v, want %v", tc.header, span.SpanContext().IsSampled(), tc.want)
		}
		if span.SpanContext().TraceID() != trace.SpanContextFromContext(ctx).TraceID() {
			t.Errorf("parent %s: the child is not in its trace", tc.header)
		}
		span.End()
	}
	if got := exp.GetSpans(); len(got) != 1 || got[0].Name != "child" {
		t.Errorf("exported %d spans (%v), want the sampled child only (ratio 0: no root)", len(got), got)
	}
}

func sdktraceSyncer(exp *tracetest.InMemoryExporter) sdktrace.TracerProviderOption {
	return sdktrace.WithSyncer(exp)
}

// TestOnIsTheSDKProvider: with an endpoint the provider's tracer records (no collector is
// reached: the exporter dials when it sends).
func TestOnIsTheSDKProvider(t *testing.T) {
	p, err := New(t.Context(), Config{Endpoint: "127.0.0.1:1", SampleRatio: 1}, "test")
	if err != nil {
		t.Fatal(err)
	}
	_, span := p.Tracer("t").Start(t.Context(), "x")
	if p.SDK() == nil || !span.SpanContext().IsValid() || !span.IsRecording() {
		t.Errorf("tracing on: sdk %v, span %+v recording %v", p.SDK(), span.SpanContext(), span.IsRecording())
	}
	span.End()
	ctx, cancel := context.WithCancel(t.Context())
	cancel() // nothing to wait for: the collector does not exist
	_ = p.Shutdown(ctx)
}
