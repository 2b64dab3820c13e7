package operator

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"

	"k8s.io/client-go/tools/cache"
)

// checker is one named check behind /healthz or /readyz. leaderelection.HealthzAdaptor is one.
type checker interface {
	Name() string
	Check(req *http.Request) error
}

// pingCheck always passes: the process answers HTTP.
type pingCheck struct{}

func (pingCheck) Name() string                  { return "ping" }
func (pingCheck) Check(req *http.Request) error { return nil }

// namedInformer is an informer whose sync gates readiness.
type namedInformer struct {
	name     string
	informer cache.SharedIndexInformer
}

// readiness passes once every informer has synced, and fails again once shutdown has begun so
// that Services stop sending requests to a replica that is going away.
type readiness struct {
	informers    []namedInformer
	shuttingDown atomic.Bool
}

func (r *readiness) Name() string { return "informerSync" }

// synced lists the HasSynced of every informer the check covers, for cache.WaitForCacheSync.
func (r *readiness) synced() []cache.InformerSynced {
	fns := make([]cache.InformerSynced, 0, len(r.informers))
	for _, i := range r.informers {
		fns = append(fns, i.informer.HasSynced)
	}
	return fns
}

func (r *readiness) Check(req *http.Request) error {
	if r.shuttingDown.Load() {
		return fmt.Errorf("shutting down")
	}
	var unsynced []string
	for _, i := range r.informers {
		if !i.informer.HasSynced() {
			unsynced = append(unsynced, i.name)
		}
	}
	if len(unsynced) > 0 {
		slices.Sort(unsynced)
		return fmt.Errorf("informers not synced: %s", strings.Join(unsynced, ", "))
	}
	return nil
}

// tokenKeyCheck passes once the claim token key has been read (or created): until then the
// Sandbox API cannot hand out a Bound claim's token, so the replica is not ready.
type tokenKeyCheck struct {
	tokens interface {
		Key(ctx context.Context) ([]byte, error)
	}
}

func (tokenKeyCheck) Name() string { return "tokenKey" }

func (c tokenKeyCheck) Check(req *http.Request) error {
	_, err := c.tokens.Key(req.Context())
	return err
}

// checkHandler runs every check and answers 200 "ok" when all pass, else failStatus with one line
// per check. ?verbose lists the checks on success too. kind ("healthz", "readyz") names the endpoint
// in the last line, as the Kubernetes components do.
func checkHandler(kind string, failStatus int, checks ...checker) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var report strings.Builder
		failed := false
		for _, c := range checks {
			if err := c.Check(req); err != nil {
				failed = true
				fmt.Fprintf(&report, "[-]%s failed: %v\n", c.Name(), err)
			} else {
				fmt.Fprintf(&report, "[+]%s ok\n", c.Name())
			}
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Cache-Control", "no-store")
		switch {
		case failed:
			w.WriteHeader(failStatus)
			fmt.Fprintf(w, "%s%s check failed\n", report.String(), kind)
		case req.URL.Query().Has("verbose"):
			fmt.Fprintf(w, "%s%s check passed\n", report.String(), kind)
		default:
			fmt.Fprint(w, "ok")
		}
	})
}
