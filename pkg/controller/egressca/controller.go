// Package egressca is the egress CA controller: it keeps the egress gateway's terminating CA in
// the Secret airlock-egress-ca of the operator's namespace (made when missing, the next one made
// at two thirds of the current one's life and published for a propagation period before it
// signs, earlier ones kept in the bundle until they expire). The gateway mounts the Secret; the
// CA's key is written nowhere else. The sandboxes' bundle ConfigMap (--egress-ca-bundle-configmap:
// the public roots and the terminating CAs) is published by the CA bundle distributor
// (pkg/controller/cabundle), from this Secret through a BundleSource (bundle.go). It sees and
// writes only the Secret of that name. docs/egress.md, "The terminating CA".
package egressca

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
	kubeinformers "k8s.io/client-go/informers"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/airlock-dev/airlock/pkg/controller/handlers"
	"github.com/airlock-dev/airlock/pkg/controller/workers"
)

const (
	// ControllerName is the queue's name and the field manager of the controller's writes (and of
	// the egress bundle ConfigMaps the distributor writes, cabundle.EgressBundle).
	ControllerName = "airlock-egress-ca-controller"
	// DefaultConfigMapName is the bundle ConfigMap's name in the install.
	DefaultConfigMapName = "airlock-egress-ca"
	// secretKeyName is the queue key's name of the Secret.
	secretKeyName = "secret/" + SecretName
)

// Config is what the operator keeps of the egress CA: the controller keeps the Secret in
// Namespace by Policy; the distributor publishes the bundle ConfigMap ConfigMapName with Roots
// (NewBundleSource, cabundle.EgressBundle).
type Config struct {
	// Namespace is the operator's, where the Secret is.
	Namespace string
	// ConfigMapName is the bundle ConfigMap of each claim's namespace (--egress-ca-bundle-configmap).
	ConfigMapName string
	// Roots are the public roots (PEM) published after the terminating CAs; empty: none.
	Roots []byte
	// Policy says how long CAs live and propagate.
	Policy Policy
}

// NewSecretInformerFactory lists and watches only the Secret SecretName of namespace (RBAC grants
// list and watch of that name only).
func NewSecretInformerFactory(client kubernetes.Interface, namespace string) kubeinformers.SharedInformerFactory {
	return kubeinformers.NewSharedInformerFactoryWithOptions(client, 0,
		kubeinformers.WithNamespace(namespace),
		kubeinformers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", SecretName).String()
		}))
}

// Controller keeps the terminating CA.
type Controller struct {
	kubeClient kubernetes.Interface
	cfg        Config

	secretLister corelisters.SecretLister
	secretSynced cache.InformerSynced
	handlers     handlers.Registrations
	queue        workqueue.TypedRateLimitingInterface[cache.ObjectName]
	clock        clock.Clock
	random       io.Reader
}

// NewController returns the egress CA controller on an informer from NewSecretInformerFactory.
func NewController(kubeClient kubernetes.Interface, secrets coreinformers.SecretInformer, cfg Config) (*Controller, error) {
	return newControllerWithClock(kubeClient, secrets, cfg, clock.RealClock{}, rand.Reader)
}

func newControllerWithClock(kubeClient kubernetes.Interface, secrets coreinformers.SecretInformer, cfg Config, clk clock.WithTicker, random io.Reader) (*Controller, error) {
	if err := cfg.Policy.Validate(); err != nil {
		return nil, err
	}
	if cfg.Namespace == "" {
		return nil, fmt.Errorf("the egress CA controller needs the operator's namespace")
	}
	c := &Controller{
		kubeClient:   kubeClient,
		cfg:          cfg,
		secretLister: secrets.Lister(),
		secretSynced: secrets.Informer().HasSynced,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[cache.ObjectName](),
			workqueue.TypedRateLimitingQueueConfig[cache.ObjectName]{Name: ControllerName, Clock: clk}),
		clock:  clk,
		random: random,
	}
	// Every update counts (the informer does not resync: an update is a change).
	onSecret := func(obj any) {
		if isSecret(obj, cfg.Namespace) {
			c.queue.Add(c.secretKey())
		}
	}
	if err := c.handlers.Add(secrets.Informer(), cache.ResourceEventHandlerFuncs{AddFunc: onSecret, UpdateFunc: func(_, cur any) { onSecret(cur) }, DeleteFunc: onSecret}); err != nil {
		return nil, fmt.Errorf("adding the Secret event handler: %w", err)
	}
	return c, nil
}

