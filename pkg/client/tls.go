package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"time"
)

// DefaultCAFile is where a runtime's pod mounts the ConfigMap airlock-ca that the operator keeps
// in every namespace with an AgentRuntime (its key ca.crt): the CA bundle that verifies the
// Sandbox API.
const DefaultCAFile = "/var/run/airlock/ca/ca.crt"

// defaultCAFile is DefaultCAFile; a seam for tests.
var defaultCAFile = DefaultCAFile

// TLSOptions say how a Client verifies the Sandbox API's certificate.
type TLSOptions struct {
	// CAFile is a PEM CA bundle, re-read whenever it changes (the kubelet updates a mounted
	// ConfigMap when the operator rotates its CA), so that a long-running runtime follows a
	// rotation. Empty: DefaultCAFile, unless CAData is set.
	CAFile string
	// CAData is a PEM CA bundle; it wins over CAFile.
	CAData []byte
	// ServerName is the name the certificate must be valid for, when it is not the URL's host
	// (a replica called by its IP address). Empty: the URL's host.
	ServerName string
	// InsecureSkipVerify accepts any certificate: whoever sits on the path can then read the
	// runtime's ServiceAccount token and the sandboxes' bearer tokens. For debugging only; it is
	// never on unless set.
	InsecureSkipVerify bool
}

// NewHTTPClient returns an http.Client for the Sandbox API that verifies its certificate as opts
// say. It fails when the CA bundle cannot be read or holds no certificate. Every new connection
// verifies against the bundle as it is then (CAFile is stat'ed, and re-read only when it changed).
func NewHTTPClient(opts TLSOptions) (*http.Client, error) {
	if opts.InsecureSkipVerify {
		return newHTTPClient(opts, nil), nil // no bundle is read
	}
	roots, err := newRootSource(opts)
	if err != nil {
		return nil, err
	}
	if _, err := roots.pool(); err != nil {
		return nil, err
	}
	return newHTTPClient(opts, roots), nil
}

// defaultHTTPClient is the client of New without one: it verifies with DefaultCAFile, read when
// a connection is made (a missing file fails that request with an error that names it).
func defaultHTTPClient() *http.Client {
	roots, _ := newRootSource(TLSOptions{})
	return newHTTPClient(TLSOptions{}, roots)
}

func newHTTPClient(opts TLSOptions, roots *rootSource) *http.Client {
	transport := http.DefaultTransport.(*http.Transport).Clone()
	if opts.InsecureSkipVerify {
		transport.TLSClientConfig = &tls.Config{InsecureSkipVerify: true, ServerName: opts.ServerName, MinVersion: tls.VersionTLS12} //nolint:gosec // asked for by name
		return &http.Client{Transport: transport}
	}
	dialer := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	transport.DialTLSContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		pool, err := roots.pool()
		if err != nil {
			return nil, err
		}
		serverName := opts.ServerName
		if serverName == "" {
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			serverName = host
		}
		conn, err := dialer.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		tc := tls.Client(conn, &tls.Config{RootCAs: pool, ServerName: serverName, MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}})
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = conn.Close()
			return nil, fmt.Errorf("verifying the Sandbox API at %s as %q: %w", addr, serverName, err)
		}
		return tc, nil
	}
	return &http.Client{Transport: transport}
}

// rootSource is the CA pool: fixed (CAData) or a file re-read when its stat changes.
type rootSource struct {
	file string

	mu     sync.Mutex
	stamp  os.FileInfo
	cached *x509.CertPool
}

func newRootSource(opts TLSOptions) (*rootSource, error) {
	if len(opts.CAData) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(opts.CAData) {
			return nil, errors.New("the CA bundle (CAData) holds no PEM certificate")
		}
		return &rootSource{cached: pool}, nil
	}
	file := opts.CAFile
	if file == "" {
		file = defaultCAFile
	}
	return &rootSource{file: file}, nil
}

func (r *rootSource) pool() (*x509.CertPool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.file == "" {
		return r.cached, nil
	}
	fi, err := os.Stat(r.file)
	if err != nil {
		return nil, fmt.Errorf("reading the Sandbox API's CA bundle: %w (mount the ConfigMap airlock-ca, or set a CA file)", err)
	}
	if r.cached != nil && r.stamp != nil && os.SameFile(fi, r.stamp) && fi.Size() == r.stamp.Size() && fi.ModTime().Equal(r.stamp.ModTime()) {
		return r.cached, nil
	}
	b, err := os.ReadFile(r.file)
	if err != nil {
		return nil, fmt.Errorf("reading the Sandbox API's CA bundle: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("the Sandbox API's CA bundle %s holds no PEM certificate", r.file)
	}
	r.cached, r.stamp = pool, fi
	return pool, nil
}
