package tools

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/confine"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/outcap"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/scrub"
)

const (
	// globDefaultLimit and globMaxLimit bound the paths Glob returns.
	globDefaultLimit = 1000
	globMaxLimit     = 10000
	// walkMaxEntries bounds how many directory entries one Glob or Grep
	// visits, so that a huge tree cannot keep a call busy for ever.
	walkMaxEntries = 500000
	// grepMaxLineBytes is the longest line Grep matches; a file with a longer
	// line is searched up to it and then skipped.
	grepMaxLineBytes = 4 << 20
	// grepMaxShownBytes is where Grep cuts a matching line it shows.
	grepMaxShownBytes = 500
	// grepMaxOutputBytes bounds the text of one Grep result.
	grepMaxOutputBytes = 100 << 10
	// maxBraceExpansions bounds the patterns one {a,b} pattern expands to.
	maxBraceExpansions = 256
)

// Grep output modes.
const (
	grepFilesWithMatches = "files_with_matches"
	grepContent          = "content"
	grepCount            = "count"
)

// GlobInput is the input of the Glob tool.
type GlobInput struct {
	Pattern string `json:"pattern" jsonschema:"glob pattern matched against paths below path, e.g. **/*.go or src/**/*.{ts,tsx}; ** matches any number of directories"`
	Path    string `json:"path,omitempty" jsonschema:"directory to search, relative to the workspace or absolute inside it; default the workspace"`
	Limit   int    `json:"limit,omitempty" jsonschema:"maximum number of paths to return; default 1000, maximum 10000"`
}

// GlobOutput is the structured result of the Glob tool.
type GlobOutput struct {
	Files     []string `json:"files" jsonschema:"matching paths, relative to the workspace, newest first"`
	Truncated bool     `json:"truncated,omitempty" jsonschema:"true when more paths matched than were returned"`
}

// GrepInput is the input of the Grep tool.
type GrepInput struct {
	Pattern         string `json:"pattern" jsonschema:"regular expression (RE2 syntax) to search for, line by line"`
	Path            string `json:"path,omitempty" jsonschema:"file or directory to search, relative to the workspace or absolute inside it; default the workspace"`
	Glob            string `json:"glob,omitempty" jsonschema:"only search files whose name (or, if it has a slash, whose path below path) matches this glob, e.g. *.go or **/*.{ts,tsx}"`
	CaseInsensitive bool   `json:"case_insensitive,omitempty" jsonschema:"match case-insensitively; default false"`
	DashI           bool   `json:"-i,omitempty" jsonschema:"the same as case_insensitive"`
	OutputMode      string `json:"output_mode,omitempty" jsonschema:"content (matching lines as path:line:text), files_with_matches (default: paths of files that match) or count (path:number of matching lines)"`
	HeadLimit       int    `json:"head_limit,omitempty" jsonschema:"return at most this many lines, files or counts; default no limit (the result is still cut at 100 KiB)"`
}

// GrepMatch is one matching line.
type GrepMatch struct {
	File string `json:"file" jsonschema:"path of the file, relative to the workspace"`
	Line int    `json:"line" jsonschema:"line number, 1-based"`
	Text string `json:"text" jsonschema:"the line, cut at 500 bytes"`
}

// GrepCount is the number of matching lines of one file.
type GrepCount struct {
	File  string `json:"file" jsonschema:"path of the file, relative to the workspace"`
	Count int    `json:"count" jsonschema:"number of matching lines"`
}

// GrepOutput is the structured result of the Grep tool.
type GrepOutput struct {
	OutputMode string      `json:"output_mode" jsonschema:"the output mode used"`
	Files      []string    `json:"files,omitempty" jsonschema:"files_with_matches mode: the files that match, relative to the workspace"`
	Matches    []GrepMatch `json:"matches,omitempty" jsonschema:"content mode: the matching lines"`
	Counts     []GrepCount `json:"counts,omitempty" jsonschema:"count mode: matching lines per file"`
	NumFiles   int         `json:"num_files" jsonschema:"number of files that match"`
	NumLines   int         `json:"num_lines" jsonschema:"number of matching lines"`
	Truncated  bool        `json:"truncated,omitempty" jsonschema:"true when head_limit, the output bound or the walk bound cut the result"`
}

