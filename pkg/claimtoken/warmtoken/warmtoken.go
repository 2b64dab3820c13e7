// Package warmtoken holds a warm pool member's key and the adoption tokens MACed with it
// (docs/decisions.md, "Warm members: the token is the adoption"). The operator derives the member
// key from its own key (pkg/claimtoken.MemberKey), writes it into the member's Secret, and hands
// the adopting claim a token that names the claim and its frozen tool list; sandboxd
// (--warm-key-file) verifies the token with the member key and locks to the first one it sees.
//
// pkg/claimtoken re-exports all of it for the operator. It is a package of its own because
// sandboxd needs it and pkg/claimtoken imports client-go, which the sandbox images' binary
// (-tags sandboxd_only) must not link (docs/decisions.md, "sandboxd transport speed"): it
// imports the standard library and k8s.io/apimachinery/pkg/types only (a test checks).
package warmtoken

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/types"
)

const (
	// MemberKeyField is the member key's field in the member's Secret, which holds it in its
	// text form (EncodeMemberKey).
	MemberKeyField = "key"
	// MemberKeyBytes is a member key's length.
	MemberKeyBytes = sha256.Size
	// MaxAdoptionTools bounds the tools an adoption token names.
	MaxAdoptionTools = 32
	// MaxAdoptionTokenLength bounds an adoption token's length. The bounds on the claim UID, the
	// tools and their names keep every token AdoptionToken makes below it (3,101 characters at most).
	MaxAdoptionTokenLength = 4 << 10

	// maxToolNameLength bounds a tool name in a token; sandboxd's longest is 25 characters.
	maxToolNameLength = 64
	// maxUIDLength bounds the claim UID in a token; a Kubernetes UID is a 36-character UUID.
	maxUIDLength = 128
	// minOperatorKeyBytes is the shortest operator key MemberKey accepts (claimtoken.KeyBytes).
	minOperatorKeyBytes = 32

	// adoptionPrefix starts every adoption token: the format's version.
	adoptionPrefix = "aw1."
	// memberKeyDomain separates the member key derivation from any other use of the operator's key.
	memberKeyDomain = "airlock.dev/warm-member-key/v1"
	// adoptionDomain separates the adoption MAC from any other use of the member key.
	adoptionDomain = "airlock.dev/warm-adoption/v1"

	// evidencePrefix starts every evidence token: the format's version.
	evidencePrefix = "awe1."
	// evidenceDomain separates the evidence token from any other use of the member key.
	evidenceDomain = "airlock.dev/warm-evidence-read/v1"
)

// b64 is the one base64 of the tokens and keys: base64url without padding, strict, so that a
// value has exactly one text form.
var b64 = base64.RawURLEncoding.Strict()

// Adoption is what an adoption token carries.
type Adoption struct {
	// ClaimUID is the adopting claim's UID.
	ClaimUID types.UID
	// Tools are the tools the member serves once adopted: sorted, deduplicated, never empty.
	Tools []string
}

// payload is the canonical encoding of an Adoption: JSON with the fields in this order, the
// tools sorted and deduplicated, no space. encoding/json writes it; VerifyAdoption accepts only
// the bytes it would write.
type payload struct {
	ClaimUID string   `json:"c"`
	Tools    []string `json:"t"`
}

// MemberKey derives the key of the warm member namespace/member from the operator's key:
// HMAC-SHA256(key, "airlock.dev/warm-member-key/v1" NUL namespace "/" member), 32 bytes.
func MemberKey(key []byte, namespace, member string) ([]byte, error) {
	if len(key) < minOperatorKeyBytes {
		return nil, fmt.Errorf("the key has %d bytes, want %d", len(key), minOperatorKeyBytes)
	}
	if namespace == "" || member == "" {
		return nil, fmt.Errorf("a member key needs the member's namespace and name (got %q, %q)", namespace, member)
	}
	// Neither a namespace nor a pod name holds "/" or NUL; refusing them keeps namespace/member
	// one split only.
	if strings.ContainsAny(namespace, "/\x00") || strings.ContainsAny(member, "/\x00") {
		return nil, fmt.Errorf("a member's namespace and name hold no \"/\" and no NUL (got %q, %q)", namespace, member)
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(memberKeyDomain))
	mac.Write([]byte{0})
	mac.Write([]byte(namespace + "/" + member))
	return mac.Sum(nil), nil
}

