//go:build !sandboxd_only

package cmd

import (
	"context"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	"github.com/airlock-dev/airlock/pkg/tracing"
)

// TracingOptions are the --tracing-* flags of the programs that export spans (the operator and
// the egress gateway): off unless --tracing-endpoint is set (docs/record.md §1).
type TracingOptions struct {
	Endpoint    string
	Protocol    string
	SampleRatio float64
}

// newTracingOptions returns the defaults: off; gRPC and the default ratio once an endpoint is set.
func newTracingOptions() *TracingOptions {
	return &TracingOptions{Protocol: tracing.ProtocolGRPC, SampleRatio: tracing.DefaultSampleRatio}
}

func (o *TracingOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Endpoint, "tracing-endpoint", o.Endpoint, "OTLP endpoint spans are exported to: host:port (plain text), or an http:// or https:// URL (https: TLS). Empty: tracing is off (no exporter; spans are the API's no-op).")
	fs.StringVar(&o.Protocol, "tracing-protocol", o.Protocol, `OTLP protocol of --tracing-endpoint: "grpc" or "http".`)
	fs.Float64Var(&o.SampleRatio, "tracing-sample-ratio", o.SampleRatio, "Share of new traces sampled, from 0 to 1; a span with a parent (a W3C traceparent) follows its parent's decision.")
}

// Validate returns one error for each invalid flag value, naming the flag.
func (o *TracingOptions) Validate() []error {
	errs := o.Config().Validate()
	var out []error
	for _, field := range []string{"endpoint", "protocol", "sample-ratio"} {
		if err, ok := errs[field]; ok {
			out = append(out, invalidFlag("tracing-"+field, "%v", err))
		}
	}
	return out
}

// Config is the tracing configuration of the flags.
func (o *TracingOptions) Config() tracing.Config {
	return tracing.Config{Endpoint: o.Endpoint, Protocol: o.Protocol, SampleRatio: o.SampleRatio}
}

// shutdownTracing flushes the spans a program has queued, for at most tracingShutdownTimeout (a
// collector that is gone must not hold up the exit).
func shutdownTracing(tp interface{ Shutdown(context.Context) error }) {
	ctx, cancel := context.WithTimeout(context.Background(), tracingShutdownTimeout)
	defer cancel()
	if err := tp.Shutdown(ctx); err != nil {
		klog.Background().Error(err, "Flushing spans at exit failed")
	}
}

// tracingShutdownTimeout bounds the flush of queued spans at exit.
const tracingShutdownTimeout = 5 * time.Second
