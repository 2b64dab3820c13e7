package record

import (
	"bytes"
	"crypto/ed25519"
	"strings"
	"testing"
	"time"
)

const (
	claimA = "6f1c2a4e-0000-4000-8000-00000000000a"
	claimB = "6f1c2a4e-0000-4000-8000-00000000000b"
)

var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

func testSigner(t *testing.T, seed byte) *Signer {
	t.Helper()
	key := bytes.Repeat([]byte{seed}, 32)
	priv, err := SigningKey(key)
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSigner(priv)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// sample is one entry of each kind, in the order a session writes them.
func sample(i int) Entry {
	at := FormatTime(t0.Add(time.Duration(i) * time.Second))
	size, exit := int64(120+i), i%3
	switch i % 5 {
	case 0:
		return Entry{Time: at, Source: SourceOperator, Kind: KindClaimPhase, Phase: "Bound", Reason: "PodReady"}
	case 1:
		return Entry{Time: at, Source: SourceSandboxd, Boot: "b1", SourceSeq: uint64(i), Kind: KindToolCall, Tool: "Write",
			ArgsSHA256: SumHex([]byte(`{"file_path":"a.go"}`)), Status: StatusOK, DurationMS: 3}
	case 2:
		return Entry{Time: at, Source: SourceSandboxd, Boot: "b1", SourceSeq: uint64(i), Kind: KindFileWrite, Call: uint64(i - 1),
			Path: "a.go", Size: &size, SHA256: SumHex([]byte("package a"))}
	case 3:
		return Entry{Time: at, Source: SourceSandboxd, Boot: "b1", SourceSeq: uint64(i), Kind: KindProcess, Call: uint64(i - 2),
			Argv: []string{"/bin/bash", "-c", "go test ./..."}, Exit: &exit, DurationMS: 1200}
	default:
		return Entry{Time: at, Source: SourceGateway, Kind: KindEgress, Host: "proxy.golang.org", Port: 443,
			Verdict: VerdictDenied, Reason: "HostNotAllowed", Credential: "goproxy"}
	}
}

// build returns a record of n entries of claim, sealed or not, as entries and anchor.
func build(t *testing.T, s *Signer, claim string, n int, sealed bool) ([]Entry, Anchor) {
	t.Helper()
	c, err := NewChain(claim, s)
	if err != nil {
		t.Fatal(err)
	}
	var out []Entry
	for i := range n {
		e, err := c.Append(sample(i))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	if sealed {
		e, a, err := c.Seal(t0.Add(time.Hour), &Usage{CPUMillis: 1500, ToolCalls: 2})
		if err != nil {
			t.Fatal(err)
		}
		return append(out, e), a
	}
	a, err := c.Anchor(t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	return out, a
}

func export(t *testing.T, entries []Entry, a *Anchor) []string {
	t.Helper()
	var b bytes.Buffer
	if err := WriteJSONL(&b, entries, a); err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
}

func verifyLines(t *testing.T, lines []string, keys Keys, opts Options) Report {
	t.Helper()
	rep, err := Verify(strings.NewReader(strings.Join(lines, "\n")+"\n"), keys, opts)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// expect fails unless rep has a finding of p at seq, and says what it had.
func expect(t *testing.T, rep Report, p Problem, seq uint64) {
	t.Helper()
	if !rep.Has(p, seq) {
		t.Errorf("no %q finding at seq %d; findings: %v", p, seq, rep.Findings)
	}
	if rep.Intact() {
		t.Errorf("the record is reported intact")
	}
}

func TestIntactSealedRecordVerifies(t *testing.T) {
	s := testSigner(t, 1)
	entries, a := build(t, s, claimA, 10, true)
	rep := verifyLines(t, export(t, entries, &a), NewKeys(s.Public()), Options{Claim: claimA})
	if !rep.Intact() || !rep.Sealed || rep.Entries != 11 {
		t.Fatalf("want intact, sealed, 11 entries; got %s, %v", rep.Verdict(), rep.Findings)
	}
	if got := rep.Verdict(); got != "intact and sealed: 11 entries" {
		t.Errorf("verdict %q", got)
	}
}

func TestIntactLiveRecordIsNotSealed(t *testing.T) {
	s := testSigner(t, 1)
	entries, a := build(t, s, claimA, 4, false)
	rep := verifyLines(t, export(t, entries, &a), NewKeys(s.Public()), Options{})
	if !rep.Intact() || rep.Sealed || rep.Claim != claimA {
		t.Fatalf("want intact, not sealed, of %s; got %s of %s: %v", claimA, rep.Verdict(), rep.Claim, rep.Findings)
	}
}

func TestAppendAfterSealIsRefused(t *testing.T) {
	s := testSigner(t, 1)
	c, _ := NewChain(claimA, s)
	if _, _, err := c.Seal(t0, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Append(sample(0)); err != ErrSealed {
		t.Fatalf("append after seal: %v, want ErrSealed", err)
	}
}

func TestAppendRefusesAnIncompleteEntry(t *testing.T) {
	c, _ := NewChain(claimA, testSigner(t, 1))
	if _, err := c.Append(Entry{Kind: KindToolCall}); err == nil {
		t.Fatal("an entry without time and source was appended")
	}
}

func TestResumedChainVerifiesAsOne(t *testing.T) {
	s := testSigner(t, 1)
	first, a := build(t, s, claimA, 3, false)
	c, err := Resume(claimA, s, a.Count, a.Head)
	if err != nil {
		t.Fatal(err)
	}
	e, err := c.Append(sample(3))
	if err != nil {
		t.Fatal(err)
	}
	a2, _ := c.Anchor(t0)
	rep := verifyLines(t, export(t, append(first, e), &a2), NewKeys(s.Public()), Options{Claim: claimA})
	if !rep.Intact() || rep.Entries != 4 {
		t.Fatalf("want an intact record of 4: %s %v", rep.Verdict(), rep.Findings)
	}
	if _, err := Resume(claimA, s, 3, "short"); err == nil {
		t.Error("Resume accepted a head that is not a hash")
	}
}

func TestSigningKeyIsDerivedOneWayFromTheTokenKey(t *testing.T) {
	k1, err := SigningKey(bytes.Repeat([]byte{1}, 32))
	if err != nil {
		t.Fatal(err)
	}
	again, _ := SigningKey(bytes.Repeat([]byte{1}, 32))
	k2, _ := SigningKey(bytes.Repeat([]byte{2}, 32))
	if !k1.Equal(again) || k1.Equal(k2) {
		t.Fatal("the derivation is not a function of the token key")
	}
	if bytes.Contains(k1, bytes.Repeat([]byte{1}, 32)) {
		t.Fatal("the signing key holds the token key")
	}
	if _, err := SigningKey(make([]byte, 16)); err == nil {
		t.Fatal("a 16-byte token key was accepted")
	}
}

func TestPublicKeysRoundTripThroughPEM(t *testing.T) {
	s1, s2 := testSigner(t, 1), testSigner(t, 2)
	p1, _ := MarshalPublicKey(s1.Public())
	p2, _ := MarshalPublicKey(s2.Public())
	keys, err := ParsePublicKeys(append(p1, p2...))
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 2 || !keys[s1.ID()].Equal(s1.Public()) || !keys[s2.ID()].Equal(s2.Public()) {
		t.Fatalf("keys %v", keys)
	}
	if _, err := ParsePublicKeys([]byte("not pem")); err == nil {
		t.Error("no key in the data was accepted")
	}
	if _, err := NewSigner(ed25519.PrivateKey{1, 2}); err == nil {
		t.Error("a short private key was accepted")
	}
}
