// Package claimtoken derives each claim's bearer token from one key that the operator holds in a
// Secret of its own namespace. The claim controller writes the derived token into the claim's
// Secret (which the sandbox mounts), and the Sandbox API of every replica computes the same token
// from the key when it answers an acquire, so that no replica ever reads a Secret outside the
// operator's namespace (docs/decisions.md, "Least privilege"). The egress gateway gets a key of
// its own, derived one way from that key (ProxyKey, in the Secret ProxySecretName), from which it
// computes claims' proxy credentials (DeriveProxy) and nothing else.
package claimtoken

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

const (
	// SecretName is the key Secret's name in the operator's namespace.
	SecretName = "airlock-token-key"
	// KeyField is the key's field in the Secret's data.
	KeyField = "key"
	// KeyBytes is the key's length.
	KeyBytes = 32
	// FieldManager names the operator's write of the key Secret.
	FieldManager = "airlock-operator"

	// domain separates this derivation from any other use of the key.
	domain = "airlock.dev/claim-token/v1"
	// secretNameDomain separates the Secret's name from any other hash of the token.
	secretNameDomain = "airlock.dev/claim-token-secret-name/v1"
)

// ErrNoKey is the error of a Source whose key could not be read or created.
var ErrNoKey = errors.New("the claim token key is not available")

// Derive returns the bearer token of the claim namespace/name with uid:
// base64url(HMAC-SHA256(key, domain NUL uid NUL namespace/name)), 43 characters. A claim
// deleted and created again under the same name has another UID, hence another token.
func Derive(key []byte, uid types.UID, namespace, name string) (string, error) {
	return derive(domain, key, uid, namespace, name)
}

// derive is HMAC-SHA256(key, dom NUL uid NUL namespace/name) in base64url.
func derive(dom string, key []byte, uid types.UID, namespace, name string) (string, error) {
	if len(key) < KeyBytes {
		return "", fmt.Errorf("%w: the key has %d bytes, want %d", ErrNoKey, len(key), KeyBytes)
	}
	if uid == "" || namespace == "" || name == "" {
		return "", fmt.Errorf("a claim token needs the claim's UID, namespace and name (got %q, %q, %q)", uid, namespace, name)
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(dom))
	mac.Write([]byte{0})
	mac.Write([]byte(uid))
	mac.Write([]byte{0})
	mac.Write([]byte(namespace + "/" + name))
	return base64.RawURLEncoding.EncodeToString(mac.Sum(nil)), nil
}

// ClaimSecretName is the name of the Secret that holds a claim's token: the claim's name, "-token-"
// and 12 hex digits of sha256 of the token. Nobody without the key can compute it, so nobody can
// create a Secret of that name before the operator does: a Secret of that name that exists is
// the operator's own, although the operator, which may create Secrets outside its namespace but
// not read them, never reads it back. It is a function of the token, so every sync and every
// replica computes the same name without recording it anywhere.
func ClaimSecretName(claimName, token string) string {
	sum := sha256.Sum256([]byte(secretNameDomain + "\x00" + token))
	return claimName + "-token-" + hex.EncodeToString(sum[:])[:12]
}

// Source holds the key: read from the Secret namespace/SecretName, or created there when it does
// not exist yet. Every replica converges on one key: the Secret is created only if absent, never
// updated (it is immutable), and a replica that loses the creation race reads the winner's.
// A Source retries on every call until it has a key; once it has one it keeps it.
type Source struct {
	client    kubernetes.Interface
	namespace string

	mu  sync.Mutex
	key []byte
	// random is crypto/rand.Read; a seam for tests.
	random func([]byte) (int, error)
}

// NewSource returns a Source of the key Secret in namespace.
func NewSource(client kubernetes.Interface, namespace string) *Source {
	return &Source{client: client, namespace: namespace, random: rand.Read}
}

// Namespace is where the key Secret lives.
func (s *Source) Namespace() string { return s.namespace }

// Key returns the key, reading or creating the Secret on first use. Its errors wrap ErrNoKey;
// it never returns an empty key without an error.
func (s *Source) Key(ctx context.Context) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.key != nil {
		return s.key, nil
	}
	key, err := s.load(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoKey, err)
	}
	s.key = key
	return key, nil
}

// Token derives the token of a claim with the Source's key.
func (s *Source) Token(ctx context.Context, uid types.UID, namespace, name string) (string, error) {
	key, err := s.Key(ctx)
	if err != nil {
		return "", err
	}
	return Derive(key, uid, namespace, name)
}

// load reads the key Secret, creating it if absent; on a lost creation race it reads again.
func (s *Source) load(ctx context.Context) ([]byte, error) {
	secrets := s.client.CoreV1().Secrets(s.namespace)
	secret, err := secrets.Get(ctx, SecretName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		key := make([]byte, KeyBytes)
		if _, err := s.random(key); err != nil {
			return nil, fmt.Errorf("generating a key: %w", err)
		}
		secret, err = secrets.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{
				Name:      SecretName,
				Namespace: s.namespace,
				Labels:    map[string]string{"app.kubernetes.io/name": "airlock", "app.kubernetes.io/component": "operator"},
			},
			Type:      corev1.SecretTypeOpaque,
			Immutable: ptr.To(true),
			Data:      map[string][]byte{KeyField: key},
		}, metav1.CreateOptions{FieldManager: FieldManager})
		if apierrors.IsAlreadyExists(err) {
			// Another replica created it first: its key is the key.
			secret, err = secrets.Get(ctx, SecretName, metav1.GetOptions{})
		} else if err == nil {
			klog.FromContext(ctx).Info("Created the claim token key", "secret", klog.KRef(s.namespace, SecretName))
		}
	}
	if err != nil {
		return nil, fmt.Errorf("reading Secret %s/%s: %w", s.namespace, SecretName, err)
	}
	key := secret.Data[KeyField]
	if len(key) < KeyBytes {
		return nil, fmt.Errorf("the Secret %s/%s has a %q of %d bytes, want at least %d: delete it so that the operator creates a new one (every sandbox's token changes)",
			s.namespace, SecretName, KeyField, len(key), KeyBytes)
	}
	return key, nil
}
