// Package tracing sets up the OpenTelemetry trace provider of airlock's programs that export (the
// operator and the egress gateway; sandboxd never does: docs/record.md §1). Tracing is off by
// default: with no endpoint the provider is the no-op one, no exporter exists and a span costs
// what the API's no-op costs. On, spans go over OTLP (gRPC or HTTP) to the collector the chart
// names, sampled parent-based with a ratio for new roots.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.39.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Protocols of the OTLP exporter.
const (
	ProtocolGRPC = "grpc"
	ProtocolHTTP = "http"
)

// The service names of the programs that export (a span's service.name).
const (
	ServiceOperator = "airlock-operator"
	ServiceEgress   = "airlock-egress"
)

// DefaultSampleRatio is the share of new roots sampled when tracing is on.
const DefaultSampleRatio = 0.1

// Config says where spans go. The zero value is off.
type Config struct {
	// Endpoint is the collector's OTLP endpoint: host:port (plain text inside the cluster), or a
	// URL whose scheme says http (plain) or https (TLS). Empty: tracing is off.
	Endpoint string
	// Protocol is ProtocolGRPC (default) or ProtocolHTTP.
	Protocol string
	// SampleRatio is the share of new roots sampled, from 0 to 1; a span with a parent follows
	// its parent's decision.
	SampleRatio float64
}

// Enabled reports whether spans are exported.
func (c Config) Enabled() bool { return c.Endpoint != "" }

// Validate returns what is wrong with c, each error naming its field for the caller to name its
// flag: "endpoint", "protocol" or "sample-ratio".
func (c Config) Validate() map[string]error {
	errs := map[string]error{}
	if c.Protocol != "" && c.Protocol != ProtocolGRPC && c.Protocol != ProtocolHTTP {
		errs["protocol"] = fmt.Errorf("must be %q or %q, got %q", ProtocolGRPC, ProtocolHTTP, c.Protocol)
	}
	if c.SampleRatio < 0 || c.SampleRatio > 1 || c.SampleRatio != c.SampleRatio {
		errs["sample-ratio"] = fmt.Errorf("must be from 0 to 1, got %v", c.SampleRatio)
	}
	if c.Endpoint != "" {
		if _, _, err := c.target(); err != nil {
			errs["endpoint"] = err
		}
	}
	return errs
}

// target is the endpoint as host:port and whether it is plain text.
func (c Config) target() (hostPort string, insecure bool, err error) {
	if !strings.Contains(c.Endpoint, "://") {
		if strings.ContainsAny(c.Endpoint, "/ ") || !strings.Contains(c.Endpoint, ":") {
			return "", false, fmt.Errorf("must be host:port, like otel-collector.observability:4317, or an http:// or https:// URL, got %q", c.Endpoint)
		}
		return c.Endpoint, true, nil
	}
	u, err := url.Parse(c.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return "", false, fmt.Errorf("must be host:port, or an http:// or https:// URL with a host and no user, got %q", c.Endpoint)
	}
	if u.Path != "" && u.Path != "/" {
		return "", false, fmt.Errorf("must name no path (the OTLP path is the protocol's), got %q", c.Endpoint)
	}
	return u.Host, u.Scheme == "http", nil
}

// Provider is a program's trace provider and how to end it.
type Provider struct {
	trace.TracerProvider
	sdk *sdktrace.TracerProvider
}

// Shutdown flushes what is queued and stops the exporter; a no-op when tracing is off.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p.sdk == nil {
		return nil
	}
	return p.sdk.Shutdown(ctx)
}

// SDK is the SDK provider when tracing is on, else nil.
func (p *Provider) SDK() *sdktrace.TracerProvider { return p.sdk }

// Propagator is the one propagation airlock reads and writes: W3C Trace Context.
var Propagator = propagation.TraceContext{}

// New returns the provider c describes for the program service (a span's service.name): the
// no-op provider when tracing is off, else an SDK provider batching to an OTLP exporter. It does
// not dial: the exporter connects when it first sends.
func New(ctx context.Context, c Config, service string) (*Provider, error) {
	if !c.Enabled() {
		return &Provider{TracerProvider: noop.NewTracerProvider()}, nil
	}
	if errs := c.Validate(); len(errs) > 0 {
		return nil, errors.Join(mapErrors(errs)...)
	}
	exp, err := NewExporter(ctx, c)
	if err != nil {
		return nil, err
	}
	sdk := NewSDKProvider(c, service, sdktrace.WithBatcher(exp))
	return &Provider{TracerProvider: sdk, sdk: sdk}, nil
}

// NewSDKProvider is the SDK provider of service with c's sampler and the given options (an
// exporter: tests give an in-memory one).
func NewSDKProvider(c Config, service string, opts ...sdktrace.TracerProviderOption) *sdktrace.TracerProvider {
	res := resource.NewSchemaless(semconv.ServiceName(service))
	opts = append([]sdktrace.TracerProviderOption{
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(c.SampleRatio))),
		sdktrace.WithResource(res),
	}, opts...)
	return sdktrace.NewTracerProvider(opts...)
}

// NewExporter is the OTLP exporter of c (which must be enabled and valid).
func NewExporter(ctx context.Context, c Config) (sdktrace.SpanExporter, error) {
	host, insecure, err := c.target()
	if err != nil {
		return nil, err
	}
	protocol := c.Protocol
	if protocol == "" {
		protocol = ProtocolGRPC
	}
	return otlptrace.New(ctx, newOTLPClient(protocol, host, insecure))
}

func mapErrors(errs map[string]error) []error {
	var out []error
	for _, k := range []string{"endpoint", "protocol", "sample-ratio"} {
		if err, ok := errs[k]; ok {
			out = append(out, fmt.Errorf("%s: %w", k, err))
		}
	}
	return out
}
