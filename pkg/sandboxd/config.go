package sandboxd

import "time"

// Config is what `airlock sandboxd` runs with; pkg/cmd builds it from the command's flags.
type Config struct {
	// Listen is the address (host:port) of the one listener for MCP, /healthz, /readyz and /metrics.
	Listen string
	// Workspace is the directory every tool path is resolved in.
	Workspace string
	// ReadOnly registers only the tools that do not modify the workspace.
	ReadOnly bool
	// AllowedTools are the only tools listed and callable; empty allows all.
	AllowedTools []string
	// AuthTokenFile holds the bearer token MCP requests must carry; empty accepts any request.
	AuthTokenFile string
	// WarmKeyFile makes sandboxd a warm pool member: the file holds the member's key (the text
	// form of warmtoken.EncodeMemberKey). No MCP request is served until one carries an adoption
	// token MACed with that key; the first such token adopts the member, which then accepts
	// that token only and serves the tools it names. It excludes AuthTokenFile, AllowedTools and
	// ReadOnly, which the token replaces.
	WarmKeyFile string
	// StateDir holds sandboxd's own state, out of the file tools' reach: the
	// snapshot store. Empty: the user's cache directory ($XDG_CACHE_HOME or
	// $HOME/.cache) + /airlock-sandboxd, or, when that is inside the
	// workspace or unknown, $TMPDIR/airlock-sandboxd-<uid>. It must not lie
	// inside the workspace.
	StateDir string
	// ShutdownGrace bounds the time given to open streams and running tool calls on shutdown.
	ShutdownGrace time.Duration
}
