package egress

import (
	"context"
	"net/netip"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
)

// Record is what the audit line of one exchange says, handed to Config.Observe (where, say, a
// Warning event on the claim for its first refused host can be recorded).
type Record struct {
	// Kind is "connect" (a tunnel) or "http" (one plain HTTP request).
	Kind      string
	Source    netip.Addr
	Namespace string
	Claim     string
	ClaimUID  types.UID
	Runtime   string
	// Host and Port are the normalised target (Host cut to 253 bytes), when it parsed.
	Host string
	Port uint16
	// Address is the address dialed, if any.
	Address   netip.AddrPort
	Allowed   bool
	Reason    Reason
	BytesUp   int64
	BytesDown int64
	Duration  time.Duration
	// Credential is the name of the credential a rule injected (never its value), if any.
	Credential string
	// Trace and Parent are the trace and span the proxy user name named (hex), if any.
	Trace, Parent string
}

// maxLoggedHost bounds the host in an audit line: a refused name is the client's text.
const maxLoggedHost = 253

// audit writes the exchange's one audit line and its metrics. It never logs a path, a query or a
// header's value.
func (g *Gateway) audit(ctx context.Context, ex *exchange) {
	decision := "denied"
	if ex.reason == ReasonAllowed {
		decision = "allowed"
	}
	if ex.reason == "" {
		ex.reason = ReasonBadRequest
	}
	duration := g.cfg.Clock.Since(ex.start)
	host := ex.host
	if len(host) > maxLoggedHost {
		host = host[:maxLoggedHost]
	}
	kv := []any{"kind", ex.kind, "source", ex.source.String()}
	if ex.id.Claim != "" {
		kv = append(kv, "claim", klog.KRef(ex.id.Namespace, ex.id.Claim), "runtime", ex.id.Runtime)
	}
	kv = append(kv, "host", host, "port", ex.port)
	if ex.dialed.IsValid() {
		kv = append(kv, "address", ex.dialed.String())
	}
	kv = append(kv, "decision", decision, "reason", string(ex.reason),
		"bytesUp", ex.up, "bytesDown", ex.down, "duration", duration)
	klog.FromContext(ctx).Info("Egress", kv...)
	g.span(ctx, ex, host, decision, duration) // before Observe: whoever it tells finds the span ended
	r := Record{Kind: ex.kind, Source: ex.source, Namespace: ex.id.Namespace, Claim: ex.id.Claim, ClaimUID: ex.id.ClaimUID,
		Runtime: ex.id.Runtime, Host: host, Port: ex.port, Address: ex.dialed, Allowed: decision == "allowed",
		Reason: ex.reason, BytesUp: ex.up, BytesDown: ex.down, Duration: duration, Credential: ex.credential}
	if ex.traced {
		r.Trace, r.Parent = ex.parent.Trace.String(), ex.parent.Span.String()
	}
	if g.cfg.Decisions != nil && ex.id.ClaimUID != "" {
		g.cfg.Decisions.Add(ex.id.ClaimUID, RecordEntry(r, ex.start))
	}
	if g.cfg.Observe != nil {
		g.cfg.Observe(r)
	}

	requests.WithLabelValues(ex.kind, decision, string(ex.reason)).Inc()
	durations.WithLabelValues(ex.kind, decision).Observe(duration.Seconds())
	transferred.WithLabelValues("up").Add(float64(ex.up))
	transferred.WithLabelValues("down").Add(float64(ex.down))
	if ex.id.Runtime != "" && ex.up+ex.down > 0 {
		runtimeBytes.WithLabelValues(ex.id.Namespace, ex.id.Runtime, "up").Add(float64(ex.up))
		runtimeBytes.WithLabelValues(ex.id.Namespace, ex.id.Runtime, "down").Add(float64(ex.down))
	}
}
