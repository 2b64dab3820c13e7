package policy

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// Policy is what one claim may reach through the gateway: nothing unless a rule allows it. It is
// the gateway's own type; the claim's frozen record (SandboxClass.spec.egress) is converted to it.
type Policy struct {
	Rules []Rule `json:"rules"`
}

// Rule allows one host (or the subdomains of one), on some ports.
type Rule struct {
	// Host is an exact name ("proxy.golang.org"), a wildcard "*.example.com" (every name below
	// example.com, at any depth, not example.com itself), or an IP address. Names are matched in
	// their normalised form (lower case, no trailing dot, IDNA A-labels).
	Host string `json:"host"`
	// Ports are the allowed ports; at least one.
	Ports []uint16 `json:"ports"`
	// Methods, when set, are the only HTTP methods allowed (upper case). A rule with Methods or
	// PathPrefixes can be enforced only on requests the gateway reads: plain HTTP. It never
	// allows a CONNECT tunnel, whose requests the gateway cannot see.
	Methods []string `json:"methods,omitempty"`
	// PathPrefixes, when set, are the only paths allowed: a path matches a prefix when it equals
	// it or continues it after a "/" (the prefix "/a" matches "/a" and "/a/b", not "/ab").
	PathPrefixes []string `json:"pathPrefixes,omitempty"`
	// AllowPrivate lets the host's addresses be private (RFC 1918, ULA), CGNAT, reserved or in
	// the cluster's ranges. Loopback, link-local (with the metadata address), unspecified and
	// multicast addresses are refused even so: they are the gateway's own pod and node.
	AllowPrivate bool `json:"allowPrivate,omitempty"`
	// Inject, when set, is a credential the gateway adds to the requests this rule allows (its
	// Methods, GET and HEAD when it lists none, never TRACE; its PathPrefixes), in a TLS tunnel it
	// terminates (never in plain HTTP); the sandbox never holds it.
	Inject *Injection `json:"inject,omitempty"`
	// AllowNonTLS lets a CONNECT tunnel to this host carry something other than TLS (ssh on
	// port 22, say). A tunnel that starts with a ClientHello is still held to its SNI.
	AllowNonTLS bool `json:"allowNonTLS,omitempty"`
}

// Injection is a header whose value the gateway holds and adds to a host's requests.
type Injection struct {
	// Header is the header's name (Authorization, say); a header of that name from the sandbox
	// is replaced.
	Header string `json:"header"`
	// Secret names the value in the gateway's Terminator.Secrets, never the value itself.
	Secret string `json:"secret"`
}

// CredentialDefaultMethods are the methods of a credential rule that lists none: a credential
// is injected only for the methods its rule lists, and a rule without methods lists these.
var CredentialDefaultMethods = []string{"GET", "HEAD"}

// HopByHop are the headers of one connection, never forwarded (RFC 9110 section 7.6.1), and the
// proxy's own credential.
var HopByHop = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authorization",
	"Proxy-Authenticate", "TE", "Trailer", "Transfer-Encoding", "Upgrade"}

// CompiledRule is a validated Rule in normalised form.
type CompiledRule struct {
	Rule
	// name is the exact name, or the suffix (with its leading dot) of a wildcard.
	name     string
	wildcard bool
	addr     netip.Addr
}

// Compiled is a validated Policy, ready to match.
type Compiled struct {
	rules []CompiledRule
}

