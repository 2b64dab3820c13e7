package syncback

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"testing"

	"k8s.io/klog/v2/ktesting"
)

// treeHash is a content hash of the tree under dir: every entry's path, type, permission bits and,
// for a file, the SHA-256 of its bytes, or, for a link, its target. "" when dir does not exist.
func treeHash(t *testing.T, dir string) string {
	t.Helper()
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		return ""
	}
	var lines []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		info, err := d.Info()
		if err != nil {
			return err
		}
		line := rel + " " + info.Mode().String()
		switch {
		case info.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			line += " " + hex.EncodeToString(sum[:])
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			line += " -> " + target
		}
		lines = append(lines, line)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(lines)
	sum := sha256.Sum256([]byte(strings.Join(lines, "\n")))
	return hex.EncodeToString(sum[:])
}

// failAfter is a context whose Err says Canceled from its n-th call on: Copy asks it before every
// entry it copies, so it fails the copy at any chosen point of the walk, as a Job killed or a
// volume filled mid-copy would.
type failAfter struct {
	context.Context
	n, calls atomic.Int64
}

func (c *failAfter) Err() error {
	if c.calls.Add(1) >= c.n.Load() {
		return context.Canceled
	}
	return c.Context.Err()
}

// writeWorkspace fills a workspace with known content: nested directories, files of several
// sizes, a link inside the tree.
func writeWorkspace(t *testing.T, dir string) {
	t.Helper()
	for i := range 4 {
		writeFile(t, filepath.Join(dir, fmt.Sprintf("src/pkg%d/file.go", i)), strings.Repeat(fmt.Sprintf("line %d\n", i), 100*(i+1)), 0o644, t1)
	}
	writeFile(t, filepath.Join(dir, "README.md"), "# the agent's work\n", 0o600, t2)
	writeFile(t, filepath.Join(dir, "bin/run.sh"), "#!/bin/sh\necho hi\n", 0o755, t1)
	symlink(t, "src/pkg0/file.go", filepath.Join(dir, "main.go"))
}

// TestCopyFaultsLoseNothing (issue 24): a sync-back that fails at any point of its copy (every
// entry of the walk in turn), or against a target it cannot replace, leaves the target exactly as
// it was and the workspace exactly as it was (content hashes), leaves no staging behind, and a
// retry once the fault is gone puts the workspace's very content in the target. CopyAndRemove
// removes the workspace only after a copy that succeeded.
func TestCopyFaultsLoseNothing(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	root := t.TempDir()
	ws, target := "ns/sandboxes/c1", "ns/projects/web"
	writeWorkspace(t, filepath.Join(root, ws))
	writeFile(t, filepath.Join(root, target, "saved.txt"), "saved by an earlier sync-back\n", 0o644, t0)
	wsHash, targetHash := treeHash(t, filepath.Join(root, ws)), treeHash(t, filepath.Join(root, target))

	faults, entries := 0, 0
	for n := int64(1); ; n++ {
		fctx := &failAfter{Context: ctx}
		fctx.n.Store(n)
		err := CopyAndRemove(fctx, root, testSandboxes, ws, target)
		if err == nil {
			entries = int(n) - 1
			break
		}
		faults++
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("fault at call %d: error %v, want context.Canceled", n, err)
		}
		if got := treeHash(t, filepath.Join(root, target)); got != targetHash {
			t.Fatalf("fault at call %d: the target changed (hash %s, was %s)", n, got, targetHash)
		}
		if got := treeHash(t, filepath.Join(root, ws)); got != wsHash {
			t.Fatalf("fault at call %d: the workspace changed (hash %s, was %s)", n, got, wsHash)
		}
		if left := hiddenLeftovers(t, filepath.Join(root, "ns/projects")); len(left) != 0 {
			t.Fatalf("fault at call %d: left %v", n, left)
		}
		if n > 1000 {
			t.Fatal("the copy never finished")
		}
	}
	if faults < 10 {
		t.Errorf("only %d fault points were tried (%d entries): the walk was not covered", faults, entries)
	}
	if got := treeHash(t, filepath.Join(root, target)); got != wsHash {
		t.Errorf("after the retry the target's hash is %s, want the workspace's %s", got, wsHash)
	}
	if exists(t, filepath.Join(root, ws)) {
		t.Errorf("the workspace is still there after a copy that succeeded")
	}
	t.Logf("%d faults injected, one at each check of the walk; target and workspace hashes unchanged by each", faults)
}

