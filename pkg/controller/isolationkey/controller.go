// Package isolationkey is the isolation signing key controller: it keeps the Ed25519 keys with
// which the operator signs isolation statements for runtimes (pkg/attestation, issue 38) in the
// Secret airlock-isolation-signing-key of the operator's namespace. The key is made when the
// Secret is missing; Rotation after its making the next key is made and published, and signs
// Propagation later; a retired key's public key stays published for Propagation, and after that
// for as long as a claim's statement names it. The claim controller signs with the current key
// and the CA bundle distributor publishes the public keys (airlock-ca, isolation-keys.pem), both
// through Keys (keys.go). The private keys leave the Secret for no other place. plan.go decides;
// this file writes. docs/isolation.md, "The signing key".
package isolationkey

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
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
)

const (
	// ControllerName is the queue's name and the field manager of the controller's writes.
	ControllerName = "airlock-isolation-key-controller"
	// keyIDIndex indexes claims by the key ID of their isolation statement.
	keyIDIndex = "airlock.dev/isolation-key-id"
)

// Controller keeps the isolation signing keys.
type Controller struct {
	kubeClient kubernetes.Interface
	namespace  string
	policy     Policy

	secretLister  corelisters.SecretLister
	secretsSynced cache.InformerSynced
	claimIndexer  cache.Indexer
	claimsSynced  cache.InformerSynced
	handlers      handlers.Registrations

	queue  workqueue.TypedRateLimitingInterface[cache.ObjectName]
	clock  clock.Clock
	random io.Reader
}

// NewController returns the controller of the Secret SecretName of namespace, on an informer
// from NewSecretInformerFactory and the claims' informer (every claim: their statements' key IDs
// say which retired keys are still needed).
func NewController(kubeClient kubernetes.Interface, namespace string, secrets coreinformers.SecretInformer, claims airlockinformers.SandboxClaimInformer, policy Policy) (*Controller, error) {
	return newControllerWithClock(kubeClient, namespace, secrets, claims, policy, clock.RealClock{}, rand.Reader)
}

func newControllerWithClock(kubeClient kubernetes.Interface, namespace string, secrets coreinformers.SecretInformer, claims airlockinformers.SandboxClaimInformer, policy Policy, clk clock.WithTicker, random io.Reader) (*Controller, error) {
	if err := policy.Validate(); err != nil {
		return nil, err
	}
	if namespace == "" {
		return nil, fmt.Errorf("the isolation key controller needs the operator's namespace")
	}
	if err := addKeyIDIndex(claims.Informer()); err != nil {
		return nil, err
	}
	c := &Controller{
		kubeClient:    kubeClient,
		namespace:     namespace,
		policy:        policy,
		secretLister:  secrets.Lister(),
		secretsSynced: secrets.Informer().HasSynced,
		claimIndexer:  claims.Informer().GetIndexer(),
		claimsSynced:  claims.Informer().HasSynced,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[cache.ObjectName](),
			workqueue.TypedRateLimitingQueueConfig[cache.ObjectName]{Name: ControllerName, Clock: clk}),
		clock:  clk,
		random: random,
	}
	// Every update of the Secret counts (the informer does not resync: an update is a change).
	onSecret := func(obj any) {
		if isSecret(obj, namespace) {
			c.queue.Add(c.secretKey())
		}
	}
	if err := c.handlers.Add(secrets.Informer(), cache.ResourceEventHandlerFuncs{AddFunc: onSecret, UpdateFunc: func(_, cur any) { onSecret(cur) }, DeleteFunc: onSecret}); err != nil {
		return nil, fmt.Errorf("adding the Secret event handler: %w", err)
	}
	// A claim that stops naming a key (deleted, or signed anew) may let a retired key go.
	if err := c.handlers.Add(claims.Informer(), cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(old, cur any) {
			if id := keyIDOf(old); id != "" && id != keyIDOf(cur) {
				c.queue.Add(c.secretKey())
			}
		},
		DeleteFunc: func(obj any) {
			if keyIDOf(obj) != "" {
				c.queue.Add(c.secretKey())
			}
		},
	}); err != nil {
		return nil, fmt.Errorf("adding the claim event handler: %w", err)
	}
	return c, nil
}

// keyIDOf is the key ID of the claim's (or its tombstone's) isolation statement, "" for none.
func keyIDOf(obj any) string {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	claim, ok := obj.(*airlockv1alpha1.SandboxClaim)
	if !ok || claim.Status.Isolation == nil || claim.Status.Isolation.Attestation == nil {
		return ""
	}
	return claim.Status.Isolation.Attestation.KeyID
}

