package sandboxapi

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/airlock-dev/airlock/pkg/admission"
	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/attestation"
	"github.com/airlock-dev/airlock/pkg/claimname"
	"github.com/airlock-dev/airlock/pkg/client"
	"github.com/airlock-dev/airlock/pkg/workspace"
)

// target is what a request names, resolved against the cache.
type target struct {
	runtime *airlockv1alpha1.AgentRuntime
	// entry and class are set for a request that names a handle.
	entry *airlockv1alpha1.RegistrySandbox
	class *airlockv1alpha1.SandboxClass
}

// authorize checks that who may act for the runtime namespace/name, and returns the runtime.
//
// A ServiceAccount of another namespace is refused (403) before any lookup, so that it learns
// nothing about which runtimes exist there. In the runtime's namespace, a missing runtime is 404,
// and a runtime that names another ServiceAccount is 403.
func (s *Server) authorize(who caller, namespace, name string) (*airlockv1alpha1.AgentRuntime, error) {
	if who.namespace != namespace {
		return nil, errorf(http.StatusForbidden, client.CodeForbidden,
			"ServiceAccount %s/%s may not use the runtimes of namespace %s", who.namespace, who.serviceAccount, namespace)
	}
	rt, err := s.runtimes.AgentRuntimes(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		return nil, errorf(http.StatusNotFound, client.CodeNotFound, "AgentRuntime %s/%s not found", namespace, name)
	}
	if err != nil {
		return nil, err
	}
	if rt.Spec.ServiceAccountName != who.serviceAccount {
		return nil, errorf(http.StatusForbidden, client.CodeForbidden,
			"ServiceAccount %s/%s is not the ServiceAccount of AgentRuntime %s/%s", who.namespace, who.serviceAccount, namespace, name)
	}
	return rt, nil
}

// resolveSandbox finds the runtime's registry entry named sandbox and its class: 404 when the
// registry, the entry or the class is missing, or when the entry's mount role has no connection
// in the runtime.
func (s *Server) resolveSandbox(rt *airlockv1alpha1.AgentRuntime, sandbox string) (target, error) {
	t := target{runtime: rt}
	registry, err := s.registries.ToolRegistries(rt.Namespace).Get(rt.Spec.ToolRegistryRef.Name)
	if apierrors.IsNotFound(err) {
		return t, errorf(http.StatusNotFound, client.CodeNotFound, "ToolRegistry %s/%s of AgentRuntime %s not found",
			rt.Namespace, rt.Spec.ToolRegistryRef.Name, rt.Name)
	}
	if err != nil {
		return t, err
	}
	for i := range registry.Spec.Sandboxes {
		if registry.Spec.Sandboxes[i].Name == sandbox {
			t.entry = &registry.Spec.Sandboxes[i]
			break
		}
	}
	if t.entry == nil {
		return t, errorf(http.StatusNotFound, client.CodeNotFound, "ToolRegistry %s/%s has no sandbox %q", rt.Namespace, registry.Name, sandbox)
	}
	t.class, err = s.classes.Get(t.entry.Class)
	if apierrors.IsNotFound(err) {
		return t, errorf(http.StatusNotFound, client.CodeNotFound, "SandboxClass %s of sandbox %q not found", t.entry.Class, sandbox)
	}
	if err != nil {
		return t, err
	}
	if role := t.entry.MountRole; role != "" && connectionPath(rt, role) == "" {
		return t, errorf(http.StatusNotFound, client.CodeNotFound, "AgentRuntime %s/%s has no connection for mount role %q of sandbox %q",
			rt.Namespace, rt.Name, role, sandbox)
	}
	return t, nil
}

func connectionPath(rt *airlockv1alpha1.AgentRuntime, role string) string {
	for _, c := range rt.Spec.Sandbox.Connections {
		if c.Role == role {
			return c.Path
		}
	}
	return ""
}

