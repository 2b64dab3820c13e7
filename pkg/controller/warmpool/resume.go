package warmpool

// Resume members (issue 39 item 5, issue 40 item 3; docs/nothing-lost.md, "Resume members").
//
// When a workspace of an entry with a warm pool is kept (a suspended record, pkg/workspace), the
// pool starts one member for it: the pool's member exactly (the same record and pool key, class,
// key Secret and pool policy), except that its workspace is the kept directory and that its
// labels say which record it waits on (sandboxpod.ResumeMemberPod). The claim that would take
// that record (the same runtime by name and UID, session and handle: the next claim of the
// record's claim name) adopts it with the files in place, no pod started (pkg/controller/claim,
// adopt.go); no other claim adopts it, and an ordinary claim never gets one (Members.Idle leaves
// them out).
//
// How many, for how long: at most ResumeBound of an entry at once (its pool's own bound: warm, or
// warmPolicy.max), for the newest kept workspaces first; each waits at most the entry's
// resumeWindow after its workspace was kept, never past the runtime's workspaceRetention
// (requeued by AddAfter on the injected clock); then it is deleted and the workspace stays kept,
// for a cold resume. None is started while a claim of the record's claim name exists (it adopts
// the member there is, or resumes cold), for a held workspace, or without the pool's policy.
//
// One writer. The record names its member (AnnotationResumeMember, its UID) before the member's
// key Secret is created, and a member's container does not start without its Secret: the
// annotation is an update conditional on the record's resourceVersion, and so are a take (a
// deletion) and a collection (an unsuspension). So a claim that takes the record cold, or a
// collection, either saw the member named on the record (and deletes it, and waits until it is
// gone, before a pod of its own or the removal), or made this write fail: then the member never
// gets its Secret, never starts a container (the kubelet makes a subPath only for a container it
// starts), and is deleted here. A member whose Secret this process did not create is deleted, as
// any idle member of an earlier term is (ensureMemberKey).

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
	"github.com/airlock-dev/airlock/pkg/workspace"
)

// resumeTarget is a kept workspace a resume member may wait on, as one sync sees it.
type resumeTarget struct {
	record *batchv1.Job
	// deadline is when its member goes: kept-at + min(resumeWindow, the runtime's retention).
	deadline time.Time
	// claimed says that a claim of the record's claim name exists: it adopts the member there
	// is, or resumes cold (and deletes it); none is started for it.
	claimed bool
}

// resumeTargets returns, by record name, the kept workspaces of the registry's entry that a
// resume member may wait on now: records of the operator's shape, suspended, resumable (a held
// one too, unless a person asked for its retry: its claim takes it as any kept workspace, and a
// retry deletes an idle member first), of a directory a member may mount, of a live runtime of this registry (by name and UID), kept
// less than the window (and the retention) ago.
func (c *Controller) resumeTargets(reg *airlockv1alpha1.ToolRegistry, entry *airlockv1alpha1.RegistrySandbox, now time.Time) (map[string]*resumeTarget, error) {
	window := sandboxpod.ResumeWindow(entry)
	if window <= 0 {
		return nil, nil
	}
	jobs, err := c.jobLister.Jobs(reg.Namespace).List(labels.SelectorFromSet(labels.Set{
		airlockv1alpha1.LabelKeptWorkspace: airlockv1alpha1.LabelValueKeptWorkspace,
		airlockv1alpha1.LabelSandbox:       entry.Name,
	}))
	if err != nil {
		return nil, err
	}
	out := map[string]*resumeTarget{}
	for _, job := range jobs {
		if !workspace.Resumable(job) || !workspace.IsResumeDir(job.Namespace, job.Annotations[airlockv1alpha1.AnnotationKeptDir]) {
			continue
		}
		rt, err := c.runtimeLister.AgentRuntimes(job.Namespace).Get(job.Labels[airlockv1alpha1.LabelRuntime])
		if err != nil || rt.DeletionTimestamp != nil || rt.Spec.ToolRegistryRef.Name != reg.Name ||
			string(rt.UID) != job.Annotations[airlockv1alpha1.AnnotationKeptRuntimeUID] {
			continue
		}
		deadline := workspace.KeptAt(job).Add(min(window, workspace.Retention(rt)))
		if !deadline.After(now) {
			continue
		}
		_, err = c.claimLister.SandboxClaims(job.Namespace).Get(job.Labels[airlockv1alpha1.LabelClaim])
		out[job.Name] = &resumeTarget{record: job, deadline: deadline, claimed: err == nil}
	}
	return out, nil
}

