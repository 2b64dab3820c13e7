package sandboxpod

import (
	"fmt"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/isolation"
)

// envConflict refuses a class whose env reads a Secret (valueFrom.secretKeyRef): the sandbox's
// environment is the agent's to read (Bash `env`), so a credential there is a credential the
// agent holds; credentials reach the network through the egress gateway, which injects them.
// The API server's admission policy refuses such a pod too (it reads no Secret but its own),
// so without this check the claim would wait for its startupTimeout instead of failing at
// admission with a reason.
//
// Nor may a class set isolation.NodeIPEnv: the operator sets it (the node's address, which
// sandboxd's isolation probe tries to reach), and a class's value would point the probe elsewhere.
func envConflict(class *airlockv1alpha1.SandboxClass) string {
	for _, env := range class.Spec.Env {
		if env.Name == isolation.NodeIPEnv {
			return fmt.Sprintf("SandboxClass %q: env %s is the operator's (the node's address, for sandboxd's isolation probes)", class.Name, env.Name)
		}
		if env.ValueFrom != nil && env.ValueFrom.SecretKeyRef != nil {
			return fmt.Sprintf("SandboxClass %q: env %s reads Secret %q: a sandbox's environment holds no credential (the agent can read it); name a credential in the class's egress instead",
				class.Name, env.Name, env.ValueFrom.SecretKeyRef.Name)
		}
	}
	return ""
}
