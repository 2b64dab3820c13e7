package claimtoken

import (
	"context"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"fmt"

	"github.com/airlock-dev/airlock/pkg/attestation"
)

// signingKeyDomain separates the isolation signing key from every other derivation of the
// operator's key.
const signingKeyDomain = "airlock.dev/isolation-signing-key/v1"

// SigningKey derives the Ed25519 key with which the operator signs isolation statements
// (pkg/attestation, docs/isolation.md) from the operator's key: its seed is
// HMAC-SHA256(key, "airlock.dev/isolation-signing-key/v1"). It is one-way and in a domain of its
// own, like ProxyKey: the egress gateway's proxy key does not yield it, and it yields no token.
// Every replica derives the same key; it changes only with the operator's key.
func SigningKey(key []byte) (ed25519.PrivateKey, error) {
	if len(key) < KeyBytes {
		return nil, fmt.Errorf("%w: the key has %d bytes, want %d", ErrNoKey, len(key), KeyBytes)
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(signingKeyDomain))
	return ed25519.NewKeyFromSeed(mac.Sum(nil)), nil
}

// SigningKey derives the isolation signing key with the Source's key.
func (s *Source) SigningKey(ctx context.Context) (ed25519.PrivateKey, error) {
	key, err := s.Key(ctx)
	if err != nil {
		return nil, err
	}
	return SigningKey(key)
}

// IsolationKeys is the PEM bundle of the public key that verifies the Source's isolation
// signatures, for airlock-ca (a cabundle.Source): empty until the Source has read its key.
type IsolationKeys struct{ s *Source }

// IsolationKeys returns the Source's public keys as a bundle source.
func (s *Source) IsolationKeys() IsolationKeys { return IsolationKeys{s: s} }

// Bundle is the PEM of the signing key's public key; nil before the key is read.
func (k IsolationKeys) Bundle() []byte {
	k.s.mu.Lock()
	key := k.s.key
	k.s.mu.Unlock()
	if key == nil {
		return nil
	}
	priv, err := SigningKey(key)
	if err != nil {
		return nil
	}
	pem, err := attestation.MarshalPublicKeys(priv.Public().(ed25519.PublicKey))
	if err != nil {
		return nil
	}
	return pem
}

// OnBundleChange calls f once the key is read (it changes only with the operator's key, which a
// running operator never changes).
func (k IsolationKeys) OnBundleChange(f func()) (remove func()) {
	k.s.mu.Lock()
	defer k.s.mu.Unlock()
	if k.s.key != nil {
		go f()
	} else {
		k.s.loaded = append(k.s.loaded, f)
	}
	return func() {}
}
