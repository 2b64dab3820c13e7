package isolation

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
)

const nodeKernel = "6.18.44-fc-v1272"

// runcEvidence is what sandboxd sees under runc on the node: the node's kernel, airlock's
// restricted pod, every probe refused.
func runcEvidence() Evidence {
	return Evidence{
		Version:       Version,
		KernelRelease: nodeKernel,
		KernelVersion: "#1 SMP PREEMPT_DYNAMIC @0",
		Runtime:       RuntimeKernel,
		UID:           65532,
		GID:           65532,
		CapEff:        "0000000000000000",
		CapPrm:        "0000000000000000",
		NoNewPrivs:    true,
		Seccomp:       2,
		Probes: []Probe{
			{Name: ProbeAPIServer, Address: "10.96.0.1:443", Error: "dial tcp 10.96.0.1:443: i/o timeout"},
			{Name: ProbeNode, Address: "10.0.0.5:10250", Error: "dial tcp 10.0.0.5:10250: i/o timeout"},
			{Name: ProbeMetadata, Address: "169.254.169.254:80", Error: "dial tcp 169.254.169.254:80: i/o timeout"},
			{Name: ProbeKubeDNS, Address: "10.96.0.10:53", Error: "dial tcp 10.96.0.10:53: i/o timeout"},
		},
	}
}

// gvisorEvidence is what sandboxd sees under runsc: gVisor's uname, no seccomp filter of its
// own (runsc loads the pod's profile only with --oci-seccomp).
func gvisorEvidence() Evidence {
	ev := runcEvidence()
	ev.KernelRelease, ev.KernelVersion, ev.Runtime, ev.Seccomp = "4.19.0-gvisor", GVisorKernelVersion, RuntimeGVisor, 0
	return ev
}

// vmEvidence is a VM's kernel (Kata): a Linux kernel that is not the node's.
func vmEvidence() Evidence {
	ev := runcEvidence()
	ev.KernelRelease, ev.KernelVersion = "6.1.62-kata", "#1 SMP Thu Jan 1 00:00:00 UTC 2024"
	return ev
}

func with(ev Evidence, change func(*Evidence)) Evidence {
	ev.Probes = append([]Probe(nil), ev.Probes...)
	change(&ev)
	return ev
}

func reach(name string) func(*Evidence) {
	return func(ev *Evidence) {
		for i := range ev.Probes {
			if ev.Probes[i].Name == name {
				ev.Probes[i].Reached, ev.Probes[i].Error = true, ""
			}
		}
	}
}

