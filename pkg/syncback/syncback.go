// Package syncback copies a finished sandbox's workspace into its target, inside the workspace
// content volume (SPEC section 5): what `airlock sync` runs in the sync-back Job.
//
// The copy is built in a staging directory next to the target and then swapped in by rename, so a
// reader of the target sees the old tree or the new one, never a half-written one. Between the two
// renames of the swap the target is briefly absent.
//
// Every path is resolved through an os.Root opened on the content root, so nothing the copy does
// can leave it, whatever the workspace holds. What is copied:
//
//   - directories and regular files, with their permission bits (0o777; setuid, setgid and sticky
//     bits are dropped) and modification times. Ownership is not preserved: the copy belongs to
//     the user the Job runs as. Hard links are copied as separate files.
//   - symbolic links, as links, only when they resolve to an existing file or directory inside the
//     copied tree. A link that is absolute, leaves the tree, dangles or loops is skipped with a
//     logged warning. Links are never followed, so a link to a directory copies as a link.
//   - nothing else: devices, sockets and named pipes are skipped with a logged warning.
//
// An empty workspace (a session opened and closed before any tool wrote to it) never replaces a
// target: Copy leaves the target as it is, so that saved work is never wiped by a sandbox that did
// nothing. An agent that means to empty a target removes its files one by one in a workspace that
// still holds something (a marker file), or the platform team does it.
//
// The previous content of a target that is replaced is not deleted: it is kept as a version,
// ".<target>.airlock-versions/<UTC time>-<random>" next to the target, the newest KeepVersions
// (or as many as CopyKeeping is asked to keep) of them (issue 24; docs/nothing-lost.md says what a target holds after any sequence of sync-backs).
//
// A run that is killed leaves its staging directory (".<target>.airlock-staging-<random>") next to
// the target, safe to delete; killed between the two renames of the swap, the target is absent and
// its previous content is the newest version.
package syncback

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/airlock-dev/airlock/pkg/workspace"
)

// Copy replaces the directory `to` with a copy of the directory `from`; both are relative to
// contentRoot. The parents of `to` are created when missing; `to` itself, when it exists, must be a
// directory, and it is replaced whole (its previous content kept as a version), unless `from` is
// empty: then nothing is copied and `to` is left as it is. See the package comment for what is
// copied.
func Copy(ctx context.Context, contentRoot, from, to string) error {
	return CopyKeeping(ctx, contentRoot, from, to, KeepVersions)
}

