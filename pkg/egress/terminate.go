package egress

import (
	"bufio"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/textproto"
	"os"
	"slices"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/airlock-dev/airlock/pkg/egress/policy"
)

// Terminator lets the gateway terminate a tunnel's TLS for hosts whose rules restrict methods or
// paths or inject a credential: it answers the sandbox with a certificate for the CONNECT host
// issued by its CA (which the sandbox trusts through its mounted bundle), reads each request, holds it
// to the rules, adds the credential, and sends it on its own TLS connection to the checked
// address, verifying the real server's certificate against UpstreamRoots (nil: the system's).
//
// The CA is CA, or, when CAFiles is set, the PEM certificate and key of those files, followed as
// they change (the operator rotates the CA in a Secret the gateway mounts, which the kubelet
// updates by swapping its files): every mint stats both files (no goroutine, no timer) and
// re-reads them when either changed. While the files hold no usable CA (missing, as in an optional
// mount of a Secret not made yet, or not a CA), the gateway has none and refuses what it would
// terminate (inspection_required), as without a Terminator; a change that does not parse keeps
// the CA it had, and is read again at the next mint.
type Terminator struct {
	CA            tls.Certificate
	CAFiles       *CAFiles
	UpstreamRoots *x509.CertPool
	// Secrets returns the value of a credential by name; false when it has none (the request
	// is then refused, never sent without it).
	Secrets func(name string) ([]byte, bool)
	// Logger, if set, is told when the CA files are loaded or cannot be.
	Logger *klog.Logger

	once    sync.Once
	key     *ecdsa.PrivateKey
	initErr error
	mu      sync.Mutex
	ca      *signingCA
	stamps  [2]os.FileInfo // of CAFiles as last loaded
	failed  [2]os.FileInfo // of CAFiles as last found unusable, logged once
	leaves  map[string]*tls.Certificate
}

// CAFiles are a terminating CA's PEM certificate and key files.
type CAFiles struct{ CertFile, KeyFile string }

// signingCA is a parsed CA the gateway signs with.
type signingCA struct {
	pair tls.Certificate
	cert *x509.Certificate
}

// maxLeaves bounds the minted certificates kept: a wildcard rule with conditions lets a sandbox
// ask for any number of names.
const maxLeaves = 1024

// leafValidity is how long a minted certificate is valid; it is minted again before then.
const leafValidity = 24 * time.Hour

func (tr *Terminator) init() error {
	tr.once.Do(func() {
		tr.key, tr.initErr = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tr.leaves = map[string]*tls.Certificate{}
		if tr.CAFiles == nil {
			tr.ca, tr.initErr = parseSigningCA(tr.CA)
		}
	})
	return tr.initErr
}

// parseSigningCA checks that pair is a CA with a key that signs.
func parseSigningCA(pair tls.Certificate) (*signingCA, error) {
	if len(pair.Certificate) == 0 || pair.PrivateKey == nil {
		return nil, errors.New("egress: the terminating CA has no certificate or key")
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("egress: the terminating CA: %w", err)
	}
	if !cert.IsCA {
		return nil, errors.New("egress: the terminating CA's certificate is not a CA")
	}
	if _, ok := pair.PrivateKey.(crypto.Signer); !ok {
		return nil, errors.New("egress: the terminating CA's key cannot sign")
	}
	return &signingCA{pair: pair, cert: cert}, nil
}

// statCA returns the FileInfo of the CA files, nil for one that cannot be stat'ed.
func (tr *Terminator) statCA() [2]os.FileInfo {
	var out [2]os.FileInfo
	for i, name := range []string{tr.CAFiles.CertFile, tr.CAFiles.KeyFile} {
		if fi, err := os.Stat(name); err == nil {
			out[i] = fi
		}
	}
	return out
}

func sameFile(a, b os.FileInfo) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return os.SameFile(a, b) && a.Size() == b.Size() && a.ModTime().Equal(b.ModTime())
}

// currentCA returns the CA to sign with now, nil for none; with CAFiles, it reloads them when
// they changed. Call it with tr.mu held.
func (tr *Terminator) currentCA() *signingCA {
	if tr.CAFiles == nil {
		return tr.ca
	}
	stamps := tr.statCA()
	if sameFile(stamps[0], tr.stamps[0]) && sameFile(stamps[1], tr.stamps[1]) && (tr.ca != nil || stamps[0] == nil && stamps[1] == nil) {
		return tr.ca
	}
	ca, err := loadSigningCA(tr.CAFiles)
	if err != nil {
		if !sameFile(stamps[0], tr.failed[0]) || !sameFile(stamps[1], tr.failed[1]) {
			tr.failed = stamps
			if tr.Logger != nil {
				tr.Logger.Error(err, "Cannot load the terminating CA: keeping the one held, if any, until the files change", "certFile", tr.CAFiles.CertFile, "keyFile", tr.CAFiles.KeyFile, "held", tr.ca != nil)
			}
		}
		return tr.ca
	}
	tr.stamps, tr.failed = stamps, [2]os.FileInfo{}
	if tr.ca == nil || !tr.ca.cert.Equal(ca.cert) {
		clear(tr.leaves) // minted by the previous CA
		if tr.Logger != nil {
			tr.Logger.Info("Loaded the terminating CA", "certFile", tr.CAFiles.CertFile, "subject", ca.cert.Subject.CommonName, "notAfter", ca.cert.NotAfter.UTC().Format(time.RFC3339))
		}
	}
	tr.ca = ca
	return ca
}

