package claimname

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

func TestFor(t *testing.T) {
	sum := sha256.Sum256([]byte("s1\x00codegen/default"))
	h := hex.EncodeToString(sum[:])[:10]
	tests := map[string]struct {
		runtime, session, handle string
		want                     string
	}{
		"short runtime": {runtime: "agent", session: "s1", handle: "codegen/default", want: "agent-" + h},
		"runtime cut to 40": {
			runtime: strings.Repeat("a", 50), session: "s1", handle: "codegen/default",
			want: strings.Repeat("a", 40) + "-" + h,
		},
		"cut ending in a dot": {
			runtime: strings.Repeat("a", 39) + ".b", session: "s1", handle: "codegen/default",
			want: strings.Repeat("a", 39) + "-" + h,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := For(tc.runtime, tc.session, tc.handle)
			if got != tc.want {
				t.Errorf("For() = %q, want %q", got, tc.want)
			}
			if errs := validation.IsDNS1123Subdomain(got); len(errs) > 0 {
				t.Errorf("%q is not a DNS subdomain: %v", got, errs)
			}
			if errs := validation.IsDNS1123Subdomain(Replacement(got)); len(errs) > 0 {
				t.Errorf("replacement %q is not a DNS subdomain: %v", Replacement(got), errs)
			}
		})
	}
}

func TestHashSeparatesSessionAndHandle(t *testing.T) {
	// The NUL separator keeps ("a", "b/c") and ("ab", "/c")-style pairs apart.
	if Hash("s", "1/x") == Hash("s1", "/x") {
		t.Error("hash does not separate session from handle")
	}
	if got := len(SessionHash("anything")); got != 10 {
		t.Errorf("SessionHash length %d, want 10", got)
	}
}

// TestShard: a claim's shard is its name's last character, the Sandbox API's names' a hex digit
// and a replacement's "1", as the admission policy computes it.
func TestShard(t *testing.T) {
	name := For("agent", "s1", "codegen/default")
	for in, want := range map[string]string{name: name[len(name)-1:], Replacement(name): "1", "a": "a", "": ""} {
		if got := Shard(in); got != want {
			t.Errorf("Shard(%q) = %q, want %q", in, got, want)
		}
	}
	if s := Shard(name); !strings.Contains("0123456789abcdef", s) {
		t.Errorf("Shard(%q) = %q, want a hex digit", name, s)
	}
}
