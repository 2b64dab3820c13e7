package claim

// The fence (expectations.go): when a term starts, the leader's caches were filled from the API
// server's watch cache, which may lag what the previous leader wrote a moment before it lost the
// lease. Before the first admission pass, the claims are listed once from the API server (a
// quorum read) and the cache is expected to catch up with that list: each listed claim at its
// listed resourceVersion or later, and each cached claim the list lacks, if the cache had it
// before the list was taken (its resourceVersion is older than the list's), gone: a claim created
// since is simply newer than the list. Namespaces are decided as soon as their claims have caught
// up.

import (
	"context"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// raiseFence lists the claims once per term (the controller is built per term); an error is
// retried by the admission queue's backoff.
func (c *Controller) raiseFence(ctx context.Context) error {
	if c.fenced.Load() {
		return nil
	}
	c.fenceMu.Lock()
	defer c.fenceMu.Unlock()
	if c.fenced.Load() {
		return nil
	}
	// A listed claim whose deletion the cache sees before its expectation is set is not waited
	// for (expectations.go, fenceDeleted).
	c.expectations.beginFence()
	defer c.expectations.endFence()
	list, err := c.claims.List(ctx, metav1.NamespaceAll)
	if err != nil {
		return err
	}
	listRV, listRVErr := strconv.ParseUint(list.ResourceVersion, 10, 64)
	seen := make(map[cache.ObjectName]bool, len(list.Items))
	for i := range list.Items {
		claim := &list.Items[i]
		seen[cache.MetaObjectToName(claim)] = true
		rv, err := strconv.ParseUint(claim.ResourceVersion, 10, 64)
		if err != nil {
			continue // not an etcd revision: nothing to compare with
		}
		c.expectations.expectAtLeast(claim.Namespace, claim.Name, claim.UID, rv)
	}
	cached, err := c.claimLister.List(labels.Everything())
	if err != nil {
		return err
	}
	for _, claim := range cached {
		if seen[cache.MetaObjectToName(claim)] || listRVErr != nil {
			continue
		}
		if rv, err := strconv.ParseUint(claim.ResourceVersion, 10, 64); err == nil && rv <= listRV {
			c.expectations.expectGone(claim.Namespace, claim.Name) // deleted before the list
		}
	}
	klog.FromContext(ctx).V(2).Info("Admission fence raised", "claims", len(list.Items), "resourceVersion", list.ResourceVersion)
	c.fenced.Store(true)
	return nil
}