// addKeyIDIndex adds keyIDIndex to the claims informer unless it has it: the informer is shared,
// runs on every replica, and outlives a controller (a replica that leads again builds a new one).
func addKeyIDIndex(informer cache.SharedIndexInformer) error {
	if _, ok := informer.GetIndexer().GetIndexers()[keyIDIndex]; ok {
		return nil
	}
	if err := informer.AddIndexers(cache.Indexers{keyIDIndex: func(obj any) ([]string, error) {
		if id := keyIDOf(obj); id != "" {
			return []string{id}, nil
		}
		return nil, nil
	}}); err != nil {
		return fmt.Errorf("adding the claims' isolation key index: %w", err)
	}
	return nil
}

func (c *Controller) secretKey() cache.ObjectName {
	return cache.ObjectName{Namespace: c.namespace, Name: SecretName}
}

// inUse says whether a claim's statement names the key ID; when the index cannot say, it does
// (a key is kept rather than dropped).
func (c *Controller) inUse(keyID string) bool {
	claims, err := c.claimIndexer.ByIndex(keyIDIndex, keyID)
	return err != nil || len(claims) > 0
}

// Run runs the workers until ctx is done, and returns once they all have.
func (c *Controller) Run(ctx context.Context, n int) error {
	defer utilruntime.HandleCrashWithContext(ctx)
	defer c.handlers.RemoveAll()
	defer c.queue.ShutDown()
	logger := klog.FromContext(ctx)
	logger.Info("Starting controller", "controller", ControllerName, "workers", n, "secret", klog.KRef(c.namespace, SecretName))
	defer logger.Info("Shutting down controller", "controller", ControllerName)
	if !cache.WaitForNamedCacheSyncWithContext(ctx, c.secretsSynced, c.claimsSynced) {
		return fmt.Errorf("waiting for the informer caches to sync: %w", ctx.Err())
	}
	c.queue.Add(c.secretKey()) // a missing Secret has no event
	workers.RunRequeue(ctx, n, c.queue, "isolationKeys", c.sync)
	return nil
}

// sync makes the Secret's keys what plan says and returns when to look again. A Secret whose keys
// do not parse is an error, retried with backoff, and left as it is: it may hold the only copy of
// keys that statements still name, so only a person replaces it.
func (c *Controller) sync(ctx context.Context, key cache.ObjectName) (*time.Duration, error) {
	if key != c.secretKey() {
		return nil, nil
	}
	logger := klog.FromContext(ctx)
	now := c.clock.Now()
	cached, err := c.secretLister.Secrets(c.namespace).Get(SecretName)
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, err
	}
	var cur *document
	if cached != nil {
		if cur, err = decode(cached.Data[KeysKey]); err != nil {
			return nil, fmt.Errorf("Secret %s/%s: %w: no isolation statement is signed and no key rotates until a person repairs it, or deletes it to revoke every key", c.namespace, SecretName, err)
		}
	}
	p, err := plan(cur, c.policy, now, c.inUse, c.random)
	if err != nil {
		return nil, err
	}
	next := max(p.Next.Sub(now), time.Second)
	if !p.Changed {
		return &next, nil
	}
	b, err := p.doc.encode()
	if err != nil {
		return nil, err
	}
	secrets := c.kubeClient.CoreV1().Secrets(c.namespace)
	if cached == nil {
		_, err := secrets.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{
				Name:      SecretName,
				Namespace: c.namespace,
				Labels:    map[string]string{"app.kubernetes.io/name": "airlock", "app.kubernetes.io/component": "operator"},
			},
			Type: corev1.SecretTypeOpaque,
			Data: map[string][]byte{KeysKey: b},
		}, metav1.CreateOptions{FieldManager: ControllerName})
		if apierrors.IsAlreadyExists(err) {
			logger.V(2).Info("The isolation signing key was made first elsewhere: reading it", "secret", klog.KRef(c.namespace, SecretName))
			return nil, nil // not in the cache yet: its event syncs again
		}
		if err != nil {
			return nil, fmt.Errorf("creating Secret %s/%s: %w", c.namespace, SecretName, err)
		}
		logger.Info("Made the isolation signing key", "secret", klog.KRef(c.namespace, SecretName), "reasons", p.Reasons)
		return &next, nil
	}
	secret := cached.DeepCopy()
	secret.Data[KeysKey] = b
	if _, err := secrets.Update(ctx, secret, metav1.UpdateOptions{FieldManager: ControllerName}); apierrors.IsConflict(err) {
		logger.V(2).Info("The isolation signing keys changed meanwhile: reading them again", "secret", klog.KRef(c.namespace, SecretName))
		return nil, nil // its event syncs again
	} else if err != nil {
		return nil, fmt.Errorf("updating Secret %s/%s: %w", c.namespace, SecretName, err)
	}
	logger.Info("Updated the isolation signing keys", "secret", klog.KRef(c.namespace, SecretName), "reasons", p.Reasons)
	return &next, nil
}
