package recordwebhook

import (
	"bytes"
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	admissionlisters "k8s.io/client-go/listers/admissionregistration/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/airlock-dev/airlock/pkg/controller/workers"
	"github.com/airlock-dev/airlock/pkg/servingcert"
)

// ConfigurationName is the ValidatingWebhookConfiguration of the records webhook
// (manifests/components/records-webhook).
const ConfigurationName = "airlock-operator-records"

// NewConfigurationInformerFactory returns an informer factory that watches only the
// ValidatingWebhookConfiguration name (RBAC grants that name only).
func NewConfigurationInformerFactory(client kubernetes.Interface, name string) kubeinformers.SharedInformerFactory {
	return kubeinformers.NewSharedInformerFactoryWithOptions(client, 0,
		kubeinformers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
		}))
}

// BundlePublisher keeps the caBundle of every webhook of its ValidatingWebhookConfiguration equal
// to the bundle of the webhook's serving certificate (servingcert.Store): written when the
// bundle changes and put back when something else (an apply of the manifests) empties it.
type BundlePublisher struct {
	client kubernetes.Interface
	name   string
	store  *servingcert.Store
	lister admissionlisters.ValidatingWebhookConfigurationLister
	synced cache.InformerSynced
	queue  workqueue.TypedRateLimitingInterface[cache.ObjectName]
}

// NewBundlePublisher returns the publisher of store's bundle into the configuration name, on an
// informer of NewConfigurationInformerFactory.
func NewBundlePublisher(client kubernetes.Interface, name string, factory kubeinformers.SharedInformerFactory, store *servingcert.Store) (*BundlePublisher, error) {
	inf := factory.Admissionregistration().V1().ValidatingWebhookConfigurations()
	p := &BundlePublisher{
		client: client, name: name, store: store,
		lister: inf.Lister(), synced: inf.Informer().HasSynced,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[cache.ObjectName](),
			workqueue.TypedRateLimitingQueueConfig[cache.ObjectName]{Name: "airlock-records-webhook-bundle"}),
	}
	enqueue := func(any) { p.queue.Add(p.key()) }
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, UpdateFunc: func(_, cur any) { enqueue(cur) }, DeleteFunc: enqueue,
	}); err != nil {
		return nil, fmt.Errorf("adding the configuration's event handler: %w", err)
	}
	return p, nil
}

func (p *BundlePublisher) key() cache.ObjectName { return cache.ObjectName{Name: p.name} }

// Run publishes until ctx is done.
func (p *BundlePublisher) Run(ctx context.Context) error {
	defer utilruntime.HandleCrashWithContext(ctx)
	defer p.queue.ShutDown()
	remove := p.store.OnBundleChange(func() { p.queue.Add(p.key()) })
	defer remove()
	if !cache.WaitForNamedCacheSyncWithContext(ctx, p.synced) {
		return fmt.Errorf("waiting for the webhook configuration's cache: %w", ctx.Err())
	}
	p.queue.Add(p.key())
	workers.Run(ctx, 1, p.queue, "records webhook configuration", func(ctx context.Context, _ cache.ObjectName) error { return p.sync(ctx) })
	return nil
}

func (p *BundlePublisher) sync(ctx context.Context) error {
	bundle := p.store.Bundle()
	if len(bundle) == 0 {
		return nil // the store's first certificate enqueues
	}
	cfg, err := p.lister.Get(p.name)
	if apierrors.IsNotFound(err) {
		return nil // its creation enqueues
	}
	if err != nil {
		return err
	}
	next := cfg.DeepCopy()
	changed := false
	for i := range next.Webhooks {
		if !bytes.Equal(next.Webhooks[i].ClientConfig.CABundle, bundle) {
			next.Webhooks[i].ClientConfig.CABundle = bundle
			changed = true
		}
	}
	if !changed {
		return nil
	}
	if _, err := p.client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(ctx, next, metav1.UpdateOptions{FieldManager: "airlock-records-webhook"}); err != nil {
		return fmt.Errorf("updating the caBundle of %s: %w", p.name, err)
	}
	klog.FromContext(ctx).Info("Published the CA bundle of the records webhook", "configuration", p.name)
	return nil
}
