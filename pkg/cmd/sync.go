package cmd

import (
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	cliflag "k8s.io/component-base/cli/flag"

	"github.com/airlock-dev/airlock/pkg/syncback"
	"github.com/airlock-dev/airlock/pkg/workspace"
)

// SyncOptions are the flags of `airlock sync`, which the sync-back Job runs.
type SyncOptions struct {
	ContentRoot string
	From        string
	To          string
	// RemoveSource removes --from once its copy is in place; RemoveOnly removes it without a copy
	// (a claim with nothing to save). Either needs SandboxesDir, which --from must be a workspace
	// of (workspace.ValidateRemovable).
	RemoveSource bool
	RemoveOnly   bool
	SandboxesDir string
	// KeepVersions is how many previous contents of --to are kept as versions.
	KeepVersions int
}

// NewSyncOptions returns sync's options with their defaults.
func NewSyncOptions() *SyncOptions {
	return &SyncOptions{ContentRoot: "/content", KeepVersions: syncback.KeepVersions}
}

func (o *SyncOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.ContentRoot, "content-root", o.ContentRoot, "Mount path of the workspace content volume. Nothing outside it is read or written.")
	fs.StringVar(&o.From, "from", o.From, "Workspace directory to copy, relative to --content-root (required).")
	fs.StringVar(&o.To, "to", o.To, "Target directory, relative to --content-root, that the copy replaces whole (required, except with --remove-only).")
	fs.BoolVar(&o.RemoveSource, "remove-source", o.RemoveSource, "Remove the workspace --from once its copy is in place (needs --sandboxes-dir).")
	fs.BoolVar(&o.RemoveOnly, "remove-only", o.RemoveOnly, "Copy nothing: only remove the workspace --from (needs --sandboxes-dir; no --to).")
	fs.IntVar(&o.KeepVersions, "keep-versions", o.KeepVersions, "How many previous contents of --to to keep, next to it in .<target>.airlock-versions/ (the oldest beyond are removed); 1 to 1000.")
	fs.StringVar(&o.SandboxesDir, "sandboxes-dir", o.SandboxesDir, "The namespace's workspaces directory (<namespace>/sandboxes), relative to --content-root: with --remove-source or --remove-only, --from must be <sandboxes-dir>/<name> or <sandboxes-dir>/sessions/<name>; nothing else is removed.")
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
	if o.KeepVersions < 1 || o.KeepVersions > workspace.MaxTargetVersions {
		errs = append(errs, invalidFlag("keep-versions", "must be between 1 and %d, not %d", workspace.MaxTargetVersions, o.KeepVersions))
	}
	fromErr := workspace.ValidatePath(o.From)
	if fromErr != nil {
		errs = append(errs, invalidFlag("from", "%v", fromErr))
	}
	switch {
	case o.RemoveOnly && o.RemoveSource:
		errs = append(errs, invalidFlag("remove-only", "is not allowed with --remove-source"))
	case o.RemoveOnly && o.To != "":
		errs = append(errs, invalidFlag("to", "is not allowed with --remove-only, which copies nothing"))
	case !o.RemoveOnly:
		toErr := workspace.ValidatePath(o.To)
		if toErr != nil {
			errs = append(errs, invalidFlag("to", "%v", toErr))
		}
		if fromErr == nil && toErr == nil && workspace.Overlaps(o.From, o.To) {
			errs = append(errs, invalidFlag("to", "must not be --from, nor inside it, nor contain it (--from=%s)", o.From))
		}
	}
	switch {
	case o.RemoveOnly || o.RemoveSource:
		sdErr := workspace.ValidateSandboxesDir(o.SandboxesDir)
		if sdErr != nil {
			errs = append(errs, invalidFlag("sandboxes-dir", "%v (needed by --remove-source and --remove-only)", sdErr))
		}
		if fromErr == nil && sdErr == nil {
			if err := workspace.ValidateRemovable(o.From, o.SandboxesDir); err != nil {
				errs = append(errs, invalidFlag("from", "cannot be removed: %v", err))
			}
		}
	case o.SandboxesDir != "":
		errs = append(errs, invalidFlag("sandboxes-dir", "is used only with --remove-source or --remove-only"))
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
skipped.

With --remove-source the workspace is removed once its copy is in place; with --remove-only it
is removed without a copy. Only a workspace of --sandboxes-dir (<namespace>/sandboxes) is ever
removed: <sandboxes-dir>/<name> or <sandboxes-dir>/sessions/<name>.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if errs := o.Validate(); len(errs) > 0 {
				return utilerrors.NewAggregate(errs)
			}
			cliflag.PrintFlags(cmd.Flags())
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			switch {
			case o.RemoveOnly:
				return syncback.Remove(ctx, o.ContentRoot, o.SandboxesDir, o.From)
			case o.RemoveSource:
				return syncback.CopyKeepingAndRemove(ctx, o.ContentRoot, o.SandboxesDir, o.From, o.To, o.KeepVersions)
			}
			return syncback.CopyKeeping(ctx, o.ContentRoot, o.From, o.To, o.KeepVersions)
		},
	}
	fss := newNamedFlagSets()
	o.AddFlags(fss.FlagSet("sync"))
	addLogsFlags(fss.FlagSet("logs"))
	setFlags(cmd, fss)
	return cmd
}