// EncodeMemberKey returns the text form of a member key, as the member's Secret holds it:
// base64url without padding (43 characters for a key of 32 bytes).
func EncodeMemberKey(k []byte) string {
	return b64.EncodeToString(k)
}

// DecodeMemberKey reads the text form of a member key; surrounding whitespace (a trailing
// newline) is ignored. Anything that is not exactly 32 bytes in that form is an error, which
// never quotes the input.
func DecodeMemberKey(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, errors.New("the member key is empty")
	}
	if len(s) != b64.EncodedLen(MemberKeyBytes) {
		return nil, fmt.Errorf("the member key has %d characters, want %d (base64url of %d bytes, no padding)", len(s), b64.EncodedLen(MemberKeyBytes), MemberKeyBytes)
	}
	k, err := b64.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("the member key is not base64url without padding: %v", err)
	}
	return k, nil
}

// AdoptionToken returns the bearer token that adopts the member whose key is memberKey for the
// claim claimUID with tools: "aw1." + base64url(payload) + "." + base64url(HMAC-SHA256(memberKey,
// "airlock.dev/warm-adoption/v1" NUL payload)), where payload is the canonical JSON
// {"c":claimUID,"t":[tools, sorted and deduplicated]}. The same inputs give the same token on
// every replica. tools are 1 to 32 names of [A-Za-z0-9_], at most 64 characters each; the UID
// has at most 128 characters of [A-Za-z0-9._:-].
func AdoptionToken(memberKey []byte, claimUID types.UID, tools []string) (string, error) {
	if err := checkMemberKey(memberKey); err != nil {
		return "", err
	}
	if err := checkUID(string(claimUID)); err != nil {
		return "", err
	}
	for _, name := range tools {
		if err := checkToolName(name); err != nil {
			return "", err
		}
	}
	sorted := slices.Compact(slices.Sorted(slices.Values(tools)))
	if len(sorted) == 0 {
		return "", errors.New("an adoption token names at least one tool")
	}
	if len(sorted) > MaxAdoptionTools {
		return "", fmt.Errorf("an adoption token names at most %d tools, got %d", MaxAdoptionTools, len(sorted))
	}
	p, err := json.Marshal(payload{ClaimUID: string(claimUID), Tools: sorted})
	if err != nil {
		return "", fmt.Errorf("encoding the adoption: %w", err)
	}
	return adoptionPrefix + b64.EncodeToString(p) + "." + b64.EncodeToString(sign(memberKey, p)), nil
}

// VerifyAdoption checks an adoption token against the member key and returns what it carries.
// The MAC is checked, in constant time, before the payload is read; then the payload must be the
// canonical encoding AdoptionToken writes, byte for byte. Any other input is an error, which never
// quotes the token: a token that verifies is always AdoptionToken's for its Adoption.
func VerifyAdoption(memberKey []byte, token string) (Adoption, error) {
	if err := checkMemberKey(memberKey); err != nil {
		return Adoption{}, err
	}
	if len(token) > MaxAdoptionTokenLength {
		return Adoption{}, fmt.Errorf("not an adoption token: %d characters, at most %d", len(token), MaxAdoptionTokenLength)
	}
	rest, ok := strings.CutPrefix(token, adoptionPrefix)
	if !ok {
		return Adoption{}, fmt.Errorf("not an adoption token: it does not start with %q", adoptionPrefix)
	}
	encPayload, encMAC, ok := strings.Cut(rest, ".")
	if !ok {
		return Adoption{}, errors.New("not an adoption token: no MAC")
	}
	gotMAC, err := b64.DecodeString(encMAC)
	if err != nil || len(gotMAC) != sha256.Size {
		return Adoption{}, errors.New("not an adoption token: the MAC is not base64url of 32 bytes")
	}
	p, err := b64.DecodeString(encPayload)
	if err != nil {
		return Adoption{}, errors.New("not an adoption token: the payload is not base64url")
	}
	if !hmac.Equal(gotMAC, sign(memberKey, p)) {
		return Adoption{}, errors.New("the adoption token's MAC does not match this member's key")
	}
	var decoded payload
	if err := json.Unmarshal(p, &decoded); err != nil {
		return Adoption{}, fmt.Errorf("the adoption token's payload is not its JSON: %v", err)
	}
	if err := checkUID(decoded.ClaimUID); err != nil {
		return Adoption{}, fmt.Errorf("the adoption token's payload: %w", err)
	}
	if len(decoded.Tools) == 0 || len(decoded.Tools) > MaxAdoptionTools {
		return Adoption{}, fmt.Errorf("the adoption token's payload names %d tools, want 1 to %d", len(decoded.Tools), MaxAdoptionTools)
	}
	for i, name := range decoded.Tools {
		if err := checkToolName(name); err != nil {
			return Adoption{}, fmt.Errorf("the adoption token's payload: %w", err)
		}
		if i > 0 && decoded.Tools[i-1] >= name {
			return Adoption{}, errors.New("the adoption token's payload: the tools are not sorted and deduplicated")
		}
	}
	// Field order, spacing, escapes, duplicate or unknown keys: only the bytes AdoptionToken
	// writes are accepted, so that one Adoption has one token.
	canonical, err := json.Marshal(decoded)
	if err != nil || string(canonical) != string(p) {
		return Adoption{}, errors.New("the adoption token's payload is not in its canonical encoding")
	}
	return Adoption{ClaimUID: types.UID(decoded.ClaimUID), Tools: decoded.Tools}, nil
}

