package attestation

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func newKey(t *testing.T) ed25519.PrivateKey {
	t.Helper()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func statement() *Statement {
	ev := []byte(`{"kernelRelease":"4.4.0","runtime":"gVisor"}`)
	return &Statement{
		Version: Version, Namespace: "team-a", Claim: "agent-0123456789", ClaimUID: "uid-claim",
		Pod: "agent-0123456789", PodUID: "uid-pod", Node: "node-1", NodeKernel: "6.18.0", Kernel: "Dedicated",
		RecordDigest: Digest([]byte(`{"image":"sandbox:v1"}`)), TokenHash: TokenHash("token-1"),
		EvidenceDigest: Digest(ev), Evidence: ev, IssuedAt: time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC),
	}
}

func keysOf(keys ...ed25519.PrivateKey) map[string]ed25519.PublicKey {
	m := map[string]ed25519.PublicKey{}
	for _, k := range keys {
		pub := k.Public().(ed25519.PublicKey)
		m[KeyID(pub)] = pub
	}
	return m
}

func TestSignVerify(t *testing.T) {
	key, old := newKey(t), newKey(t)
	a, err := Sign(statement(), key)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Verify(a, keysOf(old, key), Expect{Token: "token-1", Namespace: "team-a", Claim: "agent-0123456789"})
	if err != nil {
		t.Fatal(err)
	}
	if got.PodUID != "uid-pod" || got.Kernel != "Dedicated" || string(got.Evidence) != string(statement().Evidence) {
		t.Errorf("statement %+v", got)
	}
	// Without a claim to expect, the token alone ties it.
	if _, err := Verify(a, keysOf(key), Expect{Token: "token-1"}); err != nil {
		t.Error(err)
	}
}

// TestVerifyRefusesForgeries: a signature never verifies for another token, another claim, a
// changed field, another key, or a statement whose evidence is not its digest's.
func TestVerifyRefusesForgeries(t *testing.T) {
	key, other := newKey(t), newKey(t)
	a, err := Sign(statement(), key)
	if err != nil {
		t.Fatal(err)
	}
	exp := Expect{Token: "token-1", Namespace: "team-a", Claim: "agent-0123456789"}
	// resign re-encodes the statement changed by mutate, keeping the original signature.
	resign := func(mutate func(s map[string]any)) *Attestation {
		b, _ := base64.StdEncoding.DecodeString(a.Statement)
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		mutate(m)
		b, _ = json.Marshal(m)
		c := *a
		c.Statement = base64.StdEncoding.EncodeToString(b)
		return &c
	}
	signedBy := func(k ed25519.PrivateKey, mutate func(s *Statement)) *Attestation {
		s := statement()
		mutate(s)
		a, err := Sign(s, k)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	forgedEvidence := statement()
	forgedEvidence.Evidence = []byte(`{"kernelRelease":"4.4.0","runtime":"gVisor","x":1}`)
	tests := map[string]struct {
		a    *Attestation
		keys map[string]ed25519.PublicKey
		exp  Expect
		want string
	}{
		"another claim's token":        {a: a, keys: keysOf(key), exp: Expect{Token: "token-2"}, want: "another sandbox"},
		"another claim":                {a: a, keys: keysOf(key), exp: Expect{Token: "token-1", Namespace: "team-a", Claim: "agent-9999999999"}, want: "about claim"},
		"another namespace":            {a: a, keys: keysOf(key), exp: Expect{Token: "token-1", Namespace: "team-b", Claim: "agent-0123456789"}, want: "about claim"},
		"another pod":                  {a: resign(func(m map[string]any) { m["podUID"] = "uid-other" }), keys: keysOf(key), exp: exp, want: "does not verify"},
		"another node":                 {a: resign(func(m map[string]any) { m["node"] = "node-2" }), keys: keysOf(key), exp: exp, want: "does not verify"},
		"kernel changed":               {a: resign(func(m map[string]any) { m["kernel"] = "Shared" }), keys: keysOf(key), exp: exp, want: "does not verify"},
		"record changed":               {a: resign(func(m map[string]any) { m["recordDigest"] = Digest([]byte("x")) }), keys: keysOf(key), exp: exp, want: "does not verify"},
		"a field added":                {a: resign(func(m map[string]any) { m["extra"] = true }), keys: keysOf(key), exp: exp, want: "does not verify"},
		"signed by an unpublished key": {a: signedBy(other, func(*Statement) {}), keys: keysOf(key), exp: exp, want: "not among"},
		"a published key's ID, another key's signature": {a: func() *Attestation {
			f := signedBy(other, func(*Statement) {})
			f.KeyID = a.KeyID
			return f
		}(), keys: keysOf(key), exp: exp, want: "does not verify"},
		"another version": {a: func() *Attestation {
			s := statement()
			b, _ := json.Marshal(s)
			b = []byte(strings.Replace(string(b), Version, "airlock.dev/isolation/v0", 1))
			return &Attestation{Statement: base64.StdEncoding.EncodeToString(b), Signature: base64.StdEncoding.EncodeToString(ed25519.Sign(key, b)), KeyID: a.KeyID}
		}(), keys: keysOf(key), exp: exp, want: "version"},
		"evidence not its digest's": {a: func() *Attestation {
			b, _ := json.Marshal(forgedEvidence)
			return &Attestation{Statement: base64.StdEncoding.EncodeToString(b), Signature: base64.StdEncoding.EncodeToString(ed25519.Sign(key, b)), KeyID: a.KeyID}
		}(), keys: keysOf(key), exp: exp, want: "evidence"},
		"no attestation":     {a: nil, keys: keysOf(key), exp: exp, want: "no attestation"},
		"garbled signature":  {a: &Attestation{Statement: a.Statement, Signature: "%%", KeyID: a.KeyID}, keys: keysOf(key), exp: exp, want: "signature"},
		"garbled statement":  {a: &Attestation{Statement: "%%", Signature: a.Signature, KeyID: a.KeyID}, keys: keysOf(key), exp: exp, want: "statement"},
		"no keys":            {a: a, keys: nil, exp: exp, want: "not among"},
		"an empty token too": {a: a, keys: keysOf(key), exp: Expect{}, want: "another sandbox"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s, err := Verify(tc.a, tc.keys, tc.exp)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Verify = %+v, %v; want an error saying %q", s, err, tc.want)
			}
		})
	}
}

func TestSignRefusesInconsistentStatements(t *testing.T) {
	key := newKey(t)
	s := statement()
	s.EvidenceDigest = Digest([]byte("other"))
	if _, err := Sign(s, key); err == nil {
		t.Error("signed a statement whose evidence digest is not its evidence's")
	}
	s = statement()
	s.Version = "v0"
	if _, err := Sign(s, key); err == nil {
		t.Error("signed a statement of another version")
	}
}

func TestPublicKeysRoundTrip(t *testing.T) {
	a, b := newKey(t), newKey(t)
	bundle, err := MarshalPublicKeys(a.Public().(ed25519.PublicKey), b.Public().(ed25519.PublicKey))
	if err != nil {
		t.Fatal(err)
	}
	keys, err := ParsePublicKeys(bundle)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 2 || !keys[KeyID(a.Public().(ed25519.PublicKey))].Equal(a.Public()) {
		t.Errorf("keys %v", keys)
	}
	for name, bad := range map[string][]byte{
		"empty":       nil,
		"a CA":        []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"),
		"not PEM":     []byte("hello"),
		"garbled key": []byte("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n"),
	} {
		if _, err := ParsePublicKeys(bad); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
}