// CopyKeeping is Copy keeping keep (at least 1) previous contents of the target as versions
// (`airlock sync --keep-versions`, a registry entry's targetVersions).
func CopyKeeping(ctx context.Context, contentRoot, from, to string, keep int) error {
	if keep < 1 {
		return fmt.Errorf("the versions to keep must be at least 1, not %d", keep)
	}
	if err := workspace.ValidatePath(from); err != nil {
		return fmt.Errorf("source %w", err)
	}
	if err := workspace.ValidatePath(to); err != nil {
		return fmt.Errorf("target %w", err)
	}
	if workspace.Overlaps(from, to) {
		return fmt.Errorf("source %q and target %q overlap", from, to)
	}

	root, err := os.OpenRoot(contentRoot)
	if err != nil {
		return fmt.Errorf("opening the content root: %w", err)
	}
	defer root.Close()

	if err := checkRealDirs(root, from, true); err != nil {
		return fmt.Errorf("source %q: %w", from, err)
	}
	src, err := root.OpenRoot(from)
	if err != nil {
		return fmt.Errorf("opening source %q: %w", from, err)
	}
	defer src.Close()
	if empty, err := emptyDir(src); err != nil {
		return fmt.Errorf("reading source %q: %w", from, err)
	} else if empty {
		klog.FromContext(ctx).Info("The workspace is empty: the target is left as it is", "from", from, "to", to)
		return nil
	}

	parentDir, base := filepath.Dir(to), filepath.Base(to)
	if err := checkRealDirs(root, parentDir, false); err != nil {
		return fmt.Errorf("target %q: %w", to, err)
	}
	if err := root.MkdirAll(parentDir, 0o755); err != nil {
		return fmt.Errorf("creating the parent of target %q: %w", to, err)
	}
	parent, err := root.OpenRoot(parentDir)
	if err != nil {
		return fmt.Errorf("opening the parent of target %q: %w", to, err)
	}
	defer parent.Close()
	targetExists, err := existingDir(parent, base)
	if err != nil {
		return fmt.Errorf("target %q: %w", to, err)
	}

	suffix := strings.ToLower(rand.Text())
	stagingName := "." + base + ".airlock-staging-" + suffix
	if err := parent.Mkdir(stagingName, 0o700); err != nil {
		return fmt.Errorf("creating the staging directory: %w", err)
	}
	staged := false
	defer func() {
		if !staged {
			if err := removeAll(parent, stagingName); err != nil {
				klog.FromContext(ctx).Error(err, "Failed to remove the staging directory", "path", filepath.Join(parentDir, stagingName))
			}
		}
	}()
	staging, err := parent.OpenRoot(stagingName)
	if err != nil {
		return fmt.Errorf("opening the staging directory: %w", err)
	}
	defer staging.Close()

	c := &copier{src: src, dst: staging}
	if err := c.copyTree(ctx); err != nil {
		return err
	}

	version, err := swapIn(ctx, parent, stagingName, base, suffix, targetExists, keep)
	if err != nil {
		return fmt.Errorf("replacing target %q: %w", to, err)
	}
	staged = true
	if version != "" {
		version = filepath.Join(parentDir, version)
	}
	klog.FromContext(ctx).Info("Synced workspace", "from", from, "to", to, "previousVersion", version,
		"dirs", c.dirs, "files", c.files, "symlinks", c.symlinks, "bytes", c.bytes, "skipped", c.skipped)
	return nil
}

// emptyDir reports whether the directory root is opened on has no entries at all.
func emptyDir(root *os.Root) (bool, error) {
	d, err := root.Open(".")
	if err != nil {
		return false, err
	}
	defer d.Close()
	names, err := d.Readdirnames(1)
	if errors.Is(err, io.EOF) {
		return true, nil
	}
	return len(names) == 0, err
}

// checkRealDirs checks that no existing component of p (a path in root) is a symlink or a
// non-directory, so that resolving p follows no link. With mustExist, p itself must exist.
func checkRealDirs(root *os.Root, p string, mustExist bool) error {
	if p == "." {
		return nil
	}
	parts := strings.Split(filepath.ToSlash(p), "/")
	for i := range parts {
		prefix := filepath.Join(parts[:i+1]...)
		fi, err := root.Lstat(prefix)
		if errors.Is(err, fs.ErrNotExist) && !mustExist {
			return nil // the rest is created
		}
		if err != nil {
			return err
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			return fmt.Errorf("%q is a symbolic link", prefix)
		}
		if !fi.IsDir() {
			return fmt.Errorf("%q is not a directory", prefix)
		}
	}
	return nil
}

// existingDir reports whether name exists in parent; it is an error for it to be anything but a
// directory.
func existingDir(parent *os.Root, name string) (bool, error) {
	fi, err := parent.Lstat(name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	case err != nil:
		return false, err
	case !fi.IsDir():
		return false, fmt.Errorf("exists and is not a directory (%s)", fi.Mode().Type())
	}
	return true, nil
}

// KeepVersions is how many previous contents of a target Copy keeps (issue 24,
// docs/nothing-lost.md): every sync-back that replaces a target moves what it held into the
// target's versions directory, ".<target>.airlock-versions/<UTC time>-<random>" next to it, and
// removes the oldest beyond this many (CopyKeeping: as many as asked; the operator asks for the
// registry entry's targetVersions). Three: the older of two sessions that share a target, and two
// sync-backs more, are recoverable, for at most three more copies of the target's size.
const KeepVersions = int(workspace.DefaultTargetVersions)