// syncResume keeps the pool's resume members (members: the entry's idle ones; onRecord: the
// records any pod of the registry, adopted too, is on): it deletes those
// whose kept workspace is no longer one to wait on (taken, collected, past the window), or that
// are stale, ended or failing as any member; it names each on its record before its key Secret
// (ensureResumeKey); and it starts one for each kept workspace that has no pod on it, newest
// first, within the bound. It returns when to look again (the next member's deadline, a refill held back).
func (c *Controller) syncResume(ctx context.Context, reg *airlockv1alpha1.ToolRegistry, p *pool, members []*corev1.Pod, onRecord map[string]bool) (time.Duration, error) {
	logger := klog.FromContext(ctx)
	now := c.clock.Now()
	var (
		errs    []error
		requeue time.Duration
		live    int
		has     = map[string]bool{} // records with a member, even one being deleted
	)
	waitFor := func(d time.Duration) {
		if d > 0 && (requeue == 0 || d < requeue) {
			requeue = d
		}
	}
	targets, err := c.resumeTargets(reg, p.entry, now)
	if err != nil {
		return 0, err
	}
	for _, pod := range members {
		has[pod.Labels[airlockv1alpha1.LabelResumes]] = true
		if pod.DeletionTimestamp != nil {
			continue
		}
		t := targets[pod.Labels[airlockv1alpha1.LabelResumes]]
		if why := c.resumeReplaceReason(p, pod, t, now); why != "" {
			logger.V(2).Info("Deleting a resume member", "registry", klog.KObj(reg), "sandbox", p.entry.Name, "member", klog.KObj(pod), "why", why)
			errs = append(errs, c.deleteMember(ctx, pod))
			continue
		}
		live++
		waitFor(t.deadline.Sub(now))
		if err := c.ensureResumeKey(ctx, pod, t.record, p.record); err != nil {
			errs = append(errs, err)
			continue
		}
		if sandboxpod.ReadyPod([]*corev1.Pod{pod}) == nil {
			p.resuming++
			continue
		}
		state, wait, err := c.checkEvidence(ctx, reg, p, pod)
		errs = append(errs, err)
		waitFor(wait)
		if state != evidenceRefused {
			p.resuming++
		}
	}
	if p.record == nil || (!p.policyReady && !p.policyCreated) || !p.recordOnStatus || len(targets) == 0 {
		return requeue, errors.Join(errs...)
	}
	pending := c.created.pendingResumes(reg.Namespace, p.entry.Name)
	live += len(pending)
	for _, t := range resumeTodo(targets, has, onRecord, pending) {
		if live >= sandboxpod.ResumeBound(p.entry) {
			break
		}
		wait, err := c.createResumeMember(ctx, reg, p, t)
		if err != nil {
			errs = append(errs, err)
			break
		}
		if wait > 0 {
			waitFor(wait)
			break
		}
		live++
		waitFor(t.deadline.Sub(now))
	}
	return requeue, errors.Join(errs...)
}

// resumeTodo returns the kept workspaces that need a resume member, newest kept first (the
// likeliest to be resumed soon): those no claim of their name holds and no pod is on (has: a
// member of the pool, onRecord: any pod of the registry, pending: one created, not cached yet).
func resumeTodo(targets map[string]*resumeTarget, has, onRecord, pending map[string]bool) []*resumeTarget {
	var todo []*resumeTarget
	for name, t := range targets {
		if !t.claimed && !has[name] && !onRecord[name] && !pending[name] {
			todo = append(todo, t)
		}
	}
	sort.Slice(todo, func(i, j int) bool {
		a, b := workspace.KeptAt(todo[i].record), workspace.KeptAt(todo[j].record)
		if !a.Equal(b) {
			return a.After(b)
		}
		return todo[i].record.Name < todo[j].record.Name
	})
	return todo
}

// resumeReplaceReason says why an idle resume member must go ("": it may stay): its kept
// workspace is not one to wait on any more, the record of that name is another one, the record
// names another member that exists, or as any member (replaceReason: stale, ended, failing, not
// Ready in time).
func (c *Controller) resumeReplaceReason(p *pool, pod *corev1.Pod, t *resumeTarget, now time.Time) string {
	switch {
	case t == nil:
		return "its kept workspace is not one to wait on any more (taken, collected, held, its runtime gone, or its resume window passed)"
	case pod.Labels[airlockv1alpha1.LabelResumesUID] != string(t.record.UID),
		pod.Labels[airlockv1alpha1.LabelResumesRuntimeUID] != t.record.Annotations[airlockv1alpha1.AnnotationKeptRuntimeUID],
		sandboxpod.MemberWorkspaceDir(pod) != t.record.Annotations[airlockv1alpha1.AnnotationKeptDir]:
		return "the record of its workspace is another one now"
	}
	if name, uid := workspace.ResumeMember(t.record); name != "" && (name != pod.Name || uid != pod.UID) {
		if other, err := c.podLister.Pods(pod.Namespace).Get(name); err == nil && other.UID == uid {
			return "its record names another member"
		}
	}
	return replaceReason(p, pod, now)
}

