package record

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// The adversarial tests: each edit of a record in its exported form (the form it is stored in,
// one canonical line per entry and the anchor's line) is detected, and reported where it is.

// fixture is a sealed record of claim A: entries 1..10, the seal (11), the anchor (line 12).
type fixture struct {
	s     *Signer
	keys  Keys
	lines []string
}

func newFixture(t *testing.T) fixture {
	s := testSigner(t, 1)
	entries, a := build(t, s, claimA, 10, true)
	return fixture{s: s, keys: NewKeys(s.Public()), lines: export(t, entries, &a)}
}

func (f fixture) verify(t *testing.T, lines []string) Report {
	t.Helper()
	return verifyLines(t, lines, f.keys, Options{Claim: claimA})
}

func decode(t *testing.T, line string) Entry {
	t.Helper()
	var e Entry
	if err := json.Unmarshal([]byte(line), &e); err != nil {
		t.Fatal(err)
	}
	return e
}

func encode(t *testing.T, e Entry) string {
	t.Helper()
	b, err := e.Line()
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestEditOfEachFieldIsDetected edits each field of an entry in the middle (the hash kept) and
// expects it reported at that entry.
func TestEditOfEachFieldIsDetected(t *testing.T) {
	one := func(v int) *int { return &v }
	size := int64(7)
	edits := map[string]struct {
		line int // index into lines (entry seq - 1)
		edit func(*Entry)
		want Problem
	}{
		"v":           {2, func(e *Entry) { e.V = 2 }, ProblemEdited},
		"claim":       {2, func(e *Entry) { e.Claim = claimB }, ProblemEdited},
		"seq":         {2, func(e *Entry) { e.Seq = 30 }, ProblemEdited},
		"time":        {2, func(e *Entry) { e.Time = FormatTime(t0) }, ProblemEdited},
		"source":      {2, func(e *Entry) { e.Source = SourceOperator }, ProblemEdited},
		"boot":        {2, func(e *Entry) { e.Boot = "b2" }, ProblemEdited},
		"source_seq":  {2, func(e *Entry) { e.SourceSeq = 9 }, ProblemEdited},
		"kind":        {2, func(e *Entry) { e.Kind = KindToolCall }, ProblemEdited},
		"call":        {2, func(e *Entry) { e.Call = 99 }, ProblemEdited},
		"trace":       {2, func(e *Entry) { e.Trace = "4bf92f3577b34da6a3ce929d0e0e4736" }, ProblemEdited},
		"span":        {2, func(e *Entry) { e.Span = "00f067aa0ba902b7" }, ProblemEdited},
		"parent":      {2, func(e *Entry) { e.Parent = "b7ad6b7169203331" }, ProblemEdited},
		"phase":       {0, func(e *Entry) { e.Phase = "Failed" }, ProblemEdited},
		"reason":      {0, func(e *Entry) { e.Reason = "Other" }, ProblemEdited},
		"message":     {0, func(e *Entry) { e.Message = "nothing happened" }, ProblemEdited},
		"tool":        {1, func(e *Entry) { e.Tool = "Read" }, ProblemEdited},
		"args_sha256": {1, func(e *Entry) { e.ArgsSHA256 = SumHex(nil) }, ProblemEdited},
		"status":      {1, func(e *Entry) { e.Status = StatusError }, ProblemEdited},
		"duration_ms": {1, func(e *Entry) { e.DurationMS = 1 }, ProblemEdited},
		"path":        {2, func(e *Entry) { e.Path = "b.go" }, ProblemEdited},
		"size":        {2, func(e *Entry) { e.Size = &size }, ProblemEdited},
		"sha256":      {2, func(e *Entry) { e.SHA256 = SumHex(nil) }, ProblemEdited},
		"argv":        {3, func(e *Entry) { e.Argv = []string{"/bin/true"} }, ProblemEdited},
		"exit":        {3, func(e *Entry) { e.Exit = one(5) }, ProblemEdited},
		"host":        {4, func(e *Entry) { e.Host = "example.com" }, ProblemEdited},
		"port":        {4, func(e *Entry) { e.Port = 80 }, ProblemEdited},
		"verdict":     {4, func(e *Entry) { e.Verdict = VerdictAllowed }, ProblemEdited},
		"credential":  {4, func(e *Entry) { e.Credential = "other" }, ProblemEdited},
		"count":       {10, func(e *Entry) { e.Count = 3 }, ProblemEdited},
		"usage":       {10, func(e *Entry) { e.Usage.CPUMillis = 1 }, ProblemEdited},
		"prev":        {2, func(e *Entry) { e.Prev = Genesis(claimA) }, ProblemEdited},
		"hash":        {2, func(e *Entry) { e.Hash = SumHex([]byte("x")) }, ProblemEdited},
		"key":         {2, func(e *Entry) { e.Key = "0000000000000000" }, ProblemEdited},
		"sig":         {2, func(e *Entry) { e.Sig = testSigner(t, 9).sign(entryMessage, []byte(e.Hash)) }, ProblemForged},
	}
	// Every field of Entry is edited by one case.
	for _, f := range jsonFields(Entry{}) {
		if _, ok := edits[f]; !ok {
			t.Errorf("no edit of field %q", f)
		}
	}
	f := newFixture(t)
	for name, c := range edits {
		t.Run(name, func(t *testing.T) {
			lines := slices.Clone(f.lines)
			e := decode(t, lines[c.line])
			c.edit(&e)
			lines[c.line] = encode(t, e)
			rep := f.verify(t, lines)
			found := slices.ContainsFunc(rep.Findings, func(x Finding) bool { return x.Problem == c.want && x.Line == c.line+1 })
			if !found || rep.Intact() {
				t.Errorf("editing %s: no %q finding at line %d; findings: %v", name, c.want, c.line+1, rep.Findings)
			}
		})
	}
}

// jsonFields lists the JSON names of the fields of v's struct type.
func jsonFields(v any) []string {
	var names []string
	typ := reflect.TypeOf(v)
	for i := range typ.NumField() {
		name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
		names = append(names, name)
	}
	return names
}

// forge re-hashes an edited entry and signs it with a key the verifier does not trust.
func forge(t *testing.T, e Entry, s *Signer) string {
	t.Helper()
	e.Key = s.ID()
	h, err := e.ComputeHash()
	if err != nil {
		t.Fatal(err)
	}
	e.Hash, e.Sig = h, s.sign(entryMessage, []byte(h))
	return encode(t, e)
}

func TestEditWithRecomputedHashIsForged(t *testing.T) {
	f := newFixture(t)
	lines := slices.Clone(f.lines)
	e := decode(t, lines[5])
	e.Status = StatusOK
	e.DurationMS = 1
	lines[5] = forge(t, e, testSigner(t, 7))
	expect(t, f.verify(t, lines), ProblemForged, 6)
}

func TestDropFirstEntryIsDetected(t *testing.T) {
	f := newFixture(t)
	expect(t, f.verify(t, f.lines[1:]), ProblemDropped, 1)
}

func TestDropMiddleEntryIsDetected(t *testing.T) {
	f := newFixture(t)
	lines := slices.Delete(slices.Clone(f.lines), 4, 5)
	expect(t, f.verify(t, lines), ProblemDropped, 5)
}

func TestDropLastEntryIsDetected(t *testing.T) {
	f := newFixture(t)
	n := len(f.lines)
	lines := append(slices.Clone(f.lines[:n-2]), f.lines[n-1]) // the seal dropped, the anchor kept
	expect(t, f.verify(t, lines), ProblemCut, 11)
}

func TestDropAndRenumberIsDetected(t *testing.T) {
	f := newFixture(t)
	lines := slices.Delete(slices.Clone(f.lines), 4, 5)
	for i := 4; i < 10; i++ { // entries 6..11 renumbered 5..10, hashes kept
		e := decode(t, lines[i])
		e.Seq--
		lines[i] = encode(t, e)
	}
	expect(t, f.verify(t, lines), ProblemEdited, 5)
}

func TestReorderIsDetected(t *testing.T) {
	f := newFixture(t)
	lines := slices.Clone(f.lines)
	lines[2], lines[3] = lines[3], lines[2]
	rep := f.verify(t, lines)
	expect(t, rep, ProblemReordered, 3)
	if rep.Has(ProblemDropped, 0) || rep.Has(ProblemBrokenLink, 0) {
		t.Errorf("a swap is reported as more than a reorder: %v", rep.Findings)
	}
}

func TestAppendedForgedEntryIsDetected(t *testing.T) {
	f := newFixture(t)
	last := decode(t, f.lines[10])
	e := sample(1)
	e.V, e.Claim, e.Seq, e.Prev = Version, claimA, 12, last.Hash
	lines := append(slices.Clone(f.lines), forge(t, e, testSigner(t, 7)))
	rep := f.verify(t, lines)
	expect(t, rep, ProblemForged, 12)
	expect(t, rep, ProblemAppended, 12)
}

func TestAppendedGenuineEntryPastTheAnchorIsDetected(t *testing.T) {
	// A live record's entries, with an older anchor: the entries past it are reported.
	s := testSigner(t, 1)
	c, _ := NewChain(claimA, s)
	var entries []Entry
	var a Anchor
	for i := range 5 {
		e, _ := c.Append(sample(i))
		entries = append(entries, e)
		if i == 2 {
			a, _ = c.Anchor(t0)
		}
	}
	rep := verifyLines(t, export(t, entries, &a), NewKeys(s.Public()), Options{Claim: claimA})
	expect(t, rep, ProblemAppended, 4)
	expect(t, rep, ProblemAppended, 5)
}

func TestReplayedEntryOfAnotherClaimIsDetected(t *testing.T) {
	f := newFixture(t)
	other, _ := build(t, f.s, claimB, 10, true)
	foreign := export(t, other, nil)
	t.Run("inserted", func(t *testing.T) {
		lines := slices.Insert(slices.Clone(f.lines), 4, foreign[4])
		expect(t, f.verify(t, lines), ProblemReplayed, 5)
	})
	t.Run("in place of ours", func(t *testing.T) {
		lines := slices.Clone(f.lines)
		lines[4] = foreign[4]
		rep := f.verify(t, lines)
		expect(t, rep, ProblemReplayed, 5)
		expect(t, rep, ProblemDropped, 5)
	})
	t.Run("with its claim rewritten", func(t *testing.T) {
		lines := slices.Clone(f.lines)
		e := decode(t, foreign[4])
		e.Claim = claimA
		lines[4] = encode(t, e)
		expect(t, f.verify(t, lines), ProblemEdited, 5)
	})
}

func TestDuplicatedEntryIsDetected(t *testing.T) {
	f := newFixture(t)
	lines := slices.Insert(slices.Clone(f.lines), 6, f.lines[3])
	expect(t, f.verify(t, lines), ProblemDuplicated, 4)
}

func TestTruncatedRecordIsDetected(t *testing.T) {
	f := newFixture(t)
	n := len(f.lines)
	lines := append(slices.Clone(f.lines[:6]), f.lines[n-1])
	rep := f.verify(t, lines)
	expect(t, rep, ProblemCut, 7)
	if !strings.Contains(rep.Findings[len(rep.Findings)-1].Message, "entries 7 to 11 are missing") {
		t.Errorf("the cut does not say where: %v", rep.Findings)
	}
}

func TestTruncatedRecordWithoutAnchorIsUnanchored(t *testing.T) {
	f := newFixture(t)
	rep := f.verify(t, f.lines[:6])
	expect(t, rep, ProblemUnanchored, 0)
}

func TestAnchorsSwappedBetweenClaimsAreDetected(t *testing.T) {
	f := newFixture(t)
	other, b := build(t, f.s, claimB, 10, true)
	theirs := export(t, other, &b)
	lines := slices.Clone(f.lines)
	lines[len(lines)-1] = theirs[len(theirs)-1]
	expect(t, f.verify(t, lines), ProblemForeignAnchor, 11)
	// Without the claim given, the entries still say whose record it is.
	rep := verifyLines(t, lines, f.keys, Options{})
	expect(t, rep, ProblemForeignAnchor, 11)
}

func TestEditedAnchorIsDetected(t *testing.T) {
	f := newFixture(t)
	for name, edit := range map[string]func(*Anchor){
		"count":  func(a *Anchor) { a.Count = 6 },
		"head":   func(a *Anchor) { a.Head = Genesis(claimA) },
		"sealed": func(a *Anchor) { a.Sealed = false },
		"claim":  func(a *Anchor) { a.Claim = claimB },
	} {
		t.Run(name, func(t *testing.T) {
			lines := slices.Clone(f.lines)
			var al anchorLine
			if err := json.Unmarshal([]byte(lines[len(lines)-1]), &al); err != nil {
				t.Fatal(err)
			}
			edit(al.Anchor)
			b, _ := json.Marshal(al)
			lines[len(lines)-1] = string(b)
			rep := f.verify(t, lines)
			expect(t, rep, ProblemForgedAnchor, 0)
		})
	}
}

func TestChainReplacedUnderGenuineAnchorIsDetected(t *testing.T) {
	// The signer's own second chain for the same claim (a fork): its entries are genuine, but
	// not the ones the anchor signs, nor linked to the first chain's.
	f := newFixture(t)
	fork, _ := build(t, f.s, claimA, 12, false)
	forked := export(t, fork, nil)
	lines := slices.Clone(f.lines)
	lines[10] = forked[10] // seq 11 of the fork in place of the seal
	rep := f.verify(t, lines)
	expect(t, rep, ProblemHeadDiffers, 11)
}

func TestReformattedLineIsDetected(t *testing.T) {
	f := newFixture(t)
	lines := slices.Clone(f.lines)
	lines[2] = strings.Replace(lines[2], `"v":1,`, `"v": 1,`, 1)
	expect(t, f.verify(t, lines), ProblemEdited, 3)
}

func TestMalformedLinesAreReported(t *testing.T) {
	f := newFixture(t)
	lines := slices.Insert(slices.Clone(f.lines), 3, `{"v":1,"unknown":true}`, `not json`, strings.Repeat("x", MaxLineBytes+10))
	rep := f.verify(t, lines)
	var at []int
	for _, x := range rep.Findings {
		if x.Problem == ProblemMalformed {
			at = append(at, x.Line)
		}
	}
	if !slices.Equal(at, []int{4, 5, 6}) {
		t.Fatalf("malformed lines at %v, want 4, 5, 6: %v", at, rep.Findings)
	}
}

func TestUntrustedKeyMakesEveryEntryForged(t *testing.T) {
	f := newFixture(t)
	rep := verifyLines(t, f.lines, NewKeys(testSigner(t, 3).Public()), Options{Claim: claimA})
	expect(t, rep, ProblemForged, 1)
	expect(t, rep, ProblemForgedAnchor, 0)
}

func TestSplicedEntryOfAForkIsABrokenLink(t *testing.T) {
	// Two chains of the same claim and key that differ from entry 5 on: entry 6 of the other
	// spliced into ours is genuine, at its place, but not linked to our entry 5.
	f := newFixture(t)
	c, _ := NewChain(claimA, f.s)
	var fork []Entry
	for i := range 10 {
		e := sample(i)
		if i == 4 {
			e.Host = "other.example"
		}
		e, _ = c.Append(e)
		fork = append(fork, e)
	}
	lines := slices.Clone(f.lines)
	lines[5] = export(t, fork, nil)[5]
	rep := f.verify(t, lines)
	expect(t, rep, ProblemBrokenLink, 6)
	expect(t, rep, ProblemBrokenLink, 7)
}
