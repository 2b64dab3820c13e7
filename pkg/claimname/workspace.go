package claimname

import (
	"crypto/sha256"
	"encoding/hex"

	"k8s.io/apimachinery/pkg/types"
)

// runtimeUIDHashLen is how many hex digits of sha256(runtime UID) a per-claim workspace's name
// carries.
const runtimeUIDHashLen = 8

// ClaimWorkspace is the last path element of the per-claim workspace of the claim named name, of
// the runtime whose UID is runtimeUID (a registry sandbox without a mount role or `workspace:
// session`; the directory is `<namespace>/sandboxes/<ClaimWorkspace>`): the claim's name, "-" and
// the first 8 hex digits of sha256(runtime UID). A runtime deleted and created again under the
// same name (another UID: someone else) gets other directories for claims of the same names, so
// that its claims never start with files its predecessor left (docs/decisions.md, "Per-claim
// workspaces carry the runtime's UID").
func ClaimWorkspace(name string, runtimeUID types.UID) string {
	sum := sha256.Sum256([]byte(runtimeUID))
	return name + "-" + hex.EncodeToString(sum[:])[:runtimeUIDHashLen]
}
