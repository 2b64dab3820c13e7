package egress

import (
	"context"
	"crypto/subtle"
	"fmt"
	"net/netip"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	kubeinformers "k8s.io/client-go/informers"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/claimtoken"
	"github.com/airlock-dev/airlock/pkg/egress/policy"
	airlockclientset "github.com/airlock-dev/airlock/pkg/generated/clientset/versioned"
	airlockinformersfactory "github.com/airlock-dev/airlock/pkg/generated/informers/externalversions"
	airlockinformers "github.com/airlock-dev/airlock/pkg/generated/informers/externalversions/airlock/v1alpha1"
	airlocklisters "github.com/airlock-dev/airlock/pkg/generated/listers/airlock/v1alpha1"
)

// ClusterClaims is the ClaimLookup of a gateway in a cluster: it reads SandboxClaims, sandbox
// pods and the proxy key (the Secret claimtoken.ProxySecretName, which the operator derives from
// its token key: never the token key itself, from which sandboxd's bearer tokens derive) from
// informers' caches (no API call per request). A request
// is some claim's when its credential's username names a claim that is Bound and not being
// deleted, its password is the proxy credential derived from that claim's UID
// (claimtoken.DeriveProxy of the proxy key: a claim re-created under the same name has another one), and its source
// is the address of a running pod of that claim (labelled with its UID, in its namespace, not
// being deleted). A warm member's credential (username <namespace>.~<member>) is its adopting
// claim's, and no one's before the adoption (lookupMember). The policy is the claim's frozen
// egress (policy.FromRecord). Everything is refused until the caches have synced and the key is
// known.
type ClusterClaims struct {
	claims      airlocklisters.SandboxClaimLister
	pods        cache.Indexer
	secrets     corelisters.SecretLister
	keyNS       string
	hasSyncedFn []cache.InformerSynced

	mu       sync.Mutex
	policies map[types.UID]compiledRecord
	onDelete func(types.UID)
}

// compiledRecord is a claim's compiled policy and the record it was compiled from.
type compiledRecord struct {
	record *airlockv1alpha1.FrozenEgress
	policy *policy.Compiled
	err    error
}

// podsByClaimUID indexes sandbox pods by their claim's UID label.
const podsByClaimUID = "airlock.dev/claim-uid"

// SandboxPodSelector selects the pods the gateway caches: those of a claim (labelled with its UID).
const SandboxPodSelector = airlockv1alpha1.LabelClaimUID

// NewClusterClaims returns the lookup over claims, pods (an informer of pods labelled with a
// claim's UID, SandboxPodSelector) and secrets (an informer of keyNamespace holding at least the
// proxy key Secret, claimtoken.ProxySecretName). Handlers and indexers are added here: call it before the
// informers start.
func NewClusterClaims(claims airlockinformers.SandboxClaimInformer, pods coreinformers.PodInformer, secrets coreinformers.SecretInformer, keyNamespace string) (*ClusterClaims, error) {
	podInformer := pods.Informer()
	if err := podInformer.AddIndexers(cache.Indexers{podsByClaimUID: indexByClaimUID}); err != nil {
		return nil, fmt.Errorf("indexing pods: %w", err)
	}
	if err := podInformer.SetTransform(stripPod); err != nil {
		return nil, fmt.Errorf("stripping pods: %w", err)
	}
	if err := claims.Informer().SetTransform(stripClaim); err != nil {
		return nil, fmt.Errorf("stripping claims: %w", err)
	}
	c := &ClusterClaims{
		claims:   claims.Lister(),
		pods:     podInformer.GetIndexer(),
		secrets:  secrets.Lister(),
		keyNS:    keyNamespace,
		policies: map[types.UID]compiledRecord{},
		hasSyncedFn: []cache.InformerSynced{
			claims.Informer().HasSynced, podInformer.HasSynced, secrets.Informer().HasSynced,
		},
	}
	if _, err := claims.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: c.forget}); err != nil {
		return nil, fmt.Errorf("watching claims: %w", err)
	}
	return c, nil
}

func indexByClaimUID(obj any) ([]string, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok || pod.Labels[airlockv1alpha1.LabelClaimUID] == "" {
		return nil, nil
	}
	return []string{pod.Labels[airlockv1alpha1.LabelClaimUID]}, nil
}

