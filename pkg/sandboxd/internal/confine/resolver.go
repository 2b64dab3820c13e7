// Package confine is how sandboxd's tools reach the workspace: a Resolver
// turns the paths tools receive into workspace-relative ones and opens,
// writes and replaces files through an os.Root, so that no path (through
// "..", a symbolic link, or a directory swapped mid-operation) leads out of
// the tree; special files are refused where a regular one is wanted. A file
// opened for reading whose path has no link on it opens in one openat2 that
// the kernel confines to the tree (file.go).
package confine

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// maxSymlinkHops bounds how many final-component symbolic links ResolveFinal
// follows, like SYMLOOP_MAX.
const maxSymlinkHops = 8

// Resolver is the one way file tools reach the workspace. It turns the paths
// that tools receive into workspace-relative paths, and every file operation
// goes through its os.Root, which refuses any path (including one reached
// through a symbolic link, or a directory swapped for one mid-operation)
// that leads out of the tree.
type Resolver struct {
	// dir is the workspace as configured, absolute and clean.
	dir string
	// real is dir with its symbolic links evaluated; absolute tool paths may
	// name either.
	real string
	root *os.Root
	// dirfd is the workspace directory (O_PATH) for the fast open
	// (file.go); -1 when it could not be opened as the root's directory,
	// and once closed. dirMu is held (read) while it is used: Close must
	// not let an open in flight use its number once the kernel gives it to
	// another file.
	dirMu sync.RWMutex
	dirfd int
}

// NewResolver opens the workspace directory dir.
func NewResolver(dir string) (*Resolver, error) {
	if dir == "" {
		return nil, errors.New("workspace is not set")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("workspace %q: %w", dir, err)
	}
	st, err := os.Stat(abs)
	if err != nil {
		return nil, fmt.Errorf("workspace: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("workspace %s is not a directory", abs)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, fmt.Errorf("workspace: %w", err)
	}
	root, err := os.OpenRoot(abs)
	if err != nil {
		return nil, fmt.Errorf("workspace: %w", err)
	}
	return &Resolver{dir: abs, real: real, root: root, dirfd: openDirFD(abs, root)}, nil
}

// openDirFD opens the directory abs as an O_PATH descriptor, for openat2,
// and checks that it is the directory root has open (not one swapped in
// between); -1 if it is not, or cannot be opened: then every open goes
// through the root.
func openDirFD(abs string, root *os.Root) int {
	fd, err := unix.Open(abs, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1
	}
	var st syscall.Stat_t
	fi, err := root.Stat(".")
	rst, ok := sysStat(fi)
	if err != nil || !ok || syscall.Fstat(fd, &st) != nil || st.Dev != rst.Dev || st.Ino != rst.Ino {
		unix.Close(fd)
		return -1
	}
	return fd
}

// sysStat is fi's stat, as os gives it on Linux.
func sysStat(fi fs.FileInfo) (*syscall.Stat_t, bool) {
	if fi == nil {
		return nil, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return st, ok
}

// Dir is the workspace as configured, absolute and clean.
func (r *Resolver) Dir() string { return r.dir }

// Real is Dir with its symbolic links evaluated.
func (r *Resolver) Real() string { return r.real }

// Root is the workspace opened as an os.Root: every file operation of the
// tools goes through it.
func (r *Resolver) Root() *os.Root { return r.root }

// Close releases the workspace directory.
func (r *Resolver) Close() error {
	r.dirMu.Lock()
	if r.dirfd >= 0 {
		unix.Close(r.dirfd)
		r.dirfd = -1
	}
	r.dirMu.Unlock()
	return r.root.Close()
}

// Rel returns the workspace-relative, slash-separated form of the tool path
// p: "." for the workspace itself. A relative p is taken from the workspace;
// an absolute p must lie inside it. A path that leaves the workspace
// lexically (through "..") is refused here; one that leaves it through a
// symbolic link is refused by the os.Root when it is used.
func (r *Resolver) Rel(p string) (string, error) {
	if p == "" {
		return "", errors.New("path is empty")
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", fmt.Errorf("path %q contains a NUL byte", p)
	}
	if filepath.IsAbs(p) {
		c := filepath.Clean(p)
		inside := false
		for _, base := range []string{r.dir, r.real} {
			if c == base {
				return ".", nil
			}
			prefix := base
			if !strings.HasSuffix(prefix, string(filepath.Separator)) {
				prefix += string(filepath.Separator)
			}
			if rest, ok := strings.CutPrefix(c, prefix); ok {
				p, inside = rest, true
				break
			}
		}
		if !inside {
			return "", fmt.Errorf("path %q is outside the workspace %s: give a path inside it, or one relative to it", p, r.dir)
		}
	}
	c := filepath.Clean(p)
	if !filepath.IsLocal(c) {
		return "", fmt.Errorf("path %q leaves the workspace (through \"..\"): refused", p)
	}
	return filepath.ToSlash(c), nil
}

// ResolveFinal follows symbolic links in the last component of the
// workspace-relative path rel, so that Write and Edit replace the file a link
// names rather than the link. A link that is absolute or leads out of the
// workspace is refused. A path that does not exist is returned as it is.
func (r *Resolver) ResolveFinal(rel string) (string, error) {
	cur := rel
	for range maxSymlinkHops {
		fi, err := r.root.Lstat(cur)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return cur, nil
			}
			return "", r.Explain(rel, err)
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			return cur, nil
		}
		target, err := r.root.Readlink(cur)
		if err != nil {
			return "", r.Explain(rel, err)
		}
		if path.IsAbs(target) {
			return "", fmt.Errorf("%s: refused: it is a symbolic link to the absolute path %s (only relative links inside the workspace are followed)", rel, target)
		}
		next := path.Join(path.Dir(cur), target)
		if !filepath.IsLocal(next) {
			return "", fmt.Errorf("%s: refused: it is a symbolic link that leads outside the workspace", rel)
		}
		cur = next
	}
	return "", fmt.Errorf("%s: too many levels of symbolic links", rel)
}

