// Package snapshot is sandboxd's snapshot store: a git directory outside
// the workspace, used with --git-dir=<store> --work-tree=<workspace> and
// the store's own index, so that the workspace's own repository (its .git, HEAD, index, refs and
// config) is never read nor written, and the file tools, confined to the
// workspace, cannot reach it. A snapshot is a commit of the whole workspace
// (ignored files included) under refs/airlock/snapshots/<id>. Left out:
// every .git entry, nested repositories (a directory below the top with a
// .git of its own: restore leaves them as they are) and sandboxd's own
// transient files (the /readyz probe, Write's temporary files).
package snapshot

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/confine"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/outcap"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/procgroup"
)

const (
	// Timeout bounds one snapshot operation (all of its git runs).
	Timeout = 10 * time.Minute
	// Refs is where snapshots live in the store.
	Refs = "refs/airlock/snapshots/"
	// gitStderrBytes is how much of git's stderr an error quotes.
	gitStderrBytes = 4 << 10
	// LabelBytes bounds a snapshot's label.
	LabelBytes = 200
)

// errNoGit is the tool error when git is not installed.
var errNoGit = errors.New("snapshots need git, which is not installed in this sandbox (not on PATH); use Bash (cp -a, tar) to save a copy instead")

// gitConfig is passed to every git run: no hooks, no line-ending or other
// conversion, no background maintenance, paths printed as they are.
var gitConfig = []string{
	"core.autocrlf=false", "core.safecrlf=false", "core.symlinks=true", "core.filemode=true",
	"core.quotepath=false", "core.hooksPath=/dev/null", "core.fsmonitor=false", "core.untrackedCache=false",
	"core.bare=false", "core.logAllRefUpdates=false", "gc.auto=0", "maintenance.auto=false",
	"advice.addEmbeddedRepo=false", "advice.detachedHead=false",
}

// gitAttributes turns off, for every path, the attributes of the
// workspace's .gitattributes that would make a snapshot differ from the
// bytes on disk (end-of-line conversion, filters, ident, encodings).
const gitAttributes = "* -text -eol -filter -ident -working-tree-encoding\n"

// Store runs git on the store. One operation runs at a time.
type Store struct {
	dir      string // the store: a git directory
	workTree string
	root     *os.Root // the workspace, for the walk that finds nested repositories
	lock     chan struct{}
	ready    bool // the store exists; under lock
}

// Dir is the store's git directory.
func (s *Store) Dir() string { return s.dir }

// NewStore returns the store of the workspace ws under stateDir,
// which must not lie inside the workspace. Nothing is created until the
// first snapshot.
func NewStore(stateDir string, ws *confine.Resolver) (*Store, error) {
	abs, err := filepath.Abs(stateDir)
	if err != nil {
		return nil, fmt.Errorf("state dir %q: %w", stateDir, err)
	}
	for _, base := range []string{ws.Dir(), ws.Real()} {
		for _, p := range []string{abs, resolveExisting(abs)} {
			if within(p, base) {
				return nil, fmt.Errorf("state dir %s is inside the workspace %s: the snapshot store must be out of the file tools' reach", stateDir, ws.Dir())
			}
		}
	}
	sum := sha256.Sum256([]byte(ws.Real()))
	return &Store{
		dir:      filepath.Join(abs, "snapshots-"+hex.EncodeToString(sum[:6])+".git"),
		workTree: ws.Dir(),
		root:     ws.Root(),
		lock:     make(chan struct{}, 1),
	}, nil
}

// within reports whether p is base or lies below it.
func within(p, base string) bool {
	rel, err := filepath.Rel(base, p)
	return err == nil && (rel == "." || filepath.IsLocal(rel))
}

// resolveExisting evaluates the symbolic links of the longest existing
// prefix of the absolute path p.
func resolveExisting(p string) string {
	rest := ""
	for cur := p; ; cur = filepath.Dir(cur) {
		if real, err := filepath.EvalSymlinks(cur); err == nil {
			return filepath.Join(real, rest)
		}
		if cur == filepath.Dir(cur) {
			return p
		}
		rest = filepath.Join(filepath.Base(cur), rest)
	}
}

