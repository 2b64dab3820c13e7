package claimtoken

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

const (
	// ProxySecretName is the Secret of the operator's namespace that holds the proxy key
	// (ProxyKey) under KeyField: the one key the egress gateway reads. It holds nothing that
	// derives a claim's bearer token or a warm member's key.
	ProxySecretName = "airlock-egress-proxy-key"

	// proxyKeyDomain separates the proxy key from every other derivation of the operator's key.
	proxyKeyDomain = "airlock.dev/egress-proxy-key/v1"
	// proxyDomain separates the egress proxy credential from any other use of the proxy key.
	proxyDomain = "airlock.dev/egress-proxy-credential/v1"
	// memberProxyDomain separates a warm member's proxy credential from a claim's and from any
	// other use of the proxy key.
	memberProxyDomain = "airlock.dev/egress-member-proxy-credential/v1"
	// decisionsReaderDomain separates the token of the gateway's decisions feed from every
	// other use of the proxy key.
	decisionsReaderDomain = "airlock.dev/egress-decisions-reader/v1"
)

// ProxyKey derives the egress gateway's key from the operator's key: HMAC-SHA256(key,
// "airlock.dev/egress-proxy-key/v1"), 32 bytes. It is one-way (nothing of the operator's key,
// hence of a bearer token, a warm member's key or an adoption token, can be computed from it)
// and in a domain of its own; the gateway holds it, never the operator's key, and computes
// from it the proxy credentials only (DeriveProxy).
func ProxyKey(key []byte) ([]byte, error) {
	if len(key) < KeyBytes {
		return nil, fmt.Errorf("%w: the key has %d bytes, want %d", ErrNoKey, len(key), KeyBytes)
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(proxyKeyDomain))
	return mac.Sum(nil), nil
}

// DeriveProxy returns the egress gateway's credential of the claim namespace/name with uid,
// from the proxy key (ProxyKey of the operator's key): the password of its Proxy-Authorization
// (pkg/egress), HMAC-SHA256(proxyKey, domain NUL uid NUL namespace/name) in base64url. The
// gateway, which holds the proxy key, computes it again for a claim it finds in its cache; the
// sandbox gets it in its proxy URL.
func DeriveProxy(proxyKey []byte, uid types.UID, namespace, name string) (string, error) {
	return derive(proxyDomain, proxyKey, uid, namespace, name)
}

// DeriveMemberProxy returns the egress gateway's credential of the warm member pod
// namespace/member with uid (docs/egress.md, "Warm members of a class with egress"): the
// password of the member's Proxy-Authorization, whose username is "<namespace>.~<member>",
// HMAC-SHA256(proxyKey, "airlock.dev/egress-member-proxy-credential/v1" NUL uid NUL namespace/member) in base64url. It exists
// before any claim, so that the member's environment can name it; the gateway, which holds the
// proxy key and nothing that derives a sandbox's token, computes it again for a member pod it
// finds in its cache, and takes it as the adopting claim's credential once (and only while) a
// Bound claim has adopted that pod. A domain of its own: it is no claim's credential, and no
// claim's is a member's, even where a pod and a claim share a UID and a name. The pod's UID is
// in it, so that a pod created again under a member's name gets another credential.
func DeriveMemberProxy(proxyKey []byte, uid types.UID, namespace, member string) (string, error) {
	return derive(memberProxyDomain, proxyKey, uid, namespace, member)
}

// MemberProxyCredential derives the egress proxy credential of the warm member pod
// namespace/member with uid, with the proxy key of the Source's key.
func (s *Source) MemberProxyCredential(ctx context.Context, uid types.UID, namespace, member string) (string, error) {
	return s.withProxyKey(ctx, func(pk []byte) (string, error) { return DeriveMemberProxy(pk, uid, namespace, member) })
}

// ProxyCredential derives the egress proxy credential of a claim with the Source's key.
func (s *Source) ProxyCredential(ctx context.Context, uid types.UID, namespace, name string) (string, error) {
	return s.withProxyKey(ctx, func(pk []byte) (string, error) { return DeriveProxy(pk, uid, namespace, name) })
}

