package client

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"net/http"
	"os"
	"path/filepath"
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
