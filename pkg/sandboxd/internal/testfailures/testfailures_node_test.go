package testfailures

import (
	"strings"
	"testing"

	gocmp "github.com/google/go-cmp/cmp"
)

// nodeTAPOutput is what npm test printed for a package.json whose test
// script is node --test, with node v20.20.2 (TAP: its reporter when the
// output is not a terminal), in a workspace /w (written by running it; the
// path replaced).
const nodeTAPOutput = `
> fx@1.0.0 test
> node --test

TAP version 13
# /w/test/broken.test.js:1
# const x = ;
#           ^
# SyntaxError: Unexpected token ';'
#     at wrapSafe (node:internal/modules/cjs/loader:1464:18)
#     at Module._compile (node:internal/modules/cjs/loader:1495:20)
#     at Module._extensions..js (node:internal/modules/cjs/loader:1623:10)
#     at Module.load (node:internal/modules/cjs/loader:1266:32)
#     at Module._load (node:internal/modules/cjs/loader:1091:12)
#     at Function.executeUserEntryPoint [as runMain] (node:internal/modules/run_main:164:12)
#     at node:internal/main/run_main_module:28:49
# Node.js v20.20.2
# Subtest: /w/test/broken.test.js
not ok 1 - /w/test/broken.test.js
  ---
  duration_ms: 81.845704
  location: '/w/test/broken.test.js:1:1'
  failureType: 'testCodeFailure'
  exitCode: 1
  signal: ~
  error: 'test failed'
  code: 'ERR_TEST_FAILURE'
  ...
# Subtest: adds
ok 2 - adds
  ---
  duration_ms: 1.05013
  ...
# Subtest: subtracts wrong
not ok 3 - subtracts wrong
  ---
  duration_ms: 1.172002
  location: '/w/test/math.test.js:8:1'
  failureType: 'testCodeFailure'
  error: |-
    Expected values to be strictly equal:
    
    2 !== 1
    
  code: 'ERR_ASSERTION'
  name: 'AssertionError'
  expected: 1
  actual: 2
  operator: 'strictEqual'
  stack: |-
    TestContext.<anonymous> (/w/test/math.test.js:9:10)
    Test.runInAsyncScope (node:async_hooks:206:9)
    Test.run (node:internal/test_runner/test:796:25)
    Test.processPendingSubtests (node:internal/test_runner/test:526:18)
    Test.postRun (node:internal/test_runner/test:889:19)
    Test.run (node:internal/test_runner/test:835:12)
    async Test.processPendingSubtests (node:internal/test_runner/test:526:7)
  ...
# Subtest: suite of things
    # Subtest: inner ok
    ok 1 - inner ok
      ---
      duration_ms: 0.139538
      ...
    # Subtest: inner bad
    not ok 2 - inner bad
      ---
      duration_ms: 0.158115
      location: '/w/test/math.test.js:14:11'
      failureType: 'testCodeFailure'
      error: 'inner boom'
      code: 'ERR_TEST_FAILURE'
      stack: |-
        TestContext.<anonymous> (/w/test/math.test.js:15:11)
        Test.runInAsyncScope (node:async_hooks:206:9)
        Test.run (node:internal/test_runner/test:796:25)
        Test.start (node:internal/test_runner/test:702:17)
        TestContext.test (node:internal/test_runner/test:292:20)
        TestContext.<anonymous> (/w/test/math.test.js:14:11)
        async Test.run (node:internal/test_runner/test:797:9)
        async Test.processPendingSubtests (node:internal/test_runner/test:526:7)
      ...
    1..2
not ok 4 - suite of things
  ---
  duration_ms: 0.684728
  location: '/w/test/math.test.js:12:1'
  failureType: 'subtestsFailed'
  error: '1 subtest failed'
  code: 'ERR_TEST_FAILURE'
  ...
# Subtest: a describe
    # Subtest: it fails
    not ok 1 - it fails
      ---
      duration_ms: 1.448502
      location: '/w/test/math.test.js:20:8'
      failureType: 'testCodeFailure'
      error: |-
        Expected values to be strictly deep-equal:
        + actual - expected
        
          {
        +   a: 1
        -   a: 2
          }
      code: 'ERR_ASSERTION'
      name: 'AssertionError'
      expected:
        a: 2
      actual:
        a: 1
      operator: 'deepStrictEqual'
      stack: |-
        TestContext.<anonymous> (/w/test/math.test.js:21:12)
        Test.runInAsyncScope (node:async_hooks:206:9)
        Test.run (node:internal/test_runner/test:796:25)
        Test.start (node:internal/test_runner/test:702:17)
        node:internal/test_runner/test:1133:71
        node:internal/per_context/primordials:482:82
        new Promise (<anonymous>)
        new SafePromise (node:internal/per_context/primordials:450:29)
        node:internal/per_context/primordials:482:9
        Array.map (<anonymous>)
      ...
    1..1
not ok 5 - a describe
  ---
  duration_ms: 1.677803
  type: 'suite'
  location: '/w/test/math.test.js:19:6'
  failureType: 'subtestsFailed'
  error: '1 subtest failed'
  code: 'ERR_TEST_FAILURE'
  ...
1..5
# tests 7
# suites 1
# pass 2
# fail 5
# cancelled 0
# skipped 0
# todo 0
# duration_ms 196.454884
`

