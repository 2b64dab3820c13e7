// Package sandboxd is the MCP server that runs inside a sandbox pod
// (`airlock sandboxd`): the codegen tools (Read, Write, Edit, Glob, Grep,
// Bash, BashOutput, KillShell, run_tests, run_lint, run_typecheck,
// MultiEdit, LS, snapshot_create, snapshot_list, snapshot_restore,
// snapshot_diff, run_failing_tests, last_test_failures, find_definition,
// find_references, rename_symbol, change_function_signature,
// edit_function_body, insert_after_method, tests_covering, run_script,
// search_code) served over MCP on one HTTP listener, with /healthz,
// /readyz, /metrics and the isolation evidence (GET /isolation) beside them. pkg/cmd calls Run with a Config;
// pkg/toolnames is the one list of the tools (a test there checks the list
// above against it). docs/sandboxd-tools.md is the user's view.
//
// # Layers
//
// As the official MCP Go SDK keeps its engine in internal/jsonrpc2 behind
// small public packages, this package exports Run and Config only and
// composes the server (server.go, run.go, stop.go, health.go, metrics.go,
// isolation.go, protocol.go: the SDK's server, the middleware every
// tools/call goes through) from internal packages that import downward only:
//
//   - internal/wire: the transports, the direct path, kept connections,
//     the checks of a message, result encoding, the HTTP guard,
//     tasks and the call gate: what must answer byte for byte as the SDK and
//     net/http do, tested against them. It imports internal/toolcall, not
//     internal/tools.
//   - internal/tools: the tools, one file per family, the language-server
//     manager, the Toolbox they share, and how a typed tool is added (its
//     arguments checked and decoded, its output encoded, as mcp.AddTool
//     does). It imports internal/toolcall and the helpers, not internal/wire.
//   - internal/toolcall: the few types both share (Handler, Set,
//     MarshaledJSON) and SkipSpace, with which both scan raw JSON; it
//     imports neither.
//   - helpers that need neither: internal/confine (paths), internal/snapshot,
//     internal/testfailures, internal/scrub, internal/procgroup,
//     internal/outcap, internal/lsp (the client), internal/evidence (the
//     isolation evidence's gathering).
//   - for tests only (no other code imports them): internal/sandboxdtest,
//     what the tests of these packages share (a raw client of both
//     transports, files, processes, fake secrets; it imports no package of
//     sandboxd), and internal/fakelsp, the fake language server the test
//     binaries run as gopls.
//
// # Transports
//
// Two transports share the listener:
//
//   - the HTTP+SSE transport of protocol version 2024-11-05: GET /sse opens a
//     session and answers exactly 200; its first event is `endpoint`, a
//     relative /message?sessionId=<id>. POST /message?sessionId=<id> is
//     answered 202, and every reply is an `event: message` on that session's
//     own stream. An unknown or closed session is 404. The streams are
//     github.com/r3labs/sse/v2 streams, one per session, with AutoReplay off
//     (no event is ever sent again, and Last-Event-ID is ignored), keepalive
//     SSE comments every 15 s, and a stream that is removed as soon as its
//     client goes.
//   - the Streamable HTTP transport (2025-03-26 and later) on /mcp, served by
//     the official MCP Go SDK's handlers: 2025-03-26 to 2025-11-25 with
//     sessions (one with no POST in flight for 30 minutes is closed, by
//     sandboxd's timer, which sees the direct path's POSTs too), and the
//     stateless 2026-07-28 (a POST whose MCP-Protocol-Version header names it,
//     or whose params carry its _meta, goes to the SDK's stateless handler:
//     server/discover, no initialize, no session; the MCP-Protocol-Version,
//     Mcp-Method and Mcp-Name headers must agree with the body, else the
//     header-mismatch error; the POST is the whole call, so a client that
//     goes away cancels its tool). What the tools share (read marks,
//     background shells, the last test run, snapshots) is the sandbox's, not
//     a session's, so a stateless request sees what a session would.
//
// The 2026-07-28 revision deprecates HTTP+SSE, with a 12-month window.
//
// At 2026-07-28, a Bash, run_tests, run_failing_tests, run_script or
// run_lint call whose _meta declares the extension io.modelcontextprotocol/tasks
// becomes a task when it outlives a threshold (or at once, when its params
// carry task): its POST gets a CreateTaskResult, the call runs on without
// it, and tasks/get, tasks/cancel (which kills its process group) and
// tasks/update reach it (internal/wire/tasks.go); a subscriptions/listen that names tasks
// gets their notifications/tasks (internal/wire/tasks_listen.go).
//
// The legacy SSE transport is a deliberate choice, not an oversight: the MCP
// specification deprecated it in 2025-03-26, but agent runtimes and MCP
// clients in use today still speak it (several speak only it), and an agent
// must be able to reach its sandbox with whatever client it has. Both
// transports feed the same protocol layer (the SDK's mcp.Server) and the
// same tools. On the SSE transport, a plain tools/call (an id, a name,
// arguments and no protocol _meta key, after initialize) is handed by the
// transport straight to the tool's handler, through the same middleware,
// and answered with the same bytes the SDK would write; a Read that need
// not wait for a snapshot is answered within its own POST, before the 202
// (internal/wire/directcall.go). On /mcp, a plain tools/call of either kind (stateless,
// with the revision's _meta and headers as the SDK checks them; or in an
// initialized session) runs the same way in its POST and is answered as
// application/json (internal/wire/directcall_streamable.go; docs/sandboxd-speed.md).
// After a direct call on a kept-alive HTTP/1.1 connection, the transport
// takes the connection over and serves its next direct calls itself, with
// net/http's parser and the server's whole handler, handing anything else
// back to net/http byte for byte (internal/wire/keepalive.go).
// Everything else goes through the SDK.
//
// # Protocol
//
// Protocol versions 2024-11-05, 2025-03-26, 2025-06-18 and 2025-11-25 are
// negotiated by initialize; a client that asks for another is answered with
// 2025-11-25 (initialize never negotiates 2026-07-28). 2026-07-28 is served
// without initialize, on /mcp only; over SSE a client initializes (the
// SDK's SSE client does not offer 2026-07-28). A
// request for a method the server does not have gets -32601 from the
// transport, before and after initialize alike, never a hang and never an
// HTTP error. A POST that is not JSON gets HTTP 400 with a JSON-RPC -32700
// error (id null); one that is JSON but not a JSON-RPC message, -32600; a
// JSON-RPC batch on the SSE transport, -32600 (send one message per POST);
// a message larger than 4 MiB (wire.MaxMessageBytes), HTTP 413 with a -32600
// error that gives the limit. notifications/cancelled cancels the call,
// which kills its processes.
//
// Tool failures are results with isError set, whose text the model reads:
// a path outside the workspace, a missing file, an ambiguous Edit, arguments
// that do not match the tool's input schema (unknown fields included). A
// tool that is not served is a protocol error (invalid params). A panic in a
// tool becomes a tool error, not a crash.
//
// # Tools
//
// Names and fields are the ones agents already know. Timeouts are in
// milliseconds, as Claude Code passes them, or, from 1 to 600, in seconds,
// as CodeGen-Sandbox passes them (one field, two units: the value says
// which); Bash defaults to 120 s and allows up to 600 s; run_* default to
// 300 s and allow up to 600 s. Read returns up to
// 2000 numbered lines from offset (lines cut at 2000 bytes); Write writes
// atomically (temporary file, fsync, rename, directory fsync) and keeps the
// mode of the file it replaces; Write and Edit through a symbolic link that
// stays inside the workspace change the file it names. Glob returns
// workspace-relative paths, newest first (default 1000, at most 10000), and
// supports ** and {a,b}. Grep matches RE2 line by line and skips .git,
// binary files and symlinked directories. run_tests, run_lint and
// run_typecheck detect go (go.mod), rust (Cargo.toml), node (package.json)
// or python (pyproject.toml, setup.py, setup.cfg, requirements.txt, tox.ini)
// from the top of the workspace, in that order, unless language is given.
//
// MultiEdit applies its edits in order to a copy in memory and writes
// nothing unless all apply; it needs a prior Read like Edit. After Write,
// Edit and MultiEdit of a .go file, go/format checks it in process and the
// result says (as lint) if it does not parse or is not gofmt-clean; the
// change is made all the same. LS lists the tree below a directory, nearest
// levels first, at most 1000 entries, with ignore globs; it does not follow
// symbolic links nor descend into .git.
//
// run_tests parses the failing tests out of the whole output as it streams
// (internal/testfailures: go test, cargo test, pytest, and node --test's TAP and
// spec reporters and jest; not vitest or mocha):
// package, test, file, line, message. The last test run is kept for
// last_test_failures, and run_failing_tests runs only its failures again
// (names that are not test names are refused, the others shell-quoted).
//
// # Code tools
//
// change_function_signature, edit_function_body and insert_after_method
// (internal/tools/ast.go) edit one declaration of a Go file named by function or
// method: the new code is parsed alone first, spliced in at the
// declaration's byte offsets, and the whole file gofmt'ed and written
// atomically, with the Read requirement and confinement of Edit.
// search_code (internal/tools/searchcode.go) finds declarations by name: Go through
// go/ast, other languages by their declaration keywords. tests_covering
// (internal/tools/coverage.go) builds a package's test binary with coverage once and
// runs each of its tests alone with a profile. run_script (internal/tools/script.go)
// runs a package.json script, Makefile target or justfile recipe that the
// top of the workspace declares, and nothing else. The commands of both run
// like run_tests: process groups, timeouts, capped output.
//
// # Code navigation
//
// find_definition, find_references and rename_symbol ask a language server
// (gopls for Go) spoken to over stdio by a small LSP client (internal/lsp).
// internal/tools/lsp_server.go runs it: started on the first call, reused, one call at a
// time, each bounded by a timeout; stopped when idle, killed (its whole
// process group) past a memory bound, on a timeout, and at shutdown; a
// server that crashed or was killed is started again by the next call.
// Before each call the server is told which Go files changed on disk.
// Locations outside the workspace are counted, never shown; a rename is
// written to every file or to none (internal/tools/rename.go), through the same
// confinement and atomic writes as Edit.
//
// # Snapshots
//
// snapshot_create, snapshot_list, snapshot_restore and snapshot_diff keep
// checkpoints of the whole workspace (git repository or not) in a git
// directory under the state directory (Config.StateDir, --state-dir), which
// must lie outside the workspace: git runs with --git-dir=<store>
// --work-tree=<workspace>, its own index, no global or system
// configuration, no hooks and no attribute conversions, so the workspace's
// own .git (HEAD, index, refs) is never read or written and the file tools
// cannot reach the store. Snapshots include ignored files and leave out
// .git entries, nested repositories and empty directories. A restore first
// saves the current state as a new snapshot, then makes the workspace the
// snapshot (git read-tree --reset -u): files created since are removed,
// changed and deleted ones come back. The call gate (internal/wire/callgate.go) runs a
// restore, and a snapshot_create, alone: it waits for the calls in flight,
// and the calls after it wait for it, so no tool call sees a half-restored
// workspace and a snapshot holds the workspace between two calls
// (background shells are not tool calls and run on). Every git process runs in a
// process group of its own, killed whole when its call ends or after 10
// minutes. Without git on PATH the snapshot tools answer a tool error.
//
// The read marks that Write and Edit require ("overwriting a file needs a
// prior Read") belong to the sandboxd process, not to one MCP session: the
// sandbox is one agent's, and an agent that reconnects keeps them. A mark
// holds the file's size and modification time: a file changed since it was
// read must be read again. Background shells are the process's too: at most
// 8 run at once, and up to 32 (finished ones forgotten oldest first) can be
// read with BashOutput, which keeps at most 1 MiB of unread output per
// stream and says how much it dropped.
//
// # Processes
//
// Bash and run_* run /bin/bash -c in the workspace, stdin empty, each call
// in a process group of its own. The whole group is killed on timeout (exit
// code 124), on cancellation, when the client's SSE session goes away, on
// shutdown, and also when the command itself exits: nothing a foreground
// command started outlives it (servers and watchers belong in
// run_in_background, whose group lives until it exits or KillShell). A
// process that leaves its group (setsid) cannot be killed with it; its
// output is read for 2 s more at most. Output is stdout and stderr
// interleaved, capped at 100 KiB: the first and last halves are kept, and a
// line in between says how many bytes were elided. A Streamable HTTP client
// that vanishes mid-call does not end its session (the protocol lets it come
// back for the answer): its call runs until its timeout, or until the
// session's idle timeout closes the session.
//
// # Confinement
//
// Every path a file tool (Read, Write, Edit, MultiEdit, Glob, Grep, LS)
// receives goes through one resolver built on os.Root: a relative path is taken from the workspace, an absolute one must
// lie inside it, and `..`, symbolic links (also symlinked parent
// directories, also when one is swapped in while a tool runs) that lead out
// of the tree, absolute symbolic links (even ones that point inside), and
// device files, FIFOs and sockets are refused with a tool error that the
// model can read. Glob and Grep never descend into symlinked directories.
//
// Bash and run_* are not path-confined. With Bash allowed, --allowed-tools
// (the registry's allowedTools) is least privilege, not a security
// boundary: a shell can do anything the file tools refuse. The boundary is
// the pod: its restricted security context, its volumes, and its
// NetworkPolicy.
//
// # Authentication and health
//
// With an auth token file (one token; surrounding whitespace is ignored),
// every MCP request (/sse, /message, /mcp) and /metrics need `Authorization:
// Bearer <token>`, compared in constant time, else 401 (/metrics is the
// claim's business, and every pod of its namespace may reach the sandbox:
// docs/security.md). /healthz and /readyz need no token: the kubelet probes
// them. A request that arrives on
// a loopback address must name a loopback Host, and a request that carries
// an Origin must come from the host it names (or, on loopback, from another
// loopback origin), else 403: DNS rebinding protection.
//
// A warm pool member (--warm-key-file) has no token and no tool list of
// its own: it answers every MCP request 401 until one carries an adoption
// token that verifies against its member key (pkg/claimtoken/warmtoken).
// That request adopts it: from then on it accepts that exact token only,
// and lists and accepts only the tools the token names (those it knows).
// /healthz and /readyz answer before adoption, so the pool counts the
// member as ready; /metrics, like the MCP endpoints, only to the adopting
// token. The lock is kept in memory: a restarted container is
// adopted by the next token that verifies (docs/decisions.md, "Warm
// members: the token is the adoption"). GET /isolation also takes the
// member's evidence token (warmtoken.EvidenceToken, MACed with the member
// key in a domain of its own), with which the operator reads the evidence
// before any adoption; that token opens no other route and adopts nothing
// (docs/isolation.md, "Warm members").
//
// /readyz is 200 once the isolation evidence is gathered, while the
// workspace is a directory sandboxd can create a file in (with --readonly,
// one it can still reach), and 503 once shutdown has begun. /metrics has airlock_sandboxd_tool_calls_total by tool and
// result (ok, error, canceled, protocol_error),
// airlock_sandboxd_tool_call_duration_seconds by tool,
// airlock_sandboxd_secrets_scrubbed_total by kind, the open sessions and SSE
// streams, the running background shells, and the Go and process
// collectors. No label holds a session, a path or an argument: a call of a
// tool that is not served counts as tool "unknown".
//
// # Output hygiene
//
// Every tool result passes one secret scrubber on its way out (internal/scrub):
// private key blocks, JWTs, passwords in URLs, bearer and basic
// Authorization values, AWS, GitHub, GitLab, Slack, Google, Stripe, npm and
// OpenAI/Anthropic-style keys are replaced by [REDACTED:<kind>] in the text
// and the structured result, counted by kind, and never logged. The caps
// keep their bounds and say what they elided; a cut never shows half of a
// token (the token it would split goes with the elided part). Scrubbing is
// hygiene, not a boundary.
//
// # Isolation evidence
//
// As serve starts, before any tool is served, sandboxd gathers what it sees
// of its own isolation (isolation.go, internal/evidence, pkg/isolation,
// docs/isolation.md "Evidence"): the kernel's uname (gVisor told apart by
// it), its uid and gid, effective and permitted capabilities, no_new_privs
// and seccomp mode from /proc/self/status, and four TCP probes run side by
// side, each bounded (1 s): the API server's Service, the node's kubelet
// (AIRLOCK_NODE_IP:10250, set by the operator from status.hostIP),
// 169.254.169.254:80 and the first nameserver of /etc/resolv.conf on port
// 53. /healthz answers meanwhile; /readyz, the MCP endpoints and
// GET /isolation wait for it. The evidence is kept as its canonical
// encoding, never gathered again and never changed: GET /isolation (behind
// the guard, as /record; GET only) answers those bytes, and the initialize
// and server/discover results name their SHA-256 in _meta
// (airlock.dev/isolation-digest). Evidence that cannot be gathered (no
// uname or /proc/self/status) ends sandboxd with the reason: it serves
// nothing without it. The operator judges it (isolation.Judge), once,
// before Bound.
//
// # The operator's stop
//
// POST /stop (with the token, behind the same guard as MCP) is the operator's stop of a pod it
// is deleting (stop.go, pkg/sandboxstop): sandboxd ends everything a shutdown ends, waits for
// every tool call to return and holds the call gate so that none starts again, then, as the
// container's first process (PID 1), kills every other process of the container
// (procgroup.StopNamespace: kill(-1), then each process's pidfd until it has exited) and
// answers 200 {"stopped": true, "killed": n}. Then nothing in the container writes the
// workspace, and the operator deletes the pod at once. Not PID 1, it answers 409 not_init
// (kill(-1) would reach beyond the container) and the pod is left to the kubelet. After a stop
// only the probes (not ready) and /stop answer; sandboxd exits when the kubelet stops it. As
// PID 1, sandboxd makes itself not dumpable, so that no process of the sandbox (the same user)
// can attach to it and answer for it. Anyone with the token may stop the sandbox, its runtime
// and a Bash that reads the token file included: they stop only their own sandbox.
//
// # Shutdown
//
// When Run's context ends: /readyz turns 503, new sessions and commands are
// refused, the SSE streams are closed, every MCP session is ended (which
// cancels the calls in flight), every process group is killed, and only
// then is the HTTP server shut down, all within Config.ShutdownGrace.
package sandboxd
