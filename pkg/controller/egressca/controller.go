// Package egressca is the egress CA controller: it keeps the egress gateway's terminating CA in
// the Secret airlock-egress-ca of the operator's namespace (made when missing, the next one made
// at two thirds of the current one's life and published for a propagation period before it
// signs, earlier ones kept in the bundle until they expire), and the sandboxes' CA bundle
// ConfigMap (--egress-ca-bundle-configmap: the public roots and the terminating CAs) in every
// namespace with a claim frozen with that ConfigMap, repairing edits and deletions and deleting
// it once the namespace's last such claim is gone. The gateway mounts the Secret; the CA's key is
// written nowhere else. It sees and writes only the Secret of that name and ConfigMaps of the
// bundle's name that carry LabelBundle. docs/egress.md, "The terminating CA".
package egressca

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	kubeinformers "k8s.io/client-go/informers"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/controller/handlers"
	"github.com/airlock-dev/airlock/pkg/controller/workers"
	airlockinformers "github.com/airlock-dev/airlock/pkg/generated/informers/externalversions/airlock/v1alpha1"
	airlocklisters "github.com/airlock-dev/airlock/pkg/generated/listers/airlock/v1alpha1"

	"github.com/airlock-dev/airlock/pkg/pki"
)

const (
	// ControllerName is the queue's name and the field manager of the controller's writes.
	ControllerName = "airlock-egress-ca-controller"
	// LabelBundle marks the bundle ConfigMaps the controller owns ("true").
	LabelBundle = "airlock.dev/egress-ca-bundle"
	// DefaultConfigMapName is the bundle ConfigMap's name in the install.
	DefaultConfigMapName = "airlock-egress-ca"
	// secretKeyName is the queue key's name of the Secret: a slash, so that it is no ConfigMap's.
	secretKeyName = "secret/" + SecretName
)

// Config is what the controller keeps.
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

// Informers are the controller's caches: the Secret (NewSecretInformerFactory), the bundle
// ConfigMaps (NewConfigMapInformerFactory) and the claims.
type Informers struct {
	Secrets    coreinformers.SecretInformer
	ConfigMaps coreinformers.ConfigMapInformer
	Claims     airlockinformers.SandboxClaimInformer
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

// NewConfigMapInformerFactory lists and watches, across the cluster, only the ConfigMaps named
// name that carry LabelBundle (RBAC grants list and watch of that name only).
func NewConfigMapInformerFactory(client kubernetes.Interface, name string) kubeinformers.SharedInformerFactory {
	return kubeinformers.NewSharedInformerFactoryWithOptions(client, 0,
		kubeinformers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
			o.LabelSelector = LabelBundle + "=true"
		}))
}

// Controller keeps the terminating CA and its bundles.
type Controller struct {
	kubeClient kubernetes.Interface
	cfg        Config

	secretLister    corelisters.SecretLister
	configMapLister corelisters.ConfigMapLister
	claimLister     airlocklisters.SandboxClaimLister
	synced          []cache.InformerSynced
	handlers        handlers.Registrations
	queue           workqueue.TypedRateLimitingInterface[cache.ObjectName]
	clock           clock.Clock
	random          io.Reader
}

// NewController returns the egress CA controller.
func NewController(kubeClient kubernetes.Interface, inf Informers, cfg Config) (*Controller, error) {
	return newControllerWithClock(kubeClient, inf, cfg, clock.RealClock{}, rand.Reader)
}

