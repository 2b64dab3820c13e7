package attestation

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/json"
	"flag"
	"math/big"
	"os"
	"slices"
	"testing"
	"time"
)

// The Python client verifies attestations with an Ed25519 of its own (it depends on nothing but
// the standard library, which has none: clients/python/src/airlock_client/_ed25519.py), the
// TypeScript client with Node's. Their tests take attestations this package signs, and forgeries
// of them, from the same fixtures, a copy in each (fixturesFiles).

const pythonFixturesFile = "../../clients/python/tests/testdata/attestation.json"

// fixturesFiles are the clients' copies of the fixtures.
var fixturesFiles = []string{pythonFixturesFile, "../../clients/typescript/test/testdata/attestation.json"}

var update = flag.Bool("update", false, "rewrite the clients' fixtures ("+pythonFixturesFile+" and the TypeScript client's copy)")

type pythonFixtures struct {
	Comment   string `json:"comment"`
	Keys      string `json:"keys"` // the published keys' PEM bundle
	Namespace string `json:"namespace"`
	Claim     string `json:"claim"`
	Token     string `json:"token"`
	// Cases are attestations as the acquire answer carries them.
	Cases []pythonFixture `json:"cases"`
}

type pythonFixture struct {
	Name        string       `json:"name"`
	Attestation *Attestation `json:"attestation"`
	// Verifies says whether Verify accepts it for the file's keys, token, claim and namespace.
	Verifies bool `json:"verifies"`
}

const pythonFixturesComment = "Attestations signed by pkg/attestation, and forgeries of them, for the Python client's " +
	"verifier (tests/test_isolation.py). Generated: cd pkg/attestation && go test -run TestPythonFixtures -update " +
	"(deterministic: seeded keys, Ed25519 signs deterministically); checked by that test, which also checks that " +
	"Verify accepts exactly the cases marked verifies."

// seededKey is a key derived from name, so that the fixtures are the same on every run.
func seededKey(name string) ed25519.PrivateKey {
	seed := sha256.Sum256([]byte("airlock python client testdata: " + name))
	return ed25519.NewKeyFromSeed(seed[:])
}

// fixtureStatement is the statement of claim c of team-a with token claim-token, changed by mutate.
func fixtureStatement(mutate func(*Statement)) *Statement {
	ev := []byte(`{"kernelRelease":"4.4.0","runtime":"gVisor"}`)
	s := &Statement{
		Version: Version, Namespace: "team-a", Claim: "c", ClaimUID: "uid-c", Pod: "c", PodUID: "uid-pod", Node: "node-1",
		NodeKernel: "6.18.0", Kernel: "Dedicated", RecordDigest: Digest([]byte(`{"image":"sandbox:v1"}`)),
		TokenHash: TokenHash("claim-token"), EvidenceDigest: Digest(ev), Evidence: ev,
		IssuedAt: time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC),
	}
	mutate(s)
	return s
}

// signBytes signs b as they are, whatever they say (Sign refuses inconsistent statements).
func signBytes(key ed25519.PrivateKey, b []byte) *Attestation {
	return &Attestation{
		Statement: base64.StdEncoding.EncodeToString(b),
		Signature: base64.StdEncoding.EncodeToString(ed25519.Sign(key, b)),
		KeyID:     KeyID(key.Public().(ed25519.PublicKey)),
	}
}

// littleEndian is n as 32 little-endian bytes.
func littleEndian(n *big.Int) []byte {
	b := n.FillBytes(make([]byte, 32))
	slices.Reverse(b)
	return b
}

func fromLittleEndian(b []byte) *big.Int {
	b = slices.Clone(b)
	slices.Reverse(b)
	return new(big.Int).SetBytes(b)
}

var (
	fieldP     = new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 255), big.NewInt(19))
	groupOrder = func() *big.Int {
		l, _ := new(big.Int).SetString("27742317777372353535851937790883648493", 10)
		return l.Add(l, new(big.Int).Lsh(big.NewInt(1), 252))
	}()
)

// forgeWithR signs message b with key for a chosen R encoding of the identity point: S = k*a mod
// L, where a is key's secret scalar and k = SHA-512(R || A || b), so that [S]B = R + [k]A holds
// for whatever point a verifier decodes R as the identity. RFC 8032 refuses such an R when it
// is not the identity's canonical encoding; a lenient decoder would accept the signature.
func forgeWithR(key ed25519.PrivateKey, r, b []byte) *Attestation {
	h := sha512.Sum512(key.Seed())
	h[0] &= 248
	h[31] &= 127
	h[31] |= 64
	a := fromLittleEndian(h[:32])
	pub := key.Public().(ed25519.PublicKey)
	kh := sha512.Sum512(slices.Concat(r, pub, b))
	k := new(big.Int).Mod(fromLittleEndian(kh[:]), groupOrder)
	s := new(big.Int).Mod(new(big.Int).Mul(k, a), groupOrder)
	return &Attestation{
		Statement: base64.StdEncoding.EncodeToString(b),
		Signature: base64.StdEncoding.EncodeToString(slices.Concat(r, littleEndian(s))),
		KeyID:     KeyID(pub),
	}
}

