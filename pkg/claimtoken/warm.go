package claimtoken

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"fmt"

	"k8s.io/apimachinery/pkg/types"

	"github.com/airlock-dev/airlock/pkg/claimtoken/warmtoken"
)

// The warm members' keys and adoption tokens (docs/decisions.md, "Warm members: the token is the
// adoption"). They are implemented in pkg/claimtoken/warmtoken, which sandboxd imports without
// client-go; this file gives the operator one package for every token.

// MemberKeyField is the member key's field in a warm member's Secret.
const MemberKeyField = warmtoken.MemberKeyField

// Adoption is what an adoption token carries: the adopting claim's UID and its tools (sorted,
// deduplicated, never empty).
type Adoption = warmtoken.Adoption

// MemberKey derives a warm member's key from the operator's key: HMAC-SHA256(key,
// "airlock.dev/warm-member-key/v1" NUL namespace "/" member), 32 bytes. A short key is an error
// that wraps ErrNoKey, as Derive's; an empty namespace or member is an error.
func MemberKey(key []byte, namespace, member string) ([]byte, error) {
	if len(key) < KeyBytes {
		return nil, fmt.Errorf("%w: the key has %d bytes, want %d", ErrNoKey, len(key), KeyBytes)
	}
	return warmtoken.MemberKey(key, namespace, member)
}

// EncodeMemberKey returns the text form of a member key that the member's Secret holds under
// MemberKeyField and sandboxd reads: base64url without padding, 43 characters.
func EncodeMemberKey(k []byte) string { return warmtoken.EncodeMemberKey(k) }

// DecodeMemberKey reads the text form of a member key (surrounding whitespace ignored); anything
// but exactly 32 bytes is an error.
func DecodeMemberKey(s string) ([]byte, error) { return warmtoken.DecodeMemberKey(s) }

// AdoptionToken returns the bearer token that adopts the member for the claim: "aw1." +
// base64url(payload) + "." + base64url(HMAC-SHA256(memberKey, "airlock.dev/warm-adoption/v1" NUL
// payload)), payload the canonical JSON {"c":claimUID,"t":[tools sorted and deduplicated]}.
// Every replica computes the same token from the same inputs.
func AdoptionToken(memberKey []byte, claimUID types.UID, tools []string) (string, error) {
	return warmtoken.AdoptionToken(memberKey, claimUID, tools)
}

// VerifyAdoption checks an adoption token's MAC (in constant time) and its canonical encoding,
// and returns what it carries. Malformed input is an error, never a panic.
func VerifyAdoption(memberKey []byte, token string) (Adoption, error) {
	return warmtoken.VerifyAdoption(memberKey, token)
}

// MemberKey derives the key of the warm member namespace/member from the Source's key.
func (s *Source) MemberKey(ctx context.Context, namespace, member string) ([]byte, error) {
	key, err := s.Key(ctx)
	if err != nil {
		return nil, err
	}
	return MemberKey(key, namespace, member)
}

// AdoptionToken returns the token that adopts the warm member namespace/member for the claim
// claimUID with tools, MACed with the member's key derived from the Source's key.
func (s *Source) AdoptionToken(ctx context.Context, namespace, member string, claimUID types.UID, tools []string) (string, error) {
	mk, err := s.MemberKey(ctx, namespace, member)
	if err != nil {
		return "", err
	}
	return AdoptionToken(mk, claimUID, tools)
}

// EvidenceToken returns the warm member's evidence token: the bearer token with which the operator
// reads its isolation evidence before any claim adopts it (GET /isolation only; it adopts
// nothing): "awe1." + base64url(HMAC-SHA256(memberKey, "airlock.dev/warm-evidence-read/v1")).
func EvidenceToken(memberKey []byte) (string, error) { return warmtoken.EvidenceToken(memberKey) }

// EvidenceToken returns the evidence token of the warm member namespace/member, with the member's
// key derived from the Source's key.
func (s *Source) EvidenceToken(ctx context.Context, namespace, member string) (string, error) {
	mk, err := s.MemberKey(ctx, namespace, member)
	if err != nil {
		return "", err
	}
	return EvidenceToken(mk)
}

// memberEvidenceDomain separates the key that seals warm members' evidence records from every
// other derivation of the operator's key.
const memberEvidenceDomain = "airlock.dev/warm-evidence-seal/v1"

// MemberEvidenceKey derives the key with which the operator seals the isolation evidence it read
// of a warm member onto the member's pod (pkg/controller/evidence, docs/isolation.md, "Warm
// members"): HMAC-SHA256(key, "airlock.dev/warm-evidence-seal/v1"), 32 bytes. It is one-way and
// in a domain of its own: no member key, token or signing key yields it, and it is never written
// anywhere (every replica derives it). A short key is an error that wraps ErrNoKey.
func MemberEvidenceKey(key []byte) ([]byte, error) {
	if len(key) < KeyBytes {
		return nil, fmt.Errorf("%w: the key has %d bytes, want %d", ErrNoKey, len(key), KeyBytes)
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(memberEvidenceDomain))
	return mac.Sum(nil), nil
}

// MemberEvidenceKey derives the key that seals warm members' evidence records from the Source's key.
func (s *Source) MemberEvidenceKey(ctx context.Context) ([]byte, error) {
	key, err := s.Key(ctx)
	if err != nil {
		return nil, err
	}
	return MemberEvidenceKey(key)
}
