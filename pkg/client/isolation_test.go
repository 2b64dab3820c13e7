package client

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/pkg/attestation"
)

// signed is an attestation of claim c of team-a with the token bound() answers, by key.
func signed(t *testing.T, key ed25519.PrivateKey, kernel, token string) *attestation.Attestation {
	t.Helper()
	ev := []byte(`{"kernelRelease":"4.4.0"}`)
	a, err := attestation.Sign(&attestation.Statement{
		Version: attestation.Version, Namespace: "team-a", Claim: "c", ClaimUID: "uid-c", Pod: "c", PodUID: "uid-pod",
		Node: "node-1", NodeKernel: "6.18.0", Kernel: kernel, RecordDigest: attestation.Digest([]byte("{}")),
		TokenHash: attestation.TokenHash(token), EvidenceDigest: attestation.Digest(ev), Evidence: ev, IssuedAt: time.Unix(0, 0).UTC(),
	}, key)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func keysFile(t *testing.T, keys ...ed25519.PrivateKey) string {
	t.Helper()
	var pubs []ed25519.PublicKey
	for _, k := range keys {
		pubs = append(pubs, k.Public().(ed25519.PublicKey))
	}
	pem, err := attestation.MarshalPublicKeys(pubs...)
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "isolation-keys.pem")
	if err := os.WriteFile(f, pem, 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestSessionVerifiesIsolation: with VerifyIsolation, Acquire returns a sandbox only with an
// attestation that the published keys verify for its claim and token (and, with
// RequireDedicatedKernel, a kernel of its own); without it, it passes the answer's through.
func TestSessionVerifiesIsolation(t *testing.T) {
	newKey := func() ed25519.PrivateKey {
		_, k, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	key, other := newKey(), newKey()
	tests := map[string]struct {
		att       *attestation.Attestation
		keys      string
		dedicated bool
		wantErr   bool
	}{
		"verified, dedicated":             {att: signed(t, key, "Dedicated", "claim-token"), keys: keysFile(t, key), dedicated: true},
		"verified, shared, not required":  {att: signed(t, key, "Shared", "claim-token"), keys: keysFile(t, other, key)},
		"shared where dedicated required": {att: signed(t, key, "Shared", "claim-token"), keys: keysFile(t, key), dedicated: true, wantErr: true},
		"signed by an unpublished key":    {att: signed(t, other, "Dedicated", "claim-token"), keys: keysFile(t, key), wantErr: true},
		"about another sandbox's token":   {att: signed(t, key, "Dedicated", "other-token"), keys: keysFile(t, key), wantErr: true},
		"no attestation":                  {att: nil, keys: keysFile(t, key), wantErr: true},
		"no keys file":                    {att: signed(t, key, "Dedicated", "claim-token"), keys: filepath.Join(t.TempDir(), "none"), wantErr: true},
		"a signature of another statement": {att: func() *attestation.Attestation {
			a := *signed(t, key, "Dedicated", "claim-token")
			a.Signature = signed(t, key, "Shared", "claim-token").Signature
			return &a
		}(), keys: keysFile(t, key), wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			a := newSessionAPI(t, false, func(int, string) answer {
				resp := bound("c")
				resp.Attestation = tc.att
				return answer{status: http.StatusOK, body: resp}
			})
			s, _ := newTestSession(t, a, Config{VerifyIsolation: true, RequireDedicatedKernel: tc.dedicated, IsolationKeysFile: tc.keys})
			sb, err := s.Acquire(context.Background(), "codegen/default")
			if tc.wantErr {
				if !errors.Is(err, ErrIsolation) {
					t.Fatalf("Acquire = %+v, %v; want ErrIsolation", sb, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if sb.Isolation == nil || sb.Isolation.Claim != "c" || sb.Isolation.PodUID != "uid-pod" {
				t.Errorf("isolation %+v", sb.Isolation)
			}
		})
	}
}

// TestSessionVerifiesAcrossRotation: the keys file is read for every sandbox and may hold several
// keys, picked by the statement's key ID. While the operator rotates its key (the next key
// published beside the current one, then signing, the old one kept), statements of either key
// verify; once the old key is no longer published, a statement it signed does not.
func TestSessionVerifiesAcrossRotation(t *testing.T) {
	newKey := func() ed25519.PrivateKey {
		_, k, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	old, cur := newKey(), newKey()
	byOld, byCur := signed(t, old, "Dedicated", "claim-token"), signed(t, cur, "Dedicated", "claim-token")
	var att *attestation.Attestation
	a := newSessionAPI(t, false, func(int, string) answer {
		resp := bound("c")
		resp.Attestation = att
		return answer{status: http.StatusOK, body: resp}
	})
	keys := filepath.Join(t.TempDir(), "isolation-keys.pem")
	s, _ := newTestSession(t, a, Config{VerifyIsolation: true, IsolationKeysFile: keys})
	publish := func(from string) {
		t.Helper()
		if err := os.Rename(from, keys); err != nil { // as the kubelet swaps a mounted ConfigMap
			t.Fatal(err)
		}
	}
	steps := []struct {
		name      string
		published []ed25519.PrivateKey
		att       *attestation.Attestation
		wantErr   string
	}{
		{name: "the next key published beside the current", published: []ed25519.PrivateKey{old, cur}, att: byOld},
		{name: "the new key signs, the old one kept", published: []ed25519.PrivateKey{cur, old}, att: byCur},
		{name: "a statement of the old key after the rotation", published: []ed25519.PrivateKey{cur, old}, att: byOld},
		{name: "the old key no longer published", published: []ed25519.PrivateKey{cur}, att: byOld, wantErr: "not among the 1 published"},
		{name: "the new key's statement", published: []ed25519.PrivateKey{cur}, att: byCur},
	}
	for _, step := range steps {
		publish(keysFile(t, step.published...))
		att = step.att
		sb, err := s.Acquire(context.Background(), "codegen/default")
		if step.wantErr != "" {
			if !errors.Is(err, ErrIsolation) || !strings.Contains(err.Error(), step.wantErr) {
				t.Fatalf("%s: Acquire = %v, want ErrIsolation saying %q", step.name, err, step.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if sb.Response.Attestation.KeyID != step.att.KeyID || sb.Isolation == nil {
			t.Fatalf("%s: verified %+v", step.name, sb.Isolation)
		}
	}
}