func TestJudge(t *testing.T) {
	dedicated := Need{Kernel: KernelDedicated}
	tests := map[string]struct {
		ev          Evidence
		node        string
		need        Need
		wantOK      bool
		wantMessage []string // each a part of the message
	}{
		"runc, any kernel":             {ev: runcEvidence(), node: nodeKernel, need: Need{Kernel: KernelAny}, wantOK: true, wantMessage: []string{"the node's kernel (" + nodeKernel + ")", "no probe connected"}},
		"runc, no need is any kernel":  {ev: runcEvidence(), node: nodeKernel, wantOK: true},
		"runc, dedicated needed":       {ev: runcEvidence(), node: nodeKernel, need: dedicated, wantMessage: []string{"kernel " + nodeKernel + " is the node's (Dedicated needed)"}},
		"gVisor, dedicated needed":     {ev: gvisorEvidence(), node: nodeKernel, need: dedicated, wantOK: true, wantMessage: []string{"gVisor (kernel 4.19.0-gvisor)"}},
		"gVisor, node unknown":         {ev: gvisorEvidence(), need: dedicated, wantOK: true},
		"VM, dedicated needed":         {ev: vmEvidence(), node: nodeKernel, need: dedicated, wantOK: true, wantMessage: []string{"a kernel of its own (6.1.62-kata; the node's is " + nodeKernel + ")"}},
		"VM, node unknown, dedicated":  {ev: vmEvidence(), need: dedicated, wantMessage: []string{"kernel 6.1.62-kata cannot be told from the node's, which is not known (Dedicated needed)"}},
		"VM, node unknown, any kernel": {ev: vmEvidence(), wantOK: true},
		"gVisor's uname on the node's release": {
			ev: with(gvisorEvidence(), func(ev *Evidence) { ev.KernelRelease = nodeKernel }), node: nodeKernel, need: dedicated,
			wantMessage: []string{"is the node's (Dedicated needed)"}},
		"a kind of kernel airlock does not know": {ev: gvisorEvidence(), node: nodeKernel, need: Need{Kernel: "dedicated"},
			wantMessage: []string{`the class needs kernel "dedicated", which is neither Dedicated nor Any`}},

		"API server reached, whatever the class": {ev: with(gvisorEvidence(), reach(ProbeAPIServer)), node: nodeKernel, need: Need{Kernel: KernelAny, DNS: true},
			wantMessage: []string{"the sandbox reached the API server at 10.96.0.1:443"}},
		"node reached":     {ev: with(runcEvidence(), reach(ProbeNode)), node: nodeKernel, wantMessage: []string{"the sandbox reached the node's kubelet at 10.0.0.5:10250"}},
		"metadata reached": {ev: with(runcEvidence(), reach(ProbeMetadata)), node: nodeKernel, wantMessage: []string{"the sandbox reached the metadata service at 169.254.169.254:80"}},
		"kube-dns reached, DNS allowed": {ev: with(runcEvidence(), reach(ProbeKubeDNS)), node: nodeKernel, need: Need{DNS: true}, wantOK: true,
			wantMessage: []string{"kube-dns connected; apiserver, node, metadata did not"}},
		"kube-dns reached, no DNS": {ev: with(runcEvidence(), reach(ProbeKubeDNS)), node: nodeKernel,
			wantMessage: []string{"the sandbox reached kube-dns at 10.96.0.10:53, and its class allows no DNS"}},

		"root":                 {ev: with(runcEvidence(), func(ev *Evidence) { ev.UID = 0 }), node: nodeKernel, wantMessage: []string{"the sandbox runs as uid 0"}},
		"gid 0 is no root":     {ev: with(runcEvidence(), func(ev *Evidence) { ev.GID = 0 }), node: nodeKernel, wantOK: true},
		"effective capability": {ev: with(runcEvidence(), func(ev *Evidence) { ev.CapEff = "0000000000000400" }), node: nodeKernel, wantMessage: []string{"capabilities (effective 0000000000000400, permitted 0000000000000000)"}},
		"permitted capability": {ev: with(runcEvidence(), func(ev *Evidence) { ev.CapPrm = "00000000a80425fb" }), node: nodeKernel, wantMessage: []string{"permitted 00000000a80425fb"}},
		"capabilities under gVisor too": {ev: with(gvisorEvidence(), func(ev *Evidence) { ev.CapEff = "1" }), node: nodeKernel, need: dedicated,
			wantMessage: []string{"effective 1,"}},
		"no no_new_privs":           {ev: with(runcEvidence(), func(ev *Evidence) { ev.NoNewPrivs = false }), node: nodeKernel, wantMessage: []string{"does not run with no_new_privs"}},
		"no seccomp on a kernel":    {ev: with(runcEvidence(), func(ev *Evidence) { ev.Seccomp = 0 }), node: nodeKernel, wantMessage: []string{"without a seccomp filter (mode 0)"}},
		"no seccomp on a VM":        {ev: with(vmEvidence(), func(ev *Evidence) { ev.Seccomp = 0 }), node: nodeKernel, wantMessage: []string{"without a seccomp filter (mode 0)"}},
		"strict seccomp":            {ev: with(runcEvidence(), func(ev *Evidence) { ev.Seccomp = 1 }), node: nodeKernel, wantOK: true},
		"gVisor with --oci-seccomp": {ev: with(gvisorEvidence(), func(ev *Evidence) { ev.Seccomp = 2 }), node: nodeKernel, need: dedicated, wantOK: true},
		"everything at once": {ev: with(runcEvidence(), func(ev *Evidence) {
			reach(ProbeAPIServer)(ev)
			reach(ProbeMetadata)(ev)
			ev.UID, ev.NoNewPrivs = 0, false
		}), node: nodeKernel, need: dedicated, wantMessage: []string{
			"the sandbox reached the API server at 10.96.0.1:443; the sandbox reached the metadata service at 169.254.169.254:80; the sandbox runs as uid 0; the sandbox does not run with no_new_privs; kernel " + nodeKernel + " is the node's (Dedicated needed)"}},

		// Forged or odd evidence: no evidence at all.
		"empty evidence": {ev: Evidence{}, node: nodeKernel, wantMessage: []string{"not valid: version 0, not 1"}},
		"version 2":      {ev: with(runcEvidence(), func(ev *Evidence) { ev.Version = 2 }), node: nodeKernel, wantMessage: []string{"version 2, not 1"}},
		"no release":     {ev: with(runcEvidence(), func(ev *Evidence) { ev.KernelRelease = "" }), wantMessage: []string{"no kernel release"}},
		"runtime says gVisor, uname says Linux": {ev: with(runcEvidence(), func(ev *Evidence) { ev.Runtime = RuntimeGVisor }), node: "other", need: dedicated,
			wantMessage: []string{`runtime gVisor, but the kernel "` + nodeKernel + `" "#1 SMP PREEMPT_DYNAMIC @0" is kernel`}},
		"runtime says kernel, uname says gVisor": {ev: with(gvisorEvidence(), func(ev *Evidence) { ev.Runtime = RuntimeKernel; ev.Seccomp = 2 }), node: nodeKernel,
			wantMessage: []string{"runtime kernel, but the kernel"}},
		"runtime VM":                       {ev: with(runcEvidence(), func(ev *Evidence) { ev.Runtime = "VM" }), wantMessage: []string{`runtime "VM" is neither gVisor nor kernel`}},
		"no probes":                        {ev: with(runcEvidence(), func(ev *Evidence) { ev.Probes = nil }), node: nodeKernel, wantMessage: []string{"no probe apiserver"}},
		"a probe missing":                  {ev: with(runcEvidence(), func(ev *Evidence) { ev.Probes = ev.Probes[:2] }), node: nodeKernel, wantMessage: []string{"no probe metadata"}},
		"a probe of its own":               {ev: with(runcEvidence(), func(ev *Evidence) { ev.Probes = append(ev.Probes, Probe{Name: "gateway", Address: "10.0.0.9:3128"}) }), wantMessage: []string{`an unknown probe "gateway"`}},
		"an unknown probe for a known one": {ev: with(runcEvidence(), func(ev *Evidence) { ev.Probes[0].Name = "api-server" }), wantMessage: []string{`an unknown probe "api-server"`}},
		"a probe twice": {ev: with(runcEvidence(), func(ev *Evidence) {
			ev.Probes = append(ev.Probes, Probe{Name: ProbeAPIServer, Address: "10.96.0.1:443", Reached: true})
		}), wantMessage: []string{"the probe apiserver twice"}},
		"a probe not run": {ev: with(runcEvidence(), func(ev *Evidence) { ev.Probes[1] = Probe{Name: ProbeNode, Error: "AIRLOCK_NODE_IP is not set"} }),
			wantMessage: []string{"the probe node was not run: AIRLOCK_NODE_IP is not set"}},
		"a probe not run, unsaid": {ev: with(runcEvidence(), func(ev *Evidence) { ev.Probes[1] = Probe{Name: ProbeNode} }), wantMessage: []string{"the probe node was not run: it does not say why"}},
		"an address without port": {ev: with(runcEvidence(), func(ev *Evidence) { ev.Probes[0].Address = "10.96.0.1" }), wantMessage: []string{`address "10.96.0.1" is not host:port`}},
		"port 0":                  {ev: with(runcEvidence(), func(ev *Evidence) { ev.Probes[0].Address = "10.96.0.1:0" }), wantMessage: []string{"is not host:port"}},
		"reached and failed":      {ev: with(runcEvidence(), func(ev *Evidence) { ev.Probes[0].Reached = true }), wantMessage: []string{"both reached 10.96.0.1:443 and failed"}},
		"capabilities not hex":    {ev: with(runcEvidence(), func(ev *Evidence) { ev.CapEff = "zz" }), wantMessage: []string{`capabilities "zz" are not 1 to 16 hex digits`}},
		"capabilities empty":      {ev: with(runcEvidence(), func(ev *Evidence) { ev.CapPrm = "" }), wantMessage: []string{`capabilities "" are not`}},
		"capabilities too long":   {ev: with(runcEvidence(), func(ev *Evidence) { ev.CapEff = "00000000000000000" }), wantMessage: []string{"are not 1 to 16 hex digits"}},
		"capabilities with 0x":    {ev: with(runcEvidence(), func(ev *Evidence) { ev.CapEff = "0x0" }), wantMessage: []string{"are not 1 to 16 hex digits"}},
		"seccomp 3":               {ev: with(runcEvidence(), func(ev *Evidence) { ev.Seccomp = 3 }), wantMessage: []string{"seccomp mode 3 is none of 0, 1, 2"}},
		"negative uid":            {ev: with(runcEvidence(), func(ev *Evidence) { ev.UID = -1 }), wantMessage: []string{"uid -1 or gid 65532 is not an id"}},
		"uid past 32 bits":        {ev: with(runcEvidence(), func(ev *Evidence) { ev.UID = 1 << 32 }), wantMessage: []string{"is not an id"}},
		"a control character":     {ev: with(runcEvidence(), func(ev *Evidence) { ev.KernelVersion += "\n" }), wantMessage: []string{"not printable ASCII"}},
		"not ASCII":               {ev: with(runcEvidence(), func(ev *Evidence) { ev.Probes[2].Error = "délai" }), wantMessage: []string{"not printable ASCII"}},
		"a long string":           {ev: with(runcEvidence(), func(ev *Evidence) { ev.Probes[2].Error = strings.Repeat("x", 257) }), wantMessage: []string{"a string of 257 bytes"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ok, reason, message := Judge(tc.ev, tc.node, tc.need)
			if ok != tc.wantOK {
				t.Fatalf("Judge = %t (%q, %q), want %t", ok, reason, message, tc.wantOK)
			}
			wantReason := ReasonIsolationNotMet
			if tc.wantOK {
				wantReason = ""
			}
			if reason != wantReason {
				t.Errorf("reason %q, want %q", reason, wantReason)
			}
			for _, part := range tc.wantMessage {
				if !strings.Contains(message, part) {
					t.Errorf("message %q lacks %q", message, part)
				}
			}
		})
	}
}

