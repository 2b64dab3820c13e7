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
	// StateDir holds sandboxd's own state, out of the file tools' reach: the
	// snapshot store. Empty: the user's cache directory ($XDG_CACHE_HOME or
	// $HOME/.cache) + /airlock-sandboxd, or, when that is inside the
	// workspace or unknown, $TMPDIR/airlock-sandboxd-<uid>. It must not lie
	// inside the workspace.
	StateDir string
	// ShutdownGrace bounds the time given to open streams and running tool calls on shutdown.
	ShutdownGrace time.Duration
}
