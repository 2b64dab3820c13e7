package confine

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Opening a file for reading in one system call.
//
// Through the os.Root, opening pkg/a/b.go walks it: an openat and a close
// for each directory, then the file, and os.File's setup (a try to add the
// file to the poller, which refuses regular files). Read's ResolveFinal
// adds an lstat. On this project's benchmark host each system call of a
// tool costs some microseconds, a tenth of a small Read's time.
//
// openat2 (Linux 5.6) with RESOLVE_BENEATH and RESOLVE_NO_SYMLINKS does the
// whole walk in the kernel and refuses, atomically, any path that would
// leave the workspace or pass a symbolic link anywhere on the way. That is
// a narrower walk than the os.Root's, which follows links that stay inside:
// a path the fast open refuses, for any reason, is opened again the slow
// way, which gives today's answer and error. So the fast open only ever
// answers for a path with no link in it, where both walks reach the same
// file, and where the last component is not a link (what ResolveFinal
// would have found). Where openat2 is missing (an older kernel) or blocked
// (a seccomp profile that refuses it), the slow way is the only one.

// fastOpen is whether openat2 may be tried; cleared for good on the first
// answer that says the kernel or its filter does not have it.
var fastOpen atomic.Bool

func init() { fastOpen.Store(true) }

// openHow is the fast open: read-only, non-blocking (a FIFO opens at once
// and is then refused for what it is), no controlling terminal, nothing
// outside the workspace, no link on the way.
var openHow = unix.OpenHow{
	Flags:   unix.O_RDONLY | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_CLOEXEC,
	Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
}

// openat2 is unix.Openat2, a variable for the tests that take it away.
var openat2 = unix.Openat2

// File is a regular file of the workspace, open for reading: either a
// descriptor that openat2 opened, or an *os.File that the os.Root did.
// Close it.
type File struct {
	name string
	fd   int      // when opened by openat2; -1 otherwise
	f    *os.File // when opened through the os.Root
}

// Read reads from the file, as os.File.Read does.
func (f *File) Read(p []byte) (int, error) {
	if f.f != nil {
		return f.f.Read(p)
	}
	if len(p) == 0 {
		return 0, nil
	}
	for {
		n, err := unix.Read(f.fd, p)
		switch {
		case err == syscall.EINTR:
			continue
		case err != nil:
			return 0, &fs.PathError{Op: "read", Path: f.name, Err: err}
		case n == 0:
			return 0, io.EOF
		}
		return n, nil
	}
}

// Fd is the file's descriptor, as os.File.Fd.
func (f *File) Fd() uintptr {
	if f.f != nil {
		return f.f.Fd()
	}
	return uintptr(f.fd)
}

// Close closes the file.
func (f *File) Close() error {
	if f.f != nil {
		return f.f.Close()
	}
	if f.fd < 0 {
		return fs.ErrClosed
	}
	err := unix.Close(f.fd)
	f.fd = -1
	if err != nil {
		return &fs.PathError{Op: "close", Path: f.name, Err: err}
	}
	return nil
}

// FastOpen reports whether files open in one openat2 here (file.go), trying
// it once on the workspace directory if no open has said yet: false where
// the kernel has none or a seccomp filter refuses it (then every open goes
// through the os.Root, as correct and slower). For sandboxd's start-up log.
func (r *Resolver) FastOpen() bool {
	r.dirMu.RLock()
	defer r.dirMu.RUnlock()
	if r.dirfd < 0 || !fastOpen.Load() {
		return false
	}
	fd, err := tryOpenat2(r.dirfd, ".", &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: openHow.Resolve})
	if err != nil {
		return fastOpen.Load()
	}
	unix.Close(fd)
	return true
}

// tryOpenat2 is openat2, again on EINTR; an answer that says the kernel
// has none, or its seccomp filter refuses it, turns the fast open off.
func tryOpenat2(dirfd int, name string, how *unix.OpenHow) (int, error) {
	for {
		fd, err := openat2(dirfd, name, how)
		switch {
		case err == syscall.EINTR:
			continue
		case errors.Is(err, syscall.ENOSYS) || errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.E2BIG):
			fastOpen.Store(false) // not this kernel, or not allowed here
		}
		return fd, err
	}
}

// openFast opens the regular file rel with openat2, if it may. ok is
// false when it did not, for any reason: no fast open here, a link or a
// way out on the path, a file that is not there or not regular, or any
// other error; the caller then opens it the slow way.
func (r *Resolver) openFast(rel string) (*File, fs.FileInfo, bool) {
	r.dirMu.RLock()
	defer r.dirMu.RUnlock()
	if r.dirfd < 0 || !fastOpen.Load() {
		return nil, nil, false
	}
	fd, err := tryOpenat2(r.dirfd, rel, &openHow)
	if err != nil {
		return nil, nil, false
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		unix.Close(fd)
		return nil, nil, false
	}
	return &File{name: rel, fd: fd}, statInfo{name: path.Base(rel), st: st}, true
}

// statInfo is the fs.FileInfo of a regular file from its fstat, as
// os.File.Stat gives it.
type statInfo struct {
	name string
	st   syscall.Stat_t
}

func (s statInfo) Name() string { return s.name }
func (s statInfo) Size() int64  { return s.st.Size }

func (s statInfo) Mode() fs.FileMode {
	m := fs.FileMode(s.st.Mode & 0o777) // regular: no type bits
	if s.st.Mode&syscall.S_ISUID != 0 {
		m |= fs.ModeSetuid
	}
	if s.st.Mode&syscall.S_ISGID != 0 {
		m |= fs.ModeSetgid
	}
	if s.st.Mode&syscall.S_ISVTX != 0 {
		m |= fs.ModeSticky
	}
	return m
}

func (s statInfo) ModTime() time.Time { return time.Unix(s.st.Mtim.Unix()) }
func (s statInfo) IsDir() bool        { return false }
func (s statInfo) Sys() any           { return &s.st }
