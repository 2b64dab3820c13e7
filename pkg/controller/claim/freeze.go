package claim

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/airlock-dev/airlock/pkg/admission"
	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
)

// What a claim runs is frozen at admission (SPEC section 3). When the leader moves a claim to
// Binding it writes, in the same status update, status.frozen: the class and the registry entry
// as they are at that moment, every default spelled out and the tool list always explicit. From
// then on the claim's children are built and repaired from that record only; the live class and
// registry are never read for a Binding, Bound or Reaping claim, so editing or deleting them
// never changes (nor widens) a running sandbox. A replacement is a new claim, admitted and frozen
// on its own: it gets the class and entry as they are when it is admitted.

// cannotFreeze says why a claim that admission let through cannot be built: its class or its
// registry entry is missing.
type cannotFreeze struct {
	reason, message string
}

// freezeFor returns the record of claim from the class it names and the entry of its runtime's
// registry in input (the registries admission just decided over), or why there is none.
func (c *Controller) freezeFor(claim *airlockv1alpha1.SandboxClaim, input admission.Input) (*airlockv1alpha1.FrozenSandbox, *cannotFreeze, error) {
	var entry *airlockv1alpha1.RegistrySandbox
	registry := ""
	if rt := input.Runtimes[claim.Spec.RuntimeName]; rt != nil {
		registry = rt.Spec.ToolRegistryRef.Name
		if r := input.Registries[registry]; r != nil {
			entry = findEntry(r, claim.Spec.Sandbox)
		}
	}
	return c.freezeFrom(claim, registry, entry)
}

// freezeFrom returns the record of claim built from the class it names and entry.
func (c *Controller) freezeFrom(claim *airlockv1alpha1.SandboxClaim, registry string, entry *airlockv1alpha1.RegistrySandbox) (*airlockv1alpha1.FrozenSandbox, *cannotFreeze, error) {
	if entry == nil {
		return nil, &cannotFreeze{admission.ReasonUnknownSandbox, fmt.Sprintf("ToolRegistry %q has no sandbox %q", registry, claim.Spec.Sandbox)}, nil
	}
	class, err := c.classLister.Get(claim.Spec.ClassName)
	if apierrors.IsNotFound(err) {
		return nil, &cannotFreeze{ReasonClassNotFound, fmt.Sprintf(messageClassNotFound, claim.Spec.ClassName)}, nil
	}
	if err != nil {
		return nil, nil, err
	}
	if message := sandboxpod.ClassConflict(class); message != "" {
		return nil, &cannotFreeze{ReasonInvalidClass, message}, nil
	}
	record := sandboxpod.Freeze(class, entry)
	// The image of its workspace Jobs, frozen too (the admission policy holds them to it).
	record.SyncImage = c.syncImage
	if record.Egress != nil {
		// The gateway is frozen with the record: a sandbox keeps the one it was admitted with.
		gw, why := sandboxpod.FreezeGateway(c.egressGateway, c.egressGatewayService())
		if why != "" {
			return nil, &cannotFreeze{ReasonEgressUnavailable, fmt.Sprintf("SandboxClass %q: %s", class.Name, why)}, nil
		}
		record.Egress.Gateway = *gw
	}
	return record, nil, nil
}

// egressGatewayService is the gateway's Service from the allowed-Service cache, or nil.
func (c *Controller) egressGatewayService() *corev1.Service {
	if c.egressGateway == nil {
		return nil
	}
	svc, err := c.allowedServiceLister.Services(c.egressGateway.Namespace).Get(c.egressGateway.Name)
	if err != nil {
		return nil
	}
	return svc
}

func findEntry(registry *airlockv1alpha1.ToolRegistry, sandbox string) *airlockv1alpha1.RegistrySandbox {
	for i := range registry.Spec.Sandboxes {
		if registry.Spec.Sandboxes[i].Name == sandbox {
			return &registry.Spec.Sandboxes[i]
		}
	}
	return nil
}

// writeAdmitted writes Binding with the claim's frozen record, or, when the claim cannot be built
// (its class or entry is gone), Failed with the reason. It returns the claim as written.
func (c *Controller) writeAdmitted(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, record *airlockv1alpha1.FrozenSandbox, why *cannotFreeze) (*airlockv1alpha1.SandboxClaim, error) {
	now := c.clock.Now()
	updated := claim.DeepCopy()
	setCondition(&updated.Status, ConditionAdmitted, metav1.ConditionTrue, ReasonAdmitted, MessageAdmitted, now)
	if why != nil {
		setPhase(updated, airlockv1alpha1.ClaimFailed, why.reason, why.message)
		setCondition(&updated.Status, ConditionReady, metav1.ConditionFalse, why.reason, why.message, now)
		return c.updateClaimStatus(ctx, claim, updated)
	}
	setPhase(updated, airlockv1alpha1.ClaimBinding, ReasonBinding, messageBinding)
	setCondition(&updated.Status, ConditionReady, metav1.ConditionFalse, ReasonBinding, messageBinding, now)
	updated.Status.Frozen = record
	return c.updateClaimStatus(ctx, claim, updated)
}

// freezeLegacy records what a Binding claim runs when it has no record (an operator before
// status.frozen admitted it): from the class and entry as they are now, or Failed when either is
// gone. It returns the claim as written, or nil when it failed it.
func (c *Controller) freezeLegacy(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, rt *airlockv1alpha1.AgentRuntime) (*airlockv1alpha1.SandboxClaim, *time.Duration, error) {
	klog.FromContext(ctx).V(2).Info("Recording what a claim admitted without a record runs", "claim", klog.KObj(claim))
	entry, err := c.registryEntry(claim, rt)
	if err != nil {
		return nil, nil, err
	}
	registry := ""
	if rt != nil {
		registry = rt.Spec.ToolRegistryRef.Name
	}
	record, why, err := c.freezeFrom(claim, registry, entry)
	if err != nil {
		return nil, nil, err
	}
	if why != nil {
		requeue, err := c.fail(ctx, claim, rt, why.reason, why.message)
		return nil, requeue, err
	}
	updated := claim.DeepCopy()
	updated.Status.Frozen = record
	written, err := c.updateClaimStatus(ctx, claim, updated)
	return written, nil, err
}
