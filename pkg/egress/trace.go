package egress

import (
	"context"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/airlock-dev/airlock/pkg/traceparent"
)

// takeSpan takes the span a proxy user name names off the credential (docs/record.md §1,
// docs/security.md "A span in the proxy user name"): "_<trace>-<span>.<user>" is the credential
// <user> and the span, for attribution only. A user name that does not start with "_" is the
// credential's own and is left as it is; one that does but is not exactly that form is refused
// (ok false: bad_credential), never looked up whole or in part. The claim is then chosen by the
// rest and the password alone, as without a span.
func (g *Gateway) takeSpan(cred Credential, ex *exchange) (Credential, bool) {
	rest, parent, traced, valid := traceparent.SplitProxyUser(cred.Username)
	if !valid {
		return Credential{}, false
	}
	cred.Username = rest
	ex.parent, ex.traced = parent, traced
	return cred, true
}

// span exports the exchange's decision as an "egress <host>" span from its start to now, a child
// of the span its credential named (else a new root), when the gateway traces. It carries what
// the audit line says and never the credential.
func (g *Gateway) span(ctx context.Context, ex *exchange, host, decision string, duration time.Duration) {
	if g.cfg.Tracer == nil {
		return
	}
	ctx = context.WithoutCancel(ctx)
	if ex.traced {
		ctx = trace.ContextWithRemoteSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: trace.TraceID(ex.parent.Trace), SpanID: trace.SpanID(ex.parent.Span),
			TraceFlags: trace.FlagsSampled, Remote: true,
		}))
	}
	attrs := []attribute.KeyValue{
		attribute.String("airlock.egress.kind", ex.kind),
		attribute.String("server.address", host),
		attribute.Int("server.port", int(ex.port)),
		attribute.String("airlock.egress.verdict", decision),
		attribute.String("airlock.egress.reason", string(ex.reason)),
		attribute.String("client.address", ex.source.String()),
		attribute.Int64("airlock.egress.bytes_up", ex.up),
		attribute.Int64("airlock.egress.bytes_down", ex.down),
	}
	if ex.id.Claim != "" {
		attrs = append(attrs, attribute.String("airlock.claim", ex.id.Namespace+"/"+ex.id.Claim),
			attribute.String("airlock.runtime", ex.id.Runtime))
		if ex.id.ClaimUID != "" {
			attrs = append(attrs, attribute.String("airlock.claim.uid", string(ex.id.ClaimUID)))
		}
	}
	if ex.dialed.IsValid() {
		attrs = append(attrs, attribute.String("network.peer.address", ex.dialed.Addr().String()),
			attribute.String("network.peer.port", strconv.Itoa(int(ex.dialed.Port()))))
	}
	_, s := g.cfg.Tracer.Start(ctx, "egress "+host, trace.WithTimestamp(ex.start),
		trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	if decision != "allowed" {
		s.SetStatus(codes.Error, string(ex.reason))
	}
	s.End(trace.WithTimestamp(ex.start.Add(duration)))
}
