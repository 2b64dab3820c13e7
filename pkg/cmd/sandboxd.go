package cmd

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	cliflag "k8s.io/component-base/cli/flag"

	"github.com/airlock-dev/airlock/pkg/claimtoken/warmtoken"
	"github.com/airlock-dev/airlock/pkg/sandboxd"
	"github.com/airlock-dev/airlock/pkg/sandboxflags"
	"github.com/airlock-dev/airlock/pkg/toolnames"
)

// SandboxdOptions are the flags of `airlock sandboxd` (SPEC section 6).
type SandboxdOptions struct {
	Listen        string
	Workspace     string
	ReadOnly      bool
	AllowedTools  []string
	AuthTokenFile string
	WarmKeyFile   string
	StateDir      string
	ShutdownGrace time.Duration
}

// NewSandboxdOptions returns sandboxd's options with their defaults.
func NewSandboxdOptions() *SandboxdOptions {
	return &SandboxdOptions{
		Listen:        ":8080",
		Workspace:     "/workspace",
		ShutdownGrace: 10 * time.Second,
	}
}

func (o *SandboxdOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Listen, sandboxflags.Listen, o.Listen, "Address (host:port) of MCP (GET /sse, POST /message, POST /mcp), /healthz, /readyz and /metrics.")
	fs.StringVar(&o.Workspace, sandboxflags.Workspace, o.Workspace, "Directory the tools work in; every tool path is resolved inside it. Must exist.")
	fs.BoolVar(&o.ReadOnly, sandboxflags.ReadOnly, o.ReadOnly, "Serve only the tools that change nothing in the workspace.")
	fs.StringSliceVar(&o.AllowedTools, sandboxflags.AllowedTools, o.AllowedTools, "Tools to list and accept (comma list of "+strings.Join(toolnames.All(), ", ")+"). Omitted: all of them; given, it must name at least one. Others are neither listed nor callable.")
	fs.StringVar(&o.AuthTokenFile, sandboxflags.AuthTokenFile, o.AuthTokenFile, "File holding the bearer token every MCP request must carry. Empty: no token is asked for.")
	fs.StringVar(&o.WarmKeyFile, sandboxflags.WarmKeyFile, o.WarmKeyFile, "File holding this warm pool member's key (base64url, as the member's Secret holds it). "+
		"No MCP request is served until one carries an adoption token MACed with this key; the first such token adopts the member, which then accepts that token only and serves the tools it names. "+
		"Excludes --auth-token-file, --allowed-tools and --readonly, which the token replaces.")
	fs.StringVar(&o.StateDir, sandboxflags.StateDir, o.StateDir, "Directory for sandboxd's own state (the snapshot store), outside the workspace. Empty: $XDG_CACHE_HOME or $HOME/.cache, + /airlock-sandboxd (else $TMPDIR/airlock-sandboxd-<uid>).")
	fs.DurationVar(&o.ShutdownGrace, sandboxflags.ShutdownGrace, o.ShutdownGrace, "Time given to streams and running tool calls to end on SIGTERM before they are cut (> 0).")
	// The operator's flags (what the sandbox may do, and where) are given once: a second
	// occurrence is refused, not appended to the first (a StringSlice would) nor taken over it,
	// so that no arg of a class after the operator's can widen or unset them.
	for _, name := range sandboxflags.Operator() {
		if f := fs.Lookup(name); f != nil {
			f.Value = &onceValue{Value: f.Value, name: name}
		}
	}
}

// onceValue is a flag's value that may be set once.
type onceValue struct {
	pflag.Value
	name string
	set  bool
}

func (v *onceValue) Set(s string) error {
	if v.set {
		return fmt.Errorf("--%s is given more than once: it is set once, by the operator, and never repeated or overridden", v.name)
	}
	v.set = true
	return v.Value.Set(s)
}

// Validate returns one error for each invalid flag value.
func (o *SandboxdOptions) Validate() []error {
	var errs []error
	if err := validateBindAddress(o.Listen, false); err != nil {
		errs = append(errs, invalidFlag("listen", "%v", err))
	}
	if o.Workspace == "" {
		errs = append(errs, invalidFlag("workspace", "must be set"))
	} else if fi, err := os.Stat(o.Workspace); err != nil {
		errs = append(errs, invalidFlag("workspace", "%v", err))
	} else if !fi.IsDir() {
		errs = append(errs, invalidFlag("workspace", "%s is not a directory", o.Workspace))
	}
	// Omitted, the flag serves every tool (sandboxd run by hand); given, it must name some: an empty
	// list (`--allowed-tools=`) is a mistake, and it must never widen to everything.
	if o.AllowedTools != nil && len(o.AllowedTools) == 0 {
		errs = append(errs, invalidFlag("allowed-tools", "names no tool; omit the flag to serve every tool"))
	}
	if unknown := unknownTools(o.AllowedTools); len(unknown) > 0 {
		errs = append(errs, invalidFlag("allowed-tools", "unknown %s %s (known: %s)",
			plural(len(unknown), "tool", "tools"), strings.Join(unknown, ", "), strings.Join(toolnames.All(), ", ")))
	}
	if o.AuthTokenFile != "" {
		if err := checkReadableFile(o.AuthTokenFile); err != nil {
			errs = append(errs, invalidFlag("auth-token-file", "%v", err))
		}
	}
	if o.WarmKeyFile != "" {
		errs = append(errs, o.validateWarm()...)
	}
	if o.StateDir != "" && o.Workspace != "" {
		if within(o.StateDir, o.Workspace) {
			errs = append(errs, invalidFlag("state-dir", "%s is inside the workspace %s: the snapshot store must be out of the file tools' reach", o.StateDir, o.Workspace))
		}
	}
	if o.ShutdownGrace <= 0 {
		errs = append(errs, invalidFlag("shutdown-grace", "must be greater than zero"))
	}
	return errs
}

