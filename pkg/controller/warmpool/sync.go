package warmpool

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/controller/objectcontrol"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
	"github.com/airlock-dev/airlock/pkg/warmsize"
)

// pool is one registry sandbox's warm pool, as one sync sees it.
type pool struct {
	entry *airlockv1alpha1.RegistrySandbox
	// wanted is the pool's target: members are created up to it. keep (at least wanted) is how
	// many idle members it keeps: more are deleted. Both are warm for a static pool; with a
	// warmPolicy, keep is the largest target of the last 30 s (warmsize.Held), and
	// sizing says how they were computed.
	wanted, keep int32
	sizing       *warmsize.Sizing
	record       *airlockv1alpha1.FrozenSandbox // nil when the pool cannot be built
	key          string
	// message says why members are missing (the class is gone, a write is refused, ...).
	message string

	ready, starting []*corev1.Pod
	// resuming counts the pool's resume members (resume.go), Ready or starting: apart from
	// ready, starting and wanted.
	resuming int32
	// policyReady says the pool's policy is in the cache as the record wants it; policyCreated
	// that this sync created it: members may be created after either.
	policyReady, policyCreated bool
	// recordOnStatus says that the registry's status, as the cache shows it, names key and
	// record for the pool (status.warm[].key and .record): the admission policy holds each member
	// to them, so members are created only after (writeStatus writes them, and the status's
	// event brings the registry back).
	recordOnStatus bool
	// requeue is when to look at the pool again for its members' evidence (0: on an event).
	requeue time.Duration
}

// sync brings the registry's pools to their warm counts and writes its status. It returns
// when to look again (a refill the rate limiter holds back, a status write held back).
func (c *Controller) sync(ctx context.Context, key cache.ObjectName) (*time.Duration, error) {
	reg, err := c.registryList.ToolRegistries(key.Namespace).Get(key.Name)
	if apierrors.IsNotFound(err) {
		c.lastStatus.Delete(key)
		c.demand.forgetRegistry(key)
		delete(c.demandRates, key)
		c.setRefillLimit()
		return nil, nil // garbage collection removes its idle members and its policies
	}
	if err != nil {
		return nil, err
	}
	if reg.DeletionTimestamp != nil {
		return nil, nil
	}
	members, err := c.podLister.Pods(reg.Namespace).List(labels.SelectorFromSet(labels.Set{airlockv1alpha1.LabelWarmRegistry: reg.Name}))
	if err != nil {
		return nil, err
	}
	idle, resuming, inUse := sortMembers(reg, members)
	onRecord := recordsOf(members)

	var (
		errs     []error
		requeue  *time.Duration
		pools    []*pool
		runtimes []types.UID // of the registry, listed once for the pools with a warmPolicy
		listed   bool
		sized    = map[string]bool{}
	)
	wait := func(d time.Duration) {
		if d > 0 && (requeue == nil || d < *requeue) {
			requeue = ptr.To(d)
		}
	}
	for i := range reg.Spec.Sandboxes {
		p := c.poolOf(reg, &reg.Spec.Sandboxes[i])
		pools = append(pools, p)
		if p.entry.WarmPolicy != nil {
			if !listed {
				if runtimes, err = c.runtimesOf(reg); err != nil {
					return nil, err
				}
				listed = true
			}
			wait(c.sizePool(reg, p, runtimes))
			sized[p.entry.Name] = true
			c.refillLimit(key, pools) // before this pool's refill: the pools sized so far
		}
		if p.key != "" {
			inUse[p.key] = true
		}
		if err := c.syncPool(ctx, reg, p, idle[p.entry.Name]); err != nil {
			errs = append(errs, err)
			p.message = err.Error()
		}
		wait(p.requeue)
		delete(idle, p.entry.Name)
		if missing := int(p.wanted) - len(p.ready) - len(p.starting) - c.created.pending(reg.Namespace, p.key); p.record != nil && missing > 0 {
			wait(c.refill(ctx, reg, p, missing))
		}
		// After the pool's own refill: a new session waits for a member as much as a resume.
		resumeWait, err := c.syncResume(ctx, reg, p, resuming[p.entry.Name], onRecord)
		if err != nil {
			errs = append(errs, err)
			p.message = err.Error()
		}
		wait(resumeWait)
		delete(resuming, p.entry.Name)
	}
	c.refillLimit(key, pools) // a registry with no pool following demand any more weighs nothing
	c.demand.forget(c.clock.Now(), reg, sized)
	errs = append(errs, c.deleteRemoved(ctx, reg, idle, resuming)...)
	errs = append(errs, c.collectPolicies(ctx, reg, inUse))
	statusWait, err := c.writeStatus(ctx, reg, pools)
	errs = append(errs, err)
	wait(statusWait)
	return requeue, errors.Join(errs...)
}