// nodeSpecOutput is node --test --test-reporter=spec (the default on a
// terminal, and from node 23 on), same tests, same node.
const nodeSpecOutput = `/w/test/broken.test.js:1
const x = ;
          ^

SyntaxError: Unexpected token ';'
    at wrapSafe (node:internal/modules/cjs/loader:1464:18)
    at Module._compile (node:internal/modules/cjs/loader:1495:20)
    at Module._extensions..js (node:internal/modules/cjs/loader:1623:10)
    at Module.load (node:internal/modules/cjs/loader:1266:32)
    at Module._load (node:internal/modules/cjs/loader:1091:12)
    at Function.executeUserEntryPoint [as runMain] (node:internal/modules/run_main:164:12)
    at node:internal/main/run_main_module:28:49

Node.js v20.20.2
✖ /w/test/broken.test.js (76.687694ms)
  'test failed'

✔ adds (0.991584ms)
✖ subtracts wrong (1.112333ms)
  AssertionError [ERR_ASSERTION]: Expected values to be strictly equal:
  
  2 !== 1
  
      at TestContext.<anonymous> (/w/test/math.test.js:9:10)
      at Test.runInAsyncScope (node:async_hooks:206:9)
      at Test.run (node:internal/test_runner/test:796:25)
      at Test.processPendingSubtests (node:internal/test_runner/test:526:18)
      at Test.postRun (node:internal/test_runner/test:889:19)
      at Test.run (node:internal/test_runner/test:835:12)
      at async Test.processPendingSubtests (node:internal/test_runner/test:526:7) {
    generatedMessage: true,
    code: 'ERR_ASSERTION',
    actual: 2,
    expected: 1,
    operator: 'strictEqual'
  }

▶ suite of things
  ✔ inner ok (0.140398ms)
  ✖ inner bad (0.150534ms)
    Error: inner boom
        at TestContext.<anonymous> (/w/test/math.test.js:15:11)
        at Test.runInAsyncScope (node:async_hooks:206:9)
        at Test.run (node:internal/test_runner/test:796:25)
        at Test.start (node:internal/test_runner/test:702:17)
        at TestContext.test (node:internal/test_runner/test:292:20)
        at TestContext.<anonymous> (/w/test/math.test.js:14:11)
        at async Test.run (node:internal/test_runner/test:797:9)
        at async Test.processPendingSubtests (node:internal/test_runner/test:526:7)

✖ suite of things (0.724277ms)
▶ a describe
  ✖ it fails (1.349606ms)
    AssertionError [ERR_ASSERTION]: Expected values to be strictly deep-equal:
    + actual - expected
    
      {
    +   a: 1
    -   a: 2
      }
        at TestContext.<anonymous> (/w/test/math.test.js:21:12)
        at Test.runInAsyncScope (node:async_hooks:206:9)
        at Test.run (node:internal/test_runner/test:796:25)
        at Test.start (node:internal/test_runner/test:702:17)
        at node:internal/test_runner/test:1133:71
        at node:internal/per_context/primordials:482:82
        at new Promise (<anonymous>)
        at new SafePromise (node:internal/per_context/primordials:450:29)
        at node:internal/per_context/primordials:482:9
        at Array.map (<anonymous>) {
      generatedMessage: true,
      code: 'ERR_ASSERTION',
      actual: { a: 1 },
      expected: { a: 2 },
      operator: 'deepStrictEqual'
    }

✖ a describe (1.553248ms)
ℹ tests 7
ℹ suites 1
ℹ pass 2
ℹ fail 5
ℹ cancelled 0
ℹ skipped 0
ℹ todo 0
ℹ duration_ms 182.195016

✖ failing tests:

test at test/broken.test.js:1:1
✖ /w/test/broken.test.js (76.687694ms)
  'test failed'

test at test/math.test.js:8:1
✖ subtracts wrong (1.112333ms)
  AssertionError [ERR_ASSERTION]: Expected values to be strictly equal:
  
  2 !== 1
  
      at TestContext.<anonymous> (/w/test/math.test.js:9:10)
      at Test.runInAsyncScope (node:async_hooks:206:9)
      at Test.run (node:internal/test_runner/test:796:25)
      at Test.processPendingSubtests (node:internal/test_runner/test:526:18)
      at Test.postRun (node:internal/test_runner/test:889:19)
      at Test.run (node:internal/test_runner/test:835:12)
      at async Test.processPendingSubtests (node:internal/test_runner/test:526:7) {
    generatedMessage: true,
    code: 'ERR_ASSERTION',
    actual: 2,
    expected: 1,
    operator: 'strictEqual'
  }

test at test/math.test.js:14:11
✖ inner bad (0.150534ms)
  Error: inner boom
      at TestContext.<anonymous> (/w/test/math.test.js:15:11)
      at Test.runInAsyncScope (node:async_hooks:206:9)
      at Test.run (node:internal/test_runner/test:796:25)
      at Test.start (node:internal/test_runner/test:702:17)
      at TestContext.test (node:internal/test_runner/test:292:20)
      at TestContext.<anonymous> (/w/test/math.test.js:14:11)
      at async Test.run (node:internal/test_runner/test:797:9)
      at async Test.processPendingSubtests (node:internal/test_runner/test:526:7)

test at test/math.test.js:20:8
✖ it fails (1.349606ms)
  AssertionError [ERR_ASSERTION]: Expected values to be strictly deep-equal:
  + actual - expected
  
    {
  +   a: 1
  -   a: 2
    }
      at TestContext.<anonymous> (/w/test/math.test.js:21:12)
      at Test.runInAsyncScope (node:async_hooks:206:9)
      at Test.run (node:internal/test_runner/test:796:25)
      at Test.start (node:internal/test_runner/test:702:17)
      at node:internal/test_runner/test:1133:71
      at node:internal/per_context/primordials:482:82
      at new Promise (<anonymous>)
      at new SafePromise (node:internal/per_context/primordials:450:29)
      at node:internal/per_context/primordials:482:9
      at Array.map (<anonymous>) {
    generatedMessage: true,
    code: 'ERR_ASSERTION',
    actual: { a: 1 },
    expected: { a: 2 },
    operator: 'deepStrictEqual'
  }
`

