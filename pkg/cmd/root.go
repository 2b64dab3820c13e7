// Package cmd is the `airlock` command tree: operator, egress, sandboxd, sync and version. Each command
// has an options struct whose AddFlags binds its flags and whose Validate returns every invalid
// value, one error per flag, before anything runs.
package cmd

import (
	"context"
	"errors"
	goflag "flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/logs/klogflags"
	"k8s.io/klog/v2"
)

// NewAirlockCommand returns the root `airlock` command.
func NewAirlockCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "airlock",
		Short: "Per-session codegen sandboxes for AI agent runtimes on Kubernetes",
		Long: `airlock gives AI agent runtimes on Kubernetes per-session codegen sandboxes: a pod with
file tools and a shell, served over MCP, that by default reaches nothing on the network, and
whose work leaves only through an operator-run sync-back.`,
		// Run prints errors, and usage only for flag errors.
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	cmd.CompletionOptions.DisableDefaultCmd = true
	cmd.AddCommand(commands()...)
	cmd.SetGlobalNormalizationFunc(cliflag.WordSepNormalizeFunc)
	cmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return &flagParseError{cmd: c, err: err}
	})
	return cmd
}

// Run executes command and returns the process's exit code. Errors go to the command's error
// output, one line each ("Error: ..."); the usage is printed too, first, when the error is one of
// parsing the flags.
func Run(command *cobra.Command) int {
	defer klog.Flush()
	err := command.Execute()
	if err == nil {
		return 0
	}
	printError(command.ErrOrStderr(), err)
	return 1
}

// flagParseError is an error of parsing the flags of cmd.
type flagParseError struct {
	cmd *cobra.Command
	err error
}

func (e *flagParseError) Error() string { return e.err.Error() }
func (e *flagParseError) Unwrap() error { return e.err }

func printError(w io.Writer, err error) {
	if fpe := (*flagParseError)(nil); errors.As(err, &fpe) {
		fmt.Fprintln(w, fpe.cmd.UsageString())
	}
	if agg := utilerrors.Aggregate(nil); errors.As(err, &agg) {
		for _, e := range utilerrors.Flatten(agg).Errors() {
			fmt.Fprintf(w, "Error: %v\n", e)
		}
		return
	}
	fmt.Fprintf(w, "Error: %v\n", err)
	if strings.HasPrefix(err.Error(), "unknown command ") {
		fmt.Fprintln(w, `Run "airlock --help" for usage.`)
	}
}

// noArgs rejects positional arguments.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("%q takes no arguments, got %q", cmd.CommandPath(), args)
	}
	return nil
}

// invalidFlag is the one line that reports an invalid value of --name.
func invalidFlag(name, format string, args ...any) error {
	return fmt.Errorf("invalid value for --%s: %s", name, fmt.Sprintf(format, args...))
}

// newNamedFlagSets returns an empty set of flag sections.
func newNamedFlagSets() cliflag.NamedFlagSets {
	return cliflag.NamedFlagSets{NormalizeNameFunc: cliflag.WordSepNormalizeFunc}
}

// addLogsFlags adds the klog flags (-v, --vmodule) through a Go flag set of their own, so that
// nothing is registered on the process-wide flag.CommandLine.
func addLogsFlags(fs *pflag.FlagSet) {
	goFS := goflag.NewFlagSet("klog", goflag.ContinueOnError)
	klogflags.Init(goFS)
	fs.AddGoFlagSet(goFS)
}

// setFlags adds every section's flags, then a "global" section with --help, to cmd, and prints
// them by section in --help and usage.
func setFlags(cmd *cobra.Command, fss cliflag.NamedFlagSets) {
	fss.FlagSet("global").BoolP("help", "h", false, "help for "+cmd.Name())
	fs := cmd.Flags()
	for _, name := range fss.Order {
		fs.AddFlagSet(fss.FlagSets[name])
	}
	cliflag.SetUsageAndHelpFunc(cmd, fss, terminalWidth(cmd.OutOrStdout()))
}

// terminalWidth is the width to wrap help at: the terminal's, or 0 (no wrapping) for a pipe.
func terminalWidth(w io.Writer) int {
	f, ok := w.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return 0
	}
	width, _, err := term.GetSize(int(f.Fd()))
	if err != nil {
		return 0
	}
	return width
}

// signalContext is cancelled on the first SIGTERM or SIGINT. A second signal kills the process
// at once, as the default handling is restored after the first.
func signalContext(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, stop := signal.NotifyContext(parent, syscall.SIGTERM, os.Interrupt)
	context.AfterFunc(ctx, stop)
	return ctx, stop
}
