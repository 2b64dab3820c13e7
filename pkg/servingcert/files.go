package servingcert

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/airlock-dev/airlock/pkg/pki"
)

// FileSource serves a certificate and key from files that something else renews, such as the
// Secret of a cert-manager Certificate mounted into the pod. Every handshake stats the files (a
// stat, not a read) and re-reads them when one changed (another inode, size or modification
// time: the kubelet replaces a mounted Secret's files through a symlink swap); no goroutine polls
// them. A change that does not parse (a certificate written before its key) keeps the previous
// certificate until the files change again. An optional CA bundle file is followed the same way,
// and is what Bundle returns.
type FileSource struct {
	certFile, keyFile, caFile string
	logger                    klog.Logger

	mu       sync.Mutex
	stamps   [3]os.FileInfo // of certFile, keyFile and caFile as last read
	cert     *tls.Certificate
	bundle   []byte
	watchers listeners
}

// NewFileSource reads certFile and keyFile (and caFile, unless empty) once, failing when they do
// not hold a matching certificate and key (or caFile no PEM certificate).
func NewFileSource(logger klog.Logger, certFile, keyFile, caFile string) (*FileSource, error) {
	registerMetrics()
	f := &FileSource{certFile: certFile, keyFile: keyFile, caFile: caFile, logger: logger}
	if err := f.reload(); err != nil {
		return nil, err
	}
	if f.cert == nil {
		return nil, fmt.Errorf("cannot read the serving certificate from %s and %s", certFile, keyFile)
	}
	if caFile != "" && f.bundle == nil {
		return nil, fmt.Errorf("cannot read a CA certificate from %s", caFile)
	}
	return f, nil
}

// stat returns the FileInfo of name, nil when it cannot be stat'ed.
func stat(name string) os.FileInfo {
	if name == "" {
		return nil
	}
	fi, err := os.Stat(name)
	if err != nil {
		return nil
	}
	return fi
}

func sameStamp(a, b os.FileInfo) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return os.SameFile(a, b) && a.Size() == b.Size() && a.ModTime().Equal(b.ModTime())
}

// reload re-reads the files whose stamp changed. It returns an error only for the first read.
func (f *FileSource) reload() error {
	f.mu.Lock()
	stamps := [3]os.FileInfo{stat(f.certFile), stat(f.keyFile), stat(f.caFile)}
	certChanged := !sameStamp(stamps[0], f.stamps[0]) || !sameStamp(stamps[1], f.stamps[1])
	caChanged := f.caFile != "" && !sameStamp(stamps[2], f.stamps[2])
	if !certChanged && !caChanged {
		f.mu.Unlock()
		return nil
	}
	first := f.cert == nil
	f.stamps = stamps
	var firstErr error
	if certChanged {
		cert, err := tls.LoadX509KeyPair(f.certFile, f.keyFile)
		switch {
		case err != nil && first:
			firstErr = fmt.Errorf("loading the serving certificate (--tls-cert-file=%s, --tls-key-file=%s): %w", f.certFile, f.keyFile, err)
		case err != nil:
			f.logger.Error(err, "Cannot reload the serving certificate: serving the previous one until the files change again", "certFile", f.certFile, "keyFile", f.keyFile)
		default:
			f.cert = &cert
			observeServed(f.cert)
			if !first {
				f.logger.Info("Reloaded the serving certificate", "certFile", f.certFile, "notAfter", cert.Leaf.NotAfter.UTC().Format(time.RFC3339))
			}
		}
	}
	notify := false
	if caChanged {
		b, err := os.ReadFile(f.caFile)
		if err == nil {
			_, err = pki.ParseCerts(b)
		}
		switch {
		case err != nil && first:
			firstErr = fmt.Errorf("loading the CA bundle (--tls-ca-file=%s): %w", f.caFile, err)
		case err != nil:
			f.logger.Error(err, "Cannot reload the CA bundle: publishing the previous one until the file changes again", "caFile", f.caFile)
		case !bytes.Equal(b, f.bundle):
			f.bundle = b
			notify = !first
		}
	}
	f.mu.Unlock()
	if notify {
		f.watchers.call()
	}
	return firstErr
}

// GetCertificate is a tls.Config's GetCertificate.
func (f *FileSource) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	_ = f.reload()
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cert, nil
}

// Bundle returns the CA file's PEM as last read (re-read if it changed), nil without a CA file.
func (f *FileSource) Bundle() []byte {
	_ = f.reload()
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.bundle
}

// OnBundleChange calls f (which must not block) when a handshake or Bundle finds that the CA file
// changed.
func (f *FileSource) OnBundleChange(fn func()) (remove func()) { return f.watchers.add(fn) }

// Name and Check make the FileSource a readiness check (it always has a certificate).
func (f *FileSource) Name() string { return "servingCertificate" }

func (f *FileSource) Check(*http.Request) error { return nil }
