// Package cabundle is the CA bundle distributor: it publishes each CA bundle it is given in a
// ConfigMap of the bundle's name in every namespace that needs it, so that pods there can mount
// it. Two bundles are published (bundles.go): the Sandbox API's, airlock-ca, in every namespace
// that has an AgentRuntime (SandboxAPIBundle), and the egress gateway CA's
// (--egress-ca-bundle-configmap, with --manage-egress-ca) in every namespace with a claim frozen
// with that ConfigMap or a ToolRegistry whose warm members are of a class with egress
// (EgressBundle). For each, it repairs a changed or deleted ConfigMap,
// follows every change of the bundle (a CA rotation), and deletes the ConfigMap once the
// namespace no longer needs it. It sees and writes only ConfigMaps of a bundle's name that carry
// the bundle's label. Where a bundle comes from is its Source: the Sandbox API's serving
// certificate (pkg/servingcert), or the egress CA's Secret (pkg/controller/egressca, which issues
// and rotates that CA and writes no ConfigMap).
package cabundle

import (
	"context"
	"fmt"
	"maps"

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
)

// ControllerName is the queue's name and the field manager of the ConfigMap writes (of the
// bundles that name no other, Bundle.FieldManager).
const ControllerName = "airlock-ca-bundle-controller"

// Source is where a bundle comes from: the operator's serving certificate Store, the CA file of
// files mode, or the egress CA's Secret.
type Source interface {
	// Bundle returns the PEM bundle, nil while there is none.
	Bundle() []byte
	// OnBundleChange calls f (which only enqueues) when the bundle changes; remove stops that.
	OnBundleChange(f func()) (remove func())
}

// Bundle is one CA bundle the distributor publishes: the ConfigMap ConfigMapName, with the PEM
// bundle under Key and Label "true", in every namespace where an object of Audience is Needed.
type Bundle struct {
	// Name names the bundle in the log.
	Name string
	// ConfigMapName, Key and Label are the ConfigMap's name, its one key, and the label that
	// marks it the distributor's.
	ConfigMapName, Key, Label string
	// FieldManager is the field manager of the ConfigMap writes; "" is ControllerName.
	FieldManager string
	// Source is the bundle; SourceSynced, when set, is waited for before the first sync.
	Source       Source
	SourceSynced cache.InformerSynced
	// Extras are more keys of the same ConfigMap, each from a source of its own (the isolation
	// signing keys beside the Sandbox API's CA): published once they have a bundle, never
	// before the main one, and kept as published while their source has none.
	Extras []Extra
	// ConfigMaps lists and watches only the bundle's ConfigMaps (NewConfigMapInformerFactory of
	// ConfigMapName and Label).
	ConfigMaps coreinformers.ConfigMapInformer
	// Audiences are the kinds of object that make their namespace need the bundle: a namespace
	// needs it while one object of one audience does.
	Audiences []Audience
	// Dependencies are informers of the objects an audience's Needs reads beside the object
	// itself (the classes a registry's sandboxes name): a change of one looks at every
	// namespace again.
	Dependencies []cache.SharedIndexInformer
}

// Audience is an informer (with the namespace index) of objects that may make their namespace
// need a bundle; Needs says whether one does (nil: every one).
type Audience struct {
	Informer cache.SharedIndexInformer
	Needs    func(obj any) bool
}

func (a Audience) needs(obj any) bool { return a.Needs == nil || a.Needs(obj) }

// Extra is one more key of a bundle's ConfigMap and its source.
type Extra struct {
	Key    string
	Source Source
}

// bundle is a Bundle with its ConfigMap lister.
type bundle struct {
	Bundle
	configMapLister corelisters.ConfigMapLister
}

// NewConfigMapInformerFactory returns an informer factory that lists and watches, across the
// cluster, only the ConfigMaps named name that carry label: RBAC grants the operator list and
// watch of that name only (a metadata.name field selector is authorised against resourceNames).
func NewConfigMapInformerFactory(client kubernetes.Interface, name, label string) kubeinformers.SharedInformerFactory {
	return kubeinformers.NewSharedInformerFactoryWithOptions(client, 0,
		kubeinformers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
			o.LabelSelector = label + "=true"
		}))
}

// Controller keeps the CA bundle ConfigMaps. Its queue's keys are a namespace and a bundle's
// ConfigMap name.
type Controller struct {
	kubeClient kubernetes.Interface
	bundles    map[string]*bundle // by ConfigMap name
	synced     []cache.InformerSynced
	handlers   handlers.Registrations

	queue workqueue.TypedRateLimitingInterface[cache.ObjectName]
}

// NewController returns a CA bundle distributor of bundles (SandboxAPIBundle, EgressBundle),
// whose ConfigMap names must differ.
func NewController(kubeClient kubernetes.Interface, bundles ...Bundle) (*Controller, error) {
	return newControllerWithClock(kubeClient, clock.RealClock{}, bundles...)
}