// glob is the Glob tool.
func (tb *Toolbox) glob(ctx context.Context, in GlobInput) (*mcp.CallToolResult, GlobOutput, error) {
	if in.Limit < 0 {
		return nil, GlobOutput{}, fmt.Errorf("limit must be 1 or more, got %d", in.Limit)
	}
	limit := in.Limit
	if limit == 0 {
		limit = globDefaultLimit
	}
	limit = min(limit, globMaxLimit)
	base, err := tb.searchBase(in.Path, true)
	if err != nil {
		return nil, GlobOutput{}, err
	}
	matcher, err := tb.patternMatcher(in.Pattern, base)
	if err != nil {
		return nil, GlobOutput{}, err
	}
	type hit struct {
		rel   string
		mtime time.Time
	}
	var hits []hit
	walkErr := tb.walk(ctx, base, matcher.wantsGit, func(rel, below string, d fs.DirEntry) error {
		if !matcher.match(below) {
			return nil
		}
		var mtime time.Time
		if fi, err := d.Info(); err == nil {
			mtime = fi.ModTime()
		}
		hits = append(hits, hit{rel: rel, mtime: mtime})
		return nil
	})
	truncated := false
	if errors.Is(walkErr, errWalkBound) {
		truncated = true
	} else if walkErr != nil {
		return nil, GlobOutput{}, walkErr
	}
	slices.SortFunc(hits, func(a, b hit) int {
		if c := b.mtime.Compare(a.mtime); c != 0 {
			return c
		}
		return strings.Compare(a.rel, b.rel)
	})
	if len(hits) > limit {
		hits, truncated = hits[:limit], true
	}
	out := GlobOutput{Files: make([]string, 0, len(hits)), Truncated: truncated}
	for _, h := range hits {
		out.Files = append(out.Files, h.rel)
	}
	var text string
	if len(out.Files) == 0 {
		text = fmt.Sprintf("No files match %q", in.Pattern)
	} else {
		text = strings.Join(out.Files, "\n")
		if truncated {
			text += fmt.Sprintf("\n(results truncated at %d paths: narrow the pattern or the path)", len(out.Files))
		}
	}
	return textResult(text), out, nil
}

// grep is the Grep tool.
func (tb *Toolbox) grep(ctx context.Context, in GrepInput) (*mcp.CallToolResult, GrepOutput, error) {
	mode, re, err := grepRequest(in)
	if err != nil {
		return nil, GrepOutput{}, err
	}
	base, err := tb.searchBase(in.Path, false)
	if err != nil {
		return nil, GrepOutput{}, err
	}
	var filter *globMatcher
	if in.Glob != "" {
		if filter, err = newGlobMatcher(in.Glob); err != nil {
			return nil, GrepOutput{}, err
		}
	}
	g := &grepper{tb: tb, re: re, mode: mode, headLimit: in.HeadLimit, out: GrepOutput{OutputMode: mode}}
	fi, err := tb.ws.Root().Stat(base)
	if err != nil {
		return nil, GrepOutput{}, tb.ws.Explain(base, err)
	}
	var walkErr error
	if fi.Mode().IsRegular() {
		walkErr = g.searchFile(ctx, base)
	} else if !fi.IsDir() {
		return nil, GrepOutput{}, confine.CheckRegular(base, fi)
	} else {
		walkErr = tb.walk(ctx, base, false, func(rel, below string, d fs.DirEntry) error {
			if !d.Type().IsRegular() {
				return nil
			}
			if filter != nil && !filter.matchFile(below) {
				return nil
			}
			return g.searchFile(ctx, rel)
		})
	}
	if errors.Is(walkErr, errWalkBound) {
		g.full = true
	} else if walkErr != nil {
		return nil, GrepOutput{}, walkErr
	}
	g.out.Truncated = g.full
	result := g.text.String()
	if g.out.NumLines == 0 {
		result = fmt.Sprintf("No matches for %q", in.Pattern)
	} else if g.full {
		result += fmt.Sprintf("(output cut: %d matching lines in %d files in all; use head_limit, glob or path to narrow the search)\n", g.out.NumLines, g.out.NumFiles)
	}
	return textResult(result), g.out, nil
}

// grepRequest checks a Grep call's input and returns its output mode and compiled pattern.
func grepRequest(in GrepInput) (string, *regexp.Regexp, error) {
	mode := in.OutputMode
	if mode == "" {
		mode = grepFilesWithMatches
	}
	if mode != grepFilesWithMatches && mode != grepContent && mode != grepCount {
		return "", nil, fmt.Errorf("output_mode must be one of content, files_with_matches, count; got %q", in.OutputMode)
	}
	if in.HeadLimit < 0 {
		return "", nil, fmt.Errorf("head_limit must be 1 or more, got %d", in.HeadLimit)
	}
	if in.Pattern == "" {
		return "", nil, errors.New("pattern is empty")
	}
	expr := in.Pattern
	if in.CaseInsensitive || in.DashI {
		expr = "(?i)" + expr
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		return "", nil, fmt.Errorf("pattern is not a valid RE2 regular expression: %v", err)
	}
	return mode, re, nil
}