// EvidenceToken returns the bearer token with which the operator reads a warm member's isolation
// evidence before any claim adopts it (docs/isolation.md, "Warm members"): "awe1." +
// base64url(HMAC-SHA256(memberKey, "airlock.dev/warm-evidence-read/v1")). It is one per member
// and opens GET /isolation only: sandboxd accepts it nowhere else, and it adopts nothing (it is
// no adoption token: another prefix, another MAC domain).
func EvidenceToken(memberKey []byte) (string, error) {
	if err := checkMemberKey(memberKey); err != nil {
		return "", err
	}
	return evidencePrefix + b64.EncodeToString(evidenceMAC(memberKey)), nil
}

// IsEvidenceToken reports whether token is the member's evidence token, comparing in constant
// time. Any other input is false, never a panic.
func IsEvidenceToken(memberKey []byte, token string) bool {
	if checkMemberKey(memberKey) != nil {
		return false
	}
	rest, ok := strings.CutPrefix(token, evidencePrefix)
	if !ok || len(rest) != b64.EncodedLen(sha256.Size) {
		return false
	}
	got, err := b64.DecodeString(rest)
	if err != nil {
		return false
	}
	return hmac.Equal(got, evidenceMAC(memberKey))
}

// evidenceMAC is the MAC of a member's evidence token.
func evidenceMAC(memberKey []byte) []byte {
	mac := hmac.New(sha256.New, memberKey)
	mac.Write([]byte(evidenceDomain))
	return mac.Sum(nil)
}

// sign is the MAC of an adoption payload.
func sign(memberKey, p []byte) []byte {
	mac := hmac.New(sha256.New, memberKey)
	mac.Write([]byte(adoptionDomain))
	mac.Write([]byte{0})
	mac.Write(p)
	return mac.Sum(nil)
}

func checkMemberKey(k []byte) error {
	if len(k) != MemberKeyBytes {
		return fmt.Errorf("the member key has %d bytes, want %d", len(k), MemberKeyBytes)
	}
	return nil
}

// checkUID accepts 1 to 128 characters of [A-Za-z0-9._:-]: a UUID and more, and nothing that
// JSON would escape.
func checkUID(uid string) error {
	if uid == "" {
		return errors.New("an adoption token needs the claim's UID")
	}
	if len(uid) > maxUIDLength {
		return fmt.Errorf("the claim UID has %d characters, at most %d", len(uid), maxUIDLength)
	}
	for _, c := range []byte(uid) {
		if !isAlnum(c) && c != '-' && c != '.' && c != '_' && c != ':' {
			return fmt.Errorf("the claim UID %q holds a character other than [A-Za-z0-9._:-]", uid)
		}
	}
	return nil
}

// checkToolName accepts 1 to 64 characters of [A-Za-z0-9_], which every sandboxd tool name is.
func checkToolName(name string) error {
	if name == "" || len(name) > maxToolNameLength {
		return fmt.Errorf("tool name %q: want 1 to %d characters", name, maxToolNameLength)
	}
	for _, c := range []byte(name) {
		if !isAlnum(c) && c != '_' {
			return fmt.Errorf("tool name %q holds a character other than [A-Za-z0-9_]", name)
		}
	}
	return nil
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}