// newClaim is the claim the API creates for session and handle under name. A replacement
// (replaces not nil) keeps the replaced claim's mount role and workspace directory when it has a
// mount role; otherwise, and for every other field, it takes the registry entry's current values
// (with `workspace: session` that is the directory of the session and handle, its predecessor's).
func newClaim(t target, name, session, handle string, replaces *airlockv1alpha1.SandboxClaim) *airlockv1alpha1.SandboxClaim {
	rt, entry := t.runtime, t.entry
	ns := rt.Namespace
	c := &airlockv1alpha1.SandboxClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: ns,
			Labels: map[string]string{
				airlockv1alpha1.LabelRuntime:     rt.Name,
				airlockv1alpha1.LabelSandbox:     entry.Name,
				airlockv1alpha1.LabelSessionHash: claimname.SessionHash(session),
				airlockv1alpha1.LabelClaimShard:  claimname.Shard(name),
			},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(rt, airlockv1alpha1.SchemeGroupVersion.WithKind("AgentRuntime"))},
		},
		Spec: airlockv1alpha1.SandboxClaimSpec{
			RuntimeName: rt.Name,
			RuntimeUID:  rt.UID,
			Session:     session,
			Handle:      handle,
			Sandbox:     entry.Name,
			ClassName:   entry.Class,
			TargetPath:  entry.TargetPath,
			MountRole:   entry.MountRole,
		},
	}
	switch {
	case replaces != nil && replaces.Spec.MountRole != "":
		c.Spec.MountRole = replaces.Spec.MountRole
		c.Spec.WorkspaceDir = replaces.Spec.WorkspaceDir
	case entry.MountRole != "":
		c.Spec.WorkspaceDir = connectionPath(rt, entry.MountRole)
	case replaces != nil && entry.Workspace == airlockv1alpha1.WorkspaceSession && replaces.Spec.WorkspaceDir != "":
		// The replaced claim's session directory, as it was named when it was created.
		c.Spec.WorkspaceDir = replaces.Spec.WorkspaceDir
	case entry.Workspace == airlockv1alpha1.WorkspaceSession:
		// One directory per runtime (name and UID), session and handle: shared by a claim and
		// its replacement, never by two handles of one session, nor by two runtimes that use
		// one session id (two writers).
		c.Spec.WorkspaceDir = fmt.Sprintf("%s/sandboxes/sessions/%s", ns, workspace.SessionDirName(rt.Name, string(rt.UID), session, handle))
	default:
		// One directory per claim and runtime UID (workspace.go); chooseWorkspace may give it
		// the legacy directory of a kept workspace of the runtime.
		c.Spec.WorkspaceDir = claimWorkspaceDir(ns, name, rt.UID)
	}
	if replaces != nil {
		c.Spec.Replaces = replaces.Name
	}
	return c
}

// admit runs the shared admission function over this replica's cache of the namespace, plus
// extra claims this request just created, plus the prospective claim as if created now. It
// refuses only what the leader would refuse for a limit: 429 with the reason, 409 for a disabled
// runtime. A prospective replacement (spec.replaces set) makes the Failed claim it replaces count
// as replaced, inside admission.Decide, as it does for the leader.
func (s *Server) admit(prospective *airlockv1alpha1.SandboxClaim, extra []*airlockv1alpha1.SandboxClaim) error {
	ns := prospective.Namespace
	cached, err := s.claims.SandboxClaims(ns).List(labels.Everything())
	if err != nil {
		return err
	}
	runtimes, err := s.runtimes.AgentRuntimes(ns).List(labels.Everything())
	if err != nil {
		return err
	}
	registries, err := s.registries.ToolRegistries(ns).List(labels.Everything())
	if err != nil {
		return err
	}
	in := admission.NewInput(make([]*airlockv1alpha1.SandboxClaim, 0, len(cached)+len(extra)+1), runtimes, registries)
	seen := map[string]bool{prospective.Name: true}
	for _, c := range extra {
		if !seen[c.Name] {
			seen[c.Name] = true
			in.Claims = append(in.Claims, c)
		}
	}
	for _, c := range cached {
		if seen[c.Name] {
			continue
		}
		in.Claims = append(in.Claims, c)
	}
	// The prospective claim is walked last: it is created now, after every claim known here.
	// Creation timestamps served by the API server have whole seconds, and the clocks of
	// replicas differ, so "now" alone could sort it before a claim created a moment ago.
	created := s.clock.Now()
	for _, c := range in.Claims {
		if !c.CreationTimestamp.Time.Before(created) {
			created = c.CreationTimestamp.Time.Add(time.Nanosecond)
		}
	}
	p := prospective.DeepCopy()
	p.CreationTimestamp = metav1.NewTime(created)
	in.Claims = append(in.Claims, p)

	d := admission.Decide(in)[p.Name]
	if d.Action != admission.Refuse {
		return nil
	}
	return refusal(d.Reason, fmt.Sprintf("claim %s for session %q and handle %q", p.Name, p.Spec.Session, p.Spec.Handle))
}

