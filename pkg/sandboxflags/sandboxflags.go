// Package sandboxflags names the flags of `airlock sandboxd` and says which of them are the
// operator's alone (SPEC sections 2 and 6, docs/decisions.md "A class cannot change what the
// operator decides"). The operator passes those to every sandbox it builds: the tools of the
// claim's frozen record, its token, a warm member's key, the workspace. A SandboxClass's args may
// set the others only: the CRD's rules and the admission check (sandboxpod.ClassConflict) refuse
// an operator flag in a class's args, and sandboxd refuses an operator flag given twice.
//
// Every flag sandboxd defines is in Operator or ClassSettable: a test of sandboxd's flag set
// fails on a flag that is in neither, so that a flag sandboxd grows is decided on, not let
// through by default.
//
// It imports nothing, so that the API side and sandboxd can both depend on it.
package sandboxflags

// Subcommand is airlock's subcommand that serves a sandbox: a class's args begin with it.
const Subcommand = "sandboxd"

// The flags of sandboxd.
const (
	Listen        = "listen"
	Workspace     = "workspace"
	ReadOnly      = "readonly"
	AllowedTools  = "allowed-tools"
	AuthTokenFile = "auth-token-file"
	WarmKeyFile   = "warm-key-file"
	StateDir      = "state-dir"
	ShutdownGrace = "shutdown-grace"
	// Help is cobra's: given, sandboxd prints its usage and exits instead of serving.
	Help = "help"
)

// Operator are the flags only the operator passes: what the sandbox may do (its tools, whether
// it writes, which token it asks for, a warm member's key) and where (the workspace, always the
// workspace volume's mountPath), and help, which would stop it serving at all.
func Operator() []string {
	return []string{AllowedTools, AuthTokenFile, WarmKeyFile, Workspace, ReadOnly, Help}
}

// ClassSettable are the sandboxd flags a class's args may set: where it listens (the class's
// ports say where the address is), its own state directory (which sandboxd keeps out of the
// workspace), the shutdown grace, and the logging flags (pkg/cmd's "logs" set, not named here).
func ClassSettable() []string {
	return []string{Listen, StateDir, ShutdownGrace}
}