// grepper is one Grep call's search: the files it has matched and the text it has written.
type grepper struct {
	tb        *Toolbox
	re        *regexp.Regexp
	mode      string
	headLimit int
	out       GrepOutput
	text      strings.Builder
	entries   int
	full      bool // head_limit or the output bound reached
}

// emit writes one line of the answer, unless head_limit or the output bound is reached.
func (g *grepper) emit(line string) bool {
	if g.headLimit > 0 && g.entries >= g.headLimit || g.text.Len()+len(line)+1 > grepMaxOutputBytes {
		g.full = true
		return false
	}
	g.entries++
	g.text.WriteString(line)
	g.text.WriteByte('\n')
	return true
}

// searchFile searches one workspace file; a file that vanished, was swapped or is binary is no
// match.
func (g *grepper) searchFile(ctx context.Context, rel string) error {
	f, _, err := g.tb.ws.OpenRegular(rel)
	if err != nil {
		return nil // vanished, swapped or refused: not a match
	}
	defer f.Close()
	br := getFileReader(f)
	defer putFileReader(br)
	if head, _ := br.Peek(binarySniffBytes); bytes.IndexByte(head, 0) >= 0 {
		return nil // binary
	}
	sc := bufio.NewScanner(br)
	sc.Buffer(make([]byte, 0, 64<<10), grepMaxLineBytes)
	count := 0
	for n := 1; sc.Scan(); n++ {
		if n%4096 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		line := sc.Bytes()
		if !g.re.Match(line) {
			continue
		}
		count++
		g.out.NumLines++
		if g.mode == grepContent && !g.full {
			g.emitContent(rel, n, line)
		}
	}
	if count == 0 {
		return nil
	}
	g.out.NumFiles++
	switch {
	case g.full:
	case g.mode == grepFilesWithMatches:
		if g.emit(rel) {
			g.out.Files = append(g.out.Files, rel)
		}
	case g.mode == grepCount:
		if g.emit(fmt.Sprintf("%s:%d", rel, count)) {
			g.out.Counts = append(g.out.Counts, GrepCount{File: rel, Count: count})
		}
	}
	return nil
}

// emitContent writes one matching line in content mode, cut at grepMaxShownBytes but never in a
// token (half a secret).
func (g *grepper) emitContent(rel string, n int, line []byte) {
	shownBytes := line
	if len(line) > grepMaxShownBytes {
		shownBytes = scrub.TrimTokenEnd(outcap.TrimPartialRune(line[:grepMaxShownBytes]))
	}
	shown := string(bytes.ToValidUTF8(shownBytes, []byte("\uFFFD")))
	if g.emit(fmt.Sprintf("%s:%d:%s", rel, n, shown)) {
		g.out.Matches = append(g.out.Matches, GrepMatch{File: rel, Line: n, Text: shown})
	}
}

// searchBase resolves the optional path of Glob and Grep; dirOnly refuses a
// path that is not a directory.
func (tb *Toolbox) searchBase(p string, dirOnly bool) (string, error) {
	if p == "" {
		return ".", nil
	}
	rel, err := tb.ws.Rel(p)
	if err != nil {
		return "", err
	}
	fi, err := tb.ws.Root().Stat(rel)
	if err != nil {
		return "", tb.ws.Explain(rel, err)
	}
	if dirOnly && !fi.IsDir() {
		return "", fmt.Errorf("path %s is not a directory", rel)
	}
	return rel, nil
}

// errWalkBound stops a walk that visited walkMaxEntries entries.
var errWalkBound = errors.New("walk bound reached")

// walk visits every non-directory entry below the workspace-relative
// directory base, through the os.Root: symlinked directories are not
// descended into and .git directories are skipped unless withGit. fn gets the
// entry's workspace-relative path and its path below base.
func (tb *Toolbox) walk(ctx context.Context, base string, withGit bool, fn func(rel, below string, d fs.DirEntry) error) error {
	visited := 0
	return fs.WalkDir(tb.ws.Root().FS(), base, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == base {
				return tb.ws.Explain(base, err)
			}
			return nil // unreadable or vanished below base: skip it
		}
		if visited++; visited > walkMaxEntries {
			return errWalkBound
		}
		if visited%1024 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		if d.IsDir() {
			if p != base && d.Name() == ".git" && !withGit {
				return fs.SkipDir
			}
			return nil
		}
		below := p
		if base != "." {
			below = strings.TrimPrefix(p, base+"/")
		}
		return fn(p, below, d)
	})
}