// refusal is the answer to a refused claim: 429 for a limit, 409 for a disabled runtime, 404
// when the runtime or its sandbox is gone.
func refusal(reason, what string) *apiError {
	switch reason {
	case admission.ReasonDisabled:
		return errorf(http.StatusConflict, client.CodeDisabled, "the runtime may hold no sandbox (spec.sandbox.enabled is false): %s refused", what)
	case admission.ReasonRuntimeNotFound, admission.ReasonUnknownSandbox:
		return errorf(http.StatusNotFound, client.CodeNotFound, "%s refused: %s", what, reason)
	}
	e := errorf(http.StatusTooManyRequests, client.CodeRefused, "%s refused: %s", what, reasonText(reason))
	e.reason = reason
	return e
}

func reasonText(reason string) string {
	switch reason {
	case admission.ReasonMaxPerSession:
		return "the session already holds maxPerSession sandboxes"
	case admission.ReasonMaxInstances:
		return "the sandbox already has maxInstances live claims"
	case admission.ReasonWorkspaceInUse:
		return "its workspace directory is in use by a live claim of another runtime, session or handle"
	}
	return reason
}

// acquisition is one acquire: it finds, creates or replaces the claim of a session and handle,
// step by step, each step reading the cache again.
type acquisition struct {
	s       *Server
	t       target
	session string
	handle  string
	// base is the claim's name; replacement the name of the claim that replaces it.
	base, replacement string
	// created names a claim this acquire created (or found already created) that the cache has
	// not shown yet: until it does, the acquire waits rather than creating again.
	created string
	// createdUID is the UID of the claim this acquire created itself (not one that existed).
	createdUID types.UID
	// phase is the last phase seen, for a 202.
	phase string
	// reason is the last reason seen, for a 202; message the PodLost condition's message.
	reason, message string
	// trace is the acquire's spans (trace.go).
	trace *acquireTrace
}

// stepResult is the end of an acquire, or nothing yet (done false).
type stepResult struct {
	done   bool
	status int
	body   any
	err    error
}

func (s *Server) acquire(ctx context.Context, who caller, body io.Reader) (status int, out any, err error) {
	ctx, tr := s.startAcquire(ctx)
	defer func() { tr.end(status, err) }()
	req, wait, aerr := decodeAcquire(body)
	if aerr != nil {
		return 0, nil, aerr
	}
	noteAudit(ctx, req.Namespace, req.Runtime, req.Session, req.Handle)
	rt, err := s.authorize(who, req.Namespace, req.Runtime)
	if err != nil {
		return 0, nil, err
	}
	if !rt.Spec.Sandbox.Enabled {
		return 0, nil, errorf(http.StatusConflict, client.CodeDisabled, "AgentRuntime %s/%s may hold no sandbox (spec.sandbox.enabled is false)", rt.Namespace, rt.Name)
	}
	sandbox, _ := splitHandle(req.Handle)
	t, err := s.resolveSandbox(rt, sandbox)
	if err != nil {
		return 0, nil, err
	}
	base := claimname.For(rt.Name, req.Session, req.Handle)
	a := &acquisition{s: s, t: t, session: req.Session, handle: req.Handle, base: base, replacement: claimname.Replacement(base), trace: tr}
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "claim", klog.KRef(rt.Namespace, base))
	ctx = klog.NewContext(ctx, logger)

	// Watch before the first read of the cache: a change in between wakes the first wait.
	w := s.waiters.watch(rt.Namespace+"/"+a.base, rt.Namespace+"/"+a.replacement)
	defer s.waiters.unwatch(w)
	var deadline <-chan time.Time
	if wait > 0 {
		timer := s.clock.NewTimer(wait)
		defer timer.Stop()
		deadline = timer.C()
	}
	for {
		r := a.step(ctx)
		if r.done {
			return r.status, r.body, r.err
		}
		if wait == 0 {
			return a.accepted()
		}
		if s.onWait != nil {
			s.onWait()
		}
		select {
		case <-w.c:
		case <-deadline:
			return a.accepted()
		case <-ctx.Done():
			return 0, nil, errorf(http.StatusServiceUnavailable, client.CodeUnavailable, "the request ended before the claim was Bound: %v", context.Cause(ctx))
		}
	}
}

// accepted is the 202 answer: the claim is not Bound yet; call again.
func (a *acquisition) accepted() (int, any, error) {
	name := a.created // being created: the cache has not shown it yet
	if name == "" {
		name = a.base
		if c, _ := a.current(); c != nil {
			name = c.Name
		}
	}
	return http.StatusAccepted, client.AcquireResponse{Claim: name, Phase: a.phase, Reason: a.reason, Message: a.message}, nil
}

