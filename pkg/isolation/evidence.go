// Package isolation is what a sandbox's isolation evidence is and how it is judged
// (docs/isolation.md, "Evidence"): what sandboxd records, as the container's first process and
// before it serves any tool, of the kernel it runs on, its identity and privileges and the
// connections it could open; the evidence's one encoding and its digest (what the operator signs,
// what sandboxd's MCP server metadata names); and Judge, which weighs it against what a class
// needs and the Node the pod runs on. It is pure and standard library only: sandboxd, the
// operator and the runtimes' clients import it. sandboxd gathers the evidence
// (pkg/sandboxd/internal/evidence) and serves it at Path.
package isolation

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Version is the version of the evidence's fields that this package writes and reads.
const Version = 1

// Path is sandboxd's endpoint of the evidence (GET only, behind the claim's token).
const Path = "/isolation"

// MetaKeyDigest is the key, in the _meta of sandboxd's initialize result (2024-11-05 to
// 2025-11-25) and of its server/discover result (2026-07-28), of the evidence's Digest: a client
// ties the server it talks to to the evidence it was given.
const MetaKeyDigest = "airlock.dev/isolation-digest"

// NodeIPEnv is the variable that holds the node's address in a sandbox (the downward API's
// status.hostIP, set by the operator's pod builder): the node probe's host.
const NodeIPEnv = "AIRLOCK_NODE_IP"

// MaxBytes bounds an encoded evidence; Decode refuses a longer one.
const MaxBytes = 16 << 10

// MaxString bounds every string of an evidence, in bytes: sandboxd cuts longer ones (an error
// text), and Validate refuses them.
const MaxString = 256

// The runtimes sandboxd tells apart (DetectRuntime).
const (
	// RuntimeGVisor is gVisor's kernel (runsc): the sandbox's system calls reach gVisor's
	// Sentry, never the node's kernel.
	RuntimeGVisor = "gVisor"
	// RuntimeKernel is a Linux kernel: the node's own (runc), or a VM's (Kata, Firecracker,
	// Nitro). The operator tells which by comparing the release with the Node's (Boundary).
	RuntimeKernel = "kernel"
)

// The probes: connections that sandboxd tries before it serves any tool, and that must fail.
const (
	// ProbeAPIServer is the API server's Service (KUBERNETES_SERVICE_HOST:KUBERNETES_SERVICE_PORT).
	ProbeAPIServer = "apiserver"
	// ProbeNode is the node's kubelet (NodeIPEnv, port 10250).
	ProbeNode = "node"
	// ProbeMetadata is the cloud's instance metadata service (169.254.169.254:80).
	ProbeMetadata = "metadata"
	// ProbeKubeDNS is the pod's resolver (the first nameserver of /etc/resolv.conf, TCP 53); it
	// may connect when the class's record allows DNS (Need.DNS).
	ProbeKubeDNS = "kube-dns"
)

// ProbeNames are the probes every evidence holds, each once, in their canonical order.
func ProbeNames() []string {
	return []string{ProbeAPIServer, ProbeNode, ProbeMetadata, ProbeKubeDNS}
}

// Evidence is what sandboxd saw of its own isolation before it served any tool. Its JSON field
// names are those of Version; the field order is the canonical encoding's (Canonical). It says
// nothing of time: the operator stamps when it read it.
type Evidence struct {
	// Version is the version of these fields (Version).
	Version int `json:"version"`
	// KernelRelease is uname -r (/proc/sys/kernel/osrelease): what the Node's
	// status.nodeInfo.kernelVersion says of the node's kernel.
	KernelRelease string `json:"kernelRelease"`
	// KernelVersion is uname -v (/proc/sys/kernel/version).
	KernelVersion string `json:"kernelVersion"`
	// Runtime is RuntimeGVisor or RuntimeKernel, as DetectRuntime reads the two above.
	Runtime string `json:"runtime"`
	// UID and GID are the lowest of the process's real, effective, saved and filesystem ids
	// (/proc/self/status): in a pod the four are equal, and a 0 among them could become root again.
	UID int64 `json:"uid"`
	GID int64 `json:"gid"`
	// CapEff and CapPrm are the effective and permitted capability sets, in hex as
	// /proc/self/status gives them (a permitted capability can be made effective).
	CapEff string `json:"capEff"`
	CapPrm string `json:"capPrm"`
	// NoNewPrivs is no_new_privs (/proc/self/status NoNewPrivs).
	NoNewPrivs bool `json:"noNewPrivs"`
	// Seccomp is the seccomp mode (/proc/self/status Seccomp): 0 none, 1 strict, 2 filter.
	Seccomp int `json:"seccomp"`
	// Probes are the connections tried, one for each of ProbeNames.
	Probes []Probe `json:"probes"`
}

// Probe is one connection sandboxd tried: a TCP connection to Address, with a deadline.
type Probe struct {
	// Name is one of ProbeNames.
	Name string `json:"name"`
	// Address is host:port; empty when sandboxd had no address to try (Error says why), which
	// Judge takes as a probe not run.
	Address string `json:"address"`
	// Reached says that the connection was established. Refused, unreachable or timed out is
	// not reached.
	Reached bool `json:"reached"`
	// Error is why it was not reached.
	Error string `json:"error,omitempty"`
}

// Canonical is the evidence's one encoding: Go's encoding/json of the struct (its field order,
// no spaces, no trailing newline), with the probes in the order of ProbeNames (others after, by
// name). sandboxd serves these bytes at Path; Digest is their hash.
func (ev Evidence) Canonical() []byte {
	ev.Probes = sortedProbes(ev.Probes)
	if ev.Probes == nil {
		ev.Probes = []Probe{} // "probes":[] rather than null: one encoding for no probes
	}
	var b bytes.Buffer
	if err := json.NewEncoder(&b).Encode(ev); err != nil {
		panic(err) // strings, integers and booleans: cannot fail
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// Digest is the hex SHA-256 of the canonical encoding.
func (ev Evidence) Digest() string {
	sum := sha256.Sum256(ev.Canonical())
	return hex.EncodeToString(sum[:])
}

// Decode reads an evidence as sandboxd serves it: one JSON object of this version's fields, no
// other, at most MaxBytes, in its canonical encoding (so that the hash of the bytes read is the
// evidence's Digest). What it holds is Judge's to weigh.
func Decode(data []byte) (Evidence, error) {
	if len(data) > MaxBytes {
		return Evidence{}, fmt.Errorf("the evidence is %d bytes, more than %d", len(data), MaxBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var ev Evidence
	if err := dec.Decode(&ev); err != nil {
		return Evidence{}, fmt.Errorf("the evidence is not JSON of version %d's fields: %w", Version, err)
	}
	if dec.More() {
		return Evidence{}, errors.New("the evidence is followed by more data")
	}
	if !bytes.Equal(ev.Canonical(), data) {
		return Evidence{}, errors.New("the evidence is not in its canonical encoding")
	}
	return ev, nil
}

// sortedProbes returns a copy of probes in their canonical order.
func sortedProbes(probes []Probe) []Probe {
	out := slices.Clone(probes)
	rank := func(name string) int {
		if i := slices.Index(ProbeNames(), name); i >= 0 {
			return i
		}
		return len(ProbeNames())
	}
	slices.SortStableFunc(out, func(a, b Probe) int {
		if c := rank(a.Name) - rank(b.Name); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out
}
