package sandboxd

import (
	"context"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-dev/airlock/pkg/isolation"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/evidence"
)

// gatheredEvidence is the isolation evidence as sandboxd serves it: gathered once at start and
// never changed (docs/isolation.md, "Evidence").
type gatheredEvidence struct {
	body   []byte // the canonical encoding, the answer of GET isolation.Path
	digest string // its isolation.Evidence.Digest, in the MCP results' _meta
}

// gatherIsolation gathers the evidence from s's sources and keeps it, then closes s.isolated,
// which the MCP endpoints, GET /isolation and /readyz wait for: no tool is served before the
// evidence is there. It runs once, as serve starts. An error (no kernel or status to read, or
// ctx ended) leaves sandboxd without evidence; serve then ends with it.
func (s *server) gatherIsolation(ctx context.Context) error {
	defer close(s.isolated)
	start := time.Now()
	ev, err := evidence.Gather(ctx, s.evidence)
	if err == nil {
		err = ctx.Err() // ended probes are no evidence of a default deny
	}
	if err != nil {
		return err
	}
	g := &gatheredEvidence{body: ev.Canonical(), digest: ev.Digest()}
	s.isolation.Store(g)
	var reached []string
	for _, p := range ev.Probes {
		if p.Reached {
			reached = append(reached, p.Name)
		}
	}
	s.logger.Info("Isolation evidence gathered", "runtime", ev.Runtime, "kernelRelease", ev.KernelRelease, "uid", ev.UID,
		"noNewPrivs", ev.NoNewPrivs, "seccomp", ev.Seccomp, "probesReached", reached, "digest", g.digest, "elapsed", time.Since(start))
	return nil
}

// afterIsolation serves h once the evidence is gathered: a request that comes earlier waits for
// it (or for its own end). Without evidence, it is refused.
func (s *server) afterIsolation(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-s.isolated:
		case <-r.Context().Done():
			return
		}
		if s.isolation.Load() == nil {
			http.Error(w, "Service Unavailable: sandboxd has no isolation evidence, and serves nothing without it", http.StatusServiceUnavailable)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// serveIsolation answers GET /isolation (behind the guard and afterIsolation): the evidence's
// canonical encoding, the same bytes every time.
func (s *server) serveIsolation(w http.ResponseWriter, _ *http.Request) {
	g := s.isolation.Load()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(g.body)
}

// isolationDigest is the evidence's digest, or "" before it is gathered (no MCP request is
// served then).
func (s *server) isolationDigest() string {
	if g := s.isolation.Load(); g != nil {
		return g.digest
	}
	return ""
}

// isolationMeta names the evidence's digest in the _meta of the results that name the server:
// initialize's (2024-11-05 to 2025-11-25, beside serverInfo) and server/discover's (2026-07-28,
// whose _meta carries serverInfo). A client ties the server it talks to to the evidence the
// acquire gave it (isolation.MetaKeyDigest).
func isolationMeta(digest func() string) mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			res, err := next(ctx, method, req)
			if err != nil || res == nil || (method != "initialize" && method != "server/discover") {
				return res, err
			}
			if d := digest(); d != "" {
				meta := res.GetMeta()
				if meta == nil {
					meta = map[string]any{}
				}
				meta[isolation.MetaKeyDigest] = d
				res.SetMeta(meta)
			}
			return res, nil
		}
	}
}