// current returns the claim that answers for the handle now, from the cache: the base claim, or
// its replacement when the base is Failed (or gone) and the replacement exists.
// It returns nil when there is none.
func (a *acquisition) current() (*airlockv1alpha1.SandboxClaim, error) {
	lister := a.s.claims.SandboxClaims(a.t.runtime.Namespace)
	get := func(name string) (*airlockv1alpha1.SandboxClaim, error) {
		c, err := lister.Get(name)
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return c, err
	}
	base, err := get(a.base)
	if err != nil {
		return nil, err
	}
	if base != nil && base.Status.Phase != airlockv1alpha1.ClaimFailed {
		return base, nil
	}
	// Failed or missing: the replacement answers, if there is one (the leader links the two with
	// the Failed claim's replacedBy after it has seen the replacement).
	repl, err := get(a.replacement)
	if err != nil || repl != nil {
		return repl, err
	}
	return base, nil // nil, or Failed and replaced while its replacement is not in the cache
}

// step looks at the claim once and acts: creates it, replaces it, or answers.
func (a *acquisition) step(ctx context.Context) stepResult {
	c, err := a.current()
	if err != nil {
		return stepResult{done: true, err: err}
	}
	if c == nil {
		if a.created == a.base || a.created == a.replacement {
			a.phase = string(airlockv1alpha1.ClaimPending)
			return stepResult{} // created; the cache has not caught up yet
		}
		c, err := a.newClaim(ctx, a.base, nil)
		if err != nil {
			return stepResult{done: true, err: err}
		}
		return a.create(ctx, c, false)
	}
	if c.Name == a.created {
		a.created = "" // seen: if it goes away from now on, it was deleted
	}
	if c.Spec.RuntimeName != a.t.runtime.Name || c.Spec.Session != a.session || c.Spec.Handle != a.handle {
		return stepResult{done: true, err: errorf(http.StatusConflict, client.CodeConflict,
			"claim %s exists for another runtime, session or handle", c.Name)}
	}
	if !admission.OwnedBy(c, a.t.runtime) {
		// A claim of an earlier runtime of this name (deleted and created again: someone else).
		// Nothing of it is answered, neither its address nor its token: garbage collection
		// deletes it, or the leader reaps it when it was orphaned; then this acquires afresh.
		a.phase, a.reason = string(airlockv1alpha1.ClaimReaping), client.ReasonPreviousRuntime
		return stepResult{}
	}
	a.trace.observe(c)
	a.phase, a.reason, a.message = string(c.Status.Phase), c.Status.Reason, ""
	if a.phase == "" {
		a.phase = string(airlockv1alpha1.ClaimPending)
	}
	if lost := meta.FindStatusCondition(c.Status.Conditions, airlockv1alpha1.ConditionPodLost); lost != nil && lost.Status == metav1.ConditionTrue {
		// Its pod cannot run (issue 24): the 202 says why, and a Bound claim's address, which
		// does not answer, is not handed out.
		a.reason, a.message = lost.Reason, lost.Message
		if c.Status.Phase == airlockv1alpha1.ClaimBound {
			return stepResult{}
		}
	}
	if ready := meta.FindStatusCondition(c.Status.Conditions, "Ready"); ready != nil && c.Status.Phase == airlockv1alpha1.ClaimBinding &&
		ready.Reason == airlockv1alpha1.ReasonWaitingForWorkspaceCollection {
		// Its directory holds another owner's kept workspace, removed first (issue 24).
		a.reason, a.message = ready.Reason, ready.Message
	}
	_, reapRequested := c.Annotations[airlockv1alpha1.AnnotationReapRequested]
	if c.DeletionTimestamp != nil || reapRequested {
		// Going away: wait until it is gone, then acquire afresh.
		if c.Status.Phase == airlockv1alpha1.ClaimBound {
			a.phase = string(airlockv1alpha1.ClaimReaping)
		}
		return stepResult{}
	}

	switch c.Status.Phase {
	case airlockv1alpha1.ClaimBound:
		return a.bound(ctx, c)
	case airlockv1alpha1.ClaimRefused:
		return stepResult{done: true, err: refusal(c.Status.Reason, "claim "+c.Name)}
	case airlockv1alpha1.ClaimFailed:
		if c.Spec.Replaces != "" {
			e := errorf(http.StatusBadGateway, client.CodeFailed, "claim %s, the replacement of the Failed claim %s, failed too: %s", c.Name, c.Spec.Replaces, c.Status.Message)
			e.reason = c.Status.Reason
			return stepResult{done: true, err: e}
		}
		if c.Name != a.base || (c.Status.ReplacedBy != "" && c.Status.ReplacedBy != a.replacement) {
			return stepResult{} // not ours to replace
		}
		if a.created == a.replacement {
			return stepResult{} // created; wait for the cache to show it
		}
		// Not replaced, or replaced but the replacement is gone: create it.
		return a.replace(ctx, c)
	}
	return stepResult{} // Pending, Queued, Binding, Reaping: wait
}