// OpenFinal is ResolveFinal and then OpenRegular of what it resolved to,
// which it returns with the file: in one system call when no symbolic link
// is on the path (file.go).
func (r *Resolver) OpenFinal(rel string) (string, *File, fs.FileInfo, error) {
	if f, fi, ok := r.openFast(rel); ok {
		return rel, f, fi, nil // no link on the path: rel is final
	}
	rel, err := r.ResolveFinal(rel)
	if err != nil {
		return "", nil, nil, err
	}
	f, fi, err := r.openSlow(rel)
	return rel, f, fi, err
}

// OpenRegular opens the regular file at rel for reading. Directories,
// devices, FIFOs and sockets are refused; the file is opened non-blocking and
// checked after the open, so a FIFO swapped in cannot hang the call.
func (r *Resolver) OpenRegular(rel string) (*File, fs.FileInfo, error) {
	if f, fi, ok := r.openFast(rel); ok {
		return f, fi, nil
	}
	return r.openSlow(rel)
}

// openSlow is OpenRegular through the os.Root.
func (r *Resolver) openSlow(rel string) (*File, fs.FileInfo, error) {
	f, err := r.root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		if fi, serr := r.root.Stat(rel); serr == nil && !IsEscape(err) {
			if cerr := CheckRegular(rel, fi); cerr != nil {
				return nil, nil, cerr // e.g. a socket, which cannot be opened (ENXIO)
			}
		}
		return nil, nil, r.Explain(rel, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, r.Explain(rel, err)
	}
	if err := CheckRegular(rel, fi); err != nil {
		f.Close()
		return nil, nil, err
	}
	return &File{name: rel, fd: -1, f: f}, fi, nil
}

// CheckRegular refuses anything at rel that is not a regular file.
func CheckRegular(rel string, fi fs.FileInfo) error {
	switch m := fi.Mode(); {
	case m.IsRegular():
		return nil
	case m.IsDir():
		return fmt.Errorf("%s is a directory, not a file (use Glob to list it)", rel)
	default:
		return fmt.Errorf("%s is not a regular file (%s): device files, FIFOs and sockets are refused", rel, fileKind(m))
	}
}

// fileKind names the type of a non-regular file for error messages.
func fileKind(m fs.FileMode) string {
	switch {
	case m&fs.ModeCharDevice != 0:
		return "character device"
	case m&fs.ModeDevice != 0:
		return "block device"
	case m&fs.ModeNamedPipe != 0:
		return "FIFO"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeSymlink != 0:
		return "symbolic link"
	default:
		return "irregular file"
	}
}

