package sandboxpod

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/egress/policy"
	"github.com/airlock-dev/airlock/pkg/toolnames"
)

// What a claim runs is frozen at admission (SPEC section 3). When the leader moves a claim to
// Binding it writes, in the same status update, status.frozen: the class and the registry entry
// as they are at that moment, every default spelled out and the tool list always explicit. From
// then on the claim's children are built and repaired from that record only; the live class and
// registry are never read for a Binding, Bound or Reaping claim, so editing or deleting them
// never changes (nor widens) a running sandbox. A replacement is a new claim, admitted and frozen
// on its own: it gets the class and entry as they are when it is admitted.

const (
	// DefaultWorkspaceClaimName is SandboxClass.spec.workspaceClaimName's default.
	DefaultWorkspaceClaimName = airlockv1alpha1.DefaultWorkspaceClaimName
	// DefaultStartupTimeout is SandboxClass.spec.startupTimeout's default.
	DefaultStartupTimeout = airlockv1alpha1.DefaultStartupTimeout
)

// defaultArgs are SandboxClass.spec.args' default.
var defaultArgs = []string{"sandboxd", "--listen=:8080", "--workspace=/workspace"}

// defaultPorts are SandboxClass.spec.ports' default.
var defaultPorts = []airlockv1alpha1.SandboxPort{{Name: "mcp", Port: 8080}}

// Freeze returns what a claim of the registry entry runs when built from class now.
func Freeze(class *airlockv1alpha1.SandboxClass, entry *airlockv1alpha1.RegistrySandbox) *airlockv1alpha1.FrozenSandbox {
	spec := class.Spec.DeepCopy()
	r := &airlockv1alpha1.FrozenSandbox{
		ClassGeneration:    class.Generation,
		Image:              spec.Image,
		Args:               frozenArgs(spec.Args),
		Ports:              spec.Ports,
		Env:                spec.Env,
		Resources:          boundedResources(spec.Resources),
		RuntimeClassName:   spec.RuntimeClassName,
		Isolation:          spec.Isolation,
		Volumes:            spec.Volumes,
		WorkspaceClaimName: spec.WorkspaceClaimName,
		AllowedTools:       allowedTools(entry),
		AllowedServices:    spec.AllowedServices,
		WorkspacePath:      WorkspacePath(spec.Volumes),
	}
	if e := spec.Egress; e != nil {
		// The gateway is frozen beside it by the claim controller (FreezeGateway): a record
		// without one gets nothing of its egress.
		r.Egress = &airlockv1alpha1.FrozenEgress{Hosts: e.Hosts, Credentials: e.Credentials}
	}
	if d := spec.StartupTimeout; d != nil && d.Duration > 0 {
		r.StartupTimeout = *d
	}
	fillDefaults(r)
	return r
}

// NeedsDedicatedKernel says whether the record's class needs a kernel of the sandbox's own
// (isolation.kernel Dedicated); a record without isolation needs Any kernel.
func NeedsDedicatedKernel(r *airlockv1alpha1.FrozenSandbox) bool {
	return r != nil && r.Isolation != nil && r.Isolation.Kernel == airlockv1alpha1.KernelDedicated
}

// fillDefaults writes into r every default that a reader of the record would otherwise have to
// know: the one place where a record's defaults are filled, for Freeze and (through Defaulted)
// for the builders that read a record an older operator wrote without some of them.
func fillDefaults(r *airlockv1alpha1.FrozenSandbox) {
	if len(r.Args) == 0 {
		if r.WorkspacePath != "" {
			r.Args = frozenArgs(nil) // the operator passes --workspace
		} else {
			r.Args = append([]string(nil), defaultArgs...)
		}
	}
	if len(r.Ports) == 0 {
		r.Ports = append([]airlockv1alpha1.SandboxPort(nil), defaultPorts...)
	}
	if r.WorkspaceClaimName == "" {
		r.WorkspaceClaimName = DefaultWorkspaceClaimName
	}
	if r.StartupTimeout.Duration <= 0 {
		r.StartupTimeout = metav1.Duration{Duration: DefaultStartupTimeout}
	}
}

// Defaulted returns the record with every default spelled out: r itself when it has them all
// (every record Freeze wrote), else a copy with them filled. r is never changed.
func Defaulted(r *airlockv1alpha1.FrozenSandbox) *airlockv1alpha1.FrozenSandbox {
	if len(r.Args) > 0 && len(r.Ports) > 0 && r.WorkspaceClaimName != "" && r.StartupTimeout.Duration > 0 {
		return r
	}
	out := r.DeepCopy()
	fillDefaults(out)
	return out
}

// allowedTools is the entry's tool list made explicit: every tool sandboxd has (toolnames.All)
// when the entry lists none.
func allowedTools(entry *airlockv1alpha1.RegistrySandbox) []airlockv1alpha1.ToolName {
	if len(entry.AllowedTools) > 0 {
		return append([]airlockv1alpha1.ToolName(nil), entry.AllowedTools...)
	}
	all := toolnames.All()
	out := make([]airlockv1alpha1.ToolName, len(all))
	for i, name := range all {
		out[i] = airlockv1alpha1.ToolName(name)
	}
	return out
}

// StartupTimeout is the record's startupTimeout, defaulted.
func StartupTimeout(r *airlockv1alpha1.FrozenSandbox) time.Duration {
	return Defaulted(r).StartupTimeout.Duration
}

// ClassConflict says why a sandbox of class cannot be built, or "": args that would set, repeat
// or swallow one of the operator's flags (argsConflict), a volume that takes the name or a path
// of what the operator mounts into every sandbox, the claim's token, a warm member's key or the
// egress CA (volumesConflict, egressConflict), env that reads a Secret (envConflict), or egress
// the gateway would not compile (policy.CheckClass, the gateway's own compiler). One check
// for claims and warm members alike, and for the class controller: a class is valid for all or
// for none.
func ClassConflict(class *airlockv1alpha1.SandboxClass) string {
	if message := egressConflict(class); message != "" {
		return message
	}
	if err := policy.CheckClass(class.Spec.Egress); err != nil {
		return fmt.Sprintf("SandboxClass %q: egress: %v", class.Name, err)
	}
	if message := argsConflict(class); message != "" {
		return message
	}
	if message := volumesConflict(class); message != "" {
		return message
	}
	if message := envConflict(class); message != "" {
		return message
	}
	return ""
}
