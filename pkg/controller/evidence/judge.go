package evidence

import (
	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/isolation"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
)

// The kernel verdicts of status.isolation.kernel.
const (
	// KernelDedicated is a kernel of the sandbox's own: gVisor's or a VM's.
	KernelDedicated = "Dedicated"
	// KernelShared is the node's kernel.
	KernelShared = "Shared"
	// KernelUnknown is a Linux kernel on a node that does not say its own.
	KernelUnknown = "Unknown"
)

// Need is what a record needs of its sandbox's isolation: a kernel of its own when its class
// said so (Dedicated), and kube-dns reachable when the record allows DNS.
func Need(record *airlockv1alpha1.FrozenSandbox) isolation.Need {
	need := isolation.Need{Kernel: isolation.KernelAny, DNS: sandboxpod.DNSAllowed(record)}
	if sandboxpod.NeedsDedicatedKernel(record) {
		need.Kernel = isolation.KernelDedicated
	}
	return need
}

// UniversalNeed is what every sandbox of the record needs, whatever its class says of the
// kernel: the checks a warm member passes before any claim may adopt it.
func UniversalNeed(record *airlockv1alpha1.FrozenSandbox) isolation.Need {
	return isolation.Need{Kernel: isolation.KernelAny, DNS: sandboxpod.DNSAllowed(record)}
}

// Verdict is what Judge decided of a read evidence.
type Verdict struct {
	// Evidence is the decoded evidence (zero when it is not evidence).
	Evidence isolation.Evidence
	// Kernel is the kernel verdict (KernelDedicated, KernelShared, KernelUnknown) of evidence
	// that holds.
	Kernel string
	// Failure says why it does not hold, "" when it does.
	Failure string
}

// Judge decodes the evidence's bytes (the canonical encoding only) and weighs them against the
// Node's kernel (status.nodeInfo.kernelVersion) and need (isolation.Judge). The one judgment of
// the operator: a cold claim's pod, a warm member's universal checks, a member against the
// claim that would adopt it.
func Judge(raw []byte, nodeKernel string, need isolation.Need) Verdict {
	ev, err := isolation.Decode(raw)
	if err != nil {
		return Verdict{Failure: err.Error()}
	}
	if ok, _, message := isolation.Judge(ev, nodeKernel, need); !ok {
		return Verdict{Evidence: ev, Failure: message}
	}
	v := Verdict{Evidence: ev, Kernel: KernelDedicated}
	switch isolation.BoundaryOf(ev, nodeKernel) {
	case isolation.BoundaryNode:
		v.Kernel = KernelShared
	case isolation.BoundaryUnknown:
		v.Kernel = KernelUnknown
	}
	return v
}
