package egress

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"

	"github.com/airlock-dev/airlock/pkg/egress/policy"
)

// DisabledAddress is the listen address that turns a listener off.
const DisabledAddress = "0"

// ServeConfig is what `airlock egress` runs: the gateway and its listeners.
type ServeConfig struct {
	Gateway Config
	// ProxyAddress is the proxy's listen address (--proxy-bind-address).
	ProxyAddress string
	// HealthAddress serves /healthz and /readyz (--health-probe-bind-address).
	HealthAddress string
	// MetricsAddress serves /metrics (--metrics-bind-address); DisabledAddress for none.
	MetricsAddress string
	// DecisionsAddress serves GET /decisions, the claims' decisions for the operator's leader
	// (--decisions-bind-address; docs/record.md §2.1); DisabledAddress or "" for none. It needs
	// Gateway.Decisions and ReaderToken.
	DecisionsAddress string
	// ReaderToken returns the decisions reader's token (claimtoken.DecisionsReaderToken of the
	// proxy key), or an error while the key is not known: every read is refused then.
	ReaderToken func() (string, error)
}

type listener struct {
	flag, addr string
	ln         net.Listener
}

// Run serves the proxy, the health probes and the metrics until ctx ends, then stops
// accepting, fails /readyz, drains the proxy (Config.ShutdownGrace) and shuts the servers down.
// Every address is bound before anything is served, so that a bad or busy one fails the start.
func Run(ctx context.Context, sc ServeConfig) error {
	return run(ctx, sc, nil)
}

// run is Run; listening, if set, is told the bound addresses (proxy, health, metrics,
// decisions; nil for a disabled one) before anything is served.
func run(ctx context.Context, sc ServeConfig, listening func([]net.Addr)) error {
	logger := klog.FromContext(ctx)
	if sc.DecisionsAddress == "" {
		sc.DecisionsAddress = DisabledAddress
	}
	if sc.DecisionsAddress != DisabledAddress && (sc.Gateway.Decisions == nil || sc.ReaderToken == nil) {
		return errors.New("egress: a decisions address needs Gateway.Decisions and ReaderToken")
	}
	g, err := New(sc.Gateway)
	if err != nil {
		return err
	}
	lns, err := listenAll(sc)
	defer func() {
		for _, l := range lns {
			if l.ln != nil {
				_ = l.ln.Close()
			}
		}
	}()
	if err != nil {
		return err
	}
	if listening != nil {
		var addrs []net.Addr
		for _, l := range lns {
			if l.ln != nil {
				addrs = append(addrs, l.ln.Addr())
			} else {
				addrs = append(addrs, nil)
			}
		}
		listening(addrs)
	}
	var shuttingDown atomic.Bool
	type served struct {
		srv *http.Server
		l   *listener
	}
	servers := []served{{newServer(healthHandler(g, &shuttingDown)), lns[1]}}
	if lns[2].ln != nil {
		metrics := http.NewServeMux()
		metrics.Handle("GET /metrics", legacyregistry.Handler())
		servers = append(servers, served{newServer(metrics), lns[2]})
	}
	if lns[3].ln != nil {
		// Reads that follow a claim end with the log's Close, before the server's Shutdown.
		servers = append(servers, served{newServer(sc.Gateway.Decisions.ServeHandler(sc.ReaderToken)), lns[3]})
	}

	eg, egCtx := errgroup.WithContext(ctx)
	for _, s := range servers {
		logger.Info("Serving", "server", s.l.flag, "address", s.l.ln.Addr().String())
		eg.Go(func() error {
			if err := s.srv.Serve(s.l.ln); !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("serving --%s: %w", s.l.flag, err)
			}
			return nil
		})
	}
	proxyCtx, stopProxy := context.WithCancel(ctx)
	defer stopProxy()
	logger.Info("Serving the egress proxy", "address", lns[0].ln.Addr().String())
	eg.Go(func() error {
		err := g.Serve(proxyCtx, lns[0].ln)
		shuttingDown.Store(true)
		if sc.Gateway.Decisions != nil {
			sc.Gateway.Decisions.Close()
		}
		for _, s := range servers {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			_ = s.srv.Shutdown(sctx)
			cancel()
		}
		return err
	})
	// An error of any server stops the proxy too.
	<-egCtx.Done()
	shuttingDown.Store(true)
	stopProxy()
	return eg.Wait()
}

// listenAll binds the proxy, health, metrics and decisions addresses, in that order (a nil listener for a
// disabled one). On an error it returns what it bound, for the caller to close.
func listenAll(sc ServeConfig) ([]*listener, error) {
	var lns []*listener
	for _, l := range []*listener{{"proxy-bind-address", sc.ProxyAddress, nil}, {"health-probe-bind-address", sc.HealthAddress, nil}, {"metrics-bind-address", sc.MetricsAddress, nil}, {"decisions-bind-address", sc.DecisionsAddress, nil}} {
		lns = append(lns, l)
		if l.addr == DisabledAddress {
			continue
		}
		var err error
		if l.ln, err = net.Listen("tcp", l.addr); err != nil {
			return lns, fmt.Errorf("cannot listen on --%s=%s: %w", l.flag, l.addr, err)
		}
	}
	return lns, nil
}