// TestCopyRefusedTargetsLoseNothing: a target that cannot take the copy (a file where the target
// or its parent should be, a link in its path) fails the sync-back; target, workspace and what is
// in the way keep their content hashes.
func TestCopyRefusedTargetsLoseNothing(t *testing.T) {
	tests := map[string]func(t *testing.T, root string){
		"target is a file":         fileAt("ns/projects/web"),
		"target's parent is file":  fileAt("ns/projects"),
		"target's parent is link":  linkTo("../sandboxes", "ns/projects"),
		"target is a link to work": linkTo("../sandboxes/c1", "ns/projects/web"),
	}
	for name, setup := range tests {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			root := t.TempDir()
			writeWorkspace(t, filepath.Join(root, "ns/sandboxes/c1"))
			setup(t, root)
			before := treeHash(t, root)
			if err := CopyAndRemove(ctx, root, testSandboxes, "ns/sandboxes/c1", "ns/projects/web"); err == nil {
				t.Fatal("the sync-back succeeded into a target that cannot take it")
			}
			if after := treeHash(t, root); after != before {
				t.Errorf("the content root changed (hash %s, was %s)", after, before)
			}
		})
	}
}

// TestTwoSessionsIntoOneTargetKeepTheOlder (issue 24, item 3): two sessions whose sandboxes share
// a target sync back one after the other (the controller runs them one at a time, oldest first).
// The target holds the younger's workspace, and the older's files are not lost: they are the
// target's newest kept version, byte for byte (content hashes). Before, the younger's copy
// silently replaced the older's.
func TestTwoSessionsIntoOneTargetKeepTheOlder(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	root := t.TempDir()
	older, younger, target := "ns/sandboxes/older", "ns/sandboxes/younger", "ns/projects/shared"
	writeWorkspace(t, filepath.Join(root, older))
	writeFile(t, filepath.Join(root, older, "only-older.txt"), "the older session's file\n", 0o644, t1)
	writeFile(t, filepath.Join(root, younger, "only-younger.txt"), "the younger session's file\n", 0o644, t2)
	olderHash, youngerHash := treeHash(t, filepath.Join(root, older)), treeHash(t, filepath.Join(root, younger))

	for _, ws := range []string{older, younger} {
		if err := CopyAndRemove(ctx, root, testSandboxes, ws, target); err != nil {
			t.Fatalf("sync-back of %s: %v", ws, err)
		}
	}
	if got := treeHash(t, filepath.Join(root, target)); got != youngerHash {
		t.Errorf("the target's hash is %s, want the younger workspace's %s", got, youngerHash)
	}
	versions := versionsOf(t, filepath.Join(root, target))
	if len(versions) != 1 || treeHash(t, versions[0]) != olderHash {
		t.Errorf("versions %v, want one holding the older session's workspace (hash %s)", versions, olderHash)
	}
}

// TestVersionsRetention: after any sequence of sync-backs into a target, it holds the last
// workspace synced (an empty workspace changes nothing), and its versions directory the
// KeepVersions contents before it, newest last; older ones are removed, and an entry of the
// versions directory that is not a version is left alone.
func TestVersionsRetention(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	root := t.TempDir()
	target := "ns/projects/web"
	var hashes []string // of each workspace synced, in order
	for i := range KeepVersions + 3 {
		ws := fmt.Sprintf("ns/sandboxes/c%d", i)
		writeFile(t, filepath.Join(root, ws, "round.txt"), fmt.Sprintf("round %d\n", i), 0o644, t1)
		hashes = append(hashes, treeHash(t, filepath.Join(root, ws)))
		if i == 1 {
			writeFile(t, filepath.Join(root, "ns/projects", VersionsDir("web"), "README"), "not a version\n", 0o644, t0)
		}
		if err := CopyAndRemove(ctx, root, testSandboxes, ws, target); err != nil {
			t.Fatal(err)
		}
	}
	mkdir(t, filepath.Join(root, "ns/sandboxes/empty"), 0o755)
	if err := CopyAndRemove(ctx, root, testSandboxes, "ns/sandboxes/empty", target); err != nil {
		t.Fatal(err)
	}
	last := len(hashes) - 1
	if got := treeHash(t, filepath.Join(root, target)); got != hashes[last] {
		t.Errorf("the target holds %s, want the last workspace's %s", got, hashes[last])
	}
	var versions []string
	for _, v := range versionsOf(t, filepath.Join(root, target)) {
		if filepath.Base(v) != "README" {
			versions = append(versions, v)
		}
	}
	if len(versions) != KeepVersions {
		t.Fatalf("%d versions kept, want %d: %v", len(versions), KeepVersions, versions)
	}
	for i, v := range versions {
		if want := hashes[last-KeepVersions+i]; treeHash(t, v) != want {
			t.Errorf("version %d (%s) is not workspace %d", i, v, last-KeepVersions+i)
		}
	}
	if got := readFile(t, filepath.Join(root, "ns/projects", VersionsDir("web"), "README")); got != "not a version\n" {
		t.Errorf("a file of the versions directory that is not a version changed: %q", got)
	}
}

