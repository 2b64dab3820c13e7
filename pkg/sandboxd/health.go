package sandboxd

import (
	"crypto/rand"
	"fmt"
	"net/http"
	"os"
)

// healthz is /healthz: the process serves HTTP.
func (s *server) healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintln(w, "ok")
}

// readyz is /readyz: the workspace is there and (unless --readonly)
// writable, and sandboxd is not shutting down.
func (s *server) readyz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if s.closing.Load() {
		http.Error(w, "not ready: shutting down", http.StatusServiceUnavailable)
		return
	}
	if err := s.tb.ws.check(!s.cfg.ReadOnly); err != nil {
		http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ok")
}

// check reports whether the workspace is a directory we can still reach and,
// if writable is set, create files in.
func (r *resolver) check(writable bool) error {
	fi, err := r.root.Stat(".")
	if err != nil {
		return fmt.Errorf("workspace %s: %v", r.dir, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("workspace %s is not a directory", r.dir)
	}
	if !writable {
		return nil
	}
	name := ".airlock-readyz-" + rand.Text()[:10]
	f, err := r.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("workspace %s is not writable: %v", r.dir, err)
	}
	f.Close()
	if err := r.root.Remove(name); err != nil {
		return fmt.Errorf("workspace %s: removing the probe file: %v", r.dir, err)
	}
	return nil
}
