package syncback

import (
	"context"
	"crypto/sha256"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/klog/v2/ktesting"
)

var (
	t0 = time.Date(2024, 3, 1, 10, 0, 0, 0, time.UTC)
	t1 = time.Date(2024, 3, 2, 11, 30, 0, 0, time.UTC)
	t2 = time.Date(2024, 3, 3, 12, 45, 0, 0, time.UTC)
)

// writeFile writes a file under dir with the given mode and mtime.
func writeFile(t *testing.T, name, content string, mode fs.FileMode, mtime time.Time) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(name, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(name, mtime, mtime); err != nil {
		t.Fatal(err)
	}
}

func mkdir(t *testing.T, name string, mode fs.FileMode) {
	t.Helper()
	if err := os.MkdirAll(name, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(name, mode); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, name string) {
	t.Helper()
	if err := os.Symlink(target, name); err != nil {
		t.Fatal(err)
	}
}

func chtimes(t *testing.T, name string, mtime time.Time) {
	t.Helper()
	if err := os.Chtimes(name, mtime, mtime); err != nil {
		t.Fatal(err)
	}
}

// listTree returns every entry under dir as "relpath type perm", sorted.
func listTree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		info, err := d.Info()
		if err != nil {
			return err
		}
		entry := rel + " " + info.Mode().Type().String() + " " + info.Mode().Perm().String()
		if info.Mode()&fs.ModeSymlink != 0 {
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			entry = rel + " -> " + target
		}
		out = append(out, entry)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

// hiddenLeftovers lists the staging and old directories Copy may leave in dir (a target's
// versions directory is not a leftover: versionsOf).
func hiddenLeftovers(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if strings.Contains(e.Name(), ".airlock-") && !strings.HasSuffix(e.Name(), ".airlock-versions") {
			out = append(out, e.Name())
		}
	}
	return out
}

func readFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestCopyPreservesTreeModesAndTimes(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	root := t.TempDir()
	src := filepath.Join(root, "ns", "sandboxes", "claim-1")

	writeFile(t, filepath.Join(src, "main.go"), "package main\n", 0o644, t0)
	writeFile(t, filepath.Join(src, "run.sh"), "#!/bin/sh\n", 0o755, t1)
	writeFile(t, filepath.Join(src, "secret.env"), "A=1\n", 0o600, t2)
	writeFile(t, filepath.Join(src, "pkg", "a", "b", "deep.txt"), "deep\n", 0o640, t1)
	writeFile(t, filepath.Join(src, "ro", "frozen.txt"), "frozen\n", 0o444, t0)
	mkdir(t, filepath.Join(src, "empty"), 0o750)
	chtimes(t, filepath.Join(src, "empty"), t2)
	chtimes(t, filepath.Join(src, "pkg", "a", "b"), t0)
	chtimes(t, filepath.Join(src, "pkg", "a"), t1)
	mkdir(t, filepath.Join(src, "ro"), 0o555)
	chtimes(t, filepath.Join(src, "ro"), t2)
	chtimes(t, src, t1)

	if err := Copy(ctx, root, "ns/sandboxes/claim-1", "projects/web"); err != nil {
		t.Fatalf("Copy: %v", err)
	}

	dst := filepath.Join(root, "projects", "web")
	if diff := cmp.Diff(listTree(t, src), listTree(t, dst)); diff != "" {
		t.Errorf("copied tree differs from the source (-src +dst):\n%s", diff)
	}
	for _, rel := range []string{"main.go", "run.sh", "secret.env", "pkg/a/b/deep.txt", "ro/frozen.txt"} {
		if got, want := readFile(t, filepath.Join(dst, rel)), readFile(t, filepath.Join(src, rel)); got != want {
			t.Errorf("%s: content %q, want %q", rel, got, want)
		}
	}
	wantTimes := map[string]time.Time{
		"main.go": t0, "run.sh": t1, "secret.env": t2, "pkg/a/b/deep.txt": t1, "ro/frozen.txt": t0,
		"empty": t2, "pkg/a/b": t0, "pkg/a": t1, "ro": t2, ".": t1,
	}
	for rel, want := range wantTimes {
		fi, err := os.Lstat(filepath.Join(dst, rel))
		if err != nil {
			t.Fatal(err)
		}
		if !fi.ModTime().Equal(want) {
			t.Errorf("%s: mtime %v, want %v", rel, fi.ModTime().UTC(), want)
		}
	}
	if got := hiddenLeftovers(t, filepath.Join(root, "projects")); len(got) != 0 {
		t.Errorf("leftover staging directories: %v", got)
	}
	// The source is not touched.
	if got := readFile(t, filepath.Join(src, "main.go")); got != "package main\n" {
		t.Errorf("source changed: %q", got)
	}
}

