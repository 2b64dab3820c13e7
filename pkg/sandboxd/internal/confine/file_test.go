package confine

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// fastTaken reports whether f was opened by openat2 (not through the root).
func fastTaken(f *File) bool { return f.f == nil && f.fd >= 0 }

// openedAt is where f's descriptor leads, as the kernel says.
func openedAt(t *testing.T, f *File) string {
	t.Helper()
	where, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	return where
}

// readAllClose reads f to its end and closes it.
func readAllClose(t *testing.T, f *File) string {
	t.Helper()
	data, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// TestOpenFastIsTheSameFile: a file with no link on its path opens in one
// system call, and it is the file, with the info os gives for it.
func TestOpenFastIsTheSameFile(t *testing.T) {
	r, ws, _ := newTestResolver(t)
	if fd, err := unix.Openat2(r.dirfd, ".", &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_CLOEXEC}); err != nil {
		t.Skipf("openat2: %v: this kernel (or its seccomp filter) has none, the slow way is the only one here", err)
	} else {
		unix.Close(fd)
	}
	putFile(t, filepath.Join(ws, "top.txt"), "top\n")
	putFile(t, filepath.Join(ws, "a", "b", "c", "deep.go"), "package c\n")
	if err := os.Chmod(filepath.Join(ws, "top.txt"), 0o640|fs.ModeSetgid); err != nil {
		t.Fatal(err)
	}
	real, err := filepath.EvalSymlinks(ws)
	if err != nil {
		t.Fatal(err)
	}
	for rel, want := range map[string]string{"top.txt": "top\n", "a/b/c/deep.go": "package c\n"} {
		f, fi, err := r.OpenRegular(rel)
		if err != nil {
			t.Fatalf("OpenRegular(%q): %v", rel, err)
		}
		if !fastTaken(f) {
			t.Errorf("OpenRegular(%q) went through the root: no link is on its path", rel)
		}
		if at := openedAt(t, f); at != filepath.Join(real, rel) {
			t.Errorf("OpenRegular(%q) opened %s", rel, at)
		}
		os1, err := os.Stat(filepath.Join(ws, rel))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Name() != os1.Name() || fi.Size() != os1.Size() || !fi.ModTime().Equal(os1.ModTime()) || fi.Mode() != os1.Mode() || fi.IsDir() {
			t.Errorf("OpenRegular(%q) info = %s %d %v %v; os says %s %d %v %v", rel,
				fi.Name(), fi.Size(), fi.ModTime(), fi.Mode(), os1.Name(), os1.Size(), os1.ModTime(), os1.Mode())
		}
		if _, ok := fi.Sys().(*syscall.Stat_t); !ok {
			t.Errorf("OpenRegular(%q) info's Sys is %T, not *syscall.Stat_t as os's", rel, fi.Sys())
		}
		if got := readAllClose(t, f); got != want {
			t.Errorf("OpenRegular(%q) read %q, want %q", rel, got, want)
		}
		if err := f.Close(); !errors.Is(err, fs.ErrClosed) {
			t.Errorf("a second Close = %v, want fs.ErrClosed", err)
		}

		name, f, _, err := r.OpenFinal(rel)
		if err != nil || name != rel || !fastTaken(f) {
			t.Fatalf("OpenFinal(%q) = %q, fast %v, %v; want itself, fast", rel, name, err == nil && fastTaken(f), err)
		}
		if got := readAllClose(t, f); got != want {
			t.Errorf("OpenFinal(%q) read %q, want %q", rel, got, want)
		}
	}
}

// TestOpenFinalThroughLinks: a path with a link on it is the root's to
// open, as before: a last link inside is followed (and named), a directory
// link inside is walked, a link out is refused.
func TestOpenFinalThroughLinks(t *testing.T) {
	r, ws, _ := newTestResolver(t)
	putFile(t, filepath.Join(ws, "dir", "target.txt"), "target\n")
	symlinkOrFail(t, "dir/target.txt", filepath.Join(ws, "link"))
	symlinkOrFail(t, "dir", filepath.Join(ws, "dirlink"))
	symlinkOrFail(t, "../outside/secret", filepath.Join(ws, "out"))
	symlinkOrFail(t, "../outside", filepath.Join(ws, "outdir"))

	name, f, _, err := r.OpenFinal("link")
	if err != nil || name != "dir/target.txt" {
		t.Fatalf("OpenFinal(link) = %q, %v; want dir/target.txt", name, err)
	}
	if fastTaken(f) {
		t.Error("OpenFinal(link) took the fast open: it must name what the link leads to")
	}
	if got := readAllClose(t, f); got != "target\n" {
		t.Errorf("OpenFinal(link) read %q", got)
	}

	name, f, _, err = r.OpenFinal("dirlink/target.txt")
	if err != nil || name != "dirlink/target.txt" {
		t.Fatalf("OpenFinal(dirlink/target.txt) = %q, %v", name, err)
	}
	if got := readAllClose(t, f); got != "target\n" {
		t.Errorf("OpenFinal(dirlink/target.txt) read %q", got)
	}

	for _, rel := range []string{"out", "outdir/secret"} {
		if _, f, _, err := r.OpenFinal(rel); err == nil {
			f.Close()
			t.Errorf("OpenFinal(%q) opened the secret", rel)
		} else if !strings.Contains(err.Error(), "refused") && !strings.Contains(err.Error(), "outside") {
			t.Errorf("OpenFinal(%q) error = %v, want a refusal", rel, err)
		}
	}
}