// recordsOf returns the records (by name) the registry's pods wait on or work in, idle or
// adopted, in any state: none gets another member while one is there (one pod on a workspace).
func recordsOf(members []*corev1.Pod) map[string]bool {
	onRecord := map[string]bool{}
	for _, pod := range members {
		if r := pod.Labels[airlockv1alpha1.LabelResumes]; r != "" {
			onRecord[r] = true
		}
	}
	return onRecord
}

// deleteRemoved deletes the idle members, resume members too, of entries removed from the
// registry (by entry: what the sync's pools left): they serve nobody.
func (c *Controller) deleteRemoved(ctx context.Context, reg *airlockv1alpha1.ToolRegistry, byEntries ...map[string][]*corev1.Pod) []error {
	var errs []error
	for _, byEntry := range byEntries {
		for entry, pods := range byEntry {
			klog.FromContext(ctx).V(2).Info("Deleting the warm members of a sandbox the registry no longer has", "registry", klog.KObj(reg), "sandbox", entry, "members", len(pods))
			for _, pod := range pods {
				if pod.DeletionTimestamp == nil {
					errs = append(errs, c.deleteMember(ctx, pod))
				}
			}
		}
	}
	return errs
}

// sortMembers returns the registry's idle members by entry, its idle resume members by entry
// (resume.go), and the pool keys of every member, idle or adopted.
func sortMembers(reg *airlockv1alpha1.ToolRegistry, members []*corev1.Pod) (idle, resuming map[string][]*corev1.Pod, inUse map[string]bool) {
	idle, resuming, inUse = map[string][]*corev1.Pod{}, map[string][]*corev1.Pod{}, map[string]bool{}
	for _, pod := range members {
		inUse[pod.Labels[airlockv1alpha1.LabelWarmPool]] = true
		e := pod.Labels[airlockv1alpha1.LabelSandbox]
		switch {
		case isResumeOf(reg, pod):
			resuming[e] = append(resuming[e], pod)
		case metav1.IsControlledBy(pod, reg) && pod.Labels[airlockv1alpha1.LabelClaim] == "":
			idle[e] = append(idle[e], pod)
		}
	}
	return idle, resuming, inUse
}

// poolOf returns the pool of an entry: what its members are built from now, or why none can be.
// A static pool's target is its warm count; one with a warmPolicy is sized by the sync
// (sizePool).
func (c *Controller) poolOf(reg *airlockv1alpha1.ToolRegistry, entry *airlockv1alpha1.RegistrySandbox) *pool {
	p := &pool{entry: entry}
	if !sandboxpod.WarmWanted(entry) {
		return p
	}
	if entry.WarmPolicy == nil {
		p.wanted, p.keep = entry.Warm, entry.Warm
	}
	if entry.Workspace == airlockv1alpha1.WorkspaceSession || entry.MountRole != "" {
		// The schema refuses it; a registry written before the rule existed builds nothing.
		p.message = "warm members serve fresh workspaces only: not with workspace: session or a mountRole"
		return p
	}
	class, err := c.classLister.Get(entry.Class)
	if err != nil {
		p.message = fmt.Sprintf(messageClassNotFound, entry.Class)
		return p
	}
	if message := sandboxpod.ClassConflict(class); message != "" {
		p.message = message
		return p
	}
	record := sandboxpod.Freeze(class, entry)
	if record.Egress != nil {
		// The gateway frozen as the claim controller freezes a claim's (claim.freezeFrom): the
		// same ref and Service cache, so that a claim's record gives these members' pool key,
		// and a gateway that moved gives another one (docs/egress.md, "Warm members of a class
		// with egress"). Without a usable gateway, no member: its claims fail as
		// EgressUnavailable anyway.
		gw, why := sandboxpod.FreezeGateway(c.egressGateway.Load(), c.gatewayService())
		if why != "" {
			p.message = fmt.Sprintf("SandboxClass %q: %s", class.Name, why)
			return p
		}
		record.Egress.Gateway = *gw
	}
	p.record = record
	p.key = sandboxpod.PoolKey(reg.UID, entry.Name, p.record)
	p.recordOnStatus = recordOnStatus(reg, entry.Name, p.key, p.record)
	return p
}

