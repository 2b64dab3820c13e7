// Package testfailures parses test runners' output (go test, cargo test, pytest,
// node --test, jest) into failures as it streams. It needs nothing of the server.
package testfailures

import (
	"bytes"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Test failures, parsed from a test runner's output as it streams (before
// the output cap), for run_tests, run_failing_tests and last_test_failures.
// Go (go test), Rust (cargo test), Python (pytest) and Node (node --test
// and jest, testfailures_node.go) report failures in a form parsed here;
// other node runners (vitest, mocha) give no structured failures.

const (
	// maxTestFailures bounds the failures kept from one run.
	maxTestFailures = 200
	// maxFailureMessage bounds one failure's message.
	maxFailureMessage = 2000
	// maxParsedLine bounds a line the parser looks at.
	maxParsedLine = 64 << 10
)

// Failure is one failing test, or one build error that kept tests from
// running.
type Failure struct {
	Package string `json:"package,omitempty" jsonschema:"the package (go: import path) whose tests failed"`
	Test    string `json:"test,omitempty" jsonschema:"the failing test: go TestName or TestName/sub, rust module::name, python file::test; empty for a build error"`
	File    string `json:"file,omitempty" jsonschema:"the file the failure points at, relative to the workspace when it is in it"`
	Line    int    `json:"line,omitempty" jsonschema:"the line in file"`
	Message string `json:"message,omitempty" jsonschema:"what the runner said about the failure (cut at 2000 bytes)"`
}

// Parser parses a runner's output line by line as it is written.
type Parser struct {
	mu       sync.Mutex
	pending  []byte
	parse    func(line string)
	failures []Failure
	dropped  int
	// go
	current   int // index of the failure the next lines belong to, or -1
	buildPkg  string
	inPanic   bool
	firstFail int // first failure of the package being read
	// python
	sectionLines map[string]Failure
	section      string
	// node
	node *nodeState
}

// NewParser returns a parser for language's runner, or nil when
// there is none.
func NewParser(language string) *Parser {
	p := &Parser{current: -1, sectionLines: map[string]Failure{}}
	switch language {
	case "go":
		p.parse = p.goLine
	case "rust":
		p.parse = p.rustLine
	case "python":
		p.parse = p.pythonLine
	case "node":
		p.node = &nodeState{yaml: -1}
		p.parse = p.nodeLine
	default:
		return nil
	}
	return p
}

func (p *Parser) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(b)
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			if room := maxParsedLine - len(p.pending); room > 0 {
				p.pending = append(p.pending, b[:min(room, len(b))]...)
			}
			break
		}
		if room := maxParsedLine - len(p.pending); room > 0 {
			p.pending = append(p.pending, b[:min(room, i)]...)
		}
		p.parse(strings.TrimSuffix(string(p.pending), "\r"))
		p.pending = p.pending[:0]
		b = b[i+1:]
	}
	return n, nil
}

// Result returns the failures found, after the last line.
func (p *Parser) Result() []Failure {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.pending) > 0 {
		p.parse(string(p.pending))
		p.pending = nil
	}
	if p.node != nil {
		p.nodeEnd()
	}
	return p.failures
}

// add records a failure and makes it current; it returns its index, or -1
// once maxTestFailures are kept.
func (p *Parser) add(f Failure) int {
	if len(p.failures) >= maxTestFailures {
		p.dropped++
		p.current = -1
		return -1
	}
	p.failures = append(p.failures, f)
	p.current = len(p.failures) - 1
	return p.current
}

// note adds a line to the current failure's message.
func (p *Parser) note(line string) {
	if p.current < 0 {
		return
	}
	f := &p.failures[p.current]
	if f.Message != "" {
		line = "\n" + line
	}
	if room := maxFailureMessage - len(f.Message); room > 0 {
		f.Message += line[:min(room, len(line))]
	}
}

var (
	goFailLine   = regexp.MustCompile(`^(\s*)--- FAIL: (\S+)`)
	goLogLine    = regexp.MustCompile(`^\s+([^\s:]+\.go):(\d+): ?(.*)$`)
	goBuildLine  = regexp.MustCompile(`^([^\s:]+\.go):(\d+)(?::\d+)?: (.*)$`)
	goFrameLine  = regexp.MustCompile(`^\t(\S+\.go):(\d+)(?: \+0x[0-9a-f]+)?$`)
	goPkgSummary = regexp.MustCompile(`^(FAIL|ok)\s+(\S+)`)
)