// isSecret says whether obj (or its tombstone) is the Secret SecretName of namespace.
func isSecret(obj any, namespace string) bool {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	s, ok := obj.(*corev1.Secret)
	return ok && s.Namespace == namespace && s.Name == SecretName
}

func (c *Controller) secretKey() cache.ObjectName {
	return cache.ObjectName{Namespace: c.cfg.Namespace, Name: secretKeyName}
}

// Run runs the workers until ctx is done, and returns once they all have.
func (c *Controller) Run(ctx context.Context, n int) error {
	defer utilruntime.HandleCrashWithContext(ctx)
	defer c.handlers.RemoveAll()
	defer c.queue.ShutDown()
	logger := klog.FromContext(ctx)
	logger.Info("Starting controller", "controller", ControllerName, "workers", n, "secret", klog.KRef(c.cfg.Namespace, SecretName))
	defer logger.Info("Shutting down controller", "controller", ControllerName)
	if !cache.WaitForNamedCacheSyncWithContext(ctx, c.secretSynced) {
		return fmt.Errorf("waiting for the informer caches to sync: %w", ctx.Err())
	}
	c.queue.Add(c.secretKey()) // a missing Secret has no event
	workers.RunRequeue(ctx, n, c.queue, "egressCA", c.sync)
	return nil
}

func (c *Controller) sync(ctx context.Context, key cache.ObjectName) (*time.Duration, error) {
	if key != c.secretKey() {
		return nil, nil
	}
	return c.syncSecret(ctx)
}

// syncSecret makes the Secret what plan says and returns when to look again.
func (c *Controller) syncSecret(ctx context.Context) (*time.Duration, error) {
	logger := klog.FromContext(ctx)
	now := c.clock.Now()
	cached, err := c.secretLister.Secrets(c.cfg.Namespace).Get(SecretName)
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, err
	}
	var data map[string][]byte
	if cached != nil {
		data = cached.Data
	}
	p, err := plan(data, c.cfg.Policy, now, c.random)
	if err != nil {
		return nil, err
	}
	next := max(p.Next.Sub(now), time.Second)
	secrets := c.kubeClient.CoreV1().Secrets(c.cfg.Namespace)
	switch {
	case cached == nil:
		_, err := secrets.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{
				Name:      SecretName,
				Namespace: c.cfg.Namespace,
				Labels:    map[string]string{"app.kubernetes.io/name": "airlock", "app.kubernetes.io/component": "egress"},
			},
			Type: corev1.SecretTypeTLS,
			Data: p.Data,
		}, metav1.CreateOptions{FieldManager: ControllerName})
		if apierrors.IsAlreadyExists(err) {
			return nil, nil // not in the cache yet: its event syncs again
		}
		if err != nil {
			return nil, fmt.Errorf("creating Secret %s/%s: %w", c.cfg.Namespace, SecretName, err)
		}
		logger.Info("Created the egress gateway's terminating CA", "secret", klog.KRef(c.cfg.Namespace, SecretName), "reasons", p.Reasons)
	case p.Changed:
		secret := cached.DeepCopy()
		secret.Data = p.Data
		if _, err := secrets.Update(ctx, secret, metav1.UpdateOptions{FieldManager: ControllerName}); apierrors.IsConflict(err) {
			return nil, nil // changed meanwhile: its event syncs again
		} else if err != nil {
			return nil, fmt.Errorf("updating Secret %s/%s: %w", c.cfg.Namespace, SecretName, err)
		}
		logger.Info("Updated the egress gateway's terminating CA", "secret", klog.KRef(c.cfg.Namespace, SecretName), "reasons", p.Reasons)
	}
	return &next, nil
}
