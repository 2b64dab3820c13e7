package egress

import (
	"context"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/types"

	"github.com/airlock-dev/airlock/pkg/egress/policy"
)

// Credential is what a request's Proxy-Authorization (Basic) carries: the username names the
// claim as "<namespace>.<claim name>" (a namespace has no dot), the password is the claim's proxy
// credential (claimtoken.DeriveProxy).
type Credential struct {
	Username string
	Password string
}

// Identity is the claim a request comes from, and what it may reach.
type Identity struct {
	Namespace string
	Claim     string
	// ClaimUID is the claim's UID when the lookup knows it (the cluster's), else empty.
	ClaimUID types.UID
	Runtime  string
	Policy   *policy.Compiled
}

// The errors of a ClaimLookup; the gateway refuses with the matching reason.
var (
	ErrNotSynced     = errors.New("the claim source has not synced")
	ErrBadCredential = errors.New("the credential names no claim")
	ErrWrongSource   = errors.New("the credential is not used from its claim's pod")
)

// ClaimLookup says which claim a credential used from a source address belongs to. It returns
// ErrNotSynced until it has synced, ErrBadCredential for a credential that names no live claim
// or whose secret is wrong, and ErrWrongSource when the credential is right but the address is
// not its claim's pod's. Any other error is refused too.
type ClaimLookup interface {
	Lookup(ctx context.Context, cred Credential, source netip.Addr) (Identity, error)
	// HasSynced reports whether the lookup has its whole view of the claims: the gateway
	// refuses everything, and is not ready, until it has.
	HasSynced() bool
}

// StaticClaim is one claim of a StaticClaims lookup.
type StaticClaim struct {
	Namespace string `json:"namespace"`
	Claim     string `json:"claim"`
	Runtime   string `json:"runtime"`
	// UID is the claim's UID, if known: only then are its decisions kept for its record.
	UID types.UID `json:"uid,omitempty"`
	// Password is the claim's proxy credential.
	Password string `json:"password"`
	// Sources are the addresses the credential may be used from (the claim's pod's).
	Sources []netip.Addr  `json:"sources"`
	Policy  policy.Policy `json:"policy"`
}

// Username is the credential's username for the claim.
func (c StaticClaim) Username() string { return c.Namespace + "." + c.Claim }

// StaticClaims is a ClaimLookup over a fixed set of claims (tests, a gateway run beside a
// cluster with --claims-file). It has not synced until SetSynced.
type StaticClaims struct {
	synced atomic.Bool

	mu     sync.RWMutex
	claims map[string]staticEntry
}

type staticEntry struct {
	StaticClaim
	policy *policy.Compiled
	err    error
}

// NewStaticClaims returns a lookup of claims. A claim whose policy does not compile is kept and
// refused with ReasonPolicyInvalid, so that its requests say why.
func NewStaticClaims(claims ...StaticClaim) (*StaticClaims, error) {
	s := &StaticClaims{claims: map[string]staticEntry{}}
	for _, c := range claims {
		if c.Namespace == "" || strings.Contains(c.Namespace, ".") || c.Claim == "" {
			return nil, fmt.Errorf("claim %q/%q: a namespace (no dot) and a claim name are required", c.Namespace, c.Claim)
		}
		if len(c.Password) < 16 {
			return nil, fmt.Errorf("claim %s/%s: the password must have at least 16 characters", c.Namespace, c.Claim)
		}
		if len(c.Sources) == 0 {
			return nil, fmt.Errorf("claim %s/%s: sources must list the claim's pod's address", c.Namespace, c.Claim)
		}
		if _, dup := s.claims[c.Username()]; dup {
			return nil, fmt.Errorf("claim %s/%s is listed twice", c.Namespace, c.Claim)
		}
		p, err := policy.Compile(c.Policy)
		s.claims[c.Username()] = staticEntry{StaticClaim: c, policy: p, err: err}
	}
	return s, nil
}

// SetSynced marks the lookup synced: until then every request is refused.
func (s *StaticClaims) SetSynced() { s.synced.Store(true) }

func (s *StaticClaims) HasSynced() bool { return s.synced.Load() }

// ErrPolicyInvalid is the error of a claim whose policy does not compile.
var ErrPolicyInvalid = errors.New("the claim's egress policy is invalid")

func (s *StaticClaims) Lookup(ctx context.Context, cred Credential, source netip.Addr) (Identity, error) {
	if !s.HasSynced() {
		return Identity{}, ErrNotSynced
	}
	s.mu.RLock()
	e, ok := s.claims[cred.Username]
	s.mu.RUnlock()
	if !ok || subtle.ConstantTimeCompare([]byte(cred.Password), []byte(e.Password)) != 1 {
		return Identity{}, ErrBadCredential
	}
	source = source.Unmap()
	found := false
	for _, a := range e.Sources {
		found = found || a.Unmap() == source
	}
	if !found {
		return Identity{}, ErrWrongSource
	}
	id := Identity{Namespace: e.Namespace, Claim: e.Claim, ClaimUID: e.UID, Runtime: e.Runtime, Policy: e.policy}
	if e.err != nil {
		return id, fmt.Errorf("%w: %v", ErrPolicyInvalid, e.err)
	}
	return id, nil
}

// parseProxyAuthorization reads a Basic Proxy-Authorization header value; ok is false for a
// missing or malformed one.
func parseProxyAuthorization(values []string) (Credential, bool) {
	if len(values) != 1 {
		return Credential{}, false
	}
	scheme, encoded, ok := strings.Cut(values[0], " ")
	if !ok || !strings.EqualFold(scheme, "Basic") {
		return Credential{}, false
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(encoded))
	if err != nil {
		return Credential{}, false
	}
	user, pass, ok := strings.Cut(string(raw), ":")
	if !ok || user == "" || pass == "" {
		return Credential{}, false
	}
	return Credential{Username: user, Password: pass}, true
}

// lookupReason maps a ClaimLookup error to its refusal reason.
func lookupReason(err error) Reason {
	switch {
	case errors.Is(err, ErrNotSynced):
		return ReasonNotSynced
	case errors.Is(err, ErrBadCredential):
		return ReasonBadCredential
	case errors.Is(err, ErrWrongSource):
		return ReasonWrongSource
	case errors.Is(err, ErrPolicyInvalid):
		return ReasonPolicyInvalid
	}
	return ReasonLookupFailed
}
