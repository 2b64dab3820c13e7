package operator

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"k8s.io/klog/v2"

	"github.com/airlock-dev/airlock/pkg/client"
)

// readHeaderTimeout bounds how long a client may take to send its request headers. There is no
// write timeout: Sandbox API acquires wait up to 300 s for a bind.
const readHeaderTimeout = 10 * time.Second

// httpServer is one of the operator's listeners.
type httpServer struct {
	// name says what it serves, in logs.
	name string
	// flag is the flag that set addr, in errors.
	flag string
	addr string

	server   *http.Server
	listener net.Listener
}

func newHTTPServer(name, flag, addr string, handler http.Handler, tlsConfig *tls.Config, baseCtx context.Context) *httpServer {
	return &httpServer{
		name: name,
		flag: flag,
		addr: addr,
		server: &http.Server{
			Handler:           handler,
			TLSConfig:         tlsConfig,
			ReadHeaderTimeout: readHeaderTimeout,
			ErrorLog:          klog.NewStandardLogger("WARNING"),
			// Handlers see their request's context end when shutdown begins, so that long waits
			// return promptly instead of holding Shutdown until its timeout.
			BaseContext: func(net.Listener) context.Context { return baseCtx },
		},
	}
}

// listen binds the address, so that a bad or busy address fails the start.
func (s *httpServer) listen() error {
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("cannot listen on %s=%s: %w", s.flag, s.addr, err)
	}
	s.listener = ln
	return nil
}

// serve serves on the bound listener until shutdown; it returns nil after shutdown.
func (s *httpServer) serve(ctx context.Context) error {
	klog.FromContext(ctx).Info("Serving", "server", s.name, "address", s.listener.Addr().String(), "tls", s.server.TLSConfig != nil)
	var err error
	if s.server.TLSConfig != nil {
		err = s.server.ServeTLS(s.listener, "", "")
	} else {
		err = s.server.Serve(s.listener)
	}
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return fmt.Errorf("serving %s on %s: %w", s.name, s.listener.Addr(), err)
}

// close releases the listener of a server that never served.
func (s *httpServer) close() {
	if s.listener != nil {
		_ = s.listener.Close()
	}
}

// apiError is the body of every Sandbox API error (SPEC section 4).
type apiError struct {
	Error   string `json:"error"`
	Message string `json:"message"`
}

func writeAPIError(w http.ResponseWriter, status int, code, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(apiError{Error: code, Message: message})
}

// newAPIHandler serves the Sandbox API: api (pkg/sandboxapi) under /v1/, /healthz and /readyz,
// its OpenAPI document at /openapi.json (no token: it describes, it grants nothing), and a JSON
// 404 for everything else. /metrics is not served here, only on
// --metrics-bind-address: the API port is open to every pod of the cluster, the metrics port only
// to monitoring (manifests/operator/network_policy.yaml). api may be nil.
func newAPIHandler(healthz, readyz, api http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /healthz", healthz)
	mux.Handle("GET /readyz", readyz)
	mux.HandleFunc("GET /openapi.json", serveOpenAPIDocument)
	if api != nil {
		mux.Handle("/v1/", api)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, req *http.Request) {
		writeAPIError(w, http.StatusNotFound, "not_found", fmt.Sprintf("no such endpoint: %s %s", req.Method, req.URL.Path))
	})
	return mux
}

// serveOpenAPIDocument answers the Sandbox API's OpenAPI document (pkg/client/openapi.json).
func serveOpenAPIDocument(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write(client.OpenAPIDocument())
}
