package claim

// Adoption of warm members (issue 14; docs/decisions.md, "Warm pools"). Admission is unchanged:
// a claim is admitted oldest first under the limits, as any claim. Only its binding differs: when
// a Ready, idle member of its registry entry built from the very record the claim is frozen with
// exists, the admission pass adopts it for the claim (one conditional patch of the pod's owner and
// labels) and writes the decision as Bound at the member's IP, record and all, in one status
// write, instead of Binding and a pod to wait for. The pod is not restarted; its sandboxd learns
// the claim's token and tool list from the first request that carries the token (the Sandbox API
// derives it from the member's key: claimtoken.AdoptionToken).

import (
	"context"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/controller/objectcontrol"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
	"github.com/airlock-dev/airlock/pkg/workspace"
)

// warmMembers finds the members of a warm pool that a claim may adopt (warmpool.Members).
type warmMembers interface {
	// Idle returns the Ready, idle members of the pool of the registry's entry built from
	// record, that the registry controls, oldest first; never a resume member.
	Idle(reg *airlockv1alpha1.ToolRegistry, entry string, record *airlockv1alpha1.FrozenSandbox) ([]*corev1.Pod, error)
	// Resuming returns the Ready, idle resume members of that pool that wait on the kept
	// workspace of the record kept (by name and UID), oldest first (resume.go).
	Resuming(reg *airlockv1alpha1.ToolRegistry, entry string, record *airlockv1alpha1.FrozenSandbox, kept *batchv1.Job) ([]*corev1.Pod, error)
}

// ReasonWarmMember is the Ready reason of a claim Bound to an adopted warm member.
const ReasonWarmMember = "WarmMember"

// Messages of a Bound warm claim whose member pod is gone or ended: it is reaped at once (a
// member is not started again: docs/decisions.md, "Warm pools").
const (
	messageWarmGone  = "the warm member's pod %s is gone; its workspace is synced back and the next acquire gets a new sandbox"
	messageWarmEnded = "the warm member's pod %s ended (%s %s); its workspace is synced back and the next acquire gets a new sandbox"
)

// reserveMember picks a Ready, idle member of the claim's pool (the oldest first: it has waited
// longest) that no other worker of this process has taken, and takes it. It returns nil when
// there is none, and whether the claim could adopt one at all (eligible, of a sandbox with warm
// members wanted).
//
// A claim that would resume a kept workspace (kept.go) adopts no member of the pool (its
// workspace is another): only that workspace's resume member (resume.go), when the cache shows
// its record and the entry keeps resume members; else it resumes cold.
func (c *Controller) reserveMember(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, record *airlockv1alpha1.FrozenSandbox, tried map[types.UID]bool) (*corev1.Pod, bool, error) {
	if record == nil || !sandboxpod.WarmEligible(claim) {
		return nil, false, nil
	}
	var kept *batchv1.Job
	if c.hasKeptWorkspace(claim) {
		if kept = c.keptRecordFor(claim); kept == nil {
			return nil, false, nil // its record not cached yet, or not its to resume: cold
		}
	}
	if c.evidence == nil && sandboxpod.NeedsDedicatedKernel(record) {
		// A class that needs a kernel of its own is served only with evidence, and without
		// reading no member's evidence was read (docs/isolation.md): built cold, which fails.
		return nil, false, nil
	}
	reg, entry, err := c.warmEntry(claim)
	if err != nil || entry == nil || !sandboxpod.WarmWanted(entry) {
		return nil, false, err
	}
	var candidates []*corev1.Pod
	if kept != nil {
		if sandboxpod.ResumeWindow(entry) <= 0 {
			return nil, false, nil
		}
		if candidates, err = c.warm.Resuming(reg, entry.Name, record, kept); err != nil {
			return nil, true, err
		}
		candidates = resumeCandidates(claim, kept, candidates)
	} else if candidates, err = c.warm.Idle(reg, entry.Name, record); err != nil {
		return nil, true, err
	}
	for _, pod := range candidates {
		if tried[pod.UID] {
			continue
		}
		if _, taken := c.adopting.Load(pod.UID); taken || !c.memberFits(ctx, record, pod) {
			continue // the cheap check first: a burst's claims pass over the members taken before them
		}
		if _, taken := c.adopting.LoadOrStore(pod.UID, claim.UID); !taken {
			return pod, true, nil
		}
	}
	return nil, true, nil
}