// recordOnStatus says whether the registry's status names key and record for the entry.
func recordOnStatus(reg *airlockv1alpha1.ToolRegistry, entry, key string, record *airlockv1alpha1.FrozenSandbox) bool {
	for i := range reg.Status.Warm {
		if st := &reg.Status.Warm[i]; st.Name == entry {
			return st.Key == key && apiequality.Semantic.DeepEqual(st.Record, record)
		}
	}
	return false
}

// gatewayService is the egress gateway's Service from the Service cache, or nil.
func (c *Controller) gatewayService() *corev1.Service {
	gw := c.egressGateway.Load()
	if gw == nil {
		return nil
	}
	svc, err := c.svcLister.Services(gw.Namespace).Get(gw.Name)
	if err != nil {
		return nil
	}
	return svc
}

// syncPool sorts the pool's idle members into ready and starting, deletes those that are stale
// (another key: the class or the entry changed), ended, failing, or starting for longer than the
// record's startupTimeout, and those beyond the number it keeps, and keeps the pool's policy.
func (c *Controller) syncPool(ctx context.Context, reg *airlockv1alpha1.ToolRegistry, p *pool, idle []*corev1.Pod) error {
	var errs []error
	if p.record != nil && p.recordOnStatus {
		// The policy too is held to the record on the registry's status: written after it.
		errs = append(errs, c.ensurePoolPolicy(ctx, reg, p))
	}
	now := c.clock.Now()
	for _, pod := range idle {
		if pod.DeletionTimestamp != nil {
			continue
		}
		if c.refusedForEvidence(pod) {
			// Deleted for its evidence; the cache has not shown it yet (tried again if it failed).
			errs = append(errs, c.deleteMember(ctx, pod))
			continue
		}
		if reason := replaceReason(p, pod, now); reason != "" {
			klog.FromContext(ctx).V(2).Info("Replacing a warm member", "registry", klog.KObj(reg), "sandbox", p.entry.Name, "member", klog.KObj(pod), "why", reason)
			errs = append(errs, c.deleteMember(ctx, pod))
			continue
		}
		if err := c.ensureMemberKey(ctx, pod, p.record); err != nil {
			errs = append(errs, err)
			continue
		}
		if sandboxpod.ReadyPod([]*corev1.Pod{pod}) == nil {
			p.starting = append(p.starting, pod)
			continue
		}
		// Ready: adoptable once its evidence was read and held (evidence.go).
		state, wait, err := c.checkEvidence(ctx, reg, p, pod)
		if err != nil {
			errs = append(errs, err)
		}
		if wait > 0 && (p.requeue == 0 || wait < p.requeue) {
			p.requeue = wait
		}
		switch state {
		case evidenceHeld:
			p.ready = append(p.ready, pod)
		case evidencePending:
			p.starting = append(p.starting, pod)
		}
	}
	errs = append(errs, c.trimSurplus(ctx, p)...)
	return errors.Join(errs...)
}