// Acquire takes the store's lock, or gives up when ctx ends.
func (s *Store) Acquire(ctx context.Context) (func(), error) {
	select {
	case s.lock <- struct{}{}:
		return func() { <-s.lock }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// init creates the store on first use. s.lock is held.
func (s *Store) init(ctx context.Context) error {
	if s.ready {
		return nil
	}
	if _, err := os.Stat(filepath.Join(s.dir, "HEAD")); err != nil {
		if err := os.MkdirAll(filepath.Dir(s.dir), 0o700); err != nil {
			return fmt.Errorf("creating the snapshot store: %v", err)
		}
		if _, err := s.run(ctx, nil, nil, "init", "--quiet", "--bare", "--template=", s.dir); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(filepath.Join(s.dir, "info"), 0o700); err != nil {
		return fmt.Errorf("creating the snapshot store: %v", err)
	}
	if err := os.WriteFile(filepath.Join(s.dir, "info", "attributes"), []byte(gitAttributes), 0o600); err != nil {
		return fmt.Errorf("creating the snapshot store: %v", err)
	}
	s.ready = true
	return nil
}

// git runs git on the store and the workspace, with stdin, and returns its
// stdout (or writes it to out, when out is not nil).
func (s *Store) git(ctx context.Context, stdin []byte, out io.Writer, args ...string) ([]byte, error) {
	full := []string{"--git-dir=" + s.dir, "--work-tree=" + s.workTree}
	for _, c := range gitConfig {
		full = append(full, "-c", c)
	}
	return s.run(ctx, stdin, out, append(full, args...)...)
}

// run runs git with args in a process group of its own, killed whole when
// ctx ends; the environment is sandboxd's PATH and nothing else of it, so
// that no GIT_* variable, global or system configuration reaches git.
func (s *Store) run(ctx context.Context, stdin []byte, out io.Writer, args ...string) ([]byte, error) {
	gitPath, err := exec.LookPath("git")
	if err != nil {
		return nil, errNoGit
	}
	cmd := exec.CommandContext(ctx, gitPath, args...)
	cmd.Dir = filepath.Dir(s.dir)
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + s.dir, "XDG_CONFIG_HOME=" + s.dir, "LANG=C", "LC_ALL=C",
		"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_TERMINAL_PROMPT=0", "GIT_INDEX_FILE=" + filepath.Join(s.dir, "index"),
		"GIT_AUTHOR_NAME=airlock-sandboxd", "GIT_AUTHOR_EMAIL=sandboxd@airlock.invalid",
		"GIT_COMMITTER_NAME=airlock-sandboxd", "GIT_COMMITTER_EMAIL=sandboxd@airlock.invalid",
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { procgroup.KillGroup(cmd.Process.Pid); return nil }
	cmd.WaitDelay = procgroup.DrainGrace
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stdout bytes.Buffer
	if out != nil {
		cmd.Stdout = out
	} else {
		cmd.Stdout = &stdout
	}
	stderr := outcap.New(gitStderrBytes)
	cmd.Stderr = stderr
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("git %s: cancelled or timed out: %v", args[firstVerb(args)], ctx.Err())
		}
		return nil, fmt.Errorf("git %s failed (%v): %s", args[firstVerb(args)], err, strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}

// firstVerb returns the index of the git subcommand in args.
func firstVerb(args []string) int {
	for i := 0; i < len(args); i++ {
		switch {
		case args[i] == "-c":
			i++
		case strings.HasPrefix(args[i], "-"):
		default:
			return i
		}
	}
	return 0
}

// pathspecs returns what `git add` takes from the workspace: all of it, but
// nested repositories and sandboxd's transient files.
func (s *Store) pathspecs(ctx context.Context) ([]byte, error) {
	specs := []string{".", ":(exclude,glob)**/.airlock-readyz-*", ":(exclude,glob)**/.*.airlock-*.tmp"}
	visited := 0
	err := fs.WalkDir(s.root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == "." {
				return err
			}
			return nil
		}
		if !d.IsDir() || p == "." {
			return nil
		}
		if visited++; visited%1024 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		if d.Name() == ".git" {
			return fs.SkipDir
		}
		if _, err := s.root.Lstat(path.Join(p, ".git")); err == nil {
			specs = append(specs, ":(exclude,literal)"+p)
			return fs.SkipDir
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("walking the workspace: %v", err)
	}
	return []byte(strings.Join(specs, "\x00") + "\x00"), nil
}

// Stage makes the store's index the workspace as it is now.
func (s *Store) Stage(ctx context.Context) error {
	specs, err := s.pathspecs(ctx)
	if err != nil {
		return err
	}
	_, err = s.git(ctx, specs, nil, "add", "--all", "--force", "--pathspec-from-file=-", "--pathspec-file-nul")
	return err
}

// Snapshot is one snapshot as the tools report it.
type Snapshot struct {
	ID      string `json:"id" jsonschema:"the snapshot's id, e.g. s3"`
	Label   string `json:"label,omitempty" jsonschema:"the label it was given"`
	Created string `json:"created" jsonschema:"when it was taken (RFC 3339)"`
	commit  string
}

// Commit is the snapshot's commit in the store.
func (sn Snapshot) Commit() string { return sn.commit }

// Create takes a snapshot of the workspace, under name or, when name is
// empty, a generated id. A name already taken is given to the new
// snapshot and the older one moved to a generated id (replaced), in one
// ref transaction: nothing is lost. s.lock is held.
func (s *Store) Create(ctx context.Context, name, label string) (sn Snapshot, files int, replaced string, err error) {
	if name != "" {
		if err := CheckName(name); err != nil {
			return Snapshot{}, 0, "", err
		}
	}
	if err := s.init(ctx); err != nil {
		return Snapshot{}, 0, "", err
	}
	if err := s.Stage(ctx); err != nil {
		return Snapshot{}, 0, "", err
	}
	tree, err := s.git(ctx, nil, nil, "write-tree")
	if err != nil {
		return Snapshot{}, 0, "", err
	}
	listed, err := s.git(ctx, nil, nil, "ls-files", "-z")
	if err != nil {
		return Snapshot{}, 0, "", err
	}
	commit, err := s.git(ctx, []byte(label+"\n"), nil, "commit-tree", strings.TrimSpace(string(tree)))
	if err != nil {
		return Snapshot{}, 0, "", err
	}
	all, err := s.List(ctx)
	if err != nil {
		return Snapshot{}, 0, "", err
	}
	next := "s" + strconv.Itoa(nextSnapshotNumber(all))
	c := strings.TrimSpace(string(commit))
	var refs strings.Builder // the transaction git update-ref --stdin runs, all or nothing
	id := next
	if name != "" {
		id = name
		if i := slices.IndexFunc(all, func(o Snapshot) bool { return o.ID == name }); i >= 0 {
			replaced = next
			fmt.Fprintf(&refs, "create %s%s %s\n", Refs, next, all[i].commit)
			fmt.Fprintf(&refs, "update %s%s %s %s\n", Refs, name, c, all[i].commit)
		}
	}
	if replaced == "" {
		fmt.Fprintf(&refs, "create %s%s %s\n", Refs, id, c)
	}
	if _, err := s.git(ctx, []byte(refs.String()), nil, "update-ref", "--stdin"); err != nil {
		return Snapshot{}, 0, "", err
	}
	return Snapshot{ID: id, Label: label, Created: time.Now().UTC().Format(time.RFC3339), commit: c}, bytes.Count(listed, []byte{0}), replaced, nil
}

// nextSnapshotNumber returns the number of the next generated id: one more
// than the highest there is.
func nextSnapshotNumber(all []Snapshot) int {
	n := 0
	for _, sn := range all {
		n = max(n, snapshotNumber(sn.ID))
	}
	return n + 1
}

// compareSnapshots orders snapshots oldest first: by creation time (to the
// second, as git records it), then generated ids by number, before names,
// which sort by name.
func compareSnapshots(a, b Snapshot) int {
	if c := strings.Compare(a.Created, b.Created); c != 0 {
		return c
	}
	na, nb := snapshotNumber(a.ID), snapshotNumber(b.ID)
	switch {
	case na != 0 && nb != 0:
		return na - nb
	case na != 0:
		return -1
	case nb != 0:
		return 1
	}
	return strings.Compare(a.ID, b.ID)
}

// List returns the snapshots, oldest first. s.lock is held.
func (s *Store) List(ctx context.Context) ([]Snapshot, error) {
	if err := s.init(ctx); err != nil {
		return nil, err
	}
	out, err := s.git(ctx, nil, nil, "for-each-ref", "--format=%(refname:lstrip=3)%00%(objectname)%00%(committerdate:iso-strict)%00%(contents:subject)", Refs)
	if err != nil {
		return nil, err
	}
	var all []Snapshot
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.SplitN(line, "\x00", 4)
		if len(f) != 4 || !isSnapshotID(f[0]) {
			continue
		}
		created := f[2]
		if t, err := time.Parse(time.RFC3339, created); err == nil {
			created = t.UTC().Format(time.RFC3339)
		}
		all = append(all, Snapshot{ID: f[0], commit: f[1], Created: created, Label: f[3]})
	}
	slices.SortFunc(all, compareSnapshots)
	return all, nil
}

// Find returns the snapshot id. s.lock is held.
func (s *Store) Find(ctx context.Context, id string) (Snapshot, error) {
	if !isSnapshotID(id) {
		return Snapshot{}, fmt.Errorf("%q is not a snapshot id: ids are s1, s2, ... or the names given to snapshot_create, as snapshot_list gives them", id)
	}
	all, err := s.List(ctx)
	if err != nil {
		return Snapshot{}, err
	}
	for _, sn := range all {
		if sn.ID == id {
			return sn, nil
		}
	}
	var ids []string
	for _, sn := range all {
		ids = append(ids, sn.ID)
	}
	if len(ids) == 0 {
		return Snapshot{}, fmt.Errorf("no snapshot %s: there are no snapshots yet (take one with snapshot_create)", id)
	}
	return Snapshot{}, fmt.Errorf("no snapshot %s: the snapshots are %s", id, strings.Join(ids, ", "))
}

// snapshotNumber returns n for an id "s<n>" (n ≥ 1), else 0.
func snapshotNumber(id string) int {
	digits, ok := strings.CutPrefix(id, "s")
	if !ok || digits == "" || len(digits) > 9 || digits[0] == '0' {
		return 0
	}
	n := 0
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0
		}
		n = n*10 + int(c-'0')
	}
	return n
}

