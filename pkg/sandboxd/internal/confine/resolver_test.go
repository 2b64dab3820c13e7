package confine

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// newTestResolver returns a resolver over a fresh workspace, and the
// workspace's path. A sibling directory "outside" holds a secret file that
// no tool may reach.
func newTestResolver(t *testing.T) (*Resolver, string, string) {
	t.Helper()
	top := t.TempDir()
	ws := filepath.Join(top, "ws")
	outside := filepath.Join(top, "outside")
	for _, d := range []string{ws, outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	putFile(t, filepath.Join(outside, "secret"), "top secret\n")
	r, err := NewResolver(ws)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r, ws, outside
}

func TestResolverRel(t *testing.T) {
	r, ws, outside := newTestResolver(t)
	tests := []struct {
		name    string
		in      string
		want    string
		wantErr string
	}{
		{name: "relative file", in: "a/b.go", want: "a/b.go"},
		{name: "dot", in: ".", want: "."},
		{name: "dot slash", in: "./a", want: "a"},
		{name: "inner dotdot stays inside", in: "a/../b", want: "b"},
		{name: "absolute inside", in: ws + "/src/main.go", want: "src/main.go"},
		{name: "absolute workspace itself", in: ws, want: "."},
		{name: "absolute workspace with slash", in: ws + "/", want: "."},
		{name: "absolute unclean inside", in: ws + "/x/../y", want: "y"},
		{name: "empty", in: "", wantErr: "path is empty"},
		{name: "NUL byte", in: "a\x00b", wantErr: "NUL byte"},
		{name: "dotdot", in: "..", wantErr: "leaves the workspace"},
		{name: "dotdot file", in: "../outside/secret", wantErr: "leaves the workspace"},
		{name: "deep dotdot", in: "a/b/../../../x", wantErr: "leaves the workspace"},
		{name: "absolute elsewhere", in: "/etc/passwd", wantErr: "outside the workspace"},
		{name: "absolute sibling", in: outside + "/secret", wantErr: "outside the workspace"},
		{name: "absolute prefix trick", in: ws + "2/x", wantErr: "outside the workspace"},
		{name: "absolute dotdot out", in: ws + "/../outside/secret", wantErr: "outside the workspace"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := r.Rel(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("rel(%q) = %q, %v; want error containing %q", tt.in, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("rel(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestResolverWorkspaceThroughSymlink(t *testing.T) {
	top := t.TempDir()
	real := filepath.Join(top, "real")
	if err := os.Mkdir(real, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(top, "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	r, err := NewResolver(link)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for _, in := range []string{link + "/f", real + "/f"} {
		if got, err := r.Rel(in); err != nil || got != "f" {
			t.Errorf("rel(%q) = %q, %v; want f", in, got, err)
		}
	}
}

func TestNewResolverErrors(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	putFile(t, file, "x")
	for name, in := range map[string]string{
		"empty":     "",
		"missing":   filepath.Join(dir, "nope"),
		"not a dir": file,
	} {
		t.Run(name, func(t *testing.T) {
			if r, err := NewResolver(in); err == nil {
				r.Close()
				t.Fatalf("newResolver(%q) succeeded, want an error", in)
			}
		})
	}
}

// TestResolverOpenRefusesEscapes checks that the os.Root refuses every way
// out of the tree when a file is opened.
func TestResolverOpenRefusesEscapes(t *testing.T) {
	r, ws, outside := newTestResolver(t)
	putFile(t, filepath.Join(ws, "inside.txt"), "fine\n")
	symlinkOrFail(t, "../outside/secret", filepath.Join(ws, "rel-link"))
	symlinkOrFail(t, filepath.Join(outside, "secret"), filepath.Join(ws, "abs-link"))
	symlinkOrFail(t, "../outside", filepath.Join(ws, "dir-link"))
	symlinkOrFail(t, filepath.Join(ws, "inside.txt"), filepath.Join(ws, "abs-inside-link"))
	if err := os.MkdirAll(filepath.Join(ws, "a", "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	symlinkOrFail(t, "../../../outside", filepath.Join(ws, "a", "b", "up"))
	symlinkOrFail(t, "loop2", filepath.Join(ws, "loop1"))
	symlinkOrFail(t, "loop1", filepath.Join(ws, "loop2"))

	for _, rel := range []string{"rel-link", "abs-link", "dir-link/secret", "a/b/up/secret", "abs-inside-link"} {
		t.Run(rel, func(t *testing.T) {
			f, _, err := r.OpenRegular(rel)
			if err == nil {
				f.Close()
				t.Fatalf("openRegular(%q) succeeded, want a refusal", rel)
			}
			if !strings.Contains(err.Error(), "refused") {
				t.Errorf("openRegular(%q) error = %v, want it to say it was refused", rel, err)
			}
		})
	}
	t.Run("loop", func(t *testing.T) {
		if f, _, err := r.OpenRegular("loop1"); err == nil {
			f.Close()
			t.Fatal("opened a symlink loop")
		}
	})
	t.Run("inside", func(t *testing.T) {
		f, _, err := r.OpenRegular("inside.txt")
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	})
}

func TestResolverRefusesSpecialFiles(t *testing.T) {
	r, ws, _ := newTestResolver(t)
	if err := syscall.Mkfifo(filepath.Join(ws, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := listenUnix(filepath.Join(ws, "sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := os.Mkdir(filepath.Join(ws, "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := map[string]string{
		"fifo": "FIFO",
		"sock": "socket",
		"dir":  "directory",
	}
	for rel, want := range tests {
		t.Run(rel, func(t *testing.T) {
			// Opening the FIFO must not block: nobody writes to it.
			f, _, err := r.OpenRegular(rel)
			if err == nil {
				f.Close()
				t.Fatalf("openRegular(%q) succeeded", rel)
			}
			if !strings.Contains(err.Error(), want) {
				t.Errorf("openRegular(%q) error = %v, want it to mention %q", rel, err, want)
			}
		})
	}
}

func TestResolveFinal(t *testing.T) {
	r, ws, _ := newTestResolver(t)
	putFile(t, filepath.Join(ws, "dir", "target.txt"), "x")
	symlinkOrFail(t, "dir/target.txt", filepath.Join(ws, "link"))
	symlinkOrFail(t, "link", filepath.Join(ws, "link2"))
	symlinkOrFail(t, "../outside/secret", filepath.Join(ws, "out"))
	symlinkOrFail(t, "/etc/passwd", filepath.Join(ws, "abs"))
	symlinkOrFail(t, "l2", filepath.Join(ws, "l1"))
	symlinkOrFail(t, "l1", filepath.Join(ws, "l2"))
	tests := []struct {
		in, want, wantErr string
	}{
		{in: "dir/target.txt", want: "dir/target.txt"},
		{in: "link", want: "dir/target.txt"},
		{in: "link2", want: "dir/target.txt"},
		{in: "missing/file", want: "missing/file"},
		{in: "out", wantErr: "outside the workspace"},
		{in: "abs", wantErr: "absolute path"},
		{in: "l1", wantErr: "too many levels"},
	}
	for _, tt := range tests {
		got, err := r.ResolveFinal(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("resolveFinal(%q) = %q, %v; want error containing %q", tt.in, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("resolveFinal(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

func TestIsEscape(t *testing.T) {
	r, ws, _ := newTestResolver(t)
	symlinkOrFail(t, "../outside", filepath.Join(ws, "out"))
	_, err := r.Root().Open("out/secret")
	if !IsEscape(err) {
		t.Fatalf("isEscape(%v) = false, want true", err)
	}
	if IsEscape(errors.New("other")) || IsEscape(nil) {
		t.Fatal("isEscape is true for an unrelated error")
	}
}

func listenUnix(name string) (net.Listener, error) { return net.Listen("unix", name) }

// putFile writes content to name, making its directory, for the
// resolver's tests (which live beside the resolver, apart from the tools').
func putFile(t *testing.T, name, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// symlinkOrFail makes name a symbolic link to target.
func symlinkOrFail(t *testing.T, target, name string) {
	t.Helper()
	if err := os.Symlink(target, name); err != nil {
		t.Fatal(err)
	}
}

// TestCheckAccessWritesNothing: CheckAccess says a writable workspace is writable without making
// an entry in it (the directory's modification time stays), refuses one that is not writable
// (as a user other than root: root may write anywhere the mount allows), and checks nothing more
// with writable false.
func TestCheckAccessWritesNothing(t *testing.T) {
	dir := t.TempDir()
	r, err := NewResolver(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	before, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.CheckAccess(true); err != nil {
		t.Errorf("CheckAccess(true) of a writable workspace: %v", err)
	}
	after, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !after.ModTime().Equal(before.ModTime()) {
		t.Errorf("CheckAccess changed the workspace (mtime %v -> %v)", before.ModTime(), after.ModTime())
	}
	// Check, for comparison, makes and removes its probe file.
	if err := r.Check(true); err != nil {
		t.Fatal(err)
	}
	if again, _ := os.Stat(dir); again.ModTime().Equal(before.ModTime()) {
		t.Log("Check left the directory's mtime as it was (a coarse clock): the comparison says nothing here")
	}
	if os.Getuid() == 0 {
		return
	}
	if err := os.Chmod(dir, 0o555); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(dir, 0o755)
	if err := r.CheckAccess(true); err == nil {
		t.Error("CheckAccess(true) of a read-only workspace: nil, want an error")
	}
	if err := r.CheckAccess(false); err != nil {
		t.Errorf("CheckAccess(false) of a read-only workspace: %v", err)
	}
}
