// Package wsscan finds the workspace's regular files that a tool call's processes created or
// changed (docs/record.md §2.3): those whose inode change time (ctime) is at or after the moment
// the call's first process started. sandboxd does not see what a Bash command's children do (no
// exec or file tracing in a restricted pod), but it sees what they left: a file written, created,
// renamed into place, chmod-ed or touched has its ctime set by the kernel to the time of the
// change, and no process can set it back (utimensat sets mtime and atime, and sets ctime to now;
// only a change of the system's clock, which needs CAP_SYS_TIME, could move it). An mtime can be
// set to any date with `touch -d`, so it is not what is compared.
//
// The comparison is against the kernel's coarse real-time clock (CLOCK_REALTIME_COARSE), the
// clock the kernel stamps inodes with: a change after Now() has a ctime at or after it. A file
// changed in the same clock tick before Now() (a tick is 1 to 10 ms) is found too: a duplicate
// is possible, a drop is not.
//
// The walk is of every directory and every regular file of the workspace (one getdents per
// directory, one fstatat per file): its cost grows with the workspace's files, changed or not.
// It does not follow symbolic links, opens each directory beneath the one before by name with
// O_NOFOLLOW (it cannot be led out of the tree), and hashes through the workspace's
// confine.Resolver (non-blocking, regular files only: a FIFO swapped in cannot hang it).
package wsscan

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/confine"
)

// Limits bound one scan.
type Limits struct {
	// Walk bounds the directory entries visited; past it the walk stops and Result.Cut says so.
	Walk int
	// Files bounds the files returned; changed files past it are only counted.
	Files int
	// Bytes bounds the bytes hashed; a changed file that does not fit what is left is only counted.
	Bytes int64
}

// DefaultLimits are sandboxd's bounds per process (docs/record.md §2.3).
var DefaultLimits = Limits{Walk: 200_000, Files: 256, Bytes: 64 << 20}

// File is one changed file: its workspace-relative path, the size and SHA-256 of the bytes
// read when it was hashed, and its ctime (Unix nanoseconds) when it was opened.
type File struct {
	Path   string
	Size   int64
	SHA256 string
	Ctime  int64
}

// Result is what one scan found.
type Result struct {
	Files []File
	// Counted is the changed files only counted: past Limits.Files or Limits.Bytes, or whose
	// read failed. A file gone between the walk and the hash is neither found nor counted.
	Counted int
	// Cut says that the walk stopped at Limits.Walk entries: files beyond were not looked at.
	Cut bool
	// Visited is the directory entries the walk visited.
	Visited int
}

// Now is the kernel's coarse real time, the clock of inode times: take it before the first
// process of a call starts.
func Now() time.Time {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_REALTIME_COARSE, &ts); err != nil {
		return time.Now().Add(-10 * time.Millisecond) // not reached on Linux; a tick earlier
	}
	return time.Unix(ts.Unix())
}

// Transient reports whether name is one of sandboxd's own transient files in the workspace (the
// readiness probe's file, an atomic write's temporary file): not the agent's work.
func Transient(name string) bool {
	return strings.HasPrefix(name, ".airlock-readyz-") ||
		strings.HasPrefix(name, ".") && strings.HasSuffix(name, ".tmp") && strings.Contains(name, ".airlock-")
}

// Changed returns the regular files of ws whose ctime is at or after since, in walk order
// (lexical per directory), within lim, but those that skip (when not nil) says were already
// recorded as they are: a change in the clock tick of since, before it, is found too, and skip
// tells it from this call's (sandboxd's Seen).
func Changed(ws *confine.Resolver, since time.Time, lim Limits, skip func(File) bool) Result {
	s := scan{ws: ws, since: since.UnixNano(), lim: lim, skip: skip}
	fd, err := unix.Open(ws.Dir(), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return s.res
	}
	s.dir(fd, "")
	for _, c := range s.changed {
		s.hash(c)
	}
	return s.res
}

type scan struct {
	ws      *confine.Resolver
	since   int64
	lim     Limits
	skip    func(File) bool
	changed []string
	hashed  int64
	res     Result
}

// errCut stops the walk at its bound.
var errCut = errors.New("walk cut")

// dir walks the directory open at fd (rel from the workspace; closes fd), its entries in
// lexical order.
func (s *scan) dir(fd int, rel string) error {
	f := os.NewFile(uintptr(fd), rel)
	defer f.Close()
	ents, _ := f.ReadDir(-1) // what it read before an error (the directory went): walked
	slices.SortFunc(ents, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	for _, e := range ents {
		if s.res.Visited++; s.res.Visited > s.lim.Walk {
			s.res.Cut = true
			return errCut
		}
		name := e.Name()
		p := path.Join(rel, name)
		switch t := e.Type(); {
		case t.IsDir():
			sub, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				continue // gone, or swapped for a link: not walked
			}
			if err := s.dir(sub, p); err != nil {
				return err
			}
		case t.IsRegular():
			if Transient(name) {
				continue
			}
			var st unix.Stat_t
			if unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
				continue
			}
			if st.Ctim.Nano() >= s.since {
				s.changed = append(s.changed, p)
			}
		}
	}
	return nil
}

// hash reads the changed file rel into a File, or counts it.
func (s *scan) hash(rel string) {
	if len(s.res.Files) >= s.lim.Files {
		s.res.Counted++
		return
	}
	f, fi, err := s.ws.OpenRegular(rel)
	if err != nil {
		return // gone since the walk (a deleted file is not recorded), or no longer a regular file
	}
	defer f.Close()
	left := s.lim.Bytes - s.hashed
	if fi.Size() > left {
		s.res.Counted++
		return
	}
	h := sha256.New()
	n, err := io.CopyN(h, f, left+1)
	s.hashed += n
	if err != nil && err != io.EOF || n > left { // it grew past what is left, or a read failed
		s.res.Counted++
		return
	}
	var ctime int64
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		ctime = st.Ctim.Nano()
	}
	file := File{Path: rel, Size: n, SHA256: hex.EncodeToString(h.Sum(nil)), Ctime: ctime}
	if s.skip != nil && s.skip(file) {
		return
	}
	s.res.Files = append(s.res.Files, file)
}
