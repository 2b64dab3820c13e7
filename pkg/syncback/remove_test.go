package syncback

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/klog/v2/ktesting"
)

const testSandboxes = "ns/sandboxes"

// exists reports whether name exists (without following a last symbolic link).
func exists(t *testing.T, name string) bool {
	t.Helper()
	_, err := os.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	return true
}

// TestRemove: a workspace (per claim, or a session's) is removed whole, read-only directories
// included; its neighbours stay, and so do the files its symbolic links point at, inside the
// content root or outside it: links are removed as links, never followed.
func TestRemove(t *testing.T) {
	for _, ws := range []string{"ns/sandboxes/c1", "ns/sandboxes/sessions/0123abcd"} {
		t.Run(ws, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			parent := t.TempDir()
			root := filepath.Join(parent, "content")
			outside := filepath.Join(parent, "outside")
			writeFile(t, filepath.Join(outside, "secret.txt"), "outside\n", 0o644, t0)
			writeFile(t, filepath.Join(root, "ns/sandboxes/c2/keep.txt"), "c2\n", 0o644, t0)
			writeFile(t, filepath.Join(root, "ns/projects/web/keep.txt"), "web\n", 0o644, t0)
			w := filepath.Join(root, ws)
			writeFile(t, filepath.Join(w, "src/main.go"), "package main\n", 0o444, t1)
			writeFile(t, filepath.Join(w, "ro/deep/f.txt"), "f\n", 0o444, t1)
			mkdir(t, filepath.Join(w, "ro/deep"), 0o555)
			mkdir(t, filepath.Join(w, "ro"), 0o555)
			symlink(t, outside, filepath.Join(w, "out-abs"))
			symlink(t, "../../../../outside", filepath.Join(w, "out-rel"))
			symlink(t, filepath.Join(outside, "secret.txt"), filepath.Join(w, "secret-link"))
			symlink(t, "../c2", filepath.Join(w, "neighbour"))
			symlink(t, filepath.Join(root, "ns/projects"), filepath.Join(w, "projects"))
			before := listTree(t, parent)

			if err := Remove(ctx, root, testSandboxes, ws); err != nil {
				t.Fatal(err)
			}
			if exists(t, w) {
				t.Errorf("workspace %s still exists", ws)
			}
			var want []string
			for _, e := range before {
				rel, _, _ := strings.Cut(e, " ")
				if wsRel := filepath.Join("content", ws); rel != wsRel && !strings.HasPrefix(rel, wsRel+"/") {
					want = append(want, e)
				}
			}
			if diff := cmp.Diff(want, listTree(t, parent)); diff != "" {
				t.Errorf("removal changed something else than the workspace (-want +got):\n%s", diff)
			}
			if got := hiddenLeftovers(t, filepath.Dir(w)); len(got) != 0 {
				t.Errorf("left behind: %v", got)
			}
		})
	}
}

