package sandboxclass

import (
	"context"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	airlockfake "github.com/airlock-dev/airlock/pkg/generated/clientset/versioned/fake"
	airlockinformers "github.com/airlock-dev/airlock/pkg/generated/informers/externalversions"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
	"github.com/airlock-dev/airlock/pkg/sandboxpod/sandboxpodtest"
)

// syncClass runs one sync of class over a cache and a fake API server holding it, and returns the
// status written (nil when none was).
func syncClass(t *testing.T, class *airlockv1alpha1.SandboxClass) *airlockv1alpha1.SandboxClass {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	client := airlockfake.NewClientset(class)
	informers := airlockinformers.NewSharedInformerFactory(client, 0)
	c, err := newControllerWithClock(ctx, client, informers.Airlock().V1alpha1().SandboxClasses(), clocktesting.NewFakeClock(sandboxpodtest.T0))
	if err != nil {
		t.Fatal(err)
	}
	if err := informers.Airlock().V1alpha1().SandboxClasses().Informer().GetIndexer().Add(class); err != nil {
		t.Fatal(err)
	}
	writes := &recordedWrites{}
	c.classes = writes
	if err := c.sync(ctx, cache.MetaObjectToName(class)); err != nil {
		t.Fatal(err)
	}
	return writes.last
}

// recordedWrites is a classStatusControl that keeps the last status written.
type recordedWrites struct {
	last *airlockv1alpha1.SandboxClass
}

func (r *recordedWrites) UpdateStatus(_ context.Context, class *airlockv1alpha1.SandboxClass) error {
	r.last = class.DeepCopy()
	return nil
}

// TestClassValid: a class admission would accept is Valid; one whose volume takes the token's or
// a warm key's place is not, with admission's reason and message; the condition follows the
// generation; a status already right is not written again.
func TestClassValid(t *testing.T) {
	good := sandboxpodtest.Class("codegen")
	good.Generation = 3
	written := syncClass(t, good)
	if written == nil {
		t.Fatal("no status written")
	}
	cond := meta.FindStatusCondition(written.Status.Conditions, ConditionValid)
	if cond == nil || cond.Status != metav1.ConditionTrue || cond.ObservedGeneration != 3 || written.Status.ObservedGeneration != 3 {
		t.Errorf("status %+v, want Valid True at generation 3", written.Status)
	}
	if again := syncClass(t, written); again != nil {
		t.Errorf("a status already right was written again: %+v", again.Status)
	}

	bad := sandboxpodtest.Class("codegen")
	bad.Generation = 4
	bad.Spec.Volumes = append(bad.Spec.Volumes, airlockv1alpha1.SandboxVolume{Name: "x", MountPath: sandboxpod.TokenMountPath,
		Scratch: &airlockv1alpha1.ScratchVolumeSource{}})
	bad.Status = written.Status
	written = syncClass(t, bad)
	if written == nil {
		t.Fatal("no status written for the invalid class")
	}
	cond = meta.FindStatusCondition(written.Status.Conditions, ConditionValid)
	if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != ReasonInvalidClass || !strings.Contains(cond.Message, "token") {
		t.Errorf("condition %+v, want Valid False, InvalidClass, naming the token", cond)
	}
}