func newControllerWithClock(kubeClient kubernetes.Interface, clk clock.WithTicker, bundles ...Bundle) (*Controller, error) {
	c := &Controller{
		kubeClient: kubeClient,
		bundles:    map[string]*bundle{},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[cache.ObjectName](),
			workqueue.TypedRateLimitingQueueConfig[cache.ObjectName]{Name: ControllerName, Clock: clk}),
	}
	for _, in := range bundles {
		if _, dup := c.bundles[in.ConfigMapName]; dup || in.ConfigMapName == "" {
			return nil, fmt.Errorf("two CA bundles in the ConfigMap %q, or one without a name", in.ConfigMapName)
		}
		b := &bundle{Bundle: in, configMapLister: in.ConfigMaps.Lister()}
		c.bundles[in.ConfigMapName] = b
		c.synced = append(c.synced, in.ConfigMaps.Informer().HasSynced)
		for _, a := range in.Audiences {
			c.synced = append(c.synced, a.Informer.HasSynced)
		}
		for _, d := range in.Dependencies {
			c.synced = append(c.synced, d.HasSynced)
		}
		if in.SourceSynced != nil {
			c.synced = append(c.synced, in.SourceSynced)
		}
		if err := c.addHandlers(b); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func (c *Controller) addHandlers(b *bundle) error {
	// An object of an audience matters when it comes to need the bundle or stops needing it.
	for _, a := range b.Audiences {
		if err := c.handlers.Add(a.Informer, cache.ResourceEventHandlerFuncs{
			AddFunc: func(obj any) {
				if a.needs(obj) {
					c.enqueueNamespaceOf(b, obj)
				}
			},
			UpdateFunc: func(old, cur any) {
				if a.needs(old) != a.needs(cur) {
					c.enqueueNamespaceOf(b, cur)
				}
			},
			DeleteFunc: func(obj any) {
				if a.needs(unwrap(obj)) {
					c.enqueueNamespaceOf(b, obj)
				}
			},
		}); err != nil {
			return fmt.Errorf("adding the event handler of the %s's audience: %w", b.Name, err)
		}
	}
	// What an audience's Needs reads changed: any namespace may need the bundle now, or not.
	for _, d := range b.Dependencies {
		if err := c.handlers.Add(d, cache.ResourceEventHandlerFuncs{
			AddFunc: func(any) { c.enqueueAll(b) },
			UpdateFunc: func(old, cur any) {
				if old.(metav1.Object).GetGeneration() != cur.(metav1.Object).GetGeneration() {
					c.enqueueAll(b)
				}
			},
			DeleteFunc: func(any) { c.enqueueAll(b) },
		}); err != nil {
			return fmt.Errorf("adding the event handler of the %s's dependencies: %w", b.Name, err)
		}
	}
	// A ConfigMap changed or deleted by someone else is repaired; one that arrives after a
	// change of the bundle is brought up to date.
	if err := c.handlers.Add(b.ConfigMaps.Informer(), cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { c.enqueueNamespaceOf(b, obj) },
		UpdateFunc: func(old, cur any) {
			if old.(metav1.Object).GetResourceVersion() != cur.(metav1.Object).GetResourceVersion() {
				c.enqueueNamespaceOf(b, cur)
			}
		},
		DeleteFunc: func(obj any) { c.enqueueNamespaceOf(b, obj) },
	}); err != nil {
		return fmt.Errorf("adding the ConfigMap event handler of the %s: %w", b.Name, err)
	}
	return nil
}

func unwrap(obj any) any {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return tombstone.Obj
	}
	return obj
}

func (c *Controller) enqueueNamespaceOf(b *bundle, obj any) {
	if o, ok := unwrap(obj).(metav1.Object); ok {
		c.queue.Add(cache.ObjectName{Namespace: o.GetNamespace(), Name: b.ConfigMapName})
	}
}

