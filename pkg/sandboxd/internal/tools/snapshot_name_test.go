package tools

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/sandboxdtest"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/snapshot"
)

// snapshotIDs returns the ids snapshot_list gives, oldest first.
func snapshotIDs(t *testing.T, tb *Toolbox) []string {
	t.Helper()
	_, list, err := tb.snapshotList(t.Context(), SnapshotListInput{})
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{}
	for _, sn := range list.Snapshots {
		ids = append(ids, sn.ID)
	}
	return ids
}

// TestSnapshotNames: CodeGen-Sandbox's fields. snapshot_create takes a
// name the agent chooses and a description; snapshot_restore and
// snapshot_diff find it by name; a name taken again moves the older
// snapshot to a generated id, so that nothing is lost.
func TestSnapshotNames(t *testing.T) {
	tb, ws := newTestToolbox(t)
	ctx := t.Context()
	sandboxdtest.WriteFile(t, filepath.Join(ws, "a.txt"), "first\n")

	_, c, err := tb.snapshotCreate(ctx, SnapshotCreateInput{Name: "before-refactor", Description: "the start"})
	if err != nil {
		t.Fatal(err)
	}
	if c.ID != "before-refactor" || c.Label != "the start" || c.Replaced != "" || c.Files != 1 {
		t.Errorf("snapshot_create = %+v, want before-refactor labelled the start", c)
	}

	sandboxdtest.WriteFile(t, filepath.Join(ws, "a.txt"), "second\n")
	_, d, err := tb.snapshotDiff(ctx, SnapshotDiffInput{Name: "before-refactor"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []snapshot.FileChange{{Path: "a.txt", Status: "modified"}}; d.From != "before-refactor" || !cmp.Equal(want, d.Changes) {
		t.Errorf("snapshot_diff {name} = %+v", d)
	}

	// The name again: the new state takes it, the first moves to s1.
	res, c, err := tb.snapshotCreate(ctx, SnapshotCreateInput{Name: "before-refactor", Label: "again"})
	if err != nil {
		t.Fatal(err)
	}
	if c.ID != "before-refactor" || c.Replaced != "s1" {
		t.Errorf("snapshot_create of a taken name = %+v, want the older one moved to s1", c)
	}
	if text := resultText(t, res); !strings.Contains(text, "is now s1") {
		t.Errorf("the result does not say where the older snapshot went: %q", text)
	}

	sandboxdtest.WriteFile(t, filepath.Join(ws, "a.txt"), "third\n")
	_, r, err := tb.snapshotRestore(ctx, SnapshotRestoreInput{Name: "before-refactor"})
	if err != nil {
		t.Fatal(err)
	}
	if r.ID != "before-refactor" || r.Backup != "s2" {
		t.Errorf("snapshot_restore {name} = %+v", r)
	}
	sandboxdtest.CheckFile(t, filepath.Join(ws, "a.txt"), "second\n")
	if _, _, err := tb.snapshotRestore(ctx, SnapshotRestoreInput{ID: "s1"}); err != nil {
		t.Fatal(err)
	}
	sandboxdtest.CheckFile(t, filepath.Join(ws, "a.txt"), "first\n")
	// id and name alike are one field given twice.
	if _, _, err := tb.snapshotRestore(ctx, SnapshotRestoreInput{ID: "s2", Name: "s2"}); err != nil {
		t.Fatal(err)
	}
	sandboxdtest.CheckFile(t, filepath.Join(ws, "a.txt"), "third\n")

	got := snapshotIDs(t, tb)
	for _, want := range []string{"before-refactor", "s1", "s2", "s3", "s4"} {
		if !strings.Contains(strings.Join(got, " "), want) {
			t.Errorf("snapshot_list = %v, lacks %s", got, want)
		}
	}
	if len(got) != 5 {
		t.Errorf("snapshot_list = %v, want 5 snapshots", got)
	}
}

// TestSnapshotNameFieldsConflict: two fields that mean one thing, given
// different values, are refused, as is a restore or diff that names
// nothing; nothing is created.
func TestSnapshotNameFieldsConflict(t *testing.T) {
	tb, ws := newTestToolbox(t)
	ctx := t.Context()
	sandboxdtest.WriteFile(t, filepath.Join(ws, "a.txt"), "a\n")
	if _, _, err := tb.snapshotCreate(ctx, SnapshotCreateInput{Description: "one", Label: "two"}); err == nil || !strings.Contains(err.Error(), "differ") {
		t.Errorf("snapshot_create with description and label differing: %v", err)
	}
	if _, _, err := tb.snapshotCreate(ctx, SnapshotCreateInput{Name: "x"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := tb.snapshotRestore(ctx, SnapshotRestoreInput{ID: "x", Name: "y"}); err == nil || !strings.Contains(err.Error(), "differ") {
		t.Errorf("snapshot_restore with id and name differing: %v", err)
	}
	if _, _, err := tb.snapshotDiff(ctx, SnapshotDiffInput{ID: "x", Name: "y"}); err == nil || !strings.Contains(err.Error(), "differ") {
		t.Errorf("snapshot_diff with id and name differing: %v", err)
	}
	if _, _, err := tb.snapshotRestore(ctx, SnapshotRestoreInput{}); err == nil || !strings.Contains(err.Error(), "required") {
		t.Errorf("snapshot_restore without id or name: %v", err)
	}
	if _, _, err := tb.snapshotDiff(ctx, SnapshotDiffInput{}); err == nil || !strings.Contains(err.Error(), "required") {
		t.Errorf("snapshot_diff without id or name: %v", err)
	}
	if d := cmp.Diff([]string{"x"}, snapshotIDs(t, tb)); d != "" {
		t.Errorf("snapshots after the refused calls (-want +got):\n%s", d)
	}
	sandboxdtest.CheckFile(t, filepath.Join(ws, "a.txt"), "a\n")
}

// TestSnapshotRefusesBadNames: a name is a git ref component; names git
// would refuse, read as a flag, walk the ref tree or take a generated
// id's form are tool errors that create nothing and touch no ref.
func TestSnapshotRefusesBadNames(t *testing.T) {
	tb, ws := newTestToolbox(t)
	ctx := t.Context()
	sandboxdtest.WriteFile(t, filepath.Join(ws, "a.txt"), "a\n")
	if _, _, err := tb.snapshotCreate(ctx, SnapshotCreateInput{Name: "keep"}); err != nil {
		t.Fatal(err)
	}
	bad := []string{
		"..", "a..b", ".", ".hidden", "a.", "a.lock", "/", "a/b", "../keep", "refs/heads/main", "@", "a@{1}", "@{-1}",
		"-rf", "--help", "-", "a b", "a\tb", "a\nb", "a\x00b", "a\x7fb", "\x1b[31m", "a~1", "a^", "a:b", "a?", "a*", "a[", `a\b`,
		"é", "a\u202eb", "s1", "s0", "s01", "s99999999999", strings.Repeat("x", snapshot.NameBytes+1),
	}
	for _, name := range bad {
		if _, _, err := tb.snapshotCreate(ctx, SnapshotCreateInput{Name: name}); err == nil {
			t.Errorf("snapshot_create {name: %q} succeeded", name)
		}
		if name == "s1" {
			continue // a generated id, which restore and diff take
		}
		if _, _, err := tb.snapshotRestore(ctx, SnapshotRestoreInput{Name: name}); err == nil {
			t.Errorf("snapshot_restore {name: %q} succeeded", name)
		}
		if _, _, err := tb.snapshotDiff(ctx, SnapshotDiffInput{Name: name}); err == nil {
			t.Errorf("snapshot_diff {name: %q} succeeded", name)
		}
	}
	if d := cmp.Diff([]string{"keep"}, snapshotIDs(t, tb)); d != "" {
		t.Errorf("snapshots after the refused names (-want +got):\n%s", d)
	}
	refs := mustGitStore(t, tb, "for-each-ref", "--format=%(refname)")
	if refs != "refs/airlock/snapshots/keep\n" {
		t.Errorf("the store's refs after the refused names = %q", refs)
	}
}

// TestSnapshotNamesAreRefComponents: every name snapshot.CheckName accepts
// is one git check-ref-format accepts as a component under the store's
// ref prefix (the rules are a subset of git's, this checks they stay so).
func TestSnapshotNamesAreRefComponents(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("git is needed: snapshots run it")
	}
	good := []string{"a", "A", "0", "_", "before-refactor", "v1.2.3", "a-", "a_b.c-d", "s", "s1a", "sx1", "S1", "HEAD", "lock",
		"a.locked", "x" + strings.Repeat("y", snapshot.NameBytes-1)}
	for _, name := range good {
		if err := snapshot.CheckName(name); err != nil {
			t.Errorf("snapshot.CheckName(%q) = %v", name, err)
			continue
		}
		out, err := exec.Command("git", "check-ref-format", snapshot.Refs+name).CombinedOutput()
		if err != nil {
			t.Errorf("git check-ref-format refuses %s%s: %v %s", snapshot.Refs, name, err, out)
		}
	}
	// And the other way round for a sample: what git refuses, so does sandboxd.
	for _, name := range []string{"..", "a..b", ".a", "a.", "a.lock", "@{", "a b", "a~", "a^", "a:", "a?", "a*", "a["} {
		if exec.Command("git", "check-ref-format", snapshot.Refs+name).Run() == nil {
			t.Errorf("git accepts %q: the sample is wrong", name)
		}
		if snapshot.CheckName(name) == nil {
			t.Errorf("snapshot.CheckName(%q) accepts what git refuses", name)
		}
	}
}

// mustGitStore runs git on tb's snapshot store.
func mustGitStore(t *testing.T, tb *Toolbox, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"--git-dir=" + tb.snaps.Dir()}, args...)...)
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return string(out)
}
