package sandboxd

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
)

// guard checks every MCP request before it reaches a transport: DNS
// rebinding protection (Host and Origin) and, when a token is configured,
// the bearer token.
type guard struct {
	// tokenHash is the SHA-256 of the token, nil when none is required.
	// Hashes of equal length are compared, so the comparison takes the same
	// time whatever the token's length.
	tokenHash []byte
}

// newGuard reads the token from tokenFile; an empty tokenFile requires none.
func newGuard(tokenFile string) (*guard, error) {
	if tokenFile == "" {
		return &guard{}, nil
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
	return &guard{tokenHash: sum[:]}, nil
}

// wrap puts the checks in front of h.
func (g *guard) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := checkHostAndOrigin(r); err != nil {
			http.Error(w, "Forbidden: "+err.Error(), http.StatusForbidden)
			return
		}
		if !g.authorized(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="airlock-sandboxd"`)
			http.Error(w, "Unauthorized: this sandbox needs Authorization: Bearer <token> (the headers that acquire returned)", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// authorized reports whether r carries the token, if one is required.
func (g *guard) authorized(r *http.Request) bool {
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