// reservation is a member reserved for a claim an admission pass admits, before the pass's writes
// run concurrently: a burst's oldest claims get the warm members, the rest are built cold.
type reservation struct {
	pod      *corev1.Pod
	eligible bool
	// record is what the claim is frozen with: the member was chosen for this record's pool key,
	// so the decision's write records this very record (frozen once: a class edit between two
	// freezes could otherwise give the claim a member of the record before).
	record *airlockv1alpha1.FrozenSandbox
	// resume says that the claim would resume a kept workspace: only its resume member is
	// adopted.
	resume bool
}

// reserveMembers reserves members for the claims a pass admits, in the order given (oldest
// first), each for the record it is frozen with.
func (c *Controller) reserveMembers(ctx context.Context, ordered []*airlockv1alpha1.SandboxClaim, records map[types.UID]*airlockv1alpha1.FrozenSandbox) map[types.UID]reservation {
	out := make(map[types.UID]reservation, len(ordered))
	for _, claim := range ordered {
		record := records[claim.UID]
		if record == nil {
			continue
		}
		pod, eligible, err := c.reserveMember(ctx, claim, record, nil)
		if err != nil {
			klog.FromContext(ctx).V(2).Info("Looking for a warm member failed; the claim is built cold", "claim", klog.KObj(claim), "err", err)
		}
		out[claim.UID] = reservation{pod: pod, eligible: eligible, record: record, resume: c.hasKeptWorkspace(claim)}
	}
	return out
}

// admitWarm admits the claim bound to a warm member, when one can be had: the member an earlier
// pass adopted for it (whose write did not go through), else the reserved one, else the next
// Ready one. It writes the claim's decision as Bound, with its record and status.warm, in one
// status write, and returns the claim as written and true. False, and nothing written, when the
// claim cannot adopt or no member is left: it is admitted cold. An error after a member was
// adopted leaves the claim undecided, controlling the member: the next pass decides it again and
// takes the member up again, or, deciding otherwise, deletes it (releaseMember).
func (c *Controller) admitWarm(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, record *airlockv1alpha1.FrozenSandbox, r reservation) (*airlockv1alpha1.SandboxClaim, bool, error) {
	logger := klog.FromContext(ctx)
	earlier, err := c.adoptedMemberOf(claim)
	if err != nil {
		return nil, false, err
	}
	if earlier != nil {
		if r.pod != nil {
			c.adopting.CompareAndDelete(r.pod.UID, claim.UID) // not needed: give it back
		}
		written, done, cold, err := c.readopt(ctx, claim, record, earlier)
		if err != nil || done {
			return written, done, err
		}
		if cold {
			return nil, false, nil // resumed cold, once the member is gone (clearResumeMembers)
		}
		r = reservation{eligible: r.eligible}
	}
	tried := map[types.UID]bool{}
	pod, eligible := r.pod, r.eligible
	for {
		if pod == nil {
			if pod, eligible, err = c.reserveMember(ctx, claim, record, tried); err != nil {
				return nil, false, err
			}
		}
		if pod == nil {
			break
		}
		tried[pod.UID] = true
		podLabels := sandboxpod.PodLabels(claim)
		var kept *batchv1.Job
		if sandboxpod.IsResumeMember(pod) {
			// Its record, read fresh, must name it (resume.go); the pod carries the resume labels
			// from the adoption on, so that a crash before the Bound still says what it resumed.
			var ok bool
			if kept, ok, err = c.mayAdoptResume(ctx, claim, pod); err != nil || !ok {
				c.adopting.CompareAndDelete(pod.UID, claim.UID)
				if err != nil {
					return nil, false, err
				}
				pod = nil
				continue
			}
			for k, v := range workspace.ResumedLabels(kept) {
				podLabels[k] = v
			}
		}
		err := c.children.adopter.Adopt(ctx, pod, sandboxpod.OwnerReference(claim), podLabels)
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			// Changed or gone since the cache showed it (another leader adopted it, the pool
			// controller deleted it, the kubelet wrote its status): let it go, try the next.
			logger.V(4).Info("A warm member changed before it could be adopted; trying another", "claim", klog.KObj(claim), "member", klog.KObj(pod), "err", err)
			c.adopting.CompareAndDelete(pod.UID, claim.UID)
			pod = nil
			continue
		}
		if err != nil {
			c.adopting.CompareAndDelete(pod.UID, claim.UID)
			return nil, false, err
		}
		if kept != nil {
			return c.finishResumeAdoption(ctx, claim, record, pod, kept, podLabels)
		}
		logger.V(2).Info("Adopted a warm member", "claim", klog.KObj(claim), "member", klog.KObj(pod))
		warmAdoptions.WithLabelValues("hit").Inc()
		written, err := c.writeWarmAdmitted(ctx, claim, record, pod, nil)
		return written, err == nil, err
	}
	countMiss(ctx, claim, eligible, r.resume)
	return nil, false, nil
}