// validateWarm checks --warm-key-file: the flags its adoption token replaces are refused beside
// it (warmExclusions), and the key file must hold a member key.
func (o *SandboxdOptions) validateWarm() []error {
	errs := o.warmExclusions()
	if err := checkReadableFile(o.WarmKeyFile); err != nil {
		return append(errs, invalidFlag("warm-key-file", "%v", err))
	}
	data, err := os.ReadFile(o.WarmKeyFile)
	if err == nil {
		_, err = warmtoken.DecodeMemberKey(string(data))
	}
	if err != nil {
		errs = append(errs, invalidFlag("warm-key-file", "%s: %v", o.WarmKeyFile, err))
	}
	return errs
}

// warmExclusions are the errors of the flags given beside --warm-key-file: the adoption token gives
// the member its token and its tools, so the flags that would give them are refused.
func (o *SandboxdOptions) warmExclusions() []error {
	var errs []error
	if o.AuthTokenFile != "" {
		errs = append(errs, invalidFlag("warm-key-file", "excludes --auth-token-file: a warm member's token is its adoption token"))
	}
	if o.AllowedTools != nil {
		errs = append(errs, invalidFlag("warm-key-file", "excludes --allowed-tools: a warm member serves the tools its adoption token names"))
	}
	if o.ReadOnly {
		errs = append(errs, invalidFlag("warm-key-file", "excludes --readonly: a warm member serves the tools its adoption token names"))
	}
	return errs
}

// Config returns sandboxd's configuration. Call it after Validate.
func (o *SandboxdOptions) Config() sandboxd.Config {
	return sandboxd.Config{
		Listen:        o.Listen,
		Workspace:     o.Workspace,
		ReadOnly:      o.ReadOnly,
		AllowedTools:  slices.Clone(o.AllowedTools),
		AuthTokenFile: o.AuthTokenFile,
		WarmKeyFile:   o.WarmKeyFile,
		StateDir:      o.StateDir,
		ShutdownGrace: o.ShutdownGrace,
	}
}

// unknownTools returns, quoted, the names that are not sandboxd tools. The one list of tool names
// is toolnames.All (the names of SPEC section 6, also the v1alpha1.ToolName enum).
func unknownTools(names []string) []string {
	known := toolnames.All()
	var unknown []string
	for _, n := range names {
		if !slices.Contains(known, n) {
			unknown = append(unknown, fmt.Sprintf("%q", n))
		}
	}
	return unknown
}

// within reports whether the path p is base or lies below it, lexically
// (sandboxd also checks with symbolic links evaluated).
func within(p, base string) bool {
	ap, err1 := filepath.Abs(p)
	ab, err2 := filepath.Abs(base)
	if err1 != nil || err2 != nil {
		return false
	}
	rel, err := filepath.Rel(ab, ap)
	return err == nil && (rel == "." || filepath.IsLocal(rel))
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func newSandboxdCommand(o *SandboxdOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sandboxd",
		Short: "Serve a sandbox's file tools and shell over MCP (runs inside the sandbox pod)",
		Long: `Serve the sandbox's tools over MCP: HTTP+SSE (GET /sse, POST /message) and streamable HTTP
(POST /mcp) on one listener, with /healthz, /readyz and /metrics beside them. Before it serves
any tool it gathers its isolation evidence (kernel, identity, privileges, probes that must fail),
served read-only at GET /isolation behind the token (docs/isolation.md). With --warm-key-file
it is a warm pool member: it serves nobody until a request carries an adoption token MACed with
its key, and then only that token and the tools it names.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if errs := o.Validate(); len(errs) > 0 {
				return utilerrors.NewAggregate(errs)
			}
			cliflag.PrintFlags(cmd.Flags())
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			return sandboxd.Run(ctx, o.Config())
		},
	}
	fss := newNamedFlagSets()
	o.AddFlags(fss.FlagSet("sandboxd"))
	addLogsFlags(fss.FlagSet("logs"))
	setFlags(cmd, fss)
	return cmd
}
