package scrub

import (
	"regexp"
	"regexp/syntax"
	"strings"
	"unicode"
	"unicode/utf8"
)

// lineFilter is what every match of a rule's expression holds, read off
// its syntax (filterOf): a line that lacks any of it holds no match, and
// the expression is not run on it. In a repository's source most lines
// that hold an anchor hold no secret: corev1.Secret has no "aws", and
// `"Bearer "+token` no run of 16 token characters. Running the
// expressions on those lines was most of what scrubbing a source file
// cost.
type lineFilter struct {
	lits []filterLit // literals of the expression's top-level sequence
	runs []filterRun // repeats of a character class with a minimum, ditto
}

// filterLit is a literal every match holds, in any case when fold.
type filterLit struct {
	s    string
	fold bool
	// pastASCII: a letter of s folds to a rune past ASCII as well (k to
	// the Kelvin sign, s to the long s), which an ASCII comparison does
	// not see; such a literal is looked for on ASCII lines only.
	pastASCII bool
}

// filterRun says every match holds min bytes in a row that are in.
type filterRun struct {
	in  byteSet
	min int
}

// byteSet holds the bytes of a character class: every byte ≥ 0x80 when the
// class holds any rune past ASCII.
type byteSet [256]bool

// filterOf reads the filter of re: the literals and bounded repeats that
// are parts of its top-level concatenation (or of a capture that is
// one), which every match holds as they are. Anything else (an
// alternation, an optional part) is left out, so the filter only ever
// admits more lines than hold a match. A repeat is kept when its minimum
// is 8 or more, and a literal that is not ASCII is left out.
func filterOf(re *regexp.Regexp) lineFilter {
	parsed, err := syntax.Parse(re.String(), syntax.Perl)
	if err != nil {
		return lineFilter{}
	}
	var f lineFilter
	f.add(parsed) // not simplified: that turns a counted repeat into copies
	return f
}

func (f *lineFilter) add(re *syntax.Regexp) {
	switch re.Op {
	case syntax.OpConcat:
		for _, sub := range re.Sub {
			f.add(sub)
		}
	case syntax.OpCapture:
		f.add(re.Sub[0])
	case syntax.OpLiteral:
		s := string(re.Rune)
		if !isASCII(s) {
			return
		}
		fold := re.Flags&syntax.FoldCase != 0
		if fold {
			s = strings.ToLower(s)
		}
		f.lits = append(f.lits, filterLit{s: s, fold: fold, pastASCII: fold && foldsPastASCII(s)})
	case syntax.OpRepeat:
		if re.Min >= 8 && re.Sub[0].Op == syntax.OpCharClass {
			f.runs = append(f.runs, filterRun{in: classBytes(re.Sub[0].Rune), min: re.Min})
		}
	}
}

// classBytes is the byte table of a character class's rune ranges.
func classBytes(ranges []rune) (in byteSet) {
	for i := 0; i+1 < len(ranges); i += 2 {
		lo, hi := ranges[i], ranges[i+1]
		for c := lo; c <= hi && c < utf8.RuneSelf; c++ {
			in[c] = true
		}
		if hi >= utf8.RuneSelf {
			for c := utf8.RuneSelf; c < 256; c++ {
				in[c] = true
			}
		}
	}
	return in
}

// admits reports whether line holds all of the filter.
func (f *lineFilter) admits(line string) bool {
	ascii := -1 // whether line is ASCII, once asked
	for _, l := range f.lits {
		switch {
		case !l.fold:
			if !strings.Contains(line, l.s) {
				return false
			}
		case l.pastASCII:
			if ascii < 0 {
				ascii = 0
				if isASCII(line) {
					ascii = 1
				}
			}
			if ascii == 1 && !containsFoldASCII(line, l.s) {
				return false
			}
		case !containsFoldASCII(line, l.s):
			return false
		}
	}
	for i := range f.runs {
		if !f.runs[i].in.holdsRun(line, f.runs[i].min) {
			return false
		}
	}
	return true
}

// holdsRun reports whether s has min bytes in a row that are in in.
func (in *byteSet) holdsRun(s string, min int) bool {
	n := 0
	for i := 0; i < len(s); i++ {
		if !in[s[i]] {
			n = 0
			continue
		}
		if n++; n >= min {
			return true
		}
	}
	return false
}

// foldsPastASCII reports whether a letter of s has a case-fold past ASCII.
func foldsPastASCII(s string) bool {
	for _, c := range s {
		for f := unicode.SimpleFold(c); f != c; f = unicode.SimpleFold(f) {
			if f >= utf8.RuneSelf {
				return true
			}
		}
	}
	return false
}

// containsFoldASCII reports whether s holds lower (ASCII, lower case) in
// any ASCII case.
func containsFoldASCII(s, lower string) bool {
	if lower == "" {
		return true
	}
	for i := 0; i+len(lower) <= len(s); i++ {
		if equalFoldASCII(s[i:i+len(lower)], lower) {
			return true
		}
	}
	return false
}

// equalFoldASCII reports whether s is lower (ASCII, lower case, as long as
// s) in some ASCII case.
func equalFoldASCII(s, lower string) bool {
	for i := 0; i < len(lower); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}

func isASCII[T string | []byte](s T) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}