// patternMatcher compiles a Glob pattern, which may be absolute inside the
// workspace, into a matcher of paths below base.
func (tb *Toolbox) patternMatcher(pattern, base string) (*globMatcher, error) {
	if pattern == "" {
		return nil, errors.New("pattern is empty")
	}
	if path.IsAbs(pattern) {
		rel, err := tb.ws.Rel(pattern)
		if err != nil {
			return nil, fmt.Errorf("pattern: %v", err)
		}
		if base != "." {
			below, ok := strings.CutPrefix(rel, base+"/")
			if !ok {
				return nil, fmt.Errorf("pattern %q is not below path %s", pattern, base)
			}
			rel = below
		}
		pattern = rel
	}
	return newGlobMatcher(pattern)
}

// globMatcher matches slash paths against a glob: * ? [...] within a
// segment (path.Match), {a,b} alternatives, and ** segments that match any
// number of directories.
type globMatcher struct {
	alternatives [][]string // each a pattern split into segments
	hasSlash     bool       // the pattern names directories, not just a file name
	wantsGit     bool       // the pattern names a .git directory literally
}

func newGlobMatcher(pattern string) (*globMatcher, error) {
	if pattern == "" {
		return nil, errors.New("glob pattern is empty")
	}
	expanded, err := expandBraces(pattern)
	if err != nil {
		return nil, err
	}
	m := &globMatcher{hasSlash: strings.Contains(pattern, "/")}
	for _, p := range expanded {
		p = strings.TrimPrefix(p, "./")
		segs := strings.Split(p, "/")
		for _, s := range segs {
			if s == ".." {
				return nil, fmt.Errorf("glob pattern %q has a \"..\" segment: use path to search elsewhere in the workspace", pattern)
			}
			if s == ".git" {
				m.wantsGit = true
			}
			if _, err := path.Match(s, "x"); err != nil {
				return nil, fmt.Errorf("glob pattern %q is malformed: %v", pattern, err)
			}
		}
		m.alternatives = append(m.alternatives, segs)
	}
	return m, nil
}

// match reports whether the slash path name matches the pattern.
func (m *globMatcher) match(name string) bool {
	parts := strings.Split(name, "/")
	for _, segs := range m.alternatives {
		if matchSegments(segs, parts) {
			return true
		}
	}
	return false
}

// matchFile matches like ripgrep's --glob: a pattern without a slash is
// matched against the file name alone.
func (m *globMatcher) matchFile(name string) bool {
	if m.hasSlash {
		return m.match(name)
	}
	return m.match(path.Base(name))
}

// matchSegments matches path segments against pattern segments, where a
// "**" pattern segment matches zero or more path segments. It runs in
// O(len(pat)·len(parts)) whatever the pattern.
func matchSegments(pat, parts []string) bool {
	// ok[j] reports whether pat[i:] matches parts[j:], computed for i from
	// the end of the pattern to its start.
	ok := make([]bool, len(parts)+1)
	ok[len(parts)] = true
	for i := len(pat) - 1; i >= 0; i-- {
		next := make([]bool, len(parts)+1)
		if pat[i] == "**" {
			// ** matches parts[j:k] for any k ≥ j.
			any := false
			for j := len(parts); j >= 0; j-- {
				any = any || ok[j]
				next[j] = any
			}
		} else {
			for j := len(parts) - 1; j >= 0; j-- {
				if ok[j+1] {
					if m, _ := path.Match(pat[i], parts[j]); m {
						next[j] = true
					}
				}
			}
		}
		ok = next
	}
	return ok[0]
}

// expandBraces expands {a,b} alternatives (nested ones too) into the
// patterns they stand for.
func expandBraces(pattern string) ([]string, error) {
	open := -1
	depth := 0
	for i := 0; i < len(pattern); i++ {
		switch pattern[i] {
		case '\\':
			i++
		case '{':
			if depth == 0 {
				open = i
			}
			depth++
		case '}':
			if depth == 0 {
				continue
			}
			depth--
			if depth > 0 {
				continue
			}
			var alts []string
			start, d := open+1, 0
			for j := open + 1; j < i; j++ {
				switch pattern[j] {
				case '\\':
					j++
				case '{':
					d++
				case '}':
					d--
				case ',':
					if d == 0 {
						alts = append(alts, pattern[start:j])
						start = j + 1
					}
				}
			}
			alts = append(alts, pattern[start:i])
			var out []string
			for _, a := range alts {
				rest, err := expandBraces(pattern[:open] + a + pattern[i+1:])
				if err != nil {
					return nil, err
				}
				out = append(out, rest...)
				if len(out) > maxBraceExpansions {
					return nil, fmt.Errorf("glob pattern %q expands to more than %d patterns", pattern, maxBraceExpansions)
				}
			}
			return out, nil
		}
	}
	if depth > 0 {
		return nil, fmt.Errorf("glob pattern %q has an unclosed {", pattern)
	}
	return []string{pattern}, nil
}
