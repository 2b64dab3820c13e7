package operator

import (
	"context"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/claimtoken"
	recordcontroller "github.com/airlock-dev/airlock/pkg/controller/record"
	"github.com/airlock-dev/airlock/pkg/record"
)

// recordSigning is the session record's signing key (docs/record.md §2.2), derived from the
// operator's token key with record.SigningKey once that key is read: every replica derives the
// same, nothing new is stored. It is also the source of the public key the CA bundle distributor
// publishes in airlock-ca (cabundle.Source).
type recordSigning struct {
	tokens *claimtoken.Source

	mu        sync.Mutex
	signer    *record.Signer
	pem       []byte
	listeners map[int]func()
	next      int
}

func newRecordSigning(tokens *claimtoken.Source) *recordSigning {
	return &recordSigning{tokens: tokens, listeners: map[int]func(){}}
}

// Signer returns the signer, deriving it on first use.
func (r *recordSigning) Signer(ctx context.Context) (*record.Signer, error) {
	r.mu.Lock()
	if r.signer != nil {
		defer r.mu.Unlock()
		return r.signer, nil
	}
	r.mu.Unlock()
	key, err := r.tokens.Key(ctx)
	if err != nil {
		return nil, err
	}
	signer, pem, err := signerOf(key)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	if r.signer == nil {
		r.signer, r.pem = signer, pem
		for _, f := range r.listeners {
			f()
		}
	}
	s := r.signer
	r.mu.Unlock()
	return s, nil
}

// signerOf derives the record's signer and its public key (PEM) from the token key.
func signerOf(tokenKey []byte) (*record.Signer, []byte, error) {
	priv, err := record.SigningKey(tokenKey)
	if err != nil {
		return nil, nil, err
	}
	signer, err := record.NewSigner(priv)
	if err != nil {
		return nil, nil, err
	}
	pem, err := record.MarshalPublicKey(signer.Public())
	if err != nil {
		return nil, nil, err
	}
	return signer, pem, nil
}

// Bundle is the public key as PEM, nil until the key is derived.
func (r *recordSigning) Bundle() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pem
}

// OnBundleChange calls f once the key is derived.
func (r *recordSigning) OnBundleChange(f func()) (remove func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	id := r.next
	r.next++
	r.listeners[id] = f
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		delete(r.listeners, id)
	}
}

// recordLink links the claim controller to the term's record controller (claim.SessionRecords),
// without either importing the other: the record controller's init fills it, before any runs.
type recordLink struct{ c *recordcontroller.Controller }

func (l *recordLink) WaitStopped(ctx context.Context, claimUID types.UID) bool {
	if l == nil || l.c == nil {
		return false
	}
	return l.c.WaitStopped(ctx, claimUID)
}

func (l *recordLink) WaitStored(ctx context.Context, claim *airlockv1alpha1.SandboxClaim) bool {
	if l == nil || l.c == nil {
		return false
	}
	return l.c.WaitStored(ctx, claim)
}

func (l *recordLink) MoveRecords(ctx context.Context, namespace string, from types.UID, owner metav1.OwnerReference) error {
	if l == nil || l.c == nil {
		return nil
	}
	return l.c.MoveRecords(ctx, namespace, from, owner)
}
