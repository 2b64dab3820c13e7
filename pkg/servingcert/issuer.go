package servingcert

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	kubeinformers "k8s.io/client-go/informers"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/airlock-dev/airlock/pkg/controller/handlers"
)

// IssuerName is the issuer's queue name and field manager.
const IssuerName = "airlock-serving-cert"

// NewSecretInformerFactory returns an informer factory that lists and watches only the Secret
// SecretName in namespace: the operator may read no other Secret (RBAC grants list and watch
// of that name only; a list or watch with a metadata.name field selector is authorised against
// resourceNames).
func NewSecretInformerFactory(client kubernetes.Interface, namespace string) kubeinformers.SharedInformerFactory {
	return NewNamedSecretInformerFactory(client, namespace, SecretName)
}

// NewNamedSecretInformerFactory is NewSecretInformerFactory for the Secret name (a Policy's
// SecretName other than the Sandbox API's).
func NewNamedSecretInformerFactory(client kubernetes.Interface, namespace, name string) kubeinformers.SharedInformerFactory {
	return kubeinformers.NewSharedInformerFactoryWithOptions(client, 0,
		kubeinformers.WithNamespace(namespace),
		kubeinformers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
		}))
}

// Issuer keeps the Secret SecretName current and the Store serving what it holds. Every replica
// runs one: whichever replica finds the Secret missing or due creates or updates it (the API
// server's create-if-absent and resourceVersion checks let exactly one write win; the others see
// AlreadyExists or a conflict, and then the winner's Secret through the informer), and every
// replica loads every version of the Secret into its Store. No leader is needed, so that a
// standby serves, and a new replica starts, with the current certificate while no leader is
// elected.
type Issuer struct {
	client    kubernetes.Interface
	namespace string
	policy    Policy
	store     *Store

	secretLister  corelisters.SecretLister
	secretsSynced cache.InformerSynced
	handlers      handlers.Registrations

	queue  workqueue.TypedRateLimitingInterface[cache.ObjectName]
	clock  clock.Clock
	random io.Reader
}

// NewIssuer returns an Issuer of the Secret SecretName in namespace, on an informer from
// NewSecretInformerFactory.
func NewIssuer(client kubernetes.Interface, namespace string, secrets coreinformers.SecretInformer, policy Policy, store *Store) (*Issuer, error) {
	return newIssuerWithClock(client, namespace, secrets, policy, store, clock.RealClock{}, rand.Reader)
}

func newIssuerWithClock(client kubernetes.Interface, namespace string, secrets coreinformers.SecretInformer, policy Policy, store *Store, clk clock.WithTicker, random io.Reader) (*Issuer, error) {
	if len(policy.Names) == 0 {
		return nil, fmt.Errorf("the serving certificate needs at least one name")
	}
	if policy.SecretName == "" {
		policy.SecretName = SecretName
	}
	if policy.CAName == "" {
		policy.CAName = defaultCAName
	}
	i := &Issuer{
		client:        client,
		namespace:     namespace,
		policy:        policy,
		store:         store,
		secretLister:  secrets.Lister(),
		secretsSynced: secrets.Informer().HasSynced,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[cache.ObjectName](),
			workqueue.TypedRateLimitingQueueConfig[cache.ObjectName]{Name: IssuerName, Clock: clk}),
		clock:  clk,
		random: random,
	}
	enqueue := func(obj any) {
		if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tombstone.Obj
		}
		if s, ok := obj.(*corev1.Secret); ok && s.Namespace == namespace && s.Name == i.policy.SecretName {
			i.queue.Add(i.key())
		}
	}
	if err := i.handlers.Add(secrets.Informer(), cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue,
		UpdateFunc: func(old, cur any) {
			if old.(metav1.Object).GetResourceVersion() != cur.(metav1.Object).GetResourceVersion() {
				enqueue(cur)
			}
		},
		DeleteFunc: enqueue,
	}); err != nil {
		return nil, fmt.Errorf("adding the Secret event handler: %w", err)
	}
	return i, nil
}

func (i *Issuer) key() cache.ObjectName {
	return cache.ObjectName{Namespace: i.namespace, Name: i.policy.SecretName}
}