// TestOpenWithoutOpenat2: where the kernel or its seccomp filter has no
// openat2, every open goes through the root, with the same answers.
func TestOpenWithoutOpenat2(t *testing.T) {
	for _, missing := range []error{syscall.ENOSYS, syscall.EPERM} {
		t.Run(missing.Error(), func(t *testing.T) {
			r, ws, _ := newTestResolver(t)
			putFile(t, filepath.Join(ws, "a", "file.txt"), "content\n")
			symlinkOrFail(t, "a/file.txt", filepath.Join(ws, "link"))
			symlinkOrFail(t, "../outside/secret", filepath.Join(ws, "out"))
			if err := os.Mkdir(filepath.Join(ws, "dir"), 0o755); err != nil {
				t.Fatal(err)
			}
			type answer struct{ name, content, err string }
			openAll := func() map[string]answer {
				got := map[string]answer{}
				for _, rel := range []string{"a/file.txt", "link", "out", "dir", "missing.txt"} {
					name, f, _, err := r.OpenFinal(rel)
					if err != nil {
						got[rel] = answer{err: err.Error()}
						continue
					}
					if want := fastOpen.Load() && rel == "a/file.txt"; fastTaken(f) != want {
						t.Errorf("%s: fast open taken %v, want %v (fastOpen %v)", rel, fastTaken(f), want, fastOpen.Load())
					}
					got[rel] = answer{name: name, content: readAllClose(t, f)}
				}
				return got
			}
			with := openAll()
			if !r.FastOpen() {
				t.Error("FastOpen is false where openat2 works")
			}

			calls := 0
			openat2 = func(int, string, *unix.OpenHow) (int, error) { calls++; return -1, missing }
			t.Cleanup(func() { openat2 = unix.Openat2; fastOpen.Store(true) })
			if r.FastOpen() {
				t.Errorf("FastOpen is true where openat2 answers %v", missing)
			}
			without := openAll()
			if fastOpen.Load() {
				t.Errorf("fastOpen is still on after openat2 answered %v", missing)
			}
			if r.FastOpen() || calls != 1 {
				t.Errorf("openat2 was tried %d times after it answered %v, want once", calls, missing)
			}
			for rel, w := range with {
				if without[rel] != w {
					t.Errorf("%s: without openat2 %+v, with it %+v", rel, without[rel], w)
				}
			}
			if with["a/file.txt"].content != "content\n" || with["link"].name != "a/file.txt" || with["out"].err == "" {
				t.Errorf("answers: %+v", with)
			}
		})
	}
}

// TestOpenFastRace: a directory on the path swapped for a link out of the
// workspace, again and again while files are opened through it, never
// lets an open reach outside, the fast way or the slow.
func TestOpenFastRace(t *testing.T) {
	r, ws, outside := newTestResolver(t)
	real, err := filepath.EvalSymlinks(ws)
	if err != nil {
		t.Fatal(err)
	}
	putFile(t, filepath.Join(ws, "real", "secret"), "fine\n")
	putFile(t, filepath.Join(ws, "parked", "secret"), "fine too\n")
	flip := filepath.Join(ws, "flip")
	parked := filepath.Join(ws, "parked")
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			os.Rename(parked, flip) // a directory (the fast open's)
			os.Rename(flip, parked)
			os.Symlink("real", flip) // a link inside (the root's)
			os.Remove(flip)
			os.Symlink(outside, flip) // links out
			os.Remove(flip)
			os.Symlink("../outside", flip)
			os.Remove(flip)
		}
	}()
	defer func() { close(stop); <-done }()
	opened, fast := 0, 0
	for i := range 3000 {
		var f *File
		var err error
		if i%2 == 0 {
			f, _, err = r.OpenRegular("flip/secret")
		} else {
			_, f, _, err = r.OpenFinal("flip/secret")
		}
		if err != nil {
			continue
		}
		at := openedAt(t, f)
		if fastTaken(f) {
			fast++
		}
		f.Close()
		if at != real && !strings.HasPrefix(at, real+"/") {
			t.Fatalf("open %d of flip/secret reached %s, outside the workspace %s", i, at, real)
		}
		opened++
	}
	t.Logf("%d of 3000 opens succeeded (%d of them the fast way), each inside the workspace", opened, fast)
}

// TestOpenAfterClose: a closed resolver opens nothing the fast way (its
// directory's descriptor number may belong to another file by then).
func TestOpenAfterClose(t *testing.T) {
	r, ws, _ := newTestResolver(t)
	putFile(t, filepath.Join(ws, "f.txt"), "x")
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if f, _, ok := r.openFast("f.txt"); ok {
		f.Close()
		t.Fatal("the fast open opened a file after Close")
	}
	if r.FastOpen() {
		t.Error("FastOpen is true after Close")
	}
	if f, _, err := r.OpenRegular("f.txt"); err == nil {
		f.Close()
		t.Error("OpenRegular opened a file after Close")
	}
}
