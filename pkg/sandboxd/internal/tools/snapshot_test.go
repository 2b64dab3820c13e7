package tools

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/sandboxdtest"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/snapshot"
)

// treeState returns every entry below dir (not following links): a regular
// file's mode and content hash, a link's target, a directory's mode.
func treeState(t *testing.T, dir string, skip ...string) map[string]string {
	t.Helper()
	state := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if slices.Contains(skip, rel) {
			return fs.SkipDir
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			state[rel] = "link " + target
		case fi.IsDir():
			state[rel] = "dir"
		case fi.Mode().IsRegular():
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			state[rel] = fmt.Sprintf("%v %x", fi.Mode()&0o100, sha256.Sum256(data))
		default:
			state[rel] = fi.Mode().Type().String()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return state
}

func mustGit(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "init.defaultBranch=main"}, args...)...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return string(out)
}

func TestSnapshotRoundTrip(t *testing.T) {
	tb, ws := newTestToolbox(t)
	ctx := t.Context()
	sandboxdtest.WriteFile(t, filepath.Join(ws, "a.txt"), "a1\n")
	sandboxdtest.WriteFile(t, filepath.Join(ws, "dir", "b.txt"), "b\n")
	sandboxdtest.WriteFile(t, filepath.Join(ws, "crlf.txt"), "one\r\ntwo\r\n")
	sandboxdtest.WriteFile(t, filepath.Join(ws, ".gitattributes"), "* text=auto eol=lf\n*.txt filter=nope\n")
	sandboxdtest.WriteFile(t, filepath.Join(ws, ".gitignore"), "*.log\n")
	sandboxdtest.WriteFile(t, filepath.Join(ws, "build.log"), "ignored by git, kept by snapshots\n")
	sandboxdtest.WriteFile(t, filepath.Join(ws, "run.sh"), "#!/bin/sh\necho hi\n")
	if err := os.Chmod(filepath.Join(ws, "run.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	sandboxdtest.MustSymlink(t, "dir/b.txt", filepath.Join(ws, "link"))
	before := treeState(t, ws)

	_, s1, err := tb.snapshotCreate(ctx, SnapshotCreateInput{Label: "the start"})
	if err != nil {
		t.Fatal(err)
	}
	if s1.ID != "s1" || s1.Files != 8 || s1.Label != "the start" {
		t.Errorf("snapshot_create = %+v, want s1 with 8 files", s1)
	}

	// Change everything there is to change.
	sandboxdtest.WriteFile(t, filepath.Join(ws, "a.txt"), "a2\n")
	os.Remove(filepath.Join(ws, "dir", "b.txt"))
	os.Remove(filepath.Join(ws, "dir")) // empty directories are not recorded (git's way)
	os.Remove(filepath.Join(ws, "build.log"))
	sandboxdtest.WriteFile(t, filepath.Join(ws, "new.txt"), "new\n")
	sandboxdtest.WriteFile(t, filepath.Join(ws, "newdir", "deep", "x.txt"), "x\n")
	os.Chmod(filepath.Join(ws, "run.sh"), 0o644)
	after := treeState(t, ws)

	res, diff, err := tb.snapshotDiff(ctx, SnapshotDiffInput{ID: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	wantChanges := []snapshot.FileChange{
		{Path: "a.txt", Status: "modified"}, {Path: "build.log", Status: "deleted"}, {Path: "dir/b.txt", Status: "deleted"},
		{Path: "new.txt", Status: "added"}, {Path: "newdir/deep/x.txt", Status: "added"}, {Path: "run.sh", Status: "modified"},
	}
	if d := cmp.Diff(wantChanges, diff.Changes); d != "" {
		t.Errorf("snapshot_diff changes (-want +got):\n%s", d)
	}
	for _, want := range []string{"-a1", "+a2", "new mode 100644", "old mode 100755"} {
		if !strings.Contains(diff.Patch, want) || !strings.Contains(resultText(t, res), want) {
			t.Errorf("the patch lacks %q:\n%s", want, diff.Patch)
		}
	}

	_, r, err := tb.snapshotRestore(ctx, SnapshotRestoreInput{ID: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Backup != "s2" || len(r.Changes) != len(wantChanges) {
		t.Errorf("snapshot_restore = %+v", r)
	}
	if d := cmp.Diff(before, treeState(t, ws)); d != "" {
		t.Errorf("the workspace after the restore differs from the snapshot (-want +got):\n%s", d)
	}
	// The state before the restore was saved: restoring it undoes the restore.
	if _, _, err := tb.snapshotRestore(ctx, SnapshotRestoreInput{ID: "s2"}); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(after, treeState(t, ws)); d != "" {
		t.Errorf("the workspace after undoing the restore (-want +got):\n%s", d)
	}
	_, diff, err = tb.snapshotDiff(ctx, SnapshotDiffInput{ID: "s1", ToID: "s2"})
	if err != nil || len(diff.Changes) != len(wantChanges) || diff.To != "s2" {
		t.Errorf("snapshot_diff s1 s2 = %+v, %v", diff, err)
	}

	_, list, err := tb.snapshotList(ctx, SnapshotListInput{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, sn := range list.Snapshots {
		ids = append(ids, sn.ID+":"+sn.Label)
		if sn.Created == "" {
			t.Errorf("%s has no creation time", sn.ID)
		}
	}
	if d := cmp.Diff([]string{"s1:the start", "s2:before restoring s1", "s3:before restoring s2"}, ids); d != "" {
		t.Errorf("snapshot_list (-want +got):\n%s", d)
	}
}

// TestSnapshotLeavesTheWorkspaceRepositoryAlone checks that snapshots of a
// workspace that is a git repository never touch its .git: HEAD, index,
// refs, config and objects stay byte for byte, and a nested repository is
// neither snapshotted nor restored.
func TestSnapshotLeavesTheWorkspaceRepositoryAlone(t *testing.T) {
	tb, ws := newTestToolbox(t)
	ctx := t.Context()
	mustGit(t, ws, "init", "-q")
	sandboxdtest.WriteFile(t, filepath.Join(ws, "main.go"), "package main\n")
	sandboxdtest.WriteFile(t, filepath.Join(ws, "staged.txt"), "staged\n")
	mustGit(t, ws, "add", "main.go")
	mustGit(t, ws, "commit", "-qm", "first")
	mustGit(t, ws, "branch", "feature")
	mustGit(t, ws, "add", "staged.txt") // a staged change: the index differs from HEAD
	sandboxdtest.WriteFile(t, filepath.Join(ws, "vendor", "lib", "lib.go"), "package lib\n")
	mustGit(t, filepath.Join(ws, "vendor", "lib"), "init", "-q") // a nested repository, no commit
	gitBefore := treeState(t, filepath.Join(ws, ".git"))

	if _, _, err := tb.snapshotCreate(ctx, SnapshotCreateInput{}); err != nil {
		t.Fatal(err)
	}
	sandboxdtest.WriteFile(t, filepath.Join(ws, "main.go"), "package main // changed\n")
	sandboxdtest.WriteFile(t, filepath.Join(ws, "later.txt"), "later\n")
	sandboxdtest.WriteFile(t, filepath.Join(ws, "vendor", "lib", "later.go"), "package lib\n")
	if _, _, err := tb.snapshotDiff(ctx, SnapshotDiffInput{ID: "s1"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := tb.snapshotRestore(ctx, SnapshotRestoreInput{ID: "s1"}); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(gitBefore, treeState(t, filepath.Join(ws, ".git"))); d != "" {
		t.Errorf("the workspace's .git changed (-before +after):\n%s", d)
	}
	sandboxdtest.CheckFile(t, filepath.Join(ws, "main.go"), "package main\n")
	if _, err := os.Stat(filepath.Join(ws, "later.txt")); !os.IsNotExist(err) {
		t.Errorf("later.txt survived the restore: %v", err)
	}
	// The nested repository is left as it is, files added since included.
	sandboxdtest.CheckFile(t, filepath.Join(ws, "vendor", "lib", "later.go"), "package lib\n")
	if got := mustGit(t, ws, "status", "--porcelain"); got != "A  staged.txt\n?? vendor/\n" {
		t.Errorf("git status after the restore = %q", got)
	}
}

func TestSnapshotRefusesBadInput(t *testing.T) {
	tb, _ := newTestToolbox(t)
	ctx := t.Context()
	if _, _, err := tb.snapshotCreate(ctx, SnapshotCreateInput{Label: "--help"}); err != nil {
		t.Fatalf("a label that looks like a flag: %v", err)
	}
	for _, id := range []string{"", "s0", "s01", "s2", "1", "S1", "HEAD", "--help", "-rf", "s1;rm -rf /", "s1\x00", "../../etc/passwd",
		"refs/heads/main", "refs/airlock/snapshots/s1", "s1 s1", "s99999999999", "s1^", "s1~1", "s1:a.txt"} {
		_, _, err := tb.snapshotRestore(ctx, SnapshotRestoreInput{ID: id})
		if err == nil {
			t.Errorf("snapshot_restore(%q) succeeded", id)
		}
		if _, _, err := tb.snapshotDiff(ctx, SnapshotDiffInput{ID: "s1", ToID: id}); err == nil && id != "" {
			t.Errorf("snapshot_diff(s1, %q) succeeded", id)
		}
	}
	for _, label := range []string{"two\nlines", "nul\x00", strings.Repeat("x", snapshot.LabelBytes+1)} {
		if _, _, err := tb.snapshotCreate(ctx, SnapshotCreateInput{Label: label}); err == nil {
			t.Errorf("snapshot_create(label %.20q) succeeded", label)
		}
	}
}

// TestSnapshotStoreOutOfReach checks that the file tools cannot reach the
// snapshot store, and that a restore does not follow a link swapped in for
// a directory.
func TestSnapshotStoreOutOfReach(t *testing.T) {
	f := newEscapeFixture(t)
	ctx := t.Context()
	store, err := snapshot.NewStore(filepath.Join(filepath.Dir(f.ws), "state"), f.tb.ws)
	if err != nil {
		t.Fatal(err)
	}
	f.tb.snaps = store
	// Remove the ways out the fixture planted, which git would record as links.
	sandboxdtest.WriteFile(t, filepath.Join(f.ws, "d", "f.txt"), "inside\n")
	if _, _, err := f.tb.snapshotCreate(ctx, SnapshotCreateInput{}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{store.Dir(), store.Dir() + "/HEAD", store.Dir() + "/index", "../state", "../state/" + filepath.Base(store.Dir()) + "/config"} {
		if _, _, err := f.tb.read(ctx, ReadInput{FilePath: p}); err == nil {
			t.Errorf("Read(%q) succeeded", p)
		}
		if _, _, err := f.tb.ls(ctx, LSInput{Path: p}); err == nil {
			t.Errorf("LS(%q) succeeded", p)
		}
		if _, _, err := f.tb.write(ctx, WriteInput{FilePath: p + "/x", Content: "x"}); err == nil {
			t.Errorf("Write(%q) succeeded", p+"/x")
		}
	}
	sandboxdtest.MustSymlink(t, store.Dir(), filepath.Join(f.ws, "store-link"))
	if _, _, err := f.tb.read(ctx, ReadInput{FilePath: "store-link/HEAD"}); err == nil {
		t.Error("Read through a link to the store succeeded")
	}

	// A directory swapped for a link to the outside after the snapshot:
	// the restore puts the directory back and writes nothing outside.
	if err := os.RemoveAll(filepath.Join(f.ws, "d")); err != nil {
		t.Fatal(err)
	}
	sandboxdtest.MustSymlink(t, "../outside", filepath.Join(f.ws, "d"))
	// And a file swapped for a hard link to a file outside: the restore
	// replaces the link, it does not write through it.
	if err := os.Remove(filepath.Join(f.ws, "inside.txt")); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(f.outside, "secret.txt"), filepath.Join(f.ws, "inside.txt")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.tb.snapshotRestore(ctx, SnapshotRestoreInput{ID: "s1"}); err != nil {
		t.Fatal(err)
	}
	sandboxdtest.CheckFile(t, filepath.Join(f.ws, "d", "f.txt"), "inside\n")
	sandboxdtest.CheckFile(t, filepath.Join(f.ws, "inside.txt"), "inside\n")
	if fi, err := os.Lstat(filepath.Join(f.ws, "d")); err != nil || !fi.IsDir() {
		t.Errorf("d after the restore: %v, %v", fi, err)
	}
	f.checkOutsideUntouched(t)

	// A state dir inside the workspace is refused.
	for _, p := range []string{filepath.Join(f.ws, "state"), f.ws, filepath.Join(f.ws, "a", "..", "x")} {
		if _, err := snapshot.NewStore(p, f.tb.ws); err == nil {
			t.Errorf("state dir %s inside the workspace was accepted", p)
		}
	}
}

// TestSnapshotCancelKillsGit runs a git that hangs with a child of its
// own: cancelling the call kills git's whole process group, the child too.
func TestSnapshotCancelKillsGit(t *testing.T) {
	tb, _ := newTestToolbox(t)
	bin := t.TempDir()
	started := filepath.Join(bin, "started")
	if err := syscall.Mkfifo(started, 0o600); err != nil {
		t.Fatal(err)
	}
	sandboxdtest.WriteFile(t, filepath.Join(bin, "git"), fmt.Sprintf("#!/bin/sh\nsleep 600 &\necho $! > %s\nwait\n", started))
	if err := os.Chmod(filepath.Join(bin, "git"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+":/usr/bin:/bin")

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, _, err := tb.snapshotCreate(ctx, SnapshotCreateInput{})
		done <- err
	}()
	data, err := os.ReadFile(started) // blocks until the fake git has started its child
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatal(err)
	}
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pidfd)
	cancel()
	select {
	case err := <-done:
		sandboxdtest.WantErrContaining(t, err, "cancelled")
	case <-time.After(testTimeout):
		t.Fatal("snapshot_create did not return after its context was cancelled")
	}
	// A pidfd turns readable when its process has ended.
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	if n, err := unix.Poll(fds, int(testTimeout.Milliseconds())); err != nil || n != 1 {
		t.Errorf("git's child %d did not end: poll = %d, %v", pid, n, err)
	}
}