// Run keeps the Secret current until ctx is done, and returns once its worker has.
func (i *Issuer) Run(ctx context.Context) error {
	defer utilruntime.HandleCrashWithContext(ctx)
	defer i.handlers.RemoveAll()
	defer i.queue.ShutDown()
	logger := klog.FromContext(ctx)
	logger.Info("Starting the serving certificate issuer", "secret", klog.KRef(i.namespace, i.policy.SecretName))
	defer logger.Info("Stopped the serving certificate issuer")
	if !cache.WaitForNamedCacheSyncWithContext(ctx, i.secretsSynced) {
		return fmt.Errorf("waiting for the Secret cache to sync: %w", ctx.Err())
	}
	i.queue.Add(i.key()) // a missing Secret has no event
	var wg wait.Group
	wg.StartWithContext(ctx, func(ctx context.Context) {
		for i.processNextWorkItem(ctx) {
		}
	})
	<-ctx.Done()
	i.queue.ShutDown()
	wg.Wait()
	return nil
}

func (i *Issuer) processNextWorkItem(ctx context.Context) bool {
	key, shutdown := i.queue.Get()
	if shutdown {
		return false
	}
	defer i.queue.Done(key)
	next, err := i.sync(ctx)
	if err != nil {
		utilruntime.HandleErrorWithContext(ctx, err, "Error syncing the serving certificate", "secret", klog.KRef(key.Namespace, key.Name))
		i.queue.AddRateLimited(key)
		return true
	}
	i.queue.Forget(key)
	if next > 0 {
		i.queue.AddAfter(key, next)
	}
	return true
}

// sync makes the Secret what plan says, loads it into the Store, and returns how long until it
// must be looked at again (0: an event will say).
func (i *Issuer) sync(ctx context.Context) (time.Duration, error) {
	logger := klog.FromContext(ctx)
	now := i.clock.Now()
	cached, err := i.secretLister.Secrets(i.namespace).Get(i.policy.SecretName)
	if err != nil && !apierrors.IsNotFound(err) {
		return 0, err
	}
	var data map[string][]byte
	if cached != nil {
		data = cached.Data
	}
	p, err := plan(data, i.policy, now, i.random)
	if err != nil {
		return 0, err
	}
	secrets := i.client.CoreV1().Secrets(i.namespace)
	switch {
	case cached == nil:
		created, err := secrets.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{
				Name:      i.policy.SecretName,
				Namespace: i.namespace,
				Labels:    map[string]string{"app.kubernetes.io/name": "airlock", "app.kubernetes.io/component": i.policy.component()},
			},
			Type: corev1.SecretTypeTLS,
			Data: p.Data,
		}, metav1.CreateOptions{FieldManager: IssuerName})
		if apierrors.IsAlreadyExists(err) {
			logger.V(2).Info("Another replica created the serving certificate first", "secret", klog.KRef(i.namespace, i.policy.SecretName))
			return 0, nil // the informer brings it
		}
		if err != nil {
			return 0, fmt.Errorf("creating Secret %s/%s: %w", i.namespace, i.policy.SecretName, err)
		}
		logger.Info("Created the CA and serving certificate", "secret", klog.KObj(created), "names", i.policy.Names)
		data = created.Data
	case p.Changed:
		secret := cached.DeepCopy()
		secret.Data = p.Data
		updated, err := secrets.Update(ctx, secret, metav1.UpdateOptions{FieldManager: IssuerName})
		if apierrors.IsConflict(err) {
			logger.V(2).Info("Another replica changed the serving certificate first", "secret", klog.KRef(i.namespace, i.policy.SecretName))
			return 0, nil // the informer brings it
		}
		if err != nil {
			return 0, fmt.Errorf("updating Secret %s/%s: %w", i.namespace, i.policy.SecretName, err)
		}
		logger.Info("Renewed the CA and serving certificates", "secret", klog.KObj(updated), "reasons", p.Reasons)
		data = updated.Data
	}
	if err := i.store.Set(data[corev1.TLSCertKey], data[corev1.TLSPrivateKeyKey], data[BundleKey]); err != nil {
		return 0, fmt.Errorf("loading the serving certificate of Secret %s/%s: %w", i.namespace, i.policy.SecretName, err)
	}
	return max(p.Next.Sub(now), time.Second), nil
}