// healthHandler serves /healthz (the process answers) and /readyz (the claims are known and the
// gateway is not shutting down).
func healthHandler(g *Gateway, shuttingDown *atomic.Bool) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { writeCheck(w, nil) })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		err := g.Ready()
		if shuttingDown.Load() {
			err = errors.New("shutting down")
		}
		writeCheck(w, err)
	})
	return mux
}

func newServer(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ErrorLog: klog.NewStandardLogger("WARNING")}
}

func writeCheck(w http.ResponseWriter, err error) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "not ready: %v\n", err)
		return
	}
	fmt.Fprint(w, "ok")
}

// LoadClaimsFile reads a JSON list of StaticClaim (--claims-file) into a synced lookup. Unknown
// fields are errors: a misspelt field must not leave a rule wider than it reads.
func LoadClaimsFile(name string) (*StaticClaims, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	dec := json.NewDecoder(f)
	dec.DisallowUnknownFields()
	var claims []StaticClaim
	if err := dec.Decode(&claims); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	s, err := NewStaticClaims(claims...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	for _, c := range claims {
		if _, err := policy.Compile(c.Policy); err != nil {
			return nil, fmt.Errorf("%s: claim %s/%s: %w", name, c.Namespace, c.Claim, err)
		}
	}
	s.SetSynced()
	return s, nil
}

// DNSResolver returns a resolver that asks only the DNS server at address (host:port).
func DNSResolver(address string) Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, address)
	}}
}

// LoadTerminator reads the terminating CA (PEM certificate and key) and the optional extra roots
// for upstreams (PEM; empty: the system's roots only), and serves the credentials from
// credentialsDir (a mounted Secret, say): the regular file named as the credential, read each
// time it is injected, so that a Secret the kubelet updates (it swaps the ..data link at once)
// is sent from the next request on, without a restart. The CA files are followed too (see
// Terminator): they must hold a CA at start.
func LoadTerminator(caCertFile, caKeyFile, upstreamCAFile, credentialsDir string) (*Terminator, error) {
	files := &CAFiles{CertFile: caCertFile, KeyFile: caKeyFile}
	if _, err := loadSigningCA(files); err != nil {
		return nil, fmt.Errorf("loading the terminating CA (%s, %s): %w", caCertFile, caKeyFile, err)
	}
	return newTerminator(files, upstreamCAFile, credentialsDir)
}

// LoadTerminatorDir is LoadTerminator with the CA in dir's tls.crt and tls.key, the files of a
// mounted kubernetes.io/tls Secret (the operator's airlock-egress-ca), which may hold no CA yet:
// until they do, what would be terminated is refused.
func LoadTerminatorDir(dir, upstreamCAFile, credentialsDir string) (*Terminator, error) {
	if fi, err := os.Stat(dir); err != nil {
		return nil, err
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("%s is not a directory", dir)
	}
	return newTerminator(&CAFiles{CertFile: filepath.Join(dir, "tls.crt"), KeyFile: filepath.Join(dir, "tls.key")}, upstreamCAFile, credentialsDir)
}

func newTerminator(files *CAFiles, upstreamCAFile, credentialsDir string) (*Terminator, error) {
	tr := &Terminator{CAFiles: files}
	if upstreamCAFile != "" {
		pem, err := os.ReadFile(upstreamCAFile)
		if err != nil {
			return nil, err
		}
		roots, err := x509.SystemCertPool()
		if err != nil {
			roots = x509.NewCertPool()
		}
		if !roots.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s holds no PEM certificate", upstreamCAFile)
		}
		tr.UpstreamRoots = roots
	}
	tr.Secrets = func(string) ([]byte, bool) { return nil, false }
	if credentialsDir != "" {
		if _, err := os.ReadDir(credentialsDir); err != nil {
			return nil, err
		}
		tr.Secrets = func(name string) ([]byte, bool) { return readCredential(credentialsDir, name) }
	}
	return tr, nil
}

// readCredential reads the credential name of dir: a regular file (a mounted Secret's key is a
// link into its ..data directory, followed), its trailing newlines trimmed. A name that is not
// one plain file name (a path, a dot name such as ..data) is no credential.
func readCredential(dir, name string) ([]byte, bool) {
	if name == "" || strings.HasPrefix(name, ".") || strings.ContainsAny(name, `/\`) {
		return nil, false
	}
	p := filepath.Join(dir, name)
	if fi, err := os.Stat(p); err != nil || !fi.Mode().IsRegular() {
		return nil, false
	}
	value, err := os.ReadFile(p)
	if err != nil {
		return nil, false
	}
	value = bytes.TrimRight(value, "\r\n")
	return value, len(value) > 0
}