// VersionsDir is the name of the directory next to a target (named base) that keeps its previous
// contents.
func VersionsDir(base string) string { return "." + base + ".airlock-versions" }

// versionTimeFormat names versions so that their names sort as their times.
const versionTimeFormat = "20060102T150405.000000000Z"

// swapIn renames the staging directory to name, moving an existing name into its versions
// directory first (versions beyond keep are removed). It returns the kept version's path
// in parent, or "" when there was no previous target.
func swapIn(ctx context.Context, parent *os.Root, stagingName, name, suffix string, exists bool, keep int) (string, error) {
	if !exists {
		if err := parent.Rename(stagingName, name); err != nil {
			return "", err
		}
		return "", syncDir(parent, ".")
	}
	versions := VersionsDir(name)
	if err := ensureRealDir(parent, versions); err != nil {
		return "", fmt.Errorf("the versions directory %q: %w", versions, err)
	}
	version := versions + "/" + time.Now().UTC().Format(versionTimeFormat) + "-" + suffix
	if err := parent.Rename(name, version); err != nil {
		return "", fmt.Errorf("keeping the previous target as a version: %w", err)
	}
	if err := parent.Rename(stagingName, name); err != nil {
		if restoreErr := parent.Rename(version, name); restoreErr != nil {
			return "", fmt.Errorf("moving the copy in: %w (and restoring the previous target: %v)", err, restoreErr)
		}
		return "", fmt.Errorf("moving the copy in: %w", err)
	}
	if err := errors.Join(syncDir(parent, "."), syncDir(parent, versions)); err != nil {
		return "", err
	}
	if err := pruneVersions(parent, versions, keep); err != nil {
		// The new tree is in place and the previous one kept; what is left is an old version.
		klog.FromContext(ctx).Error(err, "Failed to remove old versions of the target", "path", versions)
	}
	return version, nil
}

// ensureRealDir makes name in parent a directory, or checks that it is one (not a link).
func ensureRealDir(parent *os.Root, name string) error {
	err := parent.Mkdir(name, 0o755)
	if err == nil || !errors.Is(err, fs.ErrExist) {
		return err
	}
	fi, err := parent.Lstat(name)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("exists and is not a directory (%s)", fi.Mode().Type())
	}
	return nil
}

// pruneVersions removes the oldest versions in versions beyond keep (names that sort first are
// the oldest; entries not named as versions are left alone).
func pruneVersions(parent *os.Root, versions string, keep int) error {
	dir, err := parent.OpenRoot(versions)
	if err != nil {
		return err
	}
	defer dir.Close()
	names, err := versionNames(dir)
	if err != nil {
		return err
	}
	var errs []error
	for len(names) > keep {
		errs = append(errs, removeAll(dir, names[0]))
		names = names[1:]
	}
	return errors.Join(errs...)
}

// versionNames lists the versions in dir, oldest first.
func versionNames(dir *os.Root) ([]string, error) {
	d, err := dir.Open(".")
	if err != nil {
		return nil, err
	}
	defer d.Close()
	all, err := d.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, n := range all {
		if stamp, _, ok := strings.Cut(n, "-"); ok {
			if _, err := time.Parse(versionTimeFormat, stamp); err == nil {
				names = append(names, n)
			}
		}
	}
	slices.Sort(names)
	return names, nil
}

// copier copies the tree of src into dst, which exists and is empty.
type copier struct {
	src, dst *os.Root

	dirs, files, symlinks, skipped int
	bytes                          int64
}

// dirMeta is what a directory gets once its contents are written.
type dirMeta struct {
	path  string
	mode  fs.FileMode
	mtime time.Time
}

