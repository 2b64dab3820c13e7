package traceparent

import (
	"strings"
	"testing"
)

const good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

func TestParse(t *testing.T) {
	tests := []struct {
		name        string
		in          string
		wantOK      bool
		wantSampled bool
	}{
		{name: "the spec's example", in: good, wantOK: true, wantSampled: true},
		{name: "not sampled", in: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", wantOK: true},
		{name: "a later version with more fields", in: "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-follows", wantOK: true, wantSampled: true},
		{name: "version 00 with more fields", in: good + "-x"},
		{name: "version ff", in: "ff" + good[2:]},
		{name: "upper-case hex", in: strings.ToUpper(good)},
		{name: "zero trace", in: "00-00000000000000000000000000000000-00f067aa0ba902b7-01"},
		{name: "zero span", in: "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01"},
		{name: "short", in: good[:54]},
		{name: "empty", in: ""},
		{name: "separators moved", in: "00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01"},
		{name: "not hex", in: "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01"},
		{name: "oversized", in: "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-" + strings.Repeat("a", 600)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, ok := Parse(tt.in)
			if ok != tt.wantOK {
				t.Fatalf("Parse(%q) ok = %v, want %v", tt.in, ok, tt.wantOK)
			}
			if ok && p.Sampled != tt.wantSampled {
				t.Errorf("sampled = %v, want %v", p.Sampled, tt.wantSampled)
			}
			if ok && tt.in == good && p.String() != good {
				t.Errorf("String() = %q, want %q", p.String(), good)
			}
		})
	}
}

func TestNewIDsAreValidAndDiffer(t *testing.T) {
	a, b := NewSpanID(), NewSpanID()
	if !a.IsValid() || a == b {
		t.Fatalf("span ids %s %s", a, b)
	}
	if !NewTraceID().IsValid() {
		t.Fatal("zero trace id")
	}
}

// TestSplitProxyUser: a span in a proxy user name is taken off only in the one exact form; a
// credential's own user name is never changed, and anything else starting with "_" is invalid
// (refused as a credential that names no claim), never a user name of its own.
func TestSplitProxyUser(t *testing.T) {
	p, _ := Parse(good)
	user := ProxyUser(p, "team-a.claim-1")
	rest, got, ok, valid := SplitProxyUser(user)
	if !ok || !valid || rest != "team-a.claim-1" || got.Trace != p.Trace || got.Span != p.Span {
		t.Fatalf("SplitProxyUser(%q) = %q %v %v %v", user, rest, got, ok, valid)
	}
	for _, plain := range []string{"team-a.claim-1", "team-a.~member", "tp-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7.x.y", ""} {
		if rest, _, ok, valid := SplitProxyUser(plain); ok || !valid || rest != plain {
			t.Errorf("SplitProxyUser(%q) = %q ok %v valid %v: a credential's own user name must pass unchanged", plain, rest, ok, valid)
		}
	}
	prefix := user[:len(user)-len("team-a.claim-1")]
	for _, bad := range []string{
		"_", prefix, // nothing after the span
		strings.ToUpper(prefix) + "team-a.claim-1",
		"_" + strings.Repeat("0", 32) + "-" + p.Span.String() + ".team-a.claim-1",  // zero trace
		"_" + p.Trace.String() + "-" + strings.Repeat("0", 16) + ".team-a.claim-1", // zero span
		"_" + p.Trace.String() + "-" + p.Span.String() + "team-a.claim-1",          // no dot
		"_" + p.Trace.String() + "." + p.Span.String() + ".team-a.claim-1",
		"_" + p.Trace.String()[:31] + "-" + p.Span.String() + "0.team-a.claim-1",
		"__" + p.Trace.String() + "-" + p.Span.String() + ".team-a.claim-1",
		"_team-a.claim-1",
	} {
		if rest, _, ok, valid := SplitProxyUser(bad); ok || valid || rest != "" {
			t.Errorf("SplitProxyUser(%q) = %q ok %v valid %v, want invalid", bad, rest, ok, valid)
		}
	}
}
