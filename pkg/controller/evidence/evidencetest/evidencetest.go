// Package evidencetest holds the fakes of the evidence reads that the controllers' tests share.
package evidencetest

import (
	"context"
	"sync"

	"github.com/airlock-dev/airlock/pkg/isolation"
)

// Of is sandboxd's evidence on a kernel of the given release and runtime (isolation.RuntimeGVisor
// or RuntimeKernel), the boundary holding (nothing reached), changed by mutate.
func Of(release, runtime string, mutate func(*isolation.Evidence)) []byte {
	ev := isolation.Evidence{Version: isolation.Version, KernelRelease: release, KernelVersion: "#1 SMP", Runtime: runtime,
		UID: 65532, GID: 65532, CapEff: "0000000000000000", CapPrm: "0000000000000000", NoNewPrivs: true, Seccomp: 2}
	if runtime == isolation.RuntimeGVisor {
		ev.KernelVersion, ev.Seccomp = isolation.GVisorKernelVersion, 0
	}
	for _, name := range isolation.ProbeNames() {
		ev.Probes = append(ev.Probes, isolation.Probe{Name: name, Address: "10.0.0.1:1", Error: "i/o timeout"})
	}
	if mutate != nil {
		mutate(&ev)
	}
	return ev.Canonical()
}

// ReachedAPIServer makes the API server probe connect.
func ReachedAPIServer(ev *isolation.Evidence) {
	for i := range ev.Probes {
		if ev.Probes[i].Name == isolation.ProbeAPIServer {
			ev.Probes[i].Reached, ev.Probes[i].Error = true, ""
		}
	}
}

// Reader answers every read with Body, or Err, or what Answer returns for the base, and records
// what it was asked.
type Reader struct {
	mu     sync.Mutex
	Body   []byte
	Err    error
	Answer func(base, token string) ([]byte, error)
	asked  []string
}

func (r *Reader) Read(_ context.Context, base, token string) ([]byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.asked = append(r.asked, base+" "+token)
	if r.Answer != nil {
		return r.Answer(base, token)
	}
	return r.Body, r.Err
}

// Asked returns the reads so far, each "base token".
func (r *Reader) Asked() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.asked...)
}