func TestBoundaryOf(t *testing.T) {
	tests := map[string]struct {
		ev   Evidence
		node string
		want Boundary
	}{
		"runc":                         {ev: runcEvidence(), node: nodeKernel, want: BoundaryNode},
		"runc, node unknown":           {ev: runcEvidence(), want: BoundaryUnknown},
		"gVisor":                       {ev: gvisorEvidence(), node: nodeKernel, want: BoundaryGVisor},
		"gVisor, node unknown":         {ev: gvisorEvidence(), want: BoundaryGVisor},
		"VM":                           {ev: vmEvidence(), node: nodeKernel, want: BoundaryVM},
		"gVisor on the node's release": {ev: with(gvisorEvidence(), func(ev *Evidence) { ev.KernelRelease = nodeKernel }), node: nodeKernel, want: BoundaryNode},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := BoundaryOf(tc.ev, tc.node); got != tc.want {
				t.Errorf("BoundaryOf = %s, want %s", got, tc.want)
			}
		})
	}
}

// TestDetectRuntime: what runsc v0.0.0-20260905035102-160fafc42237 (`runsc --network=none do
// uname -r; uname -v`) and the 2022 Debian runsc print is gVisor; Linux kernels are not.
func TestDetectRuntime(t *testing.T) {
	tests := []struct {
		release, version, want string
	}{
		{"4.19.0-gvisor", "#1 SMP Sun Jan 10 15:06:54 PST 2016", RuntimeGVisor},
		{"4.4.0", "#1 SMP Sun Jan 10 15:06:54 PST 2016", RuntimeGVisor},
		{"5.15.0-gvisor", "#1 SMP Sun Jan 10 15:06:54 PST 2016", RuntimeGVisor},
		{"6.18.44-fc-v1272", "#1 SMP PREEMPT_DYNAMIC @0", RuntimeKernel},
		{"6.1.0-18-amd64", "#1 SMP PREEMPT_DYNAMIC Debian 6.1.76-1 (2024-02-01)", RuntimeKernel},
		{"", "", RuntimeKernel},
	}
	for _, tc := range tests {
		if got := DetectRuntime(tc.release, tc.version); got != tc.want {
			t.Errorf("DetectRuntime(%q, %q) = %s, want %s", tc.release, tc.version, got, tc.want)
		}
	}
}