func TestCopySymlinks(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	root := t.TempDir()
	src := filepath.Join(root, "ws")
	writeFile(t, filepath.Join(root, "other-namespace", "secret.txt"), "not yours\n", 0o644, t0)
	writeFile(t, filepath.Join(src, "lib", "util.js"), "module.exports = 1\n", 0o644, t0)
	writeFile(t, filepath.Join(src, "node_modules", "tool", "bin", "tool.js"), "run()\n", 0o755, t0)
	mkdir(t, filepath.Join(src, "node_modules", ".bin"), 0o755)

	// Kept: relative links that resolve inside the tree, to files and to directories.
	symlink(t, "lib/util.js", filepath.Join(src, "util.js"))
	symlink(t, "../tool/bin/tool.js", filepath.Join(src, "node_modules", ".bin", "tool"))
	symlink(t, "lib", filepath.Join(src, "lib-dir"))
	// Skipped: links that leave the tree, directly or through another link, absolute links,
	// dangling links and loops.
	symlink(t, "../other-namespace/secret.txt", filepath.Join(src, "escape"))
	symlink(t, "../../other-namespace", filepath.Join(src, "lib", "escape-dir"))
	symlink(t, "lib/escape-dir/secret.txt", filepath.Join(src, "escape-via-link"))
	symlink(t, filepath.Join(root, "other-namespace", "secret.txt"), filepath.Join(src, "absolute"))
	symlink(t, "does-not-exist", filepath.Join(src, "dangling"))
	symlink(t, "loop-b", filepath.Join(src, "loop-a"))
	symlink(t, "loop-a", filepath.Join(src, "loop-b"))

	if err := Copy(ctx, root, "ws", "out/ws"); err != nil {
		t.Fatalf("Copy: %v", err)
	}

	dst := filepath.Join(root, "out", "ws")
	want := []string{
		". d--------- -rwxr-xr-x",
		"lib d--------- -rwxr-xr-x",
		"lib-dir -> lib",
		"lib/util.js ---------- -rw-r--r--",
		"node_modules d--------- -rwxr-xr-x",
		"node_modules/.bin d--------- -rwxr-xr-x",
		"node_modules/.bin/tool -> ../tool/bin/tool.js",
		"node_modules/tool d--------- -rwxr-xr-x",
		"node_modules/tool/bin d--------- -rwxr-xr-x",
		"node_modules/tool/bin/tool.js ---------- -rwxr-xr-x",
		"util.js -> lib/util.js",
	}
	if diff := cmp.Diff(want, listTree(t, dst)); diff != "" {
		t.Errorf("copied tree (-want +got):\n%s", diff)
	}
	// The kept links work in the copy, and none of them was followed when copying.
	if got := readFile(t, filepath.Join(dst, "node_modules", ".bin", "tool")); got != "run()\n" {
		t.Errorf("link in the copy reads %q", got)
	}
	if fi, err := os.Lstat(filepath.Join(dst, "lib-dir")); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		t.Errorf("lib-dir: want a symbolic link, got %v, %v", fi, err)
	}
}

