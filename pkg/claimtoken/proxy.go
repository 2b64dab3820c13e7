package claimtoken

import (
	"context"

	"k8s.io/apimachinery/pkg/types"
)

// proxyDomain separates the egress proxy credential from the bearer token and any other use of
// the key.
const proxyDomain = "airlock.dev/egress-proxy-credential/v1"

// DeriveProxy returns the egress gateway's credential of the claim namespace/name with uid: the
// password of its Proxy-Authorization (pkg/egress), derived as Derive derives the bearer token
// but in a domain of its own, so that neither value tells anything of the other. The gateway,
// which holds the key, computes it again for a claim it finds in its cache; the sandbox gets
// it in its proxy URL.
func DeriveProxy(key []byte, uid types.UID, namespace, name string) (string, error) {
	return derive(proxyDomain, key, uid, namespace, name)
}

// ProxyCredential derives the egress proxy credential of a claim with the Source's key.
func (s *Source) ProxyCredential(ctx context.Context, uid types.UID, namespace, name string) (string, error) {
	key, err := s.Key(ctx)
	if err != nil {
		return "", err
	}
	return DeriveProxy(key, uid, namespace, name)
}
