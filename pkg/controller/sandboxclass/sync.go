package sandboxclass

import (
	"context"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/airlock-dev/airlock/pkg/sandboxpod"
)

// The Valid condition of a class.
const (
	ConditionValid = "Valid"
	// ReasonValid: a sandbox pod can be built from the class.
	ReasonValid = "Valid"
	// ReasonInvalidClass is admission's reason for the claims of a class that cannot be built
	// (the claim controller's ReasonInvalidClass).
	ReasonInvalidClass = "InvalidClass"
	messageValid       = "sandboxes can be built from the class"
)

// sync writes the class's Valid condition and observedGeneration when they changed.
func (c *Controller) sync(ctx context.Context, key cache.ObjectName) error {
	class, err := c.classLister.Get(key.Name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	cond := metav1.Condition{Type: ConditionValid, Status: metav1.ConditionTrue, Reason: ReasonValid,
		Message: messageValid, ObservedGeneration: class.Generation}
	if why := sandboxpod.ClassConflict(class); why != "" {
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, ReasonInvalidClass, why
	}
	updated := class.DeepCopy()
	updated.Status.ObservedGeneration = class.Generation
	cond.LastTransitionTime = metav1.NewTime(c.clock.Now())
	meta.SetStatusCondition(&updated.Status.Conditions, cond)
	if apiequality.Semantic.DeepEqual(class.Status, updated.Status) {
		return nil
	}
	err = c.classes.UpdateStatus(ctx, updated)
	if apierrors.IsNotFound(err) {
		return nil // deleted meanwhile
	}
	return err
}
