package operator

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"k8s.io/klog/v2"

	"github.com/airlock-dev/airlock/pkg/client"
)

// The operator's servers parse network input from anyone who reaches them, so every phase of a
// connection is bounded: readHeaderTimeout for the request headers, bodyReadTimeout for a
// request's body (at most 64 KiB: boundBodyRead), idleTimeout for a kept-alive connection between
// requests. There is no write timeout, and no net/http ReadTimeout: Sandbox API acquires wait up
// to 300 s for a bind, and a read deadline that passes while a handler waits cancels the
// request's context (net/http's background read fails, and it cancels the request).
const (
	readHeaderTimeout = 10 * time.Second
	bodyReadTimeout   = 30 * time.Second
	idleTimeout       = 120 * time.Second
)

// serverTimeouts are the timeouts of newHTTPServer's servers; tests shorten them.
type serverTimeouts struct {
	readHeader, body, idle time.Duration
}

var defaultServerTimeouts = serverTimeouts{readHeader: readHeaderTimeout, body: bodyReadTimeout, idle: idleTimeout}

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
	return newHTTPServerWithTimeouts(name, flag, addr, handler, tlsConfig, baseCtx, defaultServerTimeouts)
}

func newHTTPServerWithTimeouts(name, flag, addr string, handler http.Handler, tlsConfig *tls.Config, baseCtx context.Context, t serverTimeouts) *httpServer {
	return &httpServer{
		name: name,
		flag: flag,
		addr: addr,
		server: &http.Server{
			Handler:           boundBodyRead(handler, t.body),
			TLSConfig:         tlsConfig,
			ReadHeaderTimeout: t.readHeader,
			IdleTimeout:       t.idle,
			ErrorLog:          klog.NewStandardLogger("WARNING"),
			// Handlers see their request's context end when shutdown begins, so that long waits
			// return promptly instead of holding Shutdown until its timeout.
			BaseContext: func(net.Listener) context.Context { return baseCtx },
		},
	}
}

// boundBodyRead gives each request timeout to send its body: the connection's read deadline is
// set when the handler starts and lifted once the body has been read to its end (or closed), so
// that a client trickling a body holds a handler for timeout at most, and a handler that then
// waits long (an acquire) is not cut short.
func boundBodyRead(next http.Handler, timeout time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		rc := http.NewResponseController(w)
		if req.Body == nil || req.Body == http.NoBody || rc.SetReadDeadline(time.Now().Add(timeout)) != nil {
			next.ServeHTTP(w, req)
			return
		}
		req.Body = &deadlineBody{ReadCloser: req.Body, lift: func() { _ = rc.SetReadDeadline(time.Time{}) }}
		next.ServeHTTP(w, req)
	})
}

// deadlineBody lifts the connection's read deadline once the body is read to its end or closed.
type deadlineBody struct {
	io.ReadCloser
	lift   func()
	lifted bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && !b.lifted {
		b.lifted = true
		b.lift()
	}
	return n, err
}

func (b *deadlineBody) Close() error {
	if !b.lifted {
		b.lifted = true
		b.lift()
	}
	return b.ReadCloser.Close()
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
