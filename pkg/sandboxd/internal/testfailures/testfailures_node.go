package testfailures

import (
	"path"
	"regexp"
	"strings"
)

// Node's test failures, from node's own test runner (node --test), whose
// two reporters are parsed: TAP (node 18-22's default when the output is
// not a terminal, as under run_tests) and spec (the default on a terminal,
// and from node 23 on), of which the "failing tests" summary at its end is
// read. Other runners (jest, vitest, mocha) print neither and give no
// structured failures, except jest, whose default reporter is parsed too
// (jestLine).

// nodeState is the node parser's state.
type nodeState struct {
	// names of the enclosing subtests, by depth (TAP's "# Subtest:" lines,
	// four spaces a level).
	names []string
	// yaml is the indentation of the YAML block of a "not ok" being read,
	// or -1.
	yaml int
	// inError: the lines of a block-scalar error: message are being read.
	inError  bool
	inStack  bool
	pending  Failure
	skip     bool // a parent that failed only because a subtest did
	haveStak bool // the file and line come from the stack, not location
	// spec: inside the "failing tests:" summary.
	specSummary bool
	specAt      Failure
	specHasAt   bool
	// jest: its default reporter, the file of the suite being read, and
	// whether the failure's details have reached its code frame or stack.
	jest     bool
	jestFile string
	jestDone bool
}

var (
	nodeSubtest  = regexp.MustCompile(`^((?:    )*)# Subtest: (.*)$`)
	nodeNotOK    = regexp.MustCompile(`^((?:    )*)not ok \d+ - (.*?)(?: # (?:SKIP|TODO).*)?$`)
	nodeYAMLKey  = regexp.MustCompile(`^([A-Za-z_]+):\s?(.*)$`)
	nodeLocation = regexp.MustCompile(`^'?(.+?):(\d+):\d+'?$`)
	// a stack frame: "at fn (file:line:col)", "fn (file:line:col)" or
	// "file:line:col".
	nodeFrame    = regexp.MustCompile(`(?:\(|^|\s)((?:file://)?/[^():]+|[^\s():]+\.[cm]?[jt]sx?):(\d+):\d+\)?$`)
	nodeSpecAt   = regexp.MustCompile(`^test at (.+?):(\d+):\d+$`)
	nodeSpecFail = regexp.MustCompile(`^✖ (.*?)(?: \([0-9.]+m?s\))?$`)
)

// nodeLine parses node --test output, or jest's.
func (p *Parser) nodeLine(line string) {
	s := p.node
	if s.jest || (s.yaml < 0 && !s.specSummary && jestSuite.MatchString(line)) {
		s.jest = true
		p.jestLine(line)
		return
	}
	if s.specSummary {
		p.nodeSpecLine(line)
		return
	}
	if line == "✖ failing tests:" {
		s.specSummary = true
		return
	}
	if s.yaml >= 0 {
		indent := len(line) - len(strings.TrimLeft(line, " "))
		body := strings.TrimLeft(line, " ")
		switch {
		case body == "---" && indent == s.yaml:
			return
		case line == "" && s.inError:
			p.nodeNote("")
			return
		case body == "..." && indent == s.yaml:
			p.nodeCommit()
			return
		case indent == s.yaml && nodeYAMLKey.MatchString(body):
			m := nodeYAMLKey.FindStringSubmatch(body)
			s.inError, s.inStack = false, false
			switch m[1] {
			case "location":
				if l := nodeLocation.FindStringSubmatch(m[2]); l != nil && !s.haveStak {
					s.pending.File, s.pending.Line = l[1], atoi(l[2])
				}
			case "failureType":
				s.skip = strings.Trim(m[2], "'") == "subtestsFailed"
			case "error":
				if m[2] == "|-" || m[2] == "|" || m[2] == ">-" {
					s.inError = true
				} else {
					s.pending.Message = unquoteYAML(m[2])
				}
			case "stack":
				s.inStack = true
			}
			return
		case indent > s.yaml && s.inError:
			p.nodeNote(strings.TrimPrefix(line, strings.Repeat(" ", s.yaml+2)))
			return
		case indent > s.yaml && s.inStack:
			if !s.haveStak {
				if m := nodeFrame.FindStringSubmatch(body); m != nil && nodeUserFile(m[1]) {
					s.pending.File, s.pending.Line, s.haveStak = strings.TrimPrefix(m[1], "file://"), atoi(m[2]), true
				}
			}
			return
		case indent > s.yaml:
			return
		}
		p.nodeCommit() // a block without its end marker
	}
	if m := nodeSubtest.FindStringSubmatch(line); m != nil {
		depth := len(m[1]) / 4
		s.names = append(s.names[:min(depth, len(s.names))], m[2])
		return
	}
	if m := nodeNotOK.FindStringSubmatch(line); m != nil {
		depth := len(m[1]) / 4
		names := append(append([]string{}, s.names[:min(depth, len(s.names))]...), m[2])
		s.pending = Failure{Test: strings.Join(names, " > ")}
		s.yaml, s.skip, s.haveStak, s.inError, s.inStack = len(m[1])+2, false, false, false, false
	}
}

// nodeNote adds a line to the pending failure's message.
func (p *Parser) nodeNote(line string) {
	f := &p.node.pending
	if f.Message != "" {
		line = "\n" + line
	}
	if room := maxFailureMessage - len(f.Message); room > 0 {
		f.Message += line[:min(room, len(line))]
	}
}

