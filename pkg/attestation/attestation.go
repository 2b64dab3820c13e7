// Package attestation is what the operator signs for a runtime about a sandbox's boundary
// (issue 38, docs/isolation.md): a Statement binding the isolation evidence sandboxd gathered
// before any tool ran to the claim, the pod, the node, the claim's frozen record and the
// claim's bearer token, signed with Ed25519. The operator signs; pkg/client, the Python client
// and any runtime verify. Standard library only, so that runtimes can import it.
package attestation

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Version names the statement's format; a verifier refuses any other.
const Version = "airlock.dev/isolation/v1"

// Statement is what the operator attests: the evidence a claim's sandbox gave before it served
// any tool, and what it is bound to. Every field is signed.
type Statement struct {
	Version   string `json:"version"`
	Namespace string `json:"namespace"`
	Claim     string `json:"claim"`
	ClaimUID  string `json:"claimUID"`
	Pod       string `json:"pod"`
	PodUID    string `json:"podUID"`
	Node      string `json:"node"`
	// NodeKernel is the Node's status.nodeInfo.kernelVersion when the evidence was judged.
	NodeKernel string `json:"nodeKernel"`
	// Kernel is the verdict on the kernel: "Dedicated" (the sandbox's is not the node's) or
	// "Shared".
	Kernel string `json:"kernel"`
	// RecordDigest is the sha256 of the claim's frozen record (status.frozen) as JSON.
	RecordDigest string `json:"recordDigest"`
	// TokenHash is TokenHash(the claim's bearer token): a runtime checks that the statement is
	// about the sandbox its token opens, and learns nothing that opens it.
	TokenHash string `json:"tokenHash"`
	// EvidenceDigest is the sha256 of Evidence's bytes, which sandboxd's MCP server metadata
	// also carries, so that a client ties the server it talks to to this statement.
	EvidenceDigest string `json:"evidenceDigest"`
	// Evidence is the evidence's exact bytes as sandboxd served them (base64 in JSON), so that
	// any language checks the digest over the same bytes.
	Evidence []byte    `json:"evidence"`
	IssuedAt time.Time `json:"issuedAt"`
}

// Attestation is a signed Statement as the acquire answer carries it: the statement's exact
// bytes (base64), the signature over them and the signing key's ID.
type Attestation struct {
	Statement string `json:"statement"`
	Signature string `json:"signature"`
	KeyID     string `json:"keyID"`
}

// TokenHash is the hex sha256 of a bearer token, as a Statement carries it.
func TokenHash(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// Digest is the hex sha256 of b.
func Digest(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// KeyID names a public key: the first 16 hex digits of its sha256.
func KeyID(pub ed25519.PublicKey) string {
	return Digest(pub)[:16]
}

// Sign signs s with key.
func Sign(s *Statement, key ed25519.PrivateKey) (*Attestation, error) {
	if s.Version != Version {
		return nil, fmt.Errorf("statement version %q, want %q", s.Version, Version)
	}
	if got := Digest(s.Evidence); s.EvidenceDigest != got {
		return nil, fmt.Errorf("statement's evidence digest %q is not its evidence's (%s)", s.EvidenceDigest, got)
	}
	b, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	pub, ok := key.Public().(ed25519.PublicKey)
	if !ok {
		return nil, errors.New("not an Ed25519 key")
	}
	return &Attestation{
		Statement: base64.StdEncoding.EncodeToString(b),
		Signature: base64.StdEncoding.EncodeToString(ed25519.Sign(key, b)),
		KeyID:     KeyID(pub),
	}, nil
}

// Expect is what a verifier knows of the sandbox it was given: the bearer token it holds, and
// (when set) the claim's name and namespace.
type Expect struct {
	Token     string
	Namespace string
	Claim     string
}

// Verify checks a's signature with the key of its KeyID among keys (the operator's published
// keys, by KeyID), that the statement is of this version, that its evidence is what its digest
// says, and that it is about the sandbox exp names: the token's hash, and the claim when set.
// It returns the statement, or an error that says what did not hold.
func Verify(a *Attestation, keys map[string]ed25519.PublicKey, exp Expect) (*Statement, error) {
	if a == nil {
		return nil, errors.New("no attestation")
	}
	key, ok := keys[a.KeyID]
	if !ok || len(key) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("attestation signed by key %q, which is not among the %d published", a.KeyID, len(keys))
	}
	b, err := base64.StdEncoding.DecodeString(a.Statement)
	if err != nil {
		return nil, fmt.Errorf("statement: %w", err)
	}
	sig, err := base64.StdEncoding.DecodeString(a.Signature)
	if err != nil {
		return nil, fmt.Errorf("signature: %w", err)
	}
	if !ed25519.Verify(key, b, sig) {
		return nil, errors.New("the signature does not verify")
	}
	var s Statement
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("statement: %w", err)
	}
	switch {
	case s.Version != Version:
		return nil, fmt.Errorf("statement version %q, want %q", s.Version, Version)
	case Digest(s.Evidence) != s.EvidenceDigest:
		return nil, errors.New("the statement's evidence is not what its digest says")
	case s.TokenHash != TokenHash(exp.Token):
		return nil, errors.New("the statement is about another sandbox: its token hash is not this token's")
	case exp.Claim != "" && (s.Claim != exp.Claim || s.Namespace != exp.Namespace):
		return nil, fmt.Errorf("the statement is about claim %s/%s, not %s/%s", s.Namespace, s.Claim, exp.Namespace, exp.Claim)
	}
	return &s, nil
}