// replaceReason says why the idle member must be replaced ("": it need not): stale, ended,
// failing, or not Ready after the record's startupTimeout; a failure to start or to be scheduled
// is also the pool's message.
func replaceReason(p *pool, pod *corev1.Pod, now time.Time) string {
	switch {
	case p.record == nil || pod.Labels[airlockv1alpha1.LabelWarmPool] != p.key:
		return "stale: its sandbox's class or registry entry changed, or it wants no warm members"
	case sandboxpod.Ended(pod):
		return "ended: " + string(pod.Status.Phase) + " " + pod.Status.Reason
	}
	if why, message := sandboxpod.Failure([]*corev1.Pod{pod}); why != "" {
		p.message = fmt.Sprintf("member %s cannot start: %s: %s", pod.Name, why, message)
		return why + ": " + message
	}
	if sandboxpod.ReadyPod([]*corev1.Pod{pod}) == nil && now.Sub(pod.CreationTimestamp.Time) > sandboxpod.StartupTimeout(p.record) {
		if m := sandboxpod.Unschedulable([]*corev1.Pod{pod}); m != "" {
			p.message = fmt.Sprintf("member %s cannot be scheduled: %s", pod.Name, m)
		}
		return fmt.Sprintf("not Ready after the startupTimeout (%s)", sandboxpod.StartupTimeout(p.record))
	}
	return ""
}

// trimSurplus deletes the members beyond the number kept: starting members go first, then the
// newest ready ones (claims adopt the oldest first). Only idle members are here, and each is
// deleted only as the cache showed it (deleteMember): one adopted since is the claim's.
func (c *Controller) trimSurplus(ctx context.Context, p *pool) []error {
	var errs []error
	surplus := len(p.ready) + len(p.starting) - int(p.keep)
	if surplus > 0 {
		newestFirst := func(pods []*corev1.Pod) {
			sort.Slice(pods, func(i, j int) bool { return pods[j].CreationTimestamp.Before(&pods[i].CreationTimestamp) })
		}
		newestFirst(p.starting)
		newestFirst(p.ready)
		victims := append(slices.Clone(p.starting), p.ready...)[:surplus]
		for _, pod := range victims {
			errs = append(errs, c.deleteMember(ctx, pod))
		}
		n := min(surplus, len(p.starting))
		p.starting = p.starting[n:]
		p.ready = p.ready[surplus-n:]
	}
	return errs
}

// ensurePoolPolicy creates the pool's NetworkPolicy, before any of its members, and keeps it as
// the record says (the allowed Services' pods and ports follow the Services, as a claim's do).
func (c *Controller) ensurePoolPolicy(ctx context.Context, reg *airlockv1alpha1.ToolRegistry, p *pool) error {
	allowed, err := sandboxpod.ExistingServices(c.svcLister, p.record.AllowedServices)
	if err != nil {
		return err
	}
	want := sandboxpod.PoolNetworkPolicy(reg, p.entry.Name, p.key, p.record, allowed)
	if c.evidence != nil {
		// The operator reads each member's evidence: its pods reach sandboxd's port, as a
		// claim's policy lets them (docs/security.md, "The operator's ingress").
		want = sandboxpod.WithOperatorIngress(want, p.record, c.evidence.peer)
	}
	live, err := c.npLister.NetworkPolicies(reg.Namespace).Get(want.Name)
	if apierrors.IsNotFound(err) {
		err = c.policies.Create(ctx, want)
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		if err == nil {
			p.policyCreated = true
		}
		return err
	}
	if err != nil {
		return err
	}
	if !metav1.IsControlledBy(live, reg) {
		return fmt.Errorf(messageResourceExists, "NetworkPolicy", live.Name)
	}
	if apiequality.Semantic.DeepEqual(live.Spec, want.Spec) {
		p.policyReady = true
		return nil
	}
	updated := live.DeepCopy()
	updated.Spec = want.Spec
	if err := c.policies.Update(ctx, updated); err != nil {
		return err
	}
	p.policyReady = true
	return nil
}

