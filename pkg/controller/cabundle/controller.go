// Package cabundle is the CA bundle controller: it keeps a ConfigMap airlock-ca, holding the CA
// bundle that verifies the Sandbox API, in every namespace that has an AgentRuntime, so that a
// runtime's pod can mount it. It repairs a changed or deleted ConfigMap, follows every change of
// the bundle (a CA rotation), and deletes the ConfigMap once the namespace's last runtime is gone.
// It sees and writes only ConfigMaps of that name that carry its label.
package cabundle

import (
	"context"
	"fmt"

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

	"github.com/airlock-dev/airlock/pkg/controller/handlers"
	"github.com/airlock-dev/airlock/pkg/controller/workers"
	airlockinformers "github.com/airlock-dev/airlock/pkg/generated/informers/externalversions/airlock/v1alpha1"
	airlocklisters "github.com/airlock-dev/airlock/pkg/generated/listers/airlock/v1alpha1"
)

const (
	// ControllerName is the queue's name and the field manager of the ConfigMap writes.
	ControllerName = "airlock-ca-bundle-controller"
	// ConfigMapName is the ConfigMap in each runtime's namespace.
	ConfigMapName = "airlock-ca"
	// Key is the ConfigMap's key that holds the PEM bundle; a runtime mounts it as a file of that
	// name (by default at /var/run/airlock/ca/ca.crt, pkg/client.DefaultCAFile).
	Key = "ca.crt"
	// LabelBundle marks the ConfigMaps the controller owns ("true").
	LabelBundle = "airlock.dev/ca-bundle"
)

// Source is where the bundle comes from: the operator's serving certificate Store, or the CA
// file of files mode.
type Source interface {
	// Bundle returns the PEM bundle, nil while there is none.
	Bundle() []byte
	// OnBundleChange calls f (which only enqueues) when the bundle changes; remove stops that.
	OnBundleChange(f func()) (remove func())
}

// NewConfigMapInformerFactory returns an informer factory that lists and watches, across the
// cluster, only the ConfigMaps named ConfigMapName that carry LabelBundle: RBAC grants the
// operator list and watch of that name only (a metadata.name field selector is authorised against
// resourceNames).
func NewConfigMapInformerFactory(client kubernetes.Interface) kubeinformers.SharedInformerFactory {
	return kubeinformers.NewSharedInformerFactoryWithOptions(client, 0,
		kubeinformers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", ConfigMapName).String()
			o.LabelSelector = LabelBundle + "=true"
		}))
}

// Controller keeps the CA bundle ConfigMaps.
type Controller struct {
	kubeClient kubernetes.Interface
	source     Source

	runtimeLister    airlocklisters.AgentRuntimeLister
	runtimesSynced   cache.InformerSynced
	configMapLister  corelisters.ConfigMapLister
	configMapsSynced cache.InformerSynced
	handlers         handlers.Registrations

	queue workqueue.TypedRateLimitingInterface[cache.ObjectName]
}

// NewController returns a CA bundle controller on the runtimes' informer and a ConfigMap informer
// from NewConfigMapInformerFactory.
func NewController(kubeClient kubernetes.Interface, runtimes airlockinformers.AgentRuntimeInformer, configMaps coreinformers.ConfigMapInformer, source Source) (*Controller, error) {
	return newControllerWithClock(kubeClient, runtimes, configMaps, source, clock.RealClock{})
}

func newControllerWithClock(kubeClient kubernetes.Interface, runtimes airlockinformers.AgentRuntimeInformer, configMaps coreinformers.ConfigMapInformer, source Source, clk clock.WithTicker) (*Controller, error) {
	c := &Controller{
		kubeClient:       kubeClient,
		source:           source,
		runtimeLister:    runtimes.Lister(),
		runtimesSynced:   runtimes.Informer().HasSynced,
		configMapLister:  configMaps.Lister(),
		configMapsSynced: configMaps.Informer().HasSynced,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[cache.ObjectName](),
			workqueue.TypedRateLimitingQueueConfig[cache.ObjectName]{Name: ControllerName, Clock: clk}),
	}
	// A runtime's namespace is all that matters of it: adds and deletes only.
	if err := c.handlers.Add(runtimes.Informer(), cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueueNamespaceOf,
		DeleteFunc: c.enqueueNamespaceOf,
	}); err != nil {
		return nil, fmt.Errorf("adding the runtime event handler: %w", err)
	}
	// A ConfigMap changed or deleted by someone else is repaired; one that arrives after a
	// change of the bundle is brought up to date.
	if err := c.handlers.Add(configMaps.Informer(), cache.ResourceEventHandlerFuncs{
		AddFunc: c.enqueueNamespaceOf,
		UpdateFunc: func(old, cur any) {
			if old.(metav1.Object).GetResourceVersion() != cur.(metav1.Object).GetResourceVersion() {
				c.enqueueNamespaceOf(cur)
			}
		},
		DeleteFunc: c.enqueueNamespaceOf,
	}); err != nil {
		return nil, fmt.Errorf("adding the ConfigMap event handler: %w", err)
	}
	return c, nil
}