// TestVersionsDirMustBeReal: a versions directory that is a link (planted to send the previous
// target elsewhere in the volume) fails the sync-back, and nothing changes.
func TestVersionsDirMustBeReal(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	root := t.TempDir()
	writeWorkspace(t, filepath.Join(root, "ns/sandboxes/c1"))
	writeFile(t, filepath.Join(root, "ns/projects/web/saved.txt"), "saved\n", 0o644, t0)
	mkdir(t, filepath.Join(root, "elsewhere"), 0o755)
	symlink(t, "../../elsewhere", filepath.Join(root, "ns/projects", VersionsDir("web")))
	before := treeHash(t, root)
	if err := CopyAndRemove(ctx, root, testSandboxes, "ns/sandboxes/c1", "ns/projects/web"); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Fatalf("error %v, want the versions directory refused", err)
	}
	if after := treeHash(t, root); after != before {
		t.Errorf("the content root changed")
	}
}

// TestVersionsRetentionSettable (issue 39): a target keeps as many versions as it is asked to
// (`airlock sync --keep-versions`, a registry entry's targetVersions), not three: n sessions
// into one target with a retention of n-1 leave every session's files, byte for byte (content
// hashes), in the target or a version; a retention of 1 keeps the one before the last; 0 is
// refused and changes nothing.
func TestVersionsRetentionSettable(t *testing.T) {
	for _, keep := range []int{1, 11} {
		t.Run(fmt.Sprintf("keep %d", keep), func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			root := t.TempDir()
			target := "ns/projects/shared"
			var hashes []string
			for i := range 12 {
				ws := fmt.Sprintf("ns/sandboxes/s%d", i)
				writeWorkspace(t, filepath.Join(root, ws))
				writeFile(t, filepath.Join(root, ws, "session.txt"), fmt.Sprintf("session %d\n", i), 0o644, t1)
				hashes = append(hashes, treeHash(t, filepath.Join(root, ws)))
				if err := CopyKeepingAndRemove(ctx, root, testSandboxes, ws, target, keep); err != nil {
					t.Fatalf("sync-back %d: %v", i, err)
				}
			}
			held := map[string]bool{treeHash(t, filepath.Join(root, target)): true}
			versions := versionsOf(t, filepath.Join(root, target))
			for _, v := range versions {
				held[treeHash(t, v)] = true
			}
			if len(versions) != keep {
				t.Errorf("%d versions, want %d", len(versions), keep)
			}
			for i, h := range hashes {
				if want := i >= len(hashes)-1-keep; held[h] != want {
					t.Errorf("session %d's files kept: %v, want %v", i, held[h], want)
				}
			}
		})
	}
	t.Run("keep 0 refused", func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		root := t.TempDir()
		writeWorkspace(t, filepath.Join(root, "ns/sandboxes/c1"))
		before := treeHash(t, root)
		if err := CopyKeeping(ctx, root, "ns/sandboxes/c1", "ns/projects/web", 0); err == nil {
			t.Fatal("a retention of 0 versions was accepted")
		}
		if treeHash(t, root) != before {
			t.Error("the content root changed")
		}
	})
}
