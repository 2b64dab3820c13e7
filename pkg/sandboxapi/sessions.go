package sandboxapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/airlock-dev/airlock/pkg/admission"
	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/claimname"
	"github.com/airlock-dev/airlock/pkg/client"
)

// eagerInstance is the instance of an eager sandbox's handle: "<sandbox>/default".
const eagerInstance = "default"

// renew pushes back the idle timeout of the Bound claim of a session and handle: 204. It writes
// status.lastUsedAt at most once per half idle timeout (renewLastUsed). 404 when the
// handle has no claim, 409 not_bound when its claim is not Bound.
func (s *Server) renew(ctx context.Context, who caller, body io.Reader) (int, any, error) {
	req, aerr := decodeRenew(body)
	if aerr != nil {
		return 0, nil, aerr
	}
	noteAudit(ctx, req.Namespace, req.Runtime, req.Session, req.Handle)
	rt, err := s.authorize(who, req.Namespace, req.Runtime)
	if err != nil {
		return 0, nil, err
	}
	base := claimname.For(rt.Name, req.Session, req.Handle)
	a := &acquisition{s: s, t: target{runtime: rt}, session: req.Session, handle: req.Handle, base: base, replacement: claimname.Replacement(base)}
	c, err := a.current()
	if err != nil {
		return 0, nil, err
	}
	if c == nil || c.Spec.Session != req.Session || c.Spec.Handle != req.Handle || !admission.OwnedBy(c, rt) {
		return 0, nil, errorf(http.StatusNotFound, client.CodeNotFound, "no claim for session %q and handle %q of AgentRuntime %s/%s", req.Session, req.Handle, rt.Namespace, rt.Name)
	}
	if c.Status.Phase != airlockv1alpha1.ClaimBound || c.DeletionTimestamp != nil {
		renewals.WithLabelValues("not_bound").Inc()
		return 0, nil, notBound(c)
	}
	written, err := renewLastUsed(ctx, s.airlockClient, c, admission.IdleTimeout(rt), s.clock.Now())
	switch {
	case errors.Is(err, errNotBound):
		renewals.WithLabelValues("not_bound").Inc()
		return 0, nil, notBound(c)
	case apierrors.IsNotFound(err):
		return 0, nil, errorf(http.StatusNotFound, client.CodeNotFound, "claim %s is gone", c.Name)
	case err != nil:
		return 0, nil, fmt.Errorf("renewing claim %s: %w", c.Name, err)
	}
	if written {
		renewals.WithLabelValues("written").Inc()
	} else {
		renewals.WithLabelValues("skipped").Inc()
	}
	return http.StatusNoContent, nil, nil
}

func notBound(c *airlockv1alpha1.SandboxClaim) *apiError {
	phase := string(c.Status.Phase)
	if c.DeletionTimestamp != nil {
		phase = "being deleted"
	} else if phase == "" {
		phase = string(airlockv1alpha1.ClaimPending)
	}
	return errorf(http.StatusConflict, client.CodeNotBound, "claim %s is %s, not Bound: acquire it again", c.Name, phase)
}