// TestRemoveRefuses: nothing but a workspace the operator made is removed (a mount role's
// directory, a project, the sandboxes directory itself, another namespace's workspace, a path
// through a symbolic link); a refused removal changes nothing.
func TestRemoveRefuses(t *testing.T) {
	tests := map[string]struct {
		setup        func(t *testing.T, root string)
		dir          string
		sandboxesDir string
		wantErr      string
	}{
		"a project, outside sandboxes/":         {dir: "ns/projects/web", wantErr: "is not inside"},
		"a mount role's directory":              {dir: "ns/repos/team", wantErr: "is not inside"},
		"another namespace's workspace":         {dir: "other/sandboxes/c1", wantErr: "is not inside"},
		"the sandboxes directory itself":        {dir: "ns/sandboxes", wantErr: "is not inside"},
		"the sessions directory":                {dir: "ns/sandboxes/sessions", wantErr: "is not a workspace"},
		"a directory inside a workspace":        {dir: "ns/sandboxes/c1/src", wantErr: "is not a workspace"},
		"a directory inside a session's":        {dir: "ns/sandboxes/sessions/ab/src", wantErr: "is not a workspace"},
		"a hidden name":                         {dir: "ns/sandboxes/.c1.airlock-removing-x", wantErr: "starts with a dot"},
		"dot-dot":                               {dir: "ns/sandboxes/../projects", wantErr: `".." segments`},
		"absolute":                              {dir: "/etc", wantErr: "relative"},
		"sandboxes dir not named sandboxes":     {dir: "ns/projects/web", sandboxesDir: "ns/projects", wantErr: "must end in /sandboxes"},
		"sandboxes dir is absolute":             {dir: "ns/sandboxes/c1", sandboxesDir: "/ns/sandboxes", wantErr: "relative"},
		"sandboxes dir with dot-dot":            {dir: "ns/sandboxes/c1", sandboxesDir: "ns/../sandboxes", wantErr: `".." segments`},
		"the workspace is a link to a project":  {dir: "ns/sandboxes/link", wantErr: "is a symbolic link", setup: linkTo("../projects/web", "ns/sandboxes/link")},
		"the workspace is a link outside":       {dir: "ns/sandboxes/link", wantErr: "is a symbolic link", setup: linkTo("../../../outside", "ns/sandboxes/link")},
		"sandboxes/ is a link to the projects":  {dir: "ns2/sandboxes/web", sandboxesDir: "ns2/sandboxes", wantErr: "is a symbolic link", setup: linkTo("../ns/projects", "ns2/sandboxes")},
		"the namespace is a link outside":       {dir: "ns3/sandboxes/c1", sandboxesDir: "ns3/sandboxes", wantErr: "is a symbolic link", setup: linkTo("../outside", "ns3")},
		"sessions/ is a link to the projects":   {dir: "ns/sandboxes/sessions/web", wantErr: "is a symbolic link", setup: linkTo("../../projects", "ns/sandboxes/sessions")},
		"the workspace is a file, not a folder": {dir: "ns/sandboxes/file", wantErr: "is not a directory", setup: fileAt("ns/sandboxes/file")},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			parent := t.TempDir()
			root := filepath.Join(parent, "content")
			writeFile(t, filepath.Join(parent, "outside/sandboxes/c1/secret.txt"), "outside\n", 0o644, t0)
			writeFile(t, filepath.Join(root, "ns/projects/web/keep.txt"), "web\n", 0o644, t0)
			writeFile(t, filepath.Join(root, "ns/repos/team/keep.txt"), "team\n", 0o644, t0)
			writeFile(t, filepath.Join(root, "other/sandboxes/c1/keep.txt"), "other\n", 0o644, t0)
			writeFile(t, filepath.Join(root, "ns/sandboxes/c1/src/keep.txt"), "c1\n", 0o644, t0)
			writeFile(t, filepath.Join(root, "ns/sandboxes/sessions/ab/src/keep.txt"), "ab\n", 0o644, t0)
			if tc.setup != nil {
				tc.setup(t, root)
			}
			sandboxesDir := tc.sandboxesDir
			if sandboxesDir == "" {
				sandboxesDir = testSandboxes
			}
			before := listTree(t, parent)

			err := Remove(ctx, root, sandboxesDir, tc.dir)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Remove(%q, %q): got error %v, want one containing %q", sandboxesDir, tc.dir, err, tc.wantErr)
			}
			if diff := cmp.Diff(before, listTree(t, parent)); diff != "" {
				t.Errorf("a refused removal changed the file system (-before +after):\n%s", diff)
			}
			// CopyAndRemove refuses the same sources, before copying anything.
			err = CopyAndRemove(ctx, root, sandboxesDir, tc.dir, "ns/out")
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("CopyAndRemove(%q, %q): got error %v, want one containing %q", sandboxesDir, tc.dir, err, tc.wantErr)
			}
			if diff := cmp.Diff(before, listTree(t, parent)); diff != "" {
				t.Errorf("a refused copy and removal changed the file system (-before +after):\n%s", diff)
			}
		})
	}
}

func linkTo(target, name string) func(t *testing.T, root string) {
	return func(t *testing.T, root string) {
		t.Helper()
		mkdir(t, filepath.Dir(filepath.Join(root, name)), 0o755)
		if exists(t, filepath.Join(root, name)) {
			if err := os.RemoveAll(filepath.Join(root, name)); err != nil {
				t.Fatal(err)
			}
		}
		symlink(t, target, filepath.Join(root, name))
	}
}

func fileAt(name string) func(t *testing.T, root string) {
	return func(t *testing.T, root string) {
		t.Helper()
		writeFile(t, filepath.Join(root, name), "x", 0o644, t0)
	}
}

// TestRemoveFinishesAnInterruptedRemoval: what a killed removal left (the renamed tree) is removed
// by the next one, even once the workspace itself is gone; another workspace's is not touched; a
// workspace that never existed is not an error.
func TestRemoveFinishesAnInterruptedRemoval(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "ns/sandboxes/.c1.airlock-removing-abc/half.txt"), "half\n", 0o644, t0)
	mkdir(t, filepath.Join(root, "ns/sandboxes/.c1.airlock-removing-abc"), 0o555)
	writeFile(t, filepath.Join(root, "ns/sandboxes/.c1-r1.airlock-removing-xyz/other.txt"), "other\n", 0o644, t0)
	writeFile(t, filepath.Join(root, "ns/sandboxes/c1-r1/keep.txt"), "keep\n", 0o644, t0)

	if err := Remove(ctx, root, testSandboxes, "ns/sandboxes/c1"); err != nil {
		t.Fatal(err)
	}
	want := []string{".c1-r1.airlock-removing-xyz"}
	if diff := cmp.Diff(want, hiddenLeftovers(t, filepath.Join(root, "ns/sandboxes"))); diff != "" {
		t.Errorf("leftovers (-want +got):\n%s", diff)
	}
	if got := readFile(t, filepath.Join(root, "ns/sandboxes/c1-r1/keep.txt")); got != "keep\n" {
		t.Errorf("another workspace changed: %q", got)
	}
	// Nothing there at all, not even sandboxes/: nothing to do.
	if err := Remove(ctx, root, "other/sandboxes", "other/sandboxes/c1"); err != nil {
		t.Errorf("removing a workspace that never existed: %v", err)
	}
	if exists(t, filepath.Join(root, "other")) {
		t.Error("removing a workspace that never existed created its parents")
	}
}