func newControllerWithClock(kubeClient kubernetes.Interface, inf Informers, cfg Config, clk clock.WithTicker, random io.Reader) (*Controller, error) {
	if err := cfg.Policy.Validate(); err != nil {
		return nil, err
	}
	if cfg.Namespace == "" || cfg.ConfigMapName == "" {
		return nil, fmt.Errorf("the egress CA controller needs the operator's namespace and the bundle ConfigMap's name")
	}
	if len(bytes.TrimSpace(cfg.Roots)) > 0 {
		if _, err := pki.ParseCerts(cfg.Roots); err != nil {
			return nil, fmt.Errorf("the public roots: %w", err)
		}
	}
	c := &Controller{
		kubeClient:      kubeClient,
		cfg:             cfg,
		secretLister:    inf.Secrets.Lister(),
		configMapLister: inf.ConfigMaps.Lister(),
		claimLister:     inf.Claims.Lister(),
		synced:          []cache.InformerSynced{inf.Secrets.Informer().HasSynced, inf.ConfigMaps.Informer().HasSynced, inf.Claims.Informer().HasSynced},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[cache.ObjectName](),
			workqueue.TypedRateLimitingQueueConfig[cache.ObjectName]{Name: ControllerName, Clock: clk}),
		clock:  clk,
		random: random,
	}
	if err := c.addHandlers(inf); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Controller) addHandlers(inf Informers) error {
	// Every update counts (the informers do not resync: an update is a change).
	changed := func(f func(any)) func(old, cur any) { return func(_, cur any) { f(cur) } }
	// The Secret: it is kept, and every bundle follows it.
	onSecret := func(obj any) {
		if s, ok := unwrap(obj).(*corev1.Secret); ok && s.Namespace == c.cfg.Namespace && s.Name == SecretName {
			c.queue.Add(c.secretKey())
			c.enqueueAll()
		}
	}
	if err := c.handlers.Add(inf.Secrets.Informer(), cache.ResourceEventHandlerFuncs{AddFunc: onSecret, UpdateFunc: changed(onSecret), DeleteFunc: onSecret}); err != nil {
		return fmt.Errorf("adding the Secret event handler: %w", err)
	}
	// A ConfigMap changed or deleted by someone else is repaired.
	if err := c.handlers.Add(inf.ConfigMaps.Informer(), cache.ResourceEventHandlerFuncs{AddFunc: c.enqueueNamespaceOf, UpdateFunc: changed(c.enqueueNamespaceOf), DeleteFunc: c.enqueueNamespaceOf}); err != nil {
		return fmt.Errorf("adding the ConfigMap event handler: %w", err)
	}
	// A claim matters when it comes to need the bundle or stops needing it.
	if err := c.handlers.Add(inf.Claims.Informer(), cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if c.needsBundle(unwrap(obj)) {
				c.enqueueNamespaceOf(obj)
			}
		},
		UpdateFunc: func(old, cur any) {
			if c.needsBundle(old) != c.needsBundle(cur) {
				c.enqueueNamespaceOf(cur)
			}
		},
		DeleteFunc: func(obj any) {
			if c.needsBundle(unwrap(obj)) {
				c.enqueueNamespaceOf(obj)
			}
		},
	}); err != nil {
		return fmt.Errorf("adding the claim event handler: %w", err)
	}
	return nil
}

func unwrap(obj any) any {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return tombstone.Obj
	}
	return obj
}

// needsBundle says whether obj is a claim frozen with egress and this bundle ConfigMap.
func (c *Controller) needsBundle(obj any) bool {
	claim, ok := obj.(*airlockv1alpha1.SandboxClaim)
	if !ok || claim.Status.Frozen == nil || claim.Status.Frozen.Egress == nil {
		return false
	}
	return claim.Status.Frozen.Egress.Gateway.CABundleConfigMap == c.cfg.ConfigMapName
}

func (c *Controller) secretKey() cache.ObjectName {
	return cache.ObjectName{Namespace: c.cfg.Namespace, Name: secretKeyName}
}

func (c *Controller) enqueueNamespaceOf(obj any) {
	if o, ok := unwrap(obj).(metav1.Object); ok {
		c.queue.Add(cache.ObjectName{Namespace: o.GetNamespace(), Name: c.cfg.ConfigMapName})
	}
}

// enqueueAll enqueues every namespace with a ConfigMap or a claim that needs one.
func (c *Controller) enqueueAll() {
	namespaces := sets.New[string]()
	cms, err := c.configMapLister.List(labels.Everything())
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	for _, cm := range cms {
		namespaces.Insert(cm.Namespace)
	}
	claims, err := c.claimLister.List(labels.Everything())
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	for _, cl := range claims {
		if c.needsBundle(cl) {
			namespaces.Insert(cl.Namespace)
		}
	}
	for ns := range namespaces {
		c.queue.Add(cache.ObjectName{Namespace: ns, Name: c.cfg.ConfigMapName})
	}
}

// Run runs the workers until ctx is done, and returns once they all have.
func (c *Controller) Run(ctx context.Context, n int) error {
	defer utilruntime.HandleCrashWithContext(ctx)
	defer c.handlers.RemoveAll()
	defer c.queue.ShutDown()
	logger := klog.FromContext(ctx)
	logger.Info("Starting controller", "controller", ControllerName, "workers", n, "secret", klog.KRef(c.cfg.Namespace, SecretName), "configMap", c.cfg.ConfigMapName)
	defer logger.Info("Shutting down controller", "controller", ControllerName)
	if !cache.WaitForNamedCacheSyncWithContext(ctx, c.synced...) {
		return fmt.Errorf("waiting for the informer caches to sync: %w", ctx.Err())
	}
	c.queue.Add(c.secretKey()) // a missing Secret has no event
	c.enqueueAll()
	workers.RunRequeue(ctx, n, c.queue, "egressCA", c.sync)
	return nil
}