func (c *Controller) enqueueNamespaceOf(obj any) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	if o, ok := obj.(metav1.Object); ok {
		c.queue.Add(cache.ObjectName{Namespace: o.GetNamespace(), Name: ConfigMapName})
	}
}

// enqueueAll enqueues every namespace with a runtime or a ConfigMap: the bundle changed.
func (c *Controller) enqueueAll() {
	namespaces := sets.New[string]()
	runtimes, err := c.runtimeLister.List(labels.Everything())
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	for _, rt := range runtimes {
		namespaces.Insert(rt.Namespace)
	}
	cms, err := c.configMapLister.List(labels.Everything())
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	for _, cm := range cms {
		namespaces.Insert(cm.Namespace)
	}
	for ns := range namespaces {
		c.queue.Add(cache.ObjectName{Namespace: ns, Name: ConfigMapName})
	}
}

// Run runs the workers until ctx is done, and returns once they all have.
func (c *Controller) Run(ctx context.Context, n int) error {
	defer utilruntime.HandleCrashWithContext(ctx)
	defer c.handlers.RemoveAll()
	defer c.queue.ShutDown()
	logger := klog.FromContext(ctx)
	logger.Info("Starting controller", "controller", ControllerName, "workers", n)
	defer logger.Info("Shutting down controller", "controller", ControllerName)
	if !cache.WaitForNamedCacheSyncWithContext(ctx, c.runtimesSynced, c.configMapsSynced) {
		return fmt.Errorf("waiting for the informer caches to sync: %w", ctx.Err())
	}
	remove := c.source.OnBundleChange(c.enqueueAll)
	defer remove()
	c.enqueueAll()
	workers.Run(ctx, n, c.queue, "configMap", c.sync)
	return nil
}

// sync makes the namespace's ConfigMap hold the bundle while the namespace has a runtime, and
// deletes it once it has none.
func (c *Controller) sync(ctx context.Context, key cache.ObjectName) error {
	logger := klog.FromContext(ctx)
	ns := key.Namespace
	runtimes, err := c.runtimeLister.AgentRuntimes(ns).List(labels.Everything())
	if err != nil {
		return err
	}
	cm, err := c.configMapLister.ConfigMaps(ns).Get(ConfigMapName)
	if apierrors.IsNotFound(err) {
		cm = nil
	} else if err != nil {
		return err
	}
	configMaps := c.kubeClient.CoreV1().ConfigMaps(ns)

	if len(runtimes) == 0 {
		if cm == nil {
			return nil
		}
		err := configMaps.Delete(ctx, ConfigMapName, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &cm.UID}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("deleting ConfigMap %s/%s: %w", ns, ConfigMapName, err)
		}
		logger.V(2).Info("Deleted the CA bundle of a namespace without runtimes", "configMap", klog.KRef(ns, ConfigMapName))
		return nil
	}

	bundle := c.source.Bundle()
	if len(bundle) == 0 {
		return nil // the source calls enqueueAll once it has one
	}
	want := map[string]string{Key: string(bundle)}
	if cm == nil {
		_, err := configMaps.Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{
				Name:      ConfigMapName,
				Namespace: ns,
				Labels:    map[string]string{LabelBundle: "true", "app.kubernetes.io/name": "airlock"},
			},
			Data: want,
		}, metav1.CreateOptions{FieldManager: ControllerName})
		if apierrors.IsAlreadyExists(err) {
			// Not in the cache: ours, not seen yet (its add event syncs again), or someone
			// else's of that name, without the label, which is never overwritten.
			existing, err := configMaps.Get(ctx, ConfigMapName, metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("reading ConfigMap %s/%s: %w", ns, ConfigMapName, err)
			}
			if existing.Labels[LabelBundle] != "true" {
				logger.Info("Warning: a ConfigMap without the label "+LabelBundle+"=true has the CA bundle's name: the namespace's runtimes do not get the bundle until it is removed or labelled",
					"configMap", klog.KRef(ns, ConfigMapName), "runtime", klog.KObj(runtimes[0]))
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("creating ConfigMap %s/%s: %w", ns, ConfigMapName, err)
		}
		logger.V(2).Info("Published the CA bundle", "configMap", klog.KRef(ns, ConfigMapName))
		return nil
	}
	if len(cm.Data) == 1 && cm.Data[Key] == want[Key] && len(cm.BinaryData) == 0 {
		return nil
	}
	updated := cm.DeepCopy()
	updated.Data = want
	updated.BinaryData = nil
	if _, err := configMaps.Update(ctx, updated, metav1.UpdateOptions{FieldManager: ControllerName}); err != nil {
		return fmt.Errorf("updating ConfigMap %s/%s: %w", ns, ConfigMapName, err)
	}
	logger.V(2).Info("Updated the CA bundle", "configMap", klog.KRef(ns, ConfigMapName))
	return nil
}