// goLine parses `go test` output.
func (p *Parser) goLine(line string) {
	switch m := goPkgSummary.FindStringSubmatch(line); {
	case m != nil:
		for i := p.firstFail; i < len(p.failures); i++ {
			if p.failures[i].Package == "" {
				p.failures[i].Package = m[2]
			}
		}
		known := slices.ContainsFunc(p.failures, func(f Failure) bool { return f.Package == m[2] })
		if m[1] == "FAIL" && !known {
			p.add(Failure{Package: m[2], Message: strings.TrimSpace(line)}) // [setup failed], os.Exit, ...: nothing else parsed
		}
		p.firstFail, p.current, p.buildPkg, p.inPanic = len(p.failures), -1, "", false
		return
	case strings.HasPrefix(line, "# "):
		p.buildPkg, p.current, p.inPanic = strings.Fields(line[2:] + " x")[0], -1, false
		return
	}
	if m := goFailLine.FindStringSubmatch(line); m != nil {
		p.buildPkg, p.inPanic = "", false
		p.add(Failure{Test: m[2]})
		return
	}
	if p.buildPkg != "" {
		if m := goBuildLine.FindStringSubmatch(line); m != nil {
			n, _ := strconv.Atoi(m[2])
			p.add(Failure{Package: p.buildPkg, File: path.Clean(m[1]), Line: n, Message: m[3]})
		}
		return
	}
	if p.current < 0 {
		return
	}
	f := &p.failures[p.current]
	switch {
	case strings.HasPrefix(line, "panic: "):
		p.inPanic = true
		f.Message = ""
		p.note(line)
	case p.inPanic:
		if m := goFrameLine.FindStringSubmatch(line); m != nil && f.File == "" && !goRuntimeFile(m[1]) {
			f.File, f.Line = m[1], atoi(m[2])
		}
	default:
		if m := goLogLine.FindStringSubmatch(line); m != nil && f.File == "" {
			f.File, f.Line = m[1], atoi(m[2])
			p.note(m[3])
		} else if strings.HasPrefix(line, "    ") {
			p.note(strings.TrimSpace(line))
		}
	}
}

// goRuntimeFile reports whether a stack frame's file belongs to the Go
// distribution rather than to the code under test.
func goRuntimeFile(file string) bool {
	for _, dir := range []string{"/src/runtime/", "/src/testing/", "/src/reflect/", "/src/internal/"} {
		if strings.Contains(file, dir) {
			return true
		}
	}
	return false
}

var (
	rustTestHeader = regexp.MustCompile(`^---- (\S+) stdout ----$`)
	rustPanic      = regexp.MustCompile(`^thread '([^']*)'(?: \(\d+\))? panicked at ([^\s:]+):(\d+):\d+:$`)
	rustFailedLine = regexp.MustCompile(`^test (\S+) \.\.\. FAILED$`)
)

// rustLine parses `cargo test` output.
func (p *Parser) rustLine(line string) {
	if m := rustTestHeader.FindStringSubmatch(line); m != nil {
		p.add(Failure{Test: m[1]})
		p.inPanic = false
		return
	}
	if m := rustFailedLine.FindStringSubmatch(line); m != nil {
		return // listed again under its ---- header, with the details
	}
	if p.current < 0 {
		return
	}
	f := &p.failures[p.current]
	if m := rustPanic.FindStringSubmatch(line); m != nil {
		f.File, f.Line, p.inPanic = m[2], atoi(m[3]), true
		return
	}
	switch {
	case !p.inPanic:
	case line == "" || strings.HasPrefix(line, "note: ") || line == "stack backtrace:":
		p.inPanic = false
	default:
		p.note(line)
	}
}

var (
	pySection = regexp.MustCompile(`^_{3,} (.+?) _{3,}$`)
	pyWhere   = regexp.MustCompile(`^([^\s:]+\.py):(\d+): (.*)$`)
	pySummary = regexp.MustCompile(`^(FAILED|ERROR) (\S+)(?: - (.*))?$`)
)

// pythonLine parses pytest output: the FAILURES sections for where each
// test failed, and the short summary for which tests failed.
func (p *Parser) pythonLine(line string) {
	if m := pySection.FindStringSubmatch(line); m != nil {
		p.section = m[1]
		return
	}
	if m := pyWhere.FindStringSubmatch(line); m != nil && p.section != "" {
		if _, seen := p.sectionLines[p.section]; !seen {
			p.sectionLines[p.section] = Failure{File: m[1], Line: atoi(m[2]), Message: m[3]}
		}
		return
	}
	m := pySummary.FindStringSubmatch(line)
	if m == nil {
		return
	}
	id := m[2]
	file, test, _ := strings.Cut(id, "::")
	f := Failure{Package: path.Dir(file), Test: id, File: file, Message: m[3]}
	if test == "" {
		f.Test = ""
	}
	// The section is titled with the test's name (and class): test_x, or
	// TestC.test_x, parameters included.
	if where, ok := p.sectionLines[strings.ReplaceAll(test, "::", ".")]; ok {
		f.File, f.Line = where.File, where.Line
		if f.Message == "" {
			f.Message = where.Message
		}
	}
	p.add(f)
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}
