package egressca

import (
	"bytes"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	coreinformers "k8s.io/client-go/informers/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/airlock-dev/airlock/pkg/pki"
)

// BundleSource is the sandboxes' egress CA bundle, read from the Secret: its terminating CAs
// (BundleKey), then the public roots. It is the Source (Bundle, OnBundleChange) of the
// distributor's egress bundle (pkg/controller/cabundle, EgressBundle), which publishes it.
type BundleSource struct {
	namespace string
	roots     []byte
	lister    corelisters.SecretLister
	informer  cache.SharedIndexInformer
}

// NewBundleSource returns the bundle of the Secret SecretName of namespace, on an informer from
// NewSecretInformerFactory, with roots (PEM, or empty) after its CAs.
func NewBundleSource(secrets coreinformers.SecretInformer, namespace string, roots []byte) (*BundleSource, error) {
	if len(bytes.TrimSpace(roots)) > 0 {
		if _, err := pki.ParseCerts(roots); err != nil {
			return nil, fmt.Errorf("the public roots: %w", err)
		}
	}
	return &BundleSource{namespace: namespace, roots: roots, lister: secrets.Lister(), informer: secrets.Informer()}, nil
}

// HasSynced says whether the Secret's informer has synced.
func (s *BundleSource) HasSynced() bool { return s.informer.HasSynced() }

// Bundle is the Secret's terminating CAs, then the public roots; nil while the Secret has no
// bundle that parses (the controller repairs it, and its event brings the distributor back).
func (s *BundleSource) Bundle() []byte {
	secret, err := s.lister.Secrets(s.namespace).Get(SecretName)
	if err != nil {
		if !apierrors.IsNotFound(err) {
			utilruntime.HandleError(err)
		}
		return nil
	}
	cas := secret.Data[BundleKey]
	if _, err := pki.ParseCerts(cas); err != nil {
		return nil
	}
	out := bytes.Clone(cas)
	if len(s.roots) > 0 {
		if out[len(out)-1] != '\n' {
			out = append(out, '\n')
		}
		out = append(out, s.roots...)
	}
	return out
}

// OnBundleChange calls f (which only enqueues) on every event of the Secret; remove stops that.
func (s *BundleSource) OnBundleChange(f func()) (remove func()) {
	on := func(obj any) {
		if isSecret(obj, s.namespace) {
			f()
		}
	}
	reg, err := s.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: on, UpdateFunc: func(_, cur any) { on(cur) }, DeleteFunc: on})
	if err != nil {
		utilruntime.HandleError(fmt.Errorf("adding the egress CA bundle's Secret event handler: %w", err))
		return func() {}
	}
	return func() { _ = s.informer.RemoveEventHandler(reg) }
}