// readopt decides again for the member an earlier pass adopted for the claim (whose write did not
// go through): the claim is written Bound to it (done) while it is Ready, fits the record and
// holds its workspace; else it is let go, and cold says that it was a resume member (the claim
// resumes cold, once it is gone) rather than a pool member (the claim may adopt another).
func (c *Controller) readopt(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, record *airlockv1alpha1.FrozenSandbox, earlier *corev1.Pod) (written *airlockv1alpha1.SandboxClaim, done, cold bool, err error) {
	if earlier.DeletionTimestamp == nil && sandboxpod.ReadyPod([]*corev1.Pod{earlier}) != nil && c.memberFits(ctx, record, earlier) {
		held, err := c.holdsMemberWorkspace(ctx, claim, earlier)
		if err != nil {
			return nil, false, false, err
		}
		if held {
			written, err := c.writeWarmAdmitted(ctx, claim, record, earlier, workspace.Resumed(earlier))
			return written, err == nil, false, err
		}
	}
	if err := c.releaseMember(ctx, claim); err != nil {
		return nil, false, false, err
	}
	return nil, false, sandboxpod.IsResumeMember(earlier), nil
}

// finishResumeAdoption takes the kept record for the resume member the claim just adopted and
// writes the claim Bound to it, resumed; a record that changed under the adoption lets the member
// go, and the claim resumes cold once it is gone (false, nothing written).
func (c *Controller) finishResumeAdoption(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, record *airlockv1alpha1.FrozenSandbox, pod *corev1.Pod, kept *batchv1.Job, podLabels map[string]string) (*airlockv1alpha1.SandboxClaim, bool, error) {
	logger := klog.FromContext(ctx)
	taken, err := c.takeForMember(ctx, claim, pod, kept)
	if err != nil {
		return nil, false, err // the next pass takes it up again (holdsMemberWorkspace)
	}
	if !taken {
		// The record changed under the adoption: the member is let go, and the claim
		// resumes cold once it is gone.
		logger.V(2).Info("The kept workspace's record changed before the resume member's claim could take it; resuming cold", "claim", klog.KObj(claim), "member", klog.KObj(pod), "record", klog.KObj(kept))
		warmResumes.WithLabelValues("lost").Inc()
		if _, err := c.releaseUnserved(ctx, pod.Namespace, pod.Name, pod.UID); err != nil {
			return nil, false, err
		}
		return nil, false, nil
	}
	warmResumes.WithLabelValues("hit").Inc()
	logger.V(2).Info("Adopted the resume member of the claim's kept workspace", "claim", klog.KObj(claim), "member", klog.KObj(pod), "record", klog.KObj(kept))
	resumed := workspace.ResumedOf(podLabels)
	written, err := c.writeWarmAdmitted(ctx, claim, record, pod, resumed)
	if err == nil {
		c.resumedEvent(claim, pod, resumed)
	}
	return written, err == nil, err
}