// Explain turns an error from the os.Root into one the model can act on.
func (r *Resolver) Explain(rel string, err error) error {
	var errno syscall.Errno
	switch {
	case IsEscape(err):
		return fmt.Errorf("%s: refused: it leads outside the workspace (through a symbolic link or \"..\")", rel)
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%s: no such file or directory", rel)
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("%s: permission denied", rel)
	case errors.As(err, &errno) && errno == syscall.ELOOP:
		return fmt.Errorf("%s: too many levels of symbolic links", rel)
	case errors.As(err, &errno) && errno == syscall.ENOTDIR:
		return fmt.Errorf("%s: a component of the path is not a directory", rel)
	case errors.As(err, &errno) && errno == syscall.EISDIR:
		return fmt.Errorf("%s is a directory, not a file", rel)
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s: %v", rel, pe.Err)
	}
	return fmt.Errorf("%s: %v", rel, err)
}

// IsEscape reports whether err is os.Root's refusal of a path that leaves
// the root. The os package does not export that error, so its text is
// matched.
func IsEscape(err error) bool {
	for e := err; e != nil; e = errors.Unwrap(e) {
		if e.Error() == "path escapes from parent" {
			return true
		}
	}
	return false
}

// reachable reports whether the workspace is a directory we can still reach.
func (r *Resolver) reachable() error {
	fi, err := r.root.Stat(".")
	if err != nil {
		return fmt.Errorf("workspace %s: %v", r.dir, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("workspace %s is not a directory", r.dir)
	}
	return nil
}

// Check reports whether the workspace is a directory we can still reach and,
// if writable is set, create files in.
func (r *Resolver) Check(writable bool) error {
	if err := r.reachable(); err != nil || !writable {
		return err
	}
	name := ".airlock-readyz-" + rand.Text()[:10]
	f, err := r.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("workspace %s is not writable: %v", r.dir, err)
	}
	f.Close()
	if err := r.root.Remove(name); err != nil {
		return fmt.Errorf("workspace %s: removing the probe file: %v", r.dir, err)
	}
	return nil
}

// CheckAccess is Check without writing anything: writability is asked of the kernel with
// access(2) (W_OK for the effective ids: a read-only mount answers EROFS, a directory of another
// user EACCES), and no probe file is made. A warm member checks its workspace so before its
// adoption: a resume member's workspace is a kept one, which nothing may change before the claim
// that resumes it adopts the member (docs/nothing-lost.md, "Resume members").
func (r *Resolver) CheckAccess(writable bool) error {
	if err := r.reachable(); err != nil || !writable {
		return err
	}
	if err := unix.Faccessat(unix.AT_FDCWD, r.dir, unix.W_OK, unix.AT_EACCESS); err != nil {
		return fmt.Errorf("workspace %s is not writable: %v", r.dir, err)
	}
	return nil
}

// AtomicWrite replaces rel with data: a temporary file in the same directory
// is written, synced and renamed over rel, and the directory is synced. It
// returns the new file's info.
func (r *Resolver) AtomicWrite(rel string, data []byte, mode fs.FileMode) (fs.FileInfo, error) {
	tmp, err := r.WriteTemp(rel, data, mode)
	if err != nil {
		return nil, err
	}
	return r.CommitTemp(tmp, rel)
}

// WriteTemp writes data, synced, to a new temporary file beside rel, and
// returns its path; CommitTemp (or the root's Remove) takes it from there.
func (r *Resolver) WriteTemp(rel string, data []byte, mode fs.FileMode) (string, error) {
	dir, base := path.Split(rel)
	tmp := path.Join(dir, "."+base+".airlock-"+rand.Text()[:10]+".tmp")
	f, err := r.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return "", r.Explain(rel, err)
	}
	cleanup := func() { _ = r.root.Remove(tmp) }
	if _, err := f.Write(data); err != nil {
		f.Close()
		cleanup()
		return "", fmt.Errorf("writing %s: %v", rel, err)
	}
	if err := f.Chmod(mode); err != nil { // OpenFile's mode is subject to the umask
		f.Close()
		cleanup()
		return "", fmt.Errorf("writing %s: %v", rel, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		cleanup()
		return "", fmt.Errorf("syncing %s: %v", rel, err)
	}
	if err := f.Close(); err != nil {
		cleanup()
		return "", fmt.Errorf("writing %s: %v", rel, err)
	}
	return tmp, nil
}

// CommitTemp renames the temporary file tmp over rel and syncs the
// directory. It returns the new file's info.
func (r *Resolver) CommitTemp(tmp, rel string) (fs.FileInfo, error) {
	if err := r.root.Rename(tmp, rel); err != nil {
		_ = r.root.Remove(tmp)
		return nil, r.Explain(rel, err)
	}
	dir := path.Dir(rel)
	if d, err := r.root.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	fi, err := r.root.Lstat(rel)
	if err != nil {
		return nil, r.Explain(rel, err)
	}
	return fi, nil
}
