package isolationkey

import (
	"context"
	"crypto/ed25519"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	kubeinformers "k8s.io/client-go/informers"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/airlock-dev/airlock/pkg/attestation"
)

// NewSecretInformerFactory lists and watches only the Secret SecretName of namespace (RBAC
// grants list and watch of that name only: a metadata.name field selector is authorised against
// resourceNames).
func NewSecretInformerFactory(client kubernetes.Interface, namespace string) kubeinformers.SharedInformerFactory {
	return kubeinformers.NewSharedInformerFactoryWithOptions(client, 0,
		kubeinformers.WithNamespace(namespace),
		kubeinformers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", SecretName).String()
		}))
}

// Keys are the keys of the Secret as its informer shows it: the one that signs (for the claim
// controller) and the public bundle (a cabundle.Source, for airlock-ca's isolation-keys.pem).
type Keys struct {
	namespace string
	lister    corelisters.SecretLister
	informer  cache.SharedIndexInformer
}

// NewKeys returns the keys of the Secret SecretName of namespace, on an informer from
// NewSecretInformerFactory.
func NewKeys(secrets coreinformers.SecretInformer, namespace string) *Keys {
	return &Keys{namespace: namespace, lister: secrets.Lister(), informer: secrets.Informer()}
}

// HasSynced says whether the Secret's informer has synced.
func (k *Keys) HasSynced() bool { return k.informer.HasSynced() }

// document reads the Secret's keys: an error when there is no Secret yet, or when its keys do
// not parse (ErrUnreadable).
func (k *Keys) document() (*document, error) {
	secret, err := k.lister.Secrets(k.namespace).Get(SecretName)
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("no isolation signing key yet: the Secret %s/%s does not exist (the operator's leader makes it)", k.namespace, SecretName)
	}
	if err != nil {
		return nil, err
	}
	d, err := decode(secret.Data[KeysKey])
	if err != nil {
		return nil, fmt.Errorf("Secret %s/%s: %w", k.namespace, SecretName, err)
	}
	return d, nil
}

// SigningKey is the key that signs isolation statements now.
func (k *Keys) SigningKey(context.Context) (ed25519.PrivateKey, error) {
	d, err := k.document()
	if err != nil {
		return nil, err
	}
	return d.Signing.private(), nil
}

// Bundle is the PEM of every published public key (the signing key, the next one, the retired
// ones still published); nil while there is no Secret or its keys do not parse (the distributor
// then leaves the published bundle as it is). It holds public keys only.
func (k *Keys) Bundle() []byte {
	d, err := k.document()
	if err != nil {
		return nil
	}
	pem, err := attestation.MarshalPublicKeys(d.publicKeys()...)
	if err != nil {
		utilruntime.HandleError(err)
		return nil
	}
	return pem
}

// OnBundleChange calls f (which only enqueues) on every event of the Secret; remove stops that.
func (k *Keys) OnBundleChange(f func()) (remove func()) {
	on := func(obj any) {
		if isSecret(obj, k.namespace) {
			f()
		}
	}
	reg, err := k.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: on, UpdateFunc: func(_, cur any) { on(cur) }, DeleteFunc: on})
	if err != nil {
		utilruntime.HandleError(fmt.Errorf("adding the isolation keys' Secret event handler: %w", err))
		return func() {}
	}
	return func() { _ = k.informer.RemoveEventHandler(reg) }
}

// isSecret says whether obj (or its tombstone) is the Secret SecretName of namespace.
func isSecret(obj any, namespace string) bool {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	s, ok := obj.(*corev1.Secret)
	return ok && s.Namespace == namespace && s.Name == SecretName
}