// enqueueAll enqueues every namespace that needs the bundle or has its ConfigMap: the bundle
// changed.
func (c *Controller) enqueueAll(b *bundle) {
	namespaces := sets.New[string]()
	for _, a := range b.Audiences {
		for _, obj := range a.Informer.GetStore().List() {
			if o, ok := obj.(metav1.Object); ok && a.needs(obj) {
				namespaces.Insert(o.GetNamespace())
			}
		}
	}
	cms, err := b.configMapLister.List(labels.Everything())
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	for _, cm := range cms {
		namespaces.Insert(cm.Namespace)
	}
	for ns := range namespaces {
		c.queue.Add(cache.ObjectName{Namespace: ns, Name: b.ConfigMapName})
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
	if !cache.WaitForNamedCacheSyncWithContext(ctx, c.synced...) {
		return fmt.Errorf("waiting for the informer caches to sync: %w", ctx.Err())
	}
	for _, b := range c.bundles {
		remove := b.Source.OnBundleChange(func() { c.enqueueAll(b) })
		defer remove()
		for _, e := range b.Extras {
			remove := e.Source.OnBundleChange(func() { c.enqueueAll(b) })
			defer remove()
		}
		c.enqueueAll(b)
	}
	workers.Run(ctx, n, c.queue, "configMap", c.sync)
	return nil
}

// sync makes the namespace's ConfigMap of the key's bundle hold the bundle while the namespace
// needs it, and deletes it once it does not.
func (c *Controller) sync(ctx context.Context, key cache.ObjectName) error {
	b := c.bundles[key.Name]
	if b == nil {
		return nil
	}
	ns := key.Namespace
	needed, err := c.needed(b, ns)
	if err != nil {
		return err
	}
	cm, err := b.configMapLister.ConfigMaps(ns).Get(b.ConfigMapName)
	if apierrors.IsNotFound(err) {
		cm = nil
	} else if err != nil {
		return err
	}
	if !needed {
		return c.deleteBundle(ctx, b, cm)
	}
	pem := b.Source.Bundle()
	if len(pem) == 0 {
		return nil // the source calls enqueueAll once it has one
	}
	want := map[string]string{b.Key: string(pem)}
	for _, e := range b.Extras {
		if extra := e.Source.Bundle(); len(extra) > 0 {
			want[e.Key] = string(extra)
		} else if cm != nil && cm.Data[e.Key] != "" {
			// No bundle now (not read yet, or its Secret does not parse): what runtimes were
			// given stays, so that the statements it verifies still do.
			want[e.Key] = cm.Data[e.Key]
		}
	}
	if cm == nil {
		return c.createBundle(ctx, b, ns, want)
	}
	if maps.Equal(cm.Data, want) && len(cm.BinaryData) == 0 {
		return nil
	}
	updated := cm.DeepCopy()
	updated.Data = want
	updated.BinaryData = nil
	if _, err := c.kubeClient.CoreV1().ConfigMaps(ns).Update(ctx, updated, metav1.UpdateOptions{FieldManager: b.fieldManager()}); err != nil {
		return fmt.Errorf("updating ConfigMap %s/%s: %w", ns, b.ConfigMapName, err)
	}
	klog.FromContext(ctx).V(2).Info("Updated a CA bundle", "bundle", b.Name, "configMap", klog.KRef(ns, b.ConfigMapName))
	return nil
}

// needed says whether an object of the namespace needs the bundle.
func (c *Controller) needed(b *bundle, ns string) (bool, error) {
	for _, a := range b.Audiences {
		objs, err := a.Informer.GetIndexer().ByIndex(cache.NamespaceIndex, ns)
		if err != nil {
			return false, err
		}
		for _, obj := range objs {
			if a.needs(obj) {
				return true, nil
			}
		}
	}
	return false, nil
}

func (b *bundle) fieldManager() string {
	if b.FieldManager != "" {
		return b.FieldManager
	}
	return ControllerName
}

func (c *Controller) deleteBundle(ctx context.Context, b *bundle, cm *corev1.ConfigMap) error {
	if cm == nil {
		return nil
	}
	err := c.kubeClient.CoreV1().ConfigMaps(cm.Namespace).Delete(ctx, cm.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &cm.UID}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("deleting ConfigMap %s/%s: %w", cm.Namespace, cm.Name, err)
	}
	klog.FromContext(ctx).V(2).Info("Deleted the CA bundle of a namespace that needs it no more", "bundle", b.Name, "configMap", klog.KObj(cm))
	return nil
}

func (c *Controller) createBundle(ctx context.Context, b *bundle, ns string, data map[string]string) error {
	configMaps := c.kubeClient.CoreV1().ConfigMaps(ns)
	_, err := configMaps.Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name:      b.ConfigMapName,
			Namespace: ns,
			Labels:    map[string]string{b.Label: "true", "app.kubernetes.io/name": "airlock"},
		},
		Data: data,
	}, metav1.CreateOptions{FieldManager: b.fieldManager()})
	if apierrors.IsAlreadyExists(err) {
		// Not in the cache: ours, not seen yet (its add event syncs again), or someone else's of
		// that name, without the label, which is never overwritten.
		existing, err := configMaps.Get(ctx, b.ConfigMapName, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("reading ConfigMap %s/%s: %w", ns, b.ConfigMapName, err)
		}
		if existing.Labels[b.Label] != "true" {
			klog.FromContext(ctx).Info("Warning: a ConfigMap without the bundle's label has the CA bundle's name: it is left as it is, and the namespace's pods do not get the bundle until it is removed or labelled",
				"bundle", b.Name, "configMap", klog.KRef(ns, b.ConfigMapName), "label", b.Label+"=true")
		}
		return nil
	}
	if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
		// Nothing new may be created in it; its deletion ends the work.
		klog.FromContext(ctx).V(2).Info("The namespace is being deleted: the CA bundle is not published in it", "bundle", b.Name, "namespace", ns)
		return nil
	}
	if err != nil {
		return fmt.Errorf("creating ConfigMap %s/%s: %w", ns, b.ConfigMapName, err)
	}
	klog.FromContext(ctx).V(2).Info("Published a CA bundle", "bundle", b.Name, "configMap", klog.KRef(ns, b.ConfigMapName))
	return nil
}