// NameBytes bounds a snapshot name.
const NameBytes = 100

// isSnapshotID reports whether id is a generated id or a valid name.
func isSnapshotID(id string) bool {
	return snapshotNumber(id) != 0 || CheckName(id) == nil
}

// CheckName checks a name an agent gives a snapshot. It becomes a
// ref component (refs/airlock/snapshots/<name>), so it is held to a subset
// of what git check-ref-format allows: ASCII letters, digits, '_', '.' and
// '-', the first a letter, digit or '_' (no dotfile, nothing git or a
// shell would read as a flag), no "..", not ending in '.' or ".lock", no
// '/', '@', control or space characters. 's' followed only by digits is
// kept for generated ids.
func CheckName(name string) error {
	switch {
	case name == "":
		return errors.New("the snapshot name is empty")
	case len(name) > NameBytes:
		return fmt.Errorf("the snapshot name is %d bytes, more than %d", len(name), NameBytes)
	case !isNameStart(name[0]):
		return fmt.Errorf("snapshot name %q must start with a letter, a digit or _", name)
	case strings.Contains(name, ".."):
		return fmt.Errorf("snapshot name %q must not contain ..", name)
	case strings.HasSuffix(name, ".") || strings.HasSuffix(name, ".lock"):
		return fmt.Errorf("snapshot name %q must not end in . or .lock", name)
	case isGeneratedForm(name):
		return fmt.Errorf("snapshot name %q has the form of a generated id (s followed by digits): choose another", name)
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; !isNameStart(c) && c != '.' && c != '-' {
			return fmt.Errorf("snapshot name %q may hold only letters, digits, _, . and - (not %q)", name, name[i:i+1])
		}
	}
	return nil
}

