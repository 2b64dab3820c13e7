// Package workspace says what a workspace is, as pure functions over API objects (no clients, no
// controllers): its directory in the content volume (a claim's, a session's, a warm member's, or a
// mount role's), the rules on directories (which overlap, which the operator may remove), the
// sync-back Job that saves and removes it, and the record of a kept workspace (its name, how it is
// read, whose it is, who may resume it, its labels and its retention). docs/nothing-lost.md says
// what happens to a workspace; the claim controller (pkg/controller/claim) runs its sync-back and
// keeps and takes records, and pkg/controller/workspacegc collects them. The copy itself is
// pkg/syncback's (what `airlock sync` runs).
package workspace

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
)

// runtimeUIDHashLen is how many hex digits of sha256(runtime UID) a per-claim workspace's name
// carries.
const runtimeUIDHashLen = 8

// ClaimDirName is the last path element of the per-claim workspace of the claim named name, of
// the runtime whose UID is runtimeUID (a registry sandbox without a mount role or `workspace:
// session`; the directory is `<namespace>/sandboxes/<ClaimDirName>`): the claim's name, "-" and
// the first 8 hex digits of sha256(runtime UID). A runtime deleted and created again under the
// same name (another UID: someone else) gets other directories for claims of the same names, so
// that its claims never start with files its predecessor left (docs/decisions.md, "Per-claim
// workspaces carry the runtime's UID").
func ClaimDirName(name string, runtimeUID types.UID) string {
	sum := sha256.Sum256([]byte(runtimeUID))
	return name + "-" + hex.EncodeToString(sum[:])[:runtimeUIDHashLen]
}

// sessionDirNameLen is the length of SessionDirName: 128 bits, since two sessions and handles
// whose hashes collided would share a directory silently (a claim name collision is detected).
const sessionDirNameLen = 32

// SessionDirName names the shared workspace directory of one runtime's session and handle (a
// registry sandbox with `workspace: session`, SPEC section 5): the first 32 hex digits of
// sha256(runtime name NUL runtime UID NUL session NUL handle). A claim and its replacement have
// the same runtime, session and handle, so they share the directory; two handles of one session
// never do (two pods writing one tree), nor two runtimes that use one session id and handle, nor
// a runtime deleted and created again under the same name (another UID: someone else).
func SessionDirName(runtime, runtimeUID, session, handle string) string {
	sum := sha256.Sum256([]byte(runtime + "\x00" + runtimeUID + "\x00" + session + "\x00" + handle))
	return hex.EncodeToString(sum[:])[:sessionDirNameLen]
}

// SandboxesDir is the directory of a namespace's workspaces inside the content volume.
func SandboxesDir(namespace string) string {
	return namespace + "/sandboxes"
}

// SessionsDir is the directory, inside a namespace's sandboxes directory, of the workspaces that
// every claim of one session and handle shares.
const SessionsDir = "sessions"

// WarmDir is the directory, inside a namespace's sandboxes directory, of the workspaces of warm
// members (a claim that adopts one works in it).
const WarmDir = "warm"

// MemberDir is a warm member's workspace inside the content PVC: its own, fresh, made by
// the kubelet when the pod starts; a claim that adopts the member works (and is synced back) from it.
func MemberDir(namespace, member string) string {
	return SandboxesDir(namespace) + "/" + WarmDir + "/" + member
}

// DirOf is the claim's workspace inside the content PVC: its adopted member's, else the kept
// warm member's workspace it resumed (status.workspaceDir), else its own.
func DirOf(claim *airlockv1alpha1.SandboxClaim) string {
	if claim.Status.Warm != nil && claim.Status.Warm.WorkspaceDir != "" {
		return claim.Status.Warm.WorkspaceDir
	}
	if claim.Status.WorkspaceDir != "" {
		return claim.Status.WorkspaceDir
	}
	return claim.Spec.WorkspaceDir
}

// IsMemberDir says whether dir is a warm member's workspace in the namespace
// (<namespace>/sandboxes/warm/<member>).
func IsMemberDir(namespace, dir string) bool {
	member, ok := strings.CutPrefix(dir, SandboxesDir(namespace)+"/"+WarmDir+"/")
	return ok && member != "" && !strings.Contains(member, "/") && ValidateRemovable(dir, SandboxesDir(namespace)) == nil
}

// IsResumeDir says whether dir is a workspace a resume member may mount (docs/nothing-lost.md,
// "Resume members"): a per-claim directory of the namespace (one path element under its
// sandboxes directory, not the sessions or warm directory itself) or a warm member's. The
// operator's admission policy checks the same shape of a resume member's subPath.
func IsResumeDir(namespace, dir string) bool {
	if IsMemberDir(namespace, dir) {
		return true
	}
	name, ok := strings.CutPrefix(dir, SandboxesDir(namespace)+"/")
	return ok && name != "" && name != SessionsDir && name != WarmDir && !strings.Contains(name, "/") &&
		ValidateRemovable(dir, SandboxesDir(namespace)) == nil
}
