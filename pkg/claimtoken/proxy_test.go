package claimtoken

import (
	"bytes"
	"errors"
	"testing"
)

// TestDeriveProxy: the proxy credential is deterministic, bound to the claim and key like the
// bearer token, and is not the bearer token.
func TestDeriveProxy(t *testing.T) {
	p, err := DeriveProxy(testKey, "uid-1", "team-a", "agent-0123456789")
	if err != nil {
		t.Fatal(err)
	}
	if len(p) != 43 {
		t.Errorf("credential %q has %d characters, want 43", p, len(p))
	}
	if again, _ := DeriveProxy(testKey, "uid-1", "team-a", "agent-0123456789"); again != p {
		t.Error("the derivation is not deterministic")
	}
	bearer, _ := Derive(testKey, "uid-1", "team-a", "agent-0123456789")
	if bearer == p {
		t.Error("the proxy credential equals the bearer token")
	}
	for name, other := range map[string]func() (string, error){
		"another UID": func() (string, error) { return DeriveProxy(testKey, "uid-2", "team-a", "agent-0123456789") },
		"another key": func() (string, error) {
			return DeriveProxy(bytes.Repeat([]byte{8}, KeyBytes), "uid-1", "team-a", "agent-0123456789")
		},
	} {
		if o, err := other(); err != nil || o == p {
			t.Errorf("%s: %q, %v; want another credential", name, o, err)
		}
	}
	if _, err := DeriveProxy(testKey[:KeyBytes-1], "uid-1", "team-a", "a"); !errors.Is(err, ErrNoKey) {
		t.Errorf("a short key: %v, want ErrNoKey", err)
	}
}
