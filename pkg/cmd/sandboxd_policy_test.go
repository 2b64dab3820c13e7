package cmd

import (
	"context"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/sandboxflags"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
	"github.com/airlock-dev/airlock/pkg/sandboxpod/sandboxpodtest"
)

// parseSandboxd runs the airlock command tree on args as the image's entrypoint does, up to
// sandboxd's flags: it returns sandboxd's options and whether sandboxd would serve (it parsed,
// took no positional arg, was not asked for its help, and gave a warm key no flag its adoption
// token replaces), or the parse error. The checks of Validate that read files are not run.
func parseSandboxd(t *testing.T, args []string) (*SandboxdOptions, bool, error) {
	t.Helper()
	root := NewAirlockCommand()
	for _, c := range root.Commands() {
		if c.Name() == sandboxflags.Subcommand {
			root.RemoveCommand(c)
		}
	}
	o := NewSandboxdOptions()
	sub := newSandboxdCommand(o)
	serves := false
	sub.RunE = func(*cobra.Command, []string) error { serves = true; return nil } // no Validate: it reads the files
	root.AddCommand(sub)
	root.SetArgs(args)
	root.SetOut(io.Discard)
	root.SetErr(io.Discard)
	err := root.ExecuteContext(context.Background())
	if serves && o.WarmKeyFile != "" && len(o.warmExclusions()) > 0 {
		serves = false
	}
	return o, serves, err
}

func toolNames(tools []airlockv1alpha1.ToolName) []string {
	out := make([]string, len(tools))
	for i, t := range tools {
		out[i] = string(t)
	}
	return out
}

// TestBuiltArgsParseToTheRecord: for every class shape (sandboxpodtest.ClassShapes, the two of
// issue 23 among them), the args the operator builds, parsed by sandboxd's own command, either do
// not start sandboxd or give exactly the policy of the frozen record: its tools, the claim's
// token file, the workspace volume's path, never read-only-unset nor a warm key; a warm member
// gets its key and nothing else. This holds for the shapes admission refuses too, as if one had
// got through; the shapes it builds must start.
func TestBuiltArgsParseToTheRecord(t *testing.T) {
	entry := &sandboxpodtest.Registry("tools", "").Spec.Sandboxes[0]
	for _, shape := range sandboxpodtest.ClassShapes() {
		t.Run(shape.Name, func(t *testing.T) {
			record := sandboxpod.Freeze(shape.Apply(), entry)
			o, serves, err := parseSandboxd(t, sandboxpod.ClaimArgs(record))
			if shape.Refused == "" && (err != nil || !serves) {
				t.Fatalf("a class the operator builds: sandboxd does not start (serves %v): %v", serves, err)
			}
			if err == nil && serves {
				if !slices.Equal(o.AllowedTools, toolNames(record.AllowedTools)) || o.AuthTokenFile != sandboxpod.TokenFile ||
					o.Workspace != record.WorkspacePath || o.ReadOnly || o.WarmKeyFile != "" {
					t.Errorf("claim's sandboxd: tools %q token %q workspace %q readonly %v warm key %q; record: tools %q workspace %q",
						o.AllowedTools, o.AuthTokenFile, o.Workspace, o.ReadOnly, o.WarmKeyFile, record.AllowedTools, record.WorkspacePath)
				}
			}
			o, serves, err = parseSandboxd(t, sandboxpod.MemberArgs(record))
			if shape.Refused == "" && (err != nil || !serves) {
				t.Fatalf("a warm member: sandboxd does not start (serves %v): %v", serves, err)
			}
			if err == nil && serves {
				if o.AllowedTools != nil || o.AuthTokenFile != "" || o.Workspace != record.WorkspacePath || o.ReadOnly || o.WarmKeyFile != sandboxpod.MemberKeyFile {
					t.Errorf("member's sandboxd: tools %q token %q workspace %q readonly %v warm key %q", o.AllowedTools, o.AuthTokenFile, o.Workspace, o.ReadOnly, o.WarmKeyFile)
				}
			}
		})
	}
}

// TestOperatorFlagsOnce: sandboxd refuses an operator flag given twice, in any spelling, naming
// the flag; a class flag may be given again (the last one counts, as pflag does).
func TestOperatorFlagsOnce(t *testing.T) {
	for _, args := range [][]string{
		{"--allowed-tools=Read", "--allowed-tools=Bash"},
		{"--allowed-tools=Read", "--allowed_tools=Bash"},
		{"--auth-token-file=/a", "--auth-token-file=/b"},
		{"--warm-key-file=/a", "--warm-key-file", "/b"},
		{"--workspace=/w", "--workspace=/"},
		{"--readonly", "--readonly=false"},
	} {
		_, _, err := parseSandboxd(t, append([]string{"sandboxd"}, args...))
		name, _, _ := strings.Cut(strings.TrimLeft(args[0], "-"), "=")
		if err == nil || !strings.Contains(err.Error(), "--"+name+" is given more than once") {
			t.Errorf("%q: error %v, want one naming --%s given more than once", args, err, name)
		}
	}
	o, serves, err := parseSandboxd(t, []string{"sandboxd", "--listen=:1", "--listen=:2"})
	if err != nil || !serves || o.Listen != ":2" {
		t.Errorf("a class flag twice: listen %q serves %v err %v", o.Listen, serves, err)
	}
}

// TestSandboxdFlagsDecided: every flag of sandboxd's own section is the operator's or one a class
// may set (a flag sandboxd grows must be decided on), and every operator flag exists.
func TestSandboxdFlagsDecided(t *testing.T) {
	fss := newNamedFlagSets()
	NewSandboxdOptions().AddFlags(fss.FlagSet("sandboxd"))
	decided := append(sandboxflags.Operator(), sandboxflags.ClassSettable()...)
	fss.FlagSet("sandboxd").VisitAll(func(f *pflag.Flag) {
		if !slices.Contains(decided, f.Name) {
			t.Errorf("--%s is neither the operator's nor settable by a class (pkg/sandboxflags)", f.Name)
		}
	})
	_, sub, _ := parseSandboxdCommand()
	for _, name := range sandboxflags.Operator() {
		if sub.Flags().Lookup(name) == nil {
			t.Errorf("the operator's --%s is not a flag of sandboxd", name)
		}
	}
}

// parseSandboxdCommand returns the sandboxd command of the command tree, with its flags.
func parseSandboxdCommand() (*cobra.Command, *cobra.Command, error) {
	root := NewAirlockCommand()
	sub, _, err := root.Find([]string{sandboxflags.Subcommand})
	return root, sub, err
}