// ensureMemberKey creates the key Secret of a member whose Secret this process has not created
// yet: its key and, when its record has egress, its proxy credential (bound to the pod's UID,
// known only now). The Secret comes after the pod (whose container does not start before it
// exists), and is the pod's: gone with it. A Secret of that name that exists already is one this process
// cannot vouch for (the operator may not read Secrets; another leader may have made it, or
// someone else): the member is deleted, never adopted (fail closed). So a new leader replaces
// the idle members of the previous term once.
func (c *Controller) ensureMemberKey(ctx context.Context, pod *corev1.Pod, record *airlockv1alpha1.FrozenSandbox) error {
	if _, ok := c.keysWritten.Load(pod.UID); ok {
		return nil
	}
	encoded, err := c.keys.EncodedMemberKey(ctx, pod.Namespace, pod.Name)
	if err != nil {
		return fmt.Errorf("deriving the key of warm member %s: %w", pod.Name, err)
	}
	proxy := ""
	if record.Egress != nil {
		if proxy, err = c.keys.MemberProxyCredential(ctx, pod.UID, pod.Namespace, pod.Name); err != nil {
			return fmt.Errorf("deriving the egress proxy credential of warm member %s: %w", pod.Name, err)
		}
		if proxy == "" {
			return fmt.Errorf("deriving the egress proxy credential of warm member %s: empty credential", pod.Name)
		}
	}
	err = c.secrets.Create(ctx, sandboxpod.MemberSecret(pod, encoded, proxy))
	switch {
	case err == nil:
		c.keysWritten.Store(pod.UID, struct{}{})
		return nil
	case apierrors.IsAlreadyExists(err):
		klog.FromContext(ctx).Info("A warm member's key Secret exists already and was not made by this operator process; deleting the member", "member", klog.KObj(pod))
		return c.deleteMember(ctx, pod)
	}
	return err
}

// refill creates up to missing members of the pool, as the rate limiter allows, and returns how
// long until it allows the next one (0: none missing any more).
func (c *Controller) refill(ctx context.Context, reg *airlockv1alpha1.ToolRegistry, p *pool, missing int) time.Duration {
	if !p.recordOnStatus {
		// writeStatus writes it, and its event brings the registry back. Said, in case it stays:
		// a CRD older than the operator prunes status.warm[].record.
		if p.message == "" {
			p.message = messageRecordNotOnStatus
		}
		return 0
	}
	if !p.policyReady && !p.policyCreated {
		return 0 // no policy yet: no member; the policy's event brings the registry back
	}
	// The namespace's standing deny-all too: the pool's own policy goes with the registry, in
	// any order with the members (sandboxpod.DefaultDenyPolicy).
	if err := c.ensureDefaultDeny(ctx, reg.Namespace); err != nil {
		p.message = err.Error()
		klog.FromContext(ctx).V(2).Info("No warm member without the namespace's default-deny NetworkPolicy", "registry", klog.KObj(reg), "err", err)
		return 5 * time.Second
	}
	for range missing {
		now := c.clock.Now()
		if r := c.limiter.ReserveN(now, 1); r.DelayFrom(now) > 0 {
			wait := r.DelayFrom(now)
			r.CancelAt(now)
			return wait
		}
		name := sandboxpod.MemberName(reg.Name, p.entry.Name)
		pod := sandboxpod.MemberPod(reg, p.entry.Name, p.key, name, p.record)
		c.created.expect(reg.Namespace, name, p.key)
		if err := c.pods.Create(ctx, pod); err != nil {
			c.created.seen(reg.Namespace, name)
			if !apierrors.IsAlreadyExists(err) {
				p.message = fmt.Sprintf("creating a warm member: %v", err)
				klog.FromContext(ctx).V(2).Info("Creating a warm member failed", "registry", klog.KObj(reg), "sandbox", p.entry.Name, "err", err)
				return time.Second * 5
			}
			continue
		}
		// Its ready time is measured from here (demand.memberSeen); the request's own time is in it.
		c.demand.memberCreated(cache.ObjectName{Namespace: reg.Namespace, Name: name}, poolRef{registry: reg.UID, entry: p.entry.Name}, now)
		p.starting = append(p.starting, pod)
	}
	return 0
}

// deleteMember deletes an idle member (its key Secret goes with it), only as the cache showed
// it: a member adopted since (its owner and labels patched, so another resourceVersion) is the
// claim's now, and the refused deletion (409) is taken as done; the adoption's event brings the
// registry back.
func (c *Controller) deleteMember(ctx context.Context, pod *corev1.Pod) error {
	c.keysWritten.Delete(pod.UID)
	return objectcontrol.IgnoreGone(c.pods.DeleteUnchanged(ctx, pod))
}