func TestCopySkipsSpecialFiles(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	root := t.TempDir()
	src := filepath.Join(root, "ws")
	writeFile(t, filepath.Join(src, "keep.txt"), "keep\n", 0o644, t0)
	if err := syscall.Mkfifo(filepath.Join(src, "pipe"), 0o644); err != nil {
		t.Fatal(err)
	}

	if err := Copy(ctx, root, "ws", "out"); err != nil {
		t.Fatalf("Copy: %v", err)
	}
	want := []string{". d--------- -rwxr-xr-x", "keep.txt ---------- -rw-r--r--"}
	if diff := cmp.Diff(want, listTree(t, filepath.Join(root, "out"))); diff != "" {
		t.Errorf("copied tree (-want +got):\n%s", diff)
	}
}

func TestCopyReplacesExistingTarget(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "ws", "new.txt"), "new\n", 0o644, t1)
	writeFile(t, filepath.Join(root, "target", "stale.txt"), "stale\n", 0o644, t0)
	writeFile(t, filepath.Join(root, "target", "ro", "locked.txt"), "locked\n", 0o444, t0)
	mkdir(t, filepath.Join(root, "target", "ro"), 0o555)
	writeFile(t, filepath.Join(root, "sibling", "keep.txt"), "sibling\n", 0o644, t0)

	if err := Copy(ctx, root, "ws", "target"); err != nil {
		t.Fatalf("Copy: %v", err)
	}

	want := []string{". d--------- -rwxr-xr-x", "new.txt ---------- -rw-r--r--"}
	if diff := cmp.Diff(want, listTree(t, filepath.Join(root, "target"))); diff != "" {
		t.Errorf("target after the copy (-want +got):\n%s", diff)
	}
	if got := hiddenLeftovers(t, root); len(got) != 0 {
		t.Errorf("staging or previous target left behind: %v", got)
	}
	// The previous target is kept, whole, as a version.
	versions := versionsOf(t, filepath.Join(root, "target"))
	if len(versions) != 1 {
		t.Fatalf("versions %v, want the previous target", versions)
	}
	wantOld := []string{". d--------- -rwxr-xr-x", "ro d--------- -r-xr-xr-x", "ro/locked.txt ---------- -r--r--r--", "stale.txt ---------- -rw-r--r--"}
	if diff := cmp.Diff(wantOld, listTree(t, versions[0])); diff != "" {
		t.Errorf("kept version (-want +got):\n%s", diff)
	}
	if got := readFile(t, filepath.Join(root, "sibling", "keep.txt")); got != "sibling\n" {
		t.Errorf("sibling of the target changed: %q", got)
	}
}

func TestCopyFailureLeavesTargetUntouched(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "ws", "new.txt"), "new\n", 0o644, t1)
	writeFile(t, filepath.Join(root, "target", "old.txt"), "old\n", 0o644, t0)
	before := listTree(t, filepath.Join(root, "target"))

	ctx, cancel := context.WithCancel(ctx)
	cancel()
	err := Copy(ctx, root, "ws", "target")
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Copy with a cancelled context: got %v, want context.Canceled", err)
	}
	if diff := cmp.Diff(before, listTree(t, filepath.Join(root, "target"))); diff != "" {
		t.Errorf("target changed by a failed copy (-before +after):\n%s", diff)
	}
	if got := readFile(t, filepath.Join(root, "target", "old.txt")); got != "old\n" {
		t.Errorf("old.txt = %q", got)
	}
	if got := hiddenLeftovers(t, root); len(got) != 0 {
		t.Errorf("staging directory left behind: %v", got)
	}
}