// stripPod keeps of a pod only what the lookup reads, so that caching every sandbox pod costs
// little memory.
func stripPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID, ResourceVersion: pod.ResourceVersion,
			DeletionTimestamp: pod.DeletionTimestamp,
			Labels: map[string]string{
				airlockv1alpha1.LabelClaimUID: pod.Labels[airlockv1alpha1.LabelClaimUID],
				airlockv1alpha1.LabelClaim:    pod.Labels[airlockv1alpha1.LabelClaim],
			},
		},
		Status: corev1.PodStatus{Phase: pod.Status.Phase, PodIP: pod.Status.PodIP, PodIPs: pod.Status.PodIPs},
	}, nil
}

// stripClaim keeps of a claim only what the lookup reads: its identity, runtime, phase, frozen
// egress and the warm member it adopted.
func stripClaim(obj any) (any, error) {
	claim, ok := obj.(*airlockv1alpha1.SandboxClaim)
	if !ok {
		return obj, nil
	}
	out := &airlockv1alpha1.SandboxClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name: claim.Name, Namespace: claim.Namespace, UID: claim.UID, ResourceVersion: claim.ResourceVersion,
			DeletionTimestamp: claim.DeletionTimestamp,
		},
		Spec:   airlockv1alpha1.SandboxClaimSpec{RuntimeName: claim.Spec.RuntimeName},
		Status: airlockv1alpha1.SandboxClaimStatus{Phase: claim.Status.Phase},
	}
	if f := claim.Status.Frozen; f != nil {
		out.Status.Frozen = &airlockv1alpha1.FrozenSandbox{Egress: f.Egress}
	}
	if w := claim.Status.Warm; w != nil {
		out.Status.Warm = &airlockv1alpha1.WarmAdoption{Member: w.Member}
	}
	return out, nil
}

// forget drops a deleted claim's compiled policy.
func (c *ClusterClaims) forget(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if claim, ok := obj.(*airlockv1alpha1.SandboxClaim); ok {
		c.mu.Lock()
		delete(c.policies, claim.UID)
		onDelete := c.onDelete
		c.mu.Unlock()
		if onDelete != nil {
			onDelete(claim.UID)
		}
	}
}

// OnDelete has f told of each claim deleted (by UID): the decision log forgets its decisions
// (DecisionLog.Forget).
func (c *ClusterClaims) OnDelete(f func(types.UID)) {
	c.mu.Lock()
	c.onDelete = f
	c.mu.Unlock()
}

// ReaderToken is the token of the decisions reader (claimtoken.DecisionsReaderToken of the
// proxy key in the cache), or an error while the key is not known.
func (c *ClusterClaims) ReaderToken() (string, error) {
	key, err := c.key()
	if err != nil {
		return "", err
	}
	return claimtoken.DecisionsReaderToken(key)
}

// HasSynced reports whether the caches have synced and the key is known.
func (c *ClusterClaims) HasSynced() bool {
	for _, synced := range c.hasSyncedFn {
		if !synced() {
			return false
		}
	}
	_, err := c.key()
	return err == nil
}

// key is the proxy key, from the cache.
func (c *ClusterClaims) key() ([]byte, error) {
	secret, err := c.secrets.Secrets(c.keyNS).Get(claimtoken.ProxySecretName)
	if err != nil {
		return nil, err
	}
	key := secret.Data[claimtoken.KeyField]
	if len(key) < claimtoken.KeyBytes {
		return nil, fmt.Errorf("the Secret %s/%s has no key of %d bytes", c.keyNS, claimtoken.ProxySecretName, claimtoken.KeyBytes)
	}
	return key, nil
}

