package record

import (
	"slices"
)

// checkEntries reports each entry whose own line is wrong (edited, forged, replayed) and keeps
// those of the record's claim for the checks of order and links. An edited or forged entry stays
// in them at the seq it states (its line is there); a replayed one is another record's.
func (v *verifier) checkEntries() {
	for _, p := range v.entries {
		e := p.e
		switch {
		case !p.hashOK:
			v.add(ProblemEdited, p.line, e.Seq, "the entry's content does not give its hash: it was changed after it was signed")
		case !p.sigOK:
			v.add(ProblemForged, p.line, e.Seq, "the entry's signature does not verify with a trusted key (key id %q): it was not written by the operator as it stands", e.Key)
		case e.Claim != v.rep.Claim:
			v.add(ProblemReplayed, p.line, e.Seq, "a genuine entry of claim %s, not of %s", e.Claim, v.rep.Claim)
			continue
		case !p.canonical:
			v.add(ProblemEdited, p.line, e.Seq, "the line is not the form its entry was signed in (its content is intact)")
		}
		if e.V != Version {
			v.add(ProblemMalformed, p.line, e.Seq, "format version %d, want %d", e.V, Version)
		}
		v.ours = append(v.ours, p)
	}
}

// checkSequence reports seqs that stand twice, stand after a higher one, or are missing
// between 1 and the highest present.
func (v *verifier) checkSequence() {
	seen := map[uint64]int{} // seq: its first line
	var high uint64
	for _, p := range v.ours {
		s := p.e.Seq
		switch first, dup := seen[s]; {
		case s == 0:
			v.add(ProblemMalformed, p.line, 0, "an entry without a seq")
			continue
		case dup:
			v.add(ProblemDuplicated, p.line, s, "seq %d stands already on line %d", s, first)
			continue
		case s < high:
			v.add(ProblemReordered, p.line, s, "seq %d stands after seq %d: entries were moved", s, high)
		}
		seen[s] = p.line
		high = max(high, s)
	}
	seqs := make([]uint64, 0, len(seen))
	for s := range seen {
		seqs = append(seqs, s)
	}
	slices.Sort(seqs)
	var last uint64
	for _, s := range seqs {
		if s > last+1 {
			v.add(ProblemDropped, seen[s], last+1, "entries %d to %d are missing (the next present is seq %d)", last+1, s-1, s)
		}
		last = s
	}
}

// checkLinks reports each genuine entry whose prev is not the hash of the genuine entry of the
// seq before it (or, for seq 1, the claim's genesis). Where the entry before is missing or not
// genuine, that was reported already.
func (v *verifier) checkLinks() {
	bySeq := map[uint64]parsed{}
	for _, p := range v.ours {
		if _, dup := bySeq[p.e.Seq]; !dup && p.genuine() {
			bySeq[p.e.Seq] = p
		}
	}
	for _, p := range v.ours {
		if !p.genuine() || bySeq[p.e.Seq].line != p.line {
			continue
		}
		want := ""
		if p.e.Seq == 1 {
			want = Genesis(v.rep.Claim)
		} else if before, ok := bySeq[p.e.Seq-1]; ok {
			want = before.e.Hash
		}
		if want != "" && p.e.Prev != want {
			v.add(ProblemBrokenLink, p.line, p.e.Seq, "its prev is not the hash of entry %d: the chain was forked here", p.e.Seq-1)
		}
	}
}

// checkAnchor checks the anchor's signature and claim, then the record's length against its
// count and the anchored entry against its head.
func (v *verifier) checkAnchor() {
	a := v.rep.Anchor
	if a == nil {
		v.add(ProblemUnanchored, 0, 0, "the record has no anchor: whether its tail was cut cannot be told")
		return
	}
	msg, err := a.message()
	if err != nil || v.keys.verify(a.Key, anchorMessage, msg, a.Sig) != nil {
		v.add(ProblemForgedAnchor, v.anchorLine, a.Count, "the anchor's signature does not verify with a trusted key (key id %q)", a.Key)
		return
	}
	if a.Claim != v.rep.Claim {
		v.add(ProblemForeignAnchor, v.anchorLine, a.Count, "a genuine anchor of claim %s, not of %s", a.Claim, v.rep.Claim)
		return
	}
	var high uint64
	for _, p := range v.ours {
		high = max(high, p.e.Seq)
		if p.e.Seq > a.Count {
			v.add(ProblemAppended, p.line, p.e.Seq, "past the %d entries the anchor signs", a.Count)
		}
		if p.e.Seq == a.Count && p.genuine() && p.e.Hash != a.Head {
			v.add(ProblemHeadDiffers, p.line, p.e.Seq, "entry %d is not the one the anchor signs: the chain was replaced", a.Count)
		}
	}
	if high < a.Count {
		v.add(ProblemCut, v.anchorLine, high+1, "the record ends at entry %d; its anchor counts %d: entries %d to %d are missing", high, a.Count, high+1, a.Count)
	}
	v.rep.Sealed = a.Sealed
}
