package wire

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/airlock-dev/airlock/pkg/claimtoken/warmtoken"
)

// Guard checks every MCP request before it reaches a transport: DNS
// rebinding protection (Host and Origin) and, when a token is configured,
// the bearer token; for a warm member, the adoption token (warmLock).
type Guard struct {
	// tokenHash is the SHA-256 of the token, nil when none is required.
	// Hashes of equal length are compared, so the comparison takes the same
	// time whatever the token's length.
	tokenHash []byte
	// warm is set for a warm member (Config.WarmKeyFile), and tokenHash is
	// then nil. wrap chooses once, so the other path pays nothing for it.
	warm *warmLock
}

// NewGuard reads the token from tokenFile; an empty tokenFile requires none.
func NewGuard(tokenFile string) (*Guard, error) {
	if tokenFile == "" {
		return &Guard{}, nil
	}
	data, err := os.ReadFile(tokenFile)
	if err != nil {
		return nil, fmt.Errorf("auth token file: %w", err)
	}
	token := strings.TrimSpace(string(data))
	if token == "" {
		return nil, fmt.Errorf("auth token file %s is empty", tokenFile)
	}
	if strings.ContainsAny(token, " \t\r\n") {
		return nil, fmt.Errorf("auth token file %s holds more than one token (whitespace inside)", tokenFile)
	}
	sum := sha256.Sum256([]byte(token))
	return &Guard{tokenHash: sum[:]}, nil
}

