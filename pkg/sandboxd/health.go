package sandboxd

import (
	"fmt"
	"net/http"
	"time"
)

// readyzWait bounds how long /readyz waits for the isolation evidence before it answers not
// ready. The kubelet probes readiness as soon as it sees the container running, which is often
// while the evidence's probes still run (about 300 ms after sandboxd starts); a probe answered
// not ready is tried again a period (1 s, sandboxpod) later, and every cold or resumed claim
// waited for that period. Held until the evidence is there, the first probe answers ready as
// soon as it is. It stays under the probe's timeoutSeconds (1 s), so that the kubelet reads a
// 503, not a timeout, when the evidence takes longer.
const readyzWait = 800 * time.Millisecond

// healthz is /healthz: the process serves HTTP.
func (s *server) healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintln(w, "ok")
}

// readyz is /readyz: the isolation evidence is gathered (waited for up to readyzWait), the
// workspace is there and (unless --readonly) writable, and sandboxd is not shutting down. A warm
// member not adopted yet asks the kernel whether it could write (access(2)) rather than making and
// removing a probe file (confine.Resolver.CheckAccess).
func (s *server) readyz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	select {
	case <-s.isolated:
	case <-s.clock.After(readyzWait):
	case <-r.Context().Done():
		return
	}
	if s.closing.Load() {
		http.Error(w, "not ready: shutting down", http.StatusServiceUnavailable)
		return
	}
	if s.isolation.Load() == nil {
		http.Error(w, "not ready: gathering the isolation evidence", http.StatusServiceUnavailable)
		return
	}
	check := s.tb.Workspace().Check
	if s.guard.Warm() && s.guard.Adopted() == "" {
		// A warm member before its adoption makes no probe file either: a resume member waits on
		// a kept workspace, which stays exactly as it was until its claim adopts the member.
		check = s.tb.Workspace().CheckAccess
	}
	if err := check(!s.cfg.ReadOnly); err != nil {
		http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ok")
}
