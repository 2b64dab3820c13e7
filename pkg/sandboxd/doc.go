// Package sandboxd is the MCP server that runs inside a sandbox pod
// (`airlock sandboxd`): the codegen tools (Read, Write, Edit, Glob, Grep,
// Bash, BashOutput, KillShell, run_tests, run_lint, run_typecheck) served
// over MCP on one HTTP listener, with /healthz, /readyz and /metrics beside
// them.
//
// # Transports
//
// Two transports share the listener:
//
//   - the HTTP+SSE transport of protocol version 2024-11-05: GET /sse opens a
//     session whose first event is `endpoint` (a relative
//     /message?sessionId=<id>); POST /message?sessionId=<id> is answered 202
//     and every reply is an `event: message` on that session's own stream.
//     The streams are github.com/r3labs/sse/v2 streams, one per session, with
//     AutoReplay off (an old event is never sent again), keepalive SSE
//     comments, and a stream that is removed as soon as its client goes.
//   - the Streamable HTTP transport (2025-03-26 and later) on /mcp, served by
//     the official MCP Go SDK's handler.
//
// The legacy SSE transport is a deliberate choice, not an oversight: the MCP
// specification deprecated it in 2025-03-26, but agent runtimes and MCP
// clients in use today still speak it (several only speak it), and an agent
// must be able to reach its sandbox with whatever client it has. Both
// transports feed the same protocol layer (the SDK's mcp.Server) and the
// same tools.
//
// Protocol versions 2024-11-05, 2025-03-26, 2025-06-18 and 2025-11-25 are
// negotiated. A client that probes a newer protocol first (for example with
// server/discover) gets a JSON-RPC error at once and falls back to
// initialize; unknown methods get -32601, malformed JSON -32700 and a
// message that is not a JSON-RPC request -32600 (HTTP 400), and a message
// larger than MaxMessageBytes is refused with HTTP 413.
//
// # Confinement
//
// Every path a file tool receives goes through one resolver built on
// os.Root: a relative path is taken from the workspace, an absolute one must
// lie inside it, and `..`, symbolic links (also symlinked parent
// directories, also when one is swapped in while a tool runs) that lead out
// of the tree, absolute symbolic links, and device files, FIFOs and sockets
// are refused with a tool error that the model can read. Glob and Grep never
// descend into symlinked directories.
//
// Bash and run_* are not path-confined: they run /bin/bash in the workspace,
// each call in its own process group, which is killed whole on timeout,
// on notifications/cancelled, when the client's session goes away, and on
// shutdown. With Bash allowed, --allowed-tools (the registry's allowedTools)
// is least privilege, not a security boundary: a shell can do anything the
// file tools refuse. The boundary is the pod: its restricted security
// context, its volumes, and its NetworkPolicy.
//
// # State
//
// The read marks that Write and Edit require ("overwriting a file needs a
// prior Read") belong to the sandboxd process, not to one MCP session: the
// sandbox is one agent's, and an agent that reconnects keeps them. A mark
// holds the file's size and modification time; a file changed since it was
// read must be read again before it is overwritten or edited.
//
// # Authentication
//
// With an auth token file, every MCP request (/sse, /message, /mcp) needs
// `Authorization: Bearer <token>` (compared in constant time), else 401.
// /healthz, /readyz and /metrics need no token: the kubelet probes them.
// Requests that arrive on a loopback address must name a loopback Host, and
// a request that carries an Origin must come from the same host (DNS
// rebinding protection), else 403.
package sandboxd