// TestCopyAndRemove: the workspace is copied into the target, then removed.
func TestCopyAndRemove(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "ns/sandboxes/c1/src/main.go"), "package main\n", 0o644, t1)
	writeFile(t, filepath.Join(root, "ns/projects/web/old.txt"), "old\n", 0o644, t0)

	if err := CopyAndRemove(ctx, root, testSandboxes, "ns/sandboxes/c1", "ns/projects/web"); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(root, "ns/projects/web/src/main.go")); got != "package main\n" {
		t.Errorf("copied main.go = %q", got)
	}
	if exists(t, filepath.Join(root, "ns/projects/web/old.txt")) {
		t.Error("the target was not replaced whole")
	}
	if exists(t, filepath.Join(root, "ns/sandboxes/c1")) {
		t.Error("the workspace is still there after its copy")
	}
	for _, dir := range []string{"ns/sandboxes", "ns/projects"} {
		if got := hiddenLeftovers(t, filepath.Join(root, dir)); len(got) != 0 {
			t.Errorf("left behind in %s: %v", dir, got)
		}
	}
}

// TestCopyAndRemoveKeepsTheWorkspaceWhenTheCopyFails: a copy that fails (a target that cannot be
// replaced, a run cancelled mid-copy) removes nothing: the workspace is still there to retry.
func TestCopyAndRemoveKeepsTheWorkspaceWhenTheCopyFails(t *testing.T) {
	tests := map[string]struct {
		setup   func(t *testing.T, root string)
		cancel  bool
		wantErr string
	}{
		"target is a file":          {setup: fileAt("ns/projects/web"), wantErr: "exists and is not a directory"},
		"target's parent is a link": {setup: linkTo("../sandboxes", "ns/projects"), wantErr: "is a symbolic link"},
		"cancelled":                 {cancel: true, wantErr: context.Canceled.Error()},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			root := t.TempDir()
			writeFile(t, filepath.Join(root, "ns/sandboxes/c1/src/main.go"), "package main\n", 0o644, t1)
			if tc.setup != nil {
				tc.setup(t, root)
			}
			before := listTree(t, filepath.Join(root, "ns/sandboxes"))
			if tc.cancel {
				var cancel context.CancelFunc
				ctx, cancel = context.WithCancel(ctx)
				cancel()
			}
			err := CopyAndRemove(ctx, root, testSandboxes, "ns/sandboxes/c1", "ns/projects/web")
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("got error %v, want one containing %q", err, tc.wantErr)
			}
			if diff := cmp.Diff(before, listTree(t, filepath.Join(root, "ns/sandboxes"))); diff != "" {
				t.Errorf("the workspace changed after a failed copy (-before +after):\n%s", diff)
			}
		})
	}
}

// TestCopyAndRemoveAfterAnInterruptedRemoval: a retry that finds the workspace already renamed
// away (the earlier run copied it, then was killed while removing it) copies nothing over the
// target and finishes the removal; one that finds no workspace at all leaves the target alone.
func TestCopyAndRemoveAfterAnInterruptedRemoval(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "ns/projects/web/main.go"), "the saved copy\n", 0o644, t1)
	writeFile(t, filepath.Join(root, "ns/sandboxes/.c1.airlock-removing-abc/main.go"), "half\n", 0o644, t1)
	before := listTree(t, filepath.Join(root, "ns/projects"))

	if err := CopyAndRemove(ctx, root, testSandboxes, "ns/sandboxes/c1", "ns/projects/web"); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, listTree(t, filepath.Join(root, "ns/projects"))); diff != "" {
		t.Errorf("the target changed (-before +after):\n%s", diff)
	}
	if got := hiddenLeftovers(t, filepath.Join(root, "ns/sandboxes")); len(got) != 0 {
		t.Errorf("left behind: %v", got)
	}
	if err := CopyAndRemove(ctx, root, testSandboxes, "ns/sandboxes/c2", "ns/projects/other"); err != nil {
		t.Fatalf("a workspace that was never made: %v", err)
	}
	if exists(t, filepath.Join(root, "ns/projects/other")) {
		t.Error("a workspace that was never made created a target")
	}
}