// Compile validates p and returns it ready to match. It refuses a rule it cannot read rather
// than skipping it: a policy that does not say exactly what it allows allows nothing.
func Compile(p Policy) (*Compiled, error) {
	var errs []error
	cp := &Compiled{}
	for i, r := range p.Rules {
		cr, err := compileRule(r)
		if err != nil {
			errs = append(errs, fmt.Errorf("rules[%d]: %w", i, err))
			continue
		}
		cp.rules = append(cp.rules, cr)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return cp, nil
}

func compileRule(r Rule) (CompiledRule, error) {
	cr := CompiledRule{Rule: r}
	host := r.Host
	if suffix, ok := strings.CutPrefix(host, "*."); ok {
		cr.wildcard = true
		host = suffix
	}
	name, addr, err := NormalizeHost(host)
	if err != nil {
		return cr, fmt.Errorf("host %q: %w", r.Host, err)
	}
	if name != host {
		return cr, fmt.Errorf("host %q must be written in its normal form %q (lower case, ASCII, no trailing dot)", r.Host, name)
	}
	switch {
	case cr.wildcard && addr.IsValid():
		return cr, fmt.Errorf("host %q: a wildcard is of names, not addresses", r.Host)
	case cr.wildcard && !strings.Contains(name, "."):
		return cr, fmt.Errorf("host %q: a wildcard needs a suffix of at least two labels", r.Host)
	case cr.wildcard:
		cr.name = "." + name
	default:
		cr.name, cr.addr = name, addr
	}
	if len(r.Ports) == 0 {
		return cr, fmt.Errorf("host %q: ports must list at least one port", r.Host)
	}
	if slices.Contains(r.Ports, 0) {
		return cr, fmt.Errorf("host %q: ports are from 1 to 65535", r.Host)
	}
	for _, m := range r.Methods {
		if m == "" || m == "CONNECT" || strings.ToUpper(m) != m || strings.ContainsFunc(m, func(c rune) bool { return c < 'A' || c > 'Z' }) {
			return cr, fmt.Errorf("host %q: method %q must be an upper-case HTTP method other than CONNECT", r.Host, m)
		}
	}
	if in := r.Inject; in != nil {
		if in.Header == "" || in.Secret == "" || !httpguts.ValidHeaderFieldName(in.Header) || slices.ContainsFunc(HopByHop, func(h string) bool { return strings.EqualFold(h, in.Header) }) || strings.EqualFold(in.Header, "Host") {
			return cr, fmt.Errorf("host %q: inject needs a header (not a hop-by-hop one) and a secret name", r.Host)
		}
		if cr.wildcard || cr.addr.IsValid() {
			return cr, fmt.Errorf("host %q: a credential is injected for one name only, not a wildcard or an address", r.Host)
		}
		if slices.Contains(r.Methods, "TRACE") {
			return cr, fmt.Errorf("host %q: a credential is never injected into a TRACE (its answer echoes the request)", r.Host)
		}
		if len(r.Methods) == 0 {
			// A credential goes only with the methods its rule lists: none listed is GET and HEAD.
			cr.Methods = slices.Clone(CredentialDefaultMethods)
		}
	}
	for _, p := range r.PathPrefixes {
		if !strings.HasPrefix(p, "/") || !canonicalPath(p) {
			return cr, fmt.Errorf("host %q: path prefix %q must start with / and hold no dot segments, empty segments, %%-escapes or backslashes", r.Host, p)
		}
	}
	return cr, nil
}

// matchesHost reports whether the rule names t's host (not yet its port).
func (r *CompiledRule) matchesHost(t Target) bool {
	switch {
	case t.IsIP():
		return r.addr.IsValid() && r.addr == t.Addr
	case r.wildcard:
		return strings.HasSuffix(t.Host, r.name)
	default:
		return !r.addr.IsValid() && r.name == t.Host
	}
}

// Inspects reports whether the rule restricts what only a readable request shows.
func (r *CompiledRule) Inspects() bool {
	return len(r.Methods) > 0 || len(r.PathPrefixes) > 0
}

// AllowsRequest reports whether the rule allows method and path (a plain HTTP request).
func (r *CompiledRule) AllowsRequest(method, path string) bool {
	if len(r.Methods) > 0 && !slices.Contains(r.Methods, method) {
		return false
	}
	if len(r.PathPrefixes) == 0 {
		return true
	}
	if !canonicalPath(path) {
		return false
	}
	for _, p := range r.PathPrefixes {
		if path == p || strings.HasPrefix(path, p) && (strings.HasSuffix(p, "/") || path[len(p)] == '/') {
			return true
		}
	}
	return false
}

// canonicalPath reports whether an escaped path is one that every server reads the same way:
// no dot segments, no empty segments, no %-escapes of any kind, no backslashes. Path rules are
// checked only against such paths.
func canonicalPath(p string) bool {
	if !strings.HasPrefix(p, "/") || strings.ContainsAny(p, `%\`) {
		return false
	}
	segs := strings.Split(p[1:], "/")
	for i, s := range segs {
		if s == "." || s == ".." || (s == "" && i != len(segs)-1) {
			return false
		}
	}
	return true
}

// Candidates are the rules that allow t on its port, before any address is known.
func (p *Compiled) Candidates(t Target) (rules []*CompiledRule, hostListed bool) {
	if p == nil {
		return nil, false
	}
	for i := range p.rules {
		r := &p.rules[i]
		if !r.matchesHost(t) {
			continue
		}
		hostListed = true
		if slices.Contains(r.Ports, t.Port) {
			rules = append(rules, r)
		}
	}
	return rules, hostListed
}