// withProxyKey derives with the proxy key of the Source's key.
func (s *Source) withProxyKey(ctx context.Context, derive func(proxyKey []byte) (string, error)) (string, error) {
	key, err := s.Key(ctx)
	if err != nil {
		return "", err
	}
	pk, err := ProxyKey(key)
	if err != nil {
		return "", err
	}
	return derive(pk)
}

// EnsureProxyKey makes the Secret ProxySecretName of the Source's namespace hold the proxy key
// of the Source's key: created when missing, updated when it holds another value (a key made
// again, an edit). The egress gateway reads it.
func (s *Source) EnsureProxyKey(ctx context.Context) error {
	key, err := s.Key(ctx)
	if err != nil {
		return err
	}
	pk, err := ProxyKey(key)
	if err != nil {
		return err
	}
	return EnsureProxyKeySecret(ctx, s.client, s.namespace, pk)
}

// EnsureProxyKeySecret writes proxyKey into the Secret ProxySecretName of namespace, creating it
// when missing and updating it when it differs.
func EnsureProxyKeySecret(ctx context.Context, client kubernetes.Interface, namespace string, proxyKey []byte) error {
	secrets := client.CoreV1().Secrets(namespace)
	secret, err := secrets.Get(ctx, ProxySecretName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = secrets.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{
				Name:      ProxySecretName,
				Namespace: namespace,
				Labels:    map[string]string{"app.kubernetes.io/name": "airlock", "app.kubernetes.io/component": "egress"},
			},
			Type: corev1.SecretTypeOpaque,
			Data: map[string][]byte{KeyField: proxyKey},
		}, metav1.CreateOptions{FieldManager: FieldManager})
		if err == nil {
			klog.FromContext(ctx).Info("Created the egress gateway's proxy key", "secret", klog.KRef(namespace, ProxySecretName))
		}
		if apierrors.IsAlreadyExists(err) {
			return EnsureProxyKeySecret(ctx, client, namespace, proxyKey)
		}
	} else if err == nil && !bytes.Equal(secret.Data[KeyField], proxyKey) {
		secret = secret.DeepCopy()
		secret.Data = map[string][]byte{KeyField: proxyKey}
		secret.Immutable = nil
		_, err = secrets.Update(ctx, secret, metav1.UpdateOptions{FieldManager: FieldManager})
		if err == nil {
			klog.FromContext(ctx).Info("Updated the egress gateway's proxy key", "secret", klog.KRef(namespace, ProxySecretName))
		}
	}
	if err != nil {
		return fmt.Errorf("writing Secret %s/%s: %w", namespace, ProxySecretName, err)
	}
	return nil
}

// DecisionsReaderToken is the bearer token with which the operator's leader reads the egress
// gateway's decisions (GET /decisions, docs/record.md §2.1): HMAC-SHA256(proxyKey,
// "airlock.dev/egress-decisions-reader/v1") in base64url. One token, for this read only, in a
// domain of its own: it is no claim's or member's proxy credential (those are HMACs of the same
// key over other domains and a claim's or pod's identity), and none of those is it. The gateway
// computes it from the proxy key it holds, which still derives nothing of a sandbox's bearer
// token; the operator from its token key (ProxyKey first). A sandbox holds only its own proxy
// credential, from which neither the key nor this token can be computed.
func DecisionsReaderToken(proxyKey []byte) (string, error) {
	if len(proxyKey) < KeyBytes {
		return "", fmt.Errorf("%w: the proxy key has %d bytes, want %d", ErrNoKey, len(proxyKey), KeyBytes)
	}
	mac := hmac.New(sha256.New, proxyKey)
	mac.Write([]byte(decisionsReaderDomain))
	return base64.RawURLEncoding.EncodeToString(mac.Sum(nil)), nil
}

// DecisionsReaderToken is the token of the gateway's decisions feed, from the Source's key.
func (s *Source) DecisionsReaderToken(ctx context.Context) (string, error) {
	return s.withProxyKey(ctx, DecisionsReaderToken)
}