// openSession creates the claims of every eager sandbox of the runtime's registry for a session
// and answers 200 with them, without waiting for them to bind. A claim that exists is reported as
// it is; one that the fast admission check refuses is not created and is reported with phase
// Refused and the reason. Nothing is created unless every eager sandbox resolves (404).
func (s *Server) openSession(ctx context.Context, who caller, body io.Reader) (int, any, error) {
	req, aerr := decodeSession(body)
	if aerr != nil {
		return 0, nil, aerr
	}
	noteAudit(ctx, req.Namespace, req.Runtime, req.Session, "")
	rt, err := s.authorize(who, req.Namespace, req.Runtime)
	if err != nil {
		return 0, nil, err
	}
	if !rt.Spec.Sandbox.Enabled {
		return 0, nil, errorf(http.StatusConflict, client.CodeDisabled, "AgentRuntime %s/%s may hold no sandbox (spec.sandbox.enabled is false)", rt.Namespace, rt.Name)
	}
	registry, err := s.registries.ToolRegistries(rt.Namespace).Get(rt.Spec.ToolRegistryRef.Name)
	if apierrors.IsNotFound(err) {
		return 0, nil, errorf(http.StatusNotFound, client.CodeNotFound, "ToolRegistry %s/%s of AgentRuntime %s not found", rt.Namespace, rt.Spec.ToolRegistryRef.Name, rt.Name)
	}
	if err != nil {
		return 0, nil, err
	}
	var targets []target
	for _, entry := range registry.Spec.Sandboxes {
		if entry.Allocation != airlockv1alpha1.AllocationEager {
			continue
		}
		t, err := s.resolveSandbox(rt, entry.Name)
		if err != nil {
			return 0, nil, err
		}
		targets = append(targets, t)
	}

	logger := klog.FromContext(ctx)
	resp := client.SessionResponse{Claims: []client.SessionClaim{}}
	var created []*airlockv1alpha1.SandboxClaim
	for _, t := range targets {
		handle := t.entry.Name + "/" + eagerInstance
		base := claimname.For(rt.Name, req.Session, handle)
		a := &acquisition{s: s, t: t, session: req.Session, handle: handle, base: base, replacement: claimname.Replacement(base)}
		c, err := a.current()
		if err != nil {
			return 0, nil, err
		}
		if c != nil && !admission.OwnedBy(c, rt) {
			// An earlier runtime's of this name: nothing of it is reported; it goes, and a later
			// open or acquire creates this runtime's.
			resp.Claims = append(resp.Claims, client.SessionClaim{Claim: c.Name, Handle: handle, Phase: string(airlockv1alpha1.ClaimReaping), Reason: client.ReasonPreviousRuntime})
			continue
		}
		if c != nil {
			resp.Claims = append(resp.Claims, sessionClaim(c))
			continue
		}
		if c, err = a.newClaim(ctx, base, nil); err != nil {
			return 0, nil, err
		}
		if err := s.admit(c, created); err != nil {
			var apiErr *apiError
			if errors.As(err, &apiErr) && apiErr.reason != "" {
				resp.Claims = append(resp.Claims, client.SessionClaim{Handle: handle, Phase: string(airlockv1alpha1.ClaimRefused), Reason: apiErr.reason})
				continue
			}
			return 0, nil, err
		}
		_, err = s.airlockClient.AirlockV1alpha1().SandboxClaims(c.Namespace).Create(ctx, c, metav1.CreateOptions{FieldManager: FieldManager})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return 0, nil, fmt.Errorf("creating claim %s: %w", c.Name, err)
		}
		if err == nil {
			logger.V(2).Info("Created eager claim", "claim", klog.KObj(c))
		}
		p := c.DeepCopy()
		p.CreationTimestamp = metav1.NewTime(s.clock.Now())
		created = append(created, p)
		resp.Claims = append(resp.Claims, client.SessionClaim{Claim: c.Name, Handle: handle, Phase: string(airlockv1alpha1.ClaimPending)})
	}
	return http.StatusOK, resp, nil
}

func sessionClaim(c *airlockv1alpha1.SandboxClaim) client.SessionClaim {
	phase := string(c.Status.Phase)
	if phase == "" {
		phase = string(airlockv1alpha1.ClaimPending)
	}
	return client.SessionClaim{Claim: c.Name, Handle: c.Spec.Handle, Phase: phase, Reason: c.Status.Reason}
}

// closeSession asks the leader to reap every claim of a session now, with sync-back: it sets the
// reap-requested annotation on each, and answers 202 with the claims it marked. It lists the
// claims from the API server rather than the cache, so that a claim created a moment ago on
// another replica is not missed. Refused claims and claims being deleted are left alone.
func (s *Server) closeSession(ctx context.Context, who caller, body io.Reader) (int, any, error) {
	req, aerr := decodeSession(body)
	if aerr != nil {
		return 0, nil, aerr
	}
	noteAudit(ctx, req.Namespace, req.Runtime, req.Session, "")
	rt, err := s.authorize(who, req.Namespace, req.Runtime)
	if err != nil {
		return 0, nil, err
	}
	selector := labels.SelectorFromSet(labels.Set{
		airlockv1alpha1.LabelRuntime:     rt.Name,
		airlockv1alpha1.LabelSessionHash: claimname.SessionHash(req.Session),
	})
	claims := s.airlockClient.AirlockV1alpha1().SandboxClaims(rt.Namespace)
	list, err := claims.List(ctx, metav1.ListOptions{LabelSelector: selector.String()})
	if err != nil {
		return 0, nil, fmt.Errorf("listing the session's claims: %w", err)
	}
	items := list.Items
	slices.SortFunc(items, func(a, b airlockv1alpha1.SandboxClaim) int { return strings.Compare(a.Name, b.Name) })

	now := s.clock.Now().UTC().Format(time.RFC3339)
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, airlockv1alpha1.AnnotationReapRequested, now)
	resp := client.SessionResponse{Claims: []client.SessionClaim{}}
	logger := klog.FromContext(ctx)
	for i := range items {
		c := &items[i]
		if !admission.OwnedBy(c, rt) || c.Spec.Session != req.Session ||
			c.DeletionTimestamp != nil || c.Status.Phase == airlockv1alpha1.ClaimRefused {
			continue
		}
		if _, marked := c.Annotations[airlockv1alpha1.AnnotationReapRequested]; !marked {
			_, err := claims.Patch(ctx, c.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager})
			if apierrors.IsNotFound(err) {
				continue
			}
			if err != nil {
				return 0, nil, fmt.Errorf("marking claim %s for reaping: %w", c.Name, err)
			}
			logger.V(2).Info("Requested reaping of claim", "claim", klog.KObj(c))
		}
		resp.Claims = append(resp.Claims, sessionClaim(c))
	}
	return http.StatusAccepted, resp, nil
}