// bound answers 200 with the claim's addresses and its bearer token, derived from the operator's
// key and the claim's UID, namespace and name, as the controller derived it for the claim's
// Secret. A Bound claim's pod is Ready, so its Secret exists: the API never reads it. Without the
// key the answer is 503, never a missing or empty token.
func (a *acquisition) bound(ctx context.Context, c *airlockv1alpha1.SandboxClaim) stepResult {
	// The cache may not show a close yet: sessions/close answered by another replica (or by this
	// one) a moment ago marks the claim on the API server, and until this replica's informer has
	// the mark, the claim looks Bound here. Answering from the cache then hands out a sandbox that
	// is being reaped (seen on the real node: a re-acquire after a close got the old pod, in 7 of
	// 50 rounds). So a Bound claim is answered only when the API server agrees; otherwise this
	// waits for the claim's next event, as for any claim going away.
	//
	// A claim this very acquire created is the exception: no close of it can precede this
	// request, and the informer shows one object's changes in order, so a close written before
	// the Bound that the cache shows is in the cached object already (its annotation), and one
	// written after it is concurrent with this answer, as a close right after it would be. That
	// saves a warm acquire a round trip to the API server.
	fresh := c
	if c.UID != a.createdUID || a.createdUID == "" {
		var err error
		fresh, err = a.s.airlockClient.AirlockV1alpha1().SandboxClaims(c.Namespace).Get(ctx, c.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return stepResult{}
		}
		if err != nil {
			return stepResult{done: true, err: errorf(http.StatusServiceUnavailable, client.CodeUnavailable,
				"reading claim %s: %v; try again", c.Name, err)}
		}
	}
	if _, reapRequested := fresh.Annotations[airlockv1alpha1.AnnotationReapRequested]; fresh.UID != c.UID ||
		fresh.DeletionTimestamp != nil || reapRequested || fresh.Status.Phase != airlockv1alpha1.ClaimBound ||
		meta.IsStatusConditionTrue(fresh.Status.Conditions, airlockv1alpha1.ConditionPodLost) {
		return stepResult{}
	}
	token, err := boundToken(ctx, a.s.tokens, fresh)
	if err != nil || token == "" {
		klog.FromContext(ctx).Error(err, "Cannot derive the claim's token", "claim", klog.KObj(c))
		return stepResult{done: true, err: errorf(http.StatusServiceUnavailable, client.CodeUnavailable,
			"the operator cannot compute the sandbox's token now (its key is unavailable): try again")}
	}
	resp := client.AcquireResponse{
		Claim:     c.Name,
		Phase:     string(airlockv1alpha1.ClaimBound),
		Addresses: make([]client.Address, 0, len(c.Status.Addresses)),
		Headers:   map[string]string{"Authorization": "Bearer " + token},
		Warm:      fresh.Status.Warm != nil,
		// The runtime's idle timeout, so that a client's renewals follow it (pkg/client.Session).
		IdleTimeoutSeconds: int64(admission.IdleTimeout(a.t.runtime) / time.Second),
	}
	for _, addr := range c.Status.Addresses {
		resp.Addresses = append(resp.Addresses, client.Address{Name: addr.Name, URL: addr.URL})
	}
	if r := c.Status.ResumedWorkspace; r != nil {
		resp.ResumedWorkspace = &client.ResumedWorkspace{KeptAt: r.KeptAt.UTC(), KeptBy: r.KeptBy}
	}
	if iso := c.Status.Isolation; iso != nil && iso.Attestation != nil {
		resp.Attestation = &attestation.Attestation{Statement: iso.Attestation.Statement, Signature: iso.Attestation.Signature, KeyID: iso.Attestation.KeyID}
	}
	return stepResult{done: true, status: http.StatusOK, body: resp}
}

