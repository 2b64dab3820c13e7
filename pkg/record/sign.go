package record

import (
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
)

// signingDomain separates the record's signing key from every other key derived from the
// operator's token key (pkg/claimtoken).
const signingDomain = "airlock.dev/record-signing/v1"

// Messages signed: an entry's hash and an anchor are signed under different prefixes, so that
// one's signature is never taken for the other's.
const (
	entryMessage  = domain + " entry\x00"
	anchorMessage = domain + " anchor\x00"
)

// minKeyBytes is the shortest token key SigningKey accepts (pkg/claimtoken's KeyBytes).
const minKeyBytes = 32

// Signer signs a record's entries and anchors: the operator's, with a key the sandbox never
// holds.
type Signer struct {
	priv ed25519.PrivateKey
	id   string
}

// NewSigner returns a Signer with priv.
func NewSigner(priv ed25519.PrivateKey) (*Signer, error) {
	if len(priv) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("an Ed25519 private key has %d bytes, not %d", ed25519.PrivateKeySize, len(priv))
	}
	return &Signer{priv: priv, id: KeyID(priv.Public().(ed25519.PublicKey))}, nil
}

// SigningKey derives the record's signing key from the operator's token key:
// ed25519.NewKeyFromSeed(HMAC-SHA256(tokenKey, signingDomain)). Every replica computes the same
// key from what it already holds; the derivation is one way, so neither the key nor the token
// key can be had from the other's derivatives (a claim's bearer token, the gateway's proxy key).
func SigningKey(tokenKey []byte) (ed25519.PrivateKey, error) {
	if len(tokenKey) < minKeyBytes {
		return nil, fmt.Errorf("the token key has %d bytes, want at least %d", len(tokenKey), minKeyBytes)
	}
	m := hmac.New(sha256.New, tokenKey)
	m.Write([]byte(signingDomain))
	return ed25519.NewKeyFromSeed(m.Sum(nil)), nil
}

// KeyID names a public key in entries and anchors: the first 16 hex of its SHA-256.
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:])[:16]
}

// Public returns the signer's public key.
func (s *Signer) Public() ed25519.PublicKey { return s.priv.Public().(ed25519.PublicKey) }

// ID is the signer's key id.
func (s *Signer) ID() string { return s.id }

func (s *Signer) sign(prefix string, msg []byte) string {
	return base64.StdEncoding.EncodeToString(ed25519.Sign(s.priv, append([]byte(prefix), msg...)))
}

// Keys are the public keys a verifier trusts, by key id.
type Keys map[string]ed25519.PublicKey

// NewKeys returns the keys pubs by their ids.
func NewKeys(pubs ...ed25519.PublicKey) Keys {
	k := make(Keys, len(pubs))
	for _, p := range pubs {
		k[KeyID(p)] = p
	}
	return k
}

// errUnknownKey and errBadSignature are why a signature does not verify.
var (
	errUnknownKey   = errors.New("signed with a key that is not trusted")
	errBadSignature = errors.New("the signature does not verify")
)

func (k Keys) verify(id, prefix string, msg []byte, sig string) error {
	pub, ok := k[id]
	if !ok {
		return fmt.Errorf("%w (key id %q)", errUnknownKey, id)
	}
	raw, err := base64.StdEncoding.DecodeString(sig)
	if err != nil || !ed25519.Verify(pub, append([]byte(prefix), msg...), raw) {
		return errBadSignature
	}
	return nil
}

// pemType is the PEM block type of a published public key.
const pemType = "PUBLIC KEY"

// MarshalPublicKey is pub as PEM (PKIX), as the operator publishes it.
func MarshalPublicKey(pub ed25519.PublicKey) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: pemType, Bytes: der}), nil
}

// ParsePublicKeys reads every Ed25519 public key of PEM data (a key and its predecessors).
func ParsePublicKeys(data []byte) (Keys, error) {
	keys := Keys{}
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			break
		}
		if block.Type != pemType {
			return nil, fmt.Errorf("a PEM block of type %q, want %q", block.Type, pemType)
		}
		pub, err := x509.ParsePKIXPublicKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("parsing a public key: %w", err)
		}
		ed, ok := pub.(ed25519.PublicKey)
		if !ok {
			return nil, fmt.Errorf("a public key of type %T, want Ed25519", pub)
		}
		keys[KeyID(ed)] = ed
	}
	if len(keys) == 0 {
		return nil, errors.New("no PEM public key found")
	}
	return keys, nil
}
