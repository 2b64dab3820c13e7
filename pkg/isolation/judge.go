package isolation

import (
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
)

// ReasonIsolationNotMet is the reason of a claim whose sandbox's evidence does not meet what its
// class needs, or is no evidence.
const ReasonIsolationNotMet = "IsolationNotMet"

// What a class may need of a sandbox's kernel (Need.Kernel).
const (
	// KernelAny takes any kernel, the node's included.
	KernelAny = "Any"
	// KernelDedicated takes only a kernel that is not the node's: gVisor's, or a VM's.
	KernelDedicated = "Dedicated"
)

// Need is what a claim's frozen record needs of its sandbox's isolation.
type Need struct {
	// Kernel is KernelAny or KernelDedicated; empty is KernelAny, the API's default.
	Kernel string
	// DNS says that the record lets the sandbox reach kube-dns (it allows some Service), so
	// that the kube-dns probe may connect. No other probe may, whatever the class says.
	DNS bool
}

// Boundary is what stands between a sandbox and the node's kernel, as the evidence and the
// Node show it.
type Boundary string

const (
	// BoundaryGVisor is gVisor's kernel.
	BoundaryGVisor Boundary = "gVisor"
	// BoundaryVM is a Linux kernel other than the node's: a VM's (Kata, Firecracker, Nitro).
	BoundaryVM Boundary = "VM"
	// BoundaryNode is the node's own kernel, shared with every container of the node (runc).
	BoundaryNode Boundary = "Node"
	// BoundaryUnknown is a Linux kernel, on a node whose kernel is not known.
	BoundaryUnknown Boundary = "Unknown"
)

// BoundaryOf says what kernel the evidence shows, given the Node's status.nodeInfo.kernelVersion
// (which is the node's uname -r, and so compared with KernelRelease). A release equal to the
// node's is the node's kernel, whatever the runtime says.
func BoundaryOf(ev Evidence, nodeKernelVersion string) Boundary {
	switch {
	case nodeKernelVersion != "" && ev.KernelRelease == nodeKernelVersion:
		return BoundaryNode
	case ev.Runtime == RuntimeGVisor:
		return BoundaryGVisor
	case nodeKernelVersion == "":
		return BoundaryUnknown
	}
	return BoundaryVM
}

// Judge weighs the evidence of a sandbox against the Node it runs on (its
// status.nodeInfo.kernelVersion) and what its class needs. It returns ok with a summary of what
// was shown, or reason ReasonIsolationNotMet and a message that names what was seen. It refuses:
//   - what is no evidence (Validate): another version, a field out of its range, a runtime its
//     uname contradicts, a probe missing, repeated, unknown or not run;
//   - a probe that connected, but kube-dns when need.DNS: whatever the class says, a default
//     deny that does not hold is reported, never served;
//   - uid 0, an effective or permitted capability, no no_new_privs, or no seccomp filter on a
//     kernel (under gVisor the pod's seccomp profile is not loaded by default, and no system
//     call of the sandbox reaches the node's kernel: gVisor's Sentry runs under its own filter);
//   - for need.Kernel Dedicated, the node's kernel, or a node whose kernel is not known.
func Judge(ev Evidence, nodeKernelVersion string, need Need) (ok bool, reason string, message string) {
	if err := Validate(ev); err != nil {
		return false, ReasonIsolationNotMet, "the sandbox's isolation evidence is not valid: " + err.Error()
	}
	var seen []string
	for _, p := range sortedProbes(ev.Probes) {
		if p.Reached && (p.Name != ProbeKubeDNS || !need.DNS) {
			seen = append(seen, reachedMessage(p))
		}
	}
	if ev.UID == 0 {
		seen = append(seen, "the sandbox runs as uid 0")
	}
	if capEff, capPrm := mustCaps(ev.CapEff), mustCaps(ev.CapPrm); capEff != 0 || capPrm != 0 {
		seen = append(seen, fmt.Sprintf("the sandbox holds capabilities (effective %s, permitted %s)", ev.CapEff, ev.CapPrm))
	}
	if !ev.NoNewPrivs {
		seen = append(seen, "the sandbox does not run with no_new_privs")
	}
	if ev.Seccomp == 0 && ev.Runtime != RuntimeGVisor {
		seen = append(seen, "the sandbox runs without a seccomp filter (mode 0) on a Linux kernel")
	}
	switch boundary := BoundaryOf(ev, nodeKernelVersion); {
	case need.Kernel != "" && need.Kernel != KernelAny && need.Kernel != KernelDedicated:
		seen = append(seen, fmt.Sprintf("the class needs kernel %q, which is neither %s nor %s", need.Kernel, KernelDedicated, KernelAny))
	case need.Kernel != KernelDedicated:
	case boundary == BoundaryNode:
		seen = append(seen, fmt.Sprintf("kernel %s is the node's (%s needed)", ev.KernelRelease, KernelDedicated))
	case boundary == BoundaryUnknown:
		seen = append(seen, fmt.Sprintf("kernel %s cannot be told from the node's, which is not known (%s needed)", ev.KernelRelease, KernelDedicated))
	}
	if len(seen) > 0 {
		return false, ReasonIsolationNotMet, strings.Join(seen, "; ")
	}
	return true, "", Summary(ev, nodeKernelVersion)
}