func isNameStart(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_'
}

// isGeneratedForm reports whether name is 's' followed by digits only.
func isGeneratedForm(name string) bool {
	digits, ok := strings.CutPrefix(name, "s")
	return ok && digits != "" && strings.Trim(digits, "0123456789") == ""
}

// FileChange is one file a diff names.
type FileChange struct {
	Path   string `json:"path" jsonschema:"path of the file, relative to the workspace"`
	Status string `json:"status" jsonschema:"added, modified, deleted or type_changed"`
}

// Changes lists the files that differ between two commits, or between a
// commit and the index (to == "").
func (s *Store) Changes(ctx context.Context, from, to string) ([]FileChange, error) {
	args := []string{"diff", "--no-ext-diff", "--no-textconv", "--no-renames", "--name-status", "-z"}
	if to == "" {
		args = append(args, "--cached", from)
	} else {
		args = append(args, from, to)
	}
	out, err := s.git(ctx, nil, nil, args...)
	if err != nil {
		return nil, err
	}
	f := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	var changes []FileChange
	for i := 0; i+1 < len(f); i += 2 {
		status := map[string]string{"A": "added", "M": "modified", "D": "deleted", "T": "type_changed"}[f[i]]
		if status == "" {
			status = f[i]
		}
		changes = append(changes, FileChange{Path: f[i+1], Status: status})
	}
	return changes, nil
}

// Patch writes the Patch between two commits, or a commit and the index.
func (s *Store) Patch(ctx context.Context, from, to string, out io.Writer) error {
	args := []string{"diff", "--no-ext-diff", "--no-textconv", "--no-renames", "--no-color"}
	if to == "" {
		args = append(args, "--cached", from)
	} else {
		args = append(args, from, to)
	}
	_, err := s.git(ctx, nil, out, args...)
	return err
}

// Restore makes the workspace the snapshot target, which the index must
// hold the current state beside (stage first): files the snapshot does not
// have are removed, the others written as they were. s.lock is held.
func (s *Store) Restore(ctx context.Context, target Snapshot) error {
	_, err := s.git(ctx, nil, nil, "read-tree", "--reset", "-u", target.commit)
	return err
}