func pythonFixtureSet(t *testing.T) *pythonFixtures {
	t.Helper()
	key, other, unpublished := seededKey("key"), seededKey("other"), seededKey("unpublished")
	keys, err := MarshalPublicKeys(other.Public().(ed25519.PublicKey), key.Public().(ed25519.PublicKey))
	if err != nil {
		t.Fatal(err)
	}
	sign := func(k ed25519.PrivateKey, mutate func(*Statement)) *Attestation {
		a, err := Sign(fixtureStatement(mutate), k)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	same := func(*Statement) {}
	verified, shared := sign(key, same), sign(key, func(s *Statement) { s.Kernel = "Shared" })
	statementBytes, err := json.Marshal(fixtureStatement(same))
	if err != nil {
		t.Fatal(err)
	}
	// withSignature is verified with its signature's bytes changed by mutate.
	withSignature := func(mutate func(sig []byte) []byte) *Attestation {
		sig, err := base64.StdEncoding.DecodeString(verified.Signature)
		if err != nil {
			t.Fatal(err)
		}
		a := *verified
		a.Signature = base64.StdEncoding.EncodeToString(mutate(sig))
		return &a
	}
	// withFields is the statement as a JSON object changed by mutate, signed with key.
	withFields := func(mutate func(m map[string]any)) *Attestation {
		var m map[string]any
		if err := json.Unmarshal(statementBytes, &m); err != nil {
			t.Fatal(err)
		}
		mutate(m)
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return signBytes(key, b)
	}
	identityNonCanonical := littleEndian(new(big.Int).Add(fieldP, big.NewInt(1))) // y = p+1
	identityNegativeZero := make([]byte, 32)                                      // y = 1, x = 0 with the sign bit
	identityNegativeZero[0], identityNegativeZero[31] = 1, 0x80

	cases := []pythonFixture{
		{Name: "verified", Attestation: verified, Verifies: true},
		{Name: "verified, shared kernel", Attestation: shared, Verifies: true},
		{Name: "signed by the other published key (the previous one, after a rotation)", Attestation: sign(other, same), Verifies: true},
		{Name: "about another token", Attestation: sign(key, func(s *Statement) { s.TokenHash = TokenHash("other-token") })},
		{Name: "about another claim", Attestation: sign(key, func(s *Statement) { s.Claim = "d" })},
		{Name: "about another namespace", Attestation: sign(key, func(s *Statement) { s.Namespace = "team-b" })},
		{Name: "signed by an unpublished key", Attestation: sign(unpublished, same)},
		{Name: "a published key's ID, another key's signature", Attestation: func() *Attestation {
			a := sign(unpublished, same)
			a.KeyID = verified.KeyID
			return a
		}()},
		{Name: "the signature of another statement", Attestation: &Attestation{Statement: verified.Statement, Signature: shared.Signature, KeyID: verified.KeyID}},
		{Name: "a bit of S flipped", Attestation: withSignature(func(sig []byte) []byte { sig[40] ^= 1; return sig })},
		{Name: "a bit of R flipped", Attestation: withSignature(func(sig []byte) []byte { sig[5] ^= 0x10; return sig })},
		{Name: "S plus L (malleated)", Attestation: withSignature(func(sig []byte) []byte {
			s := new(big.Int).Add(fromLittleEndian(sig[32:]), groupOrder)
			return slices.Concat(sig[:32], littleEndian(s))
		})},
		{Name: "R a non-canonical encoding (y = p+1)", Attestation: forgeWithR(key, identityNonCanonical, statementBytes)},
		{Name: "R a non-canonical encoding (x = 0, sign bit set)", Attestation: forgeWithR(key, identityNegativeZero, statementBytes)},
		{Name: "a field added", Attestation: withFields(func(m map[string]any) { m["dedicated"] = true })},
		{Name: "another version", Attestation: withFields(func(m map[string]any) { m["version"] = "airlock.dev/isolation/v0" })},
		{Name: "evidence not its digest's", Attestation: withFields(func(m map[string]any) {
			m["evidence"] = base64.StdEncoding.EncodeToString([]byte(`{"kernelRelease":"4.4.0","runtime":"gVisor","x":1}`))
		})},
		{Name: "a statement that is not JSON", Attestation: signBytes(key, []byte("not JSON"))},
		{Name: "garbled statement base64", Attestation: &Attestation{Statement: "*" + verified.Statement, Signature: verified.Signature, KeyID: verified.KeyID}},
		{Name: "garbled signature base64", Attestation: &Attestation{Statement: verified.Statement, Signature: verified.Signature[1:], KeyID: verified.KeyID}},
	}
	return &pythonFixtures{
		Comment: pythonFixturesComment, Keys: string(keys), Namespace: "team-a", Claim: "c", Token: "claim-token", Cases: cases,
	}
}

// TestPythonFixtures: the Python and TypeScript clients' fixtures are what this package signs
// today, and Verify accepts exactly those marked verifies, so that the three verifiers are held
// to the same cases.
func TestPythonFixtures(t *testing.T) {
	fx := pythonFixtureSet(t)
	keys, err := ParsePublicKeys([]byte(fx.Keys))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range fx.Cases {
		_, err := Verify(c.Attestation, keys, Expect{Token: fx.Token, Namespace: fx.Namespace, Claim: fx.Claim})
		if (err == nil) != c.Verifies {
			t.Errorf("%s: Verify = %v, want verifies %v", c.Name, err, c.Verifies)
		}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(fx); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	for _, file := range fixturesFiles {
		if *update {
			if err := os.WriteFile(file, b, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, b) {
			t.Errorf("%s is not what this package signs today: cd pkg/attestation && go test -run TestPythonFixtures -update", file)
		}
	}
}
