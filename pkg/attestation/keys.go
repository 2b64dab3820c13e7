package attestation

import (
	"crypto/ed25519"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
)

// pemType is the PEM block type of a published key (PKIX, as x509.MarshalPKIXPublicKey and
// Python's cryptography write it).
const pemType = "PUBLIC KEY"

// MarshalPublicKeys is the PEM bundle of keys that the operator publishes beside airlock-ca:
// every key that may have signed a statement a runtime still holds.
func MarshalPublicKeys(keys ...ed25519.PublicKey) ([]byte, error) {
	var out []byte
	for _, k := range keys {
		der, err := x509.MarshalPKIXPublicKey(k)
		if err != nil {
			return nil, err
		}
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: pemType, Bytes: der})...)
	}
	return out, nil
}

// ParsePublicKeys reads a PEM bundle of Ed25519 public keys into a map by KeyID, as Verify takes
// it. A block of another type or key kind is an error: a bundle is the operator's, whole.
func ParsePublicKeys(bundle []byte) (map[string]ed25519.PublicKey, error) {
	keys := map[string]ed25519.PublicKey{}
	for rest := bundle; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != pemType {
			return nil, fmt.Errorf("a PEM block of type %q in the key bundle, want %q", b.Type, pemType)
		}
		k, err := x509.ParsePKIXPublicKey(b.Bytes)
		if err != nil {
			return nil, err
		}
		pub, ok := k.(ed25519.PublicKey)
		if !ok {
			return nil, fmt.Errorf("a %T in the key bundle, want an Ed25519 key", k)
		}
		keys[KeyID(pub)] = pub
	}
	if len(keys) == 0 {
		return nil, errors.New("no public key in the bundle")
	}
	return keys, nil
}