// wrap puts the checks in front of h.
func (g *Guard) wrap(h http.Handler) http.Handler {
	if g.warm != nil {
		return g.warm.wrap(h)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := checkHostAndOrigin(r); err != nil {
			http.Error(w, "Forbidden: "+err.Error(), http.StatusForbidden)
			return
		}
		if !g.authorized(r) {
			unauthorized(w)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// wrapEvidence puts the checks of GET /isolation in front of h: those of
// wrap, and for a warm member also its evidence token
// (warmtoken.EvidenceToken), with which the operator reads the evidence
// before any claim adopts the member. That token opens this route alone and
// adopts nothing: an unadopted member stays unadopted, an adopted one stays
// locked to its adopting token (docs/security.md, "sandboxd's GET
// /isolation").
func (g *Guard) wrapEvidence(h http.Handler) http.Handler {
	if g.warm == nil {
		return g.wrap(h)
	}
	l := g.warm
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := checkHostAndOrigin(r); err != nil {
			http.Error(w, "Forbidden: "+err.Error(), http.StatusForbidden)
			return
		}
		if !l.evidenceReader(r) && !l.authorized(r) {
			unauthorized(w)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// unauthorized answers 401 with the challenge every refused MCP request gets.
func unauthorized(w http.ResponseWriter) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="airlock-sandboxd"`)
	http.Error(w, "Unauthorized: this sandbox needs Authorization: Bearer <token> (the headers that acquire returned)", http.StatusUnauthorized)
}

// authorized reports whether r carries the token, if one is required.
func (g *Guard) authorized(r *http.Request) bool {
	if g.tokenHash == nil {
		return true
	}
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(token)))
	return subtle.ConstantTimeCompare(sum[:], g.tokenHash) == 1
}

// warmLock is the guard of a warm pool member (Config.WarmKeyFile). The
// member serves nobody until a request carries an adoption token that
// verifies against the member key (warmtoken.VerifyAdoption): that request
// adopts it. adopt then serves the token's tools, once, and from then on
// only that exact token is accepted (its SHA-256 compared in constant time,
// as guard does); any other token, a valid adoption token of another claim
// or tool list included, gets 401. Two first requests with different valid
// tokens are serialised by mu: exactly one adopts, the other gets 401.
//
// The lock lives in memory only: a restarted container is unadopted again,
// and the next token that verifies adopts it. That is the crash recovery:
// only the adopting claim's runtime is ever given a token of this member,
// so it is that runtime that adopts it again (docs/decisions.md, "Warm
// members: the token is the adoption", which also says what Bash can do with
// the key file).
type warmLock struct {
	key    []byte
	logger klog.Logger
	// adopt serves an adoption's tools and returns the tools served and the
	// names it ignored (tools this sandboxd does not have); an error refuses
	// the adoption. It is called under mu, at most once successfully.
	adopt func(warmtoken.Adoption) (served, ignored []string, err error)

	mu      sync.Mutex
	adopted atomic.Pointer[adoption] // nil until adopted; set once, under mu
}

// adoption is what a warm member is locked to.
type adoption struct {
	tokenHash []byte // SHA-256 of the adopting token
	claimUID  types.UID
}

// NewWarmGuard reads the member key from keyFile.
func NewWarmGuard(keyFile string, logger klog.Logger) (*Guard, error) {
	data, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("warm key file: %w", err)
	}
	key, err := warmtoken.DecodeMemberKey(string(data))
	if err != nil {
		return nil, fmt.Errorf("warm key file %s: %w", keyFile, err)
	}
	return &Guard{warm: &warmLock{key: key, logger: logger}}, nil
}

// wrap puts the checks in front of h, as guard.wrap does.
func (l *warmLock) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := checkHostAndOrigin(r); err != nil {
			http.Error(w, "Forbidden: "+err.Error(), http.StatusForbidden)
			return
		}
		if !l.authorized(r) {
			unauthorized(w)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// authorized reports whether r carries the adopting token, adopting the
// member first if it is not adopted yet and r's token verifies. The
// requests that arrive while an adoption is being served wait for it on mu.
func (l *warmLock) authorized(r *http.Request) bool {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	token = strings.TrimSpace(token)
	sum := sha256.Sum256([]byte(token))
	if a := l.adopted.Load(); a != nil {
		return l.matches(a, sum[:], token)
	}
	verified, err := warmtoken.VerifyAdoption(l.key, token)
	if err != nil {
		l.logger.V(4).Info("Refused a request to an unadopted member", "err", err)
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if a := l.adopted.Load(); a != nil { // another request adopted it meanwhile
		return l.matches(a, sum[:], token)
	}
	served, ignored, err := l.adopt(verified)
	if err != nil {
		l.logger.Info("Refused an adoption", "claimUID", verified.ClaimUID, "tokenTools", verified.Tools, "err", err)
		return false
	}
	l.adopted.Store(&adoption{tokenHash: sum[:], claimUID: verified.ClaimUID})
	if len(ignored) > 0 {
		l.logger.Info("Adopted", "claimUID", verified.ClaimUID, "tools", len(served), "ignoredTools", ignored)
	} else {
		l.logger.Info("Adopted", "claimUID", verified.ClaimUID, "tools", len(served))
	}
	return true
}

// evidenceReader reports whether r carries the member's evidence token.
func (l *warmLock) evidenceReader(r *http.Request) bool {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	return ok && strings.EqualFold(scheme, "Bearer") && warmtoken.IsEvidenceToken(l.key, strings.TrimSpace(token))
}

// matches reports whether token is the one that adopted the member. A
// valid adoption token of another claim or tool list is logged at V(2)
// (its claim, never the token).
func (l *warmLock) matches(a *adoption, sum []byte, token string) bool {
	if subtle.ConstantTimeCompare(sum, a.tokenHash) == 1 {
		return true
	}
	if v := l.logger.V(2); v.Enabled() {
		if other, err := warmtoken.VerifyAdoption(l.key, token); err == nil {
			v.Info("Refused another adoption token: the member is adopted", "claimUID", other.ClaimUID, "adoptedBy", a.claimUID)
		}
	}
	return false
}

// checkHostAndOrigin protects against DNS rebinding: a request that arrived
// on a loopback address must name a loopback host, and a request with an
// Origin must come from the host it names (or, on loopback, from another
// loopback origin).
func checkHostAndOrigin(r *http.Request) error {
	onLoopback := false
	if local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok && local != nil {
		onLoopback = isLoopbackHost(local.String())
	}
	if onLoopback && !isLoopbackHost(r.Host) {
		return fmt.Errorf("Host %q is not a loopback name, but the request came in on a loopback address (DNS rebinding protection)", r.Host)
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return nil
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return fmt.Errorf("Origin %q is not an origin this server accepts", origin)
	}
	if strings.EqualFold(u.Host, r.Host) || (isLoopbackHost(u.Host) && isLoopbackHost(r.Host)) {
		return nil
	}
	return fmt.Errorf("Origin %q does not match Host %q", origin, r.Host)
}

// isLoopbackHost reports whether hostport (a host, or host:port) names the
// loopback interface.
func isLoopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
