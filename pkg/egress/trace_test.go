package egress

import (
	"strings"
	"testing"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/airlock-dev/airlock/pkg/traceparent"
)

var namedSpan, _ = traceparent.Parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")

func plainGet(user, pass string) string {
	return "GET http://allowed.example/x HTTP/1.1\r\nHost: allowed.example\r\nProxy-Authorization: " + basic(user, pass) + "\r\n\r\n"
}

// TestSpanInProxyUserNeverSelectsAnotherClaim: a span before the credential's user name is
// attribution only. Whatever it is (forged, malformed, oversized, repeated, mutated byte by
// byte), the claim a request is served as is the one the rest of the user name and the password
// select, exactly as without a span, or none (bad_credential): never another.
func TestSpanInProxyUserNeverSelectsAnotherClaim(t *testing.T) {
	f := newFixture(t, newInternet(t))
	prefix := traceparent.ProxyUser(namedSpan, "")
	tests := []struct {
		name, source, user, pass string
		wantReason               Reason
		wantClaim                string
	}{
		{name: "the span before claim A's credential", user: prefix + "team-a.agent-a", pass: passwordA, wantReason: ReasonAllowed, wantClaim: "agent-a"},
		{name: "a forged span before claim A's credential (the client's claim: attribution)", user: traceparent.ProxyUser(traceparent.Parent{Trace: traceparent.NewTraceID(), Span: traceparent.NewSpanID()}, "team-a.agent-a"), pass: passwordA, wantReason: ReasonAllowed, wantClaim: "agent-a"},
		{name: "claim B's name with claim A's password", user: prefix + "team-b.agent-b", pass: passwordA, wantReason: ReasonBadCredential},
		{name: "claim B's credential from A's pod", user: prefix + "team-b.agent-b", pass: passwordB, wantReason: ReasonWrongSource},
		{name: "claim B's credential from B's pod", source: "127.0.0.2", user: prefix + "team-b.agent-b", pass: passwordB, wantReason: ReasonAllowed, wantClaim: "agent-b"},
		{name: "a span twice", user: prefix + prefix + "team-a.agent-a", pass: passwordA, wantReason: ReasonBadCredential},
		{name: "nothing after the span", user: prefix, pass: passwordA, wantReason: ReasonBadCredential},
		{name: "upper-case ids", user: strings.ToUpper(prefix) + "team-a.agent-a", pass: passwordA, wantReason: ReasonBadCredential},
		{name: "a zero span", user: "_" + namedSpan.Trace.String() + "-0000000000000000.team-a.agent-a", pass: passwordA, wantReason: ReasonBadCredential},
		{name: "a short span", user: "_" + namedSpan.Trace.String() + "-00f067aa.team-a.agent-a", pass: passwordA, wantReason: ReasonBadCredential},
		{name: "an oversized span", user: "_" + strings.Repeat("a", 40000) + ".team-a.agent-a", pass: passwordA, wantReason: ReasonBadCredential},
		{name: "a user name of only an underscore", user: "_", pass: passwordA, wantReason: ReasonBadCredential},
		{name: "an underscore before claim A's credential", user: "_team-a.agent-a", pass: passwordA, wantReason: ReasonBadCredential},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _, _ := f.send(tt.source, plainGet(tt.user, tt.pass))
			rec := f.record()
			if rec.Reason != tt.wantReason || (tt.wantReason != ReasonAllowed && got.reason != tt.wantReason) || rec.Claim != tt.wantClaim {
				t.Errorf("reason %q (record %q), claim %q; want %q, claim %q", got.reason, rec.Reason, rec.Claim, tt.wantReason, tt.wantClaim)
			}
		})
	}
	// Every byte of the span's part changed to each of a few others: claim A with A's password
	// or refused; claim B's name never comes out, and no mutation is served as anyone with B's
	// password from A's pod.
	for i := 0; i < len(prefix); i++ {
		for _, c := range []byte{'0', 'f', 'g', 'A', '.', '-', '_', ':', '%'} {
			if prefix[i] == c {
				continue
			}
			mutated := prefix[:i] + string(c) + prefix[i+1:]
			for _, pass := range []string{passwordA, passwordB} {
				f.send("", plainGet(mutated+"team-a.agent-a", pass))
				rec := f.record()
				if rec.Claim != "" && (rec.Claim != "agent-a" || pass != passwordA) || rec.Reason == ReasonAllowed && pass != passwordA {
					t.Fatalf("user %q password of %s: served as %q (%q)", mutated+"team-a.agent-a", pass, rec.Claim, rec.Reason)
				}
			}
		}
	}
}

// TestEgressSpanParentedOnTheNamedSpan: with a tracer, each decision is an "egress <host>" span,
// a child of the span the credential's user name named (or a root without one), saying the
// verdict; a refused one has an error status.
func TestEgressSpanParentedOnTheNamedSpan(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	f := newFixture(t, newInternet(t), withTracer(tp.Tracer("test")))

	if got, _, _ := f.send("", plainGet(traceparent.ProxyUser(namedSpan, "team-a.agent-a"), passwordA)); got.status != 200 {
		t.Fatalf("allowed request: %+v", got)
	}
	f.record()
	if got, _, _ := f.send("", plainGet("team-a.agent-a", passwordA)); got.status != 200 {
		t.Fatalf("allowed request without a span: %+v", got)
	}
	f.record()
	if got, _, _ := f.send("", plainGet(traceparent.ProxyUser(namedSpan, "team-a.agent-a"), passwordB)); got.reason != ReasonBadCredential {
		t.Fatalf("refused request: %+v", got)
	}
	f.record()

	spans := exp.GetSpans()
	if len(spans) != 3 {
		t.Fatalf("%d spans, want 3", len(spans))
	}
	named, root, refused := spans[0], spans[1], spans[2]
	if named.Name != "egress allowed.example" || named.Parent.SpanID().String() != namedSpan.Span.String() ||
		named.SpanContext.TraceID().String() != namedSpan.Trace.String() || !named.Parent.IsRemote() {
		t.Errorf("span %q trace %s parent %s: want egress allowed.example under %s", named.Name, named.SpanContext.TraceID(), named.Parent.SpanID(), namedSpan)
	}
	if root.Parent.IsValid() || root.SpanContext.TraceID().String() == namedSpan.Trace.String() {
		t.Errorf("a request without a span: parent %v, want a new root", root.Parent)
	}
	if refused.Status.Code != codes.Error || refused.Parent.SpanID().String() != namedSpan.Span.String() {
		t.Errorf("refused: status %v parent %s", refused.Status, refused.Parent.SpanID())
	}
	for _, s := range spans {
		for _, a := range s.Attributes {
			if strings.Contains(a.Value.Emit(), passwordA) || strings.Contains(a.Value.Emit(), passwordB) {
				t.Errorf("span %q attribute %s holds a password", s.Name, a.Key)
			}
		}
	}
}