// collectPolicies deletes the registry's pool policies that no member (idle or adopted) and no
// current pool uses.
func (c *Controller) collectPolicies(ctx context.Context, reg *airlockv1alpha1.ToolRegistry, inUse map[string]bool) error {
	policies, err := c.npLister.NetworkPolicies(reg.Namespace).List(labels.SelectorFromSet(labels.Set{airlockv1alpha1.LabelWarmRegistry: reg.Name}))
	if err != nil {
		return err
	}
	var errs []error
	for _, np := range policies {
		if inUse[np.Labels[airlockv1alpha1.LabelWarmPool]] || !metav1.IsControlledBy(np, reg) || np.DeletionTimestamp != nil {
			continue
		}
		// A pod created a moment ago may not be in the cache yet: not while members are expected.
		if c.created.pending(reg.Namespace, np.Labels[airlockv1alpha1.LabelWarmPool]) > 0 {
			continue
		}
		klog.FromContext(ctx).V(2).Info("Deleting a warm pool policy no member uses", "registry", klog.KObj(reg), "policy", klog.KObj(np))
		errs = append(errs, objectcontrol.IgnoreGone(c.policies.Delete(ctx, np.Namespace, np.Name, np.UID)))
	}
	return errors.Join(errs...)
}

// writeStatus writes the registry's warm counts when they changed, at most once per
// poolStatusInterval; it returns how long until a held-back write may go.
func (c *Controller) writeStatus(ctx context.Context, reg *airlockv1alpha1.ToolRegistry, pools []*pool) (time.Duration, error) {
	updated := reg.DeepCopy()
	updated.Status.ObservedGeneration = reg.Generation
	updated.Status.SandboxCount = int32(len(reg.Spec.Sandboxes))
	updated.Status.Sandboxes, updated.Status.ReadySandboxes = c.entriesReady(reg)
	updated.Status.Warm = nil
	updated.Status.WarmReady, updated.Status.WarmWanted = 0, 0
	writeNow := false // a pool's record is not on the status: its members wait for it
	for _, p := range pools {
		if !sandboxpod.WarmWanted(p.entry) {
			continue
		}
		st := airlockv1alpha1.WarmPoolStatus{
			Name:     p.entry.Name,
			Wanted:   p.wanted,
			Ready:    int32(len(p.ready)),
			Starting: int32(len(p.starting)),
			Resuming: p.resuming,
			Message:  truncateMessage(p.message, 4096),
		}
		if p.sizing != nil {
			sizingStatus(&st, p.sizing)
		}
		if p.record != nil {
			st.Key, st.Record = p.key, p.record
			writeNow = writeNow || !p.recordOnStatus
		}
		updated.Status.Warm = append(updated.Status.Warm, st)
		updated.Status.WarmReady += int32(len(p.ready))
		updated.Status.WarmWanted += p.wanted
	}
	if apiequality.Semantic.DeepEqual(reg.Status, updated.Status) {
		return 0, nil
	}
	key := cache.MetaObjectToName(reg)
	now := c.clock.Now()
	if last, ok := c.lastStatus.Load(key); ok && !writeNow {
		if wait := last.(time.Time).Add(poolStatusInterval).Sub(now); wait > 0 {
			return wait, nil
		}
	}
	c.lastStatus.Store(key, now)
	err := c.registries.UpdateStatus(ctx, updated)
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return poolStatusInterval, nil // the update event brings it back; else looked at then
	}
	return 0, err
}

// truncateMessage cuts s to at most n bytes.
func truncateMessage(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}

// ensureDefaultDeny puts the namespace's standing default-deny policy in place; without a way to
// (no DefaultDenyEnsurer) no member is created.
func (c *Controller) ensureDefaultDeny(ctx context.Context, namespace string) error {
	if c.defaultDeny == nil {
		return errors.New("no writer of the namespace's default-deny NetworkPolicy: no warm member is created without one")
	}
	if err := c.defaultDeny.Ensure(ctx, namespace); err != nil {
		return fmt.Errorf("putting the namespace's default-deny NetworkPolicy in place: %w", err)
	}
	return nil
}