// loadSigningCA reads and checks a CA's files.
func loadSigningCA(files *CAFiles) (*signingCA, error) {
	pair, err := tls.LoadX509KeyPair(files.CertFile, files.KeyFile)
	if err != nil {
		return nil, err
	}
	return parseSigningCA(pair)
}

// available says whether the gateway has a CA to terminate with now.
func (tr *Terminator) available() bool {
	if tr == nil || tr.init() != nil {
		return false
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.currentCA() != nil
}

// certificate returns a certificate for host (a normalised name), minted on first use.
func (tr *Terminator) certificate(host string, now time.Time) (*tls.Certificate, error) {
	if err := tr.init(); err != nil {
		return nil, err
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	ca := tr.currentCA()
	if ca == nil {
		return nil, errors.New("egress: no terminating CA")
	}
	if c, ok := tr.leaves[host]; ok && now.Before(c.Leaf.NotAfter.Add(-leafValidity/4)) {
		return c, nil
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: host}, DNSNames: []string{host},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(leafValidity),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &tr.key.PublicKey, ca.pair.PrivateKey.(crypto.Signer))
	if err != nil {
		return nil, fmt.Errorf("egress: minting a certificate for %s: %w", host, err)
	}
	leaf, _ := x509.ParseCertificate(der)
	c := &tls.Certificate{Certificate: [][]byte{der, ca.pair.Certificate[0]}, PrivateKey: tr.key, Leaf: leaf}
	if len(tr.leaves) >= maxLeaves {
		clear(tr.leaves)
	}
	tr.leaves[host] = c
	return c, nil
}

// prefixConn replays prefix (the ClientHello already read) before reading from its Conn.
type prefixConn struct {
	net.Conn
	prefix []byte
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(p, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// terminate serves a terminated tunnel: TLS with the sandbox (HTTP/1.1 only), TLS with the
// checked upstream, verified, then request by request: origin form, Host the CONNECT host, a
// rule allowing method and path, its credential added; the first refusal ends the tunnel.
func (g *Gateway) terminate(ctx context.Context, c net.Conn, hello []byte, upstream net.Conn, t policy.Target, rules []*policy.CompiledRule, ex *exchange) {
	tr := g.cfg.Terminate
	cert, err := tr.certificate(t.Host, g.cfg.Clock.Now())
	if err != nil {
		ex.reason = ReasonUpstreamTLS
		return
	}
	client := tls.Server(&prefixConn{Conn: c, prefix: hello}, &tls.Config{
		Certificates: []tls.Certificate{*cert}, NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12})
	defer client.Close()
	hctx, cancel := context.WithTimeout(ctx, g.cfg.HeadTimeout)
	defer cancel()
	if err := client.HandshakeContext(hctx); err != nil {
		ex.reason = ReasonNotTLS
		return
	}
	server := tls.Client(upstream, &tls.Config{ServerName: t.Host, RootCAs: tr.UpstreamRoots,
		NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12})
	dctx, cancel2 := context.WithTimeout(ctx, g.cfg.DialTimeout)
	defer cancel2()
	if err := server.HandshakeContext(dctx); err != nil {
		ex.reason = ReasonUpstreamTLS
		return
	}
	ex.reason = ReasonAllowed
	idle := &idleWatch{timeout: g.cfg.IdleTimeout, conns: []net.Conn{c, upstream}}
	cw, uw := &countingWriter{w: &idleConn{Conn: client, watch: idle}}, &countingWriter{w: &idleConn{Conn: server, watch: idle}}
	defer func() { ex.up += uw.n; ex.down += cw.n }()
	cbr := bufio.NewReaderSize(&idleConn{Conn: client, watch: idle}, g.cfg.MaxHeaderBytes)
	ubr := bufio.NewReader(&idleConn{Conn: server, watch: idle})
	for {
		idle.touch()
		head, err := readHead(cbr)
		if errors.Is(err, bufio.ErrBufferFull) {
			g.refuse(cw, &exchange{}, ReasonHeaderTooLarge)
			ex.reason = ReasonHeaderTooLarge
			return
		}
		if err != nil {
			return
		}
		req, err := http.ReadRequest(cbr)
		if err != nil {
			g.refuse(cw, &exchange{}, ReasonBadRequest)
			ex.reason = ReasonBadRequest
			return
		}
		if reason := g.checkTerminated(req, head, t, rules); reason != "" {
			g.refuse(cw, &exchange{}, reason)
			ex.reason = reason
			return
		}
		if !g.forwardTerminated(req, t, rules, uw, ubr, cw, ex) {
			return
		}
	}
}

// checkTerminated holds one request of a terminated tunnel to the tunnel's host and rules, and
// its body to one that its method has and one unambiguous length.
func (g *Gateway) checkTerminated(req *http.Request, head textproto.MIMEHeader, t policy.Target, rules []*policy.CompiledRule) Reason {
	if req.URL.IsAbs() || req.URL.Host != "" || req.Method == http.MethodConnect {
		return ReasonHostMismatch
	}
	ht, err := policy.ParseAuthority(req.Host, 443)
	if err != nil || ht != t {
		return ReasonHostMismatch
	}
	if req.Header.Get("Upgrade") != "" {
		return ReasonUpgrade
	}
	if matchTerminated(req, rules) == nil {
		return ReasonMethodOrPath
	}
	return bodyReason(req, head)
}

// matchTerminated returns the rule that allows req: one without a credential first, so that a
// credential is added only where nothing else allows the request; a rule with a credential
// never allows a TRACE or a CONNECT, whose answers would carry the request back.
func matchTerminated(req *http.Request, rules []*policy.CompiledRule) *policy.CompiledRule {
	path := req.URL.EscapedPath()
	var withCredential *policy.CompiledRule
	for _, r := range rules {
		if !r.AllowsRequest(req.Method, path) {
			continue
		}
		if r.Inject == nil {
			return r
		}
		if withCredential == nil && req.Method != http.MethodTrace && req.Method != http.MethodConnect {
			withCredential = r
		}
	}
	return withCredential
}

// forwardTerminated sends req upstream with its rule's credential and the answer back, 1xx
// interim answers first (RFC 9110 section 15.2: relayed, the final answer still awaited), with
// every credential of the tunnel's rules replaced in what it relays (scrub.go). It reports
// whether the tunnel may carry another request: only when the gateway settled the exchange's
// framing itself (no request body, which an upstream may leave unread and take for the next
// request; a final answer with a length of its own, nothing more from the upstream after it).
func (g *Gateway) forwardTerminated(req *http.Request, t policy.Target, rules []*policy.CompiledRule, uw *countingWriter, ubr *bufio.Reader, cw *countingWriter, ex *exchange) bool {
	rule := matchTerminated(req, rules)
	out := outboundRequest(req, t, 443)
	if rule.Inject != nil {
		value, ok := g.cfg.Terminate.Secrets(rule.Inject.Secret)
		if !ok || len(value) == 0 {
			g.refuse(cw, &exchange{}, ReasonNoCredentialValue)
			ex.reason = ReasonNoCredentialValue
			return false
		}
		out.Header.Set(rule.Inject.Header, string(value))
		ex.credential = rule.Inject.Secret
		// An answer the gateway can read: a compressed echo would pass the scrubber.
		out.Header.Set("Accept-Encoding", "identity")
	}
	sc := newScrubber(g.tunnelSecrets(rules))
	hasBody := req.ContentLength != 0 || len(req.TransferEncoding) > 0
	if err := out.Write(uw); err != nil {
		return false
	}
	for {
		resp, err := http.ReadResponse(ubr, out)
		if err != nil || resp.StatusCode == http.StatusSwitchingProtocols {
			return false
		}
		for _, h := range connectionHeaders(resp.Header) {
			resp.Header.Del(h)
		}
		sc.head(resp)
		if resp.StatusCode < 200 {
			_ = resp.Body.Close()
			if _, err := fmt.Fprintf(cw, "HTTP/1.1 %s\r\n", resp.Status); err != nil {
				return false
			}
			if err := resp.Header.Write(cw); err != nil {
				return false
			}
			if _, err := io.WriteString(cw, "\r\n"); err != nil {
				return false
			}
			continue
		}
		settled := !hasBody && !resp.Close && (resp.ContentLength >= 0 || slices.Contains(resp.TransferEncoding, "chunked"))
		resp.Close = req.Close || !settled
		resp.Body = sc.body(resp)
		err = resp.Write(cw)
		_ = resp.Body.Close()
		return err == nil && !resp.Close && ubr.Buffered() == 0
	}
}

// tunnelSecrets are the values of the credentials of a tunnel's rules, which nothing the
// gateway relays to the sandbox may hold.
func (g *Gateway) tunnelSecrets(rules []*policy.CompiledRule) [][]byte {
	var out [][]byte
	for _, r := range rules {
		if r.Inject == nil {
			continue
		}
		if v, ok := g.cfg.Terminate.Secrets(r.Inject.Secret); ok && len(v) > 0 {
			out = append(out, v)
		}
	}
	return out
}