// Summary says in a line what the evidence shows, as Judge says it of a sandbox it accepts
// (events, `make run`): the kernel, the identity and the probes.
func Summary(ev Evidence, nodeKernelVersion string) string {
	var kernel string
	switch BoundaryOf(ev, nodeKernelVersion) {
	case BoundaryGVisor:
		kernel = "gVisor (kernel " + ev.KernelRelease + ")"
	case BoundaryVM:
		kernel = "a kernel of its own (" + ev.KernelRelease + "; the node's is " + nodeKernelVersion + ")"
	case BoundaryNode:
		kernel = "the node's kernel (" + ev.KernelRelease + ")"
	default:
		kernel = "kernel " + ev.KernelRelease + " (the node's is not known)"
	}
	var reached, refused []string
	for _, p := range sortedProbes(ev.Probes) {
		if p.Reached {
			reached = append(reached, p.Name)
		} else {
			refused = append(refused, p.Name)
		}
	}
	probes := "no probe connected (" + strings.Join(refused, ", ") + ")"
	if len(reached) > 0 {
		probes = strings.Join(reached, ", ") + " connected; " + strings.Join(refused, ", ") + " did not"
	}
	return fmt.Sprintf("%s, uid %d gid %d, capabilities %s/%s, no_new_privs %t, seccomp %d; %s",
		kernel, ev.UID, ev.GID, ev.CapEff, ev.CapPrm, ev.NoNewPrivs, ev.Seccomp, probes)
}

// reachedMessage says what a probe that connected reached.
func reachedMessage(p Probe) string {
	switch p.Name {
	case ProbeAPIServer:
		return "the sandbox reached the API server at " + p.Address
	case ProbeNode:
		return "the sandbox reached the node's kubelet at " + p.Address
	case ProbeMetadata:
		return "the sandbox reached the metadata service at " + p.Address
	case ProbeKubeDNS:
		return "the sandbox reached kube-dns at " + p.Address + ", and its class allows no DNS"
	}
	return "the sandbox reached " + p.Name + " at " + p.Address
}

// Validate says why ev is no evidence of this version, or nil: every field in its range, the
// runtime the one its uname shows, and each of ProbeNames exactly once, run (with an address),
// and no other probe.
func Validate(ev Evidence) error {
	if ev.Version != Version {
		return fmt.Errorf("version %d, not %d", ev.Version, Version)
	}
	strs := []string{ev.KernelRelease, ev.KernelVersion, ev.Runtime, ev.CapEff, ev.CapPrm}
	for _, p := range ev.Probes {
		strs = append(strs, p.Name, p.Address, p.Error)
	}
	for _, s := range strs {
		if err := checkString(s); err != nil {
			return err
		}
	}
	if ev.KernelRelease == "" {
		return errors.New("no kernel release")
	}
	if ev.Runtime != RuntimeGVisor && ev.Runtime != RuntimeKernel {
		return fmt.Errorf("runtime %q is neither %s nor %s", ev.Runtime, RuntimeGVisor, RuntimeKernel)
	}
	if detected := DetectRuntime(ev.KernelRelease, ev.KernelVersion); ev.Runtime != detected {
		return fmt.Errorf("runtime %s, but the kernel %q %q is %s", ev.Runtime, ev.KernelRelease, ev.KernelVersion, detected)
	}
	if ev.UID < 0 || ev.UID > math.MaxUint32 || ev.GID < 0 || ev.GID > math.MaxUint32 {
		return fmt.Errorf("uid %d or gid %d is not an id", ev.UID, ev.GID)
	}
	for _, c := range []string{ev.CapEff, ev.CapPrm} {
		if _, err := parseCaps(c); err != nil {
			return err
		}
	}
	if ev.Seccomp < 0 || ev.Seccomp > 2 {
		return fmt.Errorf("seccomp mode %d is none of 0, 1, 2", ev.Seccomp)
	}
	return validateProbes(ev.Probes)
}

// validateProbes checks that probes are each of ProbeNames once, each run.
func validateProbes(probes []Probe) error {
	seen := map[string]bool{}
	for _, p := range probes {
		switch {
		case !slices.Contains(ProbeNames(), p.Name):
			return fmt.Errorf("an unknown probe %q", p.Name)
		case seen[p.Name]:
			return fmt.Errorf("the probe %s twice", p.Name)
		case p.Address == "":
			return fmt.Errorf("the probe %s was not run: %s", p.Name, orUnsaid(p.Error))
		case p.Reached && p.Error != "":
			return fmt.Errorf("the probe %s both reached %s and failed: %s", p.Name, p.Address, p.Error)
		}
		host, port, err := net.SplitHostPort(p.Address)
		if n, perr := strconv.ParseUint(port, 10, 16); err != nil || host == "" || perr != nil || n == 0 {
			return fmt.Errorf("the probe %s's address %q is not host:port", p.Name, p.Address)
		}
		seen[p.Name] = true
	}
	for _, name := range ProbeNames() {
		if !seen[name] {
			return fmt.Errorf("no probe %s", name)
		}
	}
	return nil
}

func orUnsaid(s string) string {
	if s == "" {
		return "it does not say why"
	}
	return s
}

// checkString refuses a string that sandboxd would not write: longer than MaxString, or with a
// character that is not printable ASCII.
func checkString(s string) error {
	if len(s) > MaxString {
		return fmt.Errorf("a string of %d bytes, more than %d", len(s), MaxString)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return fmt.Errorf("the string %q holds a character that is not printable ASCII", s)
		}
	}
	return nil
}

// parseCaps reads a capability set as /proc/self/status writes it: 1 to 16 hex digits.
func parseCaps(s string) (uint64, error) {
	if s == "" || len(s) > 16 {
		return 0, fmt.Errorf("capabilities %q are not 1 to 16 hex digits", s)
	}
	v, err := strconv.ParseUint(s, 16, 64)
	if err != nil {
		return 0, fmt.Errorf("capabilities %q are not 1 to 16 hex digits", s)
	}
	return v, nil
}

// mustCaps is parseCaps of a set Validate has checked.
func mustCaps(s string) uint64 {
	v, _ := parseCaps(s)
	return v
}