func (c *Controller) sync(ctx context.Context, key cache.ObjectName) (*time.Duration, error) {
	if key == c.secretKey() {
		return c.syncSecret(ctx)
	}
	return nil, c.syncBundle(ctx, key.Namespace)
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

// bundle is what the ConfigMaps hold: the Secret's terminating CAs, then the public roots; nil
// while the Secret has no bundle that parses.
func (c *Controller) bundle() ([]byte, error) {
	s, err := c.secretLister.Secrets(c.cfg.Namespace).Get(SecretName)
	if apierrors.IsNotFound(err) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	cas := s.Data[BundleKey]
	if _, err := pki.ParseCerts(cas); err != nil {
		return nil, nil // broken: syncSecret repairs it, and its event brings us back
	}
	out := bytes.Clone(cas)
	if len(c.cfg.Roots) > 0 {
		if out[len(out)-1] != '\n' {
			out = append(out, '\n')
		}
		out = append(out, c.cfg.Roots...)
	}
	return out, nil
}

// syncBundle makes the namespace's ConfigMap hold the bundle while a claim of the namespace needs
// it, and deletes it once none does.
func (c *Controller) syncBundle(ctx context.Context, ns string) error {
	name := c.cfg.ConfigMapName
	claims, err := c.claimLister.SandboxClaims(ns).List(labels.Everything())
	if err != nil {
		return err
	}
	needed := false
	for _, cl := range claims {
		if c.needsBundle(cl) {
			needed = true
			break
		}
	}
	cm, err := c.configMapLister.ConfigMaps(ns).Get(name)
	if apierrors.IsNotFound(err) {
		cm = nil
	} else if err != nil {
		return err
	}
	if !needed {
		return c.deleteBundle(ctx, cm)
	}
	bundle, err := c.bundle()
	if err != nil || bundle == nil {
		return err // no CA yet: the Secret's event enqueues every namespace
	}
	if cm == nil {
		return c.createBundle(ctx, ns, bundle)
	}
	if len(cm.Data) == 1 && cm.Data[BundleKey] == string(bundle) && len(cm.BinaryData) == 0 {
		return nil
	}
	updated := cm.DeepCopy()
	updated.Data = map[string]string{BundleKey: string(bundle)}
	updated.BinaryData = nil
	if _, err := c.kubeClient.CoreV1().ConfigMaps(ns).Update(ctx, updated, metav1.UpdateOptions{FieldManager: ControllerName}); err != nil {
		return fmt.Errorf("updating ConfigMap %s/%s: %w", ns, name, err)
	}
	klog.FromContext(ctx).V(2).Info("Updated the egress CA bundle", "configMap", klog.KRef(ns, name))
	return nil
}

func (c *Controller) deleteBundle(ctx context.Context, cm *corev1.ConfigMap) error {
	if cm == nil {
		return nil
	}
	err := c.kubeClient.CoreV1().ConfigMaps(cm.Namespace).Delete(ctx, cm.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &cm.UID}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("deleting ConfigMap %s/%s: %w", cm.Namespace, cm.Name, err)
	}
	klog.FromContext(ctx).V(2).Info("Deleted the egress CA bundle of a namespace without claims that need it", "configMap", klog.KObj(cm))
	return nil
}

func (c *Controller) createBundle(ctx context.Context, ns string, bundle []byte) error {
	name := c.cfg.ConfigMapName
	configMaps := c.kubeClient.CoreV1().ConfigMaps(ns)
	_, err := configMaps.Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: ns,
			Labels:    map[string]string{LabelBundle: "true", "app.kubernetes.io/name": "airlock"},
		},
		Data: map[string]string{BundleKey: string(bundle)},
	}, metav1.CreateOptions{FieldManager: ControllerName})
	if apierrors.IsAlreadyExists(err) {
		// Ours, not in the cache yet (its add event syncs again), or someone else's of that name
		// without the label, which is never overwritten.
		existing, err := configMaps.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("reading ConfigMap %s/%s: %w", ns, name, err)
		}
		if existing.Labels[LabelBundle] != "true" {
			klog.FromContext(ctx).Info("Warning: a ConfigMap without the label "+LabelBundle+"=true has the egress CA bundle's name: it is left as it is, and the namespace's sandboxes with egress trust what it holds",
				"configMap", klog.KRef(ns, name))
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("creating ConfigMap %s/%s: %w", ns, name, err)
	}
	klog.FromContext(ctx).V(2).Info("Published the egress CA bundle", "configMap", klog.KRef(ns, name))
	return nil
}
