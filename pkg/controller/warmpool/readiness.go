package warmpool

import (
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
)

// entriesReady says, per sandbox of the registry, whether a sandbox can be built from it now: its
// class exists and passes the checks admission makes of a class (sandboxpod.ClassConflict). It
// returns the entries' statuses and how many are ready, for `kubectl get tr`.
func (c *Controller) entriesReady(reg *airlockv1alpha1.ToolRegistry) ([]airlockv1alpha1.RegistrySandboxStatus, int32) {
	var (
		out   []airlockv1alpha1.RegistrySandboxStatus
		ready int32
	)
	for _, entry := range reg.Spec.Sandboxes {
		st := airlockv1alpha1.RegistrySandboxStatus{Name: entry.Name, Ready: true}
		class, err := c.classLister.Get(entry.Class)
		switch {
		case apierrors.IsNotFound(err):
			st.Ready, st.Message = false, fmt.Sprintf(messageClassNotFound, entry.Class)
		case err != nil:
			st.Ready, st.Message = false, fmt.Sprintf("reading SandboxClass %q: %v", entry.Class, err)
		default:
			if why := sandboxpod.ClassConflict(class); why != "" {
				st.Ready, st.Message = false, truncateMessage(why, 4096)
			} else {
				ready++
			}
		}
		out = append(out, st)
	}
	return out, ready
}