// TestCanonical: one encoding, whatever order the probes came in; Digest is its SHA-256; Decode
// reads it back and nothing else.
func TestCanonical(t *testing.T) {
	ev := runcEvidence()
	want := `{"version":1,"kernelRelease":"6.18.44-fc-v1272","kernelVersion":"#1 SMP PREEMPT_DYNAMIC @0","runtime":"kernel",` +
		`"uid":65532,"gid":65532,"capEff":"0000000000000000","capPrm":"0000000000000000","noNewPrivs":true,"seccomp":2,"probes":[` +
		`{"name":"apiserver","address":"10.96.0.1:443","reached":false,"error":"dial tcp 10.96.0.1:443: i/o timeout"},` +
		`{"name":"node","address":"10.0.0.5:10250","reached":false,"error":"dial tcp 10.0.0.5:10250: i/o timeout"},` +
		`{"name":"metadata","address":"169.254.169.254:80","reached":false,"error":"dial tcp 169.254.169.254:80: i/o timeout"},` +
		`{"name":"kube-dns","address":"10.96.0.10:53","reached":false,"error":"dial tcp 10.96.0.10:53: i/o timeout"}]}`
	if got := string(ev.Canonical()); got != want {
		t.Fatalf("Canonical =\n%s\nwant\n%s", got, want)
	}
	sum := sha256.Sum256([]byte(want))
	if got := ev.Digest(); got != hex.EncodeToString(sum[:]) {
		t.Errorf("Digest = %s, want the SHA-256 of the canonical encoding", got)
	}
	shuffled := with(ev, func(ev *Evidence) {
		ev.Probes[0], ev.Probes[3], ev.Probes[1], ev.Probes[2] = ev.Probes[3], ev.Probes[0], ev.Probes[2], ev.Probes[1]
	})
	if !bytes.Equal(shuffled.Canonical(), ev.Canonical()) || shuffled.Digest() != ev.Digest() {
		t.Error("the probes' order changes the encoding")
	}
	if ev.Probes[0].Name != ProbeAPIServer || shuffled.Probes[0].Name != ProbeKubeDNS {
		t.Error("Canonical changed its evidence's probes")
	}
	if got := string((Evidence{}).Canonical()); !strings.HasSuffix(got, `"probes":[]}`) {
		t.Errorf("no probes encode as %s, want probes []", got)
	}
	// Any change of a field changes the digest.
	for name, change := range map[string]func(*Evidence){
		"uid":     func(ev *Evidence) { ev.UID++ },
		"seccomp": func(ev *Evidence) { ev.Seccomp = 1 },
		"reached": reach(ProbeNode),
		"address": func(ev *Evidence) { ev.Probes[3].Address = "10.96.0.11:53" },
		"release": func(ev *Evidence) { ev.KernelRelease += "x" },
	} {
		if with(ev, change).Digest() == ev.Digest() {
			t.Errorf("changing the %s keeps the digest", name)
		}
	}
}

