package snapshot

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/confine"
)

// newStoreFixture returns a store over a fresh workspace, with the store's
// lock held for the test, and the workspace's path.
func newStoreFixture(t *testing.T) (*Store, string) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatalf("the snapshot store needs git: %v", err)
	}
	top := t.TempDir()
	ws := filepath.Join(top, "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	r, err := confine.NewResolver(ws)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	s, err := NewStore(filepath.Join(top, "state"), r)
	if err != nil {
		t.Fatal(err)
	}
	release, err := s.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
	return s, ws
}

// put writes files (path: content) into the workspace ws.
func put(t *testing.T, ws string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(ws, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestStoreRoundTrip: a snapshot is listed and found by its name or id; the
// changes and the patch since it name what changed; a restore brings the
// workspace back to it (files removed since are back, files added since
// are gone); taking a name again moves the older snapshot to an id.
func TestStoreRoundTrip(t *testing.T) {
	s, ws := newStoreFixture(t)
	ctx := t.Context()
	put(t, ws, map[string]string{"a.txt": "one\n", "sub/b.txt": "two\n"})
	first, files, replaced, err := s.Create(ctx, "before-change", "the first")
	if err != nil {
		t.Fatal(err)
	}
	if first.ID != "before-change" || first.Label != "the first" || files != 2 || replaced != "" || first.Commit() == "" {
		t.Fatalf("Create = %+v, %d files, replaced %q", first, files, replaced)
	}
	put(t, ws, map[string]string{"a.txt": "changed\n", "c.txt": "new\n"})
	if err := os.Remove(filepath.Join(ws, "sub", "b.txt")); err != nil {
		t.Fatal(err)
	}
	if err := s.Stage(ctx); err != nil {
		t.Fatal(err)
	}
	changes, err := s.Changes(ctx, first.Commit(), "")
	if err != nil {
		t.Fatal(err)
	}
	want := []FileChange{{Path: "a.txt", Status: "modified"}, {Path: "c.txt", Status: "added"}, {Path: "sub/b.txt", Status: "deleted"}}
	if !slices.Equal(changes, want) {
		t.Errorf("Changes = %v, want %v", changes, want)
	}
	var patch bytes.Buffer
	if err := s.Patch(ctx, first.Commit(), "", &patch); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(patch.String(), "-one\n+changed\n") {
		t.Errorf("Patch = %q", patch.String())
	}

	found, err := s.Find(ctx, "before-change")
	if err != nil || found.Commit() != first.Commit() {
		t.Fatalf("Find = %+v, %v", found, err)
	}
	if err := s.Restore(ctx, found); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"a.txt": "one\n", "sub/b.txt": "two\n"} {
		if got, err := os.ReadFile(filepath.Join(ws, name)); err != nil || string(got) != want {
			t.Errorf("after Restore %s = %q, %v, want %q", name, got, err, want)
		}
	}
	if _, err := os.Stat(filepath.Join(ws, "c.txt")); !os.IsNotExist(err) {
		t.Errorf("after Restore c.txt is there: %v", err)
	}

	again, _, replaced, err := s.Create(ctx, "before-change", "")
	if err != nil {
		t.Fatal(err)
	}
	all, err := s.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, sn := range all {
		ids = append(ids, sn.ID)
	}
	if again.ID != "before-change" || replaced == "" || !slices.Contains(ids, replaced) || len(ids) != 2 {
		t.Errorf("taking the name again: %+v, replaced %q, snapshots %v", again, replaced, ids)
	}
	if _, err := s.Find(ctx, "s99"); err == nil {
		t.Error("Find of a snapshot that is not there succeeded")
	}
}

// TestStoreRefuses: a state directory inside the workspace (or reaching it
// through a symbolic link) is refused, and so are names that are no git
// ref component or look like generated ids.
func TestStoreRefuses(t *testing.T) {
	top := t.TempDir()
	ws := filepath.Join(top, "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(ws, filepath.Join(top, "link")); err != nil {
		t.Fatal(err)
	}
	r, err := confine.NewResolver(ws)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for _, dir := range []string{filepath.Join(ws, "state"), ws, filepath.Join(top, "link", "state")} {
		if _, err := NewStore(dir, r); err == nil {
			t.Errorf("NewStore(%s) in the workspace succeeded", dir)
		}
	}
	for _, name := range []string{"s7", "a..b", "-x", "a b", "a/b", "x.lock", strings.Repeat("n", NameBytes+1), "@", "a\x00"} {
		if err := CheckName(name); err == nil {
			t.Errorf("CheckName(%q) = nil", name)
		}
	}
	if err := CheckName("before-refactor_2"); err != nil {
		t.Errorf("CheckName of a good name: %v", err)
	}
	s, _ := newStoreFixture(t)
	if _, _, _, err := s.Create(context.Background(), "a..b", ""); err == nil {
		t.Error("Create with a bad name succeeded")
	}
}