// nodeCommit records the pending failure, unless it is a parent that
// failed only through its subtests (they are recorded themselves).
func (p *Parser) nodeCommit() {
	s := p.node
	if !s.skip {
		f := s.pending
		f.Message = strings.TrimRight(f.Message, "\n ")
		if f.File != "" {
			f.Package = path.Dir(f.File)
		}
		p.add(f)
	}
	s.yaml, s.pending, s.skip, s.haveStak, s.inError, s.inStack = -1, Failure{}, false, false, false, false
}

// nodeEnd finishes a node run's failures: one cut inside its YAML block
// (a killed run) is kept, and messages lose the blank lines at their end.
func (p *Parser) nodeEnd() {
	if p.node.yaml >= 0 {
		p.nodeCommit()
	}
	for i := range p.failures {
		p.failures[i].Message = strings.TrimRight(p.failures[i].Message, "\n ")
	}
}

// nodeSpecLine parses the spec reporter's summary of failing tests:
//
//	test at test/math.test.js:8:1
//	✖ subtracts wrong (1.1ms)
//	  AssertionError [ERR_ASSERTION]: Expected values to be strictly equal:
//	  ...
//	      at TestContext.<anonymous> (/w/test/math.test.js:9:10)
func (p *Parser) nodeSpecLine(line string) {
	s := p.node
	if m := nodeSpecAt.FindStringSubmatch(line); m != nil {
		s.specAt, s.specHasAt = Failure{File: m[1], Line: atoi(m[2])}, true
		p.current = -1
		return
	}
	if m := nodeSpecFail.FindStringSubmatch(line); m != nil && s.specHasAt {
		f := s.specAt
		f.Test = m[1]
		f.Package = path.Dir(f.File)
		p.add(f)
		s.specHasAt, s.inStack = false, false
		return
	}
	if p.current < 0 {
		return
	}
	body := strings.TrimSpace(line)
	f := &p.failures[p.current]
	switch {
	case strings.HasPrefix(body, "at "):
		if !s.inStack {
			if m := nodeFrame.FindStringSubmatch(body); m != nil && nodeUserFile(m[1]) {
				f.File, f.Line = strings.TrimPrefix(m[1], "file://"), atoi(m[2])
			}
		}
		s.inStack = true
	case s.inStack || line == "":
	default:
		p.note(strings.TrimPrefix(line, "  "))
	}
}

// nodeUserFile reports whether a stack frame's file is the project's, not
// node's own or a dependency's.
func nodeUserFile(file string) bool {
	return !strings.HasPrefix(file, "node:") && !strings.Contains(file, "/node_modules/") && !strings.HasPrefix(file, "node_modules/") && !strings.HasPrefix(file, "internal/")
}

// unquoteYAML undoes YAML's single quotes around a flow scalar.
func unquoteYAML(s string) string {
	if len(s) >= 2 && s[0] == '\'' && s[len(s)-1] == '\'' {
		return strings.ReplaceAll(s[1:len(s)-1], "''", "'")
	}
	return s
}

var (
	jestSuite     = regexp.MustCompile(`^(FAIL|PASS) (\S+)`)
	jestTest      = regexp.MustCompile(`^  ● (.+)$`)
	jestCodeFrame = regexp.MustCompile(`^\s*(?:>\s*)?\d+ \||^\s+\|`)
)

// jestLine parses jest's default reporter: for each failing suite "FAIL
// file", then for each failing test "  ● describe › test", its message,
// a code frame and the stack:
//
//	FAIL test/math.test.js
//	  ● math › subtracts wrong
//
//	    expect(received).toBe(expected) // Object.is equality
//	    ...
//	    >  9 |     expect(3 - 1).toBe(1);
//	    ...
//	      at Object.toBe (test/math.test.js:9:19)
//
// A suite that did not load is "● Test suite failed to run": a failure of
// its file with no test, like a build error.
func (p *Parser) jestLine(line string) {
	s := p.node
	if s.jestDone {
		return
	}
	if line == "Summary of all failing tests" { // the same failures again
		s.jestDone = true
		return
	}
	if m := jestSuite.FindStringSubmatch(line); m != nil {
		s.jestFile, p.current = m[2], -1
		return
	}
	if m := jestTest.FindStringSubmatch(line); m != nil && s.jestFile != "" {
		f := Failure{Package: path.Dir(s.jestFile), Test: m[1], File: s.jestFile}
		if m[1] == "Test suite failed to run" {
			f.Test = ""
		}
		p.add(f)
		s.inStack, s.haveStak = false, false
		return
	}
	if p.current < 0 {
		return
	}
	body := strings.TrimSpace(line)
	switch {
	case strings.HasPrefix(body, "at "):
		if !s.haveStak {
			if m := nodeFrame.FindStringSubmatch(body); m != nil && nodeUserFile(m[1]) {
				f := &p.failures[p.current]
				f.File, f.Line, s.haveStak = strings.TrimPrefix(m[1], "file://"), atoi(m[2]), true
			}
		}
		s.inStack = true
	case jestCodeFrame.MatchString(line):
		s.inStack = true
	case s.inStack:
	default:
		p.note(strings.TrimPrefix(line, "    "))
	}
}