func TestNodeFailures(t *testing.T) {
	tests := map[string]struct {
		output string
		want   []Failure
	}{
		"TAP": {output: nodeTAPOutput, want: []Failure{
			{Package: "/w/test", Test: "/w/test/broken.test.js", File: "/w/test/broken.test.js", Line: 1, Message: "test failed"},
			{Package: "/w/test", Test: "subtracts wrong", File: "/w/test/math.test.js", Line: 9, Message: "Expected values to be strictly equal:\n\n2 !== 1"},
			{Package: "/w/test", Test: "suite of things > inner bad", File: "/w/test/math.test.js", Line: 15, Message: "inner boom"},
			{Package: "/w/test", Test: "a describe > it fails", File: "/w/test/math.test.js", Line: 21, Message: "Expected values to be strictly deep-equal:\n+ actual - expected\n\n  {\n+   a: 1\n-   a: 2\n  }"},
		}},
		"spec": {output: nodeSpecOutput, want: []Failure{
			{Package: "test", Test: "/w/test/broken.test.js", File: "test/broken.test.js", Line: 1, Message: "'test failed'"},
			{Package: "test", Test: "subtracts wrong", File: "/w/test/math.test.js", Line: 9, Message: "AssertionError [ERR_ASSERTION]: Expected values to be strictly equal:\n\n2 !== 1"},
			{Package: "test", Test: "inner bad", File: "/w/test/math.test.js", Line: 15, Message: "Error: inner boom"},
			{Package: "test", Test: "it fails", File: "/w/test/math.test.js", Line: 21, Message: "AssertionError [ERR_ASSERTION]: Expected values to be strictly deep-equal:\n+ actual - expected\n\n  {\n+   a: 1\n-   a: 2\n  }"},
		}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			p := NewParser("node")
			for rest := tt.output; rest != ""; { // in odd pieces, as a pipe delivers them
				n := min(len(rest), 41)
				p.Write([]byte(rest[:n]))
				rest = rest[n:]
			}
			if d := gocmp.Diff(tt.want, p.Result()); d != "" {
				t.Errorf("failures (-want +got):\n%s", d)
			}
		})
	}
}

