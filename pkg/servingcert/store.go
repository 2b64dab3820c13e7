package servingcert

import (
	"bytes"
	"crypto/tls"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
)

// ErrNoCertificate is the handshake error of a Store that holds no certificate yet.
var ErrNoCertificate = errors.New("the Sandbox API has no serving certificate yet")

// Store holds the certificate the Sandbox API serves and the CA bundle that verifies it. Set swaps
// both at once; GetCertificate, called on every TLS handshake, sees the new certificate from the
// next handshake on, without a restart. Connections already open keep the certificate they were
// opened with. It is safe for concurrent use.
type Store struct {
	current   atomic.Pointer[served]
	listeners listeners
}

// served is one certificate and its bundle.
type served struct {
	cert   *tls.Certificate
	bundle []byte
}

// NewStore returns an empty Store: handshakes fail until the first Set.
func NewStore() *Store {
	registerMetrics()
	return &Store{}
}

// Set parses a PEM certificate (chain) and key and serves them from the next handshake on, with
// bundle as the CA bundle. On an error the Store keeps what it held. Listeners are called when
// the bundle changed.
func (s *Store) Set(certPEM, keyPEM, bundle []byte) error {
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return err
	}
	next := &served{cert: &cert, bundle: bytes.Clone(bundle)}
	prev := s.current.Swap(next)
	observeServed(next.cert)
	if prev == nil || !bytes.Equal(prev.bundle, next.bundle) {
		s.listeners.call()
	}
	return nil
}

// GetCertificate is a tls.Config's GetCertificate.
func (s *Store) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	cur := s.current.Load()
	if cur == nil {
		return nil, ErrNoCertificate
	}
	return cur.cert, nil
}

// Bundle returns the PEM CA bundle, or nil before the first Set.
func (s *Store) Bundle() []byte {
	if cur := s.current.Load(); cur != nil {
		return cur.bundle
	}
	return nil
}

// OnBundleChange calls f (which must not block: enqueue work) whenever Set changes the bundle.
// remove stops that.
func (s *Store) OnBundleChange(f func()) (remove func()) { return s.listeners.add(f) }

// Name and Check make the Store a readiness check: a replica without a certificate is not ready.
func (s *Store) Name() string { return "servingCertificate" }

func (s *Store) Check(*http.Request) error {
	if s.current.Load() == nil {
		return ErrNoCertificate
	}
	return nil
}

// listeners are the functions to call when a bundle changes. The zero value is ready to use.
type listeners struct {
	mu     sync.Mutex
	fns    map[int]func()
	nextID int
}

func (l *listeners) add(f func()) (remove func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fns == nil {
		l.fns = map[int]func(){}
	}
	id := l.nextID
	l.nextID++
	l.fns[id] = f
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		delete(l.fns, id)
	}
}

func (l *listeners) call() {
	l.mu.Lock()
	fns := make([]func(), 0, len(l.fns))
	for _, f := range l.fns {
		fns = append(fns, f)
	}
	l.mu.Unlock()
	for _, f := range fns {
		f()
	}
}
