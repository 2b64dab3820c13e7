package wsscan

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/pkg/record"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/confine"
)

func workspace(t *testing.T) (string, *confine.Resolver) {
	t.Helper()
	dir := t.TempDir()
	ws, err := confine.NewResolver(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	return dir, ws
}

func write(t *testing.T, name, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func paths(r Result) string {
	var p []string
	for _, f := range r.Files {
		p = append(p, f.Path)
	}
	return strings.Join(p, " ")
}

// TestChangedFindsWhatWasWrittenSince: the regular files written after Now, in lexical order,
// with their size and SHA-256; not sandboxd's transient files, not what a symbolic link (to a
// file or a directory outside) leads to, not a FIFO, and nothing for a moment after them all.
func TestChangedFindsWhatWasWrittenSince(t *testing.T) {
	dir, ws := workspace(t)
	outside := t.TempDir()
	write(t, filepath.Join(outside, "secret"), "outside")
	since := Now()
	write(t, filepath.Join(dir, "b.txt"), "bee")
	write(t, filepath.Join(dir, "a", "deep", "c.txt"), "sea")
	write(t, filepath.Join(dir, ".airlock-readyz-abc"), "")
	write(t, filepath.Join(dir, ".b.txt.airlock-XYZ.tmp"), "tmp")
	if err := os.Symlink(filepath.Join(outside, "secret"), filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "linkdir")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := Changed(ws, since, DefaultLimits, nil)
	if paths(r) != "a/deep/c.txt b.txt" || r.Counted != 0 || r.Cut {
		t.Fatalf("found %q counted %d cut %v, want a/deep/c.txt b.txt", paths(r), r.Counted, r.Cut)
	}
	if f := r.Files[1]; f.Size != 3 || f.SHA256 != record.SumHex([]byte("bee")) || f.Ctime < since.UnixNano() {
		t.Errorf("b.txt: %+v", f)
	}
	if r := Changed(ws, time.Now().Add(time.Hour), DefaultLimits, nil); len(r.Files) != 0 || r.Counted != 0 {
		t.Errorf("files changed after an hour from now: %+v", r)
	}
}

// TestChangedSkipsWhatSkipSays: a file that skip says was recorded as it is is neither returned
// nor counted, nor does it take one of the files' places.
func TestChangedSkipsWhatSkipSays(t *testing.T) {
	dir, ws := workspace(t)
	since := Now()
	write(t, filepath.Join(dir, "a"), "a")
	write(t, filepath.Join(dir, "b"), "b")
	r := Changed(ws, since, Limits{Walk: 10, Files: 1, Bytes: 10}, func(f File) bool { return f.Path == "a" })
	if paths(r) != "b" || r.Counted != 0 {
		t.Fatalf("found %q counted %d, want b", paths(r), r.Counted)
	}
}