// TestNodeFailuresCutMidBlock: output that ends inside a failure's YAML
// block (a killed run) still gives the failure.
func TestNodeFailuresCutMidBlock(t *testing.T) {
	p := NewParser("node")
	p.Write([]byte("# Subtest: slow\nnot ok 1 - slow\n  ---\n  location: '/w/t.test.js:3:1'\n  error: 'timed out'\n"))
	want := []Failure{{Package: "/w", Test: "slow", File: "/w/t.test.js", Line: 3, Message: "timed out"}}
	if d := gocmp.Diff(want, p.Result()); d != "" {
		t.Errorf("failures (-want +got):\n%s", d)
	}
}

// jestOutput is what npm test printed for a package.json whose test script
// is jest (jest 29, its default reporter, output not a terminal), for a
// test file with three failures and one that does not parse, in a
// workspace /w (written by running it; the path replaced).
const jestOutput = `
> jfx@1.0.0 test
> jest

FAIL test/math.test.js
  ● math › subtracts wrong

    expect(received).toBe(expected) // Object.is equality

    Expected: 1
    Received: 2

       7 |
       8 |   test('subtracts wrong', () => {
    >  9 |     expect(3 - 1).toBe(1);
         |                   ^
      10 |   });
      11 |
      12 |   describe('nested', () => {

      at Object.toBe (test/math.test.js:9:19)

  ● math › nested › throws

    inner boom

      12 |   describe('nested', () => {
      13 |     it('throws', () => {
    > 14 |       throw new Error('inner boom');
         |             ^
      15 |     });
      16 |   });
      17 | });

      at Object.<anonymous> (test/math.test.js:14:13)

  ● top level fails

    expect(received).toEqual(expected) // deep equality

    - Expected  - 1
    + Received  + 1

      Object {
    -   "a": 2,
    +   "a": 1,
      }

      18 |
      19 | test('top level fails', () => {
    > 20 |   expect({ a: 1 }).toEqual({ a: 2 });
         |                    ^
      21 | });
      22 |

      at Object.toEqual (test/math.test.js:20:20)

FAIL test/broken.test.js
  ● Test suite failed to run

    Jest encountered an unexpected token

    Jest failed to parse a file. This happens e.g. when your code or its dependencies use non-standard JavaScript syntax, or when Jest is not configured to support such syntax.

    Out of the box Jest supports Babel, which will be used to transform your files into valid JS based on your Babel configuration.

    By default "node_modules" folder is ignored by transformers.

    Here's what you can do:
     • If you are trying to use ECMAScript Modules, see https://jestjs.io/docs/ecmascript-modules for how to enable it.
     • If you are trying to use TypeScript, see https://jestjs.io/docs/getting-started#using-typescript
     • To have some of your "node_modules" files transformed, you can specify a custom "transformIgnorePatterns" in your config.
     • If you need a custom transformation specify a "transform" option in your config.
     • If you simply want to mock your non-JS modules (e.g. binary assets) you can stub them out with the "moduleNameMapper" config option.

    You'll find more details and examples of these config options in the docs:
    https://jestjs.io/docs/configuration
    For information about custom transformations, see:
    https://jestjs.io/docs/code-transformation

    Details:

    SyntaxError: /w/test/broken.test.js: Unexpected token (1:10)

    > 1 | const x = ;
        |           ^
      2 |

      at constructor (node_modules/@babel/parser/src/parse-error.ts:96:45)
      at Parser.toParseError [as raise] (node_modules/@babel/parser/src/tokenizer/index.ts:1563:19)
      at Parser.raise [as unexpected] (node_modules/@babel/parser/src/tokenizer/index.ts:1603:16)
      at Parser.unexpected [as parseExprAtom] (node_modules/@babel/parser/src/parser/expression.ts:1442:22)
      at Parser.parseExprAtom [as parseExprSubscripts] (node_modules/@babel/parser/src/parser/expression.ts:788:23)
      at Parser.parseExprSubscripts [as parseUpdate] (node_modules/@babel/parser/src/parser/expression.ts:767:21)
      at Parser.parseUpdate [as parseMaybeUnary] (node_modules/@babel/parser/src/parser/expression.ts:729:23)
      at Parser.parseMaybeUnary [as parseMaybeUnaryOrPrivate] (node_modules/@babel/parser/src/parser/expression.ts:437:14)
      at Parser.parseMaybeUnaryOrPrivate [as parseExprOps] (node_modules/@babel/parser/src/parser/expression.ts:449:23)
      at Parser.parseExprOps [as parseMaybeConditional] (node_modules/@babel/parser/src/parser/expression.ts:404:23)
      at Parser.parseMaybeConditional [as parseMaybeAssign] (node_modules/@babel/parser/src/parser/expression.ts:310:21)
      at parseMaybeAssign (node_modules/@babel/parser/src/parser/expression.ts:259:12)
      at Parser.callback [as allowInAnd] (node_modules/@babel/parser/src/parser/expression.ts:3292:16)
      at Parser.allowInAnd [as parseMaybeAssignAllowIn] (node_modules/@babel/parser/src/parser/expression.ts:258:17)
      at Parser.parseMaybeAssignAllowIn [as parseVar] (node_modules/@babel/parser/src/parser/statement.ts:1650:18)
      at Parser.parseVar [as parseVarStatement] (node_modules/@babel/parser/src/parser/statement.ts:1309:10)
      at Parser.parseVarStatement [as parseStatementContent] (node_modules/@babel/parser/src/parser/statement.ts:653:21)
      at Parser.parseStatementContent [as parseStatementLike] (node_modules/@babel/parser/src/parser/statement.ts:522:17)
      at Parser.parseStatementLike [as parseModuleItem] (node_modules/@babel/parser/src/parser/statement.ts:459:17)
      at Parser.parseModuleItem [as parseBlockOrModuleBlockBody] (node_modules/@babel/parser/src/parser/statement.ts:1506:16)
      at Parser.parseBlockOrModuleBlockBody [as parseBlockBody] (node_modules/@babel/parser/src/parser/statement.ts:1480:10)
      at Parser.parseBlockBody [as parseProgram] (node_modules/@babel/parser/src/parser/statement.ts:241:10)
      at Parser.parseProgram [as parseTopLevel] (node_modules/@babel/parser/src/parser/statement.ts:215:25)
      at Parser.parseTopLevel [as parse] (node_modules/@babel/parser/src/parser/index.ts:83:25)
      at parse (node_modules/@babel/parser/src/index.ts:86:38)
      at parser (node_modules/@babel/core/src/parser/index.ts:29:19)
          at parser.next (<anonymous>)
      at normalizeFile (node_modules/@babel/core/src/transformation/normalize-file.ts:49:24)
          at normalizeFile.next (<anonymous>)
      at run (node_modules/@babel/core/src/transformation/index.ts:41:36)
          at run.next (<anonymous>)
      at transform (node_modules/@babel/core/src/transform.ts:29:20)
          at transform.next (<anonymous>)
      at evaluateSync (node_modules/gensync/index.js:251:28)
      at sync (node_modules/gensync/index.js:89:14)
      at fn (node_modules/@babel/core/src/errors/rewrite-stack-trace.ts:99:14)
      at transformSync (node_modules/@babel/core/src/transform.ts:66:52)
      at ScriptTransformer.transformSource (node_modules/@jest/transform/build/ScriptTransformer.js:545:31)
      at ScriptTransformer._transformAndBuildScript (node_modules/@jest/transform/build/ScriptTransformer.js:674:40)
      at ScriptTransformer.transform (node_modules/@jest/transform/build/ScriptTransformer.js:726:19)

Test Suites: 2 failed, 2 total
Tests:       3 failed, 1 passed, 4 total
Snapshots:   0 total
Time:        4.899 s
Ran all test suites.
`

