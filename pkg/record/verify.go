package record

import (
	"bytes"
	"cmp"
	"fmt"
	"io"
	"slices"
)

// Problem is what Verify found wrong with a record.
type Problem string

// The problems Verify reports (docs/record.md §2.4).
const (
	// ProblemMalformed: a line that is not an entry or the anchor.
	ProblemMalformed Problem = "malformed"
	// ProblemEdited: an entry whose content no longer gives its hash, or whose line differs from
	// the form it was signed in.
	ProblemEdited Problem = "edited"
	// ProblemForged: an entry whose hash is its content's but whose signature does not verify
	// with a trusted key (an edit whose hashes were recomputed, or an entry made without the key).
	ProblemForged Problem = "forged"
	// ProblemReplayed: a genuine entry of another claim's record.
	ProblemReplayed Problem = "replayed"
	// ProblemDropped: entries missing between the first and the last one present.
	ProblemDropped Problem = "dropped"
	// ProblemReordered: an entry that stands after one with a higher seq.
	ProblemReordered Problem = "reordered"
	// ProblemDuplicated: a seq that stands twice.
	ProblemDuplicated Problem = "duplicated"
	// ProblemBrokenLink: a genuine entry whose prev is not the hash of the genuine entry before it.
	ProblemBrokenLink Problem = "broken link"
	// ProblemAppended: an entry past the count its anchor signs.
	ProblemAppended Problem = "appended"
	// ProblemCut: fewer entries than the anchor counts: the tail is missing.
	ProblemCut Problem = "cut"
	// ProblemHeadDiffers: the anchored entry's hash is not the anchor's head.
	ProblemHeadDiffers Problem = "head differs"
	// ProblemUnanchored: no anchor: whether the record was cut cannot be told.
	ProblemUnanchored Problem = "unanchored"
	// ProblemForgedAnchor: an anchor whose signature does not verify.
	ProblemForgedAnchor Problem = "forged anchor"
	// ProblemForeignAnchor: a genuine anchor of another claim's record.
	ProblemForeignAnchor Problem = "foreign anchor"
)

// Finding is one problem, where it is: the line of the export (0 when it is no line's) and the
// seq it concerns.
type Finding struct {
	Problem Problem
	Line    int
	Seq     uint64
	Message string
}

func (f Finding) String() string {
	return fmt.Sprintf("line %d, seq %d: %s: %s", f.Line, f.Seq, f.Problem, f.Message)
}

// Report is what Verify says of a record.
type Report struct {
	// Claim is the UID of the claim the record was checked as.
	Claim string
	// Entries counts the lines that are entries.
	Entries int
	// Anchor is the record's anchor, nil if it has none.
	Anchor *Anchor
	// Sealed says the anchor, verified, says the record is complete.
	Sealed   bool
	Findings []Finding
}

// Intact says that nothing was found wrong.
func (r Report) Intact() bool { return len(r.Findings) == 0 }

// Verdict is the report in a line.
func (r Report) Verdict() string {
	switch {
	case !r.Intact():
		return fmt.Sprintf("tampered: %d problems found", len(r.Findings))
	case r.Sealed:
		return fmt.Sprintf("intact and sealed: %d entries", r.Entries)
	default:
		return fmt.Sprintf("intact, not sealed: the claim is live, or the record was cut after entry %d", r.Entries)
	}
}

// Has says whether the report has a finding of p at seq (any seq when seq is 0).
func (r Report) Has(p Problem, seq uint64) bool {
	return slices.ContainsFunc(r.Findings, func(f Finding) bool { return f.Problem == p && (seq == 0 || f.Seq == seq) })
}

// Options are Verify's.
type Options struct {
	// Claim is the UID of the claim the record must be of; empty: the claim most of its genuine
	// entries are of (else its anchor's).
	Claim string
}

// parsed is one entry as read, with what its own line says of it.
type parsed struct {
	line      int
	e         Entry
	hashOK    bool // its content gives its hash
	sigOK     bool // a trusted key signed its hash
	canonical bool // the line is the entry's canonical encoding
}

func (p parsed) genuine() bool { return p.hashOK && p.sigOK }

type verifier struct {
	keys       Keys
	rep        Report
	entries    []parsed
	ours       []parsed // the entries of rep.Claim, in line order
	anchorLine int
}

// Verify checks the JSON lines record r against the trusted keys: each entry's hash and
// signature, its claim, the order and continuity of the seqs, each link of the chain, and the
// anchor. Each thing found wrong is a Finding that says where; a read error is an error.
func Verify(r io.Reader, keys Keys, opts Options) (Report, error) {
	v := &verifier{keys: keys}
	if err := readLines(r, v.addLine); err != nil {
		return Report{}, fmt.Errorf("reading the record: %w", err)
	}
	v.rep.Claim = v.claimOf(opts.Claim)
	v.checkEntries()
	v.checkSequence()
	v.checkLinks()
	v.checkAnchor()
	slices.SortStableFunc(v.rep.Findings, func(a, b Finding) int {
		return cmp.Or(cmp.Compare(lineKey(a.Line), lineKey(b.Line)), cmp.Compare(a.Seq, b.Seq))
	})
	return v.rep, nil
}

// lineKey sorts the findings of no line (0) last.
func lineKey(l int) int {
	if l == 0 {
		return int(^uint(0) >> 1)
	}
	return l
}

func (v *verifier) add(p Problem, line int, seq uint64, format string, args ...any) {
	v.rep.Findings = append(v.rep.Findings, Finding{Problem: p, Line: line, Seq: seq, Message: fmt.Sprintf(format, args...)})
}

// addLine reads one line: the anchor, or an entry checked against its own hash and signature.
func (v *verifier) addLine(n int, line []byte, err error) {
	if err != nil {
		v.add(ProblemMalformed, n, 0, "%v", err)
		return
	}
	if len(bytes.TrimSpace(line)) == 0 {
		return
	}
	if isAnchorLine(line) {
		var al anchorLine
		if err := decodeStrict(line, &al); err != nil || al.Anchor == nil {
			v.add(ProblemMalformed, n, 0, "not an anchor: %v", err)
			return
		}
		if v.rep.Anchor != nil {
			v.add(ProblemMalformed, n, 0, "a second anchor (the first is on line %d)", v.anchorLine)
			return
		}
		v.rep.Anchor, v.anchorLine = al.Anchor, n
		return
	}
	var e Entry
	if err := decodeStrict(line, &e); err != nil {
		v.add(ProblemMalformed, n, 0, "not an entry: %v", err)
		return
	}
	v.rep.Entries++
	p := parsed{line: n, e: e}
	if h, err := e.ComputeHash(); err == nil && h == e.Hash {
		p.hashOK = true
		p.sigOK = v.keys.verify(e.Key, entryMessage, []byte(e.Hash), e.Sig) == nil
	}
	if b, err := e.Line(); err == nil && bytes.Equal(b, line) {
		p.canonical = true
	}
	v.entries = append(v.entries, p)
}

// claimOf is the claim the record is checked as: want, else the claim of most genuine entries
// (the first line's among equals), else the anchor's.
func (v *verifier) claimOf(want string) string {
	if want != "" {
		return want
	}
	counts := map[string]int{}
	best := ""
	for _, p := range v.entries {
		if !p.genuine() {
			continue
		}
		counts[p.e.Claim]++
		if best == "" || counts[p.e.Claim] > counts[best] {
			best = p.e.Claim
		}
	}
	if best == "" && v.rep.Anchor != nil {
		return v.rep.Anchor.Claim
	}
	return best
}