func (c *ClusterClaims) Lookup(_ context.Context, cred Credential, source netip.Addr) (Identity, error) {
	if !c.HasSynced() {
		return Identity{}, ErrNotSynced
	}
	key, err := c.key()
	if err != nil {
		return Identity{}, ErrNotSynced
	}
	namespace, name, ok := strings.Cut(cred.Username, ".")
	if !ok || namespace == "" || name == "" {
		return Identity{}, ErrBadCredential
	}
	if member, ok := strings.CutPrefix(name, memberMarker); ok {
		return c.lookupMember(key, cred, namespace, member, source)
	}
	claim, err := c.claims.SandboxClaims(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		return Identity{}, ErrBadCredential
	}
	if err != nil {
		return Identity{}, fmt.Errorf("reading claim %s/%s from the cache: %w", namespace, name, err)
	}
	want, err := claimtoken.DeriveProxy(key, claim.UID, claim.Namespace, claim.Name)
	if err != nil {
		return Identity{}, fmt.Errorf("deriving the proxy credential: %w", err)
	}
	if subtle.ConstantTimeCompare([]byte(cred.Password), []byte(want)) != 1 {
		return Identity{}, ErrBadCredential
	}
	if claim.DeletionTimestamp != nil || claim.Status.Phase != airlockv1alpha1.ClaimBound {
		return Identity{}, ErrBadCredential // the credential of a claim that is not live and Bound
	}
	if !c.fromClaimPod(claim, source) {
		return Identity{}, ErrWrongSource
	}
	return c.identity(claim)
}

// identity is the claim's identity with its compiled frozen egress.
func (c *ClusterClaims) identity(claim *airlockv1alpha1.SandboxClaim) (Identity, error) {
	id := Identity{Namespace: claim.Namespace, Claim: claim.Name, ClaimUID: claim.UID, Runtime: claim.Spec.RuntimeName}
	var err error
	id.Policy, err = c.policy(claim)
	if err != nil {
		return id, fmt.Errorf("%w: %v", ErrPolicyInvalid, err)
	}
	return id, nil
}

// memberMarker begins the name part of a warm member's username, <namespace>.~<member>
// (sandboxpod.MemberProxyUsername; no claim's name holds it).
const memberMarker = "~"

// lookupMember resolves a warm member's credential (docs/egress.md, "Warm members of a class
// with egress") to the claim that adopted the member, or refuses. The member pod is found by
// name in the pod cache, which holds only pods labelled with a claim's UID: an idle member is
// not there, so before its adoption every request is bad_credential. The password must be
// claimtoken.DeriveMemberProxy of the proxy key and that pod (its UID: a pod created again
// under the name has another credential). The claim its labels name must be the one of that
// UID, live and Bound, and its status (which only the operator writes) must name this pod as
// its adopted member: labels on a pod alone (which whoever may patch pods in the namespace can
// write) never make it a claim's. Then the source must be that pod's own address, the pod
// running and not being deleted (wrong_source otherwise). The policy is the claim's frozen
// record, as a cold claim's.
func (c *ClusterClaims) lookupMember(key []byte, cred Credential, namespace, member string, source netip.Addr) (Identity, error) {
	if member == "" {
		return Identity{}, ErrBadCredential
	}
	obj, exists, err := c.pods.GetByKey(namespace + "/" + member)
	if err != nil {
		return Identity{}, fmt.Errorf("reading pod %s/%s from the cache: %w", namespace, member, err)
	}
	pod, ok := obj.(*corev1.Pod)
	if !exists || !ok || pod.UID == "" {
		return Identity{}, ErrBadCredential // not adopted (not in the cache), or no such pod
	}
	want, err := claimtoken.DeriveMemberProxy(key, pod.UID, namespace, member)
	if err != nil {
		return Identity{}, fmt.Errorf("deriving the member proxy credential: %w", err)
	}
	if subtle.ConstantTimeCompare([]byte(cred.Password), []byte(want)) != 1 {
		return Identity{}, ErrBadCredential
	}
	claimName, claimUID := pod.Labels[airlockv1alpha1.LabelClaim], pod.Labels[airlockv1alpha1.LabelClaimUID]
	if claimName == "" || claimUID == "" {
		return Identity{}, ErrBadCredential
	}
	claim, err := c.claims.SandboxClaims(namespace).Get(claimName)
	if apierrors.IsNotFound(err) {
		return Identity{}, ErrBadCredential // its claim is gone
	}
	if err != nil {
		return Identity{}, fmt.Errorf("reading claim %s/%s from the cache: %w", namespace, claimName, err)
	}
	if string(claim.UID) != claimUID || claim.DeletionTimestamp != nil || claim.Status.Phase != airlockv1alpha1.ClaimBound ||
		claim.Status.Warm == nil || claim.Status.Warm.Member != member {
		return Identity{}, ErrBadCredential // not adopted by a live, Bound claim
	}
	if pod.DeletionTimestamp != nil || pod.Status.Phase != corev1.PodRunning || !hasAddress(pod, source) {
		return Identity{}, ErrWrongSource
	}
	return c.identity(claim)
}

