package sandboxd

import (
	"fmt"
	"net/http"
)

// healthz is /healthz: the process serves HTTP.
func (s *server) healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintln(w, "ok")
}

// readyz is /readyz: the isolation evidence is gathered, the workspace is
// there and (unless --readonly) writable, and sandboxd is not shutting down.
func (s *server) readyz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if s.closing.Load() {
		http.Error(w, "not ready: shutting down", http.StatusServiceUnavailable)
		return
	}
	if s.isolation.Load() == nil {
		http.Error(w, "not ready: gathering the isolation evidence", http.StatusServiceUnavailable)
		return
	}
	if err := s.tb.Workspace().Check(!s.cfg.ReadOnly); err != nil {
		http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ok")
}
