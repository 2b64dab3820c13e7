// Package wire is sandboxd's MCP wire: what must answer byte for byte as
// the official MCP Go SDK and net/http do, tested against them. It holds the
// two transports on one listener (HTTP+SSE with r3labs/sse streams,
// transport_sse.go; Streamable HTTP on /mcp through the SDK's handlers,
// transport_streamable.go, with the stateless 2026-07-28 revision), the
// direct path that answers a plain tools/call without the SDK
// (directcall.go, directcall_streamable.go), the kept connections that serve
// the next direct calls of an HTTP/1.1 connection (keepalive.go,
// keepalive_wire.go), the checks of a POSTed message (protocol.go,
// message.go), the encoding of a tool's result (resultjson.go), the HTTP
// guard (token, warm adoption, DNS rebinding: httpguard.go), the tasks of
// 2026-07-28 (tasks.go, tasks_listen.go, tasks_wire.go) and the call gate
// (callgate.go).
//
// It calls the tools through internal/toolcall's Set and imports neither
// internal/tools nor pkg/sandboxd; pkg/sandboxd composes it with the tools
// (compose.go is what the composition reaches, observe.go what its tests
// read). The package doc of pkg/sandboxd says what the wire answers.
//
// Its tests run the wire as pkg/sandboxd composes it, on a loopback port,
// over stand-ins for three tools (Read, LS, Bash: server_test.go's harness),
// against the SDK's and net/http's answers: the transports' framing and
// sessions, the direct path, kept connections and tasks. The tests that need
// the real tools, the middleware's scrubber and metrics, or the whole server
// are pkg/sandboxd's. What the tests of both share (a raw client, files,
// processes, fake secrets) is internal/sandboxdtest, imported by tests only.
package wire