func TestCopyRejects(t *testing.T) {
	tests := map[string]struct {
		setup   func(t *testing.T, root string)
		from    string
		to      string
		wantErr string
	}{
		"absolute source":          {from: "/etc", to: "out", wantErr: "must be a path relative to the content root"},
		"source with ..":           {from: "../ws", to: "out", wantErr: `must not contain ".." segments`},
		"target with ..":           {from: "ws", to: "a/../../out", wantErr: `must not contain ".." segments`},
		"unclean target":           {from: "ws", to: "a//out", wantErr: "must be a clean path"},
		"target is the root":       {from: "ws", to: ".", wantErr: "not the root itself"},
		"target inside the source": {from: "ws", to: "ws/out", wantErr: "overlap"},
		"source inside the target": {from: "ws/sub", to: "ws", wantErr: "overlap"},
		"same path":                {from: "ws", to: "ws", wantErr: "overlap"},
		"missing source":           {from: "nope", to: "out", wantErr: "no such file or directory"},
		"source is a file": {
			setup: func(t *testing.T, root string) { writeFile(t, filepath.Join(root, "file"), "x", 0o644, t0) },
			from:  "file", to: "out", wantErr: "is not a directory",
		},
		"source is a symlink": {
			setup: func(t *testing.T, root string) { symlink(t, "ws", filepath.Join(root, "link")) },
			from:  "link", to: "out", wantErr: "is a symbolic link",
		},
		"target is a file": {
			setup: func(t *testing.T, root string) { writeFile(t, filepath.Join(root, "out"), "x", 0o644, t0) },
			from:  "ws", to: "out", wantErr: "exists and is not a directory",
		},
		"target parent is a symlink": {
			setup: func(t *testing.T, root string) {
				symlink(t, "ws2", filepath.Join(root, "proj"))
				mkdir(t, filepath.Join(root, "ws2"), 0o755)
			},
			from: "ws", to: "proj/out", wantErr: "is a symbolic link",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			parent := t.TempDir()
			root := filepath.Join(parent, "content")
			writeFile(t, filepath.Join(parent, "outside.txt"), "outside\n", 0o644, t0)
			writeFile(t, filepath.Join(root, "ws", "sub", "f.txt"), "f\n", 0o644, t0)
			if tc.setup != nil {
				tc.setup(t, root)
			}
			before := listTree(t, parent)

			err := Copy(ctx, root, tc.from, tc.to)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Copy(%q, %q): got error %v, want one containing %q", tc.from, tc.to, err, tc.wantErr)
			}
			if diff := cmp.Diff(before, listTree(t, parent)); diff != "" {
				t.Errorf("a rejected copy changed the file system (-before +after):\n%s", diff)
			}
		})
	}
}

// TestCopyEmptyWorkspaceKeepsTarget: an empty workspace (a session closed before any tool wrote)
// never replaces saved work: the target keeps every file, byte for byte; a workspace with anything
// in it (a lone empty directory included) still replaces the target.
func TestCopyEmptyWorkspaceKeepsTarget(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	root := t.TempDir()
	mkdir(t, filepath.Join(root, "ws"), 0o755)
	writeFile(t, filepath.Join(root, "target", "proj", "a.txt"), "saved work\n", 0o644, t0)
	before := sha256.Sum256([]byte(readFile(t, filepath.Join(root, "target", "proj", "a.txt"))))
	if err := Copy(ctx, root, "ws", "target"); err != nil {
		t.Fatalf("Copy: %v", err)
	}
	if after := sha256.Sum256([]byte(readFile(t, filepath.Join(root, "target", "proj", "a.txt")))); after != before {
		t.Error("the saved file changed")
	}
	if got := hiddenLeftovers(t, root); len(got) != 0 {
		t.Errorf("staging or previous target left behind: %v", got)
	}
	mkdir(t, filepath.Join(root, "ws", "sub"), 0o755)
	if err := Copy(ctx, root, "ws", "target"); err != nil {
		t.Fatalf("Copy: %v", err)
	}
	if diff := cmp.Diff([]string{". d--------- -rwxr-xr-x", "sub d--------- -rwxr-xr-x"}, listTree(t, filepath.Join(root, "target"))); diff != "" {
		t.Errorf("a workspace with a directory did not replace the target (-want +got):\n%s", diff)
	}
}

// versionsOf returns the paths of the kept versions of the target, oldest first.
func versionsOf(t *testing.T, target string) []string {
	t.Helper()
	dir := filepath.Join(filepath.Dir(target), VersionsDir(filepath.Base(target)))
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, filepath.Join(dir, e.Name()))
	}
	sort.Strings(out)
	return out
}