// countMiss counts and logs an eligible claim that found no warm member (a resuming one: no
// resume member) and is built cold.
func countMiss(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, eligible, resume bool) {
	logger := klog.FromContext(ctx)
	if eligible && resume {
		warmResumes.WithLabelValues("miss").Inc()
		logger.V(2).Info("No resume member Ready for the claim's kept workspace; resuming it cold", "claim", klog.KObj(claim))
	} else if eligible {
		warmAdoptions.WithLabelValues("miss").Inc()
		logger.V(2).Info("No warm member Ready for the claim; building it cold", "claim", klog.KObj(claim))
	}
}

// holdsMemberWorkspace says whether the claim holds the workspace of the member it adopted in an
// earlier pass or sync: always for a member of the pool (a fresh workspace of its own); for a
// resume member, once it took the record (finishResumeTake).
func (c *Controller) holdsMemberWorkspace(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, pod *corev1.Pod) (bool, error) {
	if !sandboxpod.IsResumeMember(pod) {
		return true, nil
	}
	return c.finishResumeTake(ctx, claim, pod)
}

// adoptedMemberOf returns the warm member the claim controls, from the cache, or nil.
func (c *Controller) adoptedMemberOf(claim *airlockv1alpha1.SandboxClaim) (*corev1.Pod, error) {
	pods, err := c.podLister.Pods(claim.Namespace).List(labels.SelectorFromSet(sandboxpod.SelectorLabels(claim)))
	if err != nil {
		return nil, err
	}
	return adoptedMember(claim, pods), nil
}

// releaseMember deletes the warm member an undecided claim controls (adopted by a pass whose
// write did not go through): a claim that is not admitted holds no pod. A resume member, which
// served nobody, goes with a grace period of 0, its workspace kept again first if the claim took
// its record (resume.go).
func (c *Controller) releaseMember(ctx context.Context, claim *airlockv1alpha1.SandboxClaim) error {
	member, err := c.adoptedMemberOf(claim)
	if err != nil || member == nil || member.DeletionTimestamp != nil {
		return err
	}
	klog.FromContext(ctx).V(2).Info("Deleting the warm member of a claim that is not admitted", "claim", klog.KObj(claim), "member", klog.KObj(member))
	if sandboxpod.IsResumeMember(member) {
		if err := c.keepTakenResume(ctx, claim, member); err != nil {
			return err
		}
		_, err := c.releaseUnserved(ctx, member.Namespace, member.Name, member.UID)
		return err
	}
	return objectcontrol.IgnoreGone(c.children.pods.Delete(ctx, member.Namespace, member.Name, member.UID))
}

// writeWarmAdmitted writes the admission of an undecided claim bound to its adopted member: the
// Admitted condition, the record, and Bound at the pod's IP with status.warm (and, for a resume
// member, status.resumedWorkspace: resumed), in one write.
func (c *Controller) writeWarmAdmitted(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, record *airlockv1alpha1.FrozenSandbox, pod *corev1.Pod, resumed *airlockv1alpha1.ResumedWorkspace) (*airlockv1alpha1.SandboxClaim, error) {
	admitted := claim.DeepCopy()
	setCondition(&admitted.Status, ConditionAdmitted, metav1.ConditionTrue, ReasonAdmitted, MessageAdmitted, c.clock.Now())
	admitted.Status.Frozen = record
	if resumed != nil {
		admitted.Status.ResumedWorkspace = resumed
	}
	return c.writeWarmBound(ctx, claim, admitted, pod)
}

// warmEntry returns the claim's registry and its entry (nil when either is gone).
func (c *Controller) warmEntry(claim *airlockv1alpha1.SandboxClaim) (*airlockv1alpha1.ToolRegistry, *airlockv1alpha1.RegistrySandbox, error) {
	rt, err := c.runtime(claim)
	if err != nil || rt == nil {
		return nil, nil, err
	}
	reg, err := c.registryLister.ToolRegistries(claim.Namespace).Get(rt.Spec.ToolRegistryRef.Name)
	if apierrors.IsNotFound(err) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	return reg, findEntry(reg, claim.Spec.Sandbox), nil
}

