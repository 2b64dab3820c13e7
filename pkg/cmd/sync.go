package cmd

import (
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	cliflag "k8s.io/component-base/cli/flag"

	"github.com/airlock-dev/airlock/pkg/syncback"
)

// SyncOptions are the flags of `airlock sync`, which the sync-back Job runs.
type SyncOptions struct {
	ContentRoot string
	From        string
	To          string
}

// NewSyncOptions returns sync's options with their defaults.
func NewSyncOptions() *SyncOptions {
	return &SyncOptions{ContentRoot: "/content"}
}

func (o *SyncOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.ContentRoot, "content-root", o.ContentRoot, "Mount path of the workspace content volume. Nothing outside it is read or written.")
	fs.StringVar(&o.From, "from", o.From, "Workspace directory to copy, relative to --content-root (required).")
	fs.StringVar(&o.To, "to", o.To, "Target directory, relative to --content-root, that the copy replaces whole (required).")
}

// Validate returns one error for each invalid flag value.
func (o *SyncOptions) Validate() []error {
	var errs []error
	if o.ContentRoot == "" {
		errs = append(errs, invalidFlag("content-root", "must be set"))
	} else if fi, err := os.Stat(o.ContentRoot); err != nil {
		errs = append(errs, invalidFlag("content-root", "%v", err))
	} else if !fi.IsDir() {
		errs = append(errs, invalidFlag("content-root", "%s is not a directory", o.ContentRoot))
	}
	fromErr, toErr := syncback.ValidatePath(o.From), syncback.ValidatePath(o.To)
	if fromErr != nil {
		errs = append(errs, invalidFlag("from", "%v", fromErr))
	}
	if toErr != nil {
		errs = append(errs, invalidFlag("to", "%v", toErr))
	}
	if fromErr == nil && toErr == nil && syncback.Overlaps(o.From, o.To) {
		errs = append(errs, invalidFlag("to", "must not be --from, nor inside it, nor contain it (--from=%s)", o.From))
	}
	return errs
}

func newSyncCommand(o *SyncOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sync",
		Short: "Copy a finished sandbox's workspace into its target (the sync-back Job)",
		Long: `Copy the workspace directory --from into the target directory --to, both inside the workspace
content volume mounted at --content-root. The copy is staged next to the target and renamed
into place, so the target holds the old tree or the new one, never a mix. Symbolic links are
copied as links only when they resolve inside the workspace; devices, sockets and pipes are
skipped.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if errs := o.Validate(); len(errs) > 0 {
				return utilerrors.NewAggregate(errs)
			}
			cliflag.PrintFlags(cmd.Flags())
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			return syncback.Copy(ctx, o.ContentRoot, o.From, o.To)
		},
	}
	fss := newNamedFlagSets()
	o.AddFlags(fss.FlagSet("sync"))
	addLogsFlags(fss.FlagSet("logs"))
	setFlags(cmd, fss)
	return cmd
}
