package syncback

// Removing a workspace once its work is saved (docs/decisions.md, "Workspaces are collected").
//
// Only a workspace the operator made may be removed: a directory `<ns>/sandboxes/<name>` or
// `<ns>/sandboxes/sessions/<name>` of the content volume (ValidateRemovable). A mount role's
// directory is the runtime's, never removed; the operator does not ask for it, and it is refused
// here unless it has that shape.
//
// Removal first renames the workspace, in its own parent, to ".<name>.airlock-removing-<random>"
// (one atomic step: from then on the workspace is gone), then removes that tree. A run killed or
// failing in between leaves the renamed tree, never a half-removed workspace: the next run removes
// it, and a sync-back retried after the rename finds no workspace and nothing to copy, rather than
// half a workspace that it would copy over the target. Nothing is followed: the path's components
// must be real directories (no symbolic links), everything is resolved through an os.Root on the
// content root, and links inside the tree are removed as links.

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/klog/v2"

	"github.com/airlock-dev/airlock/pkg/workspace"
)

// removingInfix marks a workspace being removed: ".<name>" + removingInfix + "<random>".
const removingInfix = ".airlock-removing-"

// Remove removes the workspace dir (relative to contentRoot; see ValidateRemovable), and what an
// earlier, interrupted removal of it left. A workspace that does not exist is not an error.
func Remove(ctx context.Context, contentRoot, sandboxesDir, dir string) error {
	if err := workspace.ValidateRemovable(dir, sandboxesDir); err != nil {
		return fmt.Errorf("workspace %w", err)
	}
	root, err := os.OpenRoot(contentRoot)
	if err != nil {
		return fmt.Errorf("opening the content root: %w", err)
	}
	defer root.Close()
	return remove(ctx, root, dir)
}

// CopyAndRemove copies the workspace from into to (see Copy) and then removes it (see Remove):
// the workspace is removed only once the copy is in place. A workspace that does not exist any
// more has nothing to copy: an earlier run copied it and began its removal (which this run
// finishes), or it was never made (its sandbox never started); the target is left as it is.
func CopyAndRemove(ctx context.Context, contentRoot, sandboxesDir, from, to string) error {
	return CopyKeepingAndRemove(ctx, contentRoot, sandboxesDir, from, to, KeepVersions)
}

// CopyKeepingAndRemove is CopyAndRemove keeping keep previous contents of the target.
func CopyKeepingAndRemove(ctx context.Context, contentRoot, sandboxesDir, from, to string, keep int) error {
	if err := workspace.ValidateRemovable(from, sandboxesDir); err != nil {
		return fmt.Errorf("source %w", err)
	}
	root, err := os.OpenRoot(contentRoot)
	if err != nil {
		return fmt.Errorf("opening the content root: %w", err)
	}
	defer root.Close()
	exists, err := workspaceExists(root, from)
	if err != nil {
		return fmt.Errorf("source %q: %w", from, err)
	}
	if !exists {
		klog.FromContext(ctx).Info("The workspace does not exist: nothing to copy", "from", from, "to", to)
	} else if err := CopyKeeping(ctx, contentRoot, from, to, keep); err != nil {
		return err
	}
	return remove(ctx, root, from)
}

// workspaceExists reports whether dir exists in root, after checking that its existing
// components are real directories.
func workspaceExists(root *os.Root, dir string) (bool, error) {
	if err := checkRealDirs(root, dir, false); err != nil {
		return false, err
	}
	_, err := root.Lstat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	case err != nil:
		return false, err
	}
	return true, nil
}

// remove renames dir out of the way and removes it, with what earlier runs left.
func remove(ctx context.Context, root *os.Root, dir string) error {
	logger := klog.FromContext(ctx)
	parentDir, base := filepath.Dir(dir), filepath.Base(dir)
	exists, err := workspaceExists(root, dir)
	if err != nil {
		return fmt.Errorf("removing the workspace %q: %w", dir, err)
	}
	if !exists {
		if _, err := root.Lstat(parentDir); errors.Is(err, fs.ErrNotExist) {
			logger.Info("The workspace does not exist: nothing to remove", "workspace", dir)
			return nil
		}
	}
	parent, err := root.OpenRoot(parentDir)
	if err != nil {
		return fmt.Errorf("removing the workspace %q: opening its parent: %w", dir, err)
	}
	defer parent.Close()

	if exists {
		aside := "." + base + removingInfix + strings.ToLower(rand.Text())
		if err := parent.Rename(base, aside); err != nil {
			return fmt.Errorf("removing the workspace %q: %w", dir, err)
		}
		if err := syncDir(parent, "."); err != nil {
			return fmt.Errorf("removing the workspace %q: %w", dir, err)
		}
	}
	// This run's renamed tree, and any an interrupted run left.
	entries, err := fs.ReadDir(parent.FS(), ".")
	if err != nil {
		return fmt.Errorf("removing the workspace %q: reading its parent: %w", dir, err)
	}
	var removed int
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "."+base+removingInfix) {
			continue
		}
		if err := removeAll(parent, e.Name()); err != nil {
			return fmt.Errorf("removing the workspace %q: %w", dir, err)
		}
		removed++
	}
	if removed == 0 {
		logger.Info("The workspace does not exist: nothing to remove", "workspace", dir)
		return nil
	}
	logger.Info("Removed the workspace", "workspace", dir)
	return syncDir(parent, ".")
}
