package admission

import (
	"strings"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
)

// One writer per workspace (SPEC section 5), where claims are decided: no two live claims of
// different runtimes, sessions or handles resolve to the same directory or to nested ones.
// Directory names keep them apart already (workspace.SessionDirName, the claim's own name), but a
// runtime's connection path (mountRole) is the runtime's to choose, and directories named by an
// older operator were not keyed by runtime: this is the check that holds whatever the names.

// workspaceOwner is who may write a directory: a runtime's session and handle. A claim and its
// replacement have one owner.
type workspaceOwner struct {
	runtime runtimeKey
	session string
	handle  string
}

func ownerOf(c *airlockv1alpha1.SandboxClaim) workspaceOwner {
	return workspaceOwner{claimRuntime(c), c.Spec.Session, c.Spec.Handle}
}

// holding is a directory's owner and one claim that holds it for that owner. A directory held
// below by claims of several owners is held by many.
type holding struct {
	owner workspaceOwner
	claim string
	many  bool
}

// workspaceIndex holds the directories of the claims counted so far: each directory, and each of
// its ancestors (so that a claim whose directory holds another's is found without a walk over
// every claim). Both lookups cost the depth of a path.
type workspaceIndex struct {
	dirs  map[string]holding
	below map[string]holding // an ancestor -> who holds directories below it
}

func newWorkspaceIndex() workspaceIndex {
	return workspaceIndex{dirs: map[string]holding{}, below: map[string]holding{}}
}

// add records the claim's directory (none: nothing).
func (w workspaceIndex) add(c *airlockv1alpha1.SandboxClaim) {
	dir := cleanDir(c.Spec.WorkspaceDir)
	if dir == "" {
		return
	}
	h := holding{owner: ownerOf(c), claim: c.Name}
	if _, ok := w.dirs[dir]; !ok {
		w.dirs[dir] = h
	}
	for _, a := range ancestors(dir) {
		if prev, ok := w.below[a]; !ok {
			w.below[a] = h
		} else if prev.owner != h.owner {
			prev.many = true
			w.below[a] = prev
		}
	}
}

// conflict returns the name of a counted claim of another owner whose directory is the claim's,
// holds it or lies in it, or "".
func (w workspaceIndex) conflict(c *airlockv1alpha1.SandboxClaim) string {
	dir := cleanDir(c.Spec.WorkspaceDir)
	if dir == "" {
		return ""
	}
	owner := ownerOf(c)
	if h, ok := w.dirs[dir]; ok && h.owner != owner {
		return h.claim
	}
	for _, a := range ancestors(dir) {
		if h, ok := w.dirs[a]; ok && h.owner != owner {
			return h.claim
		}
	}
	if h, ok := w.below[dir]; ok && (h.many || h.owner != owner) {
		return h.claim
	}
	return ""
}

// cleanDir is a workspace directory without leading, trailing or doubled slashes ("" for none).
// The schema refuses "." and ".." segments.
func cleanDir(dir string) string {
	parts := strings.FieldsFunc(dir, func(r rune) bool { return r == '/' })
	return strings.Join(parts, "/")
}

// ancestors are the proper ancestors of a clean directory, nearest last: a/b/c -> a, a/b.
func ancestors(dir string) []string {
	var out []string
	for i := range len(dir) {
		if dir[i] == '/' {
			out = append(out, dir[:i])
		}
	}
	return out
}