// writeWarmBound writes updated (the claim, or the claim with its admission) Bound to its adopted
// member pod: addresses at the pod's IP, status.warm naming the member and its workspace, and,
// when the operator reads evidence, status.isolation signed from the member's record
// (warmIsolation). It writes nothing when that cannot be signed (an error) or the member does not
// meet the record's need (errMemberUnfit: the caller lets the member go and builds the claim cold).
func (c *Controller) writeWarmBound(ctx context.Context, claim, updated *airlockv1alpha1.SandboxClaim, pod *corev1.Pod) (*airlockv1alpha1.SandboxClaim, error) {
	iso, err := c.warmIsolation(ctx, claim, updated.Status.Frozen, pod)
	if err != nil {
		return nil, err
	}
	now := c.clock.Now()
	message := fmt.Sprintf("Adopted the warm member %s: the sandbox is ready", pod.Name)
	updated = updated.DeepCopy()
	setPhase(updated, airlockv1alpha1.ClaimBound, "", message)
	updated.Status.BoundAt = ptr.To(metav1.NewTime(now))
	updated.Status.Addresses = sandboxpod.Addresses(pod.Status.PodIP, updated.Status.Frozen)
	updated.Status.Warm = &airlockv1alpha1.WarmAdoption{
		Member:       pod.Name,
		WorkspaceDir: sandboxpod.MemberWorkspaceDir(pod), // a resume member's: the kept workspace
		AdoptedAt:    metav1.NewTime(now),
	}
	updated.Status.Isolation = iso
	setCondition(&updated.Status, ConditionReady, metav1.ConditionTrue, ReasonWarmMember, message, now)
	if iso != nil {
		isolationChecks.WithLabelValues("met").Inc()
	}
	return c.updateClaimStatus(ctx, claim, updated)
}

// adoptedMember returns the warm member the claim controls, or nil.
func adoptedMember(claim *airlockv1alpha1.SandboxClaim, pods []*corev1.Pod) *corev1.Pod {
	for _, pod := range pods {
		if pod.Labels[airlockv1alpha1.LabelWarmMember] != "" && metav1.IsControlledBy(pod, claim) {
			return pod
		}
	}
	return nil
}

// syncWarmMember looks at a Bound warm claim's member pod. It reaps the claim when the pod is
// gone or has ended; it returns wait (and no reap) while the cache shows the pod as it was
// before the adoption (its update event brings the claim back).
func (c *Controller) syncWarmMember(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, rt *airlockv1alpha1.AgentRuntime) (*time.Duration, bool, error) {
	member := claim.Status.Warm.Member
	pod, err := c.podLister.Pods(claim.Namespace).Get(member)
	switch {
	case apierrors.IsNotFound(err):
		// The member was in the cache when it was adopted: not found is gone.
		requeue, err := c.beginReaping(ctx, claim, rt, ReasonPodFailed, fmt.Sprintf(messageWarmGone, member), nil)
		return requeue, true, err
	case err != nil:
		return nil, true, err
	case !metav1.IsControlledBy(pod, claim):
		if pod.Labels[LabelClaim] == "" {
			return nil, true, nil // the cache has not seen the adoption yet
		}
		requeue, err := c.beginReaping(ctx, claim, rt, ReasonPodFailed, fmt.Sprintf(messageWarmGone, member), nil)
		return requeue, true, err
	case sandboxpod.Ended(pod):
		requeue, err := c.beginReaping(ctx, claim, rt, ReasonPodFailed, fmt.Sprintf(messageWarmEnded, member, pod.Status.Phase, pod.Status.Reason), nil)
		return requeue, true, err
	}
	return nil, false, nil
}

// adoptionTools are the tools an adoption token names: the record's, as the Sandbox API gives
// them (boundToken); claimtoken.AdoptionToken sorts them and refuses none.
func adoptionTools(record *airlockv1alpha1.FrozenSandbox) []string {
	if record == nil {
		return nil
	}
	tools := make([]string, len(record.AllowedTools))
	for i, t := range record.AllowedTools {
		tools[i] = string(t)
	}
	return tools
}