// create creates a claim after the fast admission check (unless admitted says it was made), and then waits for it. A claim that
// exists already (another acquire, here or on another replica, created it) is waited for too.
func (a *acquisition) create(ctx context.Context, c *airlockv1alpha1.SandboxClaim, admitted bool) stepResult {
	// The runtime may have gone while this acquire waited (its claims go with it): never create
	// a claim for a runtime that is no longer there, or is being deleted (its deletion waits for
	// its claims: docs/nothing-lost.md, "A runtime's deletion").
	rt, err := a.s.runtimes.AgentRuntimes(c.Namespace).Get(c.Spec.RuntimeName)
	switch {
	case apierrors.IsNotFound(err) || (err == nil && rt.UID != a.t.runtime.UID):
		return stepResult{done: true, err: errorf(http.StatusNotFound, client.CodeNotFound, "AgentRuntime %s/%s was deleted", c.Namespace, c.Spec.RuntimeName)}
	case err == nil && rt.DeletionTimestamp != nil:
		return stepResult{done: true, err: errorf(http.StatusNotFound, client.CodeNotFound, "AgentRuntime %s/%s is being deleted", c.Namespace, c.Spec.RuntimeName)}
	case err != nil:
		return stepResult{done: true, err: err}
	}
	if !admitted {
		if err := a.s.admit(c, nil); err != nil {
			return stepResult{done: true, err: err}
		}
	}
	made, err := a.s.airlockClient.AirlockV1alpha1().SandboxClaims(c.Namespace).Create(ctx, c, metav1.CreateOptions{FieldManager: FieldManager})
	switch {
	case err == nil:
		klog.FromContext(ctx).V(2).Info("Created claim", "created", klog.KObj(c), "replaces", c.Spec.Replaces)
		a.createdUID = made.UID
	case apierrors.IsAlreadyExists(err):
	default:
		return stepResult{done: true, err: fmt.Errorf("creating claim %s: %w", c.Name, err)}
	}
	a.created = c.Name
	a.phase, a.reason = string(airlockv1alpha1.ClaimPending), ""
	return stepResult{}
}

// newClaim is the claim this acquire creates under name (replacing replaces, when not nil), its
// workspace directory chosen (chooseWorkspace).
func (a *acquisition) newClaim(ctx context.Context, name string, replaces *airlockv1alpha1.SandboxClaim) (*airlockv1alpha1.SandboxClaim, error) {
	c := newClaim(a.t, name, a.session, a.handle, replaces)
	if tp := traceparentOf(ctx); tp != "" {
		// Metadata only: the trace the claim was acquired in, which the leader's spans of the
		// claim join. Nothing decides what the claim runs by it (docs/record.md §1).
		c.Annotations = map[string]string{airlockv1alpha1.AnnotationTraceparent: tp}
	}
	return c, a.s.chooseWorkspace(ctx, c, a.t.runtime)
}

// replace creates the one replacement of the Failed claim old (SPEC section 3). Nothing is written
// on old: whether it is replaced follows from the replacement's spec.replaces (admission.Replaced,
// for the leader and for this replica's fast check alike), and the leader writes old's
// status.replacedBy once it has seen the replacement.
func (a *acquisition) replace(ctx context.Context, old *airlockv1alpha1.SandboxClaim) stepResult {
	repl, err := a.newClaim(ctx, a.replacement, old)
	if err != nil {
		return stepResult{done: true, err: err}
	}
	if err := a.s.admit(repl, nil); err != nil {
		return stepResult{done: true, err: err}
	}
	return a.create(ctx, repl, true)
}

// boundToken is the bearer token of the Bound claim c (as the API server has it): derived from
// the claim for a claim with a pod of its own; for a claim that adopted a warm member, the
// adoption token of that member, carrying the claim's UID and its frozen tool list. A warm claim
// without a record has no tool list to give: an error, never a token that allows more.
func boundToken(ctx context.Context, tokens TokenSource, c *airlockv1alpha1.SandboxClaim) (string, error) {
	w := c.Status.Warm
	if w == nil {
		return tokens.Token(ctx, c.UID, c.Namespace, c.Name)
	}
	if c.Status.Frozen == nil || len(c.Status.Frozen.AllowedTools) == 0 {
		return "", fmt.Errorf("claim %s adopted warm member %s but has no recorded tool list", c.Name, w.Member)
	}
	tools := make([]string, len(c.Status.Frozen.AllowedTools))
	for i, t := range c.Status.Frozen.AllowedTools {
		tools[i] = string(t)
	}
	return tokens.AdoptionToken(ctx, c.Namespace, w.Member, c.UID, tools)
}