// ensureResumeKey names the resume member on its record (the fence: resume.go's doc), then makes
// its key Secret (ensureMemberKey), once. A write refused because the record changed is tried
// again at the next sync, with the record as the cache shows it then; a record gone deletes the
// member, which never got its Secret.
func (c *Controller) ensureResumeKey(ctx context.Context, pod *corev1.Pod, record *batchv1.Job, frozen *airlockv1alpha1.FrozenSandbox) error {
	if _, ok := c.keysWritten.Load(pod.UID); ok {
		return nil
	}
	if name, uid := workspace.ResumeMember(record); name != pod.Name || uid != pod.UID {
		updated := record.DeepCopy()
		if updated.Annotations == nil {
			updated.Annotations = map[string]string{}
		}
		updated.Annotations[airlockv1alpha1.AnnotationResumeMember] = pod.Name
		updated.Annotations[airlockv1alpha1.AnnotationResumeMemberUID] = string(pod.UID)
		switch err := c.records.Update(ctx, updated); {
		case apierrors.IsNotFound(err):
			klog.FromContext(ctx).V(2).Info("The record of a resume member's workspace is gone before the member could start; deleting it", "member", klog.KObj(pod), "record", klog.KObj(record))
			return c.deleteMember(ctx, pod)
		case err != nil:
			return fmt.Errorf("naming resume member %s on the record %s: %w", pod.Name, record.Name, err)
		}
	}
	return c.ensureMemberKey(ctx, pod, frozen)
}

// createResumeMember creates a resume member for the kept workspace t, as the rate limiter
// allows (how long until it does, when it does not).
func (c *Controller) createResumeMember(ctx context.Context, reg *airlockv1alpha1.ToolRegistry, p *pool, t *resumeTarget) (time.Duration, error) {
	if err := c.ensureDefaultDeny(ctx, reg.Namespace); err != nil {
		p.message = err.Error()
		return 5 * time.Second, nil
	}
	now := c.clock.Now()
	if r := c.limiter.ReserveN(now, 1); r.DelayFrom(now) > 0 {
		wait := r.DelayFrom(now)
		r.CancelAt(now)
		return wait, nil
	}
	name := sandboxpod.MemberName(reg.Name, p.entry.Name)
	pod := sandboxpod.ResumeMemberPod(reg, p.entry.Name, p.key, name, p.record, t.record)
	c.created.expectResume(reg.Namespace, name, p.entry.Name, t.record.Name)
	if err := c.pods.Create(ctx, pod); err != nil {
		c.created.seen(reg.Namespace, name)
		if apierrors.IsAlreadyExists(err) {
			return 0, nil
		}
		p.message = fmt.Sprintf("creating a resume member: %v", err)
		return 0, err
	}
	klog.FromContext(ctx).V(2).Info("Started a resume member", "registry", klog.KObj(reg), "sandbox", p.entry.Name,
		"member", klog.KRef(reg.Namespace, name), "record", klog.KObj(t.record), "until", t.deadline)
	p.resuming++
	return 0, nil
}

// recordChanged brings back the registries of a kept workspace's namespace when its record
// changes (kept, annotated, taken, collected): their pools may start, keep or delete a resume
// member for it.
func (c *Controller) recordChanged(obj any) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	if job, ok := obj.(*batchv1.Job); ok && workspace.IsRecord(job) {
		c.enqueueNamespace(job.Namespace)
	}
}

// enqueueRegistriesOf brings back the registry of a deleted claim's runtime: a workspace it kept
// may get a resume member now that no claim of its name is left.
func (c *Controller) enqueueRegistriesOf(obj any) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	claim, ok := obj.(*airlockv1alpha1.SandboxClaim)
	if !ok {
		return
	}
	if rt, err := c.runtimeLister.AgentRuntimes(claim.Namespace).Get(claim.Spec.RuntimeName); err == nil {
		c.queue.Add(cache.ObjectName{Namespace: claim.Namespace, Name: rt.Spec.ToolRegistryRef.Name})
	}
}

// enqueueNamespace adds every registry of the namespace.
func (c *Controller) enqueueNamespace(namespace string) {
	regs, err := c.registryList.ToolRegistries(namespace).List(labels.Everything())
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	for _, reg := range regs {
		c.enqueue(reg)
	}
}

// resumeExpectation is the expectations' value of a resume member created and not yet seen: its
// entry and the record it waits on.
func resumeExpectation(entry, record string) string {
	return "resume/" + entry + "/" + record
}

// isResumeOf says whether a pod is a resume member of the registry, by its labels.
func isResumeOf(reg *airlockv1alpha1.ToolRegistry, pod *corev1.Pod) bool {
	return sandboxpod.IsResumeMember(pod) && metav1.IsControlledBy(pod, reg) && pod.Labels[airlockv1alpha1.LabelClaim] == ""
}

// recordOfExpectation is the record name of a resume expectation of entry ("" when it is not one).
func recordOfExpectation(value, entry string) string {
	record, ok := strings.CutPrefix(value, "resume/"+entry+"/")
	if !ok {
		return ""
	}
	return record
}