func (c *copier) copyTree(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	var dirs []dirMeta
	err := fs.WalkDir(c.src.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch mode := info.Mode(); {
		case mode.IsDir():
			if p != "." {
				if err := c.dst.Mkdir(p, 0o700); err != nil {
					return err
				}
			}
			dirs = append(dirs, dirMeta{path: p, mode: mode.Perm(), mtime: info.ModTime()})
			c.dirs++
		case mode.IsRegular():
			n, err := c.copyFile(p, info)
			if err != nil {
				return err
			}
			c.files++
			c.bytes += n
		case mode&fs.ModeSymlink != 0:
			copied, err := c.copySymlink(p)
			if err != nil {
				return err
			}
			if !copied {
				logger.Info("Warning: skipping a symbolic link that does not resolve inside the workspace", "path", p)
				c.skipped++
				return nil
			}
			c.symlinks++
		default:
			logger.Info("Warning: skipping a file that is not a regular file, directory or symbolic link", "path", p, "type", mode.Type().String())
			c.skipped++
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("copying the workspace: %w", err)
	}
	// Children before parents: a directory's mtime changes while entries are created in it, and a
	// read-only mode would stop them being created.
	for _, d := range slices.Backward(dirs) {
		if err := c.dst.Chmod(d.path, d.mode); err != nil {
			return fmt.Errorf("copying the workspace: %w", err)
		}
		if err := c.dst.Chtimes(d.path, time.Time{}, d.mtime); err != nil {
			return fmt.Errorf("copying the workspace: %w", err)
		}
		if err := syncDir(c.dst, d.path); err != nil {
			return fmt.Errorf("copying the workspace: %w", err)
		}
	}
	return nil
}

// copyFile copies the regular file p, with its permission bits and mtime, and flushes it to disk.
func (c *copier) copyFile(p string, info fs.FileInfo) (int64, error) {
	// O_NONBLOCK: should p have been replaced by a named pipe since the walk saw it, opening it
	// must not wait for a writer. The Stat below then refuses it.
	in, err := c.src.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return 0, err
	}
	defer in.Close()
	if fi, err := in.Stat(); err != nil {
		return 0, err
	} else if !fi.Mode().IsRegular() {
		return 0, fmt.Errorf("%s: changed while being copied", p)
	}
	out, err := c.dst.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(out, in)
	if err == nil {
		err = out.Sync()
	}
	if closeErr := out.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		return n, err
	}
	// Chmod rather than the mode of OpenFile, which the umask would narrow.
	if err := c.dst.Chmod(p, info.Mode().Perm()); err != nil {
		return n, err
	}
	return n, c.dst.Chtimes(p, time.Time{}, info.ModTime())
}

// copySymlink recreates the link p when it resolves to an existing file or directory inside the
// source tree, and reports whether it did.
func (c *copier) copySymlink(p string) (bool, error) {
	target, err := c.src.Readlink(p)
	if err != nil {
		return false, err
	}
	if path.IsAbs(target) || filepath.IsAbs(target) {
		return false, nil
	}
	// os.Root resolves the link as the kernel would and refuses to leave the tree: an error means
	// the link escapes, dangles or loops.
	if _, err := c.src.Stat(p); err != nil {
		return false, nil
	}
	if err := c.dst.Symlink(target, p); err != nil {
		return false, err
	}
	return true, nil
}

// syncDir flushes the directory p of root to disk.
func syncDir(root *os.Root, p string) error {
	d, err := root.Open(p)
	if err != nil {
		return err
	}
	err = d.Sync()
	if closeErr := d.Close(); err == nil {
		err = closeErr
	}
	if errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOTSUP) {
		return nil // some file systems cannot sync directories
	}
	return err
}

// removeAll removes name from root. A copied tree may hold read-only directories, which
// RemoveAll cannot empty, so on failure it makes every directory writable and tries again.
func removeAll(root *os.Root, name string) error {
	if err := root.RemoveAll(name); err == nil {
		return nil
	}
	sub, err := root.OpenRoot(name)
	if err != nil {
		return err
	}
	walkErr := fs.WalkDir(sub.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if d != nil && d.IsDir() {
			_ = sub.Chmod(p, 0o700) // best effort; RemoveAll reports what is still in the way
		}
		return nil
	})
	sub.Close()
	if err := root.RemoveAll(name); err != nil {
		return errors.Join(err, walkErr)
	}
	return nil
}