// fromClaimPod reports whether source is the address of a running pod of the claim: labelled with
// its UID (a pod of an earlier claim of the same name has another), in its namespace, not being
// deleted.
func (c *ClusterClaims) fromClaimPod(claim *airlockv1alpha1.SandboxClaim, source netip.Addr) bool {
	objs, err := c.pods.ByIndex(podsByClaimUID, string(claim.UID))
	if err != nil {
		return false
	}
	for _, obj := range objs {
		pod, ok := obj.(*corev1.Pod)
		if !ok || pod.Namespace != claim.Namespace || pod.DeletionTimestamp != nil || pod.Status.Phase != corev1.PodRunning {
			continue
		}
		if hasAddress(pod, source) {
			return true
		}
	}
	return false
}

// hasAddress reports whether source is one of the pod's addresses.
func hasAddress(pod *corev1.Pod, source netip.Addr) bool {
	source = source.Unmap()
	ips := pod.Status.PodIPs
	if len(ips) == 0 && pod.Status.PodIP != "" {
		ips = []corev1.PodIP{{IP: pod.Status.PodIP}}
	}
	for _, ip := range ips {
		if a, err := netip.ParseAddr(ip.IP); err == nil && a.Unmap() == source {
			return true
		}
	}
	return false
}

// policy is the claim's compiled frozen egress, compiled once per claim and record. A claim
// without a record or without egress allows nothing.
func (c *ClusterClaims) policy(claim *airlockv1alpha1.SandboxClaim) (*policy.Compiled, error) {
	var record *airlockv1alpha1.FrozenEgress
	if claim.Status.Frozen != nil {
		record = claim.Status.Frozen.Egress
	}
	c.mu.Lock()
	cached, ok := c.policies[claim.UID]
	c.mu.Unlock()
	if ok && apiequality.Semantic.DeepEqual(cached.record, record) {
		return cached.policy, cached.err
	}
	compiled, err := policy.Compile(policy.FromRecord(record))
	c.mu.Lock()
	c.policies[claim.UID] = compiledRecord{record: record.DeepCopy(), policy: compiled, err: err}
	c.mu.Unlock()
	return compiled, err
}

// ClusterInformers are the informers a ClusterClaims reads: every SandboxClaim, the pods
// labelled with a claim's UID, and the one proxy key Secret of the key's namespace (a field
// selector on its name: the gateway needs no read of any other Secret, the operator's token key
// least of all).
type ClusterInformers struct {
	kube, secrets kubeinformers.SharedInformerFactory
	airlock       airlockinformersfactory.SharedInformerFactory
}

// NewClusterLookup returns a ClusterClaims over new informers of the cluster kube and air reach;
// start them with Start, and stop them with Shutdown once the gateway has stopped.
func NewClusterLookup(kube kubernetes.Interface, air airlockclientset.Interface, keyNamespace string) (*ClusterClaims, *ClusterInformers, error) {
	inf := &ClusterInformers{
		kube: kubeinformers.NewSharedInformerFactoryWithOptions(kube, 0, kubeinformers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = SandboxPodSelector
		})),
		secrets: kubeinformers.NewSharedInformerFactoryWithOptions(kube, 0, kubeinformers.WithNamespace(keyNamespace),
			kubeinformers.WithTweakListOptions(func(o *metav1.ListOptions) {
				o.FieldSelector = fields.OneTermEqualSelector("metadata.name", claimtoken.ProxySecretName).String()
			})),
		airlock: airlockinformersfactory.NewSharedInformerFactory(air, 0),
	}
	c, err := NewClusterClaims(inf.airlock.Airlock().V1alpha1().SandboxClaims(), inf.kube.Core().V1().Pods(), inf.secrets.Core().V1().Secrets(), keyNamespace)
	if err != nil {
		return nil, nil, err
	}
	return c, inf, nil
}

// Start starts the informers until stop is closed.
func (i *ClusterInformers) Start(stop <-chan struct{}) {
	i.kube.Start(stop)
	i.secrets.Start(stop)
	i.airlock.Start(stop)
}

// Shutdown waits for the informers' goroutines to end (after stop was closed).
func (i *ClusterInformers) Shutdown() {
	i.kube.Shutdown()
	i.secrets.Shutdown()
	i.airlock.Shutdown()
}