func TestJestFailures(t *testing.T) {
	p := NewParser("node")
	for rest := jestOutput; rest != ""; {
		n := min(len(rest), 53)
		p.Write([]byte(rest[:n]))
		rest = rest[n:]
	}
	got := p.Result()
	want := []Failure{
		{Package: "test", Test: "math › subtracts wrong", File: "test/math.test.js", Line: 9, Message: "expect(received).toBe(expected) // Object.is equality\n\nExpected: 1\nReceived: 2"},
		{Package: "test", Test: "math › nested › throws", File: "test/math.test.js", Line: 14, Message: "inner boom"},
		{Package: "test", Test: "top level fails", File: "test/math.test.js", Line: 20, Message: "expect(received).toEqual(expected) // deep equality\n\n- Expected  - 1\n+ Received  + 1\n\n  Object {\n-   \"a\": 2,\n+   \"a\": 1,\n  }"},
		{Package: "test", File: "test/broken.test.js"},
	}
	if len(got) == 4 {
		if !strings.HasPrefix(got[3].Message, "Jest encountered an unexpected token\n\nJest failed to parse a file.") {
			t.Errorf("the suite that did not load says %q", got[3].Message)
		}
		got[3].Message = ""
	}
	if d := gocmp.Diff(want, got); d != "" {
		t.Errorf("failures (-want +got):\n%s", d)
	}
}