func TestDecode(t *testing.T) {
	ev := gvisorEvidence()
	data := ev.Canonical()
	got, err := Decode(data)
	if err != nil {
		t.Fatalf("Decode of the canonical encoding: %v", err)
	}
	if got.Digest() != ev.Digest() {
		t.Errorf("Decode read %+v, want %+v", got, ev)
	}
	enc := string(data)
	tests := map[string]string{
		"empty":                 "",
		"not JSON":              "gVisor",
		"an unknown field":      strings.Replace(enc, `"version":1,`, `"version":1,"vm":true,`, 1),
		"spaces":                strings.Replace(enc, `"version":1,`, `"version": 1,`, 1),
		"fields in other order": strings.Replace(enc, `"version":1,"kernelRelease":"4.19.0-gvisor",`, `"kernelRelease":"4.19.0-gvisor","version":1,`, 1),
		"probes out of order":   strings.Replace(enc, `"name":"apiserver"`, `"name":"zzz"`, 1),
		"trailing data":         enc + `{}`,
		"a trailing newline":    enc + "\n",
		"probes null":           strings.Replace(string(Evidence{Version: 1}.Canonical()), `"probes":[]`, `"probes":null`, 1),
		"an array":              "[" + enc + "]",
		"too large":             strings.Replace(enc, `"kernelVersion":"`, `"kernelVersion":"`+strings.Repeat("x", MaxBytes), 1),
	}
	for name, in := range tests {
		t.Run(name, func(t *testing.T) {
			if _, err := Decode([]byte(in)); err == nil {
				t.Errorf("Decode(%.80q) accepted it", in)
			}
		})
	}
}
